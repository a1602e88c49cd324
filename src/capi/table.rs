//! The 12 functions of the llaisys runtime table (`LlaisysRuntimeAPI`) and the static table.
//! Each is `extern "C-unwind"` so that a C++ error handler may throw through it; each body runs
//! inside `policy::run`, so no Rust panic leaves it.

use super::policy::{self, run};
use crate::ops;
use std::io::Write;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// llaisys's `llaisysStream_t`.
pub type LlaisysStream = *mut c_void;

/// llaisys's `llaisysDeviceType_t` values: this table is llaisys's runtime for
/// `LLAISYS_DEVICE_NVIDIA` (`llaisysGetRuntimeAPI(LLAISYS_DEVICE_NVIDIA)`).
pub const LLAISYS_DEVICE_CPU: c_int = 0;
/// See [`LLAISYS_DEVICE_CPU`].
pub const LLAISYS_DEVICE_NVIDIA: c_int = 1;
/// See [`LLAISYS_DEVICE_CPU`]: the number of llaisys device types.
pub const LLAISYS_DEVICE_TYPE_COUNT: c_int = 2;

/// The table, field order and signatures exactly as llaisys's `struct LlaisysRuntimeAPI`.
#[repr(C)]
pub struct LlaisysRuntimeAPI {
    /// `int get_device_count(void)`
    pub get_device_count: unsafe extern "C-unwind" fn() -> c_int,
    /// `void set_device(int)`
    pub set_device: unsafe extern "C-unwind" fn(c_int),
    /// `void device_synchronize(void)`
    pub device_synchronize: unsafe extern "C-unwind" fn(),
    /// `llaisysStream_t create_stream(void)`
    pub create_stream: unsafe extern "C-unwind" fn() -> LlaisysStream,
    /// `void destroy_stream(llaisysStream_t)`
    pub destroy_stream: unsafe extern "C-unwind" fn(LlaisysStream),
    /// `void stream_synchronize(llaisysStream_t)`
    pub stream_synchronize: unsafe extern "C-unwind" fn(LlaisysStream),
    /// `void *malloc_device(size_t)`
    pub malloc_device: unsafe extern "C-unwind" fn(usize) -> *mut c_void,
    /// `void free_device(void *)`
    pub free_device: unsafe extern "C-unwind" fn(*mut c_void),
    /// `void *malloc_host(size_t)`
    pub malloc_host: unsafe extern "C-unwind" fn(usize) -> *mut c_void,
    /// `void free_host(void *)`
    pub free_host: unsafe extern "C-unwind" fn(*mut c_void),
    /// `void memcpy_sync(void *, const void *, size_t, llaisysMemcpyKind_t)`
    pub memcpy_sync: unsafe extern "C-unwind" fn(*mut c_void, *const c_void, usize, c_int),
    /// `void memcpy_async(void *, const void *, size_t, llaisysMemcpyKind_t, llaisysStream_t)`
    pub memcpy_async:
        unsafe extern "C-unwind" fn(*mut c_void, *const c_void, usize, c_int, LlaisysStream),
}

/// The one table this crate exports.
pub static TABLE: LlaisysRuntimeAPI = LlaisysRuntimeAPI {
    get_device_count,
    set_device,
    device_synchronize,
    create_stream,
    destroy_stream,
    stream_synchronize,
    malloc_device,
    free_device,
    malloc_host,
    free_host,
    memcpy_sync,
    memcpy_async,
};

/// The reason the count is 0, as a record made on first need and reused at every call (freed
/// at unload: `release_count_reason`).
static COUNT_REASON: Mutex<Option<Arc<policy::Record>>> = Mutex::new(None);
/// Set once the reason of a broken setup was printed (once per process).
static COUNT_REASON_PRINTED: AtomicBool = AtomicBool::new(false);

fn count_reason(e: &crate::error::Error) -> Arc<policy::Record> {
    let mut kept = crate::util::sync::lock(&COUNT_REASON);
    if let Some(record) = kept.as_ref() {
        return record.clone();
    }
    let record = Arc::new(policy::Record::new("get_device_count", e));
    policy::release_at_unload(release_count_reason);
    *kept = Some(record.clone());
    drop(kept);
    // No driver or no GPU is an ordinary answer (0) on a CPU machine: silent. Anything else is
    // a broken setup: say so once, still answer 0.
    if !e.cuda_error().is_no_gpu() && !COUNT_REASON_PRINTED.swap(true, Ordering::Relaxed) {
        let _ = writeln!(
            std::io::stderr(),
            "{} (answering 0 devices; run `llaisys-nvidia doctor`)",
            record.message()
        );
    }
    record
}

/// Frees the kept reason, unless another thread holds the lock (a release never waits: it runs
/// at exit while other threads may still call, and in forked children, where a lock another
/// thread of the parent held stays locked).
fn release_count_reason() {
    let kept = match COUNT_REASON.try_lock() {
        Ok(mut g) => g.take(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().take(),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    drop(kept);
}

/// The number of CUDA devices; 0 without a driver or a GPU, silently, with the reason kept as
/// the thread's last error. The count is read once per process (CUDA fixes it at init too).
unsafe extern "C-unwind" fn get_device_count() -> c_int {
    if policy::refused_in_forked_child("get_device_count") {
        return 0;
    }
    let counted = policy::catch_panic("get_device_count", || {
        let (n, reason) = ops::device_count();
        if let Some(e) = reason {
            policy::set_last(Some(count_reason(&e)));
        }
        Ok(n)
    });
    counted.unwrap_or_else(|e| {
        policy::set_last(Some(Arc::new(policy::Record::new("get_device_count", &e))));
        0
    })
}

unsafe extern "C-unwind" fn set_device(id: c_int) {
    run("set_device", (), || ops::set_device(id))
}

unsafe extern "C-unwind" fn device_synchronize() {
    run("device_synchronize", (), ops::device_synchronize)
}

unsafe extern "C-unwind" fn create_stream() -> LlaisysStream {
    run("create_stream", null_mut(), ops::create_stream)
}

unsafe extern "C-unwind" fn destroy_stream(s: LlaisysStream) {
    if s.is_null() {
        return;
    }
    run("destroy_stream", (), || ops::destroy_stream(s))
}

unsafe extern "C-unwind" fn stream_synchronize(s: LlaisysStream) {
    run("stream_synchronize", (), || ops::stream_synchronize(s))
}

unsafe extern "C-unwind" fn malloc_device(size: usize) -> *mut c_void {
    run("malloc_device", null_mut(), || ops::malloc_device(size))
}

unsafe extern "C-unwind" fn free_device(p: *mut c_void) {
    run("free_device", (), || ops::free_device(p))
}

unsafe extern "C-unwind" fn malloc_host(size: usize) -> *mut c_void {
    run("malloc_host", null_mut(), || ops::malloc_host(size))
}

unsafe extern "C-unwind" fn free_host(p: *mut c_void) {
    run("free_host", (), || ops::free_host(p))
}

unsafe extern "C-unwind" fn memcpy_sync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
) {
    // SAFETY: `dst` and `src` are valid for `size` bytes of the memory `kind` says (the
    // header's rule for memcpy_sync).
    run("memcpy_sync", (), || unsafe {
        ops::memcpy_sync(dst, src, size, kind)
    })
}

unsafe extern "C-unwind" fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
    s: LlaisysStream,
) {
    // SAFETY: `dst` and `src` are valid for `size` bytes of the memory `kind` says until the
    // copy has run on `s` (the header's rule for memcpy_async).
    run("memcpy_async", (), || unsafe {
        ops::memcpy_async(dst, src, size, kind, s)
    })
}

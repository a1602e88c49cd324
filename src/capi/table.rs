//! The 12 functions of the llaisys runtime table (`LlaisysRuntimeAPI`) and the static table.
//! Each is `extern "C-unwind"` so that a C++ error handler may throw through it; each body runs
//! inside `policy::run`, so no Rust panic leaves it.

use super::policy::{self, run};
use super::validate;
use crate::cache;
use crate::copy::{self, MemcpyKind};
use crate::error::{CudaError, Error};
use crate::stream::Stream;
use crate::{device, raw, runtime};
use std::io::Write;
use std::os::raw::{c_int, c_void};
use std::sync::{Arc, OnceLock};

/// llaisys's `llaisysStream_t`.
pub type LlaisysStream = *mut c_void;

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

/// The device count of this process and, when it is 0 because of an error, that error.
struct Count {
    count: c_int,
    reason: Option<Arc<policy::Record>>,
}

static COUNT: OnceLock<Count> = OnceLock::new();

fn count_once() -> Count {
    match policy::catch_panic("get_device_count", runtime::device_count) {
        Ok(n) => Count {
            count: n,
            reason: None,
        },
        Err(e) => {
            let record = Arc::new(policy::Record::new("get_device_count", &e));
            // No driver or no GPU is an ordinary answer (0) on a CPU machine: silent. Anything
            // else is a broken setup: say so once, still answer 0.
            let ordinary =
                [CudaError::INSUFFICIENT_DRIVER, CudaError::NO_DEVICE].contains(&e.cuda_error());
            if !ordinary {
                let _ = writeln!(
                    std::io::stderr(),
                    "{} (answering 0 devices; run `llaisys-nvidia doctor`)",
                    record.message()
                );
            }
            Count {
                count: 0,
                reason: Some(record),
            }
        }
    }
}

/// The number of CUDA devices; 0 without a driver or a GPU, silently, with the reason kept as
/// the thread's last error. The count is read once per process (CUDA fixes it at init too).
unsafe extern "C-unwind" fn get_device_count() -> c_int {
    if policy::refused_in_forked_child("get_device_count") {
        return 0;
    }
    let c = COUNT.get_or_init(count_once);
    if let Some(reason) = &c.reason {
        policy::set_last(Some(reason.clone()));
    }
    c.count
}

unsafe extern "C-unwind" fn set_device(id: c_int) {
    run("set_device", (), || {
        device::set(id).map_err(|e| {
            let count = COUNT.get_or_init(count_once).count;
            Error::cuda(
                e.call(),
                e.cuda_error(),
                format!("device={id}, device count {count}"),
            )
        })
    })
}

unsafe extern "C-unwind" fn device_synchronize() {
    run("device_synchronize", (), device::synchronize)
}

unsafe extern "C-unwind" fn create_stream() -> LlaisysStream {
    run("create_stream", std::ptr::null_mut(), || {
        Ok(validate::adopt_stream(Stream::new()?)?.cast())
    })
}

unsafe extern "C-unwind" fn destroy_stream(s: LlaisysStream) {
    if s.is_null() {
        return;
    }
    run("destroy_stream", (), || destroy_checked(s))
}

/// destroy_stream's body, shared with llaisysNvidiaStreamDestroy: refuses streams not ours,
/// gives pinned blocks used on the stream their completion event, then destroys it. Holds the
/// host cache's stream-lifetime lock throughout, so a concurrent free_host never records an
/// event on a stream being destroyed.
pub(crate) fn destroy_checked(s: LlaisysStream) -> crate::Result<()> {
    if s.is_null() {
        return Ok(());
    }
    let _no_free_host_meanwhile = cache::host::stream_lifetime_write();
    let device = validate::stream_destroying(s.cast())?;
    let done = cache::host::stream_destroyed(s.cast(), device)
        .and_then(|()| cache::cross::stream_destroyed(s.cast()))
        .and_then(|()| {
            // SAFETY: `s` was made by create_stream and is destroyed once (checked above).
            unsafe { Stream::from_raw(s.cast()) }.destroy()
        });
    if done.is_err() {
        validate::stream_restored(s.cast(), device);
    }
    done
}

unsafe extern "C-unwind" fn stream_synchronize(s: LlaisysStream) {
    // SAFETY: header contract: `s` is NULL or a stream from create_stream.
    run("stream_synchronize", (), || {
        validate::check_stream(s.cast())?;
        // SAFETY: `s` is NULL or a live stream of create_stream (checked).
        unsafe { crate::stream::synchronize(s.cast::<raw::CUstream_st>()) }
    })
}

unsafe extern "C-unwind" fn malloc_device(size: usize) -> *mut c_void {
    run("malloc_device", std::ptr::null_mut(), || {
        validate::check_size(size)?;
        cache::device::alloc(size)
    })
}

unsafe extern "C-unwind" fn free_device(p: *mut c_void) {
    run("free_device", (), || cache::device::free(p))
}

unsafe extern "C-unwind" fn malloc_host(size: usize) -> *mut c_void {
    run("malloc_host", std::ptr::null_mut(), || {
        validate::check_size(size)?;
        cache::host::alloc(size)
    })
}

unsafe extern "C-unwind" fn free_host(p: *mut c_void) {
    run("free_host", (), || cache::host::free(p))
}

unsafe extern "C-unwind" fn memcpy_sync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
) {
    // SAFETY: header contract: the pointers are valid for `size` bytes of that kind.
    run("memcpy_sync", (), || unsafe {
        memcpy_sync_checked(dst, src, size, kind)
    })
}

unsafe extern "C-unwind" fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
    s: LlaisysStream,
) {
    // SAFETY: header contract, as memcpy_sync, until the copy has run on `s`.
    run("memcpy_async", (), || unsafe {
        memcpy_async_checked(dst, src, size, kind, s)
    })
}

/// memcpy_async's body, shared with llaisysNvidiaMemcpyAsync: checks, the copy, and the note
/// that keeps pinned blocks it reads or writes out of reuse until it has run.
///
/// # Safety
/// The pointers are valid for `size` bytes of the memory `kind` says until the copy has run.
pub(crate) unsafe fn memcpy_async_checked(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
    s: LlaisysStream,
) -> crate::Result<()> {
    let kind = MemcpyKind::from_raw(kind)?;
    let stream_device = validate::check_stream(s.cast())?;
    validate::check_copy(dst, src, size, kind)?;
    if size > 0 && cache::cross::active() {
        if matches!(kind, MemcpyKind::H2D | MemcpyKind::D2D) {
            cache::cross::before_use(dst, s.cast(), stream_device)?;
        }
        if matches!(kind, MemcpyKind::D2H | MemcpyKind::D2D) {
            cache::cross::before_use(src, s.cast(), stream_device)?;
        }
    }
    copy::copy_async(dst, src, size, kind, s.cast())?;
    if size > 0 {
        if matches!(kind, MemcpyKind::H2D | MemcpyKind::H2H) {
            cache::host::record_use(src, s.cast(), stream_device);
        }
        if matches!(kind, MemcpyKind::D2H | MemcpyKind::H2H) {
            cache::host::record_use(dst, s.cast(), stream_device);
        }
    }
    Ok(())
}

/// memcpy_sync's body, shared with llaisysNvidiaMemcpy.
///
/// # Safety
/// The pointers are valid for `size` bytes of the memory `kind` says.
pub(crate) unsafe fn memcpy_sync_checked(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
) -> crate::Result<()> {
    let kind = MemcpyKind::from_raw(kind)?;
    validate::check_copy(dst, src, size, kind)?;
    copy::copy_sync(dst, src, size, kind)
}

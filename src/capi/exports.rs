//! The exported C symbols (all prefixed `llaisysNvidia`); `csrc/llaisys_runtime.h` declares them.

use super::policy::{self, ErrorHandler, LlaisysNvidiaError};
use super::table::{LlaisysRuntimeAPI, TABLE};
use crate::cache::AllocatorStats;
use crate::error::OutOfMemory;
use std::os::raw::{c_char, c_int, c_void};

/// Returns the llaisys runtime table of this backend. Never NULL; never fails.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGetRuntimeAPI() -> *const LlaisysRuntimeAPI {
    &TABLE
}

/// Installs the process-wide error handler (NULL: the default); waits out calls of the old one.
#[no_mangle]
pub extern "C" fn llaisysNvidiaSetErrorHandler(handler: ErrorHandler, user_data: *mut c_void) {
    policy::set_handler(handler, user_data);
}

/// The default handler: prints the error's message as one line on stderr and aborts. For a
/// handler that passes on what it does not handle; `user_data` is ignored.
///
/// # Safety
/// `error` is NULL or points to a valid `llaisysNvidiaError`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llaisysNvidiaDefaultErrorHandler(
    error: *const LlaisysNvidiaError,
    _user_data: *mut c_void,
) {
    // SAFETY: as this function's `# Safety` section requires.
    let text = unsafe { error.as_ref() }.map_or(std::ptr::null(), |e| e.message);
    if text.is_null() {
        policy::abort_with(b"llaisys-nvidia: an error (no message)");
    }
    // SAFETY: a valid error's message is a NUL-terminated string alive during this call.
    policy::abort_with(unsafe { std::ffi::CStr::from_ptr(text) }.to_bytes())
}

/// Reads the installed handler and its user data (either out-pointer may be NULL).
///
/// # Safety
/// Non-NULL pointers are valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGetErrorHandler(
    handler: *mut ErrorHandler,
    user_data: *mut *mut c_void,
) {
    let (h, u) = policy::handler();
    if !handler.is_null() {
        // SAFETY: `handler` is not NULL (checked), so valid for writing (contract).
        unsafe { *handler = h };
    }
    if !user_data.is_null() {
        // SAFETY: `user_data` is not NULL (checked), so valid for writing (contract).
        unsafe { *user_data = u };
    }
}

/// The status of the calling thread's last error (0 when none).
#[no_mangle]
pub extern "C" fn llaisysNvidiaLastErrorStatus() -> c_int {
    policy::last().map_or(0, |r| r.status)
}

/// The `cudaError_t` of the calling thread's last error (0 when none, or when no CUDA call failed).
#[no_mangle]
pub extern "C" fn llaisysNvidiaLastCudaError() -> c_int {
    policy::last().map_or(0, |r| r.cuda_error)
}

/// The device of the calling thread's last error (-1 when none or unknown).
#[no_mangle]
pub extern "C" fn llaisysNvidiaLastErrorDevice() -> c_int {
    policy::last().map_or(-1, |r| r.device)
}

/// Copies the last error's message into `buf` (NUL-terminated, truncated to `len`); returns the
/// message's full length without the NUL (0 when there is no last error).
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaLastErrorMessage(buf: *mut c_char, len: usize) -> usize {
    let last = policy::last();
    let text = last.as_ref().map_or(c"", |r| r.message.as_c_str());
    // SAFETY: `buf` is NULL or valid for writing `len` bytes (this function's contract).
    unsafe { policy::copy_out(text, buf, len) }
}

/// When the calling thread's last error is a device allocation out of memory: writes its
/// figures to `*out` and returns 1. Otherwise (another error, none, NULL `out`) writes zeros
/// with `device` -1 and returns 0. Like the other last-error getters, it leaves the last error
/// as it is.
///
/// # Safety
/// `out` is NULL or valid for writing an `OutOfMemory`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaLastOutOfMemory(out: *mut OutOfMemory) -> c_int {
    if out.is_null() {
        return 0;
    }
    let figures = policy::last().and_then(|r| r.out_of_memory);
    let value = figures.unwrap_or(OutOfMemory {
        device: -1,
        ..OutOfMemory::default()
    });
    // SAFETY: `out` is not NULL, so valid for writing an `OutOfMemory` (this function's
    // contract); `write_unaligned` asks nothing of its alignment.
    unsafe { out.write_unaligned(value) };
    c_int::from(figures.is_some())
}

/// Forgets the calling thread's last error.
#[no_mangle]
pub extern "C" fn llaisysNvidiaClearLastError() {
    policy::set_last(None);
}

/// Statistics of the device allocator of `device` (-1: all devices summed) into `*out`.
///
/// # Safety
/// `out` is NULL or valid for writing an `AllocatorStats`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaDeviceMemoryStats(
    device: c_int,
    out: *mut AllocatorStats,
) -> c_int {
    // SAFETY: `out` is NULL or valid for writing (this function's contract).
    unsafe { super::api::reset(out, AllocatorStats::default()) };
    super::api::status("llaisysNvidiaDeviceMemoryStats", || {
        let s = crate::ops::memory::device_memory_stats(device)?;
        write_out(out, s)
    })
}

/// Statistics of the pinned host allocator into `*out`.
///
/// # Safety
/// `out` is NULL or valid for writing an `AllocatorStats`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaHostMemoryStats(out: *mut AllocatorStats) -> c_int {
    // SAFETY: `out` is NULL or valid for writing (this function's contract).
    unsafe { super::api::reset(out, AllocatorStats::default()) };
    super::api::status("llaisysNvidiaHostMemoryStats", || {
        write_out(out, crate::ops::memory::host_memory_stats())
    })
}

/// Returns all cached device and pinned host memory to CUDA.
#[no_mangle]
pub extern "C" fn llaisysNvidiaReleaseCachedMemory() -> c_int {
    super::api::status(
        "llaisysNvidiaReleaseCachedMemory",
        crate::ops::release_cached,
    )
}

/// Limits what the library holds on `device` to `bytes` (0: no limit).
#[no_mangle]
pub extern "C" fn llaisysNvidiaSetMemoryLimit(device: c_int, bytes: u64) -> c_int {
    super::api::status("llaisysNvidiaSetMemoryLimit", || {
        crate::ops::memory::set_memory_limit(device, bytes)
    })
}

/// Limits what the library holds on `device` to `fraction` of its memory (0: no limit).
#[no_mangle]
pub extern "C" fn llaisysNvidiaSetMemoryFraction(device: c_int, fraction: f64) -> c_int {
    super::api::status("llaisysNvidiaSetMemoryFraction", || {
        crate::ops::memory::set_memory_fraction(device, fraction)
    })
}

/// Writes the memory snapshot (docs/memory-snapshot.md) to the file `path`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemorySnapshot(path: *const c_char) -> c_int {
    super::api::status("llaisysNvidiaMemorySnapshot", || {
        if path.is_null() {
            return Err(crate::error::Error::invalid_argument(
                "path=NULL: name the file to write the memory snapshot to",
            ));
        }
        // SAFETY: not NULL, so a NUL-terminated string (this function's contract).
        let bytes = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
        use std::os::unix::ffi::OsStrExt;
        crate::ops::snapshot::write(std::path::Path::new(std::ffi::OsStr::from_bytes(bytes)))
    })
}

/// Keeps at most `bytes` of freed memory cached on `device` (`UINT64_MAX`: all, the default).
#[no_mangle]
pub extern "C" fn llaisysNvidiaSetReleaseThreshold(device: c_int, bytes: u64) -> c_int {
    super::api::status("llaisysNvidiaSetReleaseThreshold", || {
        crate::ops::memory::set_release_threshold(device, bytes)
    })
}

/// `device`'s memory limit in bytes into `*bytes` (0: none).
///
/// # Safety
/// `bytes` is NULL or valid for writing a `u64`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGetMemoryLimit(device: c_int, bytes: *mut u64) -> c_int {
    // SAFETY: `bytes` is NULL or valid for writing a `u64` (this function's contract).
    unsafe {
        super::api::status_out("llaisysNvidiaGetMemoryLimit", bytes, "bytes", 0, || {
            crate::ops::memory::memory_limit(device)
        })
    }
}

/// Resets the peak statistics of both allocators to their current use.
#[no_mangle]
pub extern "C" fn llaisysNvidiaResetPeakMemoryStats() {
    if policy::refused_in_forked_child("llaisysNvidiaResetPeakMemoryStats") {
        return;
    }
    crate::ops::memory::reset_peak_stats();
}

/// Writes the statistics to the out-parameter of the two stats functions.
fn write_out(out: *mut AllocatorStats, s: AllocatorStats) -> crate::error::Result<()> {
    // SAFETY: `out` is the stats functions' out-parameter: NULL or valid for writing an
    // `AllocatorStats` by their contract.
    unsafe { super::api::out(out, "out", s) }
}

//! Versions and status names.

use super::{out, reset, status};
use std::os::raw::{c_char, c_int};

/// The versions `llaisysNvidiaGetVersions` reports (`llaisysNvidiaVersions` in the header).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Versions {
    /// `CUDART_VERSION` of the headers this library was built against (13000 = 13.0).
    pub built_cudart: c_int,
    /// `cudaRuntimeGetVersion` of the cudart in use.
    pub runtime: c_int,
    /// `cudaDriverGetVersion` (0 without a driver).
    pub driver: c_int,
}

/// The crate version as a static NUL-terminated string (`"0.1.0"`).
#[no_mangle]
pub extern "C" fn llaisysNvidiaVersion() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Fills `*out` with the built-against, runtime and driver versions (all zero on failure).
///
/// # Safety
/// `v` is NULL or valid for writing a `Versions`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGetVersions(v: *mut Versions) -> c_int {
    // SAFETY: `v` is NULL or valid for writing (this function's contract).
    unsafe { reset(v, Versions::default()) };
    // SAFETY: `v` is NULL (refused by `out`) or valid for writing, as above.
    status("llaisysNvidiaGetVersions", || unsafe {
        let versions = Versions {
            built_cudart: crate::safe::runtime::build::cudart_version(),
            runtime: crate::safe::runtime::runtime_version()?,
            driver: crate::safe::runtime::driver_version()?,
        };
        out(v, "out", versions)
    })
}

/// Which CUDA runtime this library uses and why: its version and the report (see the header).
///
/// # Safety
/// `version` and `length` are NULL or valid for writing; `buf` is NULL or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCudartLibrary(
    version: *mut c_int,
    buf: *mut c_char,
    len: usize,
    length: *mut usize,
) -> c_int {
    // The failure values first (a refusal in a forked child included): 0, "", 0.
    // SAFETY: as this function's `# Safety` section requires.
    unsafe {
        reset(version, 0);
        reset(length, 0);
        crate::capi::policy::copy_out(c"", buf, len);
    }
    status("llaisysNvidiaCudartLibrary", || {
        let (v, text) = crate::ops::runtime_library::cudart_library();
        let c = std::ffi::CString::new(text.replace('\0', "?")).unwrap_or_default();
        // SAFETY: `buf` is NULL or valid for `len` bytes (this function's contract).
        let n = unsafe { crate::capi::policy::copy_out(&c, buf, len) };
        // SAFETY: `version` and `length` are NULL or valid for writing (this function's
        // contract); `reset` leaves NULL alone.
        unsafe {
            reset(version, v);
            reset(length, n);
        }
        Ok(())
    })
}

/// A static name for a status value (`"LLAISYS_NVIDIA_ERROR_CUDA"`), `"unknown status"` for others.
#[no_mangle]
pub extern "C" fn llaisysNvidiaStatusName(s: c_int) -> *const c_char {
    let name: &'static [u8] = match s {
        0 => b"LLAISYS_NVIDIA_SUCCESS\0",
        1 => b"LLAISYS_NVIDIA_ERROR_CUDA\0",
        2 => b"LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA\0",
        3 => b"LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT\0",
        4 => b"LLAISYS_NVIDIA_ERROR_INTERNAL\0",
        5 => b"LLAISYS_NVIDIA_ERROR_NCCL\0",
        6 => b"LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE\0",
        7 => b"LLAISYS_NVIDIA_ERROR_TIMEOUT\0",
        8 => b"LLAISYS_NVIDIA_ERROR_CAPTURE\0",
        _ => b"unknown status\0",
    };
    name.as_ptr().cast()
}

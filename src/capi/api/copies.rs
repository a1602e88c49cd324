//! Copies with a status: every kind sync and async (the table's semantics and checks), and peer
//! copies between devices.

use super::status;
use crate::capi::table;
use crate::capi::validate;
use crate::copy;
use std::os::raw::{c_int, c_void};

/// memcpy_sync with a status: returns with the copy complete.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
) -> c_int {
    // SAFETY: header contract: the pointers are valid for `size` bytes of that kind.
    status("llaisysNvidiaMemcpy", || unsafe {
        table::memcpy_sync_checked(dst, src, size, kind)
    })
}

/// memcpy_async with a status: queued on `stream` (NULL: legacy stream).
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
    stream: *mut c_void,
) -> c_int {
    // SAFETY: header contract, until the copy has run.
    status("llaisysNvidiaMemcpyAsync", || unsafe {
        table::memcpy_async_checked(dst, src, size, kind, stream)
    })
}

/// Copies `size` bytes from `src` on `src_device` to `dst` on `dst_device`; returns complete.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpyPeer(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    size: usize,
) -> c_int {
    status("llaisysNvidiaMemcpyPeer", || {
        validate::check_size(size)?;
        // SAFETY: header contract: device memory of those devices.
        unsafe {
            copy::copy_peer(
                dst,
                dst_device,
                src,
                src_device,
                size,
                std::ptr::null_mut(),
                true,
            )
        }
    })
}

/// Queues a peer copy on `stream`.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    size: usize,
    stream: *mut c_void,
) -> c_int {
    status("llaisysNvidiaMemcpyPeerAsync", || {
        validate::check_size(size)?;
        let stream_device = validate::check_stream(stream.cast())?;
        if size > 0 {
            crate::cache::cross::before_use(dst, stream.cast(), stream_device)?;
            crate::cache::cross::before_use(src, stream.cast(), stream_device)?;
        }
        // SAFETY: header contract, until the copy has run.
        unsafe { copy::copy_peer(dst, dst_device, src, src_device, size, stream.cast(), false) }
    })
}

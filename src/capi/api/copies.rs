//! Copies with a status: every kind sync and async (the table's semantics and checks), and peer
//! copies between devices.

use super::status;
use crate::ops;
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
        ops::memcpy_sync(dst, src, size, kind)
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
        ops::memcpy_async(dst, src, size, kind, stream)
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
    // SAFETY: header contract: device memory of those devices.
    status("llaisysNvidiaMemcpyPeer", || unsafe {
        ops::memcpy_peer(dst, dst_device, src, src_device, size, None)
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
    // SAFETY: header contract, until the copy has run.
    status("llaisysNvidiaMemcpyPeerAsync", || unsafe {
        ops::memcpy_peer(dst, dst_device, src, src_device, size, Some(stream))
    })
}

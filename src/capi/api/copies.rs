//! Copies with a status: every kind sync and async (the table's semantics and checks), and peer
//! copies between devices.

use super::status;
use crate::ops;
use std::os::raw::{c_int, c_void};

/// memcpy_sync with a status: returns with the copy complete.
///
/// # Safety
/// `dst` and `src` are valid for `size` bytes of the memory `kind` says.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
) -> c_int {
    // SAFETY: as this function's `# Safety` section requires.
    status("llaisysNvidiaMemcpy", || unsafe {
        ops::memcpy_sync(dst, src, size, kind)
    })
}

/// memcpy_async with a status: queued on `stream` (NULL: legacy stream).
///
/// # Safety
/// `dst` and `src` are valid for `size` bytes of the memory `kind` says until the copy has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: c_int,
    stream: *mut c_void,
) -> c_int {
    // SAFETY: as this function's `# Safety` section requires.
    status("llaisysNvidiaMemcpyAsync", || unsafe {
        ops::memcpy_async(dst, src, size, kind, stream)
    })
}

/// Copies `size` bytes from `src` on `src_device` to `dst` on `dst_device`; returns complete.
///
/// # Safety
/// `dst` and `src` are device memory of `dst_device` and `src_device`, valid for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpyPeer(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    size: usize,
) -> c_int {
    // SAFETY: as this function's `# Safety` section requires.
    status("llaisysNvidiaMemcpyPeer", || unsafe {
        ops::memcpy_peer(dst, dst_device, src, src_device, size, None)
    })
}

/// Queues a peer copy on `stream`.
///
/// # Safety
/// `dst` and `src` are device memory of `dst_device` and `src_device`, valid for `size` bytes
/// until the copy has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    size: usize,
    stream: *mut c_void,
) -> c_int {
    // SAFETY: as this function's `# Safety` section requires.
    status("llaisysNvidiaMemcpyPeerAsync", || unsafe {
        ops::memcpy_peer(dst, dst_device, src, src_device, size, Some(stream))
    })
}

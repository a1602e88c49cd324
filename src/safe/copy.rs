//! Plain cudart copies with llaisys's kind numbering: no caches, no fast path (the operations
//! layer chooses between these and the staged pageable path).

use crate::cudart::calls::{self as cudart, Detail, StreamHandle};
use crate::error::{Error, Result};
use std::os::raw::c_void;

/// llaisys's `llaisysMemcpyKind_t`; the values equal cudaMemcpyKind's HostToHost..DeviceToDevice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum MemcpyKind {
    /// Host to host.
    H2H = 0,
    /// Host to device.
    H2D = 1,
    /// Device to host.
    D2H = 2,
    /// Device to device.
    D2D = 3,
}

impl MemcpyKind {
    /// Validates a raw kind from C: only 0..=3 are kinds.
    pub fn from_raw(kind: i32) -> Result<MemcpyKind> {
        match kind {
            0 => Ok(MemcpyKind::H2H),
            1 => Ok(MemcpyKind::H2D),
            2 => Ok(MemcpyKind::D2H),
            3 => Ok(MemcpyKind::D2D),
            k => Err(Error::invalid_argument(format!(
                "kind={k} is not a llaisysMemcpyKind_t (0 H2H, 1 H2D, 2 D2H, 3 D2D)"
            ))),
        }
    }

    fn to_cuda(self) -> u32 {
        self as u32
    }
}

/// `cudaMemcpy`: returns as CUDA defines (see the README's table for what that means per kind).
///
/// # Safety
/// `dst` and `src` are valid for `size` bytes of the memory `kind` says.
pub unsafe fn memcpy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: MemcpyKind,
) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::memcpy(dst, src, size, kind.to_cuda()) }
        .detail(|| format!("dst={dst:p} src={src:p} size={size} kind={kind:?}"))
}

/// `cudaMemcpyAsync` on `stream` (NULL: the legacy default stream).
///
/// # Safety
/// As `memcpy`, until the copy has run; `stream` is NULL or a live stream.
pub unsafe fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: MemcpyKind,
    stream: StreamHandle,
) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::memcpy_async(dst, src, size, kind.to_cuda(), stream) }
        .detail(|| format!("dst={dst:p} src={src:p} size={size} kind={kind:?} stream={stream:p}"))
}

/// Copies `size` bytes from `src` on device `src_device` to `dst` on `dst_device`
/// (`cudaMemcpyPeerAsync`) on `stream`.
///
/// # Safety
/// The pointers are device memory of those devices, valid for `size` bytes until the copy has
/// run; `stream` is NULL or a live stream.
pub unsafe fn memcpy_peer_async(
    dst: *mut c_void,
    dst_device: i32,
    src: *const c_void,
    src_device: i32,
    size: usize,
    stream: StreamHandle,
) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::memcpy_peer_async(dst, dst_device, src, src_device, size, stream) }.detail(
        || {
            format!(
                "dst={dst:p}@{dst_device} src={src:p}@{src_device} size={size} stream={stream:p}"
            )
        },
    )
}

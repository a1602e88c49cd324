//! Copies between host and device memory, sync and async, with llaisys's kind numbering.

use crate::error::{CudaError, Error, Result};
use crate::pageable::{self, Direction};
use crate::raw;
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

    fn to_cuda(self) -> raw::cudaMemcpyKind {
        raw::cudaMemcpyKind(self as u32)
    }
}

fn check_pointers(dst: *mut c_void, src: *const c_void, size: usize) -> Result<()> {
    if dst.is_null() || src.is_null() {
        return Err(Error::invalid_argument(format!(
            "dst={dst:p} src={src:p} size={size}: NULL pointer with a non-zero size"
        )));
    }
    Ok(())
}

/// True when `p` is host memory the CUDA driver does not know (pageable). Pinned and device
/// memory answer false.
// cudaPointerGetAttributes only looks the address up; any value is safe to pass.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn is_pageable(p: *const c_void) -> Result<bool> {
    // SAFETY: plain data.
    let mut a: raw::cudaPointerAttributes = unsafe { std::mem::zeroed() };
    cuda!(cudaPointerGetAttributes(&mut a, p); "ptr={p:p}")?;
    Ok(a.type_ == raw::cudaMemoryType::cudaMemoryTypeUnregistered)
}

/// Copies `size` bytes and returns with the copy complete: copies that CUDA lets return early
/// (device to device, and host to device from pageable memory, which returns once the data is
/// staged) are waited for on the legacy default stream. Large copies between pageable memory and
/// the device take the staged fast path (`pageable`). Size 0 does nothing.
///
/// # Safety
/// `dst` and `src` are valid for `size` bytes of the memory `kind` says.
pub unsafe fn copy_sync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: MemcpyKind,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    check_pointers(dst, src, size)?;
    let detail = || format!("dst={dst:p} src={src:p} size={size} kind={kind:?}");
    // Host-to-device from pageable memory: staged (fast path) or waited for (cudaMemcpy may
    // return once the data is staged, before it reached the device).
    // Our own pinned blocks are known without asking the driver.
    let pageable_src =
        kind == MemcpyKind::H2D && !crate::cache::host::is_ours(src) && is_pageable(src)?;
    if let Some(direction) = staged(kind, dst, size, pageable_src)? {
        let (device, host) = match direction {
            Direction::HostToDevice => (dst, src.cast_mut()),
            Direction::DeviceToHost => (src.cast_mut(), dst),
        };
        return pageable::copy(direction, device, host, size, std::ptr::null_mut(), true);
    }
    let rc = CudaError::check(raw::cudaMemcpy(dst, src, size, kind.to_cuda()));
    if host_copy_without_device(kind, rc) {
        std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), size);
        return Ok(());
    }
    rc.map_err(|e| Error::cuda("cudaMemcpy", e, detail()))?;
    if kind == MemcpyKind::D2D || pageable_src {
        CudaError::check(raw::cudaStreamSynchronize(std::ptr::null_mut()))
            .map_err(|e| Error::cuda("cudaStreamSynchronize", e, detail()))?;
    }
    Ok(())
}

/// The staged direction when the copy should take the pageable fast path.
fn staged(
    kind: MemcpyKind,
    dst: *mut c_void,
    size: usize,
    pageable_src: bool,
) -> Result<Option<Direction>> {
    let c = pageable::config();
    if !c.enabled || size < c.min_bytes {
        return Ok(None);
    }
    Ok(match kind {
        MemcpyKind::H2D if pageable_src => Some(Direction::HostToDevice),
        MemcpyKind::D2H if pageable::wanted(dst, size)? => Some(Direction::DeviceToHost),
        _ => None,
    })
}

/// Queues a copy of `size` bytes on `stream` (NULL: the legacy default stream). Size 0 does
/// nothing.
///
/// # Safety
/// `dst` and `src` are valid for `size` bytes of the memory `kind` says until the copy has run.
pub unsafe fn copy_async(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: MemcpyKind,
    stream: raw::cudaStream_t,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    check_pointers(dst, src, size)?;
    let pageable_src = kind == MemcpyKind::H2D && pageable::wanted(src, size)?;
    if let Some(direction) = staged(kind, dst, size, pageable_src)? {
        let (device, host) = match direction {
            Direction::HostToDevice => (dst, src.cast_mut()),
            Direction::DeviceToHost => (src.cast_mut(), dst),
        };
        return pageable::copy(direction, device, host, size, stream, false);
    }
    let rc = CudaError::check(raw::cudaMemcpyAsync(dst, src, size, kind.to_cuda(), stream));
    if host_copy_without_device(kind, rc) && stream.is_null() {
        std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), size);
        return Ok(());
    }
    rc.map_err(|e| {
        Error::cuda(
            "cudaMemcpyAsync",
            e,
            format!("dst={dst:p} src={src:p} size={size} kind={kind:?} stream={stream:p}"),
        )
    })
}

/// Copies `size` bytes from `src` on device `src_device` to `dst` on `dst_device`
/// (`cudaMemcpyPeerAsync`) on `stream`; with `wait` it returns complete.
///
/// # Safety
/// The pointers are device memory of those devices, valid for `size` bytes.
pub unsafe fn copy_peer(
    dst: *mut c_void,
    dst_device: i32,
    src: *const c_void,
    src_device: i32,
    size: usize,
    stream: raw::cudaStream_t,
    wait: bool,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    check_pointers(dst, src, size)?;
    cuda!(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, size, stream);
        "dst={dst:p}@{dst_device} src={src:p}@{src_device} size={size} stream={stream:p}")?;
    if wait {
        cuda!(cudaStreamSynchronize(stream); "after cudaMemcpyPeerAsync stream={stream:p}")?;
    }
    Ok(())
}

/// H2H must work on a machine with no driver or no GPU (llaisys keeps CPU tensors there). With
/// no device, no asynchronous work can touch the buffers, so a host copy keeps CUDA's meaning.
fn host_copy_without_device(kind: MemcpyKind, rc: std::result::Result<(), CudaError>) -> bool {
    kind == MemcpyKind::H2H
        && matches!(rc, Err(e) if e == CudaError::INSUFFICIENT_DRIVER || e == CudaError::NO_DEVICE)
}

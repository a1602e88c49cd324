//! The other kinds of memory people choose between, beyond device and pinned host memory:
//! managed (unified) memory with prefetch and advice, mapped zero-copy host memory, registered
//! host memory; memset; and what a pointer is (`attributes`).

use crate::error::{Error, Result};
use crate::raw;
use std::os::raw::c_void;

/// Allocates `size` bytes of managed memory (`cudaMallocManaged`, attached globally). Refuses a
/// size larger than the current device's free memory: oversubscribing managed memory can hang
/// the GPU on some systems.
pub fn alloc_managed(size: usize) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    let (free, _) = crate::device::mem_info()?;
    if size > free {
        return Err(Error::invalid_argument(format!(
            "size={size} is more than the device's free memory ({free} bytes): managed memory is \
             never oversubscribed here"
        )));
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    cuda!(cudaMallocManaged(&mut p, size, raw::cudaMemAttachGlobal); "size={size}")?;
    Ok(p)
}

/// Frees managed or mapped memory with `cudaFree` / `cudaFreeHost`.
///
/// # Safety
/// `p` came from `alloc_managed` (managed) or `alloc_mapped` (not managed) and was not freed.
pub unsafe fn free_managed(p: *mut c_void) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    cuda!(cudaFree(p); "ptr={p:p}")
}

fn location(device: i32) -> raw::cudaMemLocation {
    raw::cudaMemLocation {
        type_: if device < 0 {
            raw::cudaMemLocationType::cudaMemLocationTypeHost
        } else {
            raw::cudaMemLocationType::cudaMemLocationTypeDevice
        },
        id: device.max(0),
    }
}

/// Prefetches managed memory to `device` (-1: the host) on stream `s`.
///
/// # Safety
/// `p` is managed memory valid for `size` bytes; `s` NULL or a live stream.
pub unsafe fn prefetch(
    p: *const c_void,
    size: usize,
    device: i32,
    s: raw::cudaStream_t,
) -> Result<()> {
    #[cfg(llaisys_cuda13)]
    let rc = raw::cudaMemPrefetchAsync(p, size, location(device), 0, s);
    #[cfg(not(llaisys_cuda13))]
    let rc = raw::cudaMemPrefetchAsync_v2(p, size, location(device), 0, s);
    crate::CudaError::check(rc).map_err(|e| {
        Error::cuda(
            "cudaMemPrefetchAsync",
            e,
            format!("ptr={p:p} size={size} device={device}"),
        )
    })
}

/// Gives CUDA advice about managed memory (`cudaMemAdvise`; `advice` is a cudaMemoryAdvise
/// value, `device` -1 for the host).
///
/// # Safety
/// `p` is managed memory valid for `size` bytes.
pub unsafe fn advise(p: *const c_void, size: usize, advice: u32, device: i32) -> Result<()> {
    let a = raw::cudaMemoryAdvise(advice);
    #[cfg(llaisys_cuda13)]
    let rc = raw::cudaMemAdvise(p, size, a, location(device));
    #[cfg(not(llaisys_cuda13))]
    let rc = raw::cudaMemAdvise_v2(p, size, a, location(device));
    crate::CudaError::check(rc).map_err(|e| {
        Error::cuda(
            "cudaMemAdvise",
            e,
            format!("ptr={p:p} size={size} advice={advice} device={device}"),
        )
    })
}

/// Allocates mapped (zero-copy) pinned host memory; returns (host pointer, device pointer).
pub fn alloc_mapped(size: usize) -> Result<(*mut c_void, *mut c_void)> {
    if size == 0 {
        return Ok((std::ptr::null_mut(), std::ptr::null_mut()));
    }
    let mut h: *mut c_void = std::ptr::null_mut();
    cuda!(cudaHostAlloc(&mut h, size, raw::cudaHostAllocMapped | raw::cudaHostAllocPortable); "size={size}")?;
    let mut d: *mut c_void = std::ptr::null_mut();
    if let Err(e) = cuda!(cudaHostGetDevicePointer(&mut d, h, 0); "ptr={h:p}") {
        // SAFETY: just allocated, not handed out.
        unsafe { raw::cudaFreeHost(h) };
        return Err(e);
    }
    Ok((h, d))
}

/// Frees memory from `alloc_mapped`.
///
/// # Safety
/// `h` is the host pointer from `alloc_mapped`, not freed.
pub unsafe fn free_mapped(h: *mut c_void) -> Result<()> {
    if h.is_null() {
        return Ok(());
    }
    cuda!(cudaFreeHost(h); "ptr={h:p}")
}

/// Page-locks existing host memory (`cudaHostRegister`, portable and mapped).
///
/// # Safety
/// `p` is valid for `size` bytes until `unregister`.
pub unsafe fn register(p: *mut c_void, size: usize) -> Result<()> {
    cuda!(cudaHostRegister(p, size, raw::cudaHostRegisterPortable | raw::cudaHostRegisterMapped); "ptr={p:p} size={size}")
}

/// Undoes `register`.
///
/// # Safety
/// `p` was registered with `register`.
pub unsafe fn unregister(p: *mut c_void) -> Result<()> {
    cuda!(cudaHostUnregister(p); "ptr={p:p}")
}

/// Sets `size` bytes at device pointer `p` to `value`; with `stream` None it returns complete
/// (waits on the legacy stream), with Some it is queued there.
///
/// # Safety
/// `p` is device-accessible memory valid for `size` bytes; the stream is NULL or live.
pub unsafe fn memset(
    p: *mut c_void,
    value: u8,
    size: usize,
    stream: Option<raw::cudaStream_t>,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    match stream {
        None => {
            cuda!(cudaMemset(p, value as i32, size); "ptr={p:p} size={size} value={value}")?;
            cuda!(cudaStreamSynchronize(std::ptr::null_mut()); "after cudaMemset ptr={p:p}")
        }
        Some(s) => {
            cuda!(cudaMemsetAsync(p, value as i32, size, s); "ptr={p:p} size={size} value={value} stream={s:p}")
        }
    }
}

/// What kind of memory a pointer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum MemoryKind {
    /// Host memory CUDA does not know (pageable).
    Unregistered = 0,
    /// Pinned or registered host memory.
    Host = 1,
    /// Device memory.
    Device = 2,
    /// Managed memory.
    Managed = 3,
}

/// A pointer's attributes (`cudaPointerGetAttributes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// The kind of memory.
    pub kind: MemoryKind,
    /// The device it belongs to (-1 for unregistered host memory).
    pub device: i32,
    /// Its address for device code (NULL when none).
    pub device_pointer: *mut c_void,
    /// Its address for host code (NULL when none).
    pub host_pointer: *mut c_void,
}

/// Reads the attributes of any address.
// cudaPointerGetAttributes only looks the address up; any value is safe to pass.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn attributes(p: *const c_void) -> Result<Attributes> {
    // SAFETY: plain data.
    let mut a: raw::cudaPointerAttributes = unsafe { std::mem::zeroed() };
    cuda!(cudaPointerGetAttributes(&mut a, p); "ptr={p:p}")?;
    let kind = match a.type_ {
        raw::cudaMemoryType::cudaMemoryTypeHost => MemoryKind::Host,
        raw::cudaMemoryType::cudaMemoryTypeDevice => MemoryKind::Device,
        raw::cudaMemoryType::cudaMemoryTypeManaged => MemoryKind::Managed,
        _ => MemoryKind::Unregistered,
    };
    Ok(Attributes {
        kind,
        device: if kind == MemoryKind::Unregistered {
            -1
        } else {
            a.device
        },
        device_pointer: a.devicePointer,
        host_pointer: a.hostPointer,
    })
}

//! The other kinds of memory people choose between, beyond device and pinned host memory:
//! managed (unified) memory with prefetch and advice, mapped zero-copy host memory, registered
//! host memory; memset.

use crate::cudart::calls::{self as cudart, Detail, StreamHandle};
use crate::error::{Error, Result};
use std::os::raw::c_void;

/// Allocates `size` bytes of managed memory (`cudaMallocManaged`, attached globally). Refuses a
/// size larger than the current device's free memory: oversubscribing managed memory can hang
/// the GPU on some systems.
pub fn alloc_managed(size: usize) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    let (free, _) = crate::safe::device::mem_info()?;
    if size > free {
        return Err(Error::invalid_argument(format!(
            "size={size} is more than the device's free memory ({free} bytes): managed memory is \
             never oversubscribed here"
        )));
    }
    cudart::malloc_managed(size).detail(|| format!("size={size}"))
}

/// Frees managed memory (`cudaFree`, as device memory).
///
/// # Safety
/// `p` came from `alloc_managed` and was not freed.
pub unsafe fn free_managed(p: *mut c_void) -> Result<()> {
    // SAFETY: `p` is NULL or memory of `alloc_managed` not yet freed (this function's
    // contract), which `free_device` takes as it takes cudaMalloc memory.
    unsafe { crate::safe::memory::free_device(p) }
}

/// Prefetches managed memory to `device` (-1: the host) on stream `s`.
///
/// # Safety
/// `p` is managed memory valid for `size` bytes; `s` NULL or a live stream.
pub unsafe fn prefetch(p: *const c_void, size: usize, device: i32, s: StreamHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::mem_prefetch_async(p, size, device, s) }
        .detail(|| format!("ptr={p:p} size={size} device={device}"))
}

/// Gives CUDA advice about managed memory (`cudaMemAdvise`; `advice` is a cudaMemoryAdvise
/// value, `device` -1 for the host).
///
/// # Safety
/// `p` is managed memory valid for `size` bytes.
pub unsafe fn advise(p: *const c_void, size: usize, advice: u32, device: i32) -> Result<()> {
    // SAFETY: `p` is managed memory valid for `size` bytes (this function's contract).
    unsafe { cudart::mem_advise(p, size, advice, device) }
        .detail(|| format!("ptr={p:p} size={size} advice={advice} device={device}"))
}

/// Allocates mapped (zero-copy) pinned host memory; returns (host pointer, device pointer).
pub fn alloc_mapped(size: usize) -> Result<(*mut c_void, *mut c_void)> {
    if size == 0 {
        return Ok((std::ptr::null_mut(), std::ptr::null_mut()));
    }
    let flags = cudart::HOST_ALLOC_MAPPED | cudart::HOST_ALLOC_PORTABLE;
    let h = cudart::host_alloc(size, flags).detail(|| format!("size={size}"))?;
    // SAFETY: `h` is mapped pinned memory just allocated.
    match unsafe { cudart::host_get_device_pointer(h) }.detail(|| format!("ptr={h:p}")) {
        Ok(d) => Ok((h, d)),
        Err(e) => {
            // SAFETY: pinned memory just allocated, not handed out, used by no work.
            let _ = unsafe { cudart::free_host(h) };
            Err(e)
        }
    }
}

/// Frees memory from `alloc_mapped` (`cudaFreeHost`, as pinned memory).
///
/// # Safety
/// `h` is the host pointer from `alloc_mapped`, not freed, which no queued work uses any more.
pub unsafe fn free_mapped(h: *mut c_void) -> Result<()> {
    // SAFETY: `h` is NULL or the host pointer of `alloc_mapped` (cudaHostAlloc), not yet freed,
    // used by no queued work (this function's contract), which `free_host` takes.
    unsafe { crate::safe::memory::free_host(h) }
}

/// Page-locks existing host memory (`cudaHostRegister`, portable and mapped).
///
/// # Safety
/// `p` is valid for `size` bytes until `unregister`.
pub unsafe fn register(p: *mut c_void, size: usize) -> Result<()> {
    // SAFETY: `p` is valid for `size` bytes until `unregister` (this function's contract).
    unsafe { cudart::host_register(p, size) }.detail(|| format!("ptr={p:p} size={size}"))
}

/// Undoes `register`.
///
/// # Safety
/// `p` was registered with `register`, and no queued work uses the range any more.
pub unsafe fn unregister(p: *mut c_void) -> Result<()> {
    // SAFETY: no queued work uses the registered range (this function's contract); cudart
    // refuses a pointer that is not registered.
    unsafe { cudart::host_unregister(p) }.detail(|| format!("ptr={p:p}"))
}

/// Sets `size` bytes at device pointer `p` to `value`; with `stream` None it returns complete
/// (waits on the legacy stream), with Some it is queued there.
///
/// # Safety
/// `p` is device-accessible memory valid for `size` bytes (with a stream: until the memset has
/// run); the stream is NULL or live.
pub unsafe fn memset(
    p: *mut c_void,
    value: u8,
    size: usize,
    stream: Option<StreamHandle>,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    match stream {
        None => {
            // SAFETY: as this function's `# Safety` section requires.
            unsafe { cudart::memset(p, value, size) }
                .detail(|| format!("ptr={p:p} size={size} value={value}"))?;
            // SAFETY: NULL is the legacy stream.
            unsafe { cudart::stream_synchronize(std::ptr::null_mut()) }
                .detail(|| format!("after cudaMemset ptr={p:p}"))
        }
        // SAFETY: `p` as above until the memset has run; `s` is NULL or a live stream (contract).
        Some(s) => unsafe { cudart::memset_async(p, value, size, s) }
            .detail(|| format!("ptr={p:p} size={size} value={value} stream={s:p}")),
    }
}

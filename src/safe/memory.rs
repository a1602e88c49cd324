//! Device memory (`cudaMalloc`) and pinned host memory (`cudaMallocHost`), as owned buffers and
//! as the raw alloc/free pairs the C layer hands out.

use crate::cudart::calls::{self as cudart, CallResult, Detail};
use crate::error::Result;
use std::os::raw::c_void;
use std::ptr::null_mut;

/// Allocates `size` bytes on the current device. Size 0 gives NULL and no error (as cudaMalloc).
pub fn alloc_device(size: usize) -> Result<*mut c_void> {
    alloc(size, cudart::malloc)
}

/// Frees memory from `alloc_device`; NULL does nothing.
///
/// # Safety
/// `p` is NULL or came from `alloc_device` (or `memory_kinds::alloc_managed`) and was not freed.
pub unsafe fn free_device(p: *mut c_void) -> Result<()> {
    // SAFETY: `p` is NULL or cudaMalloc or cudaMallocManaged memory not yet freed (this
    // function's contract); cudaFree waits for the device, so for the work that used it.
    unsafe { free(p, cudart::free) }
}

/// Allocates `size` bytes of pinned (page-locked) host memory. Size 0 gives NULL and no error.
pub fn alloc_host(size: usize) -> Result<*mut c_void> {
    alloc(size, cudart::malloc_host)
}

/// Frees memory from `alloc_host`; NULL does nothing.
///
/// # Safety
/// `p` is NULL or came from `alloc_host`, `alloc_host_portable` or `memory_kinds::alloc_mapped`
/// (its host pointer) and was not freed; no queued work uses it any more.
pub unsafe fn free_host(p: *mut c_void) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { free(p, cudart::free_host) }
}

/// `size` bytes from the cudart allocator `malloc`; size 0 gives NULL without a CUDA call.
#[track_caller]
fn alloc(size: usize, malloc: fn(usize) -> CallResult<*mut c_void>) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(null_mut());
    }
    malloc(size).detail(|| format!("size={size}"))
}

/// Gives `p` back with `cuda_free`, the cudart call of its allocator; NULL does nothing.
///
/// # Safety
/// `p` is NULL or memory of `cuda_free`'s allocator not yet freed, used by no queued work.
#[track_caller]
unsafe fn free(p: *mut c_void, cuda_free: unsafe fn(*mut c_void) -> CallResult<()>) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cuda_free(p) }.detail(|| format!("ptr={p:p}"))
}

/// Allocates `size` bytes of pinned host memory usable with every device
/// (`cudaHostAlloc(cudaHostAllocPortable)`); free it with `free_host`.
pub(crate) fn alloc_host_portable(size: usize) -> Result<*mut c_void> {
    cudart::host_alloc(size, cudart::HOST_ALLOC_PORTABLE).detail(|| format!("size={size}"))
}

/// An owned device allocation, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: *mut c_void,
    len: usize,
}

/// An owned pinned host allocation, freed on drop.
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut c_void,
    len: usize,
}

macro_rules! owned_buffer {
    ($t:ident, $alloc:ident, $free:ident) => {
        // SAFETY: the buffer is plain memory owned by this value; CUDA allows use from any thread.
        unsafe impl Send for $t {}

        impl $t {
            /// Allocates `len` bytes.
            pub fn new(len: usize) -> Result<$t> {
                Ok($t {
                    ptr: $alloc(len)?,
                    len,
                })
            }

            /// The address.
            pub fn as_ptr(&self) -> *mut c_void {
                self.ptr
            }

            /// The size in bytes.
            pub fn len(&self) -> usize {
                self.len
            }

            /// True for a zero-size buffer.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
        }

        impl Drop for $t {
            fn drop(&mut self) {
                // SAFETY: our own allocation of `$alloc`, freed once here; work queued on it has
                // run, as the unsafe call that queued it promised. Failures have nowhere to go.
                let _ = unsafe { $free(self.ptr) };
            }
        }
    };
}

owned_buffer!(DeviceBuffer, alloc_device, free_device);
owned_buffer!(PinnedBuffer, alloc_host, free_host);

impl PinnedBuffer {
    /// The buffer as bytes.
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` points to `len` bytes we own.
        unsafe { std::slice::from_raw_parts(self.ptr.cast(), self.len) }
    }

    /// The buffer as mutable bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `ptr` points to `len` bytes we own exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len) }
    }
}

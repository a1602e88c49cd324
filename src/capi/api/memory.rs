//! Memory: device and pinned host memory (the table's caches), stream-ordered allocation,
//! managed memory with prefetch and advice, mapped zero-copy host memory, registered host
//! memory, memset, and pointer attributes. Bodies in `ops::memory`.

use super::{status, status_out, status_out2};
use crate::error::Result;
use crate::ops::{self, memory as mem};
use std::os::raw::{c_int, c_uint, c_void};
use std::ptr::null_mut;

/// Pointer attributes (`llaisysNvidiaPointerAttributes` in the header).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PointerAttributes {
    /// 0 unregistered (pageable) host, 1 pinned/registered host, 2 device, 3 managed.
    pub kind: c_int,
    /// The device it belongs to, -1 for unregistered host memory.
    pub device: c_int,
    /// Its address for device code, NULL when none.
    pub device_pointer: *mut c_void,
    /// Its address for host code, NULL when none.
    pub host_pointer: *mut c_void,
    /// 1 when it lies in memory of this library's malloc_device / malloc_host.
    pub ours: c_int,
}

impl PointerAttributes {
    /// Every field zero (pointers NULL): what `llaisysNvidiaPointerGetAttributes` leaves on
    /// failure.
    pub const ZERO: PointerAttributes = PointerAttributes {
        kind: 0,
        device: 0,
        device_pointer: std::ptr::null_mut(),
        host_pointer: std::ptr::null_mut(),
        ours: 0,
    };
}

/// `alloc(size)` as a status call: `*p` is NULL on failure (a NULL `p` is refused before
/// `alloc` runs), the allocation once it worked.
///
/// # Safety
/// `p` is NULL or valid for writing a pointer.
unsafe fn allocate(
    function: &'static str,
    p: *mut *mut c_void,
    size: usize,
    alloc: impl FnOnce(usize) -> Result<*mut c_void>,
) -> c_int {
    // SAFETY: `p` is NULL or valid for writing a pointer (this function's contract).
    unsafe { status_out(function, p, "ptr", null_mut(), || alloc(size)) }
}

/// Device memory from the table's cache (as malloc_device); `*p` is NULL on failure.
///
/// # Safety
/// `p` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocDevice(p: *mut *mut c_void, size: usize) -> c_int {
    // SAFETY: `p` is NULL or valid for writing a pointer (this function's contract).
    unsafe { allocate("llaisysNvidiaMallocDevice", p, size, ops::malloc_device) }
}

/// Frees device memory of llaisysNvidiaMallocDevice / malloc_device / llaisysNvidiaMallocAsync.
#[no_mangle]
pub extern "C" fn llaisysNvidiaFreeDevice(ptr: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeDevice", || ops::free_device(ptr))
}

/// Stream-ordered allocation on `stream`.
///
/// # Safety
/// `p` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocAsync(
    p: *mut *mut c_void,
    size: usize,
    stream: *mut c_void,
) -> c_int {
    let alloc = |size| mem::malloc_async(size, stream);
    // SAFETY: `p` is NULL or valid for writing a pointer (this function's contract).
    unsafe { allocate("llaisysNvidiaMallocAsync", p, size, alloc) }
}

/// Stream-ordered free: the memory returns to the pool when `stream` reaches this point.
#[no_mangle]
pub extern "C" fn llaisysNvidiaFreeAsync(ptr: *mut c_void, stream: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeAsync", || mem::free_async(ptr, stream))
}

/// Pinned host memory from the table's cache (as malloc_host).
///
/// # Safety
/// `p` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocHost(p: *mut *mut c_void, size: usize) -> c_int {
    // SAFETY: `p` is NULL or valid for writing a pointer (this function's contract).
    unsafe { allocate("llaisysNvidiaMallocHost", p, size, ops::malloc_host) }
}

/// Frees pinned memory of llaisysNvidiaMallocHost / malloc_host.
#[no_mangle]
pub extern "C" fn llaisysNvidiaFreeHost(ptr: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeHost", || ops::free_host(ptr))
}

/// Managed (unified) memory; refused when larger than the device's free memory.
///
/// # Safety
/// `p` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocManaged(p: *mut *mut c_void, size: usize) -> c_int {
    // SAFETY: `p` is NULL or valid for writing a pointer (this function's contract).
    unsafe { allocate("llaisysNvidiaMallocManaged", p, size, mem::malloc_managed) }
}

/// Frees managed memory; a pointer that is not managed memory is refused.
#[no_mangle]
pub extern "C" fn llaisysNvidiaFreeManaged(ptr: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeManaged", || mem::free_managed(ptr))
}

/// Prefetches managed memory to `device` (-1: the host) on `stream`.
///
/// # Safety
/// `ptr` is valid for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemPrefetch(
    ptr: *const c_void,
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> c_int {
    // SAFETY: `ptr` is valid for `size` bytes (this function's contract).
    status("llaisysNvidiaMemPrefetch", || unsafe {
        mem::mem_prefetch(ptr, size, device, stream)
    })
}

/// Advice about managed memory (`advice`: a cudaMemoryAdvise value; `device` -1 for the host).
///
/// # Safety
/// `ptr` is valid for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemAdvise(
    ptr: *const c_void,
    size: usize,
    advice: c_uint,
    device: c_int,
) -> c_int {
    // SAFETY: `ptr` is valid for `size` bytes (this function's contract).
    status("llaisysNvidiaMemAdvise", || unsafe {
        mem::mem_advise(ptr, size, advice, device)
    })
}

/// Mapped zero-copy pinned host memory: `*host` for the host, `*device` for device code.
///
/// # Safety
/// `host` and `device` are each NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocMapped(
    host: *mut *mut c_void,
    device: *mut *mut c_void,
    size: usize,
) -> c_int {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe {
        status_out2(
            "llaisysNvidiaMallocMapped",
            (host, "host"),
            (device, "device"),
            (null_mut(), null_mut()),
            || mem::malloc_mapped(size),
        )
    }
}

/// Frees memory of llaisysNvidiaMallocMapped (its host pointer).
#[no_mangle]
pub extern "C" fn llaisysNvidiaFreeMapped(host: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeMapped", || mem::free_mapped(host))
}

/// Page-locks `size` bytes of host memory at `ptr` until llaisysNvidiaHostUnregister.
///
/// # Safety
/// `ptr` is valid for `size` bytes until llaisysNvidiaHostUnregister.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaHostRegister(ptr: *mut c_void, size: usize) -> c_int {
    // SAFETY: `ptr` is valid for `size` bytes until unregistered (this function's contract).
    status("llaisysNvidiaHostRegister", || unsafe {
        mem::host_register(ptr, size)
    })
}

/// Undoes llaisysNvidiaHostRegister.
///
/// # Safety
/// No queued work uses the range any more.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaHostUnregister(ptr: *mut c_void) -> c_int {
    // SAFETY: no queued work uses the range any more (this function's contract).
    status("llaisysNvidiaHostUnregister", || unsafe {
        mem::host_unregister(ptr)
    })
}

/// Sets `size` bytes at device-accessible `ptr` to `value`; returns with it done.
///
/// # Safety
/// `ptr` is device-accessible memory valid for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemset(ptr: *mut c_void, value: c_int, size: usize) -> c_int {
    // SAFETY: as this function's `# Safety` section requires.
    status("llaisysNvidiaMemset", || unsafe {
        mem::memset(ptr, value as u8, size, None)
    })
}

/// Queues a memset on `stream` (NULL: legacy stream).
///
/// # Safety
/// `ptr` is device-accessible memory valid for `size` bytes until the memset has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemsetAsync(
    ptr: *mut c_void,
    value: c_int,
    size: usize,
    stream: *mut c_void,
) -> c_int {
    // SAFETY: as this function's `# Safety` section requires.
    status("llaisysNvidiaMemsetAsync", || unsafe {
        mem::memset(ptr, value as u8, size, Some(stream))
    })
}

/// What `ptr` is (every field zero on failure).
///
/// # Safety
/// `attr` is NULL or valid for writing a `PointerAttributes`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaPointerGetAttributes(
    ptr: *const c_void,
    attr: *mut PointerAttributes,
) -> c_int {
    let attributes = || {
        let (a, ours) = mem::pointer_attributes(ptr)?;
        Ok(PointerAttributes {
            kind: a.kind as c_int,
            device: a.device,
            device_pointer: a.device_pointer,
            host_pointer: a.host_pointer,
            ours: ours as c_int,
        })
    };
    // SAFETY: `attr` is NULL or valid for writing (this function's contract).
    unsafe {
        status_out(
            "llaisysNvidiaPointerGetAttributes",
            attr,
            "attributes",
            PointerAttributes::ZERO,
            attributes,
        )
    }
}

//! Memory: device and pinned host memory (the table's caches), stream-ordered allocation,
//! managed memory with prefetch and advice, mapped zero-copy host memory, registered host
//! memory, memset, and pointer attributes.

use super::{out, status};
use crate::cache;
use crate::capi::validate;
use crate::error::Error;
use crate::memory_kinds::{self as kinds, MemoryKind};
use std::os::raw::{c_int, c_uint, c_void};

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

/// Device memory from the table's cache (as malloc_device); `*p` is NULL on failure.
///
/// # Safety
/// `p` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocDevice(p: *mut *mut c_void, size: usize) -> c_int {
    status("llaisysNvidiaMallocDevice", || {
        out(p, "ptr", std::ptr::null_mut())?;
        validate::check_size(size)?;
        out(p, "ptr", cache::device::alloc(size)?)
    })
}

/// Frees device memory of llaisysNvidiaMallocDevice / malloc_device / llaisysNvidiaMallocAsync.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaFreeDevice(ptr: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeDevice", || cache::device::free(ptr))
}

/// Stream-ordered allocation: usable by work queued on `stream` after this call (and by other
/// streams once ordered after it, e.g. with an event).
///
/// # Safety
/// `p` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocAsync(
    p: *mut *mut c_void,
    size: usize,
    stream: *mut c_void,
) -> c_int {
    status("llaisysNvidiaMallocAsync", || {
        out(p, "ptr", std::ptr::null_mut())?;
        validate::check_size(size)?;
        validate::check_stream(stream.cast())?;
        out(p, "ptr", cache::device::alloc_on(size, stream.cast())?)
    })
}

/// Stream-ordered free: the memory returns to the pool when `stream` reaches this point.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaFreeAsync(ptr: *mut c_void, stream: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeAsync", || {
        validate::check_stream(stream.cast())?;
        cache::device::free_on(ptr, stream.cast())
    })
}

/// Pinned host memory from the table's cache (as malloc_host).
///
/// # Safety
/// `p` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocHost(p: *mut *mut c_void, size: usize) -> c_int {
    status("llaisysNvidiaMallocHost", || {
        out(p, "ptr", std::ptr::null_mut())?;
        validate::check_size(size)?;
        out(p, "ptr", cache::host::alloc(size)?)
    })
}

/// Frees pinned memory of llaisysNvidiaMallocHost / malloc_host.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaFreeHost(ptr: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeHost", || cache::host::free(ptr))
}

/// Managed (unified) memory; refused when larger than the device's free memory.
///
/// # Safety
/// `p` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocManaged(p: *mut *mut c_void, size: usize) -> c_int {
    status("llaisysNvidiaMallocManaged", || {
        out(p, "ptr", std::ptr::null_mut())?;
        validate::check_size(size)?;
        out(p, "ptr", kinds::alloc_managed(size)?)
    })
}

fn expect_kind(ptr: *const c_void, want: MemoryKind, function: &str) -> crate::Result<()> {
    let a = kinds::attributes(ptr)?;
    if a.kind != want || cache::host::is_ours(ptr) {
        return Err(Error::invalid_argument(format!(
            "ptr={ptr:p} is {:?} memory, not memory of {function}; nothing was freed",
            a.kind
        )));
    }
    Ok(())
}

/// Frees managed memory; a pointer that is not managed memory is refused.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaFreeManaged(ptr: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeManaged", || {
        if ptr.is_null() {
            return Ok(());
        }
        expect_kind(ptr, MemoryKind::Managed, "llaisysNvidiaMallocManaged")?;
        // SAFETY: managed memory (checked).
        unsafe { kinds::free_managed(ptr) }
    })
}

/// Prefetches managed memory to `device` (-1: the host) on `stream`.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemPrefetch(
    ptr: *const c_void,
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> c_int {
    status("llaisysNvidiaMemPrefetch", || {
        validate::check_stream(stream.cast())?;
        expect_kind(ptr, MemoryKind::Managed, "llaisysNvidiaMallocManaged")?;
        // SAFETY: managed memory (checked); CUDA checks the range.
        unsafe { kinds::prefetch(ptr, size, device, stream.cast()) }
    })
}

/// Advice about managed memory (`advice`: a cudaMemoryAdvise value; `device` -1 for the host).
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemAdvise(
    ptr: *const c_void,
    size: usize,
    advice: c_uint,
    device: c_int,
) -> c_int {
    status("llaisysNvidiaMemAdvise", || {
        expect_kind(ptr, MemoryKind::Managed, "llaisysNvidiaMallocManaged")?;
        // SAFETY: managed memory (checked); CUDA checks the range and the advice.
        unsafe { kinds::advise(ptr, size, advice, device) }
    })
}

/// Mapped zero-copy pinned host memory: `*host` for the host, `*device` for device code.
///
/// # Safety
/// `host` and `device` are NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMallocMapped(
    host: *mut *mut c_void,
    device: *mut *mut c_void,
    size: usize,
) -> c_int {
    status("llaisysNvidiaMallocMapped", || {
        out(host, "host", std::ptr::null_mut())?;
        out(device, "device", std::ptr::null_mut())?;
        validate::check_size(size)?;
        let (h, d) = kinds::alloc_mapped(size)?;
        out(host, "host", h)?;
        out(device, "device", d)
    })
}

/// Frees memory of llaisysNvidiaMallocMapped (its host pointer).
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaFreeMapped(host: *mut c_void) -> c_int {
    status("llaisysNvidiaFreeMapped", || {
        if host.is_null() {
            return Ok(());
        }
        expect_kind(host, MemoryKind::Host, "llaisysNvidiaMallocMapped")?;
        // SAFETY: pinned host memory not of our cache (checked).
        unsafe { kinds::free_mapped(host) }
    })
}

/// Page-locks `size` bytes of existing host memory at `ptr` (usable by fast copies and mapped
/// for device code) until llaisysNvidiaHostUnregister.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaHostRegister(ptr: *mut c_void, size: usize) -> c_int {
    status("llaisysNvidiaHostRegister", || {
        validate::check_size(size)?;
        if ptr.is_null() || size == 0 {
            return Err(Error::invalid_argument(format!(
                "ptr={ptr:p} size={size}: nothing to register"
            )));
        }
        // SAFETY: the caller keeps the memory alive until unregister (header contract).
        unsafe { kinds::register(ptr, size) }
    })
}

/// Undoes llaisysNvidiaHostRegister.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaHostUnregister(ptr: *mut c_void) -> c_int {
    status("llaisysNvidiaHostUnregister", || {
        if ptr.is_null() {
            return Err(Error::invalid_argument("ptr=NULL: nothing to unregister"));
        }
        // SAFETY: CUDA refuses pointers it did not register.
        unsafe { kinds::unregister(ptr) }
    })
}

/// Sets `size` bytes at device-accessible `ptr` to `value`; returns with it done.
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemset(ptr: *mut c_void, value: c_int, size: usize) -> c_int {
    status("llaisysNvidiaMemset", || {
        validate::check_size(size)?;
        if ptr.is_null() && size > 0 {
            return Err(Error::invalid_argument(format!("ptr=NULL size={size}")));
        }
        // SAFETY: header contract: device-accessible memory of `size` bytes.
        unsafe { kinds::memset(ptr, value as u8, size, None) }
    })
}

/// Queues a memset on `stream` (NULL: legacy stream).
///
/// # Safety
/// The pointers follow the header's contract for this function.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemsetAsync(
    ptr: *mut c_void,
    value: c_int,
    size: usize,
    stream: *mut c_void,
) -> c_int {
    status("llaisysNvidiaMemsetAsync", || {
        validate::check_size(size)?;
        let stream_device = validate::check_stream(stream.cast())?;
        if ptr.is_null() && size > 0 {
            return Err(Error::invalid_argument(format!("ptr=NULL size={size}")));
        }
        if size > 0 {
            crate::cache::cross::before_use(ptr, stream.cast(), stream_device)?;
        }
        // SAFETY: as llaisysNvidiaMemset, until the memset has run.
        unsafe { kinds::memset(ptr, value as u8, size, Some(stream.cast())) }
    })
}

/// What `ptr` is: kind, device, its device and host addresses, and whether it is ours.
///
/// # Safety
/// `attr` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaPointerGetAttributes(
    ptr: *const c_void,
    attr: *mut PointerAttributes,
) -> c_int {
    status("llaisysNvidiaPointerGetAttributes", || {
        if attr.is_null() {
            return out(attr, "attributes", std::mem::zeroed());
        }
        let a = kinds::attributes(ptr)?;
        let ours = cache::host::is_ours(ptr) || cache::device::size_of(ptr).is_some();
        out(
            attr,
            "attributes",
            PointerAttributes {
                kind: a.kind as c_int,
                device: a.device,
                device_pointer: a.device_pointer,
                host_pointer: a.host_pointer,
                ours: ours as c_int,
            },
        )
    })
}

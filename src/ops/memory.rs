//! Memory: what malloc_device, free_device, malloc_host and free_host do (the caches), and the
//! status API's stream-ordered, managed, mapped and registered memory, memset, pointer
//! attributes, statistics and cache release.

use super::copies::{locate, Place};
use super::validate;
use super::Redetail;
use crate::cache::{self, AllocatorStats};
use crate::error::{CudaError, Error, Result};
use crate::safe::memory_kinds as kinds;
use crate::safe::pointer::{self, MemoryKind};
use std::os::raw::c_void;

/// Runs an allocation; out of memory releases every cache and tries once more. A device whose
/// stream captures keeps its cached memory (and so do the pinned caches), the others are
/// released, and the allocation is tried again all the same.
fn retry_oom<T>(note: fn(), alloc: impl Fn() -> Result<T>) -> Result<T> {
    match alloc() {
        Err(e) if e.cuda_error() == CudaError::MEMORY_ALLOCATION => {
            note();
            let released = match release_cached() {
                Ok(()) => "after releasing all cached memory",
                Err(r) if r.kind() == crate::error::ErrorKind::Capture => {
                    "after releasing the cached memory that no capture in progress holds back"
                }
                Err(r) => return Err(r),
            };
            alloc().redetail(|e| format!("{}, {released}", e.detail()))
        }
        r => r,
    }
}

/// A device allocation's failure: out of memory (after `retry_oom`) with its report.
fn with_report<T>(size: usize, r: Result<T>) -> Result<T> {
    r.map_err(|e| {
        if e.cuda_error() == CudaError::MEMORY_ALLOCATION {
            super::oom::report(e, size)
        } else {
            e
        }
    })
}

/// malloc_device: `size` bytes on the current device from the device cache, in the order of
/// the legacy stream. Size 0 gives NULL. Out of memory, after the caches are released and the
/// allocation tried again, is reported with the device's figures (`ops::oom`).
pub fn malloc_device(size: usize) -> Result<*mut c_void> {
    validate::check_size(size)?;
    with_report(
        size,
        retry_oom(cache::device::note_oom_retry, || cache::device::alloc(size)),
    )
}

/// free_device: NULL does nothing; a pointer we did not hand out is refused, nothing freed.
pub fn free_device(p: *mut c_void) -> Result<()> {
    cache::device::free_within_threshold(p)
}

/// Stream-ordered allocation on `stream` (NULL: legacy stream).
pub fn malloc_async(size: usize, stream: *mut c_void) -> Result<*mut c_void> {
    validate::check_size(size)?;
    validate::check_stream(stream.cast())?;
    let r = retry_oom(cache::device::note_oom_retry, || {
        // SAFETY: NULL or a live stream of ours (checked).
        unsafe { cache::device::alloc_on(size, stream.cast()) }
    });
    with_report(size, r)
}

/// Stream-ordered free on `stream`.
// `p` reaches CUDA only after it was found in the device cache's table of live allocations.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn free_async(p: *mut c_void, stream: *mut c_void) -> Result<()> {
    validate::check_stream(stream.cast())?;
    // SAFETY: NULL or a live stream of ours (checked).
    unsafe { cache::device::free_on(p, stream.cast()) }
}

/// malloc_host: `size` bytes of pinned memory from the host cache. Size 0 gives NULL.
pub fn malloc_host(size: usize) -> Result<*mut c_void> {
    validate::check_size(size)?;
    retry_oom(cache::host::note_oom_retry, || cache::host::alloc(size))
}

/// free_host: NULL does nothing; a pointer we did not hand out is refused, nothing freed.
pub fn free_host(p: *mut c_void) -> Result<()> {
    cache::host::free(p)
}

/// Refuses `ptr` unless it is memory of kind `want` that is not our pinned cache's.
fn expect_kind(ptr: *const c_void, want: MemoryKind, function: &str) -> Result<()> {
    let a = pointer::attributes(ptr)?;
    if a.kind != want || cache::host::is_ours(ptr) {
        return Err(Error::invalid_argument(format!(
            "ptr={ptr:p} is {:?} memory, not memory of {function}; nothing was freed",
            a.kind
        )));
    }
    Ok(())
}

/// Managed memory; refused when larger than the device's free memory.
pub fn malloc_managed(size: usize) -> Result<*mut c_void> {
    validate::check_size(size)?;
    kinds::alloc_managed(size)
}

/// Frees managed memory; other memory is refused.
// `ptr` reaches cudaFree only once CUDA said it is managed memory; cudaFree refuses memory it
// does not know (a second free included).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn free_managed(ptr: *mut c_void) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    expect_kind(ptr, MemoryKind::Managed, "llaisysNvidiaMallocManaged")?;
    // SAFETY: managed memory (checked).
    unsafe { kinds::free_managed(ptr) }
}

/// Prefetches managed memory to `device` (-1: the host) on `stream`.
///
/// # Safety
/// `ptr` is valid for `size` bytes (CUDA checks the range against the allocation).
pub unsafe fn mem_prefetch(
    ptr: *const c_void,
    size: usize,
    device: i32,
    stream: *mut c_void,
) -> Result<()> {
    validate::check_stream(stream.cast())?;
    expect_kind(ptr, MemoryKind::Managed, "llaisysNvidiaMallocManaged")?;
    // SAFETY: managed memory (checked) as the contract says; `stream` NULL or ours (checked).
    unsafe { kinds::prefetch(ptr, size, device, stream.cast()) }
}

/// Advice about managed memory.
///
/// # Safety
/// As `mem_prefetch`.
pub unsafe fn mem_advise(ptr: *const c_void, size: usize, advice: u32, device: i32) -> Result<()> {
    expect_kind(ptr, MemoryKind::Managed, "llaisysNvidiaMallocManaged")?;
    // SAFETY: managed memory (checked) valid for `size` bytes (this function's contract).
    unsafe { kinds::advise(ptr, size, advice, device) }
}

/// Mapped zero-copy pinned memory: (host pointer, device pointer).
pub fn malloc_mapped(size: usize) -> Result<(*mut c_void, *mut c_void)> {
    validate::check_size(size)?;
    kinds::alloc_mapped(size)
}

/// Frees memory of `malloc_mapped` (its host pointer); other memory is refused.
// `host` reaches cudaFreeHost only once CUDA said it is pinned memory not of our cache;
// cudaFreeHost refuses memory it does not know.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn free_mapped(host: *mut c_void) -> Result<()> {
    if host.is_null() {
        return Ok(());
    }
    expect_kind(host, MemoryKind::Host, "llaisysNvidiaMallocMapped")?;
    // SAFETY: pinned host memory not of our cache (checked; cudaFreeHost refuses memory it
    // does not know); as with cudaFreeHost, the host has finished the work that uses it.
    unsafe { kinds::free_mapped(host) }
}

/// Page-locks `size` bytes at `ptr`.
///
/// # Safety
/// `ptr` is valid for `size` bytes until `host_unregister`.
pub unsafe fn host_register(ptr: *mut c_void, size: usize) -> Result<()> {
    validate::check_size(size)?;
    if ptr.is_null() || size == 0 {
        return Err(Error::invalid_argument(format!(
            "ptr={ptr:p} size={size}: nothing to register"
        )));
    }
    // SAFETY: `ptr` is valid for `size` bytes until `host_unregister` (this function's contract).
    unsafe { kinds::register(ptr, size) }
}

/// Undoes `host_register`.
///
/// # Safety
/// No queued work uses the range any more.
pub unsafe fn host_unregister(ptr: *mut c_void) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::invalid_argument("ptr=NULL: nothing to unregister"));
    }
    // SAFETY: no queued work uses the range (contract); CUDA refuses pointers it did not register.
    unsafe { kinds::unregister(ptr) }
}

/// Sets `size` bytes at `ptr` to `value`, complete on return (`stream` None) or queued on it.
///
/// # Safety
/// `ptr` is device-accessible memory valid for `size` bytes (until the memset has run).
pub unsafe fn memset(
    ptr: *mut c_void,
    value: u8,
    size: usize,
    stream: Option<*mut c_void>,
) -> Result<()> {
    validate::check_size(size)?;
    let stream_device = match stream {
        Some(s) => Some(validate::check_stream(s.cast())?),
        None => None,
    };
    if ptr.is_null() && size > 0 {
        return Err(Error::invalid_argument(format!("ptr=NULL size={size}")));
    }
    if size > 0 && stream.is_none() {
        super::capturing::refuse_waits_while_capturing(
            "cudaMemset",
            "a memset without a stream returns once it is done; give it the capturing stream to \
             make it part of the graph",
        )?;
    }
    let on_legacy = size > 0 && stream.is_none_or(|s| s.is_null());
    let _legacy = crate::cache::legacy_stream::permit(
        on_legacy,
        "cudaMemset",
        "a memset on the legacy stream",
    )?;
    if let (Some(s), Some(stream_device)) = (stream, stream_device) {
        if size > 0 && cache::cross::active() {
            if let Place::Device(d) = locate(ptr)? {
                cache::cross::before_use(d, s.cast(), stream_device)?;
            }
        }
    }
    // SAFETY: `ptr` as the contract says; the stream is NULL or a live stream of ours (checked).
    unsafe { kinds::memset(ptr, value, size, stream.map(|s| s.cast())) }
}

/// What `ptr` is, and whether it lies in memory of malloc_device / malloc_host.
pub fn pointer_attributes(ptr: *const c_void) -> Result<(pointer::Attributes, bool)> {
    let a = pointer::attributes(ptr)?;
    let ours = cache::host::is_ours(ptr) || cache::device::size_of(ptr).is_some();
    Ok((a, ours))
}

/// Statistics of the device allocator of `device` (-1: all devices summed).
pub fn device_memory_stats(device: i32) -> Result<AllocatorStats> {
    cache::device::stats(device)
}

/// `device` when it is one of this process's devices; else why not.
fn a_device(device: i32) -> Result<i32> {
    let n = super::device::device_count_checked()?;
    if !(0..n).contains(&device) {
        return Err(Error::invalid_argument(format!(
            "device={device}: not a device (device count {n})"
        )));
    }
    Ok(device)
}

/// Limits what the library holds on `device` (in use and cached) to `bytes`; 0 lifts the limit
/// (`LLAISYS_NVIDIA_MEMORY_LIMIT`'s too). Cached memory beyond it is given back at once; an
/// allocation that would pass it, after the cached memory was released, is out of memory.
pub fn set_memory_limit(device: i32, bytes: u64) -> Result<()> {
    let limit = (bytes > 0).then_some(cache::limit::Limit::Bytes(bytes));
    cache::device::set_limit(a_device(device)?, limit)
}

/// As [`set_memory_limit`], as a fraction (above 0, at most 1) of the device's memory; 0 lifts
/// the limit.
pub fn set_memory_fraction(device: i32, fraction: f64) -> Result<()> {
    let limit = (fraction != 0.0).then_some(cache::limit::Limit::Fraction(fraction));
    cache::device::set_limit(a_device(device)?, limit)
}

/// Keeps at most `bytes` of freed memory cached on `device` (`u64::MAX`: all of it, the
/// default); what passes it goes back to CUDA now and at each later free or synchronize.
pub fn set_release_threshold(device: i32, bytes: u64) -> Result<()> {
    let keep = (bytes != u64::MAX).then_some(bytes);
    cache::device::set_threshold(a_device(device)?, keep)
}

/// `device`'s memory limit in bytes, 0 when it has none.
pub fn memory_limit(device: i32) -> Result<u64> {
    let device = a_device(device)?;
    let total = cache::device::total_memory(device)? as u64;
    Ok(cache::limit::bytes(device, total).unwrap_or(0))
}

/// Statistics of the pinned host allocator.
pub fn host_memory_stats() -> AllocatorStats {
    cache::host::stats()
}

/// Returns every cache's unused memory to CUDA: device pools of every device, pinned blocks,
/// and the pinned staging buffers of the pageable fast path.
pub fn release_cached() -> Result<()> {
    // Freeing waits for the device (cudaFree, cudaFreeHost, the legacy stream): nothing on a
    // thread capturing through the library; a device in use whose stream captures keeps its
    // cached memory (the other devices' is released), and then so do the pinned caches, whose
    // frees wait for every device.
    let why = "releasing cached memory (it waits for the device)";
    let refused = || cache::legacy_stream::refused("cudaFree", why);
    if cache::graph_pool::current().is_some() {
        return Err(refused());
    }
    let devices = cache::device::release_cached();
    if devices
        .as_ref()
        .is_err_and(|e| e.kind() == crate::error::ErrorKind::Capture)
    {
        return devices;
    }
    if crate::cache::legacy_stream::usable_current()?.is_none() {
        return Err(refused());
    }
    devices?;
    cache::host::release_cached()?;
    crate::pageable::release_staging()
}

/// Resets the peak statistics of both allocators to their current use.
pub fn reset_peak_stats() {
    cache::device::reset_peak();
    cache::host::reset_peak();
}

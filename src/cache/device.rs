//! Device memory behind malloc_device/free_device: a CUDA memory pool per device (release
//! threshold at the maximum, so freed memory stays cached), allocated with
//! `cudaMallocFromPoolAsync` and freed with `cudaFreeAsync` on the legacy default stream.
//!
//! Why that is safe: an operation on the legacy stream waits for all work queued before it on
//! the legacy stream and on every blocking stream of the device (create_stream makes blocking
//! streams), and later work on those streams waits for it. A freed block therefore returns to
//! the pool only after the work that could use it, and a new allocation is ordered after that.
//! Unlike cudaFree, nothing blocks the host. Work on non-blocking streams the host made itself
//! is not ordered with the legacy stream: the host must synchronize it before free_device.
//!
//! Every live pointer is recorded (size, device), so freeing a pointer we never handed out, or
//! twice, is refused with a clear error instead of undefined behaviour.

use super::{switch_on, AllocatorStats, Counters};
use crate::error::{CudaError, Error, Result};
use crate::raw;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// Devices supported by the per-device tables.
const MAX_DEVICES: usize = 64;
const SHARDS: usize = 16;

#[derive(Clone, Copy)]
struct Live {
    size: usize,
    device: i32,
}

struct Pool(raw::cudaMemPool_t);
// SAFETY: a memory pool handle may be used from any thread.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

static LIVE: [Mutex<Option<HashMap<usize, Live>>>; SHARDS] = [const { Mutex::new(None) }; SHARDS];
static POOLS: [OnceLock<Option<Pool>>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];
static COUNTERS: [Counters; MAX_DEVICES] = [const { Counters::new() }; MAX_DEVICES];
static RESERVED_SEEN: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
/// Bytes freed into each pool and not yet handed out again, as far as we can tell: while it
/// covers a request, the allocation is counted as a hit without asking the pool (saves a driver
/// call on the fast path); otherwise the pool's reserved size tells.
static FREED_EST: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

fn cache_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| switch_on("LLAISYS_NVIDIA_DEVICE_CACHE"))
}

fn shard(p: usize) -> &'static Mutex<Option<HashMap<usize, Live>>> {
    &LIVE[(p >> 8) % SHARDS]
}

fn device_index(device: i32) -> Result<usize> {
    usize::try_from(device)
        .ok()
        .filter(|&d| d < MAX_DEVICES)
        .ok_or_else(|| Error::internal(format!("device {device} outside 0..{MAX_DEVICES}")))
}

/// The pool of `device` (made on first use), or None where pools are unsupported or switched off.
fn pool(device: i32) -> Result<Option<raw::cudaMemPool_t>> {
    if !cache_on() {
        super::cross::device_seen(device)?;
        return Ok(None);
    }
    let slot = &POOLS[device_index(device)?];
    if let Some(p) = slot.get() {
        return Ok(p.as_ref().map(|p| p.0));
    }
    super::cross::device_seen(device)?;
    // Made under the grant lock, so that a device coming into use meanwhile is not missed.
    let _grants = GRANTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = slot.get() {
        return Ok(p.as_ref().map(|p| p.0));
    }
    let made = make_pool(device)?;
    if let Some(pool) = &made {
        let seen = super::cross::seen();
        for peer in (0..MAX_DEVICES as i32).filter(|&p| p != device && seen & (1 << p) != 0) {
            if let Err(e) = grant(pool.0, device, peer) {
                // SAFETY: our pool, never used; made again at the next allocation.
                unsafe { raw::cudaMemPoolDestroy(pool.0) };
                return Err(e);
            }
        }
    }
    Ok(slot.get_or_init(|| made).as_ref().map(|p| p.0))
}

/// Held while pools are made and while a device coming into use is given access to them.
static GRANTS: Mutex<()> = Mutex::new(());

/// Lets device `peer` read and write memory of `pool` (of `owner`) where the hardware allows:
/// memory of a pool, unlike that of cudaMalloc, is reachable from another device (a kernel there,
/// a cudaMemcpy between the devices) only once the pool grants it access.
fn grant(pool: raw::cudaMemPool_t, owner: i32, peer: i32) -> Result<()> {
    if !crate::device::can_access_peer(peer, owner)? {
        return Ok(());
    }
    // SAFETY: plain data.
    let mut desc: raw::cudaMemAccessDesc = unsafe { std::mem::zeroed() };
    desc.location.type_ = raw::cudaMemLocationType::cudaMemLocationTypeDevice;
    desc.location.id = peer;
    desc.flags = raw::cudaMemAccessFlags::cudaMemAccessFlagsProtReadWrite;
    cuda!(cudaMemPoolSetAccess(pool, &desc, 1); "pool of device {owner}, access for device {peer}")
}

/// Called when `device` comes into use (`mark` records it, once every grant has worked): the
/// pools of the devices already in use let it access their memory, as
/// cudaMalloc memory would be.
pub(super) fn device_seen(device: i32, mark: impl FnOnce() -> u64) -> Result<()> {
    let _grants = GRANTS.lock().unwrap_or_else(|e| e.into_inner());
    if super::cross::seen() & (1 << device) != 0 {
        return Ok(());
    }
    for (owner, slot) in POOLS.iter().enumerate() {
        if let Some(Some(pool)) = slot.get() {
            if owner as i32 != device {
                grant(pool.0, owner as i32, device)?;
            }
        }
    }
    mark();
    Ok(())
}

fn make_pool(device: i32) -> Result<Option<Pool>> {
    let mut supported: c_int = 0;
    cuda!(cudaDeviceGetAttribute(
        &mut supported,
        raw::cudaDeviceAttr::cudaDevAttrMemoryPoolsSupported,
        device
    ); "device={device}")?;
    if supported == 0 {
        return Ok(None);
    }
    // SAFETY: plain data; zero is the documented default for the fields we do not set.
    let mut props: raw::cudaMemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = raw::cudaMemAllocationType::cudaMemAllocationTypePinned;
    props.handleTypes = raw::cudaMemAllocationHandleType::cudaMemHandleTypeNone;
    props.location.type_ = raw::cudaMemLocationType::cudaMemLocationTypeDevice;
    props.location.id = device;
    let mut pool: raw::cudaMemPool_t = std::ptr::null_mut();
    cuda!(cudaMemPoolCreate(&mut pool, &props); "device={device}")?;
    let mut threshold: u64 = u64::MAX;
    cuda!(cudaMemPoolSetAttribute(
        pool,
        raw::cudaMemPoolAttr::cudaMemPoolAttrReleaseThreshold,
        (&mut threshold as *mut u64).cast()
    ); "device={device}")?;
    Ok(Some(Pool(pool)))
}

fn reserved(pool: raw::cudaMemPool_t) -> u64 {
    let mut v: u64 = 0;
    // SAFETY: the attribute is a u64; `pool` is live for the process.
    let rc = unsafe {
        raw::cudaMemPoolGetAttribute(
            pool,
            raw::cudaMemPoolAttr::cudaMemPoolAttrReservedMemCurrent,
            (&mut v as *mut u64).cast(),
        )
    };
    if CudaError::from_raw(rc).is_success() {
        v
    } else {
        0
    }
}

/// One attempt: the pool (stream-ordered on the legacy stream) or plain cudaMalloc.
fn try_alloc(
    size: usize,
    device: i32,
    pool: Option<raw::cudaMemPool_t>,
    stream: raw::cudaStream_t,
) -> Result<(*mut c_void, bool)> {
    let mut p: *mut c_void = std::ptr::null_mut();
    match pool {
        Some(pool) => {
            cuda!(cudaMallocFromPoolAsync(&mut p, size, pool, stream); "size={size} stream={stream:p}")?;
            let d = device_index(device)?;
            let covered = FREED_EST[d]
                .fetch_update(Relaxed, Relaxed, |v| v.checked_sub(size as u64))
                .is_ok();
            if covered {
                return Ok((p, true));
            }
            let now = reserved(pool);
            let hit = now <= RESERVED_SEEN[d].load(Relaxed);
            RESERVED_SEEN[d].fetch_max(now, Relaxed);
            Ok((p, hit))
        }
        None => {
            cuda!(cudaMalloc(&mut p, size); "size={size}")?;
            Ok((p, false))
        }
    }
}

/// Allocates `size` bytes on the current device, in the order of the legacy default stream.
/// Size 0 gives NULL and no error. Out of memory releases every cache and retries once.
pub fn alloc(size: usize) -> Result<*mut c_void> {
    alloc_on(size, std::ptr::null_mut())
}

/// Allocates in the order of `stream` (stream-ordered allocation: usable by work queued on
/// `stream` after this call, by other streams once they are ordered after it).
pub fn alloc_on(size: usize, stream: raw::cudaStream_t) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    let device = crate::device::current()
        .map_err(|e| Error::cuda(e.call(), e.cuda_error(), format!("size={size}")))?;
    let pool = pool(device)?;
    let (p, hit) = match try_alloc(size, device, pool, stream) {
        Ok(r) => r,
        Err(e) if e.cuda_error() == CudaError::MEMORY_ALLOCATION => {
            COUNTERS[device_index(device)?].oom_retry();
            super::release_cached()?;
            try_alloc(size, device, pool, stream).map_err(|e| {
                Error::cuda(
                    e.call(),
                    e.cuda_error(),
                    format!("{}, after releasing all cached memory", e.detail()),
                )
            })?
        }
        Err(e) => return Err(e),
    };
    shard(p as usize)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(p as usize, Live { size, device });
    COUNTERS[device_index(device)?].allocated(size, hit);
    if stream.is_null() && pool.is_some() {
        if let Err(e) = super::cross::order_after_alloc(device) {
            // Not handed out: the caller could not know when its streams may use it.
            let _ = free_on(p, stream);
            return Err(e);
        }
    }
    Ok(p)
}

/// Frees a pointer from `alloc`; NULL does nothing. A pointer we did not hand out (or already
/// freed) is refused and nothing is freed.
// `p` reaches CUDA only after it was found in our table of live allocations.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn free(p: *mut c_void) -> Result<()> {
    free_on(p, std::ptr::null_mut())
}

/// Frees a pointer from `alloc`/`alloc_on` in the order of `stream`: the memory returns to the
/// pool when `stream` reaches the free.
// `p` reaches CUDA only after it was found in our table of live allocations.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn free_on(p: *mut c_void, stream: raw::cudaStream_t) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    let live = shard(p as usize)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(|m| m.remove(&(p as usize)));
    let Some(live) = live else {
        return Err(Error::invalid_argument(format!(
            "ptr={p:p} was not returned by malloc_device, or was already freed (a device \
             pointer from malloc_host or elsewhere, or a double free); nothing was freed"
        )));
    };
    let result = release(p, live, stream);
    if result.is_err() {
        // Keep it recorded: the memory was not freed.
        shard(p as usize)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(p as usize, live);
    } else {
        let d = device_index(live.device)?;
        COUNTERS[d].freed(live.size);
        FREED_EST[d].fetch_add(live.size as u64, Relaxed);
    }
    result
}

fn release(p: *mut c_void, live: Live, stream: raw::cudaStream_t) -> Result<()> {
    let pooled = POOLS[device_index(live.device)?]
        .get()
        .is_some_and(|p| p.is_some());
    // The free goes on the given stream (NULL: the legacy stream of the block's device, after
    // the work of streams of other devices that used the device's memory).
    crate::device::with(live.device, || {
        if stream.is_null() {
            super::cross::order_before_free(live.device)?;
        }
        if pooled {
            cuda!(cudaFreeAsync(p, stream); "ptr={p:p} size={} stream={stream:p}", live.size)
        } else {
            cuda!(cudaFree(p); "ptr={p:p} size={}", live.size)
        }
    })
}

/// Returns unused pool memory of every device to CUDA (waits for the legacy stream first, so
/// that frees queued on it have landed in the pool).
pub fn release_cached() -> Result<()> {
    for (device, slot) in POOLS.iter().enumerate() {
        let Some(Some(pool)) = slot.get() else {
            continue;
        };
        let d = device as i32;
        crate::device::with(d, || {
            cuda!(cudaStreamSynchronize(std::ptr::null_mut()); "device={d}")?;
            cuda!(cudaMemPoolTrimTo(pool.0, 0); "device={d}")
        })?;
        RESERVED_SEEN[device].store(reserved(pool.0), Relaxed);
        FREED_EST[device].store(0, Relaxed);
    }
    Ok(())
}

/// Statistics of `device`, or of all devices summed when `device` is -1.
pub fn stats(device: i32) -> Result<AllocatorStats> {
    let one = |d: usize| {
        let cached = match POOLS[d].get() {
            Some(Some(pool)) => reserved(pool.0),
            _ => 0,
        };
        let s = COUNTERS[d].snapshot(0);
        AllocatorStats {
            cached_bytes: cached.saturating_sub(s.in_use_bytes),
            ..s
        }
    };
    if device == -1 {
        let mut total = AllocatorStats::default();
        for d in 0..MAX_DEVICES {
            let s = one(d);
            total.in_use_bytes += s.in_use_bytes;
            total.peak_in_use_bytes += s.peak_in_use_bytes;
            total.cached_bytes += s.cached_bytes;
            total.alloc_count += s.alloc_count;
            total.free_count += s.free_count;
            total.cache_hits += s.cache_hits;
            total.cache_misses += s.cache_misses;
            total.oom_retries += s.oom_retries;
        }
        return Ok(total);
    }
    let d = usize::try_from(device)
        .ok()
        .filter(|&d| d < MAX_DEVICES)
        .ok_or_else(|| {
            Error::invalid_argument(format!("device={device}: not a device id (or -1 for all)"))
        })?;
    Ok(one(d))
}

/// Resets the peak of every device to its current use.
pub fn reset_peak() {
    for c in &COUNTERS {
        c.reset_peak();
    }
}

/// The size of a live allocation containing exactly `p`, if it is ours.
pub fn size_of(p: *const c_void) -> Option<usize> {
    shard(p as usize)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).map(|l| l.size))
}

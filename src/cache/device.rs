//! Device memory behind malloc_device/free_device: a CUDA memory pool per device (release
//! threshold at the maximum), allocated and freed (`cudaFreeAsync`) on the legacy default stream.
//!
//! Why that is safe: an operation on the legacy stream is ordered with all work on the legacy
//! stream and every blocking stream of the device, so a freed block returns to the pool only
//! after the work that could use it. Work on non-blocking streams the host made itself is not
//! ordered: the host must synchronize it before free_device.
//!
//! Freed blocks are mostly kept by `recycle` (one event per batch of frees gives the same
//! ordering, with one device in use); blocks from 16 MiB up come from cudaMalloc (`large`: pool
//! memory copies slower there). Every live pointer is recorded, so a foreign or double free is
//! refused.
//!
//! Captures (`legacy_stream`): while a stream of the device captures, the legacy stream may not
//! be used. Frees then stay pending in `recycle` or `deferred`, and new blocks come from the pool
//! on the device's side stream, waited for on the host. A thread capturing through the library
//! allocates from its capture's graph pool (`graph_pool`).

use super::deferred::{self, How};
use super::recycle::{self, Block};
use super::{cross, graph_pool, in_use, large, AllocatorStats, Counters, MAX_DEVICES};
use crate::cudart::calls::StreamHandle;
use crate::error::{Error, Result};
use crate::safe::capture::Relaxed as RelaxedMode;
use crate::safe::device::Ran;
use crate::safe::pool::Pool;
use crate::util::hash::AddrMap;
use crate::util::sync::lock;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

const SHARDS: usize = 16;

#[derive(Clone, Copy)]
struct Live {
    size: usize,
    device: i32,
    /// From cudaMalloc (`large`), not from the pool.
    raw: bool,
    /// The graph pool it belongs to (0: none; `graph_pool`).
    graph: u64,
    /// The stream it was allocated in the order of (0: the legacy stream).
    stream: usize,
    /// Its allocation's number on its device (the device's allocation count then).
    seq: u64,
}

impl Live {
    /// The block at `p` this record describes.
    fn block(self, p: *mut c_void) -> Block {
        Block {
            ptr: p as usize,
            size: self.size,
            raw: self.raw,
        }
    }
}

static LIVE: [Mutex<Option<AddrMap<Live>>>; SHARDS] = [const { Mutex::new(None) }; SHARDS];

/// The device cache of one device.
struct DeviceCache {
    /// Its pool (made on first use), None where pools are unsupported or switched off.
    pool: OnceLock<Option<Pool>>,
    counters: Counters,
    /// The highest reserved size of the pool seen: an allocation that does not grow it is a hit.
    reserved_seen: AtomicU64,
    /// Bytes freed into the pool and not yet handed out again (an estimate): while it covers a
    /// request, the allocation counts as a hit without a driver call.
    freed_est: AtomicU64,
    /// All of the device's memory, read once (cudaMemGetInfo on the device).
    total: OnceLock<usize>,
}

static DEVICES: [DeviceCache; MAX_DEVICES] = [const {
    DeviceCache {
        pool: OnceLock::new(),
        counters: Counters::new(),
        reserved_seen: AtomicU64::new(0),
        freed_est: AtomicU64::new(0),
        total: OnceLock::new(),
    }
}; MAX_DEVICES];

/// The device cache of `device`.
fn of(device: i32) -> Result<&'static DeviceCache> {
    super::checked_entry(&DEVICES, device)
}

fn cache_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| crate::util::env::switch_on("LLAISYS_NVIDIA_DEVICE_CACHE"))
}

fn shard(p: usize) -> &'static Mutex<Option<AddrMap<Live>>> {
    &LIVE[crate::util::hash::part(p, SHARDS)]
}

/// The pool of `device` (made on first use), or None where pools are unsupported or switched off.
fn pool(device: i32) -> Result<Option<Pool>> {
    if !cache_on() {
        device_seen(device)?;
        return Ok(None);
    }
    let slot = &of(device)?.pool;
    if let Some(p) = slot.get() {
        return Ok(*p);
    }
    device_seen(device)?;
    // Made under the grant lock, so that a device coming into use meanwhile is not missed.
    let _grants = lock(&GRANTS);
    if let Some(p) = slot.get() {
        return Ok(*p);
    }
    let made = make_pool(device)?;
    if let Some(pool) = made {
        let seen = in_use::seen();
        for peer in (0..MAX_DEVICES as i32).filter(|&p| p != device && seen & (1 << p) != 0) {
            if let Err(e) = grant(pool, device, peer) {
                // Our pool, never used; made again at the next allocation.
                pool.destroy();
                return Err(e);
            }
        }
    }
    Ok(*slot.get_or_init(|| made))
}

/// Held while pools are made and while a device coming into use is given access to them.
static GRANTS: Mutex<()> = Mutex::new(());

/// Lets device `peer` access memory of `pool` (of `owner`) where the hardware allows: unlike
/// cudaMalloc memory, pool memory is reachable from another device only once granted.
fn grant(pool: Pool, owner: i32, peer: i32) -> Result<()> {
    if !crate::safe::device::can_access_peer(peer, owner)? {
        return Ok(());
    }
    pool.grant(owner, peer)
}

/// Notes that `device` is in use. The first time, the pools of the devices already in use grant
/// it access; it counts as in use once every grant has worked (else retried at the next call).
#[inline]
pub(crate) fn device_seen(device: i32) -> Result<()> {
    if in_use::bit(device).is_none() || in_use::contains(device) {
        return Ok(());
    }
    first_seen(device)
}

/// device_seen for a device not yet in use: the grants.
#[cold]
#[inline(never)]
fn first_seen(device: i32) -> Result<()> {
    let _grants = lock(&GRANTS);
    if in_use::contains(device) {
        return Ok(());
    }
    for (owner, cache) in DEVICES.iter().enumerate() {
        if let Some(Some(pool)) = cache.pool.get() {
            if owner as i32 != device {
                grant(*pool, owner as i32, device)?;
            }
        }
    }
    in_use::mark(device);
    Ok(())
}

fn make_pool(device: i32) -> Result<Option<Pool>> {
    // Once per device; may be the first call of a thread inside a capture.
    let _relaxed = RelaxedMode::new();
    if !crate::safe::device::memory_pools_supported(device)? {
        return Ok(None);
    }
    Pool::new(device).map(Some)
}

/// One attempt: the pool (stream-ordered on `stream`) or plain cudaMalloc.
///
/// # Safety
/// `stream` is NULL or a live stream.
unsafe fn try_alloc(
    size: usize,
    device: i32,
    pool: Option<Pool>,
    stream: StreamHandle,
) -> Result<(*mut c_void, bool)> {
    match pool {
        Some(pool) => {
            // SAFETY: `stream` is NULL or a live stream (this function's contract).
            let p = unsafe { pool.alloc(size, stream) }?;
            let cache = of(device)?;
            let covered = cache
                .freed_est
                .fetch_update(Relaxed, Relaxed, |v| v.checked_sub(size as u64))
                .is_ok();
            if covered {
                return Ok((p, true));
            }
            let now = pool.reserved();
            let hit = now <= cache.reserved_seen.load(Relaxed);
            cache.reserved_seen.fetch_max(now, Relaxed);
            Ok((p, hit))
        }
        None => {
            // As a large block's cudaMalloc (`large::alloc`): through any capture.
            let _relaxed = RelaxedMode::new();
            Ok((crate::safe::memory::alloc_device(size)?, false))
        }
    }
}

/// Allocates `size` bytes on the current device, in the order of the legacy default stream.
/// Size 0 gives NULL. Out of memory is returned as it is: the caller may release caches and retry.
pub(crate) fn alloc(size: usize) -> Result<*mut c_void> {
    // SAFETY: NULL is the legacy stream.
    unsafe { alloc_on(size, std::ptr::null_mut()) }
}

/// Allocates in the order of `stream`. With NULL (the legacy stream) on a thread capturing
/// through the library, the block comes from the capture's graph pool.
///
/// # Safety
/// `stream` is NULL or a live stream of the current device.
pub(crate) unsafe fn alloc_on(size: usize, stream: StreamHandle) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    if stream.is_null() {
        if let Some(c) = graph_pool::current() {
            return alloc_for_graph(size, c.capture, c.pool, c.device);
        }
    }
    let device = crate::safe::device::current()
        .map_err(|e| Error::cuda(e.call(), e.cuda_error(), format!("size={size}")))?;
    let pool = pool(device)?;
    refuse_beyond_device(size, device)?;
    // The legacy stream with one device in use: blocks are recycled, large ones from cudaMalloc.
    let kept_here = stream.is_null() && pool.is_some() && !cross::active();
    let recycled = kept_here.then(|| recycle::take(device, size)).flatten();
    let (p, hit, raw) = match recycled {
        Some(b) => (b.ptr as *mut c_void, true, b.raw),
        None => {
            within_limit(device, size)?;
            // SAFETY: `stream` is NULL or a live stream of the current device, `device` (this
            // function's contract).
            unsafe { alloc_new(size, device, pool, stream, kept_here) }?
        }
    };
    let mut live = Live {
        size,
        device,
        raw,
        graph: 0,
        stream: stream as usize,
        seq: 0,
    };
    if stream.is_null() && pool.is_some() {
        if let Err(e) = cross::order_after_alloc(device) {
            // Not handed out: the caller could not know when its streams may use it.
            discard(p, live);
            return Err(e);
        }
    }
    live.seq = of(device)?.counters.allocated(size, hit);
    record(p, live);
    super::history::note(p as usize);
    Ok(p)
}

/// Gives back a block of ours never handed out: freed in order on the legacy stream, or, when
/// that fails, kept in `deferred` instead of lost.
fn discard(p: *mut c_void, live: Live) {
    // SAFETY: a block of ours, never handed out, freed once; NULL is the legacy stream.
    let Ran { result, .. } = unsafe { release(p, live, std::ptr::null_mut()) };
    match result {
        Ok(Released::ToPool) => {
            if let Ok(cache) = of(live.device) {
                cache.freed_est.fetch_add(live.size as u64, Relaxed);
            }
        }
        Ok(Released::Kept(evicted)) => set_aside(return_to_pool(live.device, evicted)),
        Ok(Released::ToCuda | Released::Deferred) => {}
        Err(e) => {
            set_aside(Err(e));
            let how = if live.raw { How::Large } else { How::Pool };
            deferred::push(live.device, live.block(p), how);
        }
    }
}

/// A failure left for later (the device's, or a block kept for another try). A failed CUDA
/// call's error is taken out of cudart's last error, where the application would take it for
/// its own.
pub(crate) fn set_aside(r: Result<()>) {
    use crate::error::ErrorKind;
    if r.is_err_and(|e| e.from_cuda() || e.kind() == ErrorKind::DeferredCuda) {
        crate::safe::runtime::take_last_cuda_error();
    }
}

/// Records a block handed out.
#[inline(always)]
fn record(p: *mut c_void, live: Live) {
    lock(shard(p as usize))
        .get_or_insert_with(AddrMap::default)
        .insert(p as usize, live);
}

/// New memory for a request the kept blocks did not serve: (pointer, hit, from cudaMalloc).
/// While a capture forbids the legacy stream, the pool allocates on the device's side stream,
/// waited for before the block is handed out.
///
/// # Safety
/// `stream` is NULL or a live stream of `device`, the current device.
unsafe fn alloc_new(
    size: usize,
    device: i32,
    pool: Option<Pool>,
    stream: StreamHandle,
    kept_here: bool,
) -> Result<(*mut c_void, bool, bool)> {
    // Frees kept during a capture that has ended since, and graph pools nobody holds.
    set_aside(flush_kept());
    // Neither cudaMalloc nor an allocation on the side stream touches captured work: relaxed
    // mode lets them through a capture of any mode.
    let _relaxed = RelaxedMode::new();
    if kept_here && large::wanted(size) {
        return Ok((large::alloc(size, device)?, false, true));
    }
    let legacy = if stream.is_null() {
        crate::cache::legacy_stream::usable(device)?
    } else {
        None
    };
    if !stream.is_null() || legacy.is_some() || pool.is_none() {
        // SAFETY: `stream` is NULL or a live stream of `device` (this function's contract).
        match unsafe { try_alloc(size, device, pool, stream) } {
            // A capture the host began itself after the check refused the legacy stream:
            // nothing was allocated, the side stream serves the request.
            Err(e)
                if stream.is_null()
                    && pool.is_some()
                    && e.cuda_error() == crate::error::CudaError::STREAM_CAPTURE_IMPLICIT =>
            {
                crate::safe::runtime::take_last_cuda_error();
            }
            r => return r.map(|(p, hit)| (p, hit, false)),
        }
    }
    drop(legacy);
    let side = crate::cache::legacy_stream::side_stream(device)?;
    // SAFETY: the side stream is a live stream of `device`.
    let (p, hit) = unsafe { try_alloc(size, device, pool, side) }?;
    // SAFETY: as above. Once it has run, every stream may use the block.
    if let Err(e) = unsafe { crate::safe::stream::synchronize(side) } {
        // SAFETY: just allocated on the side stream, never handed out.
        let _ = unsafe { crate::safe::pool::free_async(p, size, side) };
        return Err(e);
    }
    Ok((p, hit, false))
}

/// malloc_device on a thread capturing through the library: a block of the capture's pool.
fn alloc_for_graph(size: usize, capture: u64, pool: u64, device: i32) -> Result<*mut c_void> {
    refuse_beyond_device(size, device)?;
    let (p, hit) = graph_pool::alloc(capture, pool, device, size)?;
    let p = p as *mut c_void;
    let seq = of(device)?.counters.allocated(size, hit);
    record(
        p,
        Live {
            size,
            device,
            raw: true,
            graph: pool,
            stream: 0,
            seq,
        },
    );
    super::history::note(p as usize);
    Ok(p)
}

/// All of `device`'s memory, in bytes (read once per device).
#[inline]
pub(crate) fn total_memory(device: i32) -> Result<usize> {
    let slot = &of(device)?.total;
    match slot.get() {
        Some(&t) => Ok(t),
        None => {
            let _relaxed = RelaxedMode::new();
            let (_, t) = crate::safe::device::with(device, crate::safe::device::mem_info)?;
            Ok(*slot.get_or_init(|| t))
        }
    }
}

/// Refuses a size larger than all of `device`'s memory before CUDA sees it, as cudaMalloc would.
#[inline]
fn refuse_beyond_device(size: usize, device: i32) -> Result<()> {
    let total = total_memory(device)?;
    if size > total {
        return Err(Error::cuda(
            "cudaMalloc",
            crate::error::CudaError::MEMORY_ALLOCATION,
            format!("size={size} is more than the device's {total} bytes (refused before CUDA)"),
        ));
    }
    Ok(())
}

/// Counts an out-of-memory failure of the current device that the caller retries.
pub(crate) fn note_oom_retry() {
    if let Ok(cache) = crate::safe::device::current().and_then(of) {
        cache.counters.oom_retry();
    }
}

/// Frees a pointer from `alloc`; NULL does nothing. A pointer we did not hand out (or already
/// freed) is refused and nothing is freed.
// `p` reaches CUDA only after it was found in our table of live allocations.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub(crate) fn free(p: *mut c_void) -> Result<()> {
    // Frees kept while a capture forbade the legacy stream; their failure is the device's.
    set_aside(flush_kept());
    // SAFETY: NULL is the legacy stream.
    unsafe { free_on(p, std::ptr::null_mut()) }
}

/// `free`, then the block's device kept within its release threshold (a failure there is the
/// device's, not this free's).
#[inline(always)]
pub(crate) fn free_within_threshold(p: *mut c_void) -> Result<()> {
    if !super::threshold::any() {
        return free(p);
    }
    free_then_trim(p)
}

// Out of line: without a threshold, free_device pays one test.
#[cold]
#[inline(never)]
fn free_then_trim(p: *mut c_void) -> Result<()> {
    let device = owner(p).map(|(_, d)| d);
    free(p)?;
    if let Some(d) = device {
        set_aside(keep_within_threshold(d));
    }
    Ok(())
}

/// Frees a pointer from `alloc`/`alloc_on` in the order of `stream`.
///
/// # Safety
/// `stream` is NULL or a live stream.
pub(crate) unsafe fn free_on(p: *mut c_void, stream: StreamHandle) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    let live = lock(shard(p as usize))
        .as_mut()
        .and_then(|m| m.remove(&(p as usize)));
    let Some(live) = live else {
        return Err(Error::invalid_argument(format!(
            "ptr={p:p} was not returned by malloc_device, or was already freed (a device \
             pointer from malloc_host or elsewhere, or a double free); nothing was freed"
        )));
    };
    super::history::forget(p as usize);
    if live.graph != 0 {
        graph_pool::free(live.graph, live.device, p as usize, live.size);
        of(live.device)?.counters.freed(live.size);
        return Ok(());
    }
    // SAFETY: a live allocation of ours (just taken out of the table), freed once; `stream` is
    // NULL or a live stream (this function's contract).
    let Ran { result, restored } = unsafe { release(p, live, stream) };
    let cache = of(live.device)?;
    let booked = match result {
        Err(e) => {
            // Keep it recorded: the memory was not freed.
            record(p, live);
            Err(e)
        }
        Ok(Released::ToPool) => {
            cache.counters.freed(live.size);
            cache.freed_est.fetch_add(live.size as u64, Relaxed);
            Ok(())
        }
        Ok(Released::ToCuda) | Ok(Released::Deferred) => {
            cache.counters.freed(live.size);
            Ok(())
        }
        Ok(Released::Kept(evicted)) => {
            cache.counters.freed(live.size);
            // `p` is freed (kept). Evicted blocks that could not go back are kept again; a
            // CUDA failure there is the device's.
            set_aside(return_to_pool(live.device, evicted));
            Ok(())
        }
    };
    // A device that could not be made current again is reported all the same.
    booked.and(restored)
}

/// What became of a freed block.
enum Released {
    /// Freed into the pool.
    ToPool,
    /// Freed to CUDA (cudaFree: the cache is off, or a large block that could not be kept).
    ToCuda,
    /// Kept for reuse (`recycle`); these older kept blocks go back to the pool instead.
    Kept(Vec<Block>),
    /// Its free waits for the legacy stream (`deferred`).
    Deferred,
}

/// # Safety
/// `p` is a live allocation of ours of `live`, freed once; `stream` is NULL or a live stream.
unsafe fn release(p: *mut c_void, live: Live, stream: StreamHandle) -> Ran<Released> {
    let pooled = match of(live.device) {
        Ok(cache) => cache.pool.get().is_some_and(|p| p.is_some()),
        Err(e) => return Ran::here(Err(e)),
    };
    let block = live.block(p);
    let recycled = stream.is_null() && pooled && !cross::active() && recycle::takes(live.size);
    // Kept as pending when no barrier is due: no CUDA call, no device switch.
    if recycled && matches!(recycle::keep_pending(live.device, block), Ok(true)) {
        return Ran::here(Ok(Released::Kept(Vec::new())));
    }
    // NULL: the legacy stream of the block's device, after other devices' users (`cross`).
    crate::safe::device::run_on(live.device, || {
        if stream.is_null() && pooled && cross::active() {
            // Kept while one device was in use: back to the pool, the large ones to CUDA.
            set_aside(return_to_pool(live.device, recycle::drain(live.device)));
            set_aside(flush_large(live.device));
        }
        // Read again: a second device may have come into use since `recycled` was decided.
        if recycled && !cross::active() {
            // A failed barrier keeps nothing: the block is freed below, in order, as ever.
            let total = total_memory(live.device).unwrap_or(0);
            if let Ok(evicted) = recycle::keep(live.device, block, recycle::ready_limit(total)) {
                return Ok(Released::Kept(evicted));
            }
            crate::safe::runtime::take_last_cuda_error();
        }
        let how = if live.raw {
            How::Large
        } else if pooled {
            How::Pool
        } else {
            How::Plain
        };
        if stream.is_null() {
            let Some(_legacy) = crate::cache::legacy_stream::usable(live.device)? else {
                deferred::push(live.device, block, how);
                return Ok(Released::Deferred);
            };
            cross::order_before_free(live.device)?;
            // SAFETY: a live allocation of ours freed once (this function's contract), ordered
            // after its users on the legacy stream (or freed with cudaFree, which waits for the
            // device); `stream` is NULL.
            match unsafe { free_block(block, live.device, how, stream) } {
                // A capture the host began itself after the check refused the legacy stream:
                // nothing was freed; the free waits for the capture's end like any other.
                Err(e) if e.cuda_error() == crate::error::CudaError::STREAM_CAPTURE_IMPLICIT => {
                    crate::safe::runtime::take_last_cuda_error();
                    deferred::push(live.device, block, how);
                    Ok(Released::Deferred)
                }
                r => r,
            }
        } else if how == How::Pool {
            // SAFETY: a live allocation of ours freed once, on a live stream (`stream` is not
            // NULL here; this function's contract), ordered after its users on `stream`.
            unsafe { free_block(block, live.device, how, stream) }
        } else {
            // A cudaMalloc block has no stream-ordered free: refused on a capturing stream
            // before a wait there would invalidate the capture.
            // SAFETY: `stream` is not NULL here, so a live stream (this function's contract).
            if unsafe { crate::safe::capture::capturing(stream) }? {
                return Err(Error::capture(
                    "cudaFree",
                    crate::error::CudaError::STREAM_CAPTURE_UNSUPPORTED,
                    format!(
                        "stream={stream:p} is capturing a graph: a block from cudaMalloc (a large \
                         block, or the cache switched off) cannot be freed in its order; free it \
                         after the capture, or on the legacy stream"
                    ),
                ));
            }
            // cudaFree waits for the block's device only; `stream` may be another device's.
            // Relaxed: the wait touches no captured work.
            let relaxed = RelaxedMode::new();
            // SAFETY: `stream` is not NULL here, so a live stream (this function's contract).
            unsafe { crate::safe::stream::synchronize(stream) }?;
            drop(relaxed);
            // cudaFree waits for the whole device, which a capture forbids: kept until then.
            let Some(_legacy) = crate::cache::legacy_stream::usable(live.device)? else {
                deferred::push(live.device, block, how);
                return Ok(Released::Deferred);
            };
            // SAFETY: a live allocation of ours freed once, its users on `stream` done (waited
            // for above), the others on its device waited for by cudaFree.
            unsafe { free_block(block, live.device, how, stream) }
        }
    })
}

/// Frees `block` of `device` (current) the way `how` says, on `stream` for pool memory.
///
/// # Safety
/// A live allocation of ours of that kind, freed once, whose users are ordered before the free
/// on `stream` (pool memory) or are on the device (cudaFree waits for it); `stream` is NULL or a
/// live stream.
unsafe fn free_block(
    block: Block,
    device: i32,
    how: How,
    stream: StreamHandle,
) -> Result<Released> {
    let p = block.ptr as *mut c_void;
    // cudaFree runs only on a device no capture forbids (the callers ask `legacy_stream::usable`),
    // but the calling thread may capture another device in global or thread-local mode.
    let _relaxed = (how != How::Pool).then(RelaxedMode::new);
    match how {
        How::Large => {
            // SAFETY: a block of ours from `memory::alloc_device` (`large`) on the current
            // device, freed once (this function's contract).
            unsafe { large::free_now(block, device) }?;
            Ok(Released::ToCuda)
        }
        How::Pool => {
            // SAFETY: pool memory of ours freed once, its users ordered before the free on
            // `stream`, which is NULL or live (this function's contract).
            unsafe { crate::safe::pool::free_async(p, block.size, stream) }?;
            Ok(Released::ToPool)
        }
        How::Plain | How::Graph => {
            // SAFETY: memory of ours from `memory::alloc_device` (plain, or a graph pool's
            // block), freed once (this function's contract).
            unsafe { crate::safe::memory::free_device(p) }?;
            Ok(Released::ToCuda)
        }
    }
}

/// Does the frees kept for the legacy stream (`deferred`) and of graph pools nobody holds.
#[inline]
pub(crate) fn flush_kept() -> Result<()> {
    if !graph_pool::has_work() && !deferred::any() {
        return Ok(());
    }
    flush_kept_slow()
}

#[cold]
#[inline(never)]
fn flush_kept_slow() -> Result<()> {
    for (device, ptr, size) in graph_pool::take_unheld() {
        let block = Block {
            ptr,
            size,
            raw: true,
        };
        deferred::push(device, block, How::Graph);
    }
    deferred::flush()
}

/// Frees the parked large blocks of `device` (current) when its legacy stream may be used.
fn flush_large(device: i32) -> Result<()> {
    let Some(_legacy) = crate::cache::legacy_stream::usable(device)? else {
        return Ok(());
    };
    if let Err((back, e)) = large::flush(device) {
        keep_again(device, back);
        return Err(e);
    }
    Ok(())
}

/// Blocks that could not be freed go back to the recycling lists (as pending).
fn keep_again(device: i32, blocks: Vec<Block>) {
    blocks.into_iter().for_each(|b| recycle::restore(device, b));
}

/// Frees kept blocks of `device` into its pool on the legacy stream; large blocks are parked for
/// cudaFree (`large`). A block that cannot be freed is kept again (all of them while a capture
/// forbids the legacy stream); the first failure is returned.
fn return_to_pool(device: i32, mut blocks: Vec<Block>) -> Result<()> {
    if blocks.is_empty() {
        return Ok(());
    }
    let cache = match of(device) {
        Ok(cache) => cache,
        Err(e) => {
            keep_again(device, blocks);
            return Err(e);
        }
    };
    let result = crate::safe::device::with(device, || {
        let Some(_legacy) = crate::cache::legacy_stream::usable(device)? else {
            return Ok(());
        };
        let mut first_err = None;
        while let Some(b) = blocks.pop() {
            if b.raw {
                if let Err((back, e)) = large::park(device, b) {
                    keep_again(device, back);
                    first_err.get_or_insert(e);
                }
                continue;
            }
            // SAFETY: pool memory of ours, freed by its owner, not handed out since; the free is
            // ordered after its users on the legacy stream.
            match unsafe {
                crate::safe::pool::free_async(b.ptr as *mut c_void, b.size, std::ptr::null_mut())
            } {
                Ok(()) => {
                    cache.freed_est.fetch_add(b.size as u64, Relaxed);
                }
                Err(e) => {
                    recycle::restore(device, b);
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    });
    // Not freed (the device could not be made current, or a capture): kept for a later try.
    keep_again(device, blocks);
    result
}

/// Returns unused pool memory of every device to CUDA (after waiting for the legacy stream). A
/// device whose legacy stream a capture forbids keeps its memory, the others are released, and
/// the capture error is returned (before any other), also for a device in use with no pool.
pub(crate) fn release_cached() -> Result<()> {
    let mut kept_back = flush_kept();
    // This thread may capture another device (or sit beside a global capture): relaxed.
    let _relaxed = RelaxedMode::new();
    let mut capturing = None;
    let seen = in_use::seen();
    for (device, cache) in DEVICES.iter().enumerate() {
        let pool = match cache.pool.get() {
            Some(Some(pool)) => Some(*pool),
            _ if seen & (1 << device) != 0 => None,
            _ => continue,
        };
        let d = device as i32;
        match release_device(d, cache, pool, 0, &mut kept_back) {
            Ok(true) => {}
            Ok(false) => {
                capturing.get_or_insert(d);
            }
            Err(e) => kept_back = kept_back.and(Err(e)),
        }
    }
    match capturing {
        Some(d) => Err(Error::capture(
            "llaisysNvidiaReleaseCachedMemory",
            crate::error::CudaError::STREAM_CAPTURE_IMPLICIT,
            format!(
                "device {d}: a stream of the device is capturing a graph; releasing its cached \
                 memory waits for its legacy stream (try again once the capture has ended; the \
                 other devices' cached memory was released)"
            ),
        )),
        None => kept_back,
    }
}

/// Returns `device`'s unused pool memory and kept blocks to CUDA (after waiting for its legacy
/// stream): false, nothing done, while a capture forbids that stream. A block that cannot be
/// freed stays kept, its error in `kept_back` (the first one).
fn release_device(
    d: i32,
    cache: &DeviceCache,
    pool: Option<Pool>,
    keep: usize,
    kept_back: &mut Result<()>,
) -> Result<bool> {
    let released = crate::safe::device::with(d, || {
        let Some(_legacy) = crate::cache::legacy_stream::usable(d)? else {
            return Ok(false);
        };
        let Some(pool) = pool else {
            return Ok(true);
        };
        if let Err(e) = return_to_pool(d, recycle::drain(d)) {
            if kept_back.is_ok() {
                *kept_back = Err(e);
            }
        }
        // Parked large blocks go to CUDA (a block that cannot be freed is kept again).
        if let Err((back, e)) = large::flush(d) {
            keep_again(d, back);
            if kept_back.is_ok() {
                *kept_back = Err(e);
            }
        }
        // SAFETY: NULL is the legacy stream.
        unsafe { crate::safe::stream::synchronize(std::ptr::null_mut()) }?;
        pool.trim(d, keep).map(|()| true)
    })?;
    if let (true, Some(pool)) = (released, pool) {
        cache.reserved_seen.store(pool.reserved(), Relaxed);
        cache.freed_est.store(0, Relaxed);
    }
    Ok(released)
}

/// What the library holds on `device`: in use and cached, graph pools included.
fn held(device: i32) -> u64 {
    stats(device).map_or(0, |s| s.in_use_bytes + s.cached_bytes)
}

/// Refuses new memory of `size` bytes on `device` beyond its limit (`limit`): when what the
/// library holds there and `size` pass it, its cached memory is released first; when they still
/// do, out of memory (the caller's report names the limit).
#[inline]
fn within_limit(device: i32, size: usize) -> Result<()> {
    let Some(limit) = super::limit::of(device) else {
        return Ok(());
    };
    within_limit_slow(device, size, limit)
}

#[cold]
#[inline(never)]
fn within_limit_slow(device: i32, size: usize, limit: super::limit::Limit) -> Result<()> {
    let limit = limit.bytes_of(total_memory(device)? as u64);
    if held(device) + size as u64 <= limit {
        return Ok(());
    }
    let _ = release_to(device, 0);
    let now = held(device);
    if now + size as u64 <= limit {
        return Ok(());
    }
    Err(Error::cuda(
        "cudaMalloc",
        crate::error::CudaError::MEMORY_ALLOCATION,
        format!(
            "size={size}: refused before CUDA by device {device}'s memory limit of {limit} bytes \
             (the library holds {now} bytes there after releasing its cached memory)"
        ),
    ))
}

/// Releases `device`'s cached memory but `keep` bytes of its pool (a capture there leaves it
/// kept).
fn release_to(device: i32, keep: usize) -> Result<()> {
    let cache = of(device)?;
    let pool = cache.pool.get().copied().flatten();
    let _relaxed = RelaxedMode::new();
    let mut kept_back = flush_kept();
    release_device(device, cache, pool, keep, &mut kept_back)?;
    kept_back
}

/// After a free or a synchronize on `device`: when its cache keeps more than its release
/// threshold (`threshold`), what passes it goes back to CUDA. One relaxed load without one.
#[inline]
pub(crate) fn keep_within_threshold(device: i32) -> Result<()> {
    match super::threshold::of(device) {
        None => Ok(()),
        Some(keep) => trim_to_threshold(device, keep),
    }
}

#[cold]
#[inline(never)]
fn trim_to_threshold(device: i32, keep: u64) -> Result<()> {
    if stats(device)?.cached_bytes <= keep {
        return Ok(());
    }
    release_to(device, usize::try_from(keep).unwrap_or(usize::MAX))
}

/// Sets `device`'s release threshold (None: keep all freed memory) and applies it at once.
pub(crate) fn set_threshold(device: i32, keep: Option<u64>) -> Result<()> {
    super::threshold::set(device, keep)?;
    keep_within_threshold(device)
}

/// Sets `device`'s memory limit (None lifts it) and gives back at once the cached memory that
/// passes it.
pub(crate) fn set_limit(device: i32, limit: Option<super::limit::Limit>) -> Result<()> {
    super::limit::set(device, limit)?;
    let Some(bytes) = limit.map(|l| l.bytes_of(total_memory(device).unwrap_or(0) as u64)) else {
        return Ok(());
    };
    if held(device) > bytes {
        release_to(device, 0)?;
    }
    Ok(())
}

/// A block in use, as a snapshot lists it.
pub(crate) struct InUse {
    pub(crate) ptr: usize,
    pub(crate) size: usize,
    pub(crate) device: i32,
    /// From cudaMalloc (a large block, or the cache off), not the pool.
    pub(crate) raw: bool,
    /// Memory of a graph pool.
    pub(crate) graph: bool,
    pub(crate) stream: usize,
    pub(crate) seq: u64,
}

/// Every block in use, of every device (for snapshots: each shard read under its lock).
pub(crate) fn in_use_blocks() -> Vec<InUse> {
    let mut all = Vec::new();
    for shard in &LIVE {
        if let Some(map) = lock(shard).as_ref() {
            all.extend(map.iter().map(|(&ptr, l)| InUse {
                ptr,
                size: l.size,
                device: l.device,
                raw: l.raw,
                graph: l.graph != 0,
                stream: l.stream,
                seq: l.seq,
            }));
        }
    }
    all
}

/// The device's pool's reserved bytes (0 without a pool).
pub(crate) fn pool_reserved(device: i32) -> u64 {
    match of(device)
        .ok()
        .and_then(|c| c.pool.get().copied().flatten())
    {
        Some(pool) => pool.reserved(),
        None => 0,
    }
}

/// Statistics of `device`, or of all devices summed when `device` is -1.
pub(crate) fn stats(device: i32) -> Result<AllocatorStats> {
    let one = |device: i32, cache: &DeviceCache| {
        let cached = match cache.pool.get() {
            Some(Some(pool)) => pool.reserved(),
            _ => 0,
        } + large::held(device)
            + graph_pool::held(device);
        let s = cache.counters.snapshot(0);
        AllocatorStats {
            cached_bytes: cached.saturating_sub(s.in_use_bytes),
            ..s
        }
    };
    if device == -1 {
        let mut total = AllocatorStats::default();
        for (d, cache) in (0..).zip(&DEVICES) {
            let s = one(d, cache);
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
    let cache = super::entry(&DEVICES, device).ok_or_else(|| {
        Error::invalid_argument(format!("device={device}: not a device id (or -1 for all)"))
    })?;
    Ok(one(device, cache))
}

/// Resets the peak of every device to its current use.
pub(crate) fn reset_peak() {
    for cache in &DEVICES {
        cache.counters.reset_peak();
    }
}

/// The size of a live allocation containing exactly `p`, if it is ours.
pub(crate) fn size_of(p: *const c_void) -> Option<usize> {
    owner(p).map(|(size, _)| size)
}

/// The (size, device) of a live allocation starting exactly at `p`, if it is ours.
pub(crate) fn owner(p: *const c_void) -> Option<(usize, i32)> {
    lock(shard(p as usize))
        .as_ref()
        .and_then(|m| m.get(&(p as usize)).map(|l| (l.size, l.device)))
}

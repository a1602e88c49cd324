//! Pinned host memory behind malloc_host/free_host, cached in size classes (powers of two from
//! 4 KiB to 1 GiB, then multiples of 256 MiB).
//!
//! memcpy_async notes, for each of our blocks it touches, the stream it was queued on (no CUDA
//! call); free_host records one event on each of those streams and the block is reused only once
//! they have all completed (destroy_stream records them before the stream goes). Use of our
//! pinned memory outside the table is not seen: the host synchronizes before freeing.
//!
//! No event may be recorded on a capturing stream, nor on the legacy stream while a blocking
//! stream captures: a block freed then *waits* until those streams are free again. The cache's
//! own queries and allocations run in relaxed capture mode.

use super::{AllocatorStats, Counters};
use crate::cudart::calls::StreamHandle;
use crate::error::{Error, Result};
use crate::util::hash::AddrMap;
use crate::util::sync::lock;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock, RwLock, RwLockWriteGuard};

/// A stream that used a block: (handle, its device; for NULL the device current at the copy,
/// -1 when unknown: the device current at free).
type Stream = (usize, i32);

struct Block {
    /// The size class actually allocated.
    class: usize,
    /// What the caller asked for.
    requested: usize,
    /// Streams memcpy_async used this block on since it was handed out.
    streams: Vec<Stream>,
    /// Events already recorded for it (by destroy_stream).
    events: Vec<Event>,
}

/// An ordering event and the device it was made on (events are per device).
struct Event {
    event: crate::safe::event::Event,
    device: i32,
}

struct Pending {
    ptr: usize,
    class: usize,
    events: Vec<Event>,
}

/// A freed block some of whose streams captured a graph when it was freed: their events are
/// recorded once they no longer capture.
struct Waiting {
    ptr: usize,
    class: usize,
    streams: Vec<Stream>,
    events: Vec<Event>,
}

#[derive(Default)]
struct State {
    live: BTreeMap<usize, Block>,
    ready: AddrMap<Vec<usize>>,
    pending: Vec<Pending>,
    waiting: Vec<Waiting>,
    cached_bytes: usize,
    spare_events: Vec<Event>,
    /// Blocks whose streams could neither get an event nor be synchronized: freed by
    /// release_cached, never reused.
    quarantine: Vec<usize>,
    /// Every stream handle some live block's `streams` may hold.
    noted: AddrMap<()>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Streams are destroyed under its write lock, free_host records its events under its read lock:
/// a block free_host took out of `live` never sees its stream destroyed before its event.
static STREAM_LIFETIME: RwLock<()> = RwLock::new(());

/// Held by whoever destroys a stream (see `STREAM_LIFETIME`).
pub(crate) fn stream_lifetime_write() -> RwLockWriteGuard<'static, ()> {
    crate::util::sync::write(&STREAM_LIFETIME)
}
static COUNTERS: Counters = Counters::new();
/// Number of live blocks, read without the lock so memcpy_async pays nothing when there are none.
static LIVE_COUNT: AtomicUsize = AtomicUsize::new(0);
/// The lowest start and highest end of any block ever handed out: an address outside is not
/// ours, known without the lock.
static SPAN_LO: AtomicUsize = AtomicUsize::new(usize::MAX);
static SPAN_HI: AtomicUsize = AtomicUsize::new(0);

/// False when `addr` cannot lie in a block of ours.
#[inline]
fn in_span(addr: usize) -> bool {
    LIVE_COUNT.load(Relaxed) != 0 && addr >= SPAN_LO.load(Relaxed) && addr < SPAN_HI.load(Relaxed)
}
/// Bumped by every free_host and destroy_stream: a thread's remembered (block, stream) note is
/// valid only within one epoch.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last (block start, block end, stream, epoch) this thread noted: repeated copies of one
    /// block on one stream then skip the lock.
    static LAST_NOTE: Cell<(usize, usize, Stream, u64)> = const { Cell::new((0, 0, (0, -1), u64::MAX)) };
}

fn cache_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| crate::util::env::switch_on("LLAISYS_NVIDIA_HOST_CACHE"))
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    f(lock(&STATE).get_or_insert_with(State::default))
}

/// The size class of a request.
pub(crate) fn size_class(size: usize) -> usize {
    const GIB: usize = 1 << 30;
    const STEP: usize = 256 << 20;
    if size <= GIB {
        size.max(4096).next_power_of_two()
    } else {
        size.div_ceil(STEP).saturating_mul(STEP)
    }
}

/// Allocates `size` bytes of pinned memory. Size 0 gives NULL; out of memory is returned as is.
pub(crate) fn alloc(size: usize) -> Result<*mut c_void> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    let class = if cache_on() { size_class(size) } else { size };
    if class > isize::MAX as usize {
        // Refused before the cache is touched, as sizes above PTRDIFF_MAX are.
        return Err(Error::invalid_argument(format!(
            "size={size}: its pinned size class ({class} bytes) is larger than any buffer in \
             this process (at most {})",
            isize::MAX
        )));
    }
    let reused = if cache_on() {
        with_state(|s| s.take_ready(class)).or_else(|| {
            // `retry_waiting` may record on a legacy stream: the gate first, then the lock.
            let _gate = crate::cache::legacy_stream::gate();
            with_state(|s| {
                // Queries of our own events: allowed through any capture in relaxed mode.
                let _relaxed = crate::safe::capture::Relaxed::new();
                s.retry_waiting();
                s.collect_completed();
                s.take_ready(class)
            })
        })
    } else {
        None
    };
    let (p, hit) = match reused {
        Some(p) => (p as *mut c_void, true),
        None => {
            let _relaxed = crate::safe::capture::Relaxed::new();
            let p = crate::safe::memory::alloc_host(class).map_err(|e| {
                Error::cuda(
                    e.call(),
                    e.cuda_error(),
                    format!("size={size} (pinned size class {class})"),
                )
            })?;
            (p, false)
        }
    };
    with_state(|s| {
        s.live.insert(
            p as usize,
            Block {
                class,
                requested: size,
                streams: Vec::new(),
                events: Vec::new(),
            },
        )
    });
    SPAN_LO.fetch_min(p as usize, Relaxed);
    SPAN_HI.fetch_max(p as usize + class, Relaxed);
    LIVE_COUNT.fetch_add(1, Relaxed);
    COUNTERS.allocated(size, hit);
    Ok(p)
}

/// Frees a pointer from `alloc`; NULL does nothing. A pointer we did not hand out (or already
/// freed) is refused and nothing is freed.
// `p` reaches CUDA only after it was found in our table of live allocations.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub(crate) fn free(p: *mut c_void) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    let _streams_stay = crate::util::sync::read(&STREAM_LIFETIME);
    let Some(block) = with_state(|s| s.live.remove(&(p as usize))) else {
        return Err(Error::invalid_argument(format!(
            "ptr={p:p} was not returned by malloc_host, or was already freed (a device pointer, \
             an interior pointer, or a double free); nothing was freed"
        )));
    };
    LIVE_COUNT.fetch_sub(1, Relaxed);
    EPOCH.fetch_add(1, Relaxed);
    COUNTERS.freed(block.requested);
    if !cache_on() {
        // cudaFreeHost is "potentially unsafe" during a capture; it touches no captured work.
        let _relaxed = crate::safe::capture::Relaxed::new();
        // SAFETY: a live block of ours (just taken out of the table), freed once. With the
        // cache off no copy is noted: as with plain cudaFreeHost, the host has finished its work.
        return unsafe { crate::safe::memory::free_host(p) };
    }
    let mut events = block.events;
    let mut first_err = None;
    let mut reusable = true;
    let mut capturing = Vec::new();
    for &stream in &block.streams {
        // For the legacy stream: held from the check to the record (`captures`).
        let _gate = (stream.0 == 0).then(crate::cache::legacy_stream::gate);
        if captures(stream) {
            capturing.push(stream);
            continue;
        }
        match record_event(stream) {
            Ok(e) => events.push(e),
            Err(e) => {
                // Without an event, the stream is waited for; if that fails too, the block is
                // quarantined (freed by release_cached) and the error reported.
                if synchronize(stream).is_err() {
                    reusable = false;
                    first_err.get_or_insert(e);
                } else {
                    // Handled: not left as cudart's last error for the application to find.
                    crate::safe::runtime::take_last_cuda_error();
                }
            }
        }
    }
    with_state(|s| {
        if !reusable {
            s.spare_events.append(&mut events);
            s.quarantine.push(p as usize);
            return;
        }
        s.cached_bytes += block.class;
        if !capturing.is_empty() {
            s.waiting.push(Waiting {
                ptr: p as usize,
                class: block.class,
                streams: capturing,
                events,
            });
        } else if events.is_empty() {
            s.ready.entry(block.class).or_default().push(p as usize);
        } else {
            s.pending.push(Pending {
                ptr: p as usize,
                class: block.class,
                events,
            });
        }
    });
    first_err.map_or(Ok(()), Err)
}

/// True when no event may be recorded on `stream` now (for NULL: a blocking stream of its device
/// captures, or a capture through the library is counted). A failed query counts as not
/// capturing. For NULL the caller holds `legacy_stream::gate()` until it has recorded, so that no
/// capture through the library begins between this check and the record.
fn captures((stream, device): Stream) -> bool {
    let s = stream as StreamHandle;
    if s.is_null() && crate::cache::legacy_stream::capturing(device) {
        return true;
    }
    // SAFETY: `s` is NULL or a stream noted while live (see `synchronize`).
    let ask = || Ok(unsafe { crate::safe::capture::capturing(s) }.unwrap_or(false));
    if device < 0 {
        return ask().unwrap_or(false);
    }
    crate::safe::device::for_stream(s, device, ask).unwrap_or(false)
}

/// Waits for `stream` (NULL: the legacy stream of its device).
fn synchronize((stream, device): Stream) -> Result<()> {
    let s = stream as StreamHandle;
    // SAFETY: `s` is NULL or a stream noted while live; destroy_stream gives blocks their event
    // (and drops the note) before the stream goes, under the stream-lifetime lock we hold.
    let sync = || unsafe { crate::safe::stream::synchronize(s) };
    if device < 0 {
        return sync();
    }
    crate::safe::device::for_stream(s, device, sync)
}

/// Notes that a copy on `stream` (of `stream_device`; None: NULL, the current device) uses the
/// host memory at `ptr`. Cheap when `ptr` is not ours.
#[inline]
pub(crate) fn record_use(ptr: *const c_void, stream: StreamHandle, stream_device: Option<i32>) {
    let addr = ptr as usize;
    if in_span(addr) && cache_on() {
        note_use(addr, stream, stream_device);
    }
}

/// record_use for an address inside our span: skipped when this thread noted the same block and
/// stream last, within the epoch.
#[inline]
fn note_use(addr: usize, stream: StreamHandle, stream_device: Option<i32>) {
    let device = match stream_device {
        Some(d) => d,
        None => crate::safe::device::current().unwrap_or(-1),
    };
    let stream: Stream = (stream as usize, device);
    let epoch = EPOCH.load(Relaxed);
    let (start, end, noted, at) = LAST_NOTE.with(Cell::get);
    if at == epoch && noted == stream && (start..end).contains(&addr) {
        return;
    }
    note_use_locked(addr, stream, epoch);
}

/// note_use for a block or stream this thread did not note last: the block's books.
#[inline(never)]
fn note_use_locked(addr: usize, stream: Stream, epoch: u64) {
    let note = with_state(|s| {
        let (&start, block) = s.live.range_mut(..=addr).next_back()?;
        if addr >= start + block.class {
            return None;
        }
        if !block.streams.contains(&stream) {
            block.streams.push(stream);
        }
        // Always: `noted` holds every stream any block holds (`stream_destroyed`).
        s.noted.insert(stream.0, ());
        Some((start, start + block.class))
    });
    if let Some((start, end)) = note {
        LAST_NOTE.with(|n| n.set((start, end, stream, epoch)));
    }
}

/// Called before `stream` (of `device`) is destroyed: blocks that used it get their event now.
pub(crate) fn stream_destroyed(stream: StreamHandle, device: i32) -> Result<()> {
    // The note goes only once every block that held the stream has its event (below), so a
    // failed destroy_stream scans again next time.
    if !with_state(|s| s.noted.contains_key(&(stream as usize))) {
        return Ok(());
    }
    if LIVE_COUNT.load(Relaxed) == 0 && with_state(|s| s.waiting.is_empty()) {
        with_state(|s| s.noted.remove(&(stream as usize)));
        return Ok(());
    }
    // A new stream may get this handle's value: every thread's note is void.
    EPOCH.fetch_add(1, Relaxed);
    let users: Vec<usize> = with_state(|s| {
        s.live
            .iter()
            .filter(|(_, b)| b.streams.iter().any(|&(h, _)| h == stream as usize))
            .map(|(&p, _)| p)
            .collect()
    });
    for p in users {
        let ev = record_event((stream as usize, device))?;
        with_state(|s| match s.live.get_mut(&p) {
            Some(b) => {
                b.streams.retain(|&(h, _)| h != stream as usize);
                b.events.push(ev);
            }
            None => s.spare_events.push(ev),
        });
    }
    // Freed blocks waiting for this stream (no longer capturing) get their event too.
    let waiting = with_state(|s| {
        s.waiting
            .iter()
            .filter(|w| w.streams.iter().any(|&(h, _)| h == stream as usize))
            .map(|w| w.ptr)
            .collect::<Vec<_>>()
    });
    for p in waiting {
        let ev = record_event((stream as usize, device))?;
        with_state(|s| match s.waiting.iter_mut().find(|w| w.ptr == p) {
            Some(w) => {
                w.streams.retain(|&(h, _)| h != stream as usize);
                w.events.push(ev);
            }
            None => s.spare_events.push(ev),
        });
    }
    with_state(|s| s.noted.remove(&(stream as usize)));
    Ok(())
}

/// Records an event (taken from the spares of the stream's device, or made) on `stream`.
fn record_event(stream: Stream) -> Result<Event> {
    let mut spares = with_state(|st| std::mem::take(&mut st.spare_events));
    let result = record_event_into(stream, &mut spares);
    with_state(|st| st.spare_events.append(&mut spares));
    result
}

/// `record_event` with the spare events at hand (the state's lock held by the caller).
fn record_event_into((stream, noted_device): Stream, spares: &mut Vec<Event>) -> Result<Event> {
    let s = stream as StreamHandle;
    let device = if noted_device >= 0 {
        noted_device
    } else {
        crate::safe::device::current()?
    };
    let spare = spares
        .iter()
        .position(|e| e.device == device)
        .map(|i| spares.swap_remove(i));
    let ev = match spare {
        Some(e) => e,
        None => Event {
            event: crate::safe::event::Event::on_device(device)?,
            device,
        },
    };
    // SAFETY: `s` is NULL or a live stream of `device` (see `synchronize`); the event is of
    // that device.
    let recorded = crate::safe::device::for_stream(s, device, || unsafe { ev.event.record_raw(s) });
    if let Err(e) = recorded {
        if e.cuda_error() == crate::error::CudaError::STREAM_CAPTURE_IMPLICIT {
            // Refused by a capture begun since: never recorded again (`Event::abandon`).
            ev.event.abandon();
        } else {
            spares.push(ev);
        }
        return Err(e);
    }
    Ok(ev)
}

impl State {
    /// Records the events of waiting blocks on their streams that no longer capture; a block
    /// with all its events moves to `pending`. Caller holds `legacy_stream::gate()` (`captures`).
    fn retry_waiting(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            let w = &mut self.waiting[i];
            let mut j = 0;
            while j < w.streams.len() {
                let stream = w.streams[j];
                if captures(stream) {
                    j += 1;
                    continue;
                }
                match record_event_into(stream, &mut self.spare_events) {
                    Ok(e) => {
                        w.events.push(e);
                        w.streams.swap_remove(j);
                    }
                    // Kept waiting; tried again later (not left as cudart's last error).
                    Err(_) => {
                        crate::safe::runtime::take_last_cuda_error();
                        j += 1;
                    }
                }
            }
            if self.waiting[i].streams.is_empty() {
                let w = self.waiting.swap_remove(i);
                self.pending.push(Pending {
                    ptr: w.ptr,
                    class: w.class,
                    events: w.events,
                });
            } else {
                i += 1;
            }
        }
    }

    fn take_ready(&mut self, class: usize) -> Option<usize> {
        let p = self.ready.get_mut(&class)?.pop()?;
        self.cached_bytes -= class;
        Some(p)
    }

    /// Moves pending blocks whose events have all completed to `ready`.
    fn collect_completed(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            // A failed query: kept, and reported by release_cached, which waits for it.
            let done = self.pending[i]
                .events
                .iter()
                .all(|e| match e.event.query() {
                    Ok(done) => done,
                    Err(_) => {
                        crate::safe::runtime::take_last_cuda_error();
                        false
                    }
                });
            if done {
                let p = self.pending.swap_remove(i);
                self.spare_events.extend(p.events);
                self.ready.entry(p.class).or_default().push(p.ptr);
            } else {
                i += 1;
            }
        }
    }
}

/// Frees every cached block (waiting for the work pending blocks wait on).
pub(crate) fn release_cached() -> Result<()> {
    // `retry_waiting` may record on a legacy stream: the gate first, then the lock.
    let gate = crate::cache::legacy_stream::gate();
    let (ready, pending) = with_state(|s| {
        let _relaxed = crate::safe::capture::Relaxed::new();
        s.retry_waiting();
        let mut ready: Vec<usize> = s.ready.drain().flat_map(|(_, v)| v).collect();
        ready.append(&mut s.quarantine);
        let pending = std::mem::take(&mut s.pending);
        // Blocks still waiting for a capture to end stay cached.
        s.cached_bytes = s.waiting.iter().map(|w| w.class).sum();
        (ready, pending)
    });
    drop(gate);
    let mut first_err = None;
    for p in pending {
        for e in p.events {
            if let Err(err) = e.event.synchronize() {
                first_err.get_or_insert(err);
            }
        }
        // SAFETY: a cached block of ours, handed out to nobody, whose users have completed
        // (waited for above).
        if let Err(err) = unsafe { crate::safe::memory::free_host(p.ptr as *mut c_void) } {
            first_err.get_or_insert(err);
        }
    }
    for p in ready {
        // SAFETY: a cached block of ours, handed out to nobody, with no pending user.
        if let Err(err) = unsafe { crate::safe::memory::free_host(p as *mut c_void) } {
            first_err.get_or_insert(err);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Statistics of the pinned host allocator.
pub(crate) fn stats() -> AllocatorStats {
    let cached = with_state(|s| s.cached_bytes) as u64;
    COUNTERS.snapshot(cached)
}

/// Counts an out-of-memory failure that the caller retries.
pub(crate) fn note_oom_retry() {
    COUNTERS.oom_retry();
}

/// Resets the peak to the current use.
pub(crate) fn reset_peak() {
    COUNTERS.reset_peak();
}

/// True when `ptr` lies inside one of our live pinned blocks.
pub(crate) fn is_ours(ptr: *const c_void) -> bool {
    let addr = ptr as usize;
    if !in_span(addr) {
        return false;
    }
    with_state(|s| {
        s.live
            .range(..=addr)
            .next_back()
            .is_some_and(|(&start, b)| addr < start + b.class)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn the_legacy_stream_counts_as_capturing_from_the_moment_a_capture_through_the_library_is_counted(
    ) {
        // A device no machine has: only the library's own count can say "capturing". Each test
        // that counts a capture has a device of its own (the recycling tests use 56-63).
        const DEVICE: i32 = 41;
        let legacy: Stream = (0, DEVICE);
        let seen = crate::cache::legacy_stream::begin_counted(DEVICE, || {
            // Counted, and cudart not yet asked to begin: recording here could invalidate it.
            let _gate = crate::cache::legacy_stream::gate();
            Ok(captures(legacy))
        });
        crate::cache::legacy_stream::ended(DEVICE);
        assert_eq!(seen.ok(), Some(true));
        assert!(!captures(legacy));
    }

    #[test]
    fn no_capture_through_the_library_begins_while_the_gate_is_held() {
        const DEVICE: i32 = 40;
        let begun = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let gate = crate::cache::legacy_stream::gate();
            let t = scope.spawn(|| {
                crate::cache::legacy_stream::begin_counted(DEVICE, || {
                    begun.store(true, Ordering::SeqCst);
                    Ok(())
                })
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(
                !begun.load(Ordering::SeqCst),
                "a capture was counted while the gate was held"
            );
            drop(gate);
            assert!(t.join().expect("the capturing thread").is_ok());
        });
        crate::cache::legacy_stream::ended(DEVICE);
        assert!(begun.load(Ordering::SeqCst));
    }
}

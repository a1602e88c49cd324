//! Pinned staging buffers: a set holds one slot per chunk in flight (`SLOTS`), each a pinned
//! buffer and the event of its last use. A slot is used by one thread at a time (its lock), and
//! bytes of its buffer are overwritten only once no DMA reads them: once its event has completed,
//! or, past the bytes its pending DMA reads, by a copy queued behind that DMA on the same legacy
//! stream (`room_behind`). A set's slots are a ring: each copy starts at the slot after the last
//! one the previous copy used (the oldest use). At most `MAX_SETS` idle sets are kept.

use super::pinned_pages::{Mapping, Pinned};
use super::plan::CHUNK_MAX;
use crate::cudart::calls::StreamHandle;
use crate::error::Result;
use crate::safe::event::Event;
use crate::util::sync::lock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Staging buffers per copy: chunks in flight at once (more were no faster: docs/caches.md).
const SLOTS: usize = 4;
/// Idle sets kept for reuse.
const MAX_SETS: usize = 2;

/// One staging buffer and the event of its last use.
pub(super) struct Slot {
    buf: *mut u8,
    /// The huge pages `buf` points into (`Set::make_buffers`); None for `cudaHostAlloc`'s.
    pages: Option<Pinned>,
    /// Made on `device` (events are per device); None before the first use.
    event: Option<Event>,
    device: i32,
    busy: bool,
    /// Bytes of the buffer, from its start, that its last recorded use covers.
    len: usize,
    /// The stream of the last recorded use.
    stream: usize,
}

// SAFETY: the raw pointer is the only field that is not Send: it is pinned host memory that the
// slot owns, valid on any thread. The slot's lock orders its uses from one copy to the next;
// within a copy the pool's threads write or read the buffer through a copy of the pointer
// (`pipeline::Job::bufs`), each piece only once its chunk is published ready and before it is
// counted copied (acquire and release), which orders them with the calling thread's DMAs.
unsafe impl Send for Slot {}

impl Slot {
    /// The slot's buffer (CHUNK_MAX bytes), made on first use; it may still be in use (`poll`).
    pub(super) fn buffer(&mut self) -> Result<*mut u8> {
        if self.buf.is_null() {
            self.buf = crate::safe::memory::alloc_host_portable(CHUNK_MAX)?.cast();
        }
        Ok(self.buf)
    }

    /// Makes the slot ready for a chunk on `device`: its buffer exists, its last use has
    /// completed (or is ordered, `order_before_dma`), its event is of that device.
    pub(super) fn prepare(&mut self, device: i32) -> Result<*mut u8> {
        self.buffer()?;
        self.wait()?;
        if self.event.is_none() || self.device != device {
            self.event = None;
            self.event = Some(Event::on_device(device)?);
            self.device = device;
        }
        Ok(self.buf)
    }

    /// Records the slot's event on `stream` (of the slot's device) after a DMA from or to the
    /// buffer's first `len` bytes.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream of that device.
    pub(super) unsafe fn record(&mut self, stream: StreamHandle, len: usize) -> Result<()> {
        self.len = len;
        self.stream = stream as usize;
        if let Some(e) = &self.event {
            // SAFETY: `stream` is NULL or a live stream of the device the event was made on
            // (this function's contract; `prepare` made the event on that device).
            if let Err(err) = unsafe { e.record_raw(stream) } {
                if err.cuda_error() == crate::error::CudaError::STREAM_CAPTURE_IMPLICIT {
                    // Refused by a capture begun since: a fresh event for the next record.
                    let fresh = Event::on_device(self.device)?;
                    if let Some(old) = self.event.replace(fresh) {
                        old.abandon();
                    }
                }
                return Err(err);
            }
            self.busy = true;
        }
        Ok(())
    }

    /// The slot's event (None before its first use).
    pub(super) fn event_raw(&self) -> Option<crate::cudart::calls::EventHandle> {
        self.event.as_ref().map(|e| e.as_raw())
    }

    /// Orders the slot's next use, a D2H DMA into its buffer, after its last use: on `device`
    /// by `stream` (`cudaStreamWaitEvent`), on another device by waiting here.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream of `device`.
    pub(super) unsafe fn order_before_dma(
        &mut self,
        stream: StreamHandle,
        device: i32,
    ) -> Result<()> {
        if self.busy {
            match &self.event {
                Some(e) if self.device == device => {
                    // SAFETY: `stream` is NULL or a live stream of `device` (this function's
                    // contract), the event's device; the event is the slot's own, live.
                    unsafe { crate::safe::stream::wait_event(stream, e.as_raw()) }?;
                    self.busy = false;
                }
                _ => self.wait()?,
            }
        }
        Ok(())
    }

    /// Waits for the slot's last use.
    pub(super) fn wait(&mut self) -> Result<()> {
        if self.busy {
            if let Some(e) = &self.event {
                e.synchronize()?;
            }
            self.busy = false;
        }
        Ok(())
    }

    /// True once the slot's last use has completed (without waiting); an event error is returned.
    pub(super) fn poll(&mut self) -> Result<bool> {
        if self.busy {
            if let Some(e) = &self.event {
                if !e.query()? {
                    return Ok(false);
                }
            }
            self.busy = false;
        }
        Ok(true)
    }

    /// `Set::room_behind` for this slot.
    fn room_behind(&self, device: i32, size: usize) -> Option<usize> {
        let at = self.len.next_multiple_of(64);
        // Busy only after a recorded event (`record`).
        (self.busy
            && !self.buf.is_null()
            && self.device == device
            && self.stream == 0
            && at + size <= CHUNK_MAX)
            .then_some(at)
    }

    /// As `poll`, for a caller with nobody to tell: a failed query counts as busy (the slot's
    /// next use reports it) and is cleared from the runtime's last error.
    pub(super) fn idle(&mut self) -> bool {
        self.poll().unwrap_or_else(|_| {
            crate::safe::runtime::take_last_cuda_error();
            false
        })
    }
}

/// The slots of one copy.
pub(super) struct Set {
    pub(super) slots: Vec<Mutex<Slot>>,
    /// The slot of the next copy's first chunk (`first_slot`, `used`).
    next: AtomicUsize,
}

static SETS: Mutex<Vec<Arc<Set>>> = Mutex::new(Vec::new());

impl Set {
    fn new() -> Set {
        Set {
            slots: (0..SLOTS)
                .map(|_| {
                    Mutex::new(Slot {
                        buf: std::ptr::null_mut(),
                        pages: None,
                        event: None,
                        device: -1,
                        busy: false,
                        len: 0,
                        stream: 0,
                    })
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// The slot of a copy's first chunk: after the last one the set's previous copy used.
    pub(super) fn first_slot(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }

    /// Notes that a copy starting at slot `first` used `chunks` chunks.
    pub(super) fn used(&self, first: usize, chunks: usize) {
        self.next
            .store((first + chunks) % self.slots.len(), Ordering::Relaxed);
    }

    /// Where in slot `k`'s buffer an H2D copy of `size` bytes on the legacy stream of `device`
    /// may be written behind the slot's possibly pending last use on that stream (its DMA runs
    /// after it; its re-recorded event completes after both). Only the legacy stream: another
    /// handle may have been destroyed and made again. None when idle or lacking room.
    pub(super) fn room_behind(&self, k: usize, device: i32, size: usize) -> Option<usize> {
        lock(&self.slots[k % self.slots.len()]).room_behind(device, size)
    }

    /// As `room_behind`, asking the slot's event; also says whether its DMA may still be pending
    /// (a failed query counts as pending and is cleared).
    fn room_behind_pending(&self, k: usize, device: i32, size: usize) -> (Option<usize>, bool) {
        let mut s = lock(&self.slots[k % self.slots.len()]);
        if s.room_behind(device, 0).is_none() {
            return (None, false);
        }
        match s.poll() {
            Ok(true) => (None, false),
            Ok(false) => (s.room_behind(device, size), true),
            Err(_) => {
                crate::safe::runtime::take_last_cuda_error();
                (None, true)
            }
        }
    }

    /// The bytes of DMAs still pending on the set's slots, and of those slot `first`'s (each busy
    /// slot's event asked; a failed query counts as pending).
    pub(super) fn pending_bytes(&self, first: usize) -> (usize, usize) {
        for s in &self.slots {
            lock(s).idle();
        }
        self.busy_bytes(first)
    }

    /// As `pending_bytes`, from what the slots know (no CUDA call).
    fn busy_bytes(&self, first: usize) -> (usize, usize) {
        let first = first % self.slots.len();
        let mut total = 0;
        let mut oldest = 0;
        for (i, s) in self.slots.iter().enumerate() {
            let s = lock(s);
            if s.busy {
                total += s.len;
                if i == first {
                    oldest = s.len;
                }
            }
        }
        (total, oldest)
    }

    /// Makes the missing buffers out of huge pages where the kernel gives them (`pinned_pages`,
    /// docs/caches.md), else from `cudaHostAlloc` at once (a failure there is the slot's user's).
    pub(super) fn make_buffers(&self) {
        if !super::pinned_pages::available() {
            return;
        }
        let missing: Vec<usize> = (0..self.slots.len())
            .filter(|&k| lock(&self.slots[k]).buf.is_null())
            .collect();
        if missing.is_empty() {
            return;
        }
        let mappings = map_at_once(missing.len());
        // Bookkeeping that touches no captured work: allowed while another thread captures.
        let _relaxed = crate::safe::capture::Relaxed::new();
        for (k, mapping) in missing.into_iter().zip(mappings) {
            // Failures are handled here: not left as cudart's last error for the application.
            let pages = match mapping.map(Mapping::register) {
                Some(Ok(pages)) => Some(pages),
                Some(Err(_)) => {
                    crate::safe::runtime::take_last_cuda_error();
                    None
                }
                None => None,
            };
            let mut s = lock(&self.slots[k]);
            match pages {
                Some(pages) => {
                    s.buf = pages.as_ptr();
                    s.pages = Some(pages);
                }
                None => {
                    if s.buffer().is_err() {
                        crate::safe::runtime::take_last_cuda_error();
                    }
                }
            }
        }
    }

    /// The slot of chunk `k`.
    pub(super) fn slot(&self, k: usize) -> MutexGuard<'_, Slot> {
        lock(&self.slots[k % self.slots.len()])
    }

    fn idle(&self) -> bool {
        self.slots.iter().all(|s| lock(s).idle())
    }

    /// True when no slot has a use that may still be pending (no CUDA call).
    pub(super) fn known_idle(&self) -> bool {
        self.slots.iter().all(|s| !lock(s).busy)
    }

    /// Waits for every slot's last use.
    pub(super) fn wait_all(&self) -> Result<()> {
        self.slots.iter().try_for_each(|s| lock(s).wait())
    }

    /// Frees the buffers of an idle set; the first failure is returned.
    fn free(&self) -> Result<()> {
        let mut first_err = None;
        for s in &self.slots {
            let mut s = lock(s);
            s.event = None;
            // The set is idle (`idle` or `wait_all` said so); each buffer is freed once.
            let freed = match s.pages.take() {
                // SAFETY: huge pages of `make_buffers`, unused by queued work (above).
                Some(pages) => unsafe { pages.free() },
                // SAFETY: a buffer from `alloc_host_portable`, unused by queued work (above).
                None if !s.buf.is_null() => unsafe { crate::safe::memory::free_host(s.buf.cast()) },
                None => Ok(()),
            };
            if let Err(e) = freed {
                first_err.get_or_insert(e);
            }
            s.buf = std::ptr::null_mut();
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// `n` mappings of `CHUNK_MAX` bytes, made at once on a thread each; None where one failed.
fn map_at_once(n: usize) -> Vec<Option<Mapping>> {
    std::thread::scope(|scope| {
        let others: Vec<_> = (1..n)
            .map(|_| {
                std::thread::Builder::new()
                    .name("llaisys-staging".into())
                    .spawn_scoped(scope, || Mapping::new(CHUNK_MAX).ok())
            })
            .collect();
        let mut made = vec![Mapping::new(CHUNK_MAX).ok()];
        for other in others {
            made.push(match other {
                Ok(thread) => thread.join().ok().flatten(),
                Err(_) => Mapping::new(CHUNK_MAX).ok(),
            });
        }
        made
    })
}

/// A set for one copy: one known to be idle; else, of several free sets, one whose events have
/// completed (a set behind long work must not hold up a copy on another stream); else the one
/// given back longest ago (its copies order themselves after its pending uses); else a new one.
pub(super) fn take() -> Arc<Set> {
    let mut sets = lock(&SETS);
    let free = |s: &Arc<Set>| Arc::strong_count(s) == 1;
    let several = sets.iter().filter(|s| free(s)).count() > 1;
    let pick = sets
        .iter()
        .position(|s| free(s) && s.known_idle())
        .or_else(|| {
            several
                .then(|| sets.iter().position(|s| free(s) && s.idle()))
                .flatten()
        })
        .or_else(|| sets.iter().position(free));
    if let Some(i) = pick {
        // `remove`, not `swap_remove`: the rest stay in the order they were given back.
        return sets.remove(i);
    }
    drop(sets);
    Arc::new(Set::new())
}

/// Per device (bit `device`, 63 for devices from 63): an H2D copy on its legacy stream returned
/// with DMAs that may still be in flight; cleared by `take_behind` once none is.
static H2D_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

fn device_bit(device: i32) -> u64 {
    1 << device.clamp(0, 63)
}

/// Notes that an H2D copy on the legacy stream of `device` returned with DMAs in flight.
pub(super) fn h2d_queued(device: i32) {
    H2D_IN_FLIGHT.fetch_or(device_bit(device), Ordering::Relaxed);
}

/// False when no H2D copy on any device's legacy stream may be in flight (one atomic load).
pub(super) fn h2d_maybe_in_flight() -> bool {
    H2D_IN_FLIGHT.load(Ordering::Relaxed) != 0
}

/// A kept set whose last used slot has a DMA pending on the legacy stream of `device` and room
/// behind it for `size` bytes: (set, slot, offset). Clears the device's flag when none is pending.
pub(super) fn take_behind(device: i32, size: usize) -> Option<(Arc<Set>, usize, usize)> {
    let bit = device_bit(device);
    if H2D_IN_FLIGHT.load(Ordering::Relaxed) & bit == 0 {
        return None;
    }
    let mut sets = lock(&SETS);
    let mut pending = false;
    for i in 0..sets.len() {
        let set = &sets[i];
        if Arc::strong_count(set) != 1 {
            continue;
        }
        let last = set.first_slot() + set.slots.len() - 1;
        let (room, still) = set.room_behind_pending(last, device, size);
        pending |= still;
        if let Some(at) = room {
            return Some((sets.remove(i), last, at));
        }
    }
    if !pending {
        H2D_IN_FLIGHT.fetch_and(!bit, Ordering::Relaxed);
    }
    None
}

/// Returns a set for reuse; idle sets beyond `MAX_SETS` are freed.
pub(super) fn give_back(set: Arc<Set>) {
    let extra = {
        let mut sets = lock(&SETS);
        sets.push(set);
        let mut extra = Vec::new();
        while sets.len() > MAX_SETS {
            match sets.iter().position(|s| s.idle()) {
                Some(i) => extra.push(sets.remove(i)),
                None => break,
            }
        }
        extra
    };
    for set in extra {
        // Nobody to tell: a failed free's buffers are let go, never freed twice.
        if set.free().is_err() {
            crate::safe::runtime::take_last_cuda_error();
        }
    }
}

/// Frees the staging buffers no copy is using (waiting for copies still in flight on them).
pub(crate) fn release() -> Result<()> {
    let sets = std::mem::take(&mut *lock(&SETS));
    let mut first_err = None;
    for set in sets {
        if let Err(e) = set.wait_all().and_then(|()| set.free()) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_start_at_the_slot_after_the_last_one_used() {
        let set = Set::new();
        let n = set.slots.len();
        assert_eq!(set.first_slot(), 0);
        set.used(0, 3);
        assert_eq!(set.first_slot(), 3);
        set.used(3, 1);
        assert_eq!(set.first_slot(), 4 % n);
        set.used(set.first_slot(), 2 * n + 1);
        assert_eq!(set.first_slot(), (4 + 1) % n);
        // Chunk k of a copy starting at slot f is slot (f + k) mod n.
        let f = set.first_slot();
        let at = |k: usize| {
            let slot = set.slot(f + k);
            &*slot as *const Slot
        };
        assert_eq!(at(n + 2), at(2));
        assert_ne!(at(1), at(2));
    }

    #[test]
    fn pending_bytes_count_only_uses_that_may_be_in_flight() {
        let set = Set::new();
        assert_eq!(set.busy_bytes(0), (0, 0));
        for (i, (busy, len)) in [(true, 100), (false, 7), (true, 30), (true, 5)]
            .into_iter()
            .enumerate()
            .take(set.slots.len())
        {
            let mut s = lock(&set.slots[i]);
            s.busy = busy;
            s.len = len;
        }
        assert_eq!(set.busy_bytes(0), (135, 100));
        assert_eq!(set.busy_bytes(1), (135, 0));
        assert_eq!(set.busy_bytes(2 + set.slots.len()), (135, 30));
    }

    #[test]
    fn a_copy_goes_behind_a_pending_use_only_on_its_legacy_stream_and_with_room() {
        let set = Set::new();
        let k = set.slots.len() - 1;
        let setup = |busy: bool, len: usize, device: i32, stream: usize| {
            let mut s = lock(&set.slots[k]);
            // Never dereferenced here; `free` is never called on this set.
            s.buf = std::ptr::NonNull::<u8>::dangling().as_ptr();
            (s.busy, s.len, s.device, s.stream) = (busy, len, device, stream);
        };
        setup(true, 1000, 0, 0);
        assert_eq!(set.room_behind(k, 0, 4096), Some(1024), "64-byte aligned");
        assert_eq!(set.room_behind(k + set.slots.len(), 0, 4096), Some(1024));
        assert_eq!(set.room_behind(k, 0, CHUNK_MAX - 1024), Some(1024));
        assert_eq!(set.room_behind(k, 0, CHUNK_MAX - 1023), None, "no room");
        assert_eq!(set.room_behind(k, 1, 4096), None, "another device");
        setup(true, 1000, 0, 0x1234);
        assert_eq!(set.room_behind(k, 0, 4096), None, "another stream");
        setup(false, 1000, 0, 0);
        assert_eq!(set.room_behind(k, 0, 4096), None, "idle: taken whole");
        lock(&set.slots[k]).buf = std::ptr::null_mut();
    }

    #[test]
    fn a_device_flagged_with_no_set_in_flight_is_cleared_and_nothing_is_taken() {
        // Device 62: no copy of this test process flags it.
        let bit = device_bit(62);
        assert_eq!(H2D_IN_FLIGHT.load(Ordering::Relaxed) & bit, 0);
        h2d_queued(62);
        assert!(h2d_maybe_in_flight());
        assert_ne!(H2D_IN_FLIGHT.load(Ordering::Relaxed) & bit, 0);
        assert!(take_behind(62, 4096).is_none());
        assert_eq!(H2D_IN_FLIGHT.load(Ordering::Relaxed) & bit, 0, "cleared");
        assert_eq!(device_bit(63), device_bit(200));
        assert_eq!(device_bit(-1), 1);
    }
}

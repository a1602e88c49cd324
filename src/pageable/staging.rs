//! Pinned staging buffers of the fast path: a set holds one slot per chunk in flight (`SLOTS`),
//! each slot a pinned buffer (made on first use) and the event of its last use. A slot is used
//! by one thread at a time (its lock) and overwritten only once its event has completed. Sets
//! are kept for reuse, at most `MAX_SETS` idle.

use super::CHUNK_MAX;
use crate::cudart::StreamHandle;
use crate::error::Result;
use crate::event::Event;
use crate::sync::lock;
use std::sync::{Arc, Mutex, MutexGuard};

/// Staging buffers per copy: chunks in flight at once (more were no faster: docs/caches.md).
const SLOTS: usize = 4;
/// Idle sets kept for reuse.
const MAX_SETS: usize = 2;

/// One staging buffer and the event of its last use.
pub(super) struct Slot {
    buf: *mut u8,
    /// Made on `device` (events are per device); None before the first use.
    event: Option<Event>,
    device: i32,
    busy: bool,
}

// SAFETY: the raw pointer is the only field that is not Send: it is pinned host memory that the
// slot owns (no other thread holds it outside the slot's lock), valid on any thread.
unsafe impl Send for Slot {}

impl Slot {
    /// The slot's buffer (CHUNK_MAX bytes), made on first use; it may still be in use (`poll`).
    pub(super) fn buffer(&mut self) -> Result<*mut u8> {
        if self.buf.is_null() {
            self.buf = crate::memory::alloc_host_portable(CHUNK_MAX)?.cast();
        }
        Ok(self.buf)
    }

    /// Makes the slot ready for a chunk on `device`: its buffer exists, its last use has
    /// completed (or, after `order_before_dma`, is ordered before the next DMA on its stream),
    /// its event is of that device. Returns the buffer (CHUNK_MAX bytes).
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

    /// Records the slot's event on `stream` (of the device the slot was prepared for): the
    /// buffer is in use until the work queued there so far has completed.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream of that device.
    pub(super) unsafe fn record(&mut self, stream: StreamHandle) -> Result<()> {
        if let Some(e) = &self.event {
            // SAFETY: `stream` is NULL or a live stream of the device the event was made on
            // (this function's contract; `prepare` made the event on that device).
            unsafe { e.record_raw(stream) }?;
            self.busy = true;
        }
        Ok(())
    }

    /// Orders the slot's next use, a DMA into its buffer (D2H), after its last use on the GPU
    /// instead of the host: a use that may still be pending on `device` is waited for by
    /// `stream` (`cudaStreamWaitEvent`), so that the DMA can be queued at once; a use on
    /// another device is waited for here. Nothing is asked of CUDA when no use is pending.
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
                    unsafe { crate::stream::wait_event(stream, e.as_raw()) }?;
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

    /// True once the slot's last use has completed (without waiting); an error of the event
    /// (the copy it follows failed) is returned.
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

    fn idle(&mut self) -> bool {
        if self.busy && matches!(self.event.as_ref().map(Event::query), Some(Ok(true))) {
            self.busy = false;
        }
        !self.busy
    }
}

/// The slots of one copy.
pub(super) struct Set {
    pub(super) slots: Vec<Mutex<Slot>>,
}

static SETS: Mutex<Vec<Arc<Set>>> = Mutex::new(Vec::new());

impl Set {
    fn new() -> Set {
        Set {
            slots: (0..SLOTS)
                .map(|_| {
                    Mutex::new(Slot {
                        buf: std::ptr::null_mut(),
                        event: None,
                        device: -1,
                        busy: false,
                    })
                })
                .collect(),
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
            if !s.buf.is_null() {
                // SAFETY: a buffer from `alloc_host_portable`, freed once (set to NULL next);
                // the set is idle (`free`'s callers: `idle` or `wait_all` said so), so no copy
                // in flight reads or writes it.
                if let Err(e) = unsafe { crate::memory::free_host(s.buf.cast()) } {
                    first_err.get_or_insert(e);
                }
                s.buf = std::ptr::null_mut();
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// A set for one copy: one known to be idle; else, of several free sets, one whose events have
/// completed (asked of CUDA: a set last used on a stream behind long work must not hold up a
/// copy on another stream); else the one given back longest ago, whose slots may still wait on
/// earlier asynchronous copies (an H2D copy polls or waits for each slot before writing it, a
/// D2H copy orders its DMA after the slot's last use on its stream: a sync H2D returns with its
/// last chunks in flight, and the next copy must not pay for new pinned buffers); else a new
/// one (only while other copies hold every kept set). The common case, one copy after another,
/// finds one free set and asks CUDA nothing: a query of each slot's event would delay the first
/// chunk of an H2D copy that follows an H2D copy.
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
        // Nobody to tell from here; release reports such failures.
        let _ = set.free();
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

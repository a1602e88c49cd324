//! Work on one device's memory queued on a stream of another device.
//!
//! A free on a device's legacy stream is not ordered after streams of other devices, which may
//! still use the block (llaisys creates a runtime's stream before set_device, so device 1's
//! runtime stream may belong to device 0). Once more than one device is in use, memcpy_async
//! notes each (memory device, stream of another device) pair; free_device and destroy_stream
//! make the legacy stream wait for an event recorded on each noted stream first.
//!
//! While a capture forbids a legacy stream, an allocation that needs it is refused with a
//! capture error, and a free is kept (`deferred`), ordered when it is done.

use super::in_use;
use crate::cache::legacy_stream::Usable;
use crate::cudart::calls::StreamHandle;
use crate::error::{CudaError, Error, Result};
use crate::safe::event::Event;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// A stream (0: the legacy stream of `stream_device`) that used memory of `memory_device`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Note {
    memory_device: i32,
    stream: usize,
    stream_device: i32,
}

#[derive(Default)]
struct State {
    notes: Vec<Note>,
    /// One event per device, re-recorded for each wait: a queued wait keeps the work the event
    /// stood for when the wait was queued.
    events: HashMap<i32, Event>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Bumped when a stream is destroyed: a thread's remembered note is valid within one epoch.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static LAST: Cell<(Option<Note>, u64)> = const { Cell::new((None, u64::MAX)) };
}

/// True once more than one device is in use (only then is anything noted).
#[inline]
pub(crate) fn active() -> bool {
    in_use::several()
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    f(crate::util::sync::lock(&STATE).get_or_insert_with(State::default))
}

/// Permission to use the legacy stream of `device`, or the refusal while a capture forbids it.
/// Taken before `STATE` (the gate comes first); taken again inside, it does not lock again.
fn legacy_of(device: i32) -> Result<Usable> {
    crate::safe::device::with(device, || crate::cache::legacy_stream::usable(device))?.ok_or_else(
        || {
            Error::capture(
                "cudaEventRecord",
                CudaError::STREAM_CAPTURE_IMPLICIT,
                format!(
                "device {device}: ordering work across devices uses its legacy stream, which a \
                 capture in progress forbids; synchronize the streams of other devices that use \
                 this device's memory before the capture, or end it first"
            ),
            )
        },
    )
}

/// [`legacy_of`] `device` when `stream` is 0 (its legacy stream); None for another stream.
fn legacy_if_null(stream: usize, device: i32) -> Result<Option<Usable>> {
    (stream == 0).then(|| legacy_of(device)).transpose()
}

/// Called before a copy (or memset) touching memory of `memory_device` is queued on `stream` of
/// `stream_device` (None: NULL, the current device). The first time a stream touches another
/// device's memory, it waits for the work queued so far on that device, and the pair is noted.
pub(crate) fn before_use(
    memory_device: i32,
    stream: StreamHandle,
    stream_device: Option<i32>,
) -> Result<()> {
    if !active() {
        return Ok(());
    }
    let stream_device = match stream_device {
        Some(d) => d,
        None => crate::safe::device::current()?,
    };
    if stream_device == memory_device {
        return Ok(());
    }
    let note = Note {
        memory_device,
        stream: stream as usize,
        stream_device,
    };
    let epoch = EPOCH.load(Relaxed);
    if LAST.with(Cell::get) == (Some(note), epoch) {
        return Ok(());
    }
    let _legacy = legacy_of(memory_device)?;
    with_state(|s| {
        if !s.notes.contains(&note) {
            s.record(memory_device, 0, memory_device)?;
            s.wait(note.stream, note.stream_device, memory_device)?;
            s.notes.push(note);
        }
        Ok::<(), crate::error::Error>(())
    })?;
    LAST.with(|l| l.set((Some(note), epoch)));
    Ok(())
}

impl State {
    /// The notes that `keep` accepts.
    fn notes_where(&self, keep: impl Fn(&Note) -> bool) -> Vec<Note> {
        self.notes.iter().copied().filter(|n| keep(n)).collect()
    }

    /// The event of `device` (made on first use).
    fn event(&mut self, device: i32) -> Result<&Event> {
        use std::collections::hash_map::Entry;
        Ok(match self.events.entry(device) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => v.insert(Event::on_device(device)?),
        })
    }

    /// Records the event of `device` on `stream` of `device` (0: that device's legacy stream).
    fn record(&mut self, device: i32, stream: usize, stream_device: i32) -> Result<()> {
        let _legacy = legacy_if_null(stream, stream_device)?;
        let s = stream as StreamHandle;
        let e = self.event(device)?;
        crate::safe::device::for_stream(s, stream_device, || {
            // SAFETY: `s` is NULL or a live stream of `stream_device` (noted while live and
            // forgotten before it is destroyed); the event is of that device.
            unsafe { e.record_raw(s) }
        })
    }

    /// Makes `stream` of `stream_device` (0: that device's legacy stream) wait for the event of
    /// `device`.
    fn wait(&mut self, stream: usize, stream_device: i32, device: i32) -> Result<()> {
        let _legacy = legacy_if_null(stream, stream_device)?;
        let s = stream as StreamHandle;
        let e = self.event(device)?.as_raw();
        crate::safe::device::for_stream(s, stream_device, || {
            // SAFETY: `s` is NULL or a live stream (as in `record`); `e` is our live event.
            unsafe { crate::safe::stream::wait_event(s, e) }
        })
    }

    /// The legacy stream of the note's memory device waits for the work queued on its stream.
    fn free_waits_for(&mut self, n: Note) -> Result<()> {
        self.record(n.stream_device, n.stream, n.stream_device)?;
        self.wait(0, n.memory_device, n.stream_device)
    }
}

/// Before a free on the legacy stream of `device`: orders it after the work queued so far on
/// every noted stream of another device that used `device`'s memory.
pub(crate) fn order_before_free(device: i32) -> Result<()> {
    if !active() {
        return Ok(());
    }
    let _legacy = legacy_of(device)?;
    with_state(|s| {
        let notes = s.notes_where(|n| n.memory_device == device);
        notes.into_iter().try_for_each(|n| s.free_waits_for(n))
    })
}

/// After an allocation on the legacy stream of `device`: every noted stream of another device
/// that uses `device`'s memory waits for it, so a reused block is not touched before its last
/// users are done.
pub(crate) fn order_after_alloc(device: i32) -> Result<()> {
    if !active() {
        return Ok(());
    }
    // Nothing noted: no use of the legacy stream, so no refusal during a capture (a note made
    // after this look orders itself after this allocation).
    if with_state(|s| !s.notes.iter().any(|n| n.memory_device == device)) {
        return Ok(());
    }
    let _legacy = legacy_of(device)?;
    with_state(|s| {
        let notes = s.notes_where(|n| n.memory_device == device);
        if notes.is_empty() {
            return Ok(());
        }
        s.record(device, 0, device)?;
        notes
            .into_iter()
            .try_for_each(|n| s.wait(n.stream, n.stream_device, device))
    })
}

/// Before `stream` is destroyed: the legacy stream of every device whose memory it used waits
/// for its work, and its notes go.
pub(crate) fn stream_destroyed(stream: StreamHandle) -> Result<()> {
    if !active() {
        return Ok(());
    }
    EPOCH.fetch_add(1, Relaxed);
    let _legacy = legacy_of(crate::safe::device::current()?)?;
    with_state(|s| {
        let mine = s.notes_where(|n| n.stream == stream as usize);
        for n in mine {
            s.free_waits_for(n)?;
        }
        s.notes.retain(|n| n.stream != stream as usize);
        // Again, now that the notes are gone: a note cached meanwhile is void too.
        EPOCH.fetch_add(1, Relaxed);
        Ok(())
    })
}

//! Work on one device's memory queued on a stream of another device.
//!
//! free_device queues the free on the legacy stream of the block's device, which is ordered
//! after that device's blocking streams, but not after streams of other devices. Such a stream
//! may still use the block: llaisys creates a runtime's stream before set_device, so the stream
//! of the runtime of device 1 belongs to device 0 while its copies move device 1's memory (CUDA
//! runs a copy queued on a stream of another device). memcpy_async therefore notes, once more
//! than one device is in use, each (memory device, stream of another device) pair it sees;
//! free_device on a device makes its legacy stream wait for an event recorded on each noted
//! stream first, and destroy_stream does the same before the stream goes. With one device
//! nothing is noted and nothing is paid.

use crate::error::Result;
use crate::raw;
use std::cell::Cell;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// One bit per device in use (set_device, a stream, a pool).
static SEEN: AtomicU64 = AtomicU64::new(0);

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
    events: HashMap<i32, usize>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Bumped when a stream is destroyed: a thread's remembered note is valid within one epoch.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static LAST: Cell<(Option<Note>, u64)> = const { Cell::new((None, u64::MAX)) };
}

/// Notes that `device` is in use. The first time, it is given access to the memory pools of
/// the devices already in use (see `cache::device::device_seen`); it counts as in use once
/// that has worked (a failure is reported and retried at the next call).
pub fn device_seen(device: i32) -> Result<()> {
    let Ok(bit) = u32::try_from(device) else {
        return Ok(());
    };
    if bit >= 64 || SEEN.load(Relaxed) & (1 << bit) != 0 {
        return Ok(());
    }
    super::device::device_seen(device, || SEEN.fetch_or(1 << bit, Relaxed))
}

/// The devices in use, one bit each.
pub fn seen() -> u64 {
    SEEN.load(Relaxed)
}

/// True once more than one device is in use.
pub fn active() -> bool {
    SEEN.load(Relaxed).count_ones() > 1
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(State::default))
}

/// The device owning device memory at `p`, None for anything else.
fn memory_device(p: *const c_void) -> Option<i32> {
    // SAFETY: plain data, filled by CUDA.
    let mut a: raw::cudaPointerAttributes = unsafe { std::mem::zeroed() };
    // SAFETY: any pointer value may be asked about.
    let rc = unsafe { raw::cudaPointerGetAttributes(&mut a, p) };
    if rc.0 != 0 {
        crate::runtime::take_last_cuda_error();
        return None;
    }
    (a.type_ == raw::cudaMemoryType::cudaMemoryTypeDevice).then_some(a.device)
}

/// Called before a copy (or memset) touching device memory at `ptr` is queued on `stream`
/// (NULL: the legacy stream of the current device), which belongs to `stream_device` (None for
/// NULL). The first time a stream of one device touches another device's memory, it is made to
/// wait for the work queued so far on that device (a block it gets may have been freed behind
/// work there), and the pair is noted.
pub fn before_use(
    ptr: *const c_void,
    stream: raw::cudaStream_t,
    stream_device: Option<i32>,
) -> Result<()> {
    if !active() {
        return Ok(());
    }
    let Some(memory_device) = memory_device(ptr) else {
        return Ok(());
    };
    let stream_device = match stream_device {
        Some(d) => d,
        None => crate::device::current()?,
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
    with_state(|s| {
        if !s.notes.contains(&note) {
            let e = s.event(memory_device)?;
            record(e, 0, memory_device)?;
            wait(note.stream, note.stream_device, e)?;
            s.notes.push(note);
        }
        Ok::<(), crate::Error>(())
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
    fn event(&mut self, device: i32) -> Result<raw::cudaEvent_t> {
        if let Some(&e) = self.events.get(&device) {
            return Ok(e as raw::cudaEvent_t);
        }
        let mut e: raw::cudaEvent_t = std::ptr::null_mut();
        crate::device::with(
            device,
            || cuda!(cudaEventCreateWithFlags(&mut e, raw::cudaEventDisableTiming); "device={device}"),
        )?;
        self.events.insert(device, e as usize);
        Ok(e)
    }
}

/// Records `event` on `stream` of `device` (NULL: that device's legacy stream).
fn record(event: raw::cudaEvent_t, stream: usize, device: i32) -> Result<()> {
    let s = stream as raw::cudaStream_t;
    crate::device::for_stream(
        s,
        device,
        || cuda!(cudaEventRecord(event, s); "stream={s:p} device={device}"),
    )
}

/// Makes `stream` of `device` (NULL: that device's legacy stream) wait for `event`.
fn wait(stream: usize, device: i32, event: raw::cudaEvent_t) -> Result<()> {
    let s = stream as raw::cudaStream_t;
    crate::device::for_stream(
        s,
        device,
        || cuda!(cudaStreamWaitEvent(s, event, 0); "stream={s:p} device={device}"),
    )
}

/// The legacy stream of the note's memory device waits for the work queued on its stream.
fn free_waits_for(state: &mut State, n: Note) -> Result<()> {
    let e = state.event(n.stream_device)?;
    record(e, n.stream, n.stream_device)?;
    wait(0, n.memory_device, e)
}

/// Before a free on the legacy stream of `device`: orders it after the work queued so far on
/// every noted stream of another device that used `device`'s memory.
pub fn order_before_free(device: i32) -> Result<()> {
    if !active() {
        return Ok(());
    }
    with_state(|s| {
        let notes = s.notes_where(|n| n.memory_device == device);
        notes.into_iter().try_for_each(|n| free_waits_for(s, n))
    })
}

/// After an allocation on the legacy stream of `device`: every noted stream of another device
/// that uses `device`'s memory waits for it (and so for all earlier work on `device`, which the
/// legacy stream waits for), so a reused block is not touched before its last users are done.
pub fn order_after_alloc(device: i32) -> Result<()> {
    if !active() {
        return Ok(());
    }
    with_state(|s| {
        let notes = s.notes_where(|n| n.memory_device == device);
        if notes.is_empty() {
            return Ok(());
        }
        let e = s.event(device)?;
        record(e, 0, device)?;
        notes
            .into_iter()
            .try_for_each(|n| wait(n.stream, n.stream_device, e))
    })
}

/// Before `stream` is destroyed: the legacy stream of every device whose memory it used waits
/// for its work, and its notes go.
pub fn stream_destroyed(stream: raw::cudaStream_t) -> Result<()> {
    if !active() {
        return Ok(());
    }
    EPOCH.fetch_add(1, Relaxed);
    with_state(|s| {
        let mine = s.notes_where(|n| n.stream == stream as usize);
        for n in mine {
            free_waits_for(s, n)?;
        }
        s.notes.retain(|n| n.stream != stream as usize);
        // Again, now that the notes are gone: a note cached meanwhile is void too.
        EPOCH.fetch_add(1, Relaxed);
        Ok(())
    })
}

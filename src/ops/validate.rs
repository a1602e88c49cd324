//! Checks of C-ABI input that CUDA would not catch, or would catch only by crashing: streams and
//! events we never made (or already destroyed: the handle registries live here), and sizes
//! beyond the address space. The kind-against-memory check of copies is in `copies`.

use crate::cudart::{EventHandle, StreamHandle};
use crate::error::{Error, Result};
use crate::hash::AddrMap;
use crate::sync::lock;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Live streams of ours and the device each belongs to.
static STREAMS: Mutex<Option<AddrMap<i32>>> = Mutex::new(None);
/// Bumped whenever a stream is destroyed: a thread's remembered "this stream is live" is valid
/// only within one epoch.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last (stream, epoch, device) this thread found live.
    static LAST_LIVE: Cell<(usize, u64, i32)> = const { Cell::new((0, u64::MAX, -1)) };
}

/// Takes a stream just made on the current device into the registry (the device counts as in
/// use) and gives up its ownership to the caller of the C API.
pub(crate) fn adopt_stream(made: crate::stream::Stream) -> Result<StreamHandle> {
    let device = crate::device::current()?;
    crate::cache::device::device_seen(device)?;
    let s = made.into_raw();
    stream_created(s, device);
    Ok(s)
}

/// Records a stream made by create_stream on `device`.
fn stream_created(s: StreamHandle, device: i32) {
    lock(&STREAMS)
        .get_or_insert_with(AddrMap::default)
        .insert(s as usize, device);
}

/// Forgets a stream about to be destroyed and returns its device; `Err` when it is not one of
/// ours (never made by create_stream, or destroyed already).
pub(crate) fn stream_destroying(s: StreamHandle) -> Result<i32> {
    let removed = lock(&STREAMS)
        .as_mut()
        .and_then(|map| map.remove(&(s as usize)));
    EPOCH.fetch_add(1, Relaxed);
    removed.ok_or_else(|| unknown_stream(s))
}

/// Puts a stream back after its destruction failed.
pub(crate) fn stream_restored(s: StreamHandle, device: i32) {
    stream_created(s, device);
}

/// `Ok` for NULL (the legacy default stream: `None`) and for live streams of create_stream
/// (`Some` of the device the stream belongs to).
#[inline]
pub(crate) fn check_stream(s: StreamHandle) -> Result<Option<i32>> {
    if s.is_null() {
        return Ok(None);
    }
    let epoch = EPOCH.load(Relaxed);
    let (last, at, device) = LAST_LIVE.with(Cell::get);
    if (last, at) == (s as usize, epoch) {
        return Ok(Some(device));
    }
    look_up_stream(s, epoch)
}

/// check_stream when the thread's last stream was another one: the registry.
#[cold]
#[inline(never)]
fn look_up_stream(s: StreamHandle, epoch: u64) -> Result<Option<i32>> {
    let device = lock(&STREAMS)
        .as_ref()
        .and_then(|map| map.get(&(s as usize)).copied())
        .ok_or_else(|| unknown_stream(s))?;
    LAST_LIVE.with(|c| c.set((s as usize, epoch, device)));
    Ok(Some(device))
}

fn unknown_stream(s: StreamHandle) -> Error {
    Error::invalid_argument(format!(
        "stream={s:p} was not made by create_stream or was already destroyed (streams of other \
         libraries are not accepted; NULL means the legacy default stream)"
    ))
}

static EVENTS: Mutex<Option<AddrMap<()>>> = Mutex::new(None);

/// Records an event made by llaisysNvidiaEventCreate.
pub(crate) fn event_created(e: EventHandle) {
    lock(&EVENTS)
        .get_or_insert_with(AddrMap::default)
        .insert(e as usize, ());
}

/// `Ok` for a live event of ours; with `remove` it is forgotten (about to be destroyed).
pub(crate) fn check_event(e: EventHandle, remove: bool) -> Result<()> {
    let mut set = lock(&EVENTS);
    let known = match set.as_mut() {
        Some(set) if remove => set.remove(&(e as usize)).is_some(),
        Some(set) => set.contains_key(&(e as usize)),
        None => false,
    };
    if known {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "event={e:p} was not made by llaisysNvidiaEventCreate or was already destroyed"
        )))
    }
}

/// Sizes beyond `isize::MAX` cannot describe memory in this process.
#[inline]
pub(crate) fn check_size(size: usize) -> Result<()> {
    if size > isize::MAX as usize {
        return Err(too_large(size));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn too_large(size: usize) -> Error {
    Error::invalid_argument(format!(
        "size={size} is larger than any buffer in this process (at most {})",
        isize::MAX
    ))
}

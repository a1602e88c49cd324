//! Checks of C-ABI input that CUDA would not catch, or would catch only by crashing: streams and
//! events we never made (or already destroyed: the handle registries live here), and sizes
//! beyond the address space. The kind-against-memory check of copies is in `copies`.

use crate::cudart::calls::{EventHandle, StreamHandle};
use crate::error::{Error, Result};
use crate::util::hash::AddrMap;
use crate::util::sync::lock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Live streams of ours and the device each belongs to: the registry, authoritative.
static STREAMS: Mutex<Option<AddrMap<i32>>> = Mutex::new(None);

/// A direct-mapped cache of the registry for `check_stream`, read without a lock: each slot is
/// empty (0) or one live stream and its device in one word (`packed`). It is written only with
/// `STREAMS` held, together with the registry (a stream is cleared from it before it is
/// destroyed), so a slot never names a stream the registry does not hold. A stream that does not
/// fit the packing, or lost its slot to another, is looked up in the registry.
static LIVE: [AtomicU64; LIVE_SLOTS] = [const { AtomicU64::new(0) }; LIVE_SLOTS];
const LIVE_SLOTS: usize = 64;
/// The low 48 bits hold the handle (user-space addresses on x86-64 and aarch64), the high 16 the
/// device.
const HANDLE_BITS: u32 = 48;

/// `s` and `device` in one slot word, None when they do not fit.
fn packed(s: usize, device: i32) -> Option<u64> {
    let device = u16::try_from(device).ok()?;
    let s = u64::try_from(s)
        .ok()
        .filter(|&s| s >> HANDLE_BITS == 0 && s != 0)?;
    Some(u64::from(device) << HANDLE_BITS | s)
}

#[inline]
fn slot_of(s: usize) -> &'static AtomicU64 {
    // Fibonacci hashing: the top bits of the product spread nearby heap addresses.
    let h = (s as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - LIVE_SLOTS.trailing_zeros());
    &LIVE[h as usize]
}

/// Caches `s` (live, of `device`); `STREAMS` is held.
fn cache_live(s: usize, device: i32) {
    if let Some(word) = packed(s, device) {
        slot_of(s).store(word, Relaxed);
    }
}

/// Clears `s` from the cache; `STREAMS` is held.
fn uncache_live(s: usize) {
    let slot = slot_of(s);
    let word = slot.load(Relaxed);
    if word != 0 && word & ((1 << HANDLE_BITS) - 1) == s as u64 {
        slot.store(0, Relaxed);
    }
}

/// Takes a stream just made on the current device into the registry (the device counts as in
/// use) and gives up its ownership to the caller of the C API.
pub(crate) fn adopt_stream(made: crate::safe::stream::Stream) -> Result<StreamHandle> {
    let device = crate::safe::device::current()?;
    crate::cache::device::device_seen(device)?;
    let s = made.into_raw();
    stream_created(s, device);
    Ok(s)
}

/// Records a stream made by create_stream on `device`.
fn stream_created(s: StreamHandle, device: i32) {
    let mut streams = lock(&STREAMS);
    streams
        .get_or_insert_with(AddrMap::default)
        .insert(s as usize, device);
    cache_live(s as usize, device);
}

/// Forgets a stream about to be destroyed and returns its device; `Err` when it is not one of
/// ours (never made by create_stream, or destroyed already).
pub(crate) fn stream_destroying(s: StreamHandle) -> Result<i32> {
    let mut streams = lock(&STREAMS);
    uncache_live(s as usize);
    let removed = streams.as_mut().and_then(|map| map.remove(&(s as usize)));
    drop(streams);
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
    let word = slot_of(s as usize).load(Relaxed);
    if word != 0 && word & ((1 << HANDLE_BITS) - 1) == s as u64 {
        return Ok(Some((word >> HANDLE_BITS) as i32));
    }
    look_up_stream(s)
}

/// check_stream when the cache does not hold the stream: the registry (and the cache then does).
#[cold]
#[inline(never)]
fn look_up_stream(s: StreamHandle) -> Result<Option<i32>> {
    let streams = lock(&STREAMS);
    let device = streams
        .as_ref()
        .and_then(|map| map.get(&(s as usize)).copied())
        .ok_or_else(|| unknown_stream(s))?;
    cache_live(s as usize, device);
    Ok(Some(device))
}

fn unknown_stream(s: StreamHandle) -> Error {
    Error::invalid_argument(format!(
        "stream={s:p} was not made by create_stream or was already destroyed (streams of other \
         libraries are not accepted; NULL means the legacy default stream)"
    ))
}

/// A registry of handles the library made and handed out (events, graphs, executable graphs),
/// each with the device it belongs to: a handle not in it is refused instead of reaching CUDA.
pub(crate) struct Handles {
    set: Mutex<Option<AddrMap<i32>>>,
    /// What the handles are, and the function that makes them (for the refusal).
    what: &'static str,
    maker: &'static str,
}

impl Handles {
    pub(crate) const fn new(what: &'static str, maker: &'static str) -> Handles {
        Handles {
            set: Mutex::new(None),
            what,
            maker,
        }
    }

    /// Records a handle just made on `device`.
    pub(crate) fn add(&self, h: *mut std::os::raw::c_void, device: i32) {
        lock(&self.set)
            .get_or_insert_with(AddrMap::default)
            .insert(h as usize, device);
    }

    /// The device of a live handle; with `remove` it is forgotten (about to be destroyed).
    pub(crate) fn check(&self, h: *mut std::os::raw::c_void, remove: bool) -> Result<i32> {
        let mut set = lock(&self.set);
        let found = match set.as_mut() {
            Some(set) if remove => set.remove(&(h as usize)),
            Some(set) => set.get(&(h as usize)).copied(),
            None => None,
        };
        found.ok_or_else(|| {
            Error::invalid_argument(format!(
                "{}={h:p} was not made by {} or was already destroyed",
                self.what, self.maker
            ))
        })
    }

    /// Destroys a live handle with `destroy`, run with the handle's device current; NULL does
    /// nothing. A handle that `destroy` fails to destroy stays recorded; one it destroyed does
    /// not, also when the device current before cannot be made current again (reported).
    pub(crate) fn destroy(
        &self,
        h: *mut std::os::raw::c_void,
        destroy: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if h.is_null() {
            return Ok(());
        }
        let device = self.check(h, true)?;
        let ran = crate::safe::device::run_on(device, destroy);
        if ran.result.is_err() {
            self.add(h, device);
        }
        ran.into_result()
    }
}

static EVENTS: Handles = Handles::new("event", "llaisysNvidiaEventCreate");

/// Records an event made by llaisysNvidiaEventCreate.
pub(crate) fn event_created(e: EventHandle) {
    EVENTS.add(e.cast(), -1);
}

/// `Ok` for a live event of ours; with `remove` it is forgotten (about to be destroyed).
pub(crate) fn check_event(e: EventHandle, remove: bool) -> Result<()> {
    EVENTS.check(e.cast(), remove).map(|_| ())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Handles no stream of the process can have (no CUDA here: nothing else registers them);
    /// each test uses its own range, tests run in parallel.
    fn handle(base: usize, i: usize) -> StreamHandle {
        (base + i * 0x40) as StreamHandle
    }

    #[test]
    fn a_registered_stream_is_live_with_its_device_until_destroyed() {
        let handles: Vec<_> = (0..200).map(|i| handle(0x7100_0000, i)).collect();
        for (i, &s) in handles.iter().enumerate() {
            stream_created(s, (i % 3) as i32);
        }
        // 200 streams in 64 slots: some share a slot and are found in the registry, twice (the
        // second time from the cache where they won the slot back).
        for _ in 0..2 {
            for (i, &s) in handles.iter().enumerate() {
                assert_eq!(
                    check_stream(s).expect("live"),
                    Some((i % 3) as i32),
                    "{s:p}"
                );
            }
        }
        for (i, &s) in handles[..100].iter().enumerate() {
            assert_eq!(stream_destroying(s).expect("ours"), (i % 3) as i32);
        }
        for (i, &s) in handles.iter().enumerate() {
            let r = check_stream(s);
            if i < 100 {
                let e = r.expect_err("destroyed");
                assert!(e.to_string().contains("already destroyed"), "{e}");
            } else {
                assert_eq!(r.expect("still live"), Some((i % 3) as i32));
            }
        }
        for &s in &handles[100..] {
            stream_destroying(s).expect("ours");
        }
        assert!(handles.iter().all(|&s| check_stream(s).is_err()));
    }

    #[test]
    fn a_restored_stream_is_live_again_and_a_double_destroy_is_refused() {
        let s = handle(0x7200_0000, 0);
        stream_created(s, 5);
        assert_eq!(check_stream(s).expect("live"), Some(5));
        assert_eq!(stream_destroying(s).expect("ours"), 5);
        assert!(check_stream(s).is_err());
        assert!(stream_destroying(s).is_err(), "second destroy");
        stream_restored(s, 5);
        assert_eq!(check_stream(s).expect("restored"), Some(5));
        stream_destroying(s).expect("ours");
    }

    #[test]
    fn handles_and_devices_that_do_not_fit_a_slot_use_the_registry() {
        assert_eq!(packed(0x1000, 7), Some(7 << HANDLE_BITS | 0x1000));
        assert_eq!(packed(0, 0), None);
        assert_eq!(packed(1 << HANDLE_BITS, 0), None);
        assert_eq!(packed(0x1000, -1), None);
        assert_eq!(packed(0x1000, 1 << 16), None);
        let high = (0x7300_0000usize | 1 << 50) as StreamHandle;
        let big_device = handle(0x7300_0000, 1);
        stream_created(high, 1);
        stream_created(big_device, 70_000);
        for _ in 0..2 {
            assert_eq!(check_stream(high).expect("live"), Some(1));
            assert_eq!(check_stream(big_device).expect("live"), Some(70_000));
        }
        stream_destroying(high).expect("ours");
        stream_destroying(big_device).expect("ours");
        assert!(check_stream(high).is_err());
        assert!(check_stream(big_device).is_err());
    }

    #[test]
    fn a_stream_never_made_is_refused_and_null_is_the_legacy_stream() {
        assert_eq!(check_stream(std::ptr::null_mut()).expect("NULL"), None);
        let e = check_stream(handle(0x7400_0000, 0)).expect_err("never made");
        assert!(
            e.to_string().contains("was not made by create_stream"),
            "{e}"
        );
    }
}

//! When the library may queue work of its own on a device's legacy default stream, and where
//! that work goes when it may not.
//!
//! While a blocking stream of the device captures a graph, any work on the legacy stream fails
//! and invalidates that capture. So before each use the library asks [`usable`]: no capture
//! begun through the library is in progress on the device (counted here) and cudart reports no
//! blocking stream capturing. Otherwise the caches keep their work for later and copies and
//! allocations go to a private non-blocking stream ([`side_stream`]), waited for on the host.
//!
//! A capture begun through the library takes the gate for writing while it is counted, and
//! every use of the legacy stream holds it for reading ([`Usable`]): such a capture never begins
//! between a check and the use it allowed. A capture the host begins directly can still race
//! with a use, as with any legacy-stream call of any library.
//!
//! Work on the side stream is ordered after the library's own work still pending on the legacy
//! stream ([`side_stream_ordered`]): a copy that returns with its work pending there (an H2D or
//! D2D `memcpy_sync`) records the device's fence after it ([`fence_after`]), and the caches'
//! recycling barrier is noted ([`note_barrier`]). The side stream waits for both.

use super::MAX_DEVICES;
use crate::cudart::calls::{EventHandle, StreamHandle};
use crate::error::{CudaError, Error, Result};
use crate::safe::capture;
use crate::safe::event::{self, Event};
use crate::util::sync::{lock, read, write};
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

/// How long work caught on the legacy stream by a capture begun just after it waits for that
/// capture to end ([`wait_usable`]).
const CAPTURE_WAIT: Duration = Duration::from_secs(30);

static GATE: RwLock<()> = RwLock::new(());

/// One device's legacy stream as the library sees it.
struct Legacy {
    /// Captures begun through the library on the device and not yet ended.
    captures: AtomicU32,
    /// The device's side stream: 0 until made on first use, then kept for the process.
    side: Mutex<usize>,
    /// The fence of the library's work on the legacy stream ([`fence_after`]).
    fence: Mutex<Fence>,
    /// The caches' recycling barrier event, last recorded there ([`note_barrier`]); 0 before.
    barrier: AtomicUsize,
}

/// Events recorded on the legacy stream after the library's work there, kept for the process
/// (raw handles, 0: none). `now` is recorded after each such work; when a capture refused its
/// record, it is set aside as `before` (the last one recorded, until `now` is recorded again)
/// and a new `now` is made: an event whose record a capture refused is not recorded again.
struct Fence {
    now: usize,
    before: usize,
}

static DEVICES: [Legacy; MAX_DEVICES] = [const {
    Legacy {
        captures: AtomicU32::new(0),
        side: Mutex::new(0),
        fence: Mutex::new(Fence { now: 0, before: 0 }),
        barrier: AtomicUsize::new(0),
    }
}; MAX_DEVICES];

/// The captures' sum over all devices: zero on every eager path, read without a lock.
static ANY: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// How many `Usable` this thread holds: a nested use does not take the gate again (a read
    /// lock taken twice deadlocks once a writer waits between the two).
    static HELD: Cell<u32> = const { Cell::new(0) };
}

fn of(device: i32) -> Result<&'static Legacy> {
    super::checked_entry(&DEVICES, device)
}

/// Permission to use the legacy stream of a device: while it lives, no capture through the
/// library begins.
pub(crate) struct Usable {
    _guard: Option<RwLockReadGuard<'static, ()>>,
}

impl Usable {
    fn take() -> Usable {
        let nested = HELD.with(|h| {
            let n = h.get();
            h.set(n + 1);
            n > 0
        });
        Usable {
            _guard: (!nested).then(|| read(&GATE)),
        }
    }
}

impl Drop for Usable {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
    }
}

/// Some when the legacy stream of `device`, the current device, may be used now: hold the
/// permission while queuing the work. None while a capture is in progress on the device.
pub(crate) fn usable(device: i32) -> Result<Option<Usable>> {
    let permission = Usable::take();
    if of(device)?.captures.load(Relaxed) > 0 || capture::legacy_blocked() {
        return Ok(None);
    }
    Ok(Some(permission))
}

/// The gate alone, for a caller that checks each device itself ([`capturing`], then CUDA): while
/// it lives no capture through the library begins. Take it before any lock of the caches.
pub(crate) fn gate() -> Usable {
    Usable::take()
}

/// As [`usable`] for the current device (asked only while a capture through the library runs).
pub(crate) fn usable_current() -> Result<Option<Usable>> {
    let permission = Usable::take();
    if any_capture() && crate::safe::device::current().is_ok_and(capturing) {
        return Ok(None);
    }
    if capture::legacy_blocked() {
        return Ok(None);
    }
    Ok(Some(permission))
}

/// For work asked for on NULL: the permission to hold while it is queued; None when `on_legacy`
/// is false; the refusal naming `call` and `what` while a capture forbids the legacy stream.
pub(crate) fn permit(on_legacy: bool, call: &'static str, what: &str) -> Result<Option<Usable>> {
    if !on_legacy {
        return Ok(None);
    }
    match usable_current()? {
        Some(permission) => Ok(Some(permission)),
        None => Err(refused(call, what)),
    }
}

/// The refusal of a call that needs the legacy stream of the current device while a capture
/// forbids it (`call` is the CUDA call it would have made).
pub(crate) fn refused(call: &'static str, what: &str) -> Error {
    Error::capture(
        call,
        crate::error::CudaError::STREAM_CAPTURE_IMPLICIT,
        format!(
            "{what} uses the legacy default stream, which a stream capturing a graph on this \
             device forbids until the capture ends"
        ),
    )
}

/// True while any capture begun through the library is in progress (on any device): only then
/// do the eager paths need to look at capture modes.
#[inline]
pub(crate) fn any_capture() -> bool {
    ANY.load(Relaxed) > 0
}

/// True while a capture begun through the library is in progress on `device`.
pub(crate) fn capturing(device: i32) -> bool {
    super::entry(&DEVICES, device).is_some_and(|l| l.captures.load(Relaxed) > 0)
}

/// Counts a capture through the library on `device` and runs `begin`, which begins it; once
/// counted, nothing of the library uses the device's legacy stream until [`ended`]. Uses of the
/// legacy stream already under way finish first. When `begin` fails, nothing is counted.
pub(crate) fn begin_counted<T>(device: i32, begin: impl FnOnce() -> Result<T>) -> Result<T> {
    let legacy = of(device)?;
    {
        let _exclusive = write(&GATE);
        legacy.captures.fetch_add(1, Relaxed);
        ANY.fetch_add(1, Relaxed);
    }
    let result = begin();
    if result.is_err() {
        ended(device);
    }
    result
}

/// Uncounts a capture of `device` counted by [`begin_counted`] (it ended, or failed to begin).
pub(crate) fn ended(device: i32) {
    if let Some(legacy) = super::entry(&DEVICES, device) {
        if legacy
            .captures
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            ANY.fetch_sub(1, Relaxed);
        }
    }
}

/// The library's private non-blocking stream of `device` (current), for its work while the
/// legacy stream may not be used. It never captures.
pub(crate) fn side_stream(device: i32) -> Result<StreamHandle> {
    let mut side = lock(&of(device)?.side);
    if *side == 0 {
        let _relaxed = capture::Relaxed::new();
        *side = crate::safe::stream::Stream::with_flags(true, 0)?.into_raw() as usize;
    }
    Ok(*side as StreamHandle)
}

/// The side stream of `device` (current), ordered after the library's work on the device's
/// legacy stream that may still be pending: the fence and the recycling barrier. Work queued on
/// it then reads what earlier copies wrote and writes only memory their users have left.
pub(crate) fn side_stream_ordered(device: i32) -> Result<StreamHandle> {
    let side = side_stream(device)?;
    let legacy = of(device)?;
    let fence = lock(&legacy.fence);
    for e in [fence.now, fence.before, legacy.barrier.load(Relaxed)] {
        if e != 0 {
            // SAFETY: the side stream is live and of `device`, as the events (made there and
            // kept for the process; one never recorded is no wait).
            unsafe { crate::safe::stream::wait_event(side, e as EventHandle) }?;
        }
    }
    Ok(side)
}

/// Notes `marker`, just recorded on the legacy stream of `device` as the recycling barrier:
/// side-stream work waits for it. The event must live for the process.
pub(crate) fn note_barrier(device: i32, marker: EventHandle) {
    if let Some(legacy) = super::entry(&DEVICES, device) {
        legacy.barrier.store(marker as usize, Relaxed);
    }
}

/// Waits until the legacy stream of `device` (current) may be used again, at most 30 s; the
/// permission to hold while using it. Past that, the refusal of `call` with the detail `why`
/// gives (passed the seconds waited).
pub(crate) fn wait_usable(
    device: i32,
    call: &'static str,
    why: impl FnOnce(u64) -> String,
) -> Result<Usable> {
    let start = Instant::now();
    loop {
        if let Some(permission) = usable(device)? {
            return Ok(permission);
        }
        if start.elapsed() > CAPTURE_WAIT {
            return Err(Error::capture(
                call,
                CudaError::STREAM_CAPTURE_IMPLICIT,
                why(CAPTURE_WAIT.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// After the library's own work on the legacy stream of `device` (current) that may still be
/// pending when its call returns (an H2D or D2D `memcpy_sync`): records the device's fence
/// there, so that work a capture sends to the side stream later is ordered after it. When a
/// capture begun since forbids the legacy stream: waits for `covering` (an event recorded after
/// that work) instead; without one, until the capture ends (at most 30 s).
///
/// # Safety
/// `covering` is None or a live event of `device`.
pub(crate) unsafe fn fence_after(device: i32, covering: Option<EventHandle>) -> Result<()> {
    let legacy = of(device)?;
    let mut permission = usable(device)?;
    loop {
        if let Some(_held) = permission.take() {
            if record_fence(legacy, device)? {
                return Ok(());
            }
        }
        if let Some(e) = covering {
            let _relaxed = capture::Relaxed::new();
            // SAFETY: `covering` is a live event (this function's contract).
            return unsafe { event::synchronize(e) };
        }
        permission = Some(wait_usable(device, "cudaEventRecord", |secs| {
            format!(
                "a copy was queued on the legacy stream of device {device} just before another \
                 thread began a capture there, which has not ended in {secs} s: later copies \
                 during captures cannot be ordered after it"
            )
        })?);
    }
}

/// Records the fence of `legacy` (of `device`, current) on the legacy stream, with the
/// permission held; false when a capture begun since refused it (a new fence is made next).
fn record_fence(legacy: &Legacy, device: i32) -> Result<bool> {
    let mut fence = lock(&legacy.fence);
    if fence.now == 0 {
        fence.now = Event::on_device(device)?.into_raw() as usize;
    }
    // SAFETY: a live event of `device` (kept for the process); NULL is the legacy stream of
    // `device`, the current device.
    match unsafe { event::record(fence.now as EventHandle, std::ptr::null_mut()) } {
        Ok(()) => {
            fence.before = 0;
            Ok(true)
        }
        Err(e) if e.cuda_error() == CudaError::STREAM_CAPTURE_IMPLICIT => {
            crate::safe::runtime::take_last_cuda_error();
            if fence.before == 0 {
                fence.before = fence.now;
            }
            fence.now = 0;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

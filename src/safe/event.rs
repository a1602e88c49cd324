//! CUDA events: `Event` owns one (`cudaEventCreateWithFlags`) and destroys it when dropped.
//! Used to order work between streams and to time work from the device's own clock.

use crate::cudart::calls::{self as cudart, Detail, EventHandle, StreamHandle};
use crate::error::Result;

/// `cudaEventDefault`: an event that records timing.
pub const DEFAULT: u32 = cudart::EVENT_DEFAULT;
/// `cudaEventBlockingSync`: `synchronize` sleeps instead of spinning.
pub const BLOCKING_SYNC: u32 = cudart::EVENT_BLOCKING_SYNC;
/// `cudaEventDisableTiming`: cheaper, but `elapsed_ms` refuses it.
pub const DISABLE_TIMING: u32 = cudart::EVENT_DISABLE_TIMING;

/// An owned CUDA event on the device that was current when it was created.
#[derive(Debug)]
pub struct Event(EventHandle);

crate::safe::stream::owned_handle!(Event, EventHandle, cudart::event_destroy, "event");

impl Event {
    /// Creates a timing event (`cudaEventDefault`) on the current device.
    pub fn new() -> Result<Event> {
        Event::with_flags(DEFAULT)
    }

    /// Creates an event with `flags` (`DEFAULT`, `BLOCKING_SYNC`, `DISABLE_TIMING`, or'ed).
    pub fn with_flags(flags: u32) -> Result<Event> {
        let e = cudart::event_create_with_flags(flags).detail(|| format!("flags={flags:#x}"))?;
        Ok(Event(e))
    }

    /// Creates an ordering-only event (`DISABLE_TIMING`) on `device`, whatever is current.
    pub(crate) fn on_device(device: i32) -> Result<Event> {
        crate::safe::device::with(device, || {
            let e = cudart::event_create_with_flags(DISABLE_TIMING)
                .detail(|| format!("device={device}"))?;
            Ok(Event(e))
        })
    }

    /// Records the event on `stream` (None: the legacy default stream): it completes when the
    /// work queued there before it has completed.
    pub fn record(&self, stream: Option<&crate::safe::stream::Stream>) -> Result<()> {
        let s = stream.map_or(std::ptr::null_mut(), crate::safe::stream::Stream::as_raw);
        // SAFETY: a live event of ours; `s` is NULL or a live stream borrowed from its owner.
        unsafe { self.record_raw(s) }
    }

    /// Records the event on the raw stream `s` (NULL: the legacy default stream).
    ///
    /// # Safety
    /// `s` is NULL or a live stream of the event's device.
    pub(crate) unsafe fn record_raw(&self, s: StreamHandle) -> Result<()> {
        // SAFETY: a live event of ours; `s` is NULL or a live stream of its device (contract).
        unsafe { cudart::event_record(self.0, s) }
            .detail(|| format!("event={:p} stream={s:p}", self.0))
    }

    /// Gives up an event whose record CUDA refused because a stream capture had begun
    /// (cudaErrorStreamCaptureImplicit): CUDA does not say what such an event's state is, so it
    /// is neither recorded again nor destroyed (one handle, left to the context's teardown).
    pub(crate) fn abandon(self) {
        std::mem::forget(self);
    }

    /// True when the event has completed, or was never recorded (`cudaEventQuery`).
    pub fn query(&self) -> Result<bool> {
        // SAFETY: a live event of ours.
        unsafe { query(self.0) }
    }

    /// Waits until the event has completed (`cudaEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live event of ours.
        unsafe { synchronize(self.0) }
    }

    /// Milliseconds from `start` to `self` on the device's clock (`cudaEventElapsedTime`,
    /// resolution about 0.5 us). Both must have been recorded and have completed.
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32> {
        // SAFETY: two live events of ours.
        unsafe { elapsed_ms(start.0, self.0) }
    }
}

/// True when the raw event `e` has completed, or was never recorded.
///
/// # Safety
/// `e` is a live event.
pub(crate) unsafe fn query(e: EventHandle) -> Result<bool> {
    // SAFETY: `e` is a live event (this function's contract).
    unsafe { cudart::event_query(e) }.detail(|| format!("event={e:p}"))
}

/// Waits for the raw event `e`.
///
/// # Safety
/// `e` is a live event.
pub(crate) unsafe fn synchronize(e: EventHandle) -> Result<()> {
    // SAFETY: `e` is a live event (this function's contract).
    unsafe { cudart::event_synchronize(e) }.detail(|| format!("event={e:p}"))
}

/// Milliseconds between two raw events.
///
/// # Safety
/// Both are live events.
pub(crate) unsafe fn elapsed_ms(start: EventHandle, end: EventHandle) -> Result<f32> {
    // SAFETY: both are live events (this function's contract).
    unsafe { cudart::event_elapsed_time(start, end) }
        .detail(|| format!("start={start:p} end={end:p}"))
}

/// Records the raw event `e` on `s`.
///
/// # Safety
/// `e` is a live event, `s` NULL or a live stream of the same device.
pub(crate) unsafe fn record(e: EventHandle, s: StreamHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::event_record(e, s) }.detail(|| format!("event={e:p} stream={s:p}"))
}

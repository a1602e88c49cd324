//! CUDA events: `Event` owns one (`cudaEventCreateWithFlags`) and destroys it when dropped. Used
//! to time work on a stream from the device's own clock (`cudaEventElapsedTime`).

use crate::error::Result;
use crate::raw;
use crate::stream::Stream;

/// `cudaEventDefault`: an event that records timing.
pub const DEFAULT: u32 = raw::cudaEventDefault;
/// `cudaEventBlockingSync`: `synchronize` sleeps instead of spinning.
pub const BLOCKING_SYNC: u32 = raw::cudaEventBlockingSync;
/// `cudaEventDisableTiming`: cheaper, but `elapsed_ms` refuses it.
pub const DISABLE_TIMING: u32 = raw::cudaEventDisableTiming;

/// An owned CUDA event on the device that was current when it was created.
#[derive(Debug)]
pub struct Event(raw::cudaEvent_t);

// SAFETY: CUDA events may be used from any host thread.
unsafe impl Send for Event {}
// SAFETY: every operation on an event handle is thread-safe in cudart.
unsafe impl Sync for Event {}

impl Event {
    /// Creates a timing event (`cudaEventDefault`) on the current device.
    pub fn new() -> Result<Event> {
        Event::with_flags(DEFAULT)
    }

    /// Creates an event with `flags` (`DEFAULT`, `BLOCKING_SYNC`, `DISABLE_TIMING`, or'ed).
    pub fn with_flags(flags: u32) -> Result<Event> {
        let mut e: raw::cudaEvent_t = std::ptr::null_mut();
        cuda!(cudaEventCreateWithFlags(&mut e, flags); "flags={flags:#x}")?;
        Ok(Event(e))
    }

    /// Records the event on `stream` (None: the legacy default stream): it completes when the
    /// work queued there before it has completed.
    pub fn record(&self, stream: Option<&Stream>) -> Result<()> {
        let s = stream.map_or(std::ptr::null_mut(), Stream::as_raw);
        cuda!(cudaEventRecord(self.0, s); "event={:p} stream={s:p}", self.0)
    }

    /// Waits until the event has completed (`cudaEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        cuda!(cudaEventSynchronize(self.0); "event={:p}", self.0)
    }

    /// Milliseconds from `start` to `self` on the device's clock (`cudaEventElapsedTime`,
    /// resolution about 0.5 us). Both must have been recorded and have completed.
    pub fn elapsed_ms(&self, start: &Event) -> Result<f32> {
        let mut ms = 0f32;
        cuda!(cudaEventElapsedTime(&mut ms, start.0, self.0); "start={:p} end={:p}", start.0, self.0)?;
        Ok(ms)
    }

    /// The raw handle, still owned by `self`.
    pub fn as_raw(&self) -> raw::cudaEvent_t {
        self.0
    }

    /// Gives up ownership of the handle.
    pub fn into_raw(self) -> raw::cudaEvent_t {
        let e = self.0;
        std::mem::forget(self);
        e
    }

    /// Takes ownership of a handle made by `into_raw`.
    ///
    /// # Safety
    /// `e` came from `Event::into_raw` and is not owned by anything else.
    pub unsafe fn from_raw(e: raw::cudaEvent_t) -> Event {
        Event(e)
    }
}

/// True when the event has completed, or was never recorded (`cudaEventQuery`).
///
/// # Safety
/// `e` is a live event.
pub unsafe fn query(e: raw::cudaEvent_t) -> Result<bool> {
    let rc = crate::error::CudaError::from_raw(raw::cudaEventQuery(e));
    if rc == crate::error::CudaError::NOT_READY {
        return Ok(false);
    }
    crate::error::CudaError::check(rc.raw())
        .map(|()| true)
        .map_err(|err| crate::Error::cuda("cudaEventQuery", err, format!("event={e:p}")))
}

/// Records `e` on stream `s` (NULL: the legacy default stream).
///
/// # Safety
/// `e` is a live event, `s` NULL or a live stream of the same device.
pub unsafe fn record_raw(e: raw::cudaEvent_t, s: raw::cudaStream_t) -> Result<()> {
    cuda!(cudaEventRecord(e, s); "event={e:p} stream={s:p}")
}

impl Event {
    /// Destroys the event, reporting a failure (dropping cannot).
    pub fn destroy(self) -> Result<()> {
        let e = self.into_raw();
        cuda!(cudaEventDestroy(e); "event={e:p}")
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: we own the handle. A failure here has nowhere to go.
        unsafe { raw::cudaEventDestroy(self.0) };
    }
}

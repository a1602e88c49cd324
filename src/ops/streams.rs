//! Streams and events: what create_stream, destroy_stream, stream_synchronize and the status
//! API's stream and event functions do. Streams of either face go into one registry, so each
//! face accepts the other's; events of the status API go into theirs.

use super::capturing::{before_wait, not_capturing};
use super::validate;
use crate::cache;
use crate::cudart::calls::{EventHandle, StreamHandle};
use crate::error::{Error, Result};
use crate::safe::event::{self, Event};
use crate::safe::stream::{self, Stream};
use std::os::raw::c_void;

/// `LLAISYS_NVIDIA_STREAM_NON_BLOCKING`: the stream does not synchronize with the legacy stream.
pub const STREAM_NON_BLOCKING: u32 = 1;
/// `LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC` (cudaEventBlockingSync).
pub const EVENT_BLOCKING_SYNC: u32 = event::BLOCKING_SYNC;
/// `LLAISYS_NVIDIA_EVENT_DISABLE_TIMING` (cudaEventDisableTiming).
pub const EVENT_DISABLE_TIMING: u32 = event::DISABLE_TIMING;

/// create_stream: a blocking stream on the current device, registered (the device counts as in
/// use).
pub fn create_stream() -> Result<*mut c_void> {
    Ok(validate::adopt_stream(Stream::new()?)?.cast())
}

/// A stream with `flags` (0 or `STREAM_NON_BLOCKING`) and `priority`, registered.
pub fn create_stream_with(flags: u32, priority: i32) -> Result<*mut c_void> {
    if flags & !STREAM_NON_BLOCKING != 0 {
        return Err(Error::invalid_argument(format!(
            "flags={flags:#x}: only 0 and LLAISYS_NVIDIA_STREAM_NON_BLOCKING (1)"
        )));
    }
    let made = Stream::with_flags(flags & STREAM_NON_BLOCKING != 0, priority)?;
    Ok(validate::adopt_stream(made)?.cast())
}

/// destroy_stream: refuses streams not ours, gives pinned blocks used on the stream their
/// completion event and orders other devices' frees after it, then destroys it. NULL does
/// nothing. Holds the host cache's stream-lifetime lock throughout, so a concurrent free_host
/// never records an event on a stream being destroyed.
pub fn destroy_stream(s: *mut c_void) -> Result<()> {
    if s.is_null() {
        return Ok(());
    }
    let s: StreamHandle = s.cast();
    validate::check_stream(s)?;
    // SAFETY: a live stream of ours (checked). A failed query is left to the destruction.
    if unsafe { crate::safe::capture::capturing(s) }.unwrap_or(false) {
        return Err(crate::error::Error::capture(
            "cudaStreamDestroy",
            crate::error::CudaError::STREAM_CAPTURE_UNSUPPORTED,
            format!("stream={s:p} is capturing a graph: end the capture before destroying it"),
        ));
    }
    let _no_free_host_meanwhile = cache::host::stream_lifetime_write();
    let device = validate::stream_destroying(s)?;
    let done = cache::host::stream_destroyed(s, device)
        .and_then(|()| cache::cross::stream_destroyed(s))
        .and_then(|()| {
            // SAFETY: `s` was made by a stream constructor of ours and is destroyed once
            // (taken out of the registry above).
            unsafe { Stream::from_raw(s) }.destroy()
        });
    if done.is_err() {
        validate::stream_restored(s, device);
    }
    done
}

/// stream_synchronize: waits for the work on `s` (NULL: the legacy stream). Refused for a stream
/// that captures, and on a thread capturing in global or thread-local mode (`capturing`).
#[inline]
pub fn stream_synchronize(s: *mut c_void) -> Result<()> {
    validate::check_stream(s.cast())?;
    let _relaxed = before_wait("cudaStreamSynchronize")?;
    // SAFETY: NULL or a live stream of ours (checked).
    unsafe { not_capturing(s.cast(), "cudaStreamSynchronize") }?;
    // SAFETY: as above.
    unsafe { stream::synchronize(s.cast()) }
}

/// True when all work on `s` has completed (NULL: legacy stream). Refused as stream_synchronize.
pub fn stream_query(s: *mut c_void) -> Result<bool> {
    validate::check_stream(s.cast())?;
    let _relaxed = before_wait("cudaStreamQuery")?;
    // SAFETY: NULL or a live stream of ours (checked).
    unsafe { not_capturing(s.cast(), "cudaStreamQuery") }?;
    // SAFETY: as above.
    unsafe { stream::query(s.cast()) }
}

/// Makes future work on `s` wait until `e` has completed (on a capturing stream: a dependency
/// of the capture on the event).
pub fn stream_wait_event(s: *mut c_void, e: *mut c_void) -> Result<()> {
    validate::check_stream(s.cast())?;
    validate::check_event(e.cast(), false)?;
    let _legacy =
        crate::cache::legacy_stream::permit(s.is_null(), "cudaStreamWaitEvent", "a wait on NULL")?;
    // SAFETY: both checked live.
    unsafe { stream::wait_event(s.cast(), e.cast()) }
}

/// (least, greatest) stream priorities of the current device.
pub fn stream_priority_range() -> Result<(i32, i32)> {
    stream::priority_range()
}

/// An event on the current device with `flags` (`EVENT_BLOCKING_SYNC`, `EVENT_DISABLE_TIMING`,
/// or'ed), registered.
pub fn event_create(flags: u32) -> Result<*mut c_void> {
    if flags & !(EVENT_BLOCKING_SYNC | EVENT_DISABLE_TIMING) != 0 {
        return Err(Error::invalid_argument(format!(
            "flags={flags:#x}: only LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC (1) and \
             LLAISYS_NVIDIA_EVENT_DISABLE_TIMING (2)"
        )));
    }
    let made = Event::with_flags(flags)?.into_raw();
    validate::event_created(made);
    Ok(made.cast())
}

fn live_event(e: *mut c_void) -> Result<EventHandle> {
    validate::check_event(e.cast(), false)?;
    Ok(e.cast())
}

/// Records `e` on `s` (NULL: legacy stream).
pub fn event_record(e: *mut c_void, s: *mut c_void) -> Result<()> {
    let e = live_event(e)?;
    validate::check_stream(s.cast())?;
    let _legacy =
        crate::cache::legacy_stream::permit(s.is_null(), "cudaEventRecord", "a record on NULL")?;
    // SAFETY: both checked live.
    unsafe { event::record(e, s.cast()) }
}

/// True when `e` has completed (or was never recorded).
pub fn event_query(e: *mut c_void) -> Result<bool> {
    let e = live_event(e)?;
    let _relaxed = before_wait("cudaEventQuery")?;
    // SAFETY: checked live.
    unsafe { event::query(e) }
}

/// Waits until `e` has completed.
pub fn event_synchronize(e: *mut c_void) -> Result<()> {
    let e = live_event(e)?;
    let _relaxed = before_wait("cudaEventSynchronize")?;
    // SAFETY: checked live.
    unsafe { event::synchronize(e) }
}

/// Milliseconds between `start` and `end`.
pub fn event_elapsed_time(start: *mut c_void, end: *mut c_void) -> Result<f32> {
    let (a, b) = (live_event(start)?, live_event(end)?);
    // SAFETY: both checked live.
    unsafe { event::elapsed_ms(a, b) }
}

/// Destroys an event of `event_create`; NULL does nothing.
pub fn event_destroy(e: *mut c_void) -> Result<()> {
    if e.is_null() {
        return Ok(());
    }
    validate::check_event(e.cast(), true)?;
    // SAFETY: ours, destroyed once (checked and forgotten above).
    unsafe { Event::from_raw(e.cast()) }.destroy()
}

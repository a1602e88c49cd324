//! Streams (with flags and priority) and events. Streams made here are the table's too: they
//! are accepted by memcpy_async, stream_synchronize and destroy_stream.

use super::{out, status};
use crate::capi::validate;
use crate::event::{self, Event};
use crate::raw;
use crate::stream::{self, Stream};
use std::os::raw::{c_float, c_int, c_uint, c_void};

/// `LLAISYS_NVIDIA_STREAM_NON_BLOCKING`: the stream does not synchronize with the legacy stream.
pub const STREAM_NON_BLOCKING: c_uint = 1;

/// Creates a stream on the current device. `flags`: 0 or LLAISYS_NVIDIA_STREAM_NON_BLOCKING;
/// `priority`: see llaisysNvidiaStreamPriorityRange (0 is the default).
///
/// # Safety
/// `s` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaStreamCreate(
    s: *mut *mut c_void,
    flags: c_uint,
    priority: c_int,
) -> c_int {
    status("llaisysNvidiaStreamCreate", || {
        if flags & !STREAM_NON_BLOCKING != 0 {
            return Err(crate::Error::invalid_argument(format!(
                "flags={flags:#x}: only 0 and LLAISYS_NVIDIA_STREAM_NON_BLOCKING (1)"
            )));
        }
        out(s, "stream", std::ptr::null_mut())?;
        let made = Stream::with_flags(flags & STREAM_NON_BLOCKING != 0, priority)?;
        out(s, "stream", validate::adopt_stream(made)?.cast())
    })
}

/// Destroys a stream made by llaisysNvidiaStreamCreate or create_stream (pending work completes).
#[no_mangle]
pub extern "C" fn llaisysNvidiaStreamDestroy(s: *mut c_void) -> c_int {
    status("llaisysNvidiaStreamDestroy", || {
        crate::capi::table::destroy_checked(s)
    })
}

/// Writes 1 to `*done` when all work on `s` has completed, else 0 (NULL: legacy stream).
///
/// # Safety
/// `done` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaStreamQuery(s: *mut c_void, done: *mut c_int) -> c_int {
    status("llaisysNvidiaStreamQuery", || {
        validate::check_stream(s.cast())?;
        out(done, "done", 0)?;
        out(done, "done", stream::query(s.cast())? as c_int)
    })
}

/// Waits for all work on `s` (NULL: legacy stream).
#[no_mangle]
pub extern "C" fn llaisysNvidiaStreamSynchronize(s: *mut c_void) -> c_int {
    status("llaisysNvidiaStreamSynchronize", || {
        validate::check_stream(s.cast())?;
        // SAFETY: NULL or a live stream of ours (checked).
        unsafe { stream::synchronize(s.cast()) }
    })
}

/// Makes future work on `s` wait until `e` has completed.
#[no_mangle]
pub extern "C" fn llaisysNvidiaStreamWaitEvent(s: *mut c_void, e: *mut c_void) -> c_int {
    status("llaisysNvidiaStreamWaitEvent", || {
        validate::check_stream(s.cast())?;
        validate::check_event(e.cast(), false)?;
        // SAFETY: both checked live.
        unsafe { stream::wait_event(s.cast(), e.cast()) }
    })
}

/// Writes the least and greatest stream priorities of the current device.
///
/// # Safety
/// Non-NULL pointers are valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> c_int {
    status("llaisysNvidiaStreamPriorityRange", || {
        out(least, "least", 0)?;
        out(greatest, "greatest", 0)?;
        let (l, g) = stream::priority_range()?;
        out(least, "least", l)?;
        out(greatest, "greatest", g)
    })
}

/// Creates an event on the current device. `flags`: 0, LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC (1),
/// LLAISYS_NVIDIA_EVENT_DISABLE_TIMING (2), or'ed (the CUDA values).
///
/// # Safety
/// `e` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaEventCreate(e: *mut *mut c_void, flags: c_uint) -> c_int {
    status("llaisysNvidiaEventCreate", || {
        if flags & !(event::BLOCKING_SYNC | event::DISABLE_TIMING) != 0 {
            return Err(crate::Error::invalid_argument(format!(
                "flags={flags:#x}: only LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC (1) and LLAISYS_NVIDIA_EVENT_DISABLE_TIMING (2)"
            )));
        }
        out(e, "event", std::ptr::null_mut())?;
        let made = Event::with_flags(flags)?.into_raw();
        validate::event_created(made);
        out(e, "event", made.cast())
    })
}

/// Records `e` on `s` (NULL: legacy stream).
#[no_mangle]
pub extern "C" fn llaisysNvidiaEventRecord(e: *mut c_void, s: *mut c_void) -> c_int {
    status("llaisysNvidiaEventRecord", || {
        validate::check_event(e.cast(), false)?;
        validate::check_stream(s.cast())?;
        // SAFETY: both checked live.
        unsafe { event::record_raw(e.cast(), s.cast()) }
    })
}

/// Writes 1 to `*done` when `e` has completed (or was never recorded), else 0.
///
/// # Safety
/// `done` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaEventQuery(e: *mut c_void, done: *mut c_int) -> c_int {
    status("llaisysNvidiaEventQuery", || {
        validate::check_event(e.cast(), false)?;
        out(done, "done", 0)?;
        out(done, "done", event::query(e.cast())? as c_int)
    })
}

/// Waits until `e` has completed.
#[no_mangle]
pub extern "C" fn llaisysNvidiaEventSynchronize(e: *mut c_void) -> c_int {
    status("llaisysNvidiaEventSynchronize", || {
        validate::check_event(e.cast(), false)?;
        let e: raw::cudaEvent_t = e.cast();
        cuda!(cudaEventSynchronize(e); "event={e:p}")
    })
}

/// Writes the milliseconds between `start` and `end` (both recorded, completed, with timing).
///
/// # Safety
/// `ms` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaEventElapsedTime(
    ms: *mut c_float,
    start: *mut c_void,
    end: *mut c_void,
) -> c_int {
    status("llaisysNvidiaEventElapsedTime", || {
        validate::check_event(start.cast(), false)?;
        validate::check_event(end.cast(), false)?;
        let (a, b): (raw::cudaEvent_t, raw::cudaEvent_t) = (start.cast(), end.cast());
        let mut elapsed = 0f32;
        cuda!(cudaEventElapsedTime(&mut elapsed, a, b); "start={a:p} end={b:p}")?;
        out(ms, "ms", elapsed)
    })
}

/// Destroys an event of llaisysNvidiaEventCreate; NULL does nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaEventDestroy(e: *mut c_void) -> c_int {
    status("llaisysNvidiaEventDestroy", || {
        if e.is_null() {
            return Ok(());
        }
        validate::check_event(e.cast(), true)?;
        // SAFETY: ours, destroyed once (checked and forgotten above).
        unsafe { Event::from_raw(e.cast()) }.destroy()
    })
}

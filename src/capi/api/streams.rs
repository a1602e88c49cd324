//! Streams (with flags and priority) and events. Streams made here are the table's too: they
//! are accepted by memcpy_async, stream_synchronize and destroy_stream.

use super::{status, status_out, status_out2};
use crate::ops::streams as ops;
use std::os::raw::{c_float, c_int, c_uint, c_void};
use std::ptr::null_mut;

/// `LLAISYS_NVIDIA_STREAM_NON_BLOCKING`: the stream does not synchronize with the legacy stream.
pub const STREAM_NON_BLOCKING: c_uint = ops::STREAM_NON_BLOCKING;

/// Creates a stream on the current device (`flags` and `priority`: see the header).
///
/// # Safety
/// `s` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaStreamCreate(
    s: *mut *mut c_void,
    flags: c_uint,
    priority: c_int,
) -> c_int {
    let create = || ops::create_stream_with(flags, priority);
    // SAFETY: `s` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaStreamCreate", s, "stream", null_mut(), create) }
}

/// Destroys a stream made by llaisysNvidiaStreamCreate or create_stream (pending work completes).
#[no_mangle]
pub extern "C" fn llaisysNvidiaStreamDestroy(s: *mut c_void) -> c_int {
    status("llaisysNvidiaStreamDestroy", || ops::destroy_stream(s))
}

/// Writes 1 to `*done` when all work on `s` has completed, else 0 (NULL: legacy stream).
///
/// # Safety
/// `done` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaStreamQuery(s: *mut c_void, done: *mut c_int) -> c_int {
    let query = || Ok(ops::stream_query(s)? as c_int);
    // SAFETY: `done` is NULL or valid for writing an int (this function's contract).
    unsafe { status_out("llaisysNvidiaStreamQuery", done, "done", 0, query) }
}

/// Waits for all work on `s` (NULL: legacy stream).
#[no_mangle]
pub extern "C" fn llaisysNvidiaStreamSynchronize(s: *mut c_void) -> c_int {
    status("llaisysNvidiaStreamSynchronize", || {
        ops::stream_synchronize(s)
    })
}

/// Makes future work on `s` wait until `e` has completed.
#[no_mangle]
pub extern "C" fn llaisysNvidiaStreamWaitEvent(s: *mut c_void, e: *mut c_void) -> c_int {
    status("llaisysNvidiaStreamWaitEvent", || {
        ops::stream_wait_event(s, e)
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
    // SAFETY: as this function's `# Safety` section requires.
    unsafe {
        status_out2(
            "llaisysNvidiaStreamPriorityRange",
            (least, "least"),
            (greatest, "greatest"),
            (0, 0),
            ops::stream_priority_range,
        )
    }
}

/// Creates an event on the current device (`flags`: the CUDA values, or'ed).
///
/// # Safety
/// `e` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaEventCreate(e: *mut *mut c_void, flags: c_uint) -> c_int {
    let create = || ops::event_create(flags);
    // SAFETY: `e` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaEventCreate", e, "event", null_mut(), create) }
}

/// Records `e` on `s` (NULL: legacy stream).
#[no_mangle]
pub extern "C" fn llaisysNvidiaEventRecord(e: *mut c_void, s: *mut c_void) -> c_int {
    status("llaisysNvidiaEventRecord", || ops::event_record(e, s))
}

/// Writes 1 to `*done` when `e` has completed (or was never recorded), else 0.
///
/// # Safety
/// `done` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaEventQuery(e: *mut c_void, done: *mut c_int) -> c_int {
    let query = || Ok(ops::event_query(e)? as c_int);
    // SAFETY: `done` is NULL or valid for writing an int (this function's contract).
    unsafe { status_out("llaisysNvidiaEventQuery", done, "done", 0, query) }
}

/// Waits until `e` has completed.
#[no_mangle]
pub extern "C" fn llaisysNvidiaEventSynchronize(e: *mut c_void) -> c_int {
    status("llaisysNvidiaEventSynchronize", || {
        ops::event_synchronize(e)
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
    let elapsed = || ops::event_elapsed_time(start, end);
    // SAFETY: `ms` is NULL or valid for writing a float (this function's contract).
    unsafe { status_out("llaisysNvidiaEventElapsedTime", ms, "ms", 0.0, elapsed) }
}

/// Destroys an event of llaisysNvidiaEventCreate; NULL does nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaEventDestroy(e: *mut c_void) -> c_int {
    status("llaisysNvidiaEventDestroy", || ops::event_destroy(e))
}

//! Host-only test of the graph functions' bad input: every handle and argument that is not one of
//! ours is refused before CUDA sees it, with the documented status and failure values. Nothing
//! here depends on the machine having a GPU or not: no refused call reaches CUDA.

mod support;

use llaisys_nvidia::ffi::*;
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};
use std::ptr::null_mut;
use support::last_error_message;

const INVALID: i32 = 3;

/// A handle no function of the library made.
fn foreign() -> *mut c_void {
    0x5151_0000usize as *mut c_void
}

#[test]
fn captures_need_a_stream_of_ours_and_a_known_mode_and_pool() {
    assert_eq!(llaisysNvidiaStreamBeginCapture(null_mut(), 0, 0), INVALID);
    assert!(
        last_error_message().contains("legacy default stream cannot capture"),
        "{}",
        last_error_message()
    );
    assert_eq!(llaisysNvidiaStreamBeginCapture(foreign(), 0, 0), INVALID);
    assert!(
        last_error_message().contains("was not made by create_stream"),
        "{}",
        last_error_message()
    );
    let mut graph = foreign();
    assert_eq!(
        unsafe { llaisysNvidiaStreamEndCapture(null_mut(), &mut graph) },
        INVALID
    );
    assert!(graph.is_null(), "the graph is NULL on failure");
    assert_eq!(
        unsafe { llaisysNvidiaStreamEndCapture(foreign(), null_mut()) },
        INVALID
    );
    let mut status = 7;
    assert_eq!(
        unsafe { llaisysNvidiaStreamCaptureStatus(foreign(), &mut status) },
        INVALID
    );
    assert_eq!(status, CAPTURE_STATUS_NONE, "NONE on failure");
    assert_eq!(
        unsafe { llaisysNvidiaStreamCaptureStatus(null_mut(), null_mut()) },
        INVALID
    );
}

#[test]
fn the_legacy_stream_is_not_capturing_in_a_process_that_never_captured() {
    // With a GPU: no stream of this process captures. Without a driver the query cannot be
    // made and no capture can exist either: NONE both ways.
    let mut status = 7;
    assert_eq!(
        unsafe { llaisysNvidiaStreamCaptureStatus(null_mut(), &mut status) },
        0,
        "{}",
        last_error_message()
    );
    assert_eq!(status, CAPTURE_STATUS_NONE);
}

#[test]
fn graphs_and_executable_graphs_not_made_here_are_refused() {
    let mut exec = foreign();
    let mut log = [1 as c_char; 256];
    assert_eq!(
        unsafe { llaisysNvidiaGraphInstantiate(&mut exec, foreign(), log.as_mut_ptr(), log.len()) },
        INVALID
    );
    assert!(exec.is_null(), "the exec is NULL on failure");
    let text = unsafe { CStr::from_ptr(log.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(
        text.contains("was not made by llaisysNvidiaStreamEndCapture"),
        "the log says why: {text}"
    );
    // A log of one byte holds the NUL only; a NULL log is allowed.
    let mut tiny = [1 as c_char; 1];
    assert_eq!(
        unsafe { llaisysNvidiaGraphInstantiate(&mut exec, foreign(), tiny.as_mut_ptr(), 1) },
        INVALID
    );
    assert_eq!(tiny[0], 0);
    assert_eq!(
        unsafe { llaisysNvidiaGraphInstantiate(&mut exec, foreign(), null_mut(), 0) },
        INVALID
    );
    assert_eq!(
        unsafe { llaisysNvidiaGraphInstantiate(null_mut(), foreign(), null_mut(), 0) },
        INVALID
    );
    assert_eq!(llaisysNvidiaGraphUpload(foreign(), null_mut()), INVALID);
    assert_eq!(llaisysNvidiaGraphLaunch(foreign(), null_mut()), INVALID);
    assert!(
        last_error_message().contains("was not made by llaisysNvidiaGraphInstantiate"),
        "{}",
        last_error_message()
    );
    assert_eq!(llaisysNvidiaGraphExecDestroy(foreign()), INVALID);
    assert_eq!(llaisysNvidiaGraphDestroy(foreign()), INVALID);
    assert_eq!(
        llaisysNvidiaGraphExecDestroy(null_mut()),
        0,
        "NULL does nothing"
    );
    assert_eq!(
        llaisysNvidiaGraphDestroy(null_mut()),
        0,
        "NULL does nothing"
    );
    let mut again = 5;
    let mut handle = foreign();
    assert_eq!(
        unsafe { llaisysNvidiaGraphExecUpdate(&mut handle, foreign(), &mut again) },
        INVALID
    );
    assert_eq!(
        (handle, again),
        (foreign(), 0),
        "unchanged, and 0 on failure"
    );
    assert_eq!(
        unsafe { llaisysNvidiaGraphExecUpdate(null_mut(), foreign(), &mut again) },
        INVALID
    );
}

#[test]
fn graph_pools_not_made_here_are_refused() {
    assert_eq!(llaisysNvidiaGraphPoolRelease(0), INVALID);
    assert_eq!(llaisysNvidiaGraphPoolRelease(0x5151), INVALID);
    assert!(
        last_error_message().contains("was not made by llaisysNvidiaGraphPoolCreate"),
        "{}",
        last_error_message()
    );
    assert_eq!(unsafe { llaisysNvidiaGraphPoolCreate(null_mut()) }, INVALID);
}

#[test]
fn the_graph_table_holds_the_functions_and_the_status_has_a_name() {
    let t = unsafe { &*llaisysNvidiaGetGraphAPI() };
    assert_eq!(
        t.launch as usize,
        llaisysNvidiaGraphLaunch as *const () as usize
    );
    assert_eq!(
        t.begin_capture as usize,
        llaisysNvidiaStreamBeginCapture as *const () as usize
    );
    assert_eq!(
        t.graph_destroy as usize,
        llaisysNvidiaGraphDestroy as *const () as usize
    );
    assert_eq!((t.graph_destroy)(null_mut()), 0);
    let name = unsafe { CStr::from_ptr(llaisysNvidiaStatusName(STATUS_CAPTURE)) };
    assert_eq!(name.to_str(), Ok("LLAISYS_NVIDIA_ERROR_CAPTURE"));
}

//! Host-only tests of the graph operations' books, dynamic build only: the children run with
//! tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13, which captures as far
//! as the books need (a capture's status and graph, user objects held by graphs and executable
//! graphs, the legacy stream refused meanwhile) and counts live graphs and executable graphs.
//! - A capture, a graph pool block, instantiation, update and destruction: every graph and
//!   executable graph made is destroyed, the pool's block goes once they are.
//! - Each operation that switches to the stream's device and cannot make the device current
//!   before current again (two stand-in devices, the switch back made to fail): the caller gets
//!   the error and nothing is left behind: no capture goes on, no graph or executable graph is
//!   kept, an updated executable graph stays as it was, a graph pool block made meanwhile is
//!   reused by the next request.
//! - Frees and allocations beside captures: a free kept during a capture is ordered after the
//!   streams of other devices that used its block, and done in relaxed mode by a thread that
//!   captures another device; a stream-ordered free of a `cudaMalloc` block waits for a capture
//!   of its device; out of memory beside another device's capture releases what it can and
//!   retries; an allocation whose cross-device ordering fails is not left counted in use.
//! - A capture another thread begins with cudart in the middle of a staged `memcpy_sync`: the
//!   copy's later chunks never touch the legacy stream (which would invalidate the capture), and
//!   the copy completes with its data.
//! - A copy that a capture sends to the side stream waits for the earlier copies still pending
//!   on the legacy stream (a staged H2D's DMAs, a D2D).
#![cfg(feature = "dynamic")]

use llaisys_nvidia::ffi;
use std::ptr::null_mut;

mod support;

use support::{fake_function as fake, last_error_message};

/// Asserts that a status API call succeeded, with the thread's last error message if not.
#[track_caller]
fn ok(status: libc::c_int) {
    assert_eq!(status, 0, "{}", last_error_message());
}

/// Asserts that a status API call failed on the failed switch back to device 0 (device 1 is
/// then current), and makes device 0 current again.
#[track_caller]
fn failed_restore(status: libc::c_int) {
    assert_ne!(status, 0, "the failed switch back is reported");
    let msg = last_error_message();
    assert!(
        msg.contains("cudaSetDevice") && msg.contains("restoring"),
        "{msg}"
    );
    let mut d = -1;
    // SAFETY: `d` is writable.
    ok(unsafe { ffi::llaisysNvidiaGetDevice(&mut d) });
    assert_eq!(d, 1, "the device the call switched to");
    ok(ffi::llaisysNvidiaSetDevice(0));
}

/// The stand-in's counts of live graphs (false) and executable graphs (true).
fn live(execs: bool) -> libc::c_long {
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let f = unsafe { fake::<extern "C" fn(libc::c_int) -> libc::c_long>(c"fake_live_graphs") };
    f(execs.into())
}

/// The stand-in's count of `cudaEventRecord` calls so far.
fn event_records() -> libc::c_long {
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let f = unsafe { fake::<extern "C" fn() -> libc::c_long>(c"fake_event_records") };
    f()
}

/// The stand-in's counts of `cudaFree` calls: all of them.
const ALL_FREES: libc::c_int = 0;
/// Those made while a stream captured.
const FREES_IN_CAPTURE: libc::c_int = 1;

/// The stand-in's count of calls that may synchronize made by a thread the captures in progress
/// forbid them (CUDA would fail them and invalidate the capture).
fn unsafe_calls() -> libc::c_long {
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let f = unsafe { fake::<extern "C" fn() -> libc::c_long>(c"fake_unsafe_calls") };
    f()
}

/// The stand-in's count of `cudaFree` calls of one kind (above) so far.
fn device_frees(which: libc::c_int) -> libc::c_long {
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let f = unsafe { fake::<extern "C" fn(libc::c_int) -> libc::c_long>(c"fake_device_frees") };
    f(which)
}

/// Runs the child test `name` over the stand-in cudart with `env` set, and checks that it got
/// to its end ("graphs {done} child: ok", or "graphs child: ok" for an empty `done`).
fn run_child(name: &str, env: &[(&str, &str)], done: &str) {
    let text = support::child::TestChild::new(name)
        .loader_path(support::fake_cudart())
        .envs(env.iter().copied())
        .run_passing();
    let end = if done.is_empty() {
        "graphs child: ok".to_string()
    } else {
        format!("graphs {done} child: ok")
    };
    assert!(text.contains(&end), "{text}");
}

/// cudart's own capture calls, for a capture the library does not see begin or end.
struct Cudart {
    begin_capture: extern "C" fn(*mut libc::c_void, libc::c_int) -> libc::c_int,
    end_capture: extern "C" fn(*mut libc::c_void, *mut *mut libc::c_void) -> libc::c_int,
    graph_destroy: extern "C" fn(*mut libc::c_void) -> libc::c_int,
}

impl Cudart {
    /// Begins a capture on `s` in `mode` with `cudaStreamBeginCapture`.
    fn begin(&self, s: *mut libc::c_void, mode: libc::c_int) {
        assert_eq!((self.begin_capture)(s, mode), 0);
    }

    /// Ends the capture on `s` with `cudaStreamEndCapture` and destroys its graph.
    fn end(&self, s: *mut libc::c_void) {
        let mut g = null_mut();
        assert_eq!((self.end_capture)(s, &mut g), 0);
        assert_eq!((self.graph_destroy)(g), 0);
    }
}

/// The stand-in's `cudaStreamBeginCapture`, `cudaStreamEndCapture` and `cudaGraphDestroy`.
fn cudart() -> Cudart {
    // SAFETY: the fake is on the loader path (the parent's doing); the functions have these C
    // types.
    unsafe {
        Cudart {
            begin_capture: fake(c"cudaStreamBeginCapture"),
            end_capture: fake(c"cudaStreamEndCapture"),
            graph_destroy: fake(c"cudaGraphDestroy"),
        }
    }
}

/// The capture status of `s` (0 none, 1 active).
fn status(s: *mut libc::c_void) -> i32 {
    let mut st = -1;
    // SAFETY: a stream of ours; `st` is writable.
    ok(unsafe { ffi::llaisysNvidiaStreamCaptureStatus(s, &mut st) });
    st
}

/// A stream of device `device`, made with `device` current; `back` current again after.
fn stream_on(device: i32, back: i32) -> *mut libc::c_void {
    let mut s = null_mut();
    ok(ffi::llaisysNvidiaSetDevice(device));
    // SAFETY: `s` is writable.
    ok(unsafe { ffi::llaisysNvidiaStreamCreate(&mut s, 0, 0) });
    ok(ffi::llaisysNvidiaSetDevice(back));
    s
}

/// Captures on `s` (nothing in it) and returns the graph.
fn capture(s: *mut libc::c_void) -> *mut libc::c_void {
    let mut g = null_mut();
    // SAFETY: a stream of ours; `g` is writable.
    unsafe {
        ok(ffi::llaisysNvidiaStreamBeginCapture(s, 1, 0));
        ok(ffi::llaisysNvidiaStreamEndCapture(s, &mut g));
    }
    assert!(!g.is_null());
    g
}

/// Instantiates `g`.
fn instantiate(g: *mut libc::c_void) -> *mut libc::c_void {
    let mut e = null_mut();
    // SAFETY: a graph of ours; `e` is writable, no log.
    ok(unsafe { ffi::llaisysNvidiaGraphInstantiate(&mut e, g, null_mut(), 0) });
    assert!(!e.is_null());
    e
}

/// Waits up to 5 s for `f` to hold.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(t.elapsed().as_secs() < 5, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
#[ignore = "entry point of a child process: run by graphs_made_through_the_library_are_all_destroyed"]
fn child_graphs() {
    support::child::require_child("child_graphs");
    let s = stream_on(0, 0);
    let mut st = -1;
    // SAFETY: the status API's functions with streams, graphs and blocks of ours.
    unsafe {
        ok(ffi::llaisysNvidiaStreamBeginCapture(s, 0, 0));
        assert_eq!(status(s), 1, "capturing");
        ok(ffi::llaisysNvidiaStreamCaptureStatus(null_mut(), &mut st));
        assert_eq!(st, 1, "the legacy stream while a blocking stream captures");
        // A block of the capture's pool: valid for every replay.
        let mut p = null_mut();
        ok(ffi::llaisysNvidiaMallocDevice(&mut p, 1 << 20));
        assert!(!p.is_null());
        let mut g = null_mut();
        ok(ffi::llaisysNvidiaStreamEndCapture(s, &mut g));
        assert_eq!(status(s), 0);
        let e = instantiate(g);
        assert_eq!((live(false), live(true)), (1, 1));
        ok(ffi::llaisysNvidiaGraphLaunch(e, s));
        // Updated in place, then re-instantiated when an update cannot apply.
        let g2 = capture(s);
        let (mut e2, mut again) = (e, -1);
        ok(ffi::llaisysNvidiaGraphExecUpdate(&mut e2, g2, &mut again));
        assert_eq!((e2, again), (e, 0));
        // SAFETY: the function has this C type.
        let fail_updates = fake::<extern "C" fn(libc::c_long)>(c"fake_fail_exec_updates");
        fail_updates(1);
        ok(ffi::llaisysNvidiaGraphExecUpdate(&mut e2, g2, &mut again));
        assert!(again == 1 && e2 != e, "re-instantiated");
        assert_eq!(live(true), 1, "the old executable graph destroyed");
        assert_ne!(
            ffi::llaisysNvidiaGraphLaunch(e, s),
            0,
            "the old handle is refused"
        );
        ok(ffi::llaisysNvidiaGraphLaunch(e2, s));
        ok(ffi::llaisysNvidiaFreeDevice(p));
        for g in [g, g2] {
            ok(ffi::llaisysNvidiaGraphDestroy(g));
        }
        ok(ffi::llaisysNvidiaGraphExecDestroy(e2));
        assert_eq!((live(false), live(true)), (0, 0));
        // The pool's block goes once its graphs are gone (on the next call of the library that
        // looks: the release runs on a thread of CUDA's).
        eventually("the graph pool's memory released", || {
            let mut stats = ffi::AllocatorStats::default();
            ok(ffi::llaisysNvidiaReleaseCachedMemory());
            ok(ffi::llaisysNvidiaDeviceMemoryStats(0, &mut stats));
            stats.cached_bytes == 0
        });
        ok(ffi::llaisysNvidiaStreamDestroy(s));
    }
    println!("graphs child: ok");
}

#[test]
fn graphs_made_through_the_library_are_all_destroyed() {
    run_child("child_graphs", &[], "");
}

#[test]
#[ignore = "entry point of a child process: run by a_failed_switch_back_leaves_no_capture_graph_or_block_behind"]
fn child_failed_switch_back() {
    support::child::require_child("child_failed_switch_back");
    // SAFETY: the fake is on the loader path (the parent's doing); the functions have these C
    // types.
    let (fail_set_device, mallocs) = unsafe {
        (
            fake::<extern "C" fn(libc::c_int)>(c"fake_fail_set_device"),
            fake::<extern "C" fn() -> libc::c_long>(c"fake_device_mallocs"),
        )
    };
    // A stream of device 1, used with device 0 current: each call switches to device 1 and back.
    let s = stream_on(1, 0);
    // SAFETY: the status API's functions with streams, graphs and blocks of ours.
    unsafe {
        // Begin: the capture does not go on.
        fail_set_device(0);
        failed_restore(ffi::llaisysNvidiaStreamBeginCapture(s, 1, 0));
        assert_eq!(status(s), 0, "a capture went on after its begin failed");
        assert_eq!(live(false), 0, "the aborted capture's graph");

        // End: no graph is kept.
        ok(ffi::llaisysNvidiaStreamBeginCapture(s, 1, 0));
        fail_set_device(0);
        let mut g = std::ptr::dangling_mut::<libc::c_void>();
        failed_restore(ffi::llaisysNvidiaStreamEndCapture(s, &mut g));
        assert!(g.is_null());
        assert_eq!(status(s), 0);
        assert_eq!(live(false), 0, "a graph kept after its end failed");

        // A graph pool block: the failed request's block is the next request's.
        ok(ffi::llaisysNvidiaStreamBeginCapture(s, 1, 0));
        // The first request also reads device 1's size once (another switch).
        let mut first = null_mut();
        ok(ffi::llaisysNvidiaMallocDevice(&mut first, 1 << 20));
        let before = mallocs();
        let mut p = null_mut();
        fail_set_device(0);
        failed_restore(ffi::llaisysNvidiaMallocDevice(&mut p, 1 << 20));
        assert!(p.is_null());
        assert_eq!(mallocs(), before + 1, "the failed request's cudaMalloc");
        ok(ffi::llaisysNvidiaMallocDevice(&mut p, 1 << 20));
        assert!(!p.is_null() && p != first);
        assert_eq!(
            mallocs(),
            before + 1,
            "the block of the failed request was lost"
        );
        ok(ffi::llaisysNvidiaFreeDevice(p));
        ok(ffi::llaisysNvidiaFreeDevice(first));
        let mut g = null_mut();
        ok(ffi::llaisysNvidiaStreamEndCapture(s, &mut g));

        // Instantiate: no executable graph is kept.
        let mut e = std::ptr::dangling_mut::<libc::c_void>();
        fail_set_device(0);
        failed_restore(ffi::llaisysNvidiaGraphInstantiate(&mut e, g, null_mut(), 0));
        assert!(e.is_null());
        assert_eq!(
            live(true),
            0,
            "an executable graph kept after instantiation failed"
        );

        // Update by re-instantiation: *exec stays as it was and usable, the new one goes.
        let e = instantiate(g);
        // SAFETY: the function has this C type.
        let fail_updates = fake::<extern "C" fn(libc::c_long)>(c"fake_fail_exec_updates");
        fail_updates(1);
        fail_set_device(0);
        let (mut e2, mut again) = (e, -1);
        failed_restore(ffi::llaisysNvidiaGraphExecUpdate(&mut e2, g, &mut again));
        assert_eq!((e2, again), (e, 0), "*exec changed by a failed update");
        assert_eq!(live(true), 1, "the new executable graph kept");
        ok(ffi::llaisysNvidiaGraphLaunch(e, s));

        // Update in place: done, and the failure says so.
        fail_set_device(0);
        failed_restore(ffi::llaisysNvidiaGraphExecUpdate(&mut e2, g, &mut again));
        assert!(last_error_message().contains("updated in place"));
        assert_eq!(e2, e);
        ok(ffi::llaisysNvidiaGraphLaunch(e, s));

        ok(ffi::llaisysNvidiaGraphExecDestroy(e));
        ok(ffi::llaisysNvidiaGraphDestroy(g));
        assert_eq!((live(false), live(true)), (0, 0));
        ok(ffi::llaisysNvidiaStreamDestroy(s));
    }
    println!("graphs failed-switch-back child: ok");
}

#[test]
fn a_failed_switch_back_leaves_no_capture_graph_or_block_behind() {
    run_child(
        "child_failed_switch_back",
        &[("FAKE_DEVICES", "2")],
        "failed-switch-back",
    );
}

/// malloc_device on device 0 on a thread of its own: (status, pointer as an address).
fn malloc_on_device_0_elsewhere() -> (libc::c_int, usize) {
    std::thread::spawn(|| {
        ok(ffi::llaisysNvidiaSetDevice(0));
        let mut p = null_mut();
        // SAFETY: `p` is writable.
        let st = unsafe { ffi::llaisysNvidiaMallocDevice(&mut p, 1 << 20) };
        (st, p as usize)
    })
    .join()
    .expect("the allocating thread")
}

#[test]
#[ignore = "entry point of a child process: run by with_two_devices_a_capture_refuses_only_allocations_that_need_ordering"]
fn child_two_devices() {
    support::child::require_child("child_two_devices");
    const CAPTURE: libc::c_int = 8;
    let s0 = stream_on(0, 0);
    let s1 = stream_on(1, 0);
    let (mut x, mut y) = (null_mut(), null_mut());
    // SAFETY: the status API's functions with streams, graphs and blocks of ours.
    unsafe {
        ok(ffi::llaisysNvidiaMallocDevice(&mut x, 1 << 20));
        ok(ffi::llaisysNvidiaSetDevice(1));
        ok(ffi::llaisysNvidiaMallocDevice(&mut y, 1 << 20));
        ok(ffi::llaisysNvidiaSetDevice(0));

        // Two devices in use, no stream of one noted on the other's memory: another thread's
        // allocation on device 0 goes on while a stream of device 0 captures (relaxed mode).
        ok(ffi::llaisysNvidiaStreamBeginCapture(s0, 2, 0));
        let (st, p) = malloc_on_device_0_elsewhere();
        assert_eq!(st, 0, "refused during a capture: {}", last_error_message());
        assert_ne!(p, 0);
        let mut g = null_mut();
        ok(ffi::llaisysNvidiaStreamEndCapture(s0, &mut g));
        ok(ffi::llaisysNvidiaGraphDestroy(g));
        ok(ffi::llaisysNvidiaFreeDevice(p as *mut libc::c_void));

        // A stream of device 1 copies device 0's memory: an allocation on device 0 must then
        // order that stream after it, on device 0's legacy stream, which the capture forbids.
        ok(ffi::llaisysNvidiaMemcpyAsync(y, x, 1 << 20, 3, s1));
        ok(ffi::llaisysNvidiaStreamSynchronize(s1));
        ok(ffi::llaisysNvidiaStreamBeginCapture(s0, 2, 0));
        let (st, p) = malloc_on_device_0_elsewhere();
        assert_eq!((st, p), (CAPTURE, 0), "an allocation that needs ordering");
        ok(ffi::llaisysNvidiaStreamEndCapture(s0, &mut g));
        ok(ffi::llaisysNvidiaGraphDestroy(g));
        let (st, p) = malloc_on_device_0_elsewhere();
        assert_eq!(st, 0, "{}", last_error_message());
        ok(ffi::llaisysNvidiaFreeDevice(p as *mut libc::c_void));

        // Freed during the capture, the block device 1's stream used is kept; once the capture
        // ends it goes back to the pool ordered after that stream, as any free of it: an event
        // recorded there, which device 0's legacy stream waits for.
        ok(ffi::llaisysNvidiaStreamBeginCapture(s0, 2, 0));
        let records = event_records();
        ok(ffi::llaisysNvidiaFreeDevice(x));
        assert_eq!(
            event_records(),
            records,
            "nothing recorded during the capture"
        );
        ok(ffi::llaisysNvidiaStreamEndCapture(s0, &mut g));
        assert!(
            event_records() > records,
            "the kept free was not ordered after the stream of device 1 that used the block"
        );
        ok(ffi::llaisysNvidiaGraphDestroy(g));

        ok(ffi::llaisysNvidiaFreeDevice(y));
        ok(ffi::llaisysNvidiaStreamDestroy(s0));
        ok(ffi::llaisysNvidiaStreamDestroy(s1));
    }
    println!("graphs two-devices child: ok");
}

#[test]
fn with_two_devices_a_capture_refuses_only_allocations_that_need_ordering() {
    run_child("child_two_devices", &[("FAKE_DEVICES", "2")], "two-devices");
}

#[test]
#[ignore = "entry point of a child process: run by a free_on_a_stream_waits_for_a_capture_of_its_device"]
fn child_free_on_a_stream() {
    support::child::require_child("child_free_on_a_stream");
    let s0 = stream_on(0, 0);
    let s1 = stream_on(0, 0);
    // SAFETY: the status API's functions with streams, graphs and blocks of ours.
    unsafe {
        // This thread captures in relaxed, then in global mode.
        for mode in [2, 0] {
            let mut p = null_mut();
            // 32 MiB: a large block, from cudaMalloc, which only cudaFree gives back.
            ok(ffi::llaisysNvidiaMallocDevice(&mut p, 32 << 20));
            ok(ffi::llaisysNvidiaStreamBeginCapture(s0, mode, 0));
            let (all, in_capture) = (device_frees(ALL_FREES), device_frees(FREES_IN_CAPTURE));
            let forbidden = unsafe_calls();
            // Freed in the order of a stream that does not capture: cudaFree waits for the
            // whole device, so it is kept until the capture has ended; the wait for the stream
            // is not one the capture forbids this thread.
            ok(ffi::llaisysNvidiaFreeAsync(p, s1));
            assert_eq!(
                device_frees(FREES_IN_CAPTURE),
                in_capture,
                "mode {mode}: cudaFree while a stream of the device captures"
            );
            assert_eq!(
                unsafe_calls(),
                forbidden,
                "mode {mode}: a call the capture forbids this thread"
            );
            let mut g = null_mut();
            ok(ffi::llaisysNvidiaStreamEndCapture(s0, &mut g));
            assert!(
                device_frees(ALL_FREES) > all,
                "mode {mode}: the kept free is done once the capture has ended"
            );
            ok(ffi::llaisysNvidiaGraphDestroy(g));
        }
        ok(ffi::llaisysNvidiaStreamDestroy(s0));
        ok(ffi::llaisysNvidiaStreamDestroy(s1));
    }
    println!("graphs free-on-a-stream child: ok");
}

#[test]
fn a_free_on_a_stream_waits_for_a_capture_of_its_device() {
    run_child("child_free_on_a_stream", &[], "free-on-a-stream");
}

#[test]
#[ignore = "entry point of a child process: run by frees_kept_for_another_device_are_done_in_relaxed_mode"]
fn child_flush_while_capturing() {
    support::child::require_child("child_flush_while_capturing");
    let raw = cudart();
    let s0 = stream_on(0, 0);
    let s1 = stream_on(1, 0);
    let (mut x, mut y) = (null_mut(), null_mut());
    // SAFETY: the status API's functions with streams, graphs and blocks of ours; cudart's own
    // capture calls on a stream of ours.
    unsafe {
        ok(ffi::llaisysNvidiaMallocDevice(&mut x, 1 << 20));
        ok(ffi::llaisysNvidiaSetDevice(1));
        ok(ffi::llaisysNvidiaMallocDevice(&mut y, 1 << 20));
        ok(ffi::llaisysNvidiaSetDevice(0));
        // Freed while device 1 captures (begun with cudart, whose end flushes nothing): the
        // free is kept.
        raw.begin(s1, 2);
        let all = device_frees(ALL_FREES);
        ok(ffi::llaisysNvidiaFreeDevice(y));
        assert_eq!(device_frees(ALL_FREES), all, "freed during the capture");
        raw.end(s1);
        // This thread captures device 0 in global mode; its next free does the kept one, of
        // device 1, which no capture forbids now, in relaxed mode: cudaFree would otherwise
        // invalidate this thread's capture.
        ok(ffi::llaisysNvidiaStreamBeginCapture(s0, 0, 0));
        let not_relaxed = unsafe_calls();
        ok(ffi::llaisysNvidiaFreeDevice(x));
        assert_eq!(
            device_frees(ALL_FREES),
            all + 1,
            "the kept free of device 1 is done"
        );
        assert_eq!(
            unsafe_calls(),
            not_relaxed,
            "a call that may synchronize on a thread capturing in global mode"
        );
        let mut g = null_mut();
        ok(ffi::llaisysNvidiaStreamEndCapture(s0, &mut g));
        ok(ffi::llaisysNvidiaGraphDestroy(g));
        assert_eq!(
            device_frees(ALL_FREES),
            all + 2,
            "x is freed once the capture has ended"
        );
        ok(ffi::llaisysNvidiaStreamDestroy(s0));
        ok(ffi::llaisysNvidiaStreamDestroy(s1));
    }
    println!("graphs flush-while-capturing child: ok");
}

#[test]
fn frees_kept_for_another_device_are_done_in_relaxed_mode() {
    // The cache off: every free is a cudaFree, which the stand-in counts.
    run_child(
        "child_flush_while_capturing",
        &[("FAKE_DEVICES", "2"), ("LLAISYS_NVIDIA_DEVICE_CACHE", "0")],
        "flush-while-capturing",
    );
}

#[test]
#[ignore = "entry point of a child process: run by out_of_memory_releases_the_devices_no_capture_holds_back"]
fn child_oom_beside_a_capture() {
    support::child::require_child("child_oom_beside_a_capture");
    const CAPTURE: libc::c_int = 8;
    let raw = cudart();
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let fail_mallocs = unsafe { fake::<extern "C" fn(libc::c_long)>(c"fake_fail_next_mallocs") };
    let s0 = stream_on(0, 0);
    let (mut x, mut y, mut z) = (null_mut(), null_mut(), null_mut());
    let mut stats = ffi::AllocatorStats::default();
    // SAFETY: the status API's functions with streams, graphs and blocks of ours; cudart's own
    // capture calls on a stream of ours; `stats` is writable.
    unsafe {
        ok(ffi::llaisysNvidiaMallocDevice(&mut x, 1 << 20));
        ok(ffi::llaisysNvidiaSetDevice(1));
        ok(ffi::llaisysNvidiaMallocDevice(&mut y, 1 << 20));
        // Device 0 captures, in global mode (begun with cudart on this thread); device 1 runs
        // out of memory once: its caches are released (device 0's stay), in relaxed mode, and
        // the allocation is tried again.
        raw.begin(s0, 0);
        fail_mallocs(1);
        let forbidden = unsafe_calls();
        let st = ffi::llaisysNvidiaMallocDevice(&mut z, 4 << 20);
        assert_eq!(st, 0, "not retried: {}", last_error_message());
        assert_eq!(
            unsafe_calls(),
            forbidden,
            "a call the capture forbids this thread"
        );
        assert!(!z.is_null());
        ok(ffi::llaisysNvidiaDeviceMemoryStats(1, &mut stats));
        assert_eq!(stats.oom_retries, 1);
        // Releasing by hand: device 1's cache goes, device 0's stays, and the capture is named.
        assert_eq!(ffi::llaisysNvidiaReleaseCachedMemory(), CAPTURE);
        let msg = last_error_message();
        assert!(
            msg.contains("device 0") && msg.contains("other devices"),
            "{msg}"
        );
        raw.end(s0);
        ok(ffi::llaisysNvidiaReleaseCachedMemory());
        ok(ffi::llaisysNvidiaFreeDevice(z));
        ok(ffi::llaisysNvidiaFreeDevice(y));
        ok(ffi::llaisysNvidiaSetDevice(0));
        ok(ffi::llaisysNvidiaFreeDevice(x));
        ok(ffi::llaisysNvidiaStreamDestroy(s0));
    }
    println!("graphs oom-beside-a-capture child: ok");
}

#[test]
fn out_of_memory_releases_the_devices_no_capture_holds_back() {
    run_child(
        "child_oom_beside_a_capture",
        &[("FAKE_DEVICES", "2")],
        "oom-beside-a-capture",
    );
}

#[test]
#[ignore = "entry point of a child process: run by an_allocation_whose_ordering_fails_is_not_left_in_use"]
fn child_failed_ordering() {
    support::child::require_child("child_failed_ordering");
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let fail_records = unsafe { fake::<extern "C" fn(libc::c_long)>(c"fake_fail_next_records") };
    let in_use = || {
        let mut stats = ffi::AllocatorStats::default();
        // SAFETY: `stats` is writable.
        ok(unsafe { ffi::llaisysNvidiaDeviceMemoryStats(0, &mut stats) });
        stats.in_use_bytes
    };
    let s1 = stream_on(1, 0);
    let (mut x, mut y, mut z) = (null_mut(), null_mut(), null_mut());
    let before;
    // SAFETY: the status API's functions with streams and blocks of ours.
    unsafe {
        ok(ffi::llaisysNvidiaMallocDevice(&mut x, 1 << 20));
        ok(ffi::llaisysNvidiaSetDevice(1));
        ok(ffi::llaisysNvidiaMallocDevice(&mut y, 1 << 20));
        ok(ffi::llaisysNvidiaSetDevice(0));
        // A stream of device 1 uses device 0's memory: an allocation on device 0 orders it
        // after the allocation (an event on device 0), and a free after it (an event on it).
        ok(ffi::llaisysNvidiaMemcpyAsync(y, x, 1 << 20, 3, s1));
        ok(ffi::llaisysNvidiaStreamSynchronize(s1));
        before = in_use();
        // Both fail: the allocation is refused and its block, which could not be freed in
        // order, is not left counted in use.
        fail_records(2);
        assert_ne!(ffi::llaisysNvidiaMallocDevice(&mut z, 1 << 20), 0);
        assert!(z.is_null());
        assert_eq!(
            in_use(),
            before,
            "the refused allocation's block is counted in use"
        );
        // The next call that does the kept frees gives it back.
        ok(ffi::llaisysNvidiaReleaseCachedMemory());
        ok(ffi::llaisysNvidiaMallocDevice(&mut z, 1 << 20));
        ok(ffi::llaisysNvidiaFreeDevice(z));
        ok(ffi::llaisysNvidiaFreeDevice(x));
        ok(ffi::llaisysNvidiaSetDevice(1));
        ok(ffi::llaisysNvidiaFreeDevice(y));
        ok(ffi::llaisysNvidiaSetDevice(0));
        ok(ffi::llaisysNvidiaStreamDestroy(s1));
    }
    assert_eq!(in_use(), before - (1 << 20));
    println!("graphs failed-ordering child: ok");
}

#[test]
fn an_allocation_whose_ordering_fails_is_not_left_in_use() {
    run_child(
        "child_failed_ordering",
        &[("FAKE_DEVICES", "2")],
        "failed-ordering",
    );
}

#[test]
#[ignore = "entry point of a child process: run by a_thread_capturing_in_global_mode_makes_no_call_it_forbids"]
fn child_global_capture_calls() {
    support::child::require_child("child_global_capture_calls");
    const CAPTURE: libc::c_int = 8;
    let raw = cudart();
    let s0 = stream_on(0, 0);
    let (mut a, mut b, mut big, mut pinned) = (null_mut(), null_mut(), null_mut(), null_mut());
    let n = 1 << 20;
    // SAFETY: the status API's functions with streams, graphs and blocks of ours; cudart's own
    // capture calls on a stream of ours.
    unsafe {
        ok(ffi::llaisysNvidiaMallocDevice(&mut a, n));
        ok(ffi::llaisysNvidiaMallocDevice(&mut big, 32 << 20));
        ok(ffi::llaisysNvidiaMallocHost(&mut pinned, n));
        ok(ffi::llaisysNvidiaFreeHost(pinned));
        ok(ffi::llaisysNvidiaSetDevice(1));
        ok(ffi::llaisysNvidiaMallocDevice(&mut b, n));
        // This thread captures device 0 in global mode through the library (device 1 current
        // again after the begin): what waits is refused, nothing it forbids is called.
        ok(ffi::llaisysNvidiaSetDevice(0));
        ok(ffi::llaisysNvidiaStreamBeginCapture(s0, 0, 0));
        ok(ffi::llaisysNvidiaSetDevice(1));
        let forbidden = unsafe_calls();
        assert_eq!(
            ffi::llaisysNvidiaMemset(b, 0, n),
            CAPTURE,
            "a memset that waits"
        );
        assert_eq!(
            ffi::llaisysNvidiaMemcpyPeer(b, 1, a, 0, n),
            CAPTURE,
            "a peer copy that waits"
        );
        assert_eq!(
            unsafe_calls(),
            forbidden,
            "a call the capture forbids this thread"
        );
        // A block from cudaMalloc has no free a graph could hold: refused on the capturing
        // stream, and still allocated.
        assert_eq!(ffi::llaisysNvidiaFreeAsync(big, s0), CAPTURE);
        let mut g = null_mut();
        ok(ffi::llaisysNvidiaStreamEndCapture(s0, &mut g));
        ok(ffi::llaisysNvidiaGraphDestroy(g));
        ok(ffi::llaisysNvidiaSetDevice(0));
        ok(ffi::llaisysNvidiaFreeAsync(big, s0));
        ok(ffi::llaisysNvidiaStreamSynchronize(s0));

        // Device 0 captures in global mode (begun with cudart on this thread) and holds no
        // cached device memory (the cache is off): releasing the caches from device 1 frees
        // nothing, pinned blocks included, and says why.
        raw.begin(s0, 0);
        ok(ffi::llaisysNvidiaSetDevice(1));
        let forbidden = unsafe_calls();
        assert_eq!(ffi::llaisysNvidiaReleaseCachedMemory(), CAPTURE);
        assert_eq!(
            unsafe_calls(),
            forbidden,
            "a release the capture forbids this thread"
        );
        raw.end(s0);
        ok(ffi::llaisysNvidiaReleaseCachedMemory());
        ok(ffi::llaisysNvidiaFreeDevice(b));
        ok(ffi::llaisysNvidiaSetDevice(0));
        ok(ffi::llaisysNvidiaFreeDevice(a));
        ok(ffi::llaisysNvidiaStreamDestroy(s0));
    }
    println!("graphs global-capture-calls child: ok");
}

#[test]
fn a_thread_capturing_in_global_mode_makes_no_call_it_forbids() {
    run_child(
        "child_global_capture_calls",
        &[("FAKE_DEVICES", "2"), ("LLAISYS_NVIDIA_DEVICE_CACHE", "0")],
        "global-capture-calls",
    );
}

/// The stand-in's work on the legacy stream refused during a capture so far (each would have
/// invalidated it).
fn legacy_in_capture() -> libc::c_long {
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let f = unsafe { fake::<extern "C" fn() -> libc::c_long>(c"fake_legacy_in_capture") };
    f()
}

/// What the stand-in pauses at (`fake_pause_at`).
const AT_RECORD: libc::c_int = 0;
const AT_COPY: libc::c_int = 1;
const AT_LEGACY_QUERY: libc::c_int = 2;

/// The stand-in's `fake_pause_at`, `fake_paused` and `fake_resume`.
fn pauses() -> (
    extern "C" fn(libc::c_int, libc::c_long),
    extern "C" fn() -> libc::c_long,
    extern "C" fn(),
) {
    // SAFETY: the fake is on the loader path (the parent's doing); the functions have these C
    // types.
    unsafe {
        (
            fake(c"fake_pause_at"),
            fake(c"fake_paused"),
            fake(c"fake_resume"),
        )
    }
}

/// The child of `a_capture_begun_mid_copy_by_another_thread_stays_valid`: a staged memcpy_sync
/// (H2D, then D2H) stops after its second chunk's DMA and event while another thread begins a
/// capture with cudart itself (in each mode) on a stream of ours; the copy goes on, never
/// touches the legacy stream again, and returns with every byte in place.
#[test]
#[ignore = "entry point of a child process: run by a_capture_begun_mid_copy_by_another_thread_stays_valid"]
fn child_capture_mid_copy() {
    support::child::require_child("child_capture_mid_copy");
    let raw = cudart();
    // SAFETY: the fake is on the loader path; the functions have these C types.
    let (pause_at, paused, resume) = pauses();
    let s = stream_on(0, 0);
    let n = (24 << 20) + 4097;
    let want: Vec<u8> = (0..n).map(|i| (i * 7 + i / 4093) as u8).collect();
    for mode in [0, 1, 2] {
        for d2h in [false, true] {
            let mut dev = null_mut();
            let mut back = vec![0u8; n];
            // SAFETY: the status API's functions with a block of `n` bytes of ours and host
            // buffers of `n` bytes.
            unsafe {
                ok(ffi::llaisysNvidiaMallocDevice(&mut dev, n));
                if d2h {
                    ok(ffi::llaisysNvidiaMemcpy(dev, want.as_ptr().cast(), n, 1));
                }
            }
            let refused = legacy_in_capture();
            pause_at(AT_RECORD, 2);
            let copied = std::thread::scope(|t| {
                let (stream, raw) = (s as usize, &raw);
                let capturer = t.spawn(move || {
                    while paused() == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    raw.begin(stream as *mut libc::c_void, mode);
                    resume();
                });
                // SAFETY: as above.
                let status = unsafe {
                    if d2h {
                        ffi::llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), dev, n, 2)
                    } else {
                        ffi::llaisysNvidiaMemcpy(dev, want.as_ptr().cast(), n, 1)
                    }
                };
                capturer.join().expect("the capturing thread");
                status
            });
            let what = format!("mode {mode}, {}", if d2h { "D2H" } else { "H2D" });
            assert_eq!(copied, 0, "{what}: {}", last_error_message());
            assert_eq!(
                legacy_in_capture(),
                refused,
                "{what}: legacy stream used mid-capture"
            );
            assert_eq!(status(s), 1, "{what}: the capture goes on");
            raw.end(s);
            if !d2h {
                // SAFETY: as above; no capture now.
                unsafe {
                    ok(ffi::llaisysNvidiaMemcpy(
                        back.as_mut_ptr().cast(),
                        dev,
                        n,
                        2,
                    ))
                };
            }
            assert!(back == want, "{what}: wrong data");
            ok(ffi::llaisysNvidiaFreeDevice(dev));
        }
    }
    ok(ffi::llaisysNvidiaStreamDestroy(s));
    println!("graphs capture-mid-copy child: ok");
}

#[test]
fn a_capture_begun_mid_copy_by_another_thread_stays_valid() {
    run_child("child_capture_mid_copy", &[], "capture-mid-copy");
}

/// The child of `a_capture_that_wins_the_race_costs_the_copy_nothing`: another thread begins a
/// capture with cudart between the copy's answer and its use of the legacy stream. Caught before
/// a chunk's DMA (the DMA refused), the copy moves to the side stream with it; caught between a
/// DMA and its event (the event refused), the copy waits for the capture to end and records it.
/// Either way it returns success with every byte in place; the stand-in counts the one refused
/// call (which in CUDA invalidates the capture that won the race).
#[test]
#[ignore = "entry point of a child process: run by a_capture_that_wins_the_race_costs_the_copy_nothing"]
fn child_capture_race_window() {
    support::child::require_child("child_capture_race_window");
    let raw = cudart();
    let (pause_at, paused, resume) = pauses();
    let s = stream_on(0, 0);
    let n = (24 << 20) + 4097;
    let want: Vec<u8> = (0..n).map(|i| (i * 13 + i / 4099) as u8).collect();
    // (where the copy stops, the stop's index, whether the capture ends before the copy can go on)
    for (at, nth, ends_first) in [(AT_LEGACY_QUERY, 3, false), (AT_COPY, 2, true)] {
        let mut dev = null_mut();
        // SAFETY: the status API with a block of `n` bytes of ours.
        ok(unsafe { ffi::llaisysNvidiaMallocDevice(&mut dev, n) });
        let refused = legacy_in_capture();
        pause_at(at, nth);
        let copied = std::thread::scope(|t| {
            let (stream, raw) = (s as usize, &raw);
            let capturer = t.spawn(move || {
                while paused() == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                raw.begin(stream as *mut libc::c_void, 1);
                resume();
                if ends_first {
                    // The copy waits for the capture to end before it records its event: ended
                    // once the copy has met the refusal (at most 10 s, however loaded the host).
                    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    while legacy_in_capture() == refused && std::time::Instant::now() < until {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    raw.end(stream as *mut libc::c_void);
                }
            });
            // SAFETY: as above, and `want` holds `n` bytes.
            let st = unsafe { ffi::llaisysNvidiaMemcpy(dev, want.as_ptr().cast(), n, 1) };
            capturer.join().expect("the capturing thread");
            st
        });
        let what = format!("stopped at {at} #{nth}");
        assert_eq!(copied, 0, "{what}: {}", last_error_message());
        assert_eq!(legacy_in_capture(), refused + 1, "{what}: one refused call");
        if !ends_first {
            raw.end(s);
        }
        let mut back = vec![0u8; n];
        // SAFETY: as above.
        ok(unsafe { ffi::llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), dev, n, 2) });
        assert!(back == want, "{what}: wrong data");
        ok(ffi::llaisysNvidiaFreeDevice(dev));
    }
    ok(ffi::llaisysNvidiaStreamDestroy(s));
    println!("graphs capture-race-window child: ok");
}

#[test]
fn a_capture_that_wins_the_race_costs_the_copy_nothing() {
    run_child("child_capture_race_window", &[], "capture-race-window");
}

/// The stand-in's `fake_side_waited` (how far in its queue a stream other than the legacy one
/// was made to wait) and `fake_queue_tail` (how many operations were queued so far).
fn queue_marks() -> (extern "C" fn() -> u64, extern "C" fn() -> u64) {
    // SAFETY: the fake is on the loader path (the parent's doing); the functions have these C
    // types.
    unsafe { (fake(c"fake_side_waited"), fake(c"fake_queue_tail")) }
}

/// The child of `a_copy_during_a_capture_waits_for_the_copies_before_it`: a staged H2D
/// memcpy_sync returns with its DMAs queued on the legacy stream, a D2D memcpy_sync queues its
/// copy there; then another thread begins a capture with cudart (relaxed) and each later copy,
/// sent to the side stream, must wait for everything queued before the capture. The data
/// arrives whole and the legacy stream is not touched during the capture.
#[test]
#[ignore = "entry point of a child process: run by a_copy_during_a_capture_waits_for_the_copies_before_it"]
fn child_side_copy_after_pending_work() {
    support::child::require_child("child_side_copy_after_pending_work");
    let raw = cudart();
    let (side_waited, queue_tail) = queue_marks();
    let s = stream_on(0, 0);
    let n = (24 << 20) + 4097;
    let want: Vec<u8> = (0..n).map(|i| (i * 11 + i / 4091) as u8).collect();
    let mut back = vec![0u8; n];
    let (mut a, mut b, mut c) = (null_mut(), null_mut(), null_mut());
    // SAFETY: the status API's functions with blocks of `n` bytes of ours and host buffers of
    // `n` bytes.
    unsafe {
        ok(ffi::llaisysNvidiaMallocDevice(&mut a, n));
        ok(ffi::llaisysNvidiaMallocDevice(&mut b, n));
        ok(ffi::llaisysNvidiaMallocDevice(&mut c, n));
        ok(ffi::llaisysNvidiaMemcpy(a, want.as_ptr().cast(), n, 1));
    }
    let staged = queue_tail();
    // SAFETY: as above.
    ok(unsafe { ffi::llaisysNvidiaMemcpy(b, a, 4096, 3) });
    let d2d = queue_tail();
    assert!(d2d > staged, "the D2D was queued");
    let refused = legacy_in_capture();
    let stream = s as usize;
    std::thread::scope(|t| {
        let raw = &raw;
        t.spawn(move || raw.begin(stream as *mut libc::c_void, 2));
    });
    assert_eq!(status(s), 1, "capturing");
    // SAFETY: as above.
    unsafe {
        ok(ffi::llaisysNvidiaMemcpy(c, a, n, 3));
    }
    assert!(
        side_waited() >= d2d,
        "the side stream waited up to {} of the queue, the copies before the capture reach {d2d}",
        side_waited()
    );
    // SAFETY: as above.
    unsafe {
        ok(ffi::llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), c, n, 2));
    }
    assert_eq!(
        legacy_in_capture(),
        refused,
        "legacy stream used mid-capture"
    );
    assert_eq!(status(s), 1, "the capture goes on");
    raw.end(s);
    assert!(back == want, "wrong data");
    let mut head = vec![0u8; 4096];
    // SAFETY: as above; `head` holds 4096 bytes.
    unsafe {
        ok(ffi::llaisysNvidiaMemcpy(
            head.as_mut_ptr().cast(),
            b,
            4096,
            2,
        ))
    };
    assert!(head[..] == want[..4096], "the D2D's data");
    for p in [a, b, c] {
        ok(ffi::llaisysNvidiaFreeDevice(p));
    }
    ok(ffi::llaisysNvidiaStreamDestroy(s));
    println!("graphs side-copy child: ok");
}

#[test]
fn a_copy_during_a_capture_waits_for_the_copies_before_it() {
    run_child("child_side_copy_after_pending_work", &[], "side-copy");
}

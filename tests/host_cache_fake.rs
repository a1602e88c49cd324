//! Host-only tests of the caches' books, dynamic build only: the children run with
//! tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13, whose streams are
//! tracked (a call on a destroyed one fails and is counted), whose cudaEventRecord the child can
//! make fail, and which counts device queries and event records.
//! - The pinned cache (src/cache/host.rs): a pinned block that memcpy_async used on a stream
//!   must get its ordering event when that stream is destroyed, also when a first
//!   destroy_stream failed half-way: else free_host later records on the destroyed stream.
//! - The device cache's recycling (src/cache/recycle.rs): a free_device that keeps its block
//!   makes no CUDA call until 16 are kept; the 16th records the barrier, and only then are the
//!   blocks handed out again. Threads that free at once while barriers fail now and then never
//!   get one block twice.
//! - A free on another device whose switch back fails (two stand-in devices): the free was done,
//!   the failure is reported, and a second free of the pointer is refused, not done again.
#![cfg(feature = "dynamic")]

use llaisys_nvidia::ffi::{self, TABLE};

mod support;

use support::{fake_function as fake, last_error_message};

const H2D: i32 = 1;

/// Asserts that a status API call succeeded, with the thread's last error message if not.
#[track_caller]
fn ok(status: libc::c_int) {
    assert_eq!(status, 0, "{}", last_error_message());
}

#[test]
#[ignore = "entry point of a child process: run by pinned_blocks_get_their_event_when_their_stream_is_destroyed"]
fn child_host_cache() {
    support::child::require_child("child_host_cache");
    // SAFETY: the fake is on the loader path (the parent's doing); its two test functions and
    // cudaGetLastError have these C types.
    let (dead_calls, fail_next_records, last_cuda_error) = unsafe {
        (
            fake::<extern "C" fn() -> libc::c_long>(c"fake_dead_stream_calls"),
            fake::<extern "C" fn(libc::c_long)>(c"fake_fail_next_records"),
            fake::<extern "C" fn() -> libc::c_int>(c"cudaGetLastError"),
        )
    };
    let n = 1 << 20;
    // SAFETY: the table's and the status API's functions, with buffers of `n` bytes.
    unsafe {
        assert_eq!((TABLE.get_device_count)(), 1, "the stand-in has one device");
        let dev = (TABLE.malloc_device)(n);
        assert!(!dev.is_null());

        // A stream that used two pinned blocks, whose first destroy fails at the first event.
        let s = (TABLE.create_stream)();
        let a = (TABLE.malloc_host)(n);
        let b = (TABLE.malloc_host)(n);
        assert!(!s.is_null() && !a.is_null() && !b.is_null());
        (TABLE.memcpy_async)(dev, a, 64 << 10, H2D, s);
        (TABLE.memcpy_async)(dev, b, 64 << 10, H2D, s);
        fail_next_records(1);
        assert_ne!(
            ffi::llaisysNvidiaStreamDestroy(s),
            0,
            "the failed event fails it"
        );
        let msg = last_error_message();
        assert!(msg.contains("cudaEventRecord"), "{msg}");
        // The stream is still ours and still works; its second destroy gives both blocks their
        // events, so freeing them makes no call on the destroyed stream.
        ok(ffi::llaisysNvidiaStreamSynchronize(s));
        ok(ffi::llaisysNvidiaStreamDestroy(s));
        ok(ffi::llaisysNvidiaFreeHost(a));
        ok(ffi::llaisysNvidiaFreeHost(b));
        assert_eq!(
            dead_calls(),
            0,
            "a call on the destroyed stream (failed destroy first)"
        );

        // The common case: used, destroyed, then the block freed.
        let s2 = (TABLE.create_stream)();
        let c = (TABLE.malloc_host)(n);
        (TABLE.memcpy_async)(dev, c, 64 << 10, H2D, s2);
        ok(ffi::llaisysNvidiaStreamDestroy(s2));
        ok(ffi::llaisysNvidiaFreeHost(c));
        assert_eq!(
            dead_calls(),
            0,
            "a call on the destroyed stream (plain destroy)"
        );

        // A stream that never touched our pinned memory, destroyed while blocks are live and
        // noted on another stream; then those blocks freed.
        let s3 = (TABLE.create_stream)();
        let s4 = (TABLE.create_stream)();
        let d = (TABLE.malloc_host)(n);
        (TABLE.memcpy_async)(dev, d, 64 << 10, H2D, s4);
        ok(ffi::llaisysNvidiaStreamDestroy(s3));
        ok(ffi::llaisysNvidiaStreamDestroy(s4));
        ok(ffi::llaisysNvidiaFreeHost(d));
        assert_eq!(
            dead_calls(),
            0,
            "a call on a destroyed stream (unused stream)"
        );

        // free_host whose event fails on an idle stream: the block waits for the stream
        // instead, the free succeeds, and the failure is not left as cudart's last error for
        // the application's next check to find.
        let s5 = (TABLE.create_stream)();
        let e = (TABLE.malloc_host)(n);
        (TABLE.memcpy_async)(dev, e, 64 << 10, H2D, s5);
        ok(ffi::llaisysNvidiaStreamSynchronize(s5));
        // Cleared: the failed destroy above reported its failure and left it set, as CUDA does.
        last_cuda_error();
        fail_next_records(1);
        ok(ffi::llaisysNvidiaFreeHost(e));
        assert_eq!(last_cuda_error(), 0, "free_host left its own failure set");
        ok(ffi::llaisysNvidiaStreamDestroy(s5));
        (TABLE.free_device)(dev);
    }
    println!("host-cache-fake child: ok");
}

#[test]
fn pinned_blocks_get_their_event_when_their_stream_is_destroyed() {
    let text = support::child::TestChild::new("child_host_cache")
        .loader_path(support::fake_cudart())
        .run_passing();
    assert!(text.contains("host-cache-fake child: ok"), "{text}");
}

#[test]
#[ignore = "entry point of a child process: run by freed_device_blocks_are_kept_without_a_cuda_call_until_the_barrier"]
fn child_device_recycle() {
    support::child::require_child("child_device_recycle");
    // SAFETY: the fake is on the loader path (the parent's doing); its counters have this C type.
    let (device_calls, records) = unsafe {
        (
            fake::<extern "C" fn() -> libc::c_long>(c"fake_device_calls"),
            fake::<extern "C" fn() -> libc::c_long>(c"fake_event_records"),
        )
    };
    let n = 4096;
    // SAFETY: the table's functions; every pointer freed is one malloc_device returned.
    unsafe {
        assert_eq!((TABLE.get_device_count)(), 1, "the stand-in has one device");
        (TABLE.set_device)(0);
        let blocks: Vec<usize> = (0..16).map(|_| (TABLE.malloc_device)(n) as usize).collect();
        assert!(blocks.iter().all(|&p| p != 0));
        let (calls, recorded) = (device_calls(), records());
        for &p in &blocks[..15] {
            (TABLE.free_device)(p as *mut libc::c_void);
        }
        assert_eq!(
            (device_calls(), records()),
            (calls, recorded),
            "15 frees kept as pending: no device query, no event"
        );
        // Pending blocks are not handed out: a new allocation is none of them.
        let fresh = (TABLE.malloc_device)(n) as usize;
        assert!(
            fresh != 0 && !blocks.contains(&fresh),
            "a pending block handed out"
        );
        // The 16th free records the barrier on the legacy stream of the current device.
        (TABLE.free_device)(blocks[15] as *mut libc::c_void);
        assert!(
            device_calls() > calls,
            "the barrier's free asks for the device"
        );
        assert_eq!(records(), recorded + 1, "one barrier for 16 frees");
        // Behind the barrier the blocks come back.
        let again = (TABLE.malloc_device)(n) as usize;
        assert!(blocks.contains(&again), "a ready block is reused");
        (TABLE.free_device)(again as *mut libc::c_void);
        (TABLE.free_device)(fresh as *mut libc::c_void);
    }
    println!("device-recycle child: ok");
}

#[test]
fn freed_device_blocks_are_kept_without_a_cuda_call_until_the_barrier() {
    let text = support::child::TestChild::new("child_device_recycle")
        .loader_path(support::fake_cudart())
        .run_passing();
    assert!(text.contains("device-recycle child: ok"), "{text}");
}

#[test]
#[ignore = "entry point of a child process: run by blocks_freed_while_barriers_fail_are_handed_out_once"]
fn child_barrier_failures() {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    support::child::require_child("child_barrier_failures");
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let fail_next_records =
        unsafe { fake::<extern "C" fn(libc::c_long)>(c"fake_fail_next_records") };
    let held: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let twice = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Threads that allocate eight blocks and free them, over and over: the frees keep the blocks
    // and record a barrier every 16, from whichever thread's free makes it due.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (held, twice, stop) = (held.clone(), twice.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: the table's functions; every pointer freed is one malloc_device
                    // returned, freed once.
                    unsafe {
                        (TABLE.set_device)(0);
                        for _ in 0..8 {
                            let p = (TABLE.malloc_device)(4096) as usize;
                            assert_ne!(p, 0, "malloc_device");
                            if !held.lock().expect("the set of blocks held").insert(p) {
                                twice.fetch_add(1, Ordering::Relaxed);
                            }
                            mine.push(p);
                        }
                        for p in mine.drain(..) {
                            held.lock().expect("the set of blocks held").remove(&p);
                            (TABLE.free_device)(p as *mut libc::c_void);
                        }
                    }
                }
            })
        })
        .collect();
    // A barrier fails now and then, maybe while another thread's succeeds.
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(3) && twice.load(Ordering::Relaxed) == 0
    {
        fail_next_records(1);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a thread of the child");
    }
    println!(
        "barrier-failures child: blocks handed out while held: {}",
        twice.load(Ordering::Relaxed)
    );
}

#[test]
fn blocks_freed_while_barriers_fail_are_handed_out_once() {
    let text = support::child::TestChild::new("child_barrier_failures")
        .loader_path(support::fake_cudart())
        .run_passing();
    assert!(
        text.contains("barrier-failures child: blocks handed out while held: 0"),
        "{text}"
    );
}

#[test]
#[ignore = "entry point of a child process: run by a_free_done_before_a_failed_switch_back_is_reported_and_not_done_again"]
fn child_failed_switch_back() {
    support::child::require_child("child_failed_switch_back");
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let fail_set_device = unsafe { fake::<extern "C" fn(libc::c_int)>(c"fake_fail_set_device") };
    // SAFETY: the table's and the status API's functions; the pointer is ours.
    unsafe {
        assert_eq!((TABLE.get_device_count)(), 2, "FAKE_DEVICES=2");
        ok(ffi::llaisysNvidiaSetDevice(1));
        // Larger than the recycling keeps (it would keep it without a CUDA call).
        let p = (TABLE.malloc_device)(256 << 20);
        assert!(!p.is_null());
        ok(ffi::llaisysNvidiaSetDevice(0));

        // The free makes device 1 current, frees, and cannot make device 0 current again.
        fail_set_device(0);
        assert_ne!(
            ffi::llaisysNvidiaFreeDevice(p),
            0,
            "the failed switch back is reported"
        );
        let msg = last_error_message();
        assert!(
            msg.contains("cudaSetDevice") && msg.contains("restoring"),
            "{msg}"
        );
        // The block was freed: a second free is refused, not done again.
        assert_ne!(ffi::llaisysNvidiaFreeDevice(p), 0, "a second free");
        let msg = last_error_message();
        assert!(msg.contains("already freed"), "{msg}");
    }
    println!("failed-switch-back child: ok");
}

#[test]
fn a_free_done_before_a_failed_switch_back_is_reported_and_not_done_again() {
    let text = support::child::TestChild::new("child_failed_switch_back")
        .loader_path(support::fake_cudart())
        .env("FAKE_DEVICES", "2")
        .run_passing();
    assert!(text.contains("failed-switch-back child: ok"), "{text}");
}

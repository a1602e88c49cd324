//! Host-only tests of the caches' books, dynamic build only: the children run with
//! tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13, whose streams are
//! tracked (a call on a destroyed one fails and is counted), whose cudaEventRecord the child can
//! make fail, and which counts device queries and event records.
//! - The pinned cache (src/cache/host.rs): a pinned block that memcpy_async used on a stream
//!   must get its ordering event when that stream is destroyed, also when a first
//!   destroy_stream failed half-way: else free_host later records on the destroyed stream.
//! - The device cache's recycling (src/cache/recycle.rs): a free_device that keeps its block
//!   makes no CUDA call until 16 are kept; the 16th records the barrier, and only then are the
//!   blocks handed out again.
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
    // SAFETY: the fake is on the loader path (the parent's doing); its two test functions have
    // these C types.
    let (dead_calls, fail_next_records) = unsafe {
        (
            fake::<extern "C" fn() -> libc::c_long>(c"fake_dead_stream_calls"),
            fake::<extern "C" fn(libc::c_long)>(c"fake_fail_next_records"),
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

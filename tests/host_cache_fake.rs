//! Host-only test of the pinned cache's stream books (src/cache/host.rs), dynamic build only: the
//! child runs with tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13,
//! whose streams are tracked (a call on a destroyed one fails and is counted) and whose
//! cudaEventRecord the child can make fail. A pinned block that memcpy_async used on a stream
//! must get its ordering event when that stream is destroyed, also when a first destroy_stream
//! failed half-way: else free_host later records on the destroyed stream.
#![cfg(feature = "dynamic")]

use llaisys_nvidia::ffi::{self, TABLE};
use std::ffi::CStr;

mod support;

use support::last_error_message;

const H2D: i32 = 1;

/// A function of the stand-in cudart, looked up in the loaded library.
///
/// # Safety
/// `T` is the C type of `name` in fake_cudart.c.
unsafe fn fake<T: Copy>(name: &CStr) -> T {
    // SAFETY: RTLD_NOLOAD only finds the library the child already loaded; dlsym reads its table.
    unsafe {
        let lib = libc::dlopen(
            c"libcudart.so.13".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        );
        assert!(!lib.is_null(), "the stand-in cudart is loaded");
        let f = libc::dlsym(lib, name.as_ptr());
        assert!(!f.is_null(), "the stand-in has {name:?}");
        std::mem::transmute_copy(&f)
    }
}

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
    let dir = support::c_shared_library(
        "tests/fixtures/fake_cudart.c",
        &support::tmp_dir().join("host-cache-fake-cudart"),
        "libcudart.so.13",
        &["-DFAKE_ASYNC", "-pthread", "-Wl,-soname,libcudart.so.13"].map(String::from),
    );
    let text = support::child::TestChild::new("child_host_cache")
        .loader_path(&dir)
        .run_passing();
    assert!(text.contains("host-cache-fake child: ok"), "{text}");
}

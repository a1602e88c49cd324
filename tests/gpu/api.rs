//! The status-returning API on a real GPU (one device): events time a known copy, a stream
//! waiting on an event really waits, stream-ordered allocation across two streams, memset,
//! register/unregister, pointer attributes of every kind of memory, managed memory, peer copies
//! on one device. Tests needing two devices are in `two_devices` at the end.

use crate::common::{api, fill};
use crate::require_gpu;
use crate::support::last_error_message;
use llaisys_nvidia::ffi::*;
use std::os::raw::c_void;
use std::ptr::null_mut;
use std::time::Instant;

fn ok(status: i32, what: &str) {
    assert_eq!(status, 0, "{what}: {}", last_error_message());
}

unsafe fn stream(flags: u32) -> *mut c_void {
    let mut s = null_mut();
    ok(llaisysNvidiaStreamCreate(&mut s, flags, 0), "stream create");
    s
}

unsafe fn event(flags: u32) -> *mut c_void {
    let mut e = null_mut();
    ok(llaisysNvidiaEventCreate(&mut e, flags), "event create");
    e
}

#[test]
#[ignore = "needs a CUDA device"]
fn init_count_properties_and_priorities() {
    let n = require_gpu!();
    unsafe {
        let mut ms = -1.0;
        ok(llaisysNvidiaInitDevice(0, &mut ms), "init");
        assert!(ms >= 0.0);
        let mut count = -1;
        ok(llaisysNvidiaDeviceCount(&mut count), "count");
        assert_eq!(count, n);
        let mut d = -1;
        ok(llaisysNvidiaGetDevice(&mut d), "get device");
        assert_eq!(d, 0);
        let mut p = std::mem::MaybeUninit::<DeviceProperties>::zeroed();
        ok(
            llaisysNvidiaGetDeviceProperties(0, p.as_mut_ptr()),
            "properties",
        );
        let p = p.assume_init();
        let want = llaisys_nvidia::device::properties(0).expect("properties");
        assert_eq!((p.major, p.minor), want.compute_capability);
        assert_eq!(p.total_memory, want.total_memory);
        assert!(std::ffi::CStr::from_ptr(p.name.as_ptr()).to_string_lossy() == want.name);
        let (mut free, mut total) = (0, 0);
        ok(llaisysNvidiaMemGetInfo(&mut free, &mut total), "mem info");
        assert!(free > 0 && free <= total && total == p.total_memory);
        let (mut lo, mut hi) = (0, 0);
        ok(
            llaisysNvidiaStreamPriorityRange(&mut lo, &mut hi),
            "priorities",
        );
        assert!(hi <= lo);
        let mut s = null_mut();
        ok(
            llaisysNvidiaStreamCreate(&mut s, STREAM_NON_BLOCKING, hi),
            "high-priority stream",
        );
        let mut done = -1;
        ok(llaisysNvidiaStreamQuery(s, &mut done), "query");
        assert_eq!(done, 1);
        ok(llaisysNvidiaStreamDestroy(s), "destroy");
        assert_eq!(llaisysNvidiaSetDevice(n), 1, "bad device is a CUDA error");
        assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaLastCudaError(), 101);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn events_time_a_known_copy_within_ten_percent_of_wall_time() {
    require_gpu!();
    let size = 1usize << 30;
    unsafe {
        let s = stream(0);
        let (e0, e1) = (event(0), event(0));
        let mut h = null_mut();
        ok(llaisysNvidiaMallocHost(&mut h, size), "pinned");
        let mut d = null_mut();
        ok(llaisysNvidiaMallocDevice(&mut d, size), "device");
        ok(llaisysNvidiaMemcpyAsync(d, h, size, 1, s), "warm-up copy");
        ok(llaisysNvidiaStreamSynchronize(s), "sync");
        let wall = Instant::now();
        ok(llaisysNvidiaEventRecord(e0, s), "record start");
        ok(llaisysNvidiaMemcpyAsync(d, h, size, 1, s), "copy");
        ok(llaisysNvidiaEventRecord(e1, s), "record end");
        ok(llaisysNvidiaEventSynchronize(e1), "event sync");
        let wall_ms = wall.elapsed().as_secs_f64() * 1e3;
        let mut ms = 0f32;
        ok(llaisysNvidiaEventElapsedTime(&mut ms, e0, e1), "elapsed");
        eprintln!("1 GiB H2D: events {ms:.2} ms, wall {wall_ms:.2} ms");
        assert!(
            (ms as f64 - wall_ms).abs() <= 0.1 * wall_ms,
            "events {ms} ms vs wall {wall_ms} ms"
        );
        let mut done = 0;
        ok(llaisysNvidiaEventQuery(e1, &mut done), "query");
        assert_eq!(done, 1);
        ok(llaisysNvidiaEventDestroy(e0), "destroy");
        ok(llaisysNvidiaEventDestroy(e1), "destroy");
        assert_eq!(llaisysNvidiaEventDestroy(e1), 3, "double destroy refused");
        ok(llaisysNvidiaFreeHost(h), "free host");
        ok(llaisysNvidiaFreeDevice(d), "free device");
        ok(llaisysNvidiaStreamDestroy(s), "destroy stream");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_waiting_on_an_event_really_waits() {
    require_gpu!();
    let size = 64 << 20;
    unsafe {
        let (s1, s2) = (stream(STREAM_NON_BLOCKING), stream(STREAM_NON_BLOCKING));
        let e = event(2);
        let (mut a, mut big1, mut big2) = (null_mut(), null_mut(), null_mut());
        ok(llaisysNvidiaMallocDevice(&mut a, size), "a");
        ok(llaisysNvidiaMallocDevice(&mut big1, 1 << 30), "big1");
        ok(llaisysNvidiaMallocDevice(&mut big2, 1 << 30), "big2");
        ok(llaisysNvidiaMemset(a, 0, size), "zero a");
        // s1: long work, then a = 0x5A; s2 waits for that, then reads a.
        for _ in 0..40 {
            ok(llaisysNvidiaMemcpyAsync(big2, big1, 1 << 30, 3, s1), "busy");
        }
        ok(llaisysNvidiaMemsetAsync(a, 0x5A, size, s1), "memset on s1");
        ok(llaisysNvidiaEventRecord(e, s1), "record");
        ok(llaisysNvidiaStreamWaitEvent(s2, e), "wait");
        let mut out = vec![0u8; size];
        let mut pinned = null_mut();
        ok(llaisysNvidiaMallocHost(&mut pinned, size), "pinned");
        ok(
            llaisysNvidiaMemcpyAsync(pinned, a, size, 2, s2),
            "read on s2",
        );
        ok(llaisysNvidiaStreamSynchronize(s2), "sync s2");
        std::ptr::copy_nonoverlapping(pinned.cast::<u8>(), out.as_mut_ptr(), size);
        assert!(
            out.iter().all(|&b| b == 0x5A),
            "s2 read before s1's memset: the wait did not hold"
        );
        ok(llaisysNvidiaStreamSynchronize(s1), "sync s1");
        for p in [a, big1, big2] {
            ok(llaisysNvidiaFreeDevice(p), "free");
        }
        ok(llaisysNvidiaFreeHost(pinned), "free pinned");
        ok(llaisysNvidiaEventDestroy(e), "destroy event");
        ok(llaisysNvidiaStreamDestroy(s1), "s1");
        ok(llaisysNvidiaStreamDestroy(s2), "s2");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn stream_ordered_allocation_across_two_streams_with_events() {
    require_gpu!();
    let size = 8 << 20;
    unsafe {
        let (s1, s2) = (stream(STREAM_NON_BLOCKING), stream(STREAM_NON_BLOCKING));
        let e = event(2);
        for round in 0..20u8 {
            let mut p = null_mut();
            ok(llaisysNvidiaMallocAsync(&mut p, size, s1), "malloc async");
            ok(
                llaisysNvidiaMemsetAsync(p, round as i32 + 1, size, s1),
                "fill on s1",
            );
            ok(llaisysNvidiaEventRecord(e, s1), "record");
            ok(llaisysNvidiaStreamWaitEvent(s2, e), "s2 waits");
            let mut back = vec![0u8; size];
            ok(
                llaisysNvidiaMemcpyAsync(back.as_mut_ptr().cast(), p, size, 2, s2),
                "read on s2",
            );
            ok(llaisysNvidiaFreeAsync(p, s2), "free on s2");
            ok(llaisysNvidiaStreamSynchronize(s2), "sync");
            assert!(back.iter().all(|&b| b == round + 1), "round {round}");
        }
        ok(llaisysNvidiaEventDestroy(e), "event");
        ok(llaisysNvidiaStreamDestroy(s1), "s1");
        ok(llaisysNvidiaStreamDestroy(s2), "s2");
    }
}

/// A large block of malloc_device (from 16 MiB: cudaMalloc memory, cache::large) freed on a
/// stream through llaisysNvidiaFreeAsync while that stream still reads it: the free is ordered
/// after the reader, and the next owner's write does not reach what the reader copies.
#[test]
#[ignore = "needs a CUDA device"]
fn large_block_freed_on_a_stream_after_its_reader() {
    require_gpu!();
    let api = api();
    let size = (20 << 20) + 9 * 4096;
    let stats = || llaisys_nvidia::ops::memory::device_memory_stats(-1).expect("stats");
    unsafe {
        let s1 = stream(0);
        let mut want = vec![0u8; size];
        fill(&mut want, 4242);
        let x = (api.malloc_device)(size);
        assert!(!x.is_null());
        ok(
            llaisysNvidiaMemcpy(x, want.as_ptr().cast(), size, 1),
            "fill x",
        );
        let y = crate::common::Dev::new(size);
        let _work = crate::caching::busy(s1, 40.0);
        (api.memcpy_async)(y.ptr, x, size, 3, s1);
        let before = stats();
        ok(llaisysNvidiaFreeAsync(x, s1), "free on s1");
        let after = stats();
        assert_eq!(after.free_count, before.free_count + 1);
        assert_eq!(after.in_use_bytes + size as u64, before.in_use_bytes);
        // A new owner of the size overwrites its block at once.
        let z = (api.malloc_device)(size);
        assert!(!z.is_null());
        let other = vec![0x5au8; size];
        ok(
            llaisysNvidiaMemcpy(z, other.as_ptr().cast(), size, 1),
            "overwrite z",
        );
        ok(llaisysNvidiaStreamSynchronize(s1), "sync s1");
        let mut got = vec![0u8; size];
        ok(
            llaisysNvidiaMemcpy(got.as_mut_ptr().cast(), y.ptr, size, 2),
            "read y",
        );
        assert!(got == want, "the reader on s1 saw the next owner's data");
        (api.free_device)(z);
        ok(llaisysNvidiaStreamDestroy(s1), "s1");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn memset_register_and_pointer_attributes_of_every_kind() {
    require_gpu!();
    let size = 4 << 20;
    unsafe {
        let (mut d, mut h, mut m, mut mh, mut md) =
            (null_mut(), null_mut(), null_mut(), null_mut(), null_mut());
        ok(llaisysNvidiaMallocDevice(&mut d, size), "device");
        ok(llaisysNvidiaMallocHost(&mut h, size), "pinned");
        ok(llaisysNvidiaMallocManaged(&mut m, size), "managed");
        ok(llaisysNvidiaMallocMapped(&mut mh, &mut md, size), "mapped");
        assert!(!md.is_null());
        let mut pageable = vec![1u8; size];
        let attr = |p: *const c_void| {
            let mut a = std::mem::MaybeUninit::<PointerAttributes>::zeroed();
            ok(
                llaisysNvidiaPointerGetAttributes(p, a.as_mut_ptr()),
                "attributes",
            );
            a.assume_init()
        };
        let a = attr(d);
        assert_eq!((a.kind, a.device, a.ours), (2, 0, 1));
        let a = attr(h);
        assert_eq!((a.kind, a.ours), (1, 1));
        let a = attr(m);
        assert_eq!((a.kind, a.ours), (3, 0));
        let a = attr(mh);
        assert_eq!((a.kind, a.ours), (1, 0));
        assert_eq!(a.device_pointer, md);
        let a = attr(pageable.as_ptr().cast());
        assert_eq!((a.kind, a.device, a.ours), (0, -1, 0));
        // memset, verified
        ok(llaisysNvidiaMemset(d, 0xC3, size), "memset");
        let mut back = vec![0u8; size];
        ok(
            llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), d, size, 2),
            "read",
        );
        assert!(back.iter().all(|&b| b == 0xC3));
        ok(
            llaisysNvidiaMemsetAsync(d.cast::<u8>().add(100).cast(), 0x11, 1000, null_mut()),
            "memset async",
        );
        ok(
            llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), d, size, 2),
            "read",
        );
        assert!(
            back[..100].iter().all(|&b| b == 0xC3)
                && back[100..1100].iter().all(|&b| b == 0x11)
                && back[1100] == 0xC3
        );
        // register / unregister round trip
        ok(
            llaisysNvidiaHostRegister(pageable.as_mut_ptr().cast(), size),
            "register",
        );
        assert_eq!(attr(pageable.as_ptr().cast()).kind, 1);
        fill(&mut pageable, 5);
        ok(
            llaisysNvidiaMemcpy(d, pageable.as_ptr().cast(), size, 1),
            "H2D from registered",
        );
        ok(
            llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), d, size, 2),
            "read",
        );
        assert!(back == pageable);
        ok(
            llaisysNvidiaHostUnregister(pageable.as_mut_ptr().cast()),
            "unregister",
        );
        assert_eq!(attr(pageable.as_ptr().cast()).kind, 0);
        assert_eq!(
            llaisysNvidiaHostUnregister(pageable.as_mut_ptr().cast()),
            1,
            "double unregister is CUDA's error"
        );
        // managed: host writes, prefetch to the device, device copy, prefetch back
        std::ptr::write_bytes(m.cast::<u8>(), 0x77, size);
        ok(
            llaisysNvidiaMemAdvise(m, size, 3 /* cudaMemAdviseSetPreferredLocation */, 0),
            "advise",
        );
        ok(
            llaisysNvidiaMemPrefetch(m, size, 0, null_mut()),
            "prefetch to device",
        );
        ok(llaisysNvidiaMemcpy(d, m, size, 3), "D2D from managed");
        ok(
            llaisysNvidiaMemPrefetch(m, size, -1, null_mut()),
            "prefetch to host",
        );
        ok(llaisysNvidiaDeviceSynchronize(), "sync");
        ok(
            llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), d, size, 2),
            "read",
        );
        assert!(back.iter().all(|&b| b == 0x77));
        // wrong frees and oversubscription are refused
        assert_eq!(llaisysNvidiaFreeManaged(d), 3);
        assert_eq!(
            llaisysNvidiaFreeMapped(h),
            3,
            "a cached pinned block is not mapped memory"
        );
        let (mut free, mut total) = (0, 0);
        ok(llaisysNvidiaMemGetInfo(&mut free, &mut total), "mem info");
        let mut big = null_mut();
        assert_eq!(
            llaisysNvidiaMallocManaged(&mut big, free + (1 << 30)),
            3,
            "managed oversubscription refused"
        );
        ok(llaisysNvidiaFreeManaged(m), "free managed");
        ok(llaisysNvidiaFreeMapped(mh), "free mapped");
        ok(llaisysNvidiaFreeHost(h), "free pinned");
        ok(llaisysNvidiaFreeDevice(d), "free device");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn peer_copy_on_one_device_and_table_interplay() {
    require_gpu!();
    let size = 16 << 20;
    let table = api();
    unsafe {
        let (a, b) = ((table.malloc_device)(size), (table.malloc_device)(size));
        let mut src = vec![0u8; size];
        fill(&mut src, 77);
        (table.memcpy_sync)(a, src.as_ptr().cast(), size, 1);
        ok(
            llaisysNvidiaMemcpyPeer(b, 0, a, 0, size),
            "peer copy on one device",
        );
        let mut back = vec![0u8; size];
        ok(
            llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), b, size, 2),
            "read",
        );
        assert!(back == src);
        // A stream of the status API works with the table, and the reverse.
        let s = stream(0);
        (table.memcpy_async)(back.as_mut_ptr().cast(), a, size, 2, s);
        ok(llaisysNvidiaStreamSynchronize(s), "sync");
        (table.destroy_stream)(s);
        ok(llaisysNvidiaFreeDevice(a), "free a");
        (table.free_device)(b);
    }
}

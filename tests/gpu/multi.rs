//! Two devices: threads on different devices at once, llaisys's stream-before-set_device
//! pattern (copies, caches and frees ordered right), peer copies. Each test skips visibly with
//! fewer than two devices and fails then under LLAISYS_TEST_REQUIRE_GPUS=2.

use crate::common::{api, fill};
use crate::require_gpus;
use llaisys_nvidia::ffi::*;
use llaisys_nvidia::sys as raw;
use std::os::raw::c_void;
use std::sync::{Arc, Barrier};

const H2D: i32 = 1;
const D2H: i32 = 2;
const D2D: i32 = 3;
const MIB: usize = 1 << 20;

fn ok(status: i32, what: &str) {
    assert_eq!(status, 0, "{what}: status {status}");
}

fn device_of(p: *const c_void) -> i32 {
    llaisys_nvidia::pointer::attributes(p)
        .expect("attributes")
        .device
}

fn on_thread(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f).join().expect("test thread panicked");
}

/// Reads `len` bytes of device memory at `p` (any device) with memcpy_sync.
fn read(p: *const c_void, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    unsafe { (api().memcpy_sync)(v.as_mut_ptr().cast(), p, len, D2H) };
    v
}

#[test]
#[ignore = "needs 2 CUDA devices"]
fn threads_on_two_devices_at_once() {
    require_gpus!(2);
    let start = Arc::new(Barrier::new(2));
    let workers: Vec<_> = (0..2)
        .map(|d| {
            let start = start.clone();
            std::thread::spawn(move || {
                let api = api();
                unsafe { (api.set_device)(d) };
                let before = llaisys_nvidia::ops::memory::device_memory_stats(d)
                    .expect("stats")
                    .in_use_bytes;
                let s = unsafe { (api.create_stream)() };
                start.wait();
                for i in 0..300usize {
                    assert_eq!(
                        llaisys_nvidia::device::current().unwrap(),
                        d,
                        "iteration {i}"
                    );
                    let len = MIB + i * 4096 * (d as usize + 1);
                    let mut src = vec![0u8; len];
                    fill(&mut src, (d as u64) << 32 | i as u64);
                    unsafe {
                        let p = (api.malloc_device)(len);
                        assert_eq!(device_of(p), d, "allocation of thread on device {d}");
                        (api.memcpy_sync)(p, src.as_ptr().cast(), len, H2D);
                        let mut back = vec![0u8; len];
                        (api.memcpy_async)(back.as_mut_ptr().cast(), p, len, D2H, s);
                        (api.stream_synchronize)(s);
                        assert!(back == src, "device {d} iteration {i}: data");
                        (api.free_device)(p);
                    }
                }
                unsafe { (api.destroy_stream)(s) };
                unsafe { (api.device_synchronize)() };
                let after = llaisys_nvidia::ops::memory::device_memory_stats(d)
                    .expect("stats")
                    .in_use_bytes;
                assert_eq!(after, before, "device {d}: bytes in use");
            })
        })
        .collect();
    for w in workers {
        w.join().expect("device thread");
    }
}

/// llaisys's Runtime(1) makes its stream while device 0 is current and calls set_device(1)
/// later: the stream belongs to device 0 and moves device 1's memory. Copies of every kind
/// (pinned, pageable staged, device to device) on it are right.
#[test]
#[ignore = "needs 2 CUDA devices"]
fn llaisys_stream_made_before_set_device_copies_right() {
    require_gpus!(2);
    on_thread(|| unsafe {
        let api = api();
        let s = runtime_stream_of_device_1();
        let mut dev = -1;
        assert_eq!(raw::cudaStreamGetDevice(s.cast(), &mut dev).0, 0);
        assert_eq!(
            dev, 0,
            "the stream belongs to the device current at create_stream"
        );
        let n = 256 * MIB;
        let a = (api.malloc_device)(n);
        let b = (api.malloc_device)(n);
        assert_eq!((device_of(a), device_of(b)), (1, 1));
        let pinned = (api.malloc_host)(n) as *mut u8;
        let src = std::slice::from_raw_parts_mut(pinned, n);
        fill(src, 11);
        (api.memcpy_async)(a, pinned.cast(), n, H2D, s);
        (api.memcpy_async)(b, a, n, D2D, s);
        let mut back = vec![0u8; n];
        // Pageable destination: the staged path, its events on the stream's device (0).
        (api.memcpy_async)(back.as_mut_ptr().cast(), b, n, D2H, s);
        (api.stream_synchronize)(s);
        assert!(
            back == *src,
            "H2D, D2D, D2H on a stream of device 0 into device 1"
        );
        // Pageable source, staged.
        let mut pageable = vec![0u8; 64 * MIB];
        fill(&mut pageable, 12);
        (api.memcpy_async)(a, pageable.as_ptr().cast(), pageable.len(), H2D, s);
        (api.stream_synchronize)(s);
        assert!(read(a, pageable.len()) == pageable, "staged H2D");
        (api.free_host)(pinned.cast());
        (api.free_device)(a);
        (api.free_device)(b);
        (api.destroy_stream)(s);
    });
}

/// What llaisys's Runtime(1) does: its stream is made while device 0 is current, then
/// set_device(1). Returns the stream; device 1 is current.
fn runtime_stream_of_device_1() -> *mut c_void {
    let api = api();
    unsafe {
        (api.set_device)(0);
        let s = (api.create_stream)();
        (api.set_device)(1);
        s
    }
}

/// The last MiB of the `n` bytes at `p`.
fn last_mib(p: *mut c_void, n: usize) -> *mut c_void {
    p.cast::<u8>().wrapping_add(n - MIB).cast()
}

/// A reuse test tested something only if the pool handed the freed block out again.
fn report_reuse(test: &str, reused: usize, rounds: usize) {
    eprintln!("{test}: block reused in {reused}/{rounds} rounds");
    assert!(
        reused > 0,
        "{test}: the pool never handed the freed block out again: nothing was tested"
    );
}

/// free_device of device 1 memory that a stream of device 0 may still write: the block is
/// reused only after that stream's work (without the cross-device ordering, a new owner's data
/// written at once is overwritten by the late copy).
#[test]
#[ignore = "needs 2 CUDA devices"]
fn free_device_waits_for_a_stream_of_another_device() {
    require_gpus!(2);
    on_thread(|| unsafe {
        let api = api();
        let s = runtime_stream_of_device_1();
        let n = 1 << 30;
        let src = (api.malloc_device)(n);
        ok(llaisysNvidiaMemset(src, 0xAB, n), "memset");
        let mut mine = vec![0u8; MIB];
        fill(&mut mine, 21);
        let mut reused = 0;
        for round in 0..6 {
            let block = (api.malloc_device)(n);
            // Two late 1 GiB copies into the block, queued on the device-0 stream.
            (api.memcpy_async)(block, src, n, D2D, s);
            (api.memcpy_async)(block, src, n, D2D, s);
            (api.free_device)(block);
            let again = (api.malloc_device)(n);
            reused += (again == block) as usize;
            // The new owner writes the block's last MiB at once (legacy stream of device 1).
            let tail = last_mib(again, n);
            (api.memcpy_sync)(tail, mine.as_ptr().cast(), MIB, H2D);
            (api.stream_synchronize)(s);
            (api.device_synchronize)();
            assert!(
                read(tail, MIB) == mine,
                "round {round}: the late copy overwrote the new owner's data"
            );
            (api.free_device)(again);
        }
        report_reuse(
            "free_device_waits_for_a_stream_of_another_device",
            reused,
            6,
        );
        (api.free_device)(src);
        (api.destroy_stream)(s);
    });
}

/// The other direction: work on device 1's legacy stream still reads a block when it is freed
/// and handed out again; the new owner's copy on a stream of device 0 must wait for it.
#[test]
#[ignore = "needs 2 CUDA devices"]
fn reused_block_waits_for_old_work_before_another_devices_stream() {
    require_gpus!(2);
    on_thread(|| unsafe {
        let api = api();
        let s = runtime_stream_of_device_1();
        let n = 1 << 30;
        let sink = (api.malloc_device)(n);
        let probe = (api.malloc_device)(MIB);
        // The stream has used device 1 memory once (as llaisys's runtime would).
        (api.memcpy_async)(probe, sink, MIB, D2D, s);
        (api.stream_synchronize)(s);
        let mut mine = vec![0u8; MIB];
        fill(&mut mine, 31);
        let pinned = (api.malloc_host)(MIB);
        std::ptr::copy_nonoverlapping(mine.as_ptr(), pinned.cast::<u8>(), MIB);
        let mut reused = 0;
        for round in 0..6 {
            let block = (api.malloc_device)(n);
            ok(llaisysNvidiaMemset(block, 0x5A, n), "memset");
            // Old work on the legacy stream of device 1 copies the block out twice.
            (api.memcpy_async)(sink, block, n, D2D, std::ptr::null_mut());
            (api.memcpy_async)(sink, block, n, D2D, std::ptr::null_mut());
            (api.free_device)(block);
            let again = (api.malloc_device)(n);
            reused += (again == block) as usize;
            // The new owner writes its tail on the device-0 stream, at once.
            let tail = last_mib(again, n);
            (api.memcpy_async)(tail, pinned, MIB, H2D, s);
            (api.stream_synchronize)(s);
            (api.device_synchronize)();
            let seen = read(sink.cast::<u8>().add(n - MIB).cast(), MIB);
            assert!(
                seen.iter().all(|&b| b == 0x5A),
                "round {round}: the old copy read the new owner's data"
            );
            (api.free_device)(again);
        }
        report_reuse("reused_block_waits_for_old_work", reused, 6);
        (api.free_host)(pinned);
        (api.free_device)(probe);
        (api.free_device)(sink);
        (api.destroy_stream)(s);
    });
}

/// A stream of device 0 that touches device 1's memory for the first time, on a block freed
/// while another device-0 stream still reads it, must wait for that read.
#[test]
#[ignore = "needs 2 CUDA devices"]
fn first_use_of_a_stream_waits_for_work_on_a_reused_block() {
    require_gpus!(2);
    on_thread(|| unsafe {
        let api = api();
        let reader = runtime_stream_of_device_1();
        let n = 1 << 30;
        let out = (api.malloc_host)(n);
        let mine = (api.malloc_device)(MIB);
        ok(llaisysNvidiaMemset(mine, 0x11, MIB), "memset");
        let mut reused = 0;
        for round in 0..4 {
            let block = (api.malloc_device)(n);
            ok(llaisysNvidiaMemset(block, 0x5A, n), "memset");
            // A slow read of the whole block on a device-0 stream.
            (api.memcpy_async)(out, block, n, D2H, reader);
            (api.memcpy_async)(out, block, n, D2H, reader);
            (api.free_device)(block);
            let again = (api.malloc_device)(n);
            reused += (again == block) as usize;
            // A new device-0 stream writes the block's tail: its first use of device 1 memory.
            (api.set_device)(0);
            let writer = (api.create_stream)();
            (api.set_device)(1);
            (api.memcpy_async)(last_mib(again, n), mine, MIB, D2D, writer);
            (api.stream_synchronize)(writer);
            (api.stream_synchronize)(reader);
            let tail = std::slice::from_raw_parts(last_mib(out, n).cast::<u8>(), MIB);
            assert!(
                tail.iter().all(|&b| b == 0x5A),
                "round {round}: the read saw the new owner's data"
            );
            (api.destroy_stream)(writer);
            (api.free_device)(again);
        }
        report_reuse("first_use_of_a_stream_waits", reused, 4);
        (api.free_host)(out);
        (api.free_device)(mine);
        (api.destroy_stream)(reader);
    });
}

/// A pinned block read by a copy on device 1's legacy stream, freed with device 0 current:
/// its event goes on device 1's legacy stream, so it is not handed out while the copy runs.
#[test]
#[ignore = "needs 2 CUDA devices"]
fn pinned_block_freed_on_another_device_waits_for_its_copy() {
    require_gpus!(2);
    on_thread(|| unsafe {
        let api = api();
        (api.set_device)(1);
        let n = 512 * MIB;
        let dev = (api.malloc_device)(n);
        for round in 0..3 {
            let p = (api.malloc_host)(n);
            (api.memcpy_async)(p, dev, n, D2H, std::ptr::null_mut());
            (api.memcpy_async)(p, dev, n, D2H, std::ptr::null_mut());
            (api.set_device)(0);
            (api.free_host)(p);
            let q = (api.malloc_host)(n);
            (api.set_device)(1);
            if q == p {
                let idle = raw::cudaStreamQuery(std::ptr::null_mut()).0 == 0;
                assert!(
                    idle,
                    "round {round}: pinned block handed out while its copy still ran"
                );
            }
            (api.device_synchronize)();
            (api.free_host)(q);
        }
        (api.free_device)(dev);
    });
}

#[test]
#[ignore = "needs 2 CUDA devices"]
fn peer_copies_between_devices() {
    require_gpus!(2);
    on_thread(|| unsafe {
        let api = api();
        let mut can = [0; 2];
        ok(
            llaisysNvidiaDeviceCanAccessPeer(&mut can[0], 0, 1),
            "can 0->1",
        );
        ok(
            llaisysNvidiaDeviceCanAccessPeer(&mut can[1], 1, 0),
            "can 1->0",
        );
        eprintln!("peer access 0->1 {} 1->0 {}", can[0], can[1]);
        for (d, peer) in [(0, 1), (1, 0)] {
            if can[d as usize] == 1 {
                (api.set_device)(d);
                ok(llaisysNvidiaDeviceEnablePeerAccess(peer), "enable");
                ok(llaisysNvidiaDeviceEnablePeerAccess(peer), "enable again");
            }
        }
        for len in [1usize, 4097, MIB + 3, 64 * MIB] {
            let mut src = vec![0u8; len];
            fill(&mut src, len as u64);
            (api.set_device)(0);
            let a0 = (api.malloc_device)(len);
            (api.memcpy_sync)(a0, src.as_ptr().cast(), len, H2D);
            (api.set_device)(1);
            let a1 = (api.malloc_device)(len);
            let b1 = (api.malloc_device)(len);
            ok(llaisysNvidiaMemcpyPeer(a1, 1, a0, 0, len), "peer 0->1");
            assert!(read(a1, len) == src, "MemcpyPeer 0->1 len {len}");
            // Table D2D across devices (unified addressing), device 1 current.
            (api.memcpy_sync)(b1, a0, len, D2D);
            assert!(read(b1, len) == src, "memcpy_sync D2D 0->1 len {len}");
            // Back, asynchronously, on a stream of device 0 with device 1 current.
            (api.set_device)(0);
            let s0 = (api.create_stream)();
            let c0 = (api.malloc_device)(len);
            (api.set_device)(1);
            ok(
                llaisysNvidiaMemcpyPeerAsync(c0, 0, b1, 1, len, s0.cast()),
                "peer async 1->0",
            );
            (api.stream_synchronize)(s0);
            assert!(read(c0, len) == src, "MemcpyPeerAsync 1->0 len {len}");
            (api.memcpy_async)(c0, a1, len, D2D, s0);
            (api.stream_synchronize)(s0);
            assert!(read(c0, len) == src, "memcpy_async D2D 1->0 len {len}");
            for p in [a0, a1, b1, c0] {
                (api.free_device)(p);
            }
            (api.destroy_stream)(s0);
        }
        let bad = llaisysNvidiaMemcpyPeer(std::ptr::null_mut(), 1, std::ptr::null(), 0, 16);
        assert_ne!(bad, 0, "NULL pointers refused");
        let count = llaisys_nvidia::runtime::device_count().unwrap();
        let p = (api.malloc_device)(16);
        let bad = llaisysNvidiaMemcpyPeer(p, count, p, 0, 16);
        assert_ne!(bad, 0, "device {count} refused");
        (api.free_device)(p);
    });
}

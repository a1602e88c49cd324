//! Load: many threads mixing every call on several streams, each checking its data by checksum;
//! bounded in time, watched for deadlock, statistics balanced at the end. And many processes
//! starting CUDA at the same moment.

use crate::common::{api, fill};
use crate::require_gpu;
use crate::support::child::{wait_all, TestChild};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn threads() -> usize {
    std::env::var("LLAISYS_STRESS_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

fn checksum(v: &[u8]) -> u64 {
    v.chunks(8).fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
        let mut x = [0u8; 8];
        x[..c.len()].copy_from_slice(c);
        (h ^ u64::from_le_bytes(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One thread's loop: allocate, copy through every kind on its two streams, check, free.
/// Thread `t` works on device `t % devices`; every fourth thread makes its streams before
/// set_device, as llaisys does (so with two devices they belong to device 0).
fn worker(t: usize, devices: i32, deadline: Instant, iterations: Arc<AtomicU64>) {
    let api = api();
    let device = (t % devices as usize) as i32;
    let early = t % 4 == 3;
    let make = || unsafe { [(api.create_stream)(), (api.create_stream)()] };
    let early_streams = early.then(make);
    unsafe { (api.set_device)(device) };
    let s = early_streams.unwrap_or_else(make);
    let mut x = (t as u64 + 1) * 0x9E37;
    let mut i = 0u64;
    while Instant::now() < deadline && i < 20_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = 1 + (x >> 40) as usize % (2 << 20);
        let mut src = vec![0u8; n];
        fill(&mut src, x);
        let want = checksum(&src);
        unsafe {
            let d1 = (api.malloc_device)(n);
            let d2 = (api.malloc_device)(n);
            let pinned = (api.malloc_host)(n) as *mut u8;
            std::ptr::copy_nonoverlapping(src.as_ptr(), pinned, n);
            let st = s[(i % 2) as usize];
            (api.memcpy_async)(d1, pinned.cast(), n, 1, st);
            (api.memcpy_async)(d2, d1, n, 3, st);
            (api.free_host)(pinned.cast()); // freed while the copy may still run
            let mut back = vec![0u8; n];
            if i % 3 == 0 {
                (api.stream_synchronize)(st);
                (api.memcpy_sync)(back.as_mut_ptr().cast(), d2, n, 2);
            } else {
                (api.memcpy_async)(back.as_mut_ptr().cast(), d2, n, 2, st);
            }
            (api.free_device)(d1);
            (api.free_device)(d2);
            let got = checksum(&back);
            assert_eq!(got, want, "thread {t} iteration {i} size {n}: checksum");
        }
        i += 1;
        if i % 64 == 0 {
            unsafe { (api.get_device_count)() };
            unsafe { (api.device_synchronize)() };
        }
    }
    unsafe {
        (api.destroy_stream)(s[0]);
        (api.destroy_stream)(s[1]);
    }
    iterations.fetch_add(i, Ordering::Relaxed);
}

#[test]
#[ignore = "needs a CUDA device"]
fn many_threads_mix_every_call_with_checksums() {
    let devices = require_gpu!().min(2);
    unsafe { (api().device_synchronize)() };
    let d0 = llaisys_nvidia::ops::memory::device_memory_stats(-1).expect("stats");
    let h0 = llaisys_nvidia::ops::memory::host_memory_stats();
    let n = threads();
    let iterations = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    let (tx, rx) = std::sync::mpsc::channel();
    for t in 0..n {
        let (it, tx) = (iterations.clone(), tx.clone());
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(move || worker(t, devices, deadline, it));
            let _ = tx.send(r.is_ok());
        });
    }
    drop(tx);
    let mut ok = 0;
    for _ in 0..n {
        // Watchdog: a thread not done well after the deadline is a deadlock.
        match rx.recv_timeout(Duration::from_secs(90)) {
            Ok(true) => ok += 1,
            Ok(false) => panic!("a stress thread failed (see its panic above)"),
            Err(e) => panic!("stress threads did not finish: deadlock? ({e})"),
        }
    }
    assert_eq!(ok, n);
    let total = iterations.load(Ordering::Relaxed);
    unsafe { (api().device_synchronize)() };
    let d = llaisys_nvidia::ops::memory::device_memory_stats(-1).expect("stats");
    let h = llaisys_nvidia::ops::memory::host_memory_stats();
    eprintln!(
        "stress: {n} threads on {devices} device(s), {total} iterations; device {d:?}; host {h:?}"
    );
    // Enough work for the mix to mean something (each thread's loop runs through every call).
    // Not a speed target, which is the benchmark's job: the floor stays far below what a
    // working machine does, so that a slow but correct run (every checksum right) passes.
    assert!(total >= 64 * n as u64, "too few iterations: {total}");
    assert_eq!(
        d.in_use_bytes, d0.in_use_bytes,
        "device bytes in use changed"
    );
    assert_eq!(
        h.in_use_bytes, h0.in_use_bytes,
        "pinned bytes in use changed"
    );
    assert_eq!(d.alloc_count - d0.alloc_count, d.free_count - d0.free_count);
    assert_eq!(h.alloc_count - h0.alloc_count, h.free_count - h0.free_count);
}

/// Runs only as a child of `many_processes_start_cuda_at_once`.
#[test]
#[ignore = "entry point of a child process: run by many_processes_start_cuda_at_once"]
fn child_process_starts_cuda() {
    crate::support::child::require_child("stress::child_process_starts_cuda");
    let start: u128 = std::env::var("LLAISYS_CHILD_START_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("LLAISYS_CHILD_START_MS");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    while now() < start {
        std::hint::spin_loop();
    }
    let api = api();
    assert!(unsafe { (api.get_device_count)() } > 0);
    unsafe { (api.set_device)(0) };
    let n = 1 << 20;
    let mut src = vec![0u8; n];
    fill(&mut src, std::process::id() as u64);
    let mut back = vec![0u8; n];
    unsafe {
        let d: *mut c_void = (api.malloc_device)(n);
        (api.memcpy_sync)(d, src.as_ptr().cast(), n, 1);
        (api.memcpy_sync)(back.as_mut_ptr().cast(), d, n, 2);
        (api.free_device)(d);
    }
    assert!(back == src);
}

#[test]
#[ignore = "needs a CUDA device"]
fn many_processes_start_cuda_at_once() {
    require_gpu!();
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
        + 1500;
    let spawned: Vec<_> = (0..8)
        .map(|_| {
            TestChild::new("stress::child_process_starts_cuda")
                .env("LLAISYS_CHILD_START_MS", start.to_string())
                .spawn()
        })
        .collect();
    let failed: Vec<String> = wait_all(spawned, Duration::from_secs(120))
        .iter()
        .enumerate()
        .filter(|(_, out)| !out.ran_one_test())
        .map(|(i, out)| format!("child {i}: {}", out.report()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 8 processes failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

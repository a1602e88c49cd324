//! Host-only test of the staged pageable copies (src/pageable), dynamic build only: the child
//! runs with tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13, a
//! stand-in whose GPU thread runs queued copies in order after pseudo-random delays and whose
//! events complete only when the work before them has run. A staging buffer overwritten before
//! its DMA read it, or a chunk copied out before it landed, gives wrong data here. Both
//! directions at every size, with 1-12 host threads and the default, a first copy that is a D2H
//! with more chunks than staging buffers, two threads copying at once, small copies written
//! behind a staged copy's pending DMA, a D2H that wakes sleeping helpers early, failing chunks
//! and event queries, and the trace.
#![cfg(feature = "dynamic")]

use llaisys_nvidia::ffi::{self, TABLE};
use std::os::raw::c_void;

mod support;

/// Which failing copy the child makes first (`failing_copy`).
const FAIL: &str = "LLAISYS_STAGED_FAKE_FAIL";
const H2D: i32 = 1;
const D2H: i32 = 2;

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n)
        .map(|i| ((i / 4093) ^ (i * 13) ^ seed) as u8)
        .collect()
}

/// H2D then D2H of `n` bytes, sync and async, the source overwritten right after each H2D
/// returns; returns what went wrong.
///
/// # Safety
/// Only in the child, with the fake on the loader path.
unsafe fn round_trip(n: usize, seed: usize) -> Result<(), String> {
    // SAFETY: the table's functions get buffers of `n` bytes, device ones of theirs, and a stream
    // of theirs until it is destroyed; the fake cudart answers them (this function's contract:
    // only in the child, the fake on the loader path).
    unsafe {
        let dev = (TABLE.malloc_device)(n);
        let dev2 = (TABLE.malloc_device)(n);
        if dev.is_null() || dev2.is_null() {
            return Err(format!("malloc_device({n}) failed"));
        }
        let want = pattern(n, seed);
        let mut src = want.clone();
        (TABLE.memcpy_sync)(dev, src.as_ptr().cast(), n, H2D);
        src.fill(0xEE);
        let mut back = vec![0u8; n];
        (TABLE.memcpy_sync)(back.as_mut_ptr().cast(), dev, n, D2H);
        if back != want {
            return Err(format!(
                "sync round trip of {n} B (seed {seed}): wrong data"
            ));
        }
        let s = (TABLE.create_stream)();
        src.copy_from_slice(&want);
        (TABLE.memcpy_async)(dev2, src.as_ptr().cast(), n, H2D, s);
        src.fill(0xDD);
        back.fill(0);
        (TABLE.memcpy_async)(back.as_mut_ptr().cast(), dev2, n, D2H, s);
        (TABLE.stream_synchronize)(s);
        (TABLE.destroy_stream)(s);
        if back != want {
            return Err(format!(
                "async round trip of {n} B (seed {seed}): wrong data"
            ));
        }
        (TABLE.free_device)(dev);
        (TABLE.free_device)(dev2);
    }
    Ok(())
}

/// From the smallest staged H2D copy (512 KiB; D2H copies below 1 MiB go to cudaMemcpy) up.
const SIZES: [usize; 6] = [
    512 << 10,
    (768 << 10) + 13,
    1 << 20,
    (1 << 20) + 13,
    (3 << 20) + 4097,
    (17 << 20) + 5,
];

/// Fills device memory at `dev` with `data` in copies below the fast path's smallest H2D copy
/// (512 KiB; smaller ones are plain cudaMemcpy), so that the next staged copy is still the
/// process's first.
///
/// # Safety
/// `dev` is device memory of `data.len()` bytes.
unsafe fn fill_unstaged(dev: *mut c_void, data: &[u8]) {
    for (k, part) in data.chunks(256 << 10).enumerate() {
        // SAFETY: `dev` is device memory of `data.len()` bytes (this function's contract), and
        // each part lies inside it.
        unsafe {
            (TABLE.memcpy_sync)(
                dev.cast::<u8>().add(k * (256 << 10)).cast(),
                part.as_ptr().cast(),
                part.len(),
                H2D,
            )
        };
    }
}

/// A staged copy made to fail (`how`: `h2d` or `d2h`, the parent makes one of the fake's
/// cudaMemcpyAsync fail, `FAKE_FAIL_COPY`; `query`, a D2H whose second cudaEventQuery fails): a
/// clear error. The D2H has more chunks than staging buffers, so that its fifth DMA is queued
/// only once its first chunk has been copied out.
///
/// # Safety
/// Only in the child, with the fake on the loader path.
unsafe fn failing_copy(how: &str) {
    let n = if how == "d2h" {
        40 << 20
    } else {
        (3 << 20) + 4097
    };
    let src = pattern(n, 1);
    let mut back = vec![0u8; n];
    // SAFETY: the table's functions with buffers of `n` bytes.
    let st = unsafe {
        let dev = (TABLE.malloc_device)(n);
        let st = if how == "h2d" {
            ffi::llaisysNvidiaMemcpy(dev, src.as_ptr().cast(), n, H2D)
        } else {
            fill_unstaged(dev, &src);
            ffi::llaisysNvidiaMemcpy(back.as_mut_ptr().cast(), dev, n, D2H)
        };
        (TABLE.free_device)(dev);
        st
    };
    assert_ne!(st, 0, "{how}: the failing step fails the copy");
    let msg = support::last_error_message();
    assert!(msg.contains("staged pageable copy"), "{how}: {msg}");
    if how != "query" {
        assert!(msg.contains("chunk at"), "{how}: {msg}");
    }
}

/// The child's half: runs only with the fake cudart on the loader path.
#[test]
#[ignore = "entry point of a child process: run by staged_copies_keep_their_order_with_an_asynchronous_stand_in"]
fn child_staged_copies() {
    support::child::require_child("child_staged_copies");
    // SAFETY: the fake is on the loader path (the parent's doing).
    unsafe {
        assert_eq!((TABLE.get_device_count)(), 1, "the stand-in has one device");
        if let Ok(how) = std::env::var(FAIL) {
            failing_copy(&how);
        }
        // The process's first staged copy (unless a failing one came first): a D2H with more
        // chunks than staging buffers, on helper threads that this very copy starts.
        let n = 40 << 20;
        let want = pattern(n, 77);
        let dev = (TABLE.malloc_device)(n);
        fill_unstaged(dev, &want);
        let mut back = vec![0u8; n];
        (TABLE.memcpy_sync)(back.as_mut_ptr().cast(), dev, n, D2H);
        assert!(back == want, "the first staged copy, D2H {n} B: wrong data");
        (TABLE.free_device)(dev);
        for round in 0..2 {
            for (k, &n) in SIZES.iter().enumerate() {
                round_trip(n, round * 10 + k).unwrap();
            }
        }
        // Two threads at once: one of them finds the helpers busy and copies alone.
        let threads: Vec<_> = (0..2)
            .map(|t| {
                std::thread::spawn(move || {
                    for (k, &n) in SIZES.iter().enumerate() {
                        // (Inside the unsafe block above: the child's contract holds.)
                        round_trip(n, 100 + t * 10 + k)?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        for t in threads {
            t.join().expect("copy thread").unwrap();
        }
        // Small copies right after a staged one, whose DMAs the stand-in has mostly not run
        // yet: they go behind the last one (or to cudaMemcpy), over ranges it also writes and
        // over each other; the last write wins.
        for k in 0..8 {
            let n = (3 << 20) + 4097;
            let mut want = pattern(n, 300 + k);
            let dev = (TABLE.malloc_device)(n);
            (TABLE.memcpy_sync)(dev, want.as_ptr().cast(), n, H2D);
            for (i, &m) in [3072usize, 512, 1, 4099, (512 << 10) - 1, 3072]
                .iter()
                .enumerate()
            {
                let off = (i * 7919 + k * 4096) % (n - m);
                let mut small = pattern(m, 400 + i);
                (TABLE.memcpy_sync)(
                    dev.cast::<u8>().add(off).cast(),
                    small.as_ptr().cast(),
                    m,
                    H2D,
                );
                want[off..off + m].copy_from_slice(&small);
                small.fill(0xCC);
            }
            let mut back = vec![0u8; n];
            (TABLE.memcpy_sync)(back.as_mut_ptr().cast(), dev, n, D2H);
            assert!(
                back == want,
                "small copies behind a staged one ({k}): wrong data"
            );
            (TABLE.free_device)(dev);
        }
        // After an idle while the helpers sleep: a D2H on the idle stream wakes them as its
        // first DMAs are queued, and the calling thread copies out until they join.
        for (k, &n) in SIZES.iter().enumerate() {
            let want = pattern(n, 200 + k);
            let dev = (TABLE.malloc_device)(n);
            fill_unstaged(dev, &want);
            // Far longer than the stand-in's longest op (2 ms) and the helpers' spin (250 us),
            // so that they sleep even on a loaded machine.
            std::thread::sleep(std::time::Duration::from_millis(50));
            let mut back = vec![0u8; n];
            (TABLE.memcpy_sync)(back.as_mut_ptr().cast(), dev, n, D2H);
            assert!(back == want, "D2H {n} B after an idle while: wrong data");
            (TABLE.free_device)(dev);
            round_trip(n, 210 + k).unwrap();
        }
    }
    println!("staged-fake child: ok");
}

/// The children's settings, one run each: `NAME=VALUE` words, where `fail=WHAT` is the failing
/// copy the child makes first (`failing_copy`), a `FAKE_` name is the stand-in's own variable,
/// and any other name is a `LLAISYS_NVIDIA_PAGEABLE_` one. The default threads, 1-12 threads,
/// failing copies (a DMA queued up front, one queued once a chunk was copied out) and queries,
/// the trace (with every copy traced, D2H copies after the idle while show the early wake).
const RUNS: [&str; 12] = [
    "",
    "THREADS=4",
    "THREADS=1",
    "THREADS=2",
    "THREADS=3",
    "THREADS=12",
    "THREADS=4 FAKE_FAIL_COPY=3 fail=h2d",
    "THREADS=4 FAKE_FAIL_COPY=3 fail=d2h",
    "THREADS=4 FAKE_FAIL_COPY=5 fail=d2h",
    "THREADS=4 FAKE_FAIL_QUERY=2 fail=query",
    "THREADS=4 TRACE=7",
    "THREADS=6 TRACE=1",
];

/// The environment of one of `RUNS`.
fn child_env(run: &str) -> Vec<(String, String)> {
    run.split_whitespace()
        .map(|word| {
            let (name, value) = word.split_once('=').expect("NAME=VALUE");
            let name = match name {
                "fail" => FAIL.to_string(),
                n if n.starts_with("FAKE_") => n.to_string(),
                n => format!("LLAISYS_NVIDIA_PAGEABLE_{n}"),
            };
            (name, value.to_string())
        })
        .collect()
}

#[test]
fn staged_copies_keep_their_order_with_an_asynchronous_stand_in() {
    let dir = support::fake_cudart();
    for run in RUNS {
        let envs = child_env(run);
        // A copy that never ends (a deadlock) fails the test as a timeout.
        let out = support::child::TestChild::new("child_staged_copies")
            .loader_path(dir)
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .limit(std::time::Duration::from_secs(120))
            .run();
        let text = out.text();
        assert!(
            out.ran_one_test() && text.contains("staged-fake child: ok"),
            "{run}:\n{}",
            out.report()
        );
        if envs.iter().any(|(k, _)| k.ends_with("_TRACE")) {
            assert!(
                text.contains("llaisys-nvidia pageable trace: DeviceToHost")
                    && text.contains("llaisys-nvidia pageable trace: HostToDevice"),
                "the trace writes its lines:\n{text}"
            );
        }
        if envs.iter().any(|(k, v)| k.ends_with("_TRACE") && v == "1") {
            // After the idle while the helpers sleep: D2H copies on the idle stream wake them
            // early.
            assert!(
                text.lines()
                    .any(|l| l.contains("DeviceToHost") && l.contains("woken_early")),
                "a D2H copy with its helpers asleep wakes them as its DMAs are queued:\n{text}"
            );
            // Small copies after a staged one went behind its pending DMA.
            assert!(
                text.lines()
                    .any(|l| l.contains("HostToDevice") && l.contains("behind_at")),
                "a small copy right after a staged one goes behind its pending DMA:\n{text}"
            );
        }
    }
}

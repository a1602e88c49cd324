//! Host-only test of the staged pageable copies (src/pageable), dynamic build only: the child
//! runs with tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13, a
//! stand-in whose GPU thread runs queued copies in order after pseudo-random delays and whose
//! events complete only when the work before them has run. A staging buffer overwritten before
//! its DMA read it, or a chunk copied out before it landed, gives wrong data here. Both
//! directions at every size, with 1-12 host threads and the default, a first copy that is a D2H
//! with more chunks than staging buffers, two threads copying at once, small copies written
//! behind a staged copy's pending DMA, a D2H that wakes sleeping helpers early, failing chunks
//! and event queries. With the stand-in's queue held until the host waits for it
//! (`fake_hold`): small copies behind a pending DMA wait for nothing, fall back to cudaMemcpy
//! once its buffer is full, and a copy that comes round to that buffer waits for their DMAs. A
//! copy larger than its device memory is refused before anything is read or written. Where
//! `cudaHostRegister` refuses the huge-page staging buffers, a set's buffers are tried once.
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
            let mut want = vec![0u8; n];
            let dev = (TABLE.malloc_device)(n);
            copy_in(dev, 0, n, 300 + k, &mut want);
            for (i, &m) in [3072usize, 512, 1, 4099, (512 << 10) - 1, 3072]
                .iter()
                .enumerate()
            {
                copy_in(dev, (i * 7919 + k * 4096) % (n - m), m, 400 + i, &mut want);
            }
            assert_device_holds(
                dev,
                &want,
                &format!("small copies behind a staged one ({k})"),
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

/// A `memcpy_sync` H2D of `len` bytes (a pattern of `seed`) to `dev + off`, written into `want`
/// too; the source is overwritten once the call returns.
///
/// # Safety
/// `dev` is device memory of at least `off + len` bytes; `want` is that long.
unsafe fn copy_in(dev: *mut c_void, off: usize, len: usize, seed: usize, want: &mut [u8]) {
    let mut src = pattern(len, seed);
    // SAFETY: `dev + off` is device memory of `len` bytes (this function's contract).
    unsafe {
        (TABLE.memcpy_sync)(
            dev.cast::<u8>().add(off).cast(),
            src.as_ptr().cast(),
            len,
            H2D,
        )
    };
    want[off..off + len].copy_from_slice(&src);
    src.fill(0xCC);
}

/// Copies the device memory at `dev` back to the host (a staged D2H) and asserts that it holds
/// `want`.
///
/// # Safety
/// `dev` is device memory of `want.len()` bytes.
unsafe fn assert_device_holds(dev: *mut c_void, want: &[u8], what: &str) {
    let mut back = vec![0u8; want.len()];
    // SAFETY: `dev` is device memory of `want.len()` bytes (this function's contract).
    unsafe { (TABLE.memcpy_sync)(back.as_mut_ptr().cast(), dev, want.len(), D2H) };
    assert!(back == want, "{what}: wrong data");
}

/// The child of `small_copies_behind_a_pending_dma_wait_for_nothing_until_its_buffer_is_full`:
/// the stand-in holds its queue (`fake_hold`) until the host waits for it, so a staged copy's
/// DMAs stay pending for as long as nothing waits, and `fake_held` tells whether anything did.
#[test]
#[ignore = "entry point of a child process: run by small_copies_behind_a_pending_dma_wait_for_nothing_until_its_buffer_is_full"]
fn child_held_dmas() {
    support::child::require_child("child_held_dmas");
    // SAFETY: the fake is on the loader path (the parent's doing); its two test functions have
    // these C types.
    let (hold, held) = unsafe {
        (
            support::fake_function::<extern "C" fn(libc::c_int)>(c"fake_hold"),
            support::fake_function::<extern "C" fn() -> libc::c_int>(c"fake_held"),
        )
    };
    // A staged copy of four chunks, one per staging buffer (a copy of more would wait for its
    // own first DMAs), above the 1 MiB that may go behind a pending DMA; and small copies below
    // the staged minimum (512 KiB), each taking 512 KiB of a buffer's room.
    let x_len = (1 << 20) + (64 << 10);
    // Behind the pending DMAs (about 3 MiB), a copy of four chunks (2.75 MiB, the last shorter),
    // whose last one comes round to the buffer the small copies were written to: it waits for
    // nothing of its own, so only that buffer's event keeps it from overwriting bytes still to
    // be read.
    let y_len = 10 << 20;
    let small = (512 << 10) - 1;
    // SAFETY: the table's functions with device buffers of theirs and host buffers of the
    // sizes given (the fake is on the loader path).
    unsafe {
        let dev_x = (TABLE.malloc_device)(x_len);
        let dev_y = (TABLE.malloc_device)(y_len);
        assert!(!dev_x.is_null() && !dev_y.is_null());
        // The staging buffers exist and their DMAs have completed.
        (TABLE.memcpy_sync)(dev_x, pattern(x_len, 500).as_ptr().cast(), x_len, H2D);
        (TABLE.device_synchronize)();

        // Small copies behind a staged copy's last DMA, pending: they wait for nothing. Then a
        // large copy that comes round the staging buffers to the one they were written to: it
        // waits for their DMAs too, not only for the staged copy's.
        let mut want_x = vec![0u8; x_len];
        hold(1);
        copy_in(dev_x, 0, x_len, 501, &mut want_x);
        assert_eq!(
            held(),
            1,
            "a staged copy into idle staging buffers waits for nothing"
        );
        let mut offsets = (0..).map(|i: usize| (i * 7919 * 64) % (x_len - small));
        for i in 0..4 {
            copy_in(dev_x, offsets.next().unwrap(), small, 600 + i, &mut want_x);
            assert_eq!(
                held(),
                1,
                "small copy {i} behind a pending DMA waits for nothing"
            );
        }
        let mut want_y = vec![0u8; y_len];
        copy_in(dev_y, 0, y_len, 502, &mut want_y);
        assert_eq!(
            held(),
            0,
            "a copy into a staging buffer with a pending DMA waits for it"
        );
        assert_device_holds(dev_x, &want_x, "a staged copy with small copies behind it");
        assert_device_holds(dev_y, &want_y, "a large copy round the staging buffers");

        // Small copies behind a pending DMA until its buffer has no room: the next one is a
        // cudaMemcpy, which waits (and, from pageable memory, lets the queue run).
        (TABLE.device_synchronize)();
        hold(1);
        copy_in(dev_x, 0, x_len, 503, &mut want_x);
        let mut behind = 0;
        for i in 0..20 {
            copy_in(dev_x, offsets.next().unwrap(), small, 700 + i, &mut want_x);
            if held() == 1 {
                behind = i + 1;
            }
        }
        // Each small copy takes 512 KiB of the 8 MiB buffer, from the end of the staged copy's
        // last chunk rounded up to 64 B: that end is 64 B to the copy's length (1088 KiB) in, so
        // 13 to 15 fit before one finds no room.
        assert!(
            (13..=15).contains(&behind),
            "{behind} small copies went behind the pending DMA before one waited"
        );
        assert_device_holds(
            dev_x,
            &want_x,
            "small copies behind a staged copy and past its room",
        );
        (TABLE.free_device)(dev_x);
        (TABLE.free_device)(dev_y);
    }
    println!("held-dmas child: ok");
}

#[test]
fn small_copies_behind_a_pending_dma_wait_for_nothing_until_its_buffer_is_full() {
    let dir = support::fake_cudart();
    for threads in ["4", "1"] {
        let out = support::child::TestChild::new("child_held_dmas")
            .loader_path(dir)
            .env("LLAISYS_NVIDIA_PAGEABLE_THREADS", threads)
            .limit(std::time::Duration::from_secs(120))
            .run();
        assert!(
            out.ran_one_test() && out.text().contains("held-dmas child: ok"),
            "{threads} threads:\n{}",
            out.report()
        );
    }
}

/// The children's settings, one run each: `NAME=VALUE` words, where `fail=WHAT` is the failing
/// copy the child makes first (`failing_copy`), a `FAKE_` name is the stand-in's own variable,
/// and any other name is a `LLAISYS_NVIDIA_PAGEABLE_` one. The default threads, 1-12 threads,
/// failing copies (a DMA queued up front, one queued once a chunk was copied out) and queries.
const RUNS: [&str; 10] = [
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
    }
}

/// Runs the child test `name` over the stand-in cudart (at most 120 s) and checks that it got
/// to its end ("{done} child: ok").
fn run_child(name: &str, done: &str) {
    let out = support::child::TestChild::new(name)
        .loader_path(support::fake_cudart())
        .limit(std::time::Duration::from_secs(120))
        .run();
    assert!(
        out.ran_one_test() && out.text().contains(&format!("{done} child: ok")),
        "{}",
        out.report()
    );
}

/// The child of `staging_buffers_whose_pages_cudart_refuses_to_register_are_made_once`: every
/// `cudaHostRegister` fails, and staged copies of two chunks (of four staging buffers) follow one
/// another.
#[test]
#[ignore = "entry point of a child process: run by staging_buffers_whose_pages_cudart_refuses_to_register_are_made_once"]
fn child_refused_registers() {
    support::child::require_child("child_refused_registers");
    // SAFETY: the fake is on the loader path (the parent's doing); its two test functions have
    // these C types.
    let (fail_next, registers) = unsafe {
        (
            support::fake_function::<extern "C" fn(libc::c_long)>(c"fake_fail_next_registers"),
            support::fake_function::<extern "C" fn() -> libc::c_long>(c"fake_host_registers"),
        )
    };
    fail_next(libc::c_long::MAX);
    // Whether the library makes staging buffers of huge pages here (the kernel's setting).
    let huge = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"));
    // The smallest staged H2D copy: two chunks, so two staging buffers stay unused.
    let n = 512 << 10;
    let copies = 8;
    let mut want = vec![0u8; n * copies];
    // SAFETY: a block of ours of `n * copies` bytes; each copy writes `n` bytes inside it.
    unsafe {
        let dev = (TABLE.malloc_device)(n * copies);
        assert!(!dev.is_null());
        for k in 0..copies {
            copy_in(dev, k * n, n, k, &mut want);
        }
        let made = registers();
        let per_set = if huge { 4 } else { 0 };
        assert!(
            (per_set..=2 * per_set).contains(&made),
            "{made} cudaHostRegister calls for {copies} copies (huge pages: {huge}): the buffers \
             of a set are tried once"
        );
        assert_device_holds(dev, &want, "copies through cudaHostAlloc buffers");
        (TABLE.free_device)(dev);
    }
    println!("refused-registers child: ok");
}

#[test]
fn staging_buffers_whose_pages_cudart_refuses_to_register_are_made_once() {
    run_child("child_refused_registers", "refused-registers");
}

#[test]
#[ignore = "entry point of a child process: run by a_copy_larger_than_its_device_memory_is_refused"]
fn child_huge_sizes() {
    support::child::require_child("child_huge_sizes");
    const INVALID_ARGUMENT: i32 = 3;
    let n = 1 << 20;
    let mut host = pattern(n, 5);
    let keep = host.clone();
    // SAFETY: the status API's copies with a block of ours and a pageable buffer of `n` bytes;
    // the sizes beyond them are refused before anything reads or writes past their ends.
    unsafe {
        let dev = (TABLE.malloc_device)(n);
        assert!(!dev.is_null());
        fill_unstaged(dev, &keep);
        // From the start of a block of ours: no larger than the block. Inside one: no larger
        // than the device (the stand-in's 80 GiB).
        let at = dev.cast::<u8>().add(4096).cast::<c_void>();
        for (d, size) in [
            (dev, n + 1),
            (dev, 1 << 40),
            (dev, isize::MAX as usize),
            (at, 1 << 40),
            (at, 1 << 44),
            (at, isize::MAX as usize),
        ] {
            for kind in [H2D, D2H] {
                let (dst, src) = if kind == H2D {
                    (d, host.as_ptr().cast::<c_void>())
                } else {
                    (host.as_mut_ptr().cast::<c_void>(), d.cast_const())
                };
                for st in [
                    ffi::llaisysNvidiaMemcpy(dst, src, size, kind),
                    ffi::llaisysNvidiaMemcpyAsync(dst, src, size, kind, std::ptr::null_mut()),
                ] {
                    let msg = support::last_error_message();
                    assert_eq!(st, INVALID_ARGUMENT, "size {size} kind {kind}: {msg}");
                    assert!(msg.contains(&format!("size={size}")), "{msg}");
                }
            }
        }
        assert!(host == keep, "a refused copy wrote the host buffer");
        assert_device_holds(dev, &keep, "a refused copy wrote the device block");
        (TABLE.free_device)(dev);
    }
    println!("huge-sizes child: ok");
}

#[test]
fn a_copy_larger_than_its_device_memory_is_refused() {
    run_child("child_huge_sizes", "huge-sizes");
}

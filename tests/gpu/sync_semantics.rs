//! memcpy_sync keeps exactly cudaMemcpy's host-visible guarantees and waits no more:
//! the source is reusable on return, a host destination holds the data, a device destination is
//! ordered before later work on the legacy stream and on blocking streams; D2D is only queued.
//! `LLAISYS_NVIDIA_MEMCPY_SYNC_COMPLETE=1` restores complete-on-return (tested in a child process,
//! since the switch is read once per process).

use crate::caching::busy;
use crate::common::{api, fill, Dev, Pinned};
use crate::require_gpu;
use llaisys_nvidia::sys as raw;
use std::time::Instant;

const H2D: i32 = 1;
const D2H: i32 = 2;
const D2D: i32 = 3;

/// Reads `size` bytes of device memory at `d` on a new blocking stream of ours (ordered after
/// the legacy stream's earlier work).
fn read_on_blocking_stream(d: &Dev, size: usize) -> Vec<u8> {
    let api = api();
    let out = Pinned::new(size);
    unsafe {
        let s = (api.create_stream)();
        (api.memcpy_async)(out.ptr.cast(), d.ptr, size, D2H, s);
        (api.stream_synchronize)(s);
        (api.destroy_stream)(s);
    }
    out.as_ref().to_vec()
}

#[test]
#[ignore = "needs a CUDA device"]
fn memcpy_sync_d2d_is_queued_not_waited_and_ordered_for_blocking_streams() {
    require_gpu!();
    let api = api();
    if llaisys_nvidia::ops::copies::complete_on_return() {
        eprintln!("(LLAISYS_NVIDIA_MEMCPY_SYNC_COMPLETE is set: the child test covers it)");
        return;
    }
    let size = 64 << 20;
    let (a, b) = (Dev::new(size), Dev::new(size));
    let mut src = Pinned::new(size);
    fill(src.as_mut(), 31);
    unsafe { (api.memcpy_sync)(a.ptr, src.ptr.cast(), size, H2D) };
    // ~40 ms of work queued on the legacy stream: a D2D memcpy_sync behind it returns at once.
    let _work = busy(std::ptr::null_mut(), 40.0);
    let t = Instant::now();
    unsafe { (api.memcpy_sync)(b.ptr, a.ptr, size, D2D) };
    let took = t.elapsed().as_secs_f64() * 1e3;
    // The source may be freed at once: its block is reused only after the copy (stream order),
    // here by an allocation that is overwritten right away.
    drop(a);
    let c = Dev::new(size);
    let mut junk = Pinned::new(size);
    fill(junk.as_mut(), 99);
    unsafe { (api.memcpy_sync)(c.ptr, junk.ptr.cast(), size, H2D) };
    assert!(
        took < 20.0,
        "memcpy_sync D2D waited {took:.1} ms behind queued work"
    );
    assert!(
        read_on_blocking_stream(&b, size) == src.as_ref(),
        "D2D result not seen by a blocking stream's later work (or its source was reused early)"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn memcpy_sync_h2d_pageable_source_is_reusable_on_return() {
    require_gpu!();
    let api = api();
    // The staged fast path (64 MiB) and cudaMemcpy's own (256 KiB).
    for size in [64usize << 20, 256 << 10] {
        let d = Dev::new(size);
        let mut src = vec![0u8; size];
        fill(&mut src, 41);
        let want = src.clone();
        let _work = busy(std::ptr::null_mut(), 20.0);
        unsafe { (api.memcpy_sync)(d.ptr, src.as_ptr().cast(), size, H2D) };
        fill(&mut src, 42); // reused at once
        drop(src);
        assert!(
            read_on_blocking_stream(&d, size) == want,
            "size {size}: the device did not get the source as it was at the call"
        );
        // The legacy stream orders it too.
        let mut back = vec![0u8; size];
        unsafe { (api.memcpy_sync)(back.as_mut_ptr().cast(), d.ptr, size, D2H) };
        assert!(back == want, "size {size}: legacy-stream read");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn small_pageable_h2d_copies_behind_a_staged_copy_wait_for_nothing_and_land_in_order() {
    require_gpu!();
    let api = api();
    if llaisys_nvidia::ops::copies::complete_on_return() {
        eprintln!("(LLAISYS_NVIDIA_MEMCPY_SYNC_COMPLETE is set: every copy waits by design)");
        return;
    }
    // Above the largest copy that may itself go behind a DMA (1 MiB): four chunks of its own.
    let size = (1usize << 20) + (64 << 10);
    let d = Dev::new(size);
    let mut src = vec![0u8; size];
    fill(&mut src, 61);
    let mut want = src.clone();
    // Work queued on the legacy stream first: the staged copy returns with its DMAs behind it.
    // `busy` queues at most 400 copies of 1 GiB, about 200 ms on an H200 (asked for more, so
    // that a sanitizer slowing its calibrating call still leaves far more than the copies
    // below take).
    let _work = busy(std::ptr::null_mut(), 600.0);
    unsafe { (api.memcpy_sync)(d.ptr, src.as_ptr().cast(), size, H2D) };
    // The source is reused at once.
    fill(&mut src, 62);
    // Copies below the staged minimum (a model's norms and biases, and one just below it) into
    // ranges the large copy also wrote, some of them over each other: the last write wins.
    let sizes = [3072usize, 512, 1, 4096 + 3, (512 << 10) - 1, 3072];
    for (i, &n) in sizes.iter().cycle().take(40).enumerate() {
        let off = (i * 7919 + (i % 5) * (100 << 10)) % (size - n);
        let mut small = vec![0u8; n];
        fill(&mut small, 100 + i as u64);
        let dst = unsafe { d.ptr.cast::<u8>().add(off) };
        unsafe { (api.memcpy_sync)(dst.cast(), small.as_ptr().cast(), n, H2D) };
        want[off..off + n].copy_from_slice(&small);
        fill(&mut small, 1); // reused at once
    }
    // None of them waited for the legacy stream (cudaMemcpy from pageable memory would have):
    // the work queued before them is still running.
    let still_busy = unsafe { raw::cudaStreamQuery(std::ptr::null_mut()) }.0 != 0;
    assert!(
        still_busy,
        "a small pageable memcpy_sync behind a staged copy waited for the legacy stream"
    );
    assert!(
        read_on_blocking_stream(&d, size) == want,
        "small copies behind a staged one: a blocking stream's later read differs"
    );
    let mut back = vec![0u8; size];
    unsafe { (api.memcpy_sync)(back.as_mut_ptr().cast(), d.ptr, size, D2H) };
    assert!(
        back == want,
        "small copies behind a staged one: legacy-stream read"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn memcpy_sync_d2h_holds_the_data_on_return() {
    require_gpu!();
    let api = api();
    for size in [64usize << 20, 4 << 10] {
        let d = Dev::new(size);
        let mut src = Pinned::new(size);
        fill(src.as_mut(), 51);
        unsafe { (api.memcpy_sync)(d.ptr, src.ptr.cast(), size, H2D) };
        let _work = busy(std::ptr::null_mut(), 20.0);
        let mut pageable = vec![0u8; size];
        let pinned = Pinned::new(size);
        unsafe {
            (api.memcpy_sync)(pageable.as_mut_ptr().cast(), d.ptr, size, D2H);
            // Checked before anything else runs: the data is there on return.
            assert!(pageable == src.as_ref(), "size {size}: pageable D2H");
            (api.memcpy_sync)(pinned.ptr.cast(), d.ptr, size, D2H);
        }
        assert!(pinned.as_ref() == src.as_ref(), "size {size}: pinned D2H");
    }
}

/// Runs only as the child of `complete_on_return_switch_restores_waiting`.
#[test]
#[ignore = "entry point of a child process: run by complete_on_return_switch_restores_waiting"]
fn child_memcpy_sync_complete_on_return() {
    crate::support::child::require_child("sync_semantics::child_memcpy_sync_complete_on_return");
    require_gpu!();
    let api = api();
    assert!(llaisys_nvidia::ops::copies::complete_on_return());
    let size = 64 << 20;
    let (a, b) = (Dev::new(size), Dev::new(size));
    let mut src = Pinned::new(size);
    fill(src.as_mut(), 61);
    unsafe { (api.memcpy_sync)(a.ptr, src.ptr.cast(), size, H2D) };
    let _work = busy(std::ptr::null_mut(), 40.0);
    let t = Instant::now();
    unsafe { (api.memcpy_sync)(b.ptr, a.ptr, size, D2D) };
    let took = t.elapsed().as_secs_f64() * 1e3;
    // Complete: even a non-blocking stream (not ordered with the legacy stream) sees it.
    let out = Pinned::new(size);
    let mut nb: raw::cudaStream_t = std::ptr::null_mut();
    unsafe {
        assert_eq!(
            raw::cudaStreamCreateWithFlags(&mut nb, raw::cudaStreamNonBlocking).0,
            0
        );
        raw::cudaMemcpyAsync(
            out.ptr.cast(),
            b.ptr,
            size,
            raw::cudaMemcpyKind::cudaMemcpyDeviceToHost,
            nb,
        );
        raw::cudaStreamSynchronize(nb);
        raw::cudaStreamDestroy(nb);
    }
    assert!(took >= 10.0, "returned after {took:.1} ms: it did not wait");
    assert!(out.as_ref() == src.as_ref(), "D2D not complete on return");
}

#[test]
#[ignore = "needs a CUDA device"]
fn complete_on_return_switch_restores_waiting() {
    require_gpu!();
    crate::support::child::TestChild::new("sync_semantics::child_memcpy_sync_complete_on_return")
        .env("LLAISYS_NVIDIA_MEMCPY_SYNC_COMPLETE", "1")
        .limit(std::time::Duration::from_secs(120))
        .run_passing();
}

//! The caches and the pageable fast path must not change a single CUDA semantic: memory freed
//! while queued work still uses it is not handed out before that work is done; streams keep
//! overlapping; pageable copies keep their meaning; out of memory releases the caches.
//! The same tests run with the switches off (gpu-run.sh runs the binary again with
//! LLAISYS_NVIDIA_DEVICE_CACHE=0 LLAISYS_NVIDIA_HOST_CACHE=0 LLAISYS_NVIDIA_PAGEABLE_FAST=0).

use crate::common::{api, expect_errors, fill, Dev, Pinned};
use crate::require_gpu;
use llaisys_nvidia::ffi::AllocatorStats;
use std::os::raw::c_void;
use std::time::Instant;

const H2D: i32 = 1;
const D2H: i32 = 2;
const D2D: i32 = 3;

/// Queues about `ms` milliseconds of copy-engine work on `stream` (1 GiB device-to-device
/// copies back and forth), so that what is queued after it waits.
pub(crate) fn busy(stream: *mut c_void, ms: f64) -> (Dev, Dev) {
    let api = api();
    let size = 1 << 30;
    let (a, b) = (Dev::new(size), Dev::new(size));
    // ~1 GiB per 0.5 ms at ~2 TB/s; measure once to size the chain.
    let t = Instant::now();
    unsafe { (api.memcpy_async)(b.ptr, a.ptr, size, D2D, stream) };
    unsafe { (api.stream_synchronize)(stream) };
    let one = t.elapsed().as_secs_f64() * 1e3;
    let n = ((ms / one.max(0.05)) as usize).clamp(2, 400);
    for i in 0..n {
        let (d, s) = if i % 2 == 0 { (&b, &a) } else { (&a, &b) };
        unsafe { (api.memcpy_async)(d.ptr, s.ptr, size, D2D, stream) };
    }
    (a, b)
}

fn device_stats() -> AllocatorStats {
    llaisys_nvidia::ops::memory::device_memory_stats(-1).expect("device stats")
}

#[test]
#[ignore = "needs a CUDA device"]
fn pinned_block_freed_behind_queued_copy_is_not_reused_early() {
    require_gpu!();
    let api = api();
    let size = 8 << 20;
    let (s1, s2) = unsafe { ((api.create_stream)(), (api.create_stream)()) };
    let x = Dev::new(size);
    let y = Dev::new(size);
    let mut want_x = vec![0u8; size];
    fill(&mut want_x, 101);
    let _work = busy(s1, 40.0);
    // Queue a copy out of a pinned block behind the busy work, then free the block at once.
    let first = unsafe { (api.malloc_host)(size) } as *mut u8;
    unsafe { std::ptr::copy_nonoverlapping(want_x.as_ptr(), first, size) };
    unsafe { (api.memcpy_async)(x.ptr, first.cast(), size, H2D, s1) };
    unsafe { (api.free_host)(first.cast()) };
    // Allocate again and overwrite: the copy above must still see the old contents.
    let mut again = Pinned::new(size);
    fill(again.as_mut(), 202);
    let want_y = again.as_ref().to_vec();
    unsafe { (api.memcpy_async)(y.ptr, again.ptr.cast(), size, H2D, s2) };
    unsafe {
        (api.stream_synchronize)(s1);
        (api.stream_synchronize)(s2);
    }
    let mut got = vec![0u8; size];
    unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), x.ptr, size, D2H) };
    assert!(
        got == want_x,
        "the device received data written after free_host: block reused early"
    );
    unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), y.ptr, size, D2H) };
    assert!(got == want_y, "second stream's copy");
    unsafe {
        (api.destroy_stream)(s1);
        (api.destroy_stream)(s2);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn pinned_block_used_on_a_destroyed_stream_is_still_tracked() {
    require_gpu!();
    let api = api();
    let size = 4 << 20;
    let s = unsafe { (api.create_stream)() };
    let x = Dev::new(size);
    let mut want = vec![0u8; size];
    fill(&mut want, 7);
    let _work = busy(s, 30.0);
    let p = unsafe { (api.malloc_host)(size) } as *mut u8;
    unsafe { std::ptr::copy_nonoverlapping(want.as_ptr(), p, size) };
    unsafe { (api.memcpy_async)(x.ptr, p.cast(), size, H2D, s) };
    unsafe { (api.destroy_stream)(s) }; // pending work still completes
    unsafe { (api.free_host)(p.cast()) };
    let mut again = Pinned::new(size);
    fill(again.as_mut(), 8);
    unsafe { (api.device_synchronize)() };
    let mut got = vec![0u8; size];
    unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), x.ptr, size, D2H) };
    assert!(
        got == want,
        "block reused before the destroyed stream's copy ran"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn device_block_freed_behind_queued_copy_is_not_reused_early_across_streams() {
    require_gpu!();
    let api = api();
    let size = 64 << 20;
    let (s1, s2) = unsafe { ((api.create_stream)(), (api.create_stream)()) };
    let mut want = vec![0u8; size];
    fill(&mut want, 303);
    let x = unsafe { (api.malloc_device)(size) };
    unsafe { (api.memcpy_sync)(x, want.as_ptr().cast(), size, H2D) };
    let y = Dev::new(size);
    let _work = busy(s1, 40.0);
    // s1 reads x after the busy work; x is freed right away and its memory may be reused.
    unsafe { (api.memcpy_async)(y.ptr, x, size, D2D, s1) };
    unsafe { (api.free_device)(x) };
    let z = Dev::new(size);
    let mut other = Pinned::new(size);
    fill(other.as_mut(), 404);
    // s2 overwrites the new block (possibly x's memory) at once.
    unsafe { (api.memcpy_async)(z.ptr, other.ptr.cast(), size, H2D, s2) };
    unsafe {
        (api.stream_synchronize)(s2);
        (api.stream_synchronize)(s1);
    }
    let mut got = vec![0u8; size];
    unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), y.ptr, size, D2H) };
    assert!(
        got == want,
        "s1 read memory another stream rewrote after free_device"
    );
    unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), z.ptr, size, D2H) };
    assert!(got == other.as_ref(), "s2's data");
    unsafe {
        (api.destroy_stream)(s1);
        (api.destroy_stream)(s2);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn two_streams_keep_overlapping_while_the_caches_work() {
    require_gpu!();
    let api = api();
    let size = 256 << 20;
    let (s1, s2) = unsafe { ((api.create_stream)(), (api.create_stream)()) };
    let (up_src, mut down_dst) = (Pinned::new(size), Pinned::new(size));
    let (d_up, d_down) = (Dev::new(size), Dev::new(size));
    let _ = down_dst.as_mut();
    let run = |h2d: bool, d2h: bool, churn: bool| {
        let t = Instant::now();
        unsafe {
            if h2d {
                (api.memcpy_async)(d_up.ptr, up_src.ptr.cast(), size, H2D, s1);
            }
            if d2h {
                (api.memcpy_async)(down_dst.ptr.cast(), d_down.ptr, size, D2H, s2);
            }
            if churn {
                for i in 0..50 {
                    let d = (api.malloc_device)(4096 << (i % 8));
                    let h = (api.malloc_host)(4096 << (i % 8));
                    (api.free_device)(d);
                    (api.free_host)(h);
                }
            }
            (api.stream_synchronize)(s1);
            (api.stream_synchronize)(s2);
        }
        t.elapsed().as_secs_f64()
    };
    run(true, true, false); // warm up
    let best = |h, d, c| (0..3).map(|_| run(h, d, c)).fold(f64::MAX, f64::min);
    let (t_up, t_down) = (best(true, false, false), best(false, true, false));
    // With the caches switched off, malloc/free are cudaMalloc/cudaFree, and cudaFree waits for
    // the whole device: only the caches promise overlap under allocation churn.
    let caches_on = std::env::var("LLAISYS_NVIDIA_DEVICE_CACHE").as_deref() != Ok("0")
        && std::env::var("LLAISYS_NVIDIA_HOST_CACHE").as_deref() != Ok("0");
    let t_both = best(true, true, caches_on);
    eprintln!(
        "overlap: H2D {:.2} ms, D2H {:.2} ms, both (cache churn: {caches_on}) {:.2} ms",
        t_up * 1e3,
        t_down * 1e3,
        t_both * 1e3
    );
    assert!(
        t_both < 0.8 * (t_up + t_down),
        "copies on two streams no longer overlap: {t_both} vs {t_up} + {t_down}"
    );
    unsafe {
        (api.destroy_stream)(s1);
        (api.destroy_stream)(s2);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn pageable_copies_keep_their_meaning() {
    require_gpu!();
    let api = api();
    let size = (96 << 20) + 12345;
    let s = unsafe { (api.create_stream)() };
    let d = Dev::new(size);
    let mut src = vec![0u8; size];
    fill(&mut src, 55);
    let want = src.clone();
    // Async H2D from pageable memory behind queued work: the caller's buffer may be reused as
    // soon as the call returns; the device still gets the old contents, in stream order.
    let _work = busy(s, 20.0);
    unsafe { (api.memcpy_async)(d.ptr, src.as_ptr().cast(), size, H2D, s) };
    fill(&mut src, 56);
    // Async D2H to pageable memory: the data is there when the call returns (stream order).
    let mut back = vec![0u8; size];
    unsafe { (api.memcpy_async)(back.as_mut_ptr().cast(), d.ptr, size, D2H, s) };
    assert!(back == want, "pageable async H2D -> D2H");
    // Sync H2D from pageable memory (cudaMemcpy's guarantees): ordered before later work on
    // blocking streams, such as `s`.
    unsafe { (api.memcpy_sync)(d.ptr, src.as_ptr().cast(), size, H2D) };
    let out = Pinned::new(size);
    unsafe {
        (api.memcpy_async)(out.ptr.cast(), d.ptr, size, D2H, s);
        (api.stream_synchronize)(s);
    }
    assert!(
        out.as_ref() == &src[..],
        "memcpy_sync pageable H2D was not ordered before a blocking stream's later work"
    );
    // Unaligned sub-ranges through the fast path.
    let mut part = vec![0u8; size - 3];
    unsafe {
        (api.memcpy_sync)(
            part.as_mut_ptr().cast(),
            d.ptr.cast::<u8>().add(3).cast(),
            size - 3,
            D2H,
        )
    };
    assert!(part[..] == src[3..], "offset D2H");
    unsafe { (api.destroy_stream)(s) };
}

/// Frees after which freed device blocks are handed out again (cache::recycle's batch).
const RECYCLE_BATCH: usize = 16;

fn cache_on() -> bool {
    std::env::var("LLAISYS_NVIDIA_DEVICE_CACHE").as_deref() != Ok("0")
}

/// A block freed while a blocking stream still reads it, reused through the recycling lists
/// (behind one barrier per batch of frees) and overwritten at once by another blocking stream:
/// the reader must see the old data. The test checks that the reused memory really is the
/// freed block (with the device cache on).
#[test]
#[ignore = "needs a CUDA device"]
fn recycled_device_block_is_not_overwritten_before_its_last_reader() {
    require_gpu!();
    // A size no other test uses: only this test's blocks are kept under it.
    recycle_under_a_reader((8 << 20) + 3 * 4096, 515);
}

/// The same for a large block (cache::large: from cudaMalloc, kept the same way).
#[test]
#[ignore = "needs a CUDA device"]
fn recycled_large_block_is_not_overwritten_before_its_last_reader() {
    require_gpu!();
    recycle_under_a_reader((24 << 20) + 5 * 4096, 717);
}

fn recycle_under_a_reader(size: usize, seed: u64) {
    let api = api();
    let (s1, s2) = unsafe { ((api.create_stream)(), (api.create_stream)()) };
    let mut want = vec![0u8; size];
    fill(&mut want, seed);
    let blocks: Vec<_> = (0..RECYCLE_BATCH)
        .map(|_| unsafe { (api.malloc_device)(size) })
        .collect();
    let x = blocks[0];
    unsafe { (api.memcpy_sync)(x, want.as_ptr().cast(), size, H2D) };
    unsafe { (api.stream_synchronize)(std::ptr::null_mut()) };
    let y = Dev::new(size);
    let _work = busy(s1, 40.0);
    unsafe { (api.memcpy_async)(y.ptr, x, size, D2D, s1) };
    for &b in &blocks {
        unsafe { (api.free_device)(b) };
    }
    // Take every block of the size back and overwrite each on s2 at once.
    let mut other = Pinned::new(size);
    fill(other.as_mut(), seed + 101);
    let again: Vec<_> = (0..RECYCLE_BATCH)
        .map(|_| unsafe { (api.malloc_device)(size) })
        .collect();
    for &a in &again {
        unsafe { (api.memcpy_async)(a, other.ptr.cast(), size, H2D, s2) };
    }
    unsafe {
        (api.stream_synchronize)(s2);
        (api.stream_synchronize)(s1);
    }
    if cache_on() {
        assert!(
            again.contains(&x),
            "the freed block was not handed out again"
        );
    }
    let mut got = vec![0u8; size];
    unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), y.ptr, size, D2H) };
    assert!(
        got == want,
        "s1 read a recycled block that s2 rewrote after free_device"
    );
    for &a in &again {
        unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), a, size, D2H) };
        assert!(got == other.as_ref(), "s2's data");
        unsafe { (api.free_device)(a) };
    }
    unsafe {
        (api.destroy_stream)(s1);
        (api.destroy_stream)(s2);
    }
}

/// Free device memory after everything cached is released.
fn free_after_release() -> usize {
    assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaReleaseCachedMemory(), 0);
    llaisys_nvidia::device::mem_info().expect("mem info").0
}

/// Releases the caches and checks that the device's free memory is back to `free0` (the driver
/// may keep a few MiB of its own bookkeeping) and nothing is counted as cached.
fn released_back_to(free0: usize) {
    let free1 = free_after_release();
    assert_eq!(device_stats().cached_bytes, 0, "release left cached memory");
    assert!(
        free1 + (8 << 20) >= free0,
        "memory not given back: {} MiB free, {} MiB before",
        free1 >> 20,
        free0 >> 20
    );
}

/// Large blocks (cache::large) are counted as cached while kept, and release_cached gives the
/// memory back to the device.
#[test]
#[ignore = "needs a CUDA device"]
fn large_blocks_are_cached_counted_and_released() {
    require_gpu!();
    let api = api();
    let size = (40 << 20) + 7 * 4096;
    let n = RECYCLE_BATCH;
    let free0 = free_after_release();
    let before = device_stats();
    let blocks: Vec<_> = (0..n)
        .map(|_| unsafe { (api.malloc_device)(size) })
        .collect();
    assert!(blocks.iter().all(|p| !p.is_null()));
    let during = device_stats();
    assert!(during.in_use_bytes >= before.in_use_bytes + (n * size) as u64);
    for &b in &blocks {
        unsafe { (api.free_device)(b) };
    }
    let after = device_stats();
    assert_eq!(
        after.in_use_bytes, before.in_use_bytes,
        "in use after the frees"
    );
    let (free_kept, _) = llaisys_nvidia::device::mem_info().expect("mem info");
    if cache_on() {
        assert!(
            after.cached_bytes >= (n * size) as u64,
            "kept large blocks not counted as cached: {} < {}",
            after.cached_bytes,
            n * size
        );
        assert!(
            free_kept + (n - 1) * size <= free0,
            "the cache kept nothing: {} MiB free of {} MiB before",
            free_kept >> 20,
            free0 >> 20
        );
        // Served again from the kept blocks.
        let b = unsafe { (api.malloc_device)(size) };
        assert!(
            blocks.contains(&b),
            "a kept large block not handed out again"
        );
        unsafe { (api.free_device)(b) };
    }
    released_back_to(free0);
}

/// Freeing many distinct large sizes (more than the ready blocks' bound, so blocks leave the
/// cache and are parked, then freed together) while a blocking stream still reads the first one:
/// the reader's data survives reallocation and overwriting on another stream, nothing is lost,
/// and the cache holds no more than its bounds.
#[test]
#[ignore = "needs a CUDA device"]
fn large_blocks_churned_past_the_budget_keep_their_readers() {
    require_gpu!();
    let api = api();
    // The bounds with no setting: ready blocks up to a sixteenth of the device's memory (at
    // least recycle's budget, 1 GiB), parked ones up to the budget, pending ones under half of
    // it; the blocks freed here exceed all three together by 1 GiB, in 64 MiB blocks (large
    // ones: under an eighth of the budget).
    let (_, device_memory) = llaisys_nvidia::device::mem_info().expect("mem info");
    let budget = 1usize << 30;
    let ready = (device_memory / 16).max(budget);
    let count = (ready + 2 * budget + budget / 2) / (64 << 20) + 1;
    let size_of = |i: usize| (64 << 20) + (i + 11) * 4096;
    let total: usize = (0..count).map(size_of).sum();
    let free0 = free_after_release();
    assert!(
        total + (2 << 30) < free0,
        "needs {} MiB of free device memory, {} MiB free",
        (total + (2 << 30)) >> 20,
        free0 >> 20
    );
    let before = device_stats();
    let (s1, s2) = unsafe { ((api.create_stream)(), (api.create_stream)()) };
    let blocks: Vec<_> = (0..count)
        .map(|i| unsafe { (api.malloc_device)(size_of(i)) })
        .collect();
    assert!(blocks.iter().all(|p| !p.is_null()));
    let size0 = size_of(0);
    let mut want = vec![0u8; size0];
    fill(&mut want, 919);
    unsafe { (api.memcpy_sync)(blocks[0], want.as_ptr().cast(), size0, H2D) };
    unsafe { (api.stream_synchronize)(std::ptr::null_mut()) };
    let y = Dev::new(size0);
    let work = busy(s1, 40.0);
    unsafe { (api.memcpy_async)(y.ptr, blocks[0], size0, D2D, s1) };
    for &b in &blocks {
        unsafe { (api.free_device)(b) };
    }
    let freed = device_stats();
    assert_eq!(freed.free_count, before.free_count + count as u64);
    if cache_on() {
        // Ready (at most `ready`), parked (at most the budget) and pending (under half of it),
        // and some slack for the pool (the busy buffers are in use, not cached).
        let bound: usize = ready + budget + budget / 2 + (512 << 20);
        assert!(total > bound + (256 << 20));
        assert!(
            freed.cached_bytes <= bound as u64,
            "parked blocks not freed: {} MiB cached after freeing {} MiB",
            freed.cached_bytes >> 20,
            total >> 20
        );
    }
    // Reallocate every size and overwrite each block on s2 at once.
    let mut other = Pinned::new(size_of(count - 1));
    fill(other.as_mut(), 929);
    let again: Vec<_> = (0..count)
        .map(|i| unsafe { (api.malloc_device)(size_of(i)) })
        .collect();
    assert!(again.iter().all(|p| !p.is_null()));
    for (i, &a) in again.iter().enumerate() {
        unsafe { (api.memcpy_async)(a, other.ptr.cast(), size_of(i), H2D, s2) };
    }
    unsafe {
        (api.stream_synchronize)(s2);
        (api.stream_synchronize)(s1);
    }
    let mut got = vec![0u8; size0];
    unsafe { (api.memcpy_sync)(got.as_mut_ptr().cast(), y.ptr, size0, D2H) };
    assert!(
        got == want,
        "s1's reader saw a block rewritten after free_device"
    );
    let mut tail = vec![0u8; 4096];
    for (i, &a) in again.iter().enumerate() {
        let n = size_of(i);
        let at = unsafe { a.cast::<u8>().add(n - 4096) };
        unsafe { (api.memcpy_sync)(tail.as_mut_ptr().cast(), at.cast(), 4096, D2H) };
        assert!(tail == other.as_ref()[n - 4096..n], "block {i}: s2's data");
        unsafe { (api.free_device)(a) };
    }
    drop(y);
    drop(work);
    unsafe {
        (api.destroy_stream)(s1);
        (api.destroy_stream)(s2);
    }
    assert_eq!(
        device_stats().in_use_bytes,
        before.in_use_bytes,
        "blocks left in use"
    );
    released_back_to(free0);
}

#[test]
#[ignore = "needs a CUDA device"]
fn device_cache_hits_statistics_and_release() {
    require_gpu!();
    let api = api();
    unsafe { (api.device_synchronize)() };
    let before = device_stats();
    let size = 3 << 20;
    // RECYCLE_BATCH frees put the blocks behind one barrier: the next allocation of the size
    // is served from them (cache::recycle), or from the pool with the cache's recycling off.
    let blocks: Vec<_> = (0..RECYCLE_BATCH)
        .map(|_| unsafe { (api.malloc_device)(size) })
        .collect();
    for &a in &blocks {
        unsafe { (api.free_device)(a) };
    }
    let mid = device_stats();
    let b = unsafe { (api.malloc_device)(size) };
    let during = device_stats();
    unsafe { (api.free_device)(b) };
    let after = device_stats();
    let n = RECYCLE_BATCH as u64;
    assert_eq!(during.alloc_count, before.alloc_count + n + 1);
    assert_eq!(after.free_count, before.free_count + n + 1);
    assert!(during.in_use_bytes >= size as u64);
    assert!(during.peak_in_use_bytes >= during.in_use_bytes);
    if cache_on() {
        assert_eq!(
            during.cache_hits,
            mid.cache_hits + 1,
            "second allocation not served from the pool"
        );
        assert!(after.cached_bytes >= size as u64);
    } else {
        assert_eq!(
            during.cache_hits, before.cache_hits,
            "cache switched off but hits counted"
        );
    }
    assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaReleaseCachedMemory(), 0);
    assert_eq!(
        device_stats().cached_bytes,
        0,
        "release left cached device memory"
    );
    let h = llaisys_nvidia::ops::memory::host_memory_stats();
    assert!(h.alloc_count >= h.free_count);
}

#[test]
#[ignore = "needs a CUDA device"]
fn host_cache_hits_and_statistics() {
    require_gpu!();
    let api = api();
    let before = llaisys_nvidia::ops::memory::host_memory_stats();
    let p = unsafe { (api.malloc_host)(1 << 20) };
    unsafe { (api.free_host)(p) };
    let q = unsafe { (api.malloc_host)(1 << 20) };
    let during = llaisys_nvidia::ops::memory::host_memory_stats();
    unsafe { (api.free_host)(q) };
    assert_eq!(during.alloc_count, before.alloc_count + 2);
    if std::env::var("LLAISYS_NVIDIA_HOST_CACHE").as_deref() != Ok("0") {
        assert_eq!(p, q, "a free block of the same class was not reused");
        assert_eq!(during.cache_hits, before.cache_hits + 1);
    }
    // Not ours: refused, nothing freed, no crash.
    let mut local = [0u8; 64];
    let errs = expect_errors(|| unsafe { (api.free_host)(local.as_mut_ptr().cast()) });
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0, 3, "{errs:?}");
    let d = unsafe { (api.malloc_device)(4096) };
    let errs = expect_errors(|| unsafe { (api.free_host)(d) });
    assert_eq!(errs.len(), 1, "device pointer accepted by free_host");
    let errs = expect_errors(|| unsafe {
        (api.free_device)(d);
        (api.free_device)(d);
    });
    assert_eq!(errs.len(), 1, "double free_device not refused: {errs:?}");
}

#[test]
#[ignore = "needs a CUDA device"]
fn out_of_memory_releases_the_caches_and_retries() {
    require_gpu!();
    let api = api();
    unsafe { (api.device_synchronize)() };
    let (free, _total) = llaisys_nvidia::device::mem_info().expect("mem info");
    // Cache a large block, then ask for more than fits next to it.
    let a = unsafe { (api.malloc_device)(free / 100 * 55) };
    assert!(!a.is_null());
    unsafe { (api.free_device)(a) };
    let b = unsafe { (api.malloc_device)(free / 100 * 75) };
    assert!(
        !b.is_null(),
        "allocation failed although the cache held the memory"
    );
    unsafe { (api.free_device)(b) };
    // More than the device has: a clear error after the retry, NULL back.
    let mut p: *mut c_void = std::ptr::dangling_mut();
    let errs = expect_errors(|| p = unsafe { (api.malloc_device)(free * 2) });
    assert!(p.is_null());
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].1, 2, "{errs:?}");
    assert!(
        errs[0].2.contains("after releasing all cached memory"),
        "{errs:?}"
    );
    assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaReleaseCachedMemory(), 0);
}

/// A device allocation larger than what is free (not than the device: that is refused before
/// CUDA) fails after the caches were released, with a report whose figures agree with CUDA's:
/// the device's memory, the library's use, a largest allocation that does succeed.
#[test]
#[ignore = "needs a CUDA device"]
fn out_of_memory_reports_figures_that_agree_with_cuda() {
    require_gpu!();
    use llaisys_nvidia::ffi::{self, OutOfMemory};
    let api = api();
    unsafe { (api.set_device)(0) };
    let held = Dev::new(64 << 20);
    let (_, total) = llaisys_nvidia::device::mem_info().expect("cudaMemGetInfo");
    // The context alone takes more than 1 MiB: this cannot be had.
    let ask = total - (1 << 20);
    let mut p = std::ptr::null_mut();
    let st = unsafe { ffi::llaisysNvidiaMallocDevice(&mut p, ask) };
    let msg = crate::support::last_error_message();
    assert_eq!(st, 1, "{msg}");
    assert!(p.is_null());
    assert_eq!(ffi::llaisysNvidiaLastCudaError(), 2, "{msg}");
    let mut r = OutOfMemory::default();
    assert_eq!(
        unsafe { ffi::llaisysNvidiaLastOutOfMemory(&mut r) },
        1,
        "{msg}"
    );
    assert_eq!((r.device, r.requested_bytes), (0, ask as u64), "{r:?}");
    assert_eq!(r.total_bytes, total as u64, "{r:?}");
    assert!(r.free_bytes < r.requested_bytes, "{r:?}");
    assert!(r.in_use_bytes >= 64 << 20, "{r:?}");
    assert!(r.largest_allocation_bytes <= r.free_bytes, "{r:?}");
    assert_eq!(r.largest_allocation_bytes % (2 << 20), 0, "{r:?}");
    // The driver's NVML is on every machine with a GPU: it lists the other processes.
    assert!(r.other_processes >= 0, "{msg}");
    assert!(
        msg.contains("asked for on device 0, which has") && msg.contains("free_device"),
        "{msg}"
    );
    // What the report says succeeds does.
    let largest = Dev::new(r.largest_allocation_bytes as usize);
    drop(largest);
    drop(held);
}

/// A memory limit gives back at once the cached memory beyond it and refuses an allocation that
/// would pass it, with the report naming it; lifted, the device is whole again.
#[test]
#[ignore = "needs a CUDA device"]
fn a_memory_limit_gives_back_cached_memory_and_refuses_beyond_it() {
    require_gpu!();
    use llaisys_nvidia::ffi::{self, OutOfMemory};
    let api = api();
    unsafe { (api.set_device)(0) };
    let cached = std::env::var("LLAISYS_NVIDIA_DEVICE_CACHE").as_deref() != Ok("0");
    let stats = || llaisys_nvidia::ops::memory::device_memory_stats(0).expect("stats");
    let free = || {
        llaisys_nvidia::device::mem_info()
            .expect("cudaMemGetInfo")
            .0 as u64
    };
    assert_eq!(ffi::llaisysNvidiaReleaseCachedMemory(), 0);
    let base = stats().in_use_bytes;
    drop(Dev::new(2 << 30));
    let before = free();
    let limit = base + (1 << 30);
    assert_eq!(ffi::llaisysNvidiaSetMemoryLimit(0, limit), 0);
    let s = stats();
    assert!(s.in_use_bytes + s.cached_bytes <= limit, "{s:?}");
    if cached {
        assert!(
            free() + (64 << 20) >= before + (2 << 30),
            "the 2 GiB kept went back"
        );
    }
    let a = Dev::new(512 << 20);
    let mut p = std::ptr::null_mut();
    let st = unsafe { ffi::llaisysNvidiaMallocDevice(&mut p, 768 << 20) };
    let msg = crate::support::last_error_message();
    assert_eq!((st, p.is_null()), (1, true), "{msg}");
    assert!(msg.contains("memory limit"), "{msg}");
    let mut r = OutOfMemory::default();
    assert_eq!(unsafe { ffi::llaisysNvidiaLastOutOfMemory(&mut r) }, 1);
    assert_eq!(r.limit_bytes, limit, "{r:?}");
    assert_eq!(ffi::llaisysNvidiaSetMemoryLimit(0, 0), 0);
    let b = Dev::new(768 << 20);
    drop((a, b));
}

/// After malloc_device of most of the device and free_device, another library of the process
/// (a cudaMalloc of its own) gets the same amount once a release threshold of 0 is set: the
/// free gives the memory back to CUDA instead of keeping it.
#[test]
#[ignore = "needs a CUDA device"]
fn with_a_release_threshold_another_library_gets_the_freed_memory() {
    require_gpu!();
    use llaisys_nvidia::{ffi, sys};
    let api = api();
    unsafe { (api.set_device)(0) };
    assert_eq!(ffi::llaisysNvidiaReleaseCachedMemory(), 0);
    assert_eq!(ffi::llaisysNvidiaSetReleaseThreshold(0, 0), 0);
    let (free, _) = llaisys_nvidia::device::mem_info().expect("cudaMemGetInfo");
    let n = (free / 10 * 7) & !((2 << 20) - 1);
    drop(Dev::new(n));
    let mut p: *mut c_void = std::ptr::null_mut();
    let rc = unsafe { sys::cudaMalloc(&mut p, n) }.0;
    assert_eq!(
        rc, 0,
        "another library's cudaMalloc of {n} bytes after our free"
    );
    assert_eq!(unsafe { sys::cudaFree(p) }.0, 0);
    assert_eq!(ffi::llaisysNvidiaSetReleaseThreshold(0, u64::MAX), 0);
}

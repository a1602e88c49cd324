//! The rows of the README's bad-input table that need a GPU: real double frees, pointers of the
//! wrong allocator, destroyed streams, sizes beyond free memory, device ids, small copies whose
//! kind does not match their memory (left to CUDA's own checks), and the fuzz driver with real
//! memory and data checks.

use crate::common::{api, expect_errors, Dev, Pinned};
use crate::require_gpu;
use std::os::raw::c_void;
use std::time::Duration;

#[path = "../support/fuzz.rs"]
mod fuzz;

#[test]
#[ignore = "needs a CUDA device"]
fn double_frees_and_wrong_allocators_are_refused() {
    require_gpu!();
    let api = api();
    let d = unsafe { (api.malloc_device)(1 << 20) };
    let h = unsafe { (api.malloc_host)(1 << 20) };
    let errs = expect_errors(|| unsafe {
        (api.free_host)(d); // device pointer to free_host
        (api.free_device)(h); // host pointer to free_device
        (api.free_device)(d.cast::<u8>().add(64).cast()); // interior pointer
    });
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(errs.iter().all(|e| e.0 == 3), "{errs:?}");
    let errs = expect_errors(|| unsafe {
        (api.free_device)(d);
        (api.free_host)(h);
        (api.free_device)(d); // double
        (api.free_host)(h); // double
    });
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs.iter()
            .all(|e| e.0 == 3 && e.2.contains("already freed")),
        "{errs:?}"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn destroyed_stream_is_refused_everywhere() {
    require_gpu!();
    let api = api();
    let s = unsafe { (api.create_stream)() };
    unsafe { (api.destroy_stream)(s) };
    let d = Dev::new(4096);
    let h = Pinned::new(4096);
    let errs = expect_errors(|| unsafe {
        (api.destroy_stream)(s);
        (api.stream_synchronize)(s);
        (api.memcpy_async)(d.ptr, h.ptr.cast(), 4096, 1, s);
    });
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(
        errs.iter()
            .all(|e| e.0 == 3 && e.2.contains("create_stream")),
        "{errs:?}"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn sizes_beyond_free_memory_and_device_ids() {
    let n = require_gpu!();
    let api = api();
    // More than the whole device: the cache is released and the allocation retried (free
    // memory alone excludes what the cache holds, so only sizes past the total are sure to fail).
    let (_free, total) = llaisys_nvidia::device::mem_info().expect("mem info");
    for size in [total + (1 << 30), total * 4] {
        let mut p: *mut c_void = std::ptr::dangling_mut();
        let errs = expect_errors(|| p = unsafe { (api.malloc_device)(size) });
        if !p.is_null() {
            unsafe { (api.free_device)(p) };
        }
        assert!(p.is_null() && errs.len() == 1 && errs[0].1 == 2, "{errs:?}");
    }
    for id in [-1, n, 1000] {
        let errs = expect_errors(|| unsafe { (api.set_device)(id) });
        assert!(
            errs.len() == 1 && errs[0].1 == 101,
            "set_device({id}): {errs:?}"
        );
    }
    unsafe { (api.set_device)(0) };
}

#[test]
#[ignore = "needs a CUDA device"]
fn small_copies_with_the_wrong_kind_never_corrupt_or_crash() {
    require_gpu!();
    let api = api();
    let n = 4096;
    let d = Dev::new(n);
    let mut host = vec![7u8; n];
    let h2 = vec![9u8; n];
    // Below KIND_CHECK_MIN_BYTES (256 KiB) CUDA checks: each call either reports an error or copies correctly.
    for kind in [1, 2, 3] {
        let errs = expect_errors(|| unsafe {
            (api.memcpy_sync)(host.as_mut_ptr().cast(), h2.as_ptr().cast(), n, kind)
        });
        assert!(
            errs.is_empty() || errs.iter().all(|e| e.0 == 1 || e.0 == 3),
            "{errs:?}"
        );
        assert!(
            host.iter().all(|&x| x == 7) || host == h2,
            "partial or wrong data"
        );
        host.fill(7);
    }
    // Large: refused by our check.
    let big = Dev::new(1 << 20);
    let mut hb = vec![0u8; 1 << 20];
    let errs = expect_errors(|| unsafe { (api.memcpy_sync)(big.ptr, d.ptr, 1 << 20, 1) });
    assert!(
        errs.len() == 1 && errs[0].0 == 3 && errs[0].2.contains("src="),
        "{errs:?}"
    );
    let errs =
        expect_errors(|| unsafe { (api.memcpy_sync)(hb.as_mut_ptr().cast(), big.ptr, 1 << 20, 3) });
    assert!(
        errs.len() == 1 && errs[0].0 == 3 && errs[0].2.contains("dst="),
        "{errs:?}"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn fuzz_with_real_memory() {
    require_gpu!();
    let secs = std::env::var("LLAISYS_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed = std::env::var("LLAISYS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_u64 ^ std::process::id() as u64);
    eprintln!("gpu fuzz seed {seed} (rerun with LLAISYS_FUZZ_SEED={seed})");
    let out = fuzz::run(seed, Duration::from_secs(secs), u64::MAX, true);
    eprintln!("{out:?}");
    assert!(out.data_checks > 100, "{out:?}");
    assert!(out.errors_by_status[3] > 0, "{out:?}");
    // Status 1 comes from the bad device ids it tries (cudaErrorInvalidDevice); every call's own
    // expectations were checked as it ran. Deferred and internal errors must not happen.
    assert_eq!(
        out.errors_by_status[2] + out.errors_by_status[4],
        0,
        "{out:?}"
    );
}

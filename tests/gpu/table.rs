//! The llaisys table on a real GPU: the upstream runtime test's sequence, every copy kind and
//! size from pinned and pageable memory, streams, and the error policy with real CUDA errors.

use crate::common::{api, expect_errors, fill, Dev, Pinned};
use crate::require_gpu;
use llaisys_nvidia::sys as raw;
use std::os::raw::c_void;

const H2H: i32 = 0;
const H2D: i32 = 1;
const D2H: i32 = 2;
const D2D: i32 = 3;

/// The upstream test/test_runtime.py sequence, per device: set_device(i), two 1 MiB buffers,
/// H2D -> D2D -> D2H, compare.
#[test]
#[ignore = "needs a CUDA device"]
fn upstream_runtime_test_sequence_every_device() {
    let n = require_gpu!();
    let api = api();
    assert_eq!(unsafe { (api.get_device_count)() }, n);
    for dev in 0..n {
        unsafe { (api.set_device)(dev) };
        let size = 1 << 20;
        let a = Dev::new(size);
        let b = Dev::new(size);
        let mut src = vec![0u8; size];
        fill(&mut src, dev as u64 + 1);
        let mut dst = vec![0u8; size];
        unsafe {
            (api.memcpy_sync)(a.ptr, src.as_ptr().cast(), size, H2D);
            (api.memcpy_sync)(b.ptr, a.ptr, size, D2D);
            (api.memcpy_sync)(dst.as_mut_ptr().cast(), b.ptr, size, D2H);
        }
        assert!(
            src == dst,
            "device {dev}: data differs after H2D -> D2D -> D2H"
        );
    }
    unsafe { (api.set_device)(0) };
}

fn roundtrip(size: usize, pinned: bool, seed: u64) {
    let api = api();
    let d1 = Dev::new(size);
    let d2 = Dev::new(size);
    let (mut src_p, mut dst_p, mut h2h_p);
    let (mut src_v, mut dst_v, mut h2h_v);
    let (src, dst, h2h): (&mut [u8], &mut [u8], &mut [u8]) = if pinned {
        src_p = Pinned::new(size);
        dst_p = Pinned::new(size);
        h2h_p = Pinned::new(size);
        (src_p.as_mut(), dst_p.as_mut(), h2h_p.as_mut())
    } else {
        src_v = vec![0u8; size];
        dst_v = vec![0u8; size];
        h2h_v = vec![0u8; size];
        (&mut src_v[..], &mut dst_v[..], &mut h2h_v[..])
    };
    fill(src, seed);
    unsafe {
        (api.memcpy_sync)(h2h.as_mut_ptr().cast(), src.as_ptr().cast(), size, H2H);
        (api.memcpy_sync)(d1.ptr, h2h.as_ptr().cast(), size, H2D);
        (api.memcpy_sync)(d2.ptr, d1.ptr, size, D2D);
        (api.memcpy_sync)(dst.as_mut_ptr().cast(), d2.ptr, size, D2H);
    }
    assert!(
        src == dst,
        "size {size} pinned={pinned}: H2H -> H2D -> D2D -> D2H differs"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn every_kind_every_size_pinned_and_pageable() {
    require_gpu!();
    let sizes = [1usize, 7, 4096, (1 << 20) + 3, 64 << 20, 1 << 30];
    for (i, &size) in sizes.iter().enumerate() {
        for pinned in [true, false] {
            roundtrip(size, pinned, i as u64 * 2 + pinned as u64);
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn malloc_host_is_pinned_and_malloc_device_is_device() {
    require_gpu!();
    let h = Pinned::new(4096);
    let d = Dev::new(4096);
    for (p, want) in [
        (
            h.ptr as *const c_void,
            raw::cudaMemoryType::cudaMemoryTypeHost,
        ),
        (
            d.ptr as *const c_void,
            raw::cudaMemoryType::cudaMemoryTypeDevice,
        ),
    ] {
        let mut a: raw::cudaPointerAttributes = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { raw::cudaPointerGetAttributes(&mut a, p) }.0, 0);
        assert_eq!(a.type_, want);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn async_copies_on_two_streams_then_synchronize() {
    require_gpu!();
    let api = api();
    let size = 32 << 20;
    let s1 = unsafe { (api.create_stream)() };
    let s2 = unsafe { (api.create_stream)() };
    assert!(!s1.is_null() && !s2.is_null() && s1 != s2);
    let mut src1 = Pinned::new(size);
    let mut src2 = Pinned::new(size);
    fill(src1.as_mut(), 11);
    fill(src2.as_mut(), 12);
    let (d1, d2) = (Dev::new(size), Dev::new(size));
    let (out1, out2) = (Pinned::new(size), Pinned::new(size));
    unsafe {
        (api.memcpy_async)(d1.ptr, src1.ptr.cast(), size, H2D, s1);
        (api.memcpy_async)(d2.ptr, src2.ptr.cast(), size, H2D, s2);
        (api.memcpy_async)(out1.ptr.cast(), d1.ptr, size, D2H, s1);
        (api.memcpy_async)(out2.ptr.cast(), d2.ptr, size, D2H, s2);
        (api.stream_synchronize)(s1);
    }
    assert!(out1.as_ref() == src1.as_ref(), "stream 1 data");
    unsafe { (api.stream_synchronize)(s2) };
    assert!(out2.as_ref() == src2.as_ref(), "stream 2 data");
    // Async from pageable memory, and device_synchronize.
    let mut pageable = vec![0u8; size];
    fill(&mut pageable, 13);
    let mut back = vec![0u8; size];
    unsafe {
        (api.memcpy_async)(d1.ptr, pageable.as_ptr().cast(), size, H2D, s1);
        (api.memcpy_async)(back.as_mut_ptr().cast(), d1.ptr, size, D2H, s1);
        (api.device_synchronize)();
    }
    assert!(back == pageable, "pageable async round trip");
    unsafe {
        (api.destroy_stream)(s1);
        (api.destroy_stream)(s2);
    }
}

/// llaisys creates its stream before set_device: the stream belongs to the device current then.
#[test]
#[ignore = "needs a CUDA device"]
fn stream_created_before_set_device_works() {
    require_gpu!();
    let api = api();
    let s = unsafe { (api.create_stream)() };
    unsafe { (api.set_device)(0) };
    let size = 4 << 20;
    let d = Dev::new(size);
    let mut src = vec![0u8; size];
    fill(&mut src, 31);
    let mut back = vec![0u8; size];
    unsafe {
        (api.memcpy_async)(d.ptr, src.as_ptr().cast(), size, H2D, s);
        (api.memcpy_async)(back.as_mut_ptr().cast(), d.ptr, size, D2H, s);
        (api.stream_synchronize)(s);
        (api.destroy_stream)(s);
    }
    assert!(back == src);
}

#[test]
#[ignore = "needs a CUDA device"]
fn real_cuda_errors_reach_the_handler_and_return_failure_values() {
    let n = require_gpu!();
    let api = api();
    let mut p: *mut c_void = std::ptr::dangling_mut();
    let errs = expect_errors(|| p = unsafe { (api.malloc_device)(usize::MAX / 2) });
    assert!(
        p.is_null(),
        "malloc_device(usize::MAX / 2) gave {p:p}: {errs:?}"
    );
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!((errs[0].0, errs[0].1), (1, 2), "{errs:?}"); // CUDA, cudaErrorMemoryAllocation
    assert!(
        errs[0].2.contains("cudaMalloc") && errs[0].2.contains("on device 0"),
        "{errs:?}"
    );
    let errs = expect_errors(|| unsafe { (api.set_device)(n) });
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].1, 101, "{errs:?}"); // cudaErrorInvalidDevice
    assert!(errs[0].2.contains(&format!("device count {n}")), "{errs:?}");
    let errs = expect_errors(|| unsafe { (api.set_device)(-1) });
    assert_eq!(errs.len(), 1, "{errs:?}");
    // A pinned size whose size class would pass PTRDIFF_MAX is refused before the cache; with
    // the cache off (no size classes) cudaMallocHost says out of memory.
    let errs = expect_errors(|| p = unsafe { (api.malloc_host)(usize::MAX / 2) });
    assert!(p.is_null() && errs.len() == 1, "{errs:?}");
    let cached = std::env::var("LLAISYS_NVIDIA_HOST_CACHE").as_deref() != Ok("0");
    assert_eq!(
        llaisys_nvidia::ffi::llaisysNvidiaLastErrorStatus(),
        if cached { 3 } else { 1 },
        "{errs:?}"
    );
    assert!(
        !cached || errs[0].2.contains("pinned size class"),
        "{errs:?}"
    );
    // One the device cannot hold is CUDA's out of memory, after the caches were released.
    let errs = expect_errors(|| p = unsafe { (api.malloc_host)(1 << 44) });
    assert!(p.is_null() && errs.len() == 1, "{errs:?}");
    assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaLastErrorStatus(), 1);
    // Size 0 and NULL frees: no error, NULL back.
    let errs = expect_errors(|| unsafe {
        assert!((api.malloc_device)(0).is_null());
        assert!((api.malloc_host)(0).is_null());
        (api.free_device)(std::ptr::null_mut());
        (api.free_host)(std::ptr::null_mut());
        (api.destroy_stream)(std::ptr::null_mut());
    });
    assert!(errs.is_empty(), "{errs:?}");
    unsafe { (api.set_device)(0) };
}

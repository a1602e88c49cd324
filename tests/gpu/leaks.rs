//! No leaks: after work and once the caches are released, device memory (cudaMemGetInfo) and
//! pinned memory return to where they started.

use crate::common::{api, fill};
use crate::require_gpu;

#[test]
#[ignore = "needs a CUDA device"]
fn memory_returns_to_where_it_started_once_caches_are_released() {
    require_gpu!();
    let api = api();
    unsafe { (api.device_synchronize)() };
    assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaReleaseCachedMemory(), 0);
    let (free0, _) = llaisys_nvidia::device::mem_info().expect("mem info");
    let h0 = llaisys_nvidia::ops::memory::host_memory_stats();
    // Work: device and pinned allocations of many sizes, copies through the fast paths.
    let s = unsafe { (api.create_stream)() };
    let mut kept = Vec::new();
    for i in 0..64usize {
        let n = (4096usize << (i % 12)) + i * 513;
        let mut v = vec![0u8; n];
        fill(&mut v, i as u64);
        unsafe {
            let d = (api.malloc_device)(n);
            let h = (api.malloc_host)(n);
            (api.memcpy_sync)(d, v.as_ptr().cast(), n, 1);
            (api.memcpy_async)(h, d, n, 2, s);
            kept.push((d, h));
        }
    }
    let mut big = vec![0u8; 96 << 20];
    fill(&mut big, 99);
    unsafe {
        let d = (api.malloc_device)(big.len());
        (api.memcpy_sync)(d, big.as_ptr().cast(), big.len(), 1);
        (api.memcpy_sync)(big.as_mut_ptr().cast(), d, big.len(), 2);
        (api.free_device)(d);
        for (d, h) in kept {
            (api.free_device)(d);
            (api.free_host)(h);
        }
        (api.destroy_stream)(s);
        (api.device_synchronize)();
    }
    assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaReleaseCachedMemory(), 0);
    let (free1, _) = llaisys_nvidia::device::mem_info().expect("mem info");
    let h1 = llaisys_nvidia::ops::memory::host_memory_stats();
    let d1 = llaisys_nvidia::ops::memory::device_memory_stats(-1).expect("stats");
    eprintln!("leaks: device free before {free0}, after {free1}; host {h1:?}; device {d1:?}");
    // The driver may keep a few MiB of its own bookkeeping (pool and stream structures).
    assert!(
        free1 + (8 << 20) >= free0,
        "device memory not returned: {} MiB less free",
        (free0 - free1) >> 20
    );
    assert_eq!(h1.in_use_bytes, h0.in_use_bytes);
    assert_eq!(
        h1.cached_bytes, 0,
        "pinned memory still cached after release"
    );
    assert_eq!(
        d1.cached_bytes, 0,
        "device memory still cached after release"
    );
}

//! `llaisys-nvidia doctor` on a real GPU: the report's device facts are what CUDA says, the smoke
//! test through the llaisys table passes, and the bench's figures agree with a raw cudaMemcpy.

use crate::require_gpu;
use llaisys_nvidia::doctor::diagnose::Status;
use llaisys_nvidia::doctor::report::{CopyKind, SmokeStatus};
use llaisys_nvidia::doctor::{self, bench, Options};
use llaisys_nvidia::sys as raw;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;
use std::time::Instant;

/// The doctor swaps the process-wide error handler and the bench wants the copy engines to
/// itself: its tests run one at a time even when the binary runs tests in parallel.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn run_doctor() -> doctor::report::Report {
    doctor::run(&Options::default(), &mut |_| {})
}

#[test]
fn device_facts_equal_cuda_get_device_properties() {
    let n = require_gpu!();
    let _one = lock();
    let report = run_doctor();
    assert_eq!(report.device_count.count(), n);
    assert_eq!(report.devices.len(), n as usize);
    for d in &report.devices {
        let id = d.id;
        let p = d
            .properties
            .as_ref()
            .unwrap_or_else(|e| panic!("device {id}: {e}"));
        let mut want: raw::cudaDeviceProp = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { raw::cudaGetDeviceProperties(&mut want, id) }.0,
            0,
            "cudaGetDeviceProperties({id})"
        );
        let name = unsafe { CStr::from_ptr(want.name.as_ptr()) }.to_string_lossy();
        assert_eq!(p.name, name, "device {id} name");
        assert_eq!(
            p.compute_capability,
            (want.major, want.minor),
            "device {id}"
        );
        assert_eq!(p.total_memory, want.totalGlobalMem, "device {id}");
        assert_eq!(p.multiprocessors, want.multiProcessorCount, "device {id}");
        assert_eq!(p.async_engines, want.asyncEngineCount, "device {id}");
        assert_eq!(
            p.unified_addressing,
            want.unifiedAddressing != 0,
            "device {id}"
        );
        let mut bus = [0 as std::os::raw::c_char; 32];
        assert_eq!(
            unsafe { raw::cudaDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, id) }.0,
            0
        );
        let bus = unsafe { CStr::from_ptr(bus.as_ptr()) }.to_string_lossy();
        assert_eq!(p.pci_bus_id, bus, "device {id}");
        let mut pools: c_int = 0;
        let attr = raw::cudaDeviceAttr::cudaDevAttrMemoryPoolsSupported;
        assert_eq!(
            unsafe { raw::cudaDeviceGetAttribute(&mut pools, attr, id) }.0,
            0
        );
        assert_eq!(p.memory_pools, pools != 0, "device {id}");
        let (free, total) = d
            .memory
            .as_ref()
            .copied()
            .unwrap_or_else(|e| panic!("device {id} memory: {e}"));
        assert_eq!(
            total, want.totalGlobalMem,
            "device {id}: cudaMemGetInfo total"
        );
        assert!(
            free > 0 && free <= total,
            "device {id}: free {free} of {total}"
        );
    }
    for p in &report.peer_access {
        let mut v: c_int = -1;
        assert_eq!(
            unsafe { raw::cudaDeviceCanAccessPeer(&mut v, p.from, p.to) }.0,
            0
        );
        assert_eq!(
            p.result.as_ref().ok(),
            Some(&(v != 0)),
            "{} -> {}",
            p.from,
            p.to
        );
    }
    assert_eq!(report.peer_access.len(), (n * (n - 1)) as usize);
    assert_eq!(
        report.diagnosis.status,
        Status::Healthy,
        "{:#?}",
        report.diagnosis
    );
}

#[test]
fn smoke_test_through_the_table_passes() {
    require_gpu!();
    let _one = lock();
    let handler = || {
        let mut h: llaisys_nvidia::ffi::ErrorHandler = None;
        let mut u: *mut std::os::raw::c_void = std::ptr::null_mut();
        // SAFETY: writes the handler and its user data to locals.
        unsafe { llaisys_nvidia::ffi::llaisysNvidiaGetErrorHandler(&mut h, &mut u) };
        (h, u as usize)
    };
    let before = handler();
    let report = run_doctor();
    let after = handler();
    assert_eq!(
        before.0.map(|f| f as usize),
        after.0.map(|f| f as usize),
        "the smoke test left its error handler installed"
    );
    assert_eq!(before.1, after.1);
    let s = &report.smoke;
    assert_eq!(s.status, SmokeStatus::Passed, "{s:#?}");
    assert!(s.steps.iter().all(|st| st.error.is_none()), "{s:#?}");
    for name in [
        "set_device",
        "create_stream",
        "malloc_device a",
        "malloc_host",
        "memcpy_sync H2D (pageable -> a)",
        "memcpy_sync D2D (a -> b)",
        "verify the sync round trip byte for byte",
        "verify the async copy byte for byte",
        "stream_synchronize",
        "device_synchronize",
        "free_device",
        "destroy_stream",
    ] {
        assert!(
            s.steps.iter().any(|st| st.name == name),
            "step {name} missing: {s:#?}"
        );
    }
    match &s.context_ms {
        Some(Ok(ms)) => assert!(*ms >= 0.0),
        other => panic!("context creation: {other:?}"),
    }
    assert_eq!(report.diagnosis.status.exit_code(), doctor::exit::HEALTHY);
}

/// The median GB/s of `reps` synchronous cudaMemcpy H2D of `size` bytes from pinned memory,
/// straight on the raw API, twice: timed by CUDA events recorded on the legacy stream around
/// each call (as NVIDIA's bandwidthTest does), and timed on the host clock around the same calls.
fn raw_pinned_h2d_gbps(size: usize, reps: usize) -> (f64, f64) {
    let mut host: *mut c_void = std::ptr::null_mut();
    let mut dev: *mut c_void = std::ptr::null_mut();
    let mut start: raw::cudaEvent_t = std::ptr::null_mut();
    let mut stop: raw::cudaEvent_t = std::ptr::null_mut();
    unsafe {
        assert_eq!(raw::cudaSetDevice(0).0, 0);
        assert_eq!(raw::cudaMallocHost(&mut host, size).0, 0);
        assert_eq!(raw::cudaMalloc(&mut dev, size).0, 0);
        assert_eq!(raw::cudaEventCreate(&mut start).0, 0);
        assert_eq!(raw::cudaEventCreate(&mut stop).0, 0);
        std::ptr::write_bytes(host.cast::<u8>(), 0x3c, size);
    }
    let h2d = raw::cudaMemcpyKind::cudaMemcpyHostToDevice;
    let (mut by_events, mut by_clock) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        let t = Instant::now();
        let mut ms = 0f32;
        unsafe {
            assert_eq!(raw::cudaEventRecord(start, std::ptr::null_mut()).0, 0);
            assert_eq!(raw::cudaMemcpy(dev, host, size, h2d).0, 0);
            assert_eq!(raw::cudaEventRecord(stop, std::ptr::null_mut()).0, 0);
            assert_eq!(raw::cudaEventSynchronize(stop).0, 0);
            assert_eq!(raw::cudaEventElapsedTime(&mut ms, start, stop).0, 0);
        }
        if rep > 0 {
            by_clock.push(t.elapsed().as_secs_f64());
            by_events.push(f64::from(ms) * 1e-3);
        }
    }
    unsafe {
        assert_eq!(raw::cudaEventDestroy(start).0, 0);
        assert_eq!(raw::cudaEventDestroy(stop).0, 0);
        assert_eq!(raw::cudaFree(dev).0, 0);
        assert_eq!(raw::cudaFreeHost(host).0, 0);
    }
    let gbps = |times: &mut Vec<f64>| size as f64 / bench::median(times) / 1e9;
    (gbps(&mut by_events), gbps(&mut by_clock))
}

#[test]
fn bench_pinned_h2d_at_256_mib_is_within_10_percent_of_raw_cudamemcpy() {
    require_gpu!();
    let _one = lock();
    let size = 256 << 20;
    let mut lines = 0;
    let b = bench::run(0, &mut |_| lines += 1);
    assert_eq!(b.error, None, "{b:#?}");
    assert_eq!(
        b.sizes,
        bench::SIZES.to_vec(),
        "the device had room for every size"
    );
    assert_eq!(b.copies.len(), bench::SIZES.len() * CopyKind::ALL.len());
    assert!(
        b.copies.iter().all(|c| c.gbps.is_finite() && c.gbps > 0.0),
        "{b:#?}"
    );
    assert_eq!(b.allocations.len(), bench::ALLOC_SIZES.len() * 4);
    assert!(lines >= b.copies.len(), "progress lines: {lines}");
    let ours = b
        .copy(CopyKind::H2dPinned, size)
        .map(|c| c.gbps)
        .unwrap_or_else(|| panic!("no H2D pinned figure at 256 MiB: {b:#?}"));
    let (raw, raw_clock) = raw_pinned_h2d_gbps(size, 11);
    let diff = (ours - raw).abs() / raw;
    eprintln!("raw cudaMemcpy on the host clock: {raw_clock:.2} GB/s");
    eprintln!(
        "H2D pinned 256 MiB: bench {ours:.2} GB/s, raw cudaMemcpy {raw:.2} GB/s ({:.1}%)",
        diff * 100.0
    );
    assert!(
        diff <= 0.10,
        "bench {ours:.2} GB/s vs raw cudaMemcpy {raw:.2} GB/s: {:.1}% apart",
        diff * 100.0
    );
}

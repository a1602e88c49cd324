//! Host-only test of the out-of-memory report, dynamic build only: the child runs over
//! tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13, whose device has
//! 80 GiB of which `FAKE_FREE_BYTES` are free, refuses every cudaMalloc above `FAKE_MALLOC_MAX`
//! (its largest free block) and fails the next allocations on demand (`fake_fail_next_mallocs`).
//! An allocation that fails again after the caches were released reports, in its message and
//! through `llaisysNvidiaLastOutOfMemory`, the size asked for, the device's memory and free
//! memory, what the library holds there, the largest allocation that succeeds (probed), and why
//! other processes' use is unknown (NVML named by a variable that points nowhere). The report
//! belongs to the thread's last error: a success keeps it, another failure replaces it, clearing
//! forgets it; the table's handler gets the same words.
#![cfg(feature = "dynamic")]

use llaisys_nvidia::ffi::{self, OutOfMemory, TABLE};
use std::ptr::null_mut;
use std::sync::Mutex;

mod support;

use support::{fake_function as fake, last_error_message};

/// The device's free memory (`FAKE_FREE_BYTES`).
const FREE: u64 = 64 << 20;
/// Its largest free block (`FAKE_MALLOC_MAX`): the probe, in 2 MiB steps, finds 40 MiB.
const LARGEST: u64 = 40 << 20;
/// Where `LLAISYS_NVIDIA_NVML_LIBRARY` points: nothing.
const NO_NVML: &str = "/nonexistent/libnvidia-ml.so.1";
const STATUS_CUDA: libc::c_int = 1;
const STATUS_INVALID_ARGUMENT: libc::c_int = 3;
const CUDA_ERROR_MEMORY_ALLOCATION: libc::c_int = 2;

#[track_caller]
fn ok(status: libc::c_int) {
    assert_eq!(status, 0, "{}", last_error_message());
}

/// The last message the table's error handler got.
static HANDLED: Mutex<String> = Mutex::new(String::new());

unsafe extern "C-unwind" fn keep_message(e: *const ffi::LlaisysNvidiaError, _: *mut libc::c_void) {
    // SAFETY: the library passes a valid error whose message is a NUL-terminated string, for the
    // duration of the call.
    let text = unsafe { std::ffi::CStr::from_ptr((*e).message) };
    *HANDLED.lock().unwrap_or_else(|p| p.into_inner()) = text.to_string_lossy().into_owned();
}

/// The words every report of a 32 MiB request on this device has.
fn assert_words(msg: &str) {
    for want in [
        "cudaMalloc failed",
        "out of memory: 32.0 MiB (33554432 bytes) asked for on device 0",
        "which has 80.0 GiB (85899345920 bytes) with 64.0 MiB (67108864 bytes) free",
        "this library holds 1.0 MiB (1048576 bytes) in use",
        "the largest allocation that succeeds now is 40.0 MiB (41943040 bytes)",
        "what other processes use is unknown: ",
        NO_NVML,
        "free_device",
        "destroy graphs you no longer replay",
    ] {
        assert!(msg.contains(want), "{want:?} is not in: {msg}");
    }
}

#[test]
#[ignore = "entry point of a child process: run by an_allocation_out_of_memory_reports_the_devices_figures"]
fn child_report() {
    support::child::require_child("child_report");
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let fail_mallocs = unsafe { fake::<extern "C" fn(libc::c_long)>(c"fake_fail_next_mallocs") };
    let mut held = null_mut();
    // SAFETY: `held` is writable.
    ok(unsafe { ffi::llaisysNvidiaMallocDevice(&mut held, 1 << 20) });
    // 32 MiB is a large block (cudaMalloc): it fails, the caches are released, it fails again.
    fail_mallocs(2);
    let mut p = null_mut();
    // SAFETY: `p` is writable.
    let st = unsafe { ffi::llaisysNvidiaMallocDevice(&mut p, 32 << 20) };
    assert_eq!(st, STATUS_CUDA, "{}", last_error_message());
    assert!(p.is_null());
    assert_eq!(
        ffi::llaisysNvidiaLastCudaError(),
        CUDA_ERROR_MEMORY_ALLOCATION
    );
    assert_words(&last_error_message());
    let mut r = OutOfMemory {
        device: 7,
        ..OutOfMemory::default()
    };
    // SAFETY: `r` is writable.
    assert_eq!(unsafe { ffi::llaisysNvidiaLastOutOfMemory(&mut r) }, 1);
    let want = OutOfMemory {
        device: 0,
        other_processes: -1,
        requested_bytes: 32 << 20,
        total_bytes: 80 << 30,
        free_bytes: FREE,
        in_use_bytes: 1 << 20,
        cached_bytes: r.cached_bytes,
        graph_pool_bytes: 0,
        largest_allocation_bytes: LARGEST,
        other_processes_bytes: 0,
        limit_bytes: 0,
    };
    assert_eq!(r, want);
    // A success keeps the last error and its report; NULL gets nothing.
    ok(ffi::llaisysNvidiaFreeDevice(held));
    let mut again = OutOfMemory::default();
    // SAFETY: `again` is writable; NULL is allowed.
    unsafe {
        assert_eq!(ffi::llaisysNvidiaLastOutOfMemory(&mut again), 1);
        assert_eq!(ffi::llaisysNvidiaLastOutOfMemory(null_mut()), 0);
    }
    assert_eq!(again, r);
    // Another failure replaces it: no report, zeros with device -1.
    let foreign = 0x1000 as *mut libc::c_void;
    assert_eq!(
        ffi::llaisysNvidiaFreeDevice(foreign),
        STATUS_INVALID_ARGUMENT
    );
    // SAFETY: `again` is writable.
    assert_eq!(unsafe { ffi::llaisysNvidiaLastOutOfMemory(&mut again) }, 0);
    let none = OutOfMemory {
        device: -1,
        ..OutOfMemory::default()
    };
    assert_eq!(again, none);
    // The table: its handler gets the same words, and the report is the thread's last error's.
    ffi::llaisysNvidiaSetErrorHandler(Some(keep_message), null_mut());
    // SAFETY: `held` is writable.
    ok(unsafe { ffi::llaisysNvidiaMallocDevice(&mut held, 1 << 20) });
    fail_mallocs(2);
    // SAFETY: the table's function with a size.
    let q = unsafe { (TABLE.malloc_device)(32 << 20) };
    assert!(q.is_null());
    assert_words(&HANDLED.lock().unwrap_or_else(|p| p.into_inner()));
    // SAFETY: `again` is writable.
    assert_eq!(unsafe { ffi::llaisysNvidiaLastOutOfMemory(&mut again) }, 1);
    assert_eq!(again.requested_bytes, 32 << 20);
    ffi::llaisysNvidiaClearLastError();
    // SAFETY: `again` is writable.
    assert_eq!(unsafe { ffi::llaisysNvidiaLastOutOfMemory(&mut again) }, 0);
    ok(ffi::llaisysNvidiaFreeDevice(held));
    println!("oom report child: ok");
}

#[test]
fn an_allocation_out_of_memory_reports_the_devices_figures() {
    let free = FREE.to_string();
    let max = (LARGEST + 4096).to_string();
    let out = support::child::TestChild::new("child_report")
        .loader_path(support::fake_cudart())
        .envs([
            ("FAKE_FREE_BYTES", free.as_str()),
            ("FAKE_MALLOC_MAX", max.as_str()),
            ("LLAISYS_NVIDIA_NVML_LIBRARY", NO_NVML),
        ])
        .limit(std::time::Duration::from_secs(120))
        .run();
    assert!(
        out.ran_one_test() && out.text().contains("oom report child: ok"),
        "{}",
        out.report()
    );
}

/// `device`'s memory limit in bytes (`llaisysNvidiaGetMemoryLimit`).
fn limit(device: libc::c_int) -> u64 {
    let mut b = u64::MAX;
    // SAFETY: `b` is writable.
    ok(unsafe { ffi::llaisysNvidiaGetMemoryLimit(device, &mut b) });
    b
}

#[test]
#[ignore = "entry point of a child process: run by a_memory_limit_caps_what_the_library_holds"]
fn child_limit() {
    support::child::require_child("child_limit");
    // `LLAISYS_NVIDIA_MEMORY_LIMIT=25%` (the parent's doing): a quarter of the 80 GiB device.
    assert_eq!(limit(0), 20 << 30);
    // A limit set for the device replaces it; 4 + 4 MiB fit in 8 MiB, 1 MiB more does not.
    ok(ffi::llaisysNvidiaSetMemoryLimit(0, 8 << 20));
    assert_eq!(limit(0), 8 << 20);
    let (mut a, mut b, mut c) = (null_mut(), null_mut(), null_mut());
    // SAFETY: the out pointers are writable.
    unsafe {
        ok(ffi::llaisysNvidiaMallocDevice(&mut a, 4 << 20));
        ok(ffi::llaisysNvidiaMallocDevice(&mut b, 4 << 20));
        assert_eq!(ffi::llaisysNvidiaMallocDevice(&mut c, 1 << 20), STATUS_CUDA);
    }
    assert!(c.is_null());
    assert_eq!(
        ffi::llaisysNvidiaLastCudaError(),
        CUDA_ERROR_MEMORY_ALLOCATION
    );
    let msg = last_error_message();
    for want in [
        "refused before CUDA by device 0's memory limit of 8388608 bytes",
        "it may hold at most 8.0 MiB (8388608 bytes) there (its memory limit",
        "llaisysNvidiaSetMemoryLimit",
    ] {
        assert!(msg.contains(want), "{want:?} is not in: {msg}");
    }
    let mut r = OutOfMemory::default();
    // SAFETY: `r` is writable.
    assert_eq!(unsafe { ffi::llaisysNvidiaLastOutOfMemory(&mut r) }, 1);
    assert_eq!((r.limit_bytes, r.in_use_bytes), (8 << 20, 8 << 20), "{r:?}");
    // Once a block is freed, the allocation fits again.
    ok(ffi::llaisysNvidiaFreeDevice(b));
    // SAFETY: `c` is writable.
    ok(unsafe { ffi::llaisysNvidiaMallocDevice(&mut c, 1 << 20) });
    // As a fraction; bad fractions and devices are refused and change nothing.
    ok(ffi::llaisysNvidiaSetMemoryFraction(0, 0.5));
    assert_eq!(limit(0), 40 << 30);
    for bad in [1.5, -0.25, f64::NAN, f64::INFINITY] {
        assert_eq!(
            ffi::llaisysNvidiaSetMemoryFraction(0, bad),
            STATUS_INVALID_ARGUMENT,
            "{bad}"
        );
        assert!(
            last_error_message().contains("fraction="),
            "{}",
            last_error_message()
        );
    }
    assert_eq!(limit(0), 40 << 30);
    assert_eq!(
        ffi::llaisysNvidiaSetMemoryLimit(1, 1 << 30),
        STATUS_INVALID_ARGUMENT
    );
    assert!(last_error_message().contains("device=1: not a device (device count 1)"));
    let mut none = 7;
    // SAFETY: `none` is writable.
    assert_eq!(
        unsafe { ffi::llaisysNvidiaGetMemoryLimit(-1, &mut none) },
        STATUS_INVALID_ARGUMENT
    );
    assert_eq!(none, 0);
    // 0 lifts the limit, the variable's too.
    ok(ffi::llaisysNvidiaSetMemoryLimit(0, 0));
    assert_eq!(limit(0), 0);
    ok(ffi::llaisysNvidiaFreeDevice(a));
    ok(ffi::llaisysNvidiaFreeDevice(c));
    println!("oom limit child: ok");
}

#[test]
fn a_memory_limit_caps_what_the_library_holds() {
    let out = support::child::TestChild::new("child_limit")
        .loader_path(support::fake_cudart())
        .envs([
            ("LLAISYS_NVIDIA_MEMORY_LIMIT", "25%"),
            ("LLAISYS_NVIDIA_NVML_LIBRARY", NO_NVML),
        ])
        .limit(std::time::Duration::from_secs(120))
        .run();
    assert!(
        out.ran_one_test() && out.text().contains("oom limit child: ok"),
        "{}",
        out.report()
    );
}

/// Device 0's cached bytes (`llaisysNvidiaDeviceMemoryStats`).
fn cached() -> u64 {
    let mut s = ffi::AllocatorStats::default();
    // SAFETY: `s` is writable.
    ok(unsafe { ffi::llaisysNvidiaDeviceMemoryStats(0, &mut s) });
    s.cached_bytes
}

/// A 32 MiB block (from cudaMalloc, kept by the cache once freed) allocated and freed.
fn churn() {
    let mut p = null_mut();
    // SAFETY: `p` is writable.
    ok(unsafe { ffi::llaisysNvidiaMallocDevice(&mut p, 32 << 20) });
    ok(ffi::llaisysNvidiaFreeDevice(p));
}

#[test]
#[ignore = "entry point of a child process: run by a_release_threshold_gives_freed_memory_back"]
fn child_threshold() {
    support::child::require_child("child_threshold");
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let frees = unsafe { fake::<extern "C" fn(libc::c_int) -> libc::c_long>(c"fake_device_frees") };
    let from_env = std::env::var("LLAISYS_NVIDIA_RELEASE_THRESHOLD").is_ok();
    if from_env {
        // The variable's threshold, 0: nothing stays cached after a free.
        churn();
        assert_eq!(cached(), 0);
        println!("oom threshold child: ok");
        return;
    }
    // By default the freed block stays cached.
    churn();
    assert_eq!(cached(), 32 << 20);
    // Setting a threshold below it gives it back at once (cudaFree), and after each free.
    let before = frees(0);
    ok(ffi::llaisysNvidiaSetReleaseThreshold(0, 0));
    assert_eq!(cached(), 0);
    assert!(frees(0) > before, "cudaFree of the kept block");
    churn();
    assert_eq!(cached(), 0);
    // A threshold above what is cached keeps it; UINT64_MAX keeps all again.
    ok(ffi::llaisysNvidiaSetReleaseThreshold(0, 64 << 20));
    churn();
    assert_eq!(cached(), 32 << 20);
    ok(ffi::llaisysNvidiaSetReleaseThreshold(0, u64::MAX));
    let kept = cached();
    churn();
    assert!(cached() >= kept, "nothing given back");
    assert_eq!(
        ffi::llaisysNvidiaSetReleaseThreshold(3, 0),
        STATUS_INVALID_ARGUMENT
    );
    println!("oom threshold child: ok");
}

#[test]
fn a_release_threshold_gives_freed_memory_back() {
    for env in [None, Some(("LLAISYS_NVIDIA_RELEASE_THRESHOLD", "0"))] {
        let out = support::child::TestChild::new("child_threshold")
            .loader_path(support::fake_cudart())
            .envs(env)
            .limit(std::time::Duration::from_secs(120))
            .run();
        assert!(
            out.ran_one_test() && out.text().contains("oom threshold child: ok"),
            "{env:?}\n{}",
            out.report()
        );
    }
}

//! Host-only tests of the README's bad-input table: one test per row that does not need a GPU
//! (those named "without a driver" run in a child process without one, `support::no_driver`).
//! Each bad call must reach the error handler once with the documented status, return its
//! failure value, and change nothing. The GPU suite (tests/gpu/hostile.rs) covers the rows that
//! need real device memory.

mod support;

use llaisys_nvidia::ffi::LlaisysNvidiaError;
use llaisys_nvidia::ffi::TABLE;
use std::cell::RefCell;
use std::ffi::CStr;
use std::os::raw::c_void;
use std::sync::Mutex;

const INVALID_ARGUMENT: i32 = 3;
const CUDA: i32 = 1;

thread_local! {
    static SEEN: RefCell<Vec<(i32, i32, String)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C-unwind" fn record(e: *const LlaisysNvidiaError, _: *mut c_void) {
    let e = unsafe { &*e };
    let msg = unsafe { CStr::from_ptr(e.message) }
        .to_string_lossy()
        .into_owned();
    SEEN.with(|v| v.borrow_mut().push((e.status, e.cuda_error, msg)));
}

/// Runs `f` with the recording handler; returns what it reported.
fn reported(f: impl FnOnce()) -> Vec<(i32, i32, String)> {
    static HANDLER: Mutex<()> = Mutex::new(());
    let _g = HANDLER.lock().unwrap_or_else(|e| e.into_inner());
    llaisys_nvidia::ffi::llaisysNvidiaSetErrorHandler(Some(record), std::ptr::null_mut());
    SEEN.with(|v| v.borrow_mut().clear());
    f();
    SEEN.with(|v| std::mem::take(&mut *v.borrow_mut()))
}

fn one(errs: &[(i32, i32, String)], status: i32, needle: &str) {
    assert_eq!(errs.len(), 1, "expected one report, got {errs:?}");
    assert_eq!(errs[0].0, status, "{errs:?}");
    assert!(
        errs[0].2.contains(needle),
        "{needle:?} not in {:?}",
        errs[0].2
    );
}

#[test]
fn null_pointers() {
    let mut buf = [0u8; 16];
    for (dst, src) in [
        (std::ptr::null_mut(), buf.as_ptr().cast()),
        (buf.as_mut_ptr().cast(), std::ptr::null()),
    ] {
        let errs = reported(|| unsafe { (TABLE.memcpy_sync)(dst, src, 16, 0) });
        one(&errs, INVALID_ARGUMENT, "NULL pointer");
        let errs =
            reported(|| unsafe { (TABLE.memcpy_async)(dst, src, 16, 0, std::ptr::null_mut()) });
        one(&errs, INVALID_ARGUMENT, "NULL pointer");
    }
    // Frees of NULL do nothing.
    let errs = reported(|| unsafe {
        (TABLE.free_device)(std::ptr::null_mut());
        (TABLE.free_host)(std::ptr::null_mut());
        (TABLE.destroy_stream)(std::ptr::null_mut());
    });
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn size_zero() {
    let errs = reported(|| unsafe {
        assert!((TABLE.malloc_device)(0).is_null());
        assert!((TABLE.malloc_host)(0).is_null());
        (TABLE.memcpy_sync)(std::ptr::null_mut(), std::ptr::null(), 0, 3);
        (TABLE.memcpy_async)(
            std::ptr::null_mut(),
            std::ptr::null(),
            0,
            1,
            std::ptr::null_mut(),
        );
    });
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn size_max() {
    for size in [usize::MAX, isize::MAX as usize + 1] {
        let errs = reported(|| unsafe { assert!((TABLE.malloc_device)(size).is_null()) });
        one(&errs, INVALID_ARGUMENT, "larger than any buffer");
        let errs = reported(|| unsafe { assert!((TABLE.malloc_host)(size).is_null()) });
        one(&errs, INVALID_ARGUMENT, "larger than any buffer");
        let mut a = [0u8; 8];
        let b = [1u8; 8];
        let errs = reported(|| unsafe {
            (TABLE.memcpy_sync)(a.as_mut_ptr().cast(), b.as_ptr().cast(), size, 0)
        });
        one(&errs, INVALID_ARGUMENT, "larger than any buffer");
        assert_eq!(a, [0u8; 8]);
    }
}

#[test]
fn memcpy_kind_outside_0_to_3() {
    let mut a = [0u8; 8];
    let b = [1u8; 8];
    for kind in [4, 7, -1, i32::MAX] {
        let errs = reported(|| unsafe {
            (TABLE.memcpy_sync)(a.as_mut_ptr().cast(), b.as_ptr().cast(), 8, kind)
        });
        one(&errs, INVALID_ARGUMENT, &format!("kind={kind}"));
        let errs = reported(|| unsafe {
            (TABLE.memcpy_async)(
                a.as_mut_ptr().cast(),
                b.as_ptr().cast(),
                8,
                kind,
                std::ptr::null_mut(),
            )
        });
        one(&errs, INVALID_ARGUMENT, &format!("kind={kind}"));
    }
    assert_eq!(a, [0u8; 8], "a refused copy wrote data");
}

#[test]
fn device_ids_without_a_driver() {
    support::no_driver::test("device_ids_without_a_driver", || {
        let count = unsafe { (TABLE.get_device_count)() };
        for id in [-1, count, 1000] {
            let errs = reported(|| unsafe { (TABLE.set_device)(id) });
            one(&errs, CUDA, &format!("device={id}"));
            assert!(errs[0].2.contains("device count"), "{errs:?}");
        }
    });
}

#[test]
fn pointers_never_handed_out_and_double_frees() {
    let mut local = [0u8; 256];
    let p: *mut c_void = local.as_mut_ptr().cast();
    let errs = reported(|| unsafe { (TABLE.free_device)(p) });
    one(&errs, INVALID_ARGUMENT, "not returned by malloc_device");
    let errs = reported(|| unsafe { (TABLE.free_host)(p) });
    one(&errs, INVALID_ARGUMENT, "not returned by malloc_host");
    // Twice: the second is refused the same way (nothing was freed the first time either).
    let errs = reported(|| unsafe {
        (TABLE.free_host)(p);
        (TABLE.free_host)(p);
    });
    assert_eq!(errs.len(), 2);
    assert!(errs.iter().all(|e| e.0 == INVALID_ARGUMENT));
}

#[test]
fn streams_destroyed_null_and_foreign() {
    let foreign = 0x5000usize as *mut c_void;
    let errs = reported(|| unsafe { (TABLE.destroy_stream)(foreign) });
    one(&errs, INVALID_ARGUMENT, "was not made by create_stream");
    let errs = reported(|| unsafe { (TABLE.stream_synchronize)(foreign) });
    one(&errs, INVALID_ARGUMENT, "was not made by create_stream");
    let mut a = [0u8; 8];
    let b = [1u8; 8];
    let errs = reported(|| unsafe {
        (TABLE.memcpy_async)(a.as_mut_ptr().cast(), b.as_ptr().cast(), 8, 0, foreign)
    });
    one(&errs, INVALID_ARGUMENT, "was not made by create_stream");
    assert_eq!(a, [0u8; 8]);
    // NULL is the legacy default stream: an H2H copy on it works without a driver.
    let errs = reported(|| unsafe {
        (TABLE.memcpy_async)(
            a.as_mut_ptr().cast(),
            b.as_ptr().cast(),
            8,
            0,
            std::ptr::null_mut(),
        )
    });
    assert!(errs.is_empty() && a == b, "{errs:?}");
}

#[test]
fn copies_without_a_driver_fail_alike_at_every_size() {
    support::no_driver::test("copies_without_a_driver_fail_alike_at_every_size", || {
        // One rule without a driver, whatever the size or the kind: the CUDA status with
        // cudaErrorInsufficientDriver from the copy's own CUDA call, nothing written.
        // (With a GPU the kind is checked against the pointers from 256 KiB up: tests/gpu/hostile.rs.)
        let sizes = [1usize, 4 << 10, 64 << 10, 1 << 20, 64 << 20];
        let mut a = vec![0u8; 64 << 20];
        let b = vec![1u8; 64 << 20];
        for n in sizes {
            for kind in [1, 2, 3] {
                let errs = reported(|| unsafe {
                    (TABLE.memcpy_sync)(a.as_mut_ptr().cast(), b.as_ptr().cast(), n, kind)
                });
                one(&errs, CUDA, "cudaMemcpy failed");
                assert_eq!(errs[0].1, 35, "size {n} kind {kind}: {errs:?}");
                let errs = reported(|| unsafe {
                    (TABLE.memcpy_async)(
                        a.as_mut_ptr().cast(),
                        b.as_ptr().cast(),
                        n,
                        kind,
                        std::ptr::null_mut(),
                    )
                });
                one(&errs, CUDA, "cudaMemcpyAsync failed");
                assert_eq!(errs[0].1, 35, "size {n} kind {kind}: {errs:?}");
            }
            assert!(a.iter().all(|&x| x == 0), "a failed copy wrote data");
            // H2H on host memory works at every size, sync and async.
            let errs = reported(|| unsafe {
                (TABLE.memcpy_sync)(a.as_mut_ptr().cast(), b.as_ptr().cast(), n, 0)
            });
            assert!(errs.is_empty() && a[..n] == b[..n], "size {n}: {errs:?}");
            a.fill(0);
            let errs = reported(|| unsafe {
                (TABLE.memcpy_async)(
                    a.as_mut_ptr().cast(),
                    b.as_ptr().cast(),
                    n,
                    0,
                    std::ptr::null_mut(),
                )
            });
            assert!(errs.is_empty() && a[..n] == b[..n], "size {n}: {errs:?}");
            a.fill(0);
        }
    });
}

#[test]
fn malloc_host_names_the_size_asked_for_and_refuses_sizes_without_a_class() {
    support::no_driver::test(
        "malloc_host_names_the_size_asked_for_and_refuses_sizes_without_a_class",
        || {
            // The message names the request (not only its size class), and a size whose class would
            // exceed PTRDIFF_MAX is refused before any cache is touched.
            let before = llaisys_nvidia::ops::memory::host_memory_stats();
            let errs = reported(|| unsafe {
                (TABLE.malloc_host)(1);
            });
            one(&errs, CUDA, "size=1 (pinned size class 4096)");
            let errs = reported(|| unsafe {
                (TABLE.malloc_host)(isize::MAX as usize);
            });
            one(
                &errs,
                INVALID_ARGUMENT,
                &format!("size={}: its pinned size class", isize::MAX),
            );
            let after = llaisys_nvidia::ops::memory::host_memory_stats();
            assert_eq!(
                after.oom_retries, before.oom_retries,
                "a refused size took the retry path"
            );
        },
    );
}

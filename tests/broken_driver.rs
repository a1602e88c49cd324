//! Host-only test: with a broken driver (cuInit failing with 999 or 2, the fake libcuda.so.1 of
//! tests/fixtures/fake_libcuda.c first on LD_LIBRARY_PATH), get_device_count answers 0 and H2H
//! copies still work, through the table and the status API, as they do without a driver: one
//! rule for every driver failure, not only 35 and 100.

use llaisys_nvidia::ffi::{self, LlaisysNvidiaError, TABLE};
use std::os::raw::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::child::TestChild;

mod support;

/// Builds the fake driver whose cuInit returns `code` into its own folder.
fn fake_driver(code: i32) -> PathBuf {
    support::c_shared_library(
        "tests/fixtures/fake_libcuda.c",
        &support::tmp_dir().join(format!("broken-driver-{code}")),
        "libcuda.so.1",
        &[format!("-DFAKE_INIT_RESULT={code}")],
    )
}

static REPORTS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C-unwind" fn count(_: *const LlaisysNvidiaError, _: *mut c_void) {
    REPORTS.fetch_add(1, Ordering::Relaxed);
}

/// The child's half: runs only with the fake driver on the loader path.
#[test]
#[ignore = "entry point of a child process: run by h2h_copies_work_with_a_driver_whose_init_fails"]
fn child_h2h_with_a_broken_driver() {
    support::child::require_child("child_h2h_with_a_broken_driver");
    ffi::llaisysNvidiaSetErrorHandler(Some(count), std::ptr::null_mut());
    // SAFETY: the table's functions with valid host buffers of the sizes given.
    unsafe {
        assert_eq!((TABLE.get_device_count)(), 0);
        let code = ffi::llaisysNvidiaLastCudaError();
        assert!(
            code != 0 && code != 35 && code != 100,
            "a broken driver: {code}"
        );
        for n in [4usize, 64 << 10, 1 << 20, 16 << 20] {
            let src: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let mut dst = vec![0u8; n];
            (TABLE.memcpy_sync)(dst.as_mut_ptr().cast(), src.as_ptr().cast(), n, 0);
            assert!(dst == src, "memcpy_sync H2H {n} B");
            dst.fill(0);
            (TABLE.memcpy_async)(
                dst.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                n,
                0,
                std::ptr::null_mut(),
            );
            assert!(dst == src, "memcpy_async H2H {n} B");
            dst.fill(0);
            let st = ffi::llaisysNvidiaMemcpy(dst.as_mut_ptr().cast(), src.as_ptr().cast(), n, 0);
            assert_eq!(st, 0, "llaisysNvidiaMemcpy H2H {n} B");
            assert!(dst == src, "llaisysNvidiaMemcpy H2H {n} B");
        }
        // A copy that needs the device still fails with the driver's error.
        let mut a = [0u8; 16];
        let st = ffi::llaisysNvidiaMemcpy(a.as_mut_ptr().cast(), a.as_ptr().cast(), 16, 1);
        assert_eq!(st, 1, "H2D needs a device");
    }
    assert_eq!(
        REPORTS.load(Ordering::Relaxed),
        0,
        "an H2H copy was reported"
    );
    println!("broken-driver child: ok");
}

#[test]
fn h2h_copies_work_with_a_driver_whose_init_fails() {
    for code in [999, 2] {
        let dir = fake_driver(code);
        let text = TestChild::new("child_h2h_with_a_broken_driver")
            .loader_path(&dir)
            .run_passing();
        assert!(
            text.contains("broken-driver child: ok"),
            "cuInit -> {code}:\n{text}"
        );
    }
}

//! Host-only test (issue 16, point 2): every function of the status API that returns a pointer
//! through an out-parameter leaves NULL there on every failure it can have here (no driver,
//! bad size, bad flags, bad stream), and value out-parameters hold 0 after a failure.

use llaisys_nvidia::ffi::*;
use std::os::raw::{c_int, c_void};

const SENTINEL: *mut c_void = 0x5eed as *mut c_void;
const TOO_BIG: usize = isize::MAX as usize + 1;

/// Calls `f` with an out-pointer holding a sentinel; the call must fail and leave NULL.
fn fails_with_null(what: &str, f: impl FnOnce(*mut *mut c_void) -> c_int) {
    let mut p = SENTINEL;
    let status = f(&mut p);
    assert_ne!(status, 0, "{what}: succeeded without a driver");
    assert!(p.is_null(), "{what}: status {status} left {p:p}");
    llaisysNvidiaClearLastError();
}

#[test]
fn pointer_out_parameters_are_null_on_every_failure() {
    let bad_stream = 0x7000 as *mut c_void;
    for (label, size) in [("no driver", 4096usize), ("size > PTRDIFF_MAX", TOO_BIG)] {
        fails_with_null(&format!("MallocDevice, {label}"), |p| unsafe {
            llaisysNvidiaMallocDevice(p, size)
        });
        fails_with_null(&format!("MallocHost, {label}"), |p| unsafe {
            llaisysNvidiaMallocHost(p, size)
        });
        fails_with_null(&format!("MallocManaged, {label}"), |p| unsafe {
            llaisysNvidiaMallocManaged(p, size)
        });
        fails_with_null(&format!("MallocAsync, {label}"), |p| unsafe {
            llaisysNvidiaMallocAsync(p, size, std::ptr::null_mut())
        });
        for which in 0..2 {
            fails_with_null(&format!("MallocMapped out {which}, {label}"), |p| unsafe {
                let mut other = SENTINEL;
                let (h, d) = if which == 0 {
                    (p, &mut other as *mut _)
                } else {
                    (&mut other as *mut _, p)
                };
                let status = llaisysNvidiaMallocMapped(h, d, size);
                assert!(
                    other.is_null(),
                    "MallocMapped left its other out-pointer set"
                );
                status
            });
        }
    }
    fails_with_null("MallocAsync, bad stream", |p| unsafe {
        llaisysNvidiaMallocAsync(p, 4096, bad_stream)
    });
    for (label, flags) in [("no driver", 0u32), ("bad flags", 0x80)] {
        fails_with_null(&format!("StreamCreate, {label}"), |p| unsafe {
            llaisysNvidiaStreamCreate(p, flags, 0)
        });
        fails_with_null(&format!("EventCreate, {label}"), |p| unsafe {
            llaisysNvidiaEventCreate(p, flags)
        });
    }
}

#[test]
fn value_out_parameters_are_zero_after_a_failure() {
    unsafe {
        let (mut free, mut total) = (7usize, 7usize);
        assert_ne!(llaisysNvidiaMemGetInfo(&mut free, &mut total), 0);
        assert_eq!((free, total), (0, 0));
        let mut ms = 7.0f32;
        let e = 0x9000 as *mut c_void;
        assert_ne!(llaisysNvidiaEventElapsedTime(&mut ms, e, e), 0);
        assert_eq!(ms, 0.0);
        let mut n = 7;
        assert_ne!(llaisysNvidiaDeviceCount(&mut n), 0);
        assert_eq!(n, 0);
        let mut d = 7;
        assert_ne!(llaisysNvidiaGetDevice(&mut d), 0);
        assert_eq!(d, -1, "GetDevice writes -1 when there is no device");
        let (mut least, mut greatest) = (7, 7);
        assert_ne!(
            llaisysNvidiaStreamPriorityRange(&mut least, &mut greatest),
            0
        );
        assert_eq!((least, greatest), (0, 0));
        let mut done = 7;
        assert_ne!(
            llaisysNvidiaStreamQuery(0x7000 as *mut c_void, &mut done),
            0
        );
        assert_eq!(done, 0);
    }
    llaisysNvidiaClearLastError();
}

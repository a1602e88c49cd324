//! Host-only tests of the status-returning API without a driver (each test runs in a child
//! process without one, `support::no_driver`): every function's no-driver status and message,
//! and its answers to NULL and bad arguments. The status API never calls the error handler; the
//! default handler would abort, so a handler call would end the test's process.

mod support;

use llaisys_nvidia::ffi::*;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr::{null, null_mut};
use support::last_error_message;

const OK: c_int = 0;
const CUDA: c_int = 1;
const INVALID: c_int = 3;

/// Asserts the no-driver answer: CUDA status, error 35, a message naming `function`.
fn no_driver(status: c_int, function: &str) {
    assert_eq!(status, CUDA, "{function}: {}", last_error_message());
    assert_eq!(llaisysNvidiaLastCudaError(), 35, "{function}");
    let m = last_error_message();
    assert!(
        m.contains(function) && m.contains("cudaErrorInsufficientDriver"),
        "{m}"
    );
    llaisysNvidiaClearLastError();
}

fn invalid(status: c_int, function: &str, needle: &str) {
    assert_eq!(status, INVALID, "{function}: {}", last_error_message());
    let m = last_error_message();
    assert!(
        m.contains(function) && m.contains(needle),
        "{needle:?} not in {m}"
    );
    llaisysNvidiaClearLastError();
}

#[test]
fn versions_and_status_names() {
    support::no_driver::test("versions_and_status_names", || {
        let v = unsafe { CStr::from_ptr(llaisysNvidiaVersion()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        let mut vs = Versions::default();
        assert_eq!(unsafe { llaisysNvidiaGetVersions(&mut vs) }, OK);
        assert_eq!(
            vs.built_cudart,
            llaisys_nvidia::runtime::build::cudart_version()
        );
        assert_eq!(
            vs.runtime, vs.built_cudart,
            "static build: runtime = headers"
        );
        assert_eq!(vs.driver, 0, "no driver: version 0");
        invalid(
            unsafe { llaisysNvidiaGetVersions(null_mut()) },
            "llaisysNvidiaGetVersions",
            "out=NULL",
        );
        for (s, name) in [
            (0, "LLAISYS_NVIDIA_SUCCESS"),
            (2, "LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA"),
            (99, "unknown status"),
        ] {
            assert_eq!(
                unsafe { CStr::from_ptr(llaisysNvidiaStatusName(s)) }
                    .to_str()
                    .unwrap(),
                name
            );
        }
    });
}

#[test]
fn device_functions_without_a_driver() {
    support::no_driver::test("device_functions_without_a_driver", || {
        let mut n: c_int = 7;
        no_driver(
            unsafe { llaisysNvidiaDeviceCount(&mut n) },
            "llaisysNvidiaDeviceCount",
        );
        assert_eq!(n, 0, "count is written even on failure");
        invalid(
            unsafe { llaisysNvidiaDeviceCount(null_mut()) },
            "llaisysNvidiaDeviceCount",
            "count=NULL",
        );
        let mut ms = 7.5;
        no_driver(
            unsafe { llaisysNvidiaInitDevice(0, &mut ms) },
            "llaisysNvidiaInitDevice",
        );
        assert_eq!(ms, 0.0, "the documented failure value of a number");
        let mut d: c_int = 0;
        no_driver(
            unsafe { llaisysNvidiaGetDevice(&mut d) },
            "llaisysNvidiaGetDevice",
        );
        no_driver(llaisysNvidiaSetDevice(0), "llaisysNvidiaSetDevice");
        no_driver(
            llaisysNvidiaDeviceSynchronize(),
            "llaisysNvidiaDeviceSynchronize",
        );
        let mut props = std::mem::MaybeUninit::<DeviceProperties>::zeroed();
        no_driver(
            unsafe { llaisysNvidiaGetDeviceProperties(0, props.as_mut_ptr()) },
            "llaisysNvidiaGetDeviceProperties",
        );
        invalid(
            unsafe { llaisysNvidiaGetDeviceProperties(0, null_mut()) },
            "llaisysNvidiaGetDeviceProperties",
            "props=NULL",
        );
        let (mut free, mut total) = (0usize, 0usize);
        no_driver(
            unsafe { llaisysNvidiaMemGetInfo(&mut free, &mut total) },
            "llaisysNvidiaMemGetInfo",
        );
        let mut can: c_int = 5;
        no_driver(
            unsafe { llaisysNvidiaDeviceCanAccessPeer(&mut can, 0, 1) },
            "llaisysNvidiaDeviceCanAccessPeer",
        );
        invalid(
            unsafe { llaisysNvidiaDeviceCanAccessPeer(null_mut(), 0, 1) },
            "llaisysNvidiaDeviceCanAccessPeer",
            "can=NULL",
        );
        no_driver(
            llaisysNvidiaDeviceEnablePeerAccess(1),
            "llaisysNvidiaDeviceEnablePeerAccess",
        );
    });
}

#[test]
fn stream_and_event_functions_without_a_driver() {
    support::no_driver::test("stream_and_event_functions_without_a_driver", || {
        let mut s: *mut c_void = std::ptr::dangling_mut();
        no_driver(
            unsafe { llaisysNvidiaStreamCreate(&mut s, 0, 0) },
            "llaisysNvidiaStreamCreate",
        );
        assert!(s.is_null(), "out-pointer NULL on failure");
        invalid(
            unsafe { llaisysNvidiaStreamCreate(&mut s, 8, 0) },
            "llaisysNvidiaStreamCreate",
            "flags=0x8",
        );
        invalid(
            unsafe { llaisysNvidiaStreamCreate(null_mut(), 0, 0) },
            "llaisysNvidiaStreamCreate",
            "stream=NULL",
        );
        let foreign = 0x7000 as *mut c_void;
        assert_eq!(llaisysNvidiaStreamDestroy(null_mut()), OK);
        invalid(
            llaisysNvidiaStreamDestroy(foreign),
            "llaisysNvidiaStreamDestroy",
            "create_stream",
        );
        let mut done: c_int = 9;
        invalid(
            unsafe { llaisysNvidiaStreamQuery(foreign, &mut done) },
            "llaisysNvidiaStreamQuery",
            "create_stream",
        );
        no_driver(
            unsafe { llaisysNvidiaStreamQuery(null_mut(), &mut done) },
            "llaisysNvidiaStreamQuery",
        );
        invalid(
            unsafe { llaisysNvidiaStreamQuery(null_mut(), null_mut()) },
            "llaisysNvidiaStreamQuery",
            "done=NULL",
        );
        invalid(
            llaisysNvidiaStreamSynchronize(foreign),
            "llaisysNvidiaStreamSynchronize",
            "create_stream",
        );
        no_driver(
            llaisysNvidiaStreamSynchronize(null_mut()),
            "llaisysNvidiaStreamSynchronize",
        );
        invalid(
            llaisysNvidiaStreamWaitEvent(null_mut(), foreign),
            "llaisysNvidiaStreamWaitEvent",
            "llaisysNvidiaEventCreate",
        );
        let (mut lo, mut hi) = (0, 0);
        no_driver(
            unsafe { llaisysNvidiaStreamPriorityRange(&mut lo, &mut hi) },
            "llaisysNvidiaStreamPriorityRange",
        );

        let mut e: *mut c_void = std::ptr::dangling_mut();
        no_driver(
            unsafe { llaisysNvidiaEventCreate(&mut e, 2) },
            "llaisysNvidiaEventCreate",
        );
        assert!(e.is_null());
        invalid(
            unsafe { llaisysNvidiaEventCreate(&mut e, 4) },
            "llaisysNvidiaEventCreate",
            "flags=0x4",
        );
        invalid(
            unsafe { llaisysNvidiaEventCreate(null_mut(), 0) },
            "llaisysNvidiaEventCreate",
            "event=NULL",
        );
        for status in [
            llaisysNvidiaEventRecord(foreign, null_mut()),
            unsafe { llaisysNvidiaEventQuery(foreign, &mut done) },
            llaisysNvidiaEventSynchronize(foreign),
            unsafe { llaisysNvidiaEventElapsedTime(&mut 0.0, foreign, foreign) },
            llaisysNvidiaEventDestroy(foreign),
        ] {
            assert_eq!(status, INVALID, "{}", last_error_message());
            assert!(
                last_error_message().contains("was not made by llaisysNvidiaEventCreate"),
                "{}",
                last_error_message()
            );
        }
        assert_eq!(llaisysNvidiaEventDestroy(null_mut()), OK);
    });
}

#[test]
fn memory_functions_without_a_driver() {
    support::no_driver::test("memory_functions_without_a_driver", || {
        let mut p: *mut c_void = std::ptr::dangling_mut();
        unsafe {
            no_driver(
                llaisysNvidiaMallocDevice(&mut p, 1 << 20),
                "llaisysNvidiaMallocDevice",
            );
            assert!(p.is_null());
            invalid(
                llaisysNvidiaMallocDevice(&mut p, usize::MAX),
                "llaisysNvidiaMallocDevice",
                "larger than any buffer",
            );
            invalid(
                llaisysNvidiaMallocDevice(null_mut(), 16),
                "llaisysNvidiaMallocDevice",
                "ptr=NULL",
            );
            assert_eq!(llaisysNvidiaMallocDevice(&mut p, 0), OK);
            assert!(p.is_null(), "size 0 gives NULL");
            let mut local = [0u8; 64];
            invalid(
                llaisysNvidiaFreeDevice(local.as_mut_ptr().cast()),
                "llaisysNvidiaFreeDevice",
                "not returned by malloc_device",
            );
            assert_eq!(llaisysNvidiaFreeDevice(null_mut()), OK);
            no_driver(
                llaisysNvidiaMallocAsync(&mut p, 4096, null_mut()),
                "llaisysNvidiaMallocAsync",
            );
            invalid(
                llaisysNvidiaMallocAsync(&mut p, 4096, 0x7000 as *mut c_void),
                "llaisysNvidiaMallocAsync",
                "create_stream",
            );
            invalid(
                llaisysNvidiaFreeAsync(local.as_mut_ptr().cast(), null_mut()),
                "llaisysNvidiaFreeAsync",
                "not returned",
            );
            no_driver(
                llaisysNvidiaMallocHost(&mut p, 4096),
                "llaisysNvidiaMallocHost",
            );
            invalid(
                llaisysNvidiaFreeHost(local.as_mut_ptr().cast()),
                "llaisysNvidiaFreeHost",
                "not returned by malloc_host",
            );
            no_driver(
                llaisysNvidiaMallocManaged(&mut p, 4096),
                "llaisysNvidiaMallocManaged",
            );
            no_driver(
                llaisysNvidiaFreeManaged(local.as_mut_ptr().cast()),
                "llaisysNvidiaFreeManaged",
            );
            assert_eq!(llaisysNvidiaFreeManaged(null_mut()), OK);
            no_driver(
                llaisysNvidiaMemPrefetch(local.as_ptr().cast(), 64, 0, null_mut()),
                "llaisysNvidiaMemPrefetch",
            );
            no_driver(
                llaisysNvidiaMemAdvise(local.as_ptr().cast(), 64, 1, 0),
                "llaisysNvidiaMemAdvise",
            );
            let mut d: *mut c_void = std::ptr::dangling_mut();
            no_driver(
                llaisysNvidiaMallocMapped(&mut p, &mut d, 4096),
                "llaisysNvidiaMallocMapped",
            );
            assert!(p.is_null() && d.is_null());
            invalid(
                llaisysNvidiaMallocMapped(&mut p, null_mut(), 4096),
                "llaisysNvidiaMallocMapped",
                "device=NULL",
            );
            assert_eq!(llaisysNvidiaFreeMapped(null_mut()), OK);
            no_driver(
                llaisysNvidiaHostRegister(local.as_mut_ptr().cast(), 64),
                "llaisysNvidiaHostRegister",
            );
            invalid(
                llaisysNvidiaHostRegister(null_mut(), 64),
                "llaisysNvidiaHostRegister",
                "nothing to register",
            );
            no_driver(
                llaisysNvidiaHostUnregister(local.as_mut_ptr().cast()),
                "llaisysNvidiaHostUnregister",
            );
            invalid(
                llaisysNvidiaHostUnregister(null_mut()),
                "llaisysNvidiaHostUnregister",
                "ptr=NULL",
            );
            assert_eq!(llaisysNvidiaMemset(null_mut(), 0, 0), OK, "size 0: nothing");
            invalid(
                llaisysNvidiaMemset(null_mut(), 0, 16),
                "llaisysNvidiaMemset",
                "ptr=NULL",
            );
            no_driver(
                llaisysNvidiaMemset(local.as_mut_ptr().cast(), 0, 16),
                "llaisysNvidiaMemset",
            );
            no_driver(
                llaisysNvidiaMemsetAsync(local.as_mut_ptr().cast(), 0, 16, null_mut()),
                "llaisysNvidiaMemsetAsync",
            );
            invalid(
                llaisysNvidiaMemsetAsync(local.as_mut_ptr().cast(), 0, 16, 0x7000 as *mut c_void),
                "llaisysNvidiaMemsetAsync",
                "create_stream",
            );
            let mut a = std::mem::MaybeUninit::<PointerAttributes>::zeroed();
            no_driver(
                llaisysNvidiaPointerGetAttributes(local.as_ptr().cast(), a.as_mut_ptr()),
                "llaisysNvidiaPointerGetAttributes",
            );
            invalid(
                llaisysNvidiaPointerGetAttributes(local.as_ptr().cast(), null_mut()),
                "llaisysNvidiaPointerGetAttributes",
                "attributes=NULL",
            );
        }
    });
}

#[test]
fn copy_functions_without_a_driver() {
    support::no_driver::test("copy_functions_without_a_driver", || {
        let mut a = vec![0u8; 1 << 17];
        let b = vec![3u8; 1 << 17];
        unsafe {
            // H2H works without a driver, with a status.
            assert_eq!(
                llaisysNvidiaMemcpy(a.as_mut_ptr().cast(), b.as_ptr().cast(), 1024, 0),
                OK
            );
            assert_eq!(a[..1024], b[..1024]);
            assert_eq!(
                llaisysNvidiaMemcpyAsync(
                    a.as_mut_ptr().cast(),
                    b.as_ptr().cast(),
                    2048,
                    0,
                    null_mut()
                ),
                OK
            );
            assert_eq!(a[..2048], b[..2048]);
            invalid(
                llaisysNvidiaMemcpy(a.as_mut_ptr().cast(), b.as_ptr().cast(), 16, 9),
                "llaisysNvidiaMemcpy",
                "kind=9",
            );
            invalid(
                llaisysNvidiaMemcpy(null_mut(), b.as_ptr().cast(), 16, 0),
                "llaisysNvidiaMemcpy",
                "NULL",
            );
            // Without a driver the copy's own CUDA call answers, whatever the size.
            for n in [1usize, 4 << 10, 64 << 10, 1 << 20] {
                for kind in 1..=3 {
                    no_driver(
                        llaisysNvidiaMemcpy(
                            a.as_mut_ptr().cast(),
                            b.as_ptr().cast(),
                            n.min(a.len()),
                            kind,
                        ),
                        "cudaMemcpy",
                    );
                }
            }
            invalid(
                llaisysNvidiaMemcpyAsync(
                    a.as_mut_ptr().cast(),
                    b.as_ptr().cast(),
                    16,
                    0,
                    0x7000 as *mut c_void,
                ),
                "llaisysNvidiaMemcpyAsync",
                "create_stream",
            );
            no_driver(
                llaisysNvidiaMemcpyPeer(a.as_mut_ptr().cast(), 1, b.as_ptr().cast(), 0, 16),
                "llaisysNvidiaMemcpyPeer",
            );
            invalid(
                llaisysNvidiaMemcpyPeer(null_mut(), 1, b.as_ptr().cast(), 0, 16),
                "llaisysNvidiaMemcpyPeer",
                "NULL",
            );
            assert_eq!(
                llaisysNvidiaMemcpyPeer(null_mut(), 1, null(), 0, 0),
                OK,
                "size 0: nothing"
            );
            invalid(
                llaisysNvidiaMemcpyPeerAsync(
                    a.as_mut_ptr().cast(),
                    1,
                    b.as_ptr().cast(),
                    0,
                    16,
                    0x7000 as *mut c_void,
                ),
                "llaisysNvidiaMemcpyPeerAsync",
                "create_stream",
            );
        }
    });
}

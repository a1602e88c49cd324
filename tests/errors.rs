//! Host-only tests of the error layer: the real no-driver codes through our newtype (in a child
//! process without a driver, `support::no_driver`), unknown codes, the context an `Error`
//! carries, and the panic boundary of the C ABI (the panic test is a unit test of
//! `capi::policy`).

mod support;

use llaisys_nvidia::{runtime, CudaError, Error, ErrorKind};

#[test]
fn no_driver_device_count_is_insufficient_driver_with_name_and_description() {
    support::no_driver::test(
        "no_driver_device_count_is_insufficient_driver_with_name_and_description",
        || {
            let e = runtime::device_count().expect_err("no driver: device_count fails");
            assert_eq!(e.cuda_error().code(), 35);
            assert_eq!(e.cuda_error(), CudaError::INSUFFICIENT_DRIVER);
            assert_eq!(e.cuda_error().name(), "cudaErrorInsufficientDriver");
            assert!(
                e.cuda_error().description().contains("driver"),
                "{}",
                e.cuda_error().description()
            );
            assert_eq!(e.call(), "cudaGetDeviceCount");
            assert_eq!(e.kind(), ErrorKind::Cuda);
            let text = e.to_string();
            assert!(
                text.contains("cudaGetDeviceCount failed: cudaErrorInsufficientDriver (35)"),
                "{text}"
            );
            assert!(
                format!("{e:?}").contains("src/safe/runtime.rs"),
                "Debug names where it was raised"
            );
            // The runtime itself answers without a driver.
            assert_eq!(
                runtime::runtime_version().expect("runtime version"),
                runtime::build::cudart_version()
            );
            assert_eq!(runtime::driver_version().expect("driver version"), 0);
        },
    );
}

#[test]
fn unknown_codes_are_values_not_undefined_behaviour() {
    for code in [9999, 12345, i32::MAX] {
        let e = CudaError::from_code(code);
        assert_eq!(e.code(), code);
        assert!(!e.is_success());
        assert!(!e.name().is_empty());
        assert!(!e.description().is_empty());
        let shown = e.to_string();
        assert!(shown.contains(&code.to_string()), "{shown}");
    }
    assert_eq!(CudaError::from_code(9999).name(), "unrecognized error code");
    assert!(CudaError::from_code(0).is_success());
    assert!(CudaError::check(CudaError::from_code(0).raw()).is_ok());
    assert_eq!(
        CudaError::check(CudaError::from_code(2).raw()),
        Err(CudaError::MEMORY_ALLOCATION)
    );
}

#[test]
fn sticky_codes_are_reported_as_deferred() {
    for code in [700, 719, 214] {
        let e = Error::cuda(
            "cudaStreamSynchronize",
            CudaError::from_code(code),
            "stream=0x1",
        );
        assert_eq!(e.kind(), ErrorKind::DeferredCuda);
        assert!(e.to_string().contains("earlier asynchronous work"), "{e}");
    }
    let e = Error::cuda("cudaMalloc", CudaError::from_code(2), "size=1");
    assert_eq!(e.kind(), ErrorKind::Cuda);
    assert_eq!(
        std::error::Error::source(&e).map(|s| s.to_string()),
        Some(CudaError::from_code(2).to_string())
    );
}

//! The contract of the GPU tests on any machine (this test is not ignored): run without a
//! device, a GPU test prints a visible "skipped: no CUDA device" line and passes, and fails
//! instead under LLAISYS_TEST_REQUIRE_GPU=1. The machine without a device is made here (a child
//! process without a driver, `support::no_driver`); under LLAISYS_TEST_REQUIRE_GPU=1 this
//! machine itself must have one.

use crate::support::child::TestChild;
use crate::support::no_driver;

const REQUIRE: &str = "LLAISYS_TEST_REQUIRE_GPU";
/// A short GPU test, run in the children.
const PROBE: &str = "api::init_count_properties_and_priorities";

#[test]
fn gpu_tests_skip_visibly_without_a_device_and_fail_when_one_is_required() {
    if std::env::var(REQUIRE).as_deref() == Ok("1") {
        let count = llaisys_nvidia::runtime::device_count();
        assert!(
            count.as_ref().is_ok_and(|&n| n > 0),
            "LLAISYS_TEST_REQUIRE_GPU=1 but no CUDA device: {count:?}"
        );
    }
    let without_device = |require: bool| {
        let child = TestChild::new(PROBE).loader_path(&no_driver::loader_dir());
        if require {
            child.env(REQUIRE, "1").run()
        } else {
            child.env_remove(REQUIRE).run()
        }
    };
    let loose = without_device(false);
    assert!(
        loose.ran_one_test() && loose.text().contains("skipped: no CUDA device"),
        "without a device, a GPU test skips visibly: {}",
        loose.report()
    );
    let strict = without_device(true);
    assert!(
        strict.code() == Some(101)
            && strict
                .stdout
                .contains("test result: FAILED. 0 passed; 1 failed;")
            && strict
                .text()
                .contains("LLAISYS_TEST_REQUIRE_GPU=1 but no CUDA device"),
        "without a device, a GPU test fails under LLAISYS_TEST_REQUIRE_GPU=1: {}",
        strict.report()
    );
}

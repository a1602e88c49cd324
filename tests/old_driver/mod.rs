//! The condition "no usable driver", made on any machine: a stand-in libcuda.so.1
//! (doctor/tests/fake_libcuda.c) reporting driver 10.0, older than any runtime this crate builds
//! with, so cudart answers cudaErrorInsufficientDriver (35) without initialising anything, as on
//! a machine without a driver. A child process whose `LD_LIBRARY_PATH` starts with `dir()`
//! loads it before any real driver.

use std::path::{Path, PathBuf};

/// The folder holding the stand-in `libcuda.so.1` (built once per test binary).
pub fn dir() -> PathBuf {
    use std::sync::OnceLock;
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            super::support::c_shared_library(
                "doctor/tests/fake_libcuda.c",
                &Path::new(env!("CARGO_TARGET_TMPDIR")).join("old-driver"),
                "libcuda.so.1",
                &["-DFAKE_DRIVER_VERSION=10000".to_string()],
            )
        })
        .clone()
}

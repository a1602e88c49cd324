//! Process-wide facts: cudart and driver versions, the device count, and this build's facts.

use crate::cudart;
use crate::error::{CudaError, Result};

/// The version of the cudart in use (`cudaRuntimeGetVersion`, 13000 for 13.0). Works without a
/// driver.
pub fn runtime_version() -> Result<i32> {
    Ok(cudart::runtime_get_version()?)
}

/// The CUDA version the installed driver supports (`cudaDriverGetVersion`), 0 when no driver is
/// installed.
pub fn driver_version() -> Result<i32> {
    Ok(cudart::driver_get_version()?)
}

/// The number of CUDA devices, or the CUDA error that explains why there are none
/// (`cudaErrorInsufficientDriver` without a driver, `cudaErrorNoDevice` without a GPU).
pub fn device_count() -> Result<i32> {
    Ok(cudart::get_device_count()?)
}

/// Formats a CUDA version number (12090 -> "12.9").
pub fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The facts build.rs recorded about this build.
pub mod build {
    /// `CUDART_VERSION` of the headers the crate was built against.
    pub const CUDART_VERSION: &str = env!("LLAISYS_NVIDIA_BUILD_CUDART_VERSION");
    /// The CUDA root the crate was built against.
    pub const CUDA_ROOT: &str = env!("LLAISYS_NVIDIA_BUILD_ROOT");
    /// How that root was found (`CUDA_HOME=...`, `project-local ...`).
    pub const CUDA_ORIGIN: &str = env!("LLAISYS_NVIDIA_BUILD_ORIGIN");
    /// `static` or `dynamic`.
    pub const LINK_MODE: &str = env!("LLAISYS_NVIDIA_BUILD_LINK_MODE");
    /// The folder of the linked libcudart.
    pub const LIB_DIR: &str = env!("LLAISYS_NVIDIA_BUILD_LIB_DIR");
    /// The file name of the linked libcudart.
    pub const LIB_NAME: &str = env!("LLAISYS_NVIDIA_BUILD_LIB_NAME");
    /// The crate version.
    pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");

    /// `CUDART_VERSION` as a number.
    pub fn cudart_version() -> i32 {
        CUDART_VERSION.parse().unwrap_or(0)
    }
}

/// `cudaGetLastError`: reads and clears the runtime's last error of this thread.
pub fn take_last_cuda_error() -> CudaError {
    cudart::get_last_error()
}

/// The address of cudart's `cudaRuntimeGetVersion` in this process: `dladdr` on it names the
/// library that provides cudart (inside this crate with the `static` feature).
pub fn cudart_symbol_address() -> *const std::os::raw::c_void {
    cudart::runtime_symbol_address()
}

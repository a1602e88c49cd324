//! Process-wide facts: cudart and driver versions, the device count, and this build's facts.

use crate::cudart::calls as cudart;
/// The file name of the `loaded` mode's own runtime of a major
/// (`libllaisys_nvidia_cudart13.so`), which it loads from beside itself first.
#[cfg(llaisys_loaded)]
pub use crate::cudart::loaded::bundled_file_name;
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
    crate::libsearch::cuda_version_text(v)
}

/// The facts build.rs recorded about this build.
pub mod build {
    /// `CUDART_VERSION` of the headers the crate was built against.
    pub const CUDART_VERSION: &str = env!("LLAISYS_NVIDIA_BUILD_CUDART_VERSION");
    /// The CUDA root the crate was built against.
    pub const CUDA_ROOT: &str = env!("LLAISYS_NVIDIA_BUILD_ROOT");
    /// How that root was found (`CUDA_HOME=...`, `project-local ...`).
    pub const CUDA_ORIGIN: &str = env!("LLAISYS_NVIDIA_BUILD_ORIGIN");
    /// `static`, `dynamic` or `loaded`.
    pub const LINK_MODE: &str = env!("LLAISYS_NVIDIA_BUILD_LINK_MODE");
    /// The folder of the linked libcudart (`loaded`: of the `libcudart.so.N` beside the headers
    /// built against, searched at run time; `LIB_NAME` is empty when there was none).
    pub const LIB_DIR: &str = env!("LLAISYS_NVIDIA_BUILD_LIB_DIR");
    /// The file name of the linked libcudart.
    pub const LIB_NAME: &str = env!("LLAISYS_NVIDIA_BUILD_LIB_NAME");
    /// The `loaded` mode: per major it can load, the folder of `libcudart.so.N` found at build time
    /// (`13=/x/lib,12=/y/lib`; empty after `=` when there was none); empty for the other modes.
    pub const LOADED_RUNTIMES: &str = env!("LLAISYS_NVIDIA_BUILD_LOADED_RUNTIMES");
    /// The `loaded` mode: per major, the include folders of its headers
    /// (`13=/a/include:/b/include;12=...`); empty for the other modes.
    pub const LOADED_INCLUDES: &str = env!("LLAISYS_NVIDIA_BUILD_LOADED_INCLUDES");
    /// The `loaded` mode: the runtimes made with this library from each major's static
    /// archive, where the build made them (`13=/out/libllaisys_nvidia_cudart13.so,12=...`);
    /// the library loads them from beside itself, so an installation copies them there. Empty
    /// for the other modes, and without a major whose archive was found.
    pub const BUNDLED_RUNTIMES: &str = env!("LLAISYS_NVIDIA_BUILD_BUNDLED_RUNTIMES");

    /// `BUNDLED_RUNTIMES` read: `(major, file)` in the build's order.
    pub fn bundled_runtimes() -> Vec<(u32, &'static str)> {
        BUNDLED_RUNTIMES
            .split(',')
            .filter_map(|e| {
                let (m, f) = e.split_once('=')?;
                Some((m.parse().ok()?, f))
            })
            .collect()
    }
    /// The crate version.
    pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");

    /// `CUDART_VERSION` as a number.
    pub fn cudart_version() -> i32 {
        CUDART_VERSION.parse().unwrap_or(0)
    }
}

/// Which CUDA runtime this library uses, and why (`cudart_library`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudartLibrary {
    /// `static`, `dynamic` or `loaded` (this build's link mode).
    pub link_mode: &'static str,
    /// The file that holds the runtime in use (this library or program with `static`); None
    /// when it cannot be told or none could be loaded.
    pub path: Option<String>,
    /// `cudaRuntimeGetVersion` of the runtime in use; None when none could be loaded.
    pub version: Option<i32>,
    /// Why this runtime (or why none), in words.
    pub why: String,
    /// The `loaded` mode: what the driver said before the choice (`cuDriverGetVersion` of
    /// libcuda.so.1, or why there is none); empty for the other modes.
    pub driver: String,
    /// The `loaded` mode: every place looked at, in order, as (place, outcome); empty for the
    /// other modes.
    pub tried: Vec<(String, String)>,
}

/// Which CUDA runtime this library uses and why. In the `loaded` mode the first call loads it
/// (the status it answers when none can be loaded is in `why`); it never fails.
pub fn cudart_library() -> CudartLibrary {
    #[cfg(llaisys_loaded)]
    {
        let c = cudart::loaded_runtime();
        let driver = match &c.driver {
            crate::cudart::loaded::Driver::Version { version, library } => {
                format!(
                    "supports CUDA {} (cuDriverGetVersion of {library})",
                    version_string(*version)
                )
            }
            crate::cudart::loaded::Driver::Missing(why) => format!("none: {why}"),
        };
        CudartLibrary {
            link_mode: build::LINK_MODE,
            path: c.runtime.as_ref().ok().map(|rt| rt.path.clone()),
            version: c.runtime.as_ref().ok().map(|rt| rt.version),
            why: c.why.clone(),
            driver,
            tried: c
                .tried
                .iter()
                .map(|t| (t.place.clone(), t.outcome.clone()))
                .collect(),
        }
    }
    #[cfg(not(llaisys_loaded))]
    {
        let path = crate::libsearch::object_of(cudart::runtime_symbol_address());
        let version = runtime_version().ok();
        let why = if build::LINK_MODE == "static" {
            format!(
                "libcudart_static.a of CUDA {} is linked into this library",
                version_string(build::cudart_version())
            )
        } else {
            format!(
                "the shared libcudart the dynamic loader found at start (the build linked {}/{})",
                build::LIB_DIR,
                build::LIB_NAME
            )
        };
        CudartLibrary {
            link_mode: build::LINK_MODE,
            path,
            version,
            why,
            driver: String::new(),
            tried: Vec::new(),
        }
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

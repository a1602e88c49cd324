//! The doctor's one door into the library: every `llaisys_nvidia` item the doctor uses is named
//! in this file, and nowhere else, so that a change of the library's public paths is made here.
//! What leaves this file is the doctor's own data (`report::{CudaErr, Failure,
//! DeviceProperties}`) or a thin re-export; no CUDA handle type of the library escapes except
//! the RAII types the bench holds.
//!
//! Nothing here swaps the library's process-wide error handler: the smoke test's table calls go
//! through [`ops`], bodies that return a `Result` and never call the handler.

use crate::report::{CudaErr, DeviceProperties, Failure, LoadedRuntime};
use std::os::raw::c_void;
use std::time::Instant;

use llaisys_nvidia as lib;

pub use lib::copy::MemcpyKind;
pub use lib::event::Event;
pub use lib::memory::{DeviceBuffer, PinnedBuffer};
pub use lib::stream::Stream;

/// The facts build.rs of the library recorded about this build (`runtime::build`).
pub mod build {
    pub use llaisys_nvidia::runtime::build::{
        bundled_runtimes, cudart_version, CRATE_VERSION, CUDART_VERSION, CUDA_ORIGIN, CUDA_ROOT,
        LIB_DIR, LIB_NAME, LINK_MODE,
    };
}

impl From<lib::CudaError> for CudaErr {
    fn from(e: lib::CudaError) -> CudaErr {
        CudaErr {
            code: e.code(),
            name: e.name().to_string(),
            description: e.description().to_string(),
        }
    }
}

impl From<lib::Error> for Failure {
    fn from(e: lib::Error) -> Failure {
        Failure::from(&e)
    }
}

impl From<&lib::Error> for Failure {
    fn from(e: &lib::Error) -> Failure {
        let cuda = e.cuda_error();
        Failure {
            message: e.to_string(),
            call: e.call().to_string(),
            cuda_error: (!cuda.is_success()).then(|| cuda.into()),
        }
    }
}

/// `code` as a CUDA error with cudart's name and description (`cudaGetErrorName`,
/// `cudaGetErrorString`: table lookups, no driver involved).
pub fn cuda_error(code: i32) -> CudaErr {
    lib::CudaError::from_code(code).into()
}

/// Formats a CUDA version number (12090 -> "12.9").
pub fn version_string(v: i32) -> String {
    lib::runtime::version_string(v)
}

/// `cudaRuntimeGetVersion` (no driver needed).
pub fn runtime_version() -> Result<i32, CudaErr> {
    lib::runtime::runtime_version().map_err(|e| e.cuda_error().into())
}

/// `cudaDriverGetVersion`: 0 without a driver. cudart loads `libcuda.so.1` here and calls the
/// driver's `cuInit`, so this is the first call that can hang or crash in a broken driver.
pub fn driver_version() -> Result<i32, CudaErr> {
    lib::runtime::driver_version().map_err(|e| e.cuda_error().into())
}

/// `cudaGetDeviceCount`.
pub fn device_count() -> Result<i32, Failure> {
    Ok(lib::runtime::device_count()?)
}

/// The `loaded` mode's choice of CUDA runtime; the first call loads it (it asks libcuda.so.1
/// for the driver's version first: a probe). `shared_mapped` is left for the caller.
pub fn loaded_runtime() -> LoadedRuntime {
    let l = lib::runtime::cudart_library();
    LoadedRuntime {
        path: l.path,
        version: l.version,
        why: l.why,
        driver: l.driver,
        tried: l.tried,
        shared_mapped: Vec::new(),
    }
}

/// The address of a cudart function, for `dladdr`: which file holds the cudart in use (this
/// program for the static feature, the shared library for the dynamic one; in the `loaded`
/// mode the first call loads the runtime).
pub fn cudart_code_address() -> *const c_void {
    lib::runtime::cudart_symbol_address()
}

/// Devices: the library's safe layer.
pub mod device {
    use super::{lib, DeviceProperties, Failure};

    /// Makes `id` current for this thread.
    pub fn set(id: i32) -> Result<(), Failure> {
        Ok(lib::device::set(id)?)
    }

    /// Free and total bytes of the current device.
    pub fn mem_info() -> Result<(usize, usize), Failure> {
        Ok(lib::device::mem_info()?)
    }

    /// The properties of device `id`.
    pub fn properties(id: i32) -> Result<DeviceProperties, Failure> {
        let p = lib::device::properties(id)?;
        Ok(DeviceProperties {
            name: p.name,
            compute_capability: p.compute_capability,
            total_memory: p.total_memory,
            multiprocessors: p.multiprocessors,
            pci_bus_id: p.pci_bus_id,
            async_engines: p.async_engines,
            unified_addressing: p.unified_addressing,
            memory_pools: p.memory_pools,
        })
    }

    /// Whether `from` can access `to`'s memory.
    pub fn can_access_peer(from: i32, to: i32) -> Result<bool, Failure> {
        Ok(lib::device::can_access_peer(from, to)?)
    }

    /// Creates the context of `id` and makes it current (`device::init`: cudaInitDevice,
    /// cudaSetDevice, cudaFree(0), transient failures of processes starting at once retried);
    /// the milliseconds it took.
    pub fn init(id: i32) -> Result<f64, Failure> {
        Ok(lib::device::init(id)?.as_secs_f64() * 1e3)
    }
}

/// NVML (libnvidia-ml.so.1), which the library loads and starts on first use.
pub mod nvml {
    use super::lib;
    use crate::report::{NvmlUsage, ProcessMemory};

    /// The variable that names the NVML library to use instead of the loader's search.
    pub const LIBRARY_VAR: &str = lib::nvml::LIBRARY_VAR;

    /// The device with PCI bus id `pci_bus_id`: its total and used memory and its compute
    /// processes, `probe_pid` being this process; or why NVML cannot say, in words that name
    /// what is missing.
    pub fn device_usage(pci_bus_id: &str) -> Result<NvmlUsage, String> {
        let u = lib::nvml::device_usage(pci_bus_id)?;
        Ok(NvmlUsage {
            total_bytes: u.total_bytes,
            used_bytes: u.used_bytes,
            processes: u
                .processes
                .into_iter()
                .map(|p| ProcessMemory {
                    pid: p.pid,
                    used_bytes: p.used_bytes,
                })
                .collect(),
            probe_pid: std::process::id(),
        })
    }
}

/// The llaisys table's bodies as Rust calls that return a `Result` and never call the error
/// handler: the library's operations layer (`llaisys_nvidia::ops`), which the table and the
/// status API both call.
pub mod ops {
    use super::{lib, Failure, MemcpyKind};
    use std::os::raw::{c_int, c_void};

    /// A stream of the table (`llaisysStream_t`).
    pub type TableStream = *mut c_void;

    /// The table's `get_device_count` (no driver or no GPU is an ordinary 0).
    pub fn get_device_count() -> i32 {
        lib::ops::device_count().0
    }

    /// `set_device`.
    pub fn set_device(id: i32) -> Result<(), Failure> {
        Ok(lib::ops::set_device(id)?)
    }

    /// `device_synchronize`.
    pub fn device_synchronize() -> Result<(), Failure> {
        Ok(lib::ops::device_synchronize()?)
    }

    /// `create_stream` (an ordinary blocking stream of the current device).
    pub fn create_stream() -> Result<TableStream, Failure> {
        Ok(lib::ops::create_stream()?)
    }

    /// `destroy_stream`.
    pub fn destroy_stream(s: TableStream) -> Result<(), Failure> {
        Ok(lib::ops::destroy_stream(s)?)
    }

    /// `stream_synchronize`.
    pub fn stream_synchronize(s: TableStream) -> Result<(), Failure> {
        Ok(lib::ops::stream_synchronize(s)?)
    }

    /// `malloc_device`.
    pub fn malloc_device(size: usize) -> Result<*mut c_void, Failure> {
        Ok(lib::ops::malloc_device(size)?)
    }

    /// `free_device`.
    ///
    /// # Safety
    /// `p` is NULL or came from `malloc_device` and is freed once.
    pub unsafe fn free_device(p: *mut c_void) -> Result<(), Failure> {
        Ok(lib::ops::free_device(p)?)
    }

    /// `malloc_host` (pinned).
    pub fn malloc_host(size: usize) -> Result<*mut c_void, Failure> {
        Ok(lib::ops::malloc_host(size)?)
    }

    /// `free_host`.
    ///
    /// # Safety
    /// `p` is NULL or came from `malloc_host` and is freed once.
    pub unsafe fn free_host(p: *mut c_void) -> Result<(), Failure> {
        Ok(lib::ops::free_host(p)?)
    }

    /// `memcpy_sync` (cudaMemcpy's guarantees: a host destination holds the data on return).
    ///
    /// # Safety
    /// `dst` and `src` are valid for `size` bytes of the memory `kind` says.
    pub unsafe fn memcpy_sync(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: MemcpyKind,
    ) -> Result<(), Failure> {
        // SAFETY: `dst` and `src` are valid for `size` bytes of the memory `kind` says (this
        // function's contract).
        Ok(unsafe { lib::ops::memcpy_sync(dst, src, size, kind as c_int) }?)
    }

    /// `memcpy_async` on a stream of `create_stream` (NULL: the legacy stream).
    ///
    /// # Safety
    /// As `memcpy_sync`, until the copy has run on `s`.
    pub unsafe fn memcpy_async(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: MemcpyKind,
        s: TableStream,
    ) -> Result<(), Failure> {
        // SAFETY: `dst` and `src` are valid for `size` bytes of the memory `kind` says until the
        // copy has run (this function's contract).
        Ok(unsafe { lib::ops::memcpy_async(dst, src, size, kind as c_int, s) }?)
    }
}

/// CUDA's own calls for the bench, timed on the host clock where they are host calls: the
/// figures describe the machine, not the library's caches or its pageable fast path.
pub mod plain {
    use super::{lib, Failure, Instant, MemcpyKind, Stream};
    use std::os::raw::c_void;

    /// `cudaMemcpyAsync` on `stream`, nothing else (no pageable staging, no checks).
    ///
    /// # Safety
    /// `dst` and `src` are valid for `size` bytes of the memory `kind` says until the copy has
    /// run on `stream`.
    pub unsafe fn memcpy_async(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: MemcpyKind,
        stream: &Stream,
    ) -> Result<(), Failure> {
        // SAFETY: `dst` and `src` are valid for `size` bytes of the memory `kind` says until the
        // copy has run on `stream` (this function's contract); `stream` is a live stream.
        Ok(unsafe { lib::copy::memcpy_async(dst, src, size, kind, stream.as_raw()) }?)
    }

    /// Microseconds of one `cudaMalloc(size)` and one `cudaFree` of it.
    pub fn device_alloc_free_us(size: usize) -> Result<(f64, f64), Failure> {
        let t = Instant::now();
        let p = lib::memory::alloc_device(size)?;
        let alloc = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        // SAFETY: `p` came from alloc_device just above and is freed once.
        unsafe { lib::memory::free_device(p)? };
        Ok((alloc, t.elapsed().as_secs_f64() * 1e6))
    }

    /// Microseconds of one `cudaMallocHost(size)` and one `cudaFreeHost` of it.
    pub fn host_alloc_free_us(size: usize) -> Result<(f64, f64), Failure> {
        let t = Instant::now();
        let p = lib::memory::alloc_host(size)?;
        let alloc = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        // SAFETY: `p` came from alloc_host just above and is freed once.
        unsafe { lib::memory::free_host(p)? };
        Ok((alloc, t.elapsed().as_secs_f64() * 1e6))
    }
}

//! The doctor's report as plain data: what was found, measured and concluded. Gathering fills it
//! (`facts`, `loader`, `nodes`, `env`, `smoke`, `bench`), `diagnose` reads it, `text` and `json`
//! print it.

use super::diagnose::Diagnosis;
use crate::device::Properties;
use crate::error::{CudaError, Error};

/// Everything the doctor found.
#[derive(Clone, Debug)]
pub struct Report {
    /// This build.
    pub build: Build,
    /// This machine: versions, libraries, device nodes, environment.
    pub machine: Machine,
    /// `cudaGetDeviceCount`, the first call that needs the driver, timed.
    pub device_count: DeviceCount,
    /// One entry per device CUDA shows.
    pub devices: Vec<DeviceReport>,
    /// `cudaDeviceCanAccessPeer` for every ordered pair of distinct devices.
    pub peer_access: Vec<PeerAccess>,
    /// The smoke test through the llaisys table.
    pub smoke: Smoke,
    /// The bench, when asked for (`--bench`).
    pub bench: Option<Bench>,
    /// The conclusion.
    pub diagnosis: Diagnosis,
}

/// The facts build.rs recorded (`runtime::build`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Build {
    /// The crate version.
    pub crate_version: String,
    /// `static` or `dynamic`.
    pub link_mode: String,
    /// The CUDA root built against.
    pub cuda_root: String,
    /// How that root was found.
    pub cuda_origin: String,
    /// `CUDART_VERSION` of the headers (13000 for 13.0).
    pub cudart_version: i32,
    /// The folder of the libcudart linked.
    pub lib_dir: String,
    /// The file name of the libcudart linked.
    pub lib_name: String,
}

/// Facts about this machine that need no CUDA device.
#[derive(Clone, Debug)]
pub struct Machine {
    /// `cudaRuntimeGetVersion`.
    pub runtime_version: Result<i32, CudaError>,
    /// `cudaDriverGetVersion`: the CUDA version the driver supports, 0 without a driver.
    pub driver_version: Result<i32, CudaError>,
    /// The NVIDIA kernel module's version from `/proc/driver/nvidia/version`, when loaded.
    pub kernel_module: Option<String>,
    /// Where the libcudart in use comes from.
    pub libcudart: Libcudart,
    /// Whether and from where `libcuda.so.1` (the driver's library) loads.
    pub libcuda: Libcuda,
    /// `/dev/nvidiactl`, `/dev/nvidia-uvm` and every `/dev/nvidiaN`.
    pub device_nodes: Vec<DeviceNode>,
    /// NVIDIA GPUs the kernel sees, whatever CUDA shows.
    pub gpus_on_host: Option<GpusOnHost>,
    /// The CUDA-related environment variables that are set, with their values.
    pub env: Vec<(String, String)>,
}

/// Where the libcudart in use comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Libcudart {
    /// `static` (linked in) or `dynamic`.
    pub link_mode: String,
    /// The file holding `cudaRuntimeGetVersion` (dladdr): this program for the static feature,
    /// the shared library for the dynamic one. None when it could not be told.
    pub loaded_from: Option<String>,
    /// How the loader found the shared library (`LD_LIBRARY_PATH`, ...); None for static.
    pub found_via: Option<String>,
    /// `LIB_DIR/LIB_NAME`, the library the build linked.
    pub built_path: String,
    /// Whether `built_path` still exists.
    pub built_path_exists: bool,
    /// The loader's own answer for libcudart when this program starts without `LD_LIBRARY_PATH`.
    pub without_ld_library_path: LoaderAnswer,
    /// Every shared libcudart mapped into this process (`/proc/self/maps`).
    pub shared_mapped: Vec<String>,
}

/// The dynamic loader's answer for a library (`LD_TRACE_LOADED_OBJECTS=1`, as `ldd` asks it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoaderAnswer {
    /// Not asked, and why (the static feature needs no shared libcudart).
    NotChecked(String),
    /// The loader would load this file.
    Found(String),
    /// The loader answers `not found`.
    NotFound,
}

/// Whether `libcuda.so.1` can be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Libcuda {
    /// It loads.
    Loaded {
        /// The path the loader used (dladdr of `cuInit`).
        path: String,
        /// That path with links resolved (`libcuda.so.580.95.05`), when different.
        resolved: Option<String>,
    },
    /// `dlopen` failed.
    NotLoadable {
        /// `dlerror()`'s text.
        error: String,
    },
}

/// One `/dev/nvidia*` node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNode {
    /// `/dev/nvidia0`.
    pub path: String,
    /// It exists.
    pub exists: bool,
    /// This process may open it for reading and writing (`access(R_OK | W_OK)`).
    pub accessible: bool,
    /// `st_mode & 0o7777`, 0 when it does not exist.
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
}

/// How many NVIDIA GPUs the kernel sees, and how that was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpusOnHost {
    /// The number.
    pub count: usize,
    /// `/proc/driver/nvidia/gpus` or `/dev/nvidia[0-9]*`.
    pub source: String,
}

/// `cudaGetDeviceCount`, timed: the first call that initialises the driver.
#[derive(Clone, Debug)]
pub struct DeviceCount {
    /// The count, or the error explaining why there is none.
    pub result: Result<i32, Error>,
    /// Milliseconds the call took (driver initialisation).
    pub ms: f64,
}

impl DeviceCount {
    /// The count, 0 on error.
    pub fn count(&self) -> i32 {
        *self.result.as_ref().unwrap_or(&0)
    }
}

/// One device.
#[derive(Clone, Debug)]
pub struct DeviceReport {
    /// Device id.
    pub id: i32,
    /// `cudaGetDeviceProperties` and friends.
    pub properties: Result<Properties, Error>,
    /// `cudaMemGetInfo`: (free, total) bytes.
    pub memory: Result<(usize, usize), Error>,
}

/// Whether `from` can access `to`'s memory.
#[derive(Clone, Debug)]
pub struct PeerAccess {
    /// Accessing device.
    pub from: i32,
    /// Accessed device.
    pub to: i32,
    /// `cudaDeviceCanAccessPeer`.
    pub result: Result<bool, Error>,
}

/// The smoke test's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmokeStatus {
    /// Every step succeeded and the data came back intact.
    Passed,
    /// A step failed or the data differed.
    Failed,
    /// Not run, and why.
    Skipped(String),
}

/// The smoke test: context creation, then the llaisys table end to end.
#[derive(Clone, Debug)]
pub struct Smoke {
    /// The device tested.
    pub device: i32,
    /// The outcome.
    pub status: SmokeStatus,
    /// The process's first CUDA calls, in order, with their milliseconds: the version calls
    /// (`cudaDriverGetVersion` loads the driver) and `cudaGetDeviceCount`.
    pub first_calls: Vec<(String, f64)>,
    /// Context creation (`cudaSetDevice` + `cudaFree(0)`), in milliseconds, or its error: the
    /// first call that needs the device, done explicitly before anything else touches it.
    pub context_ms: Option<Result<f64, Error>>,
    /// Bytes copied through the table.
    pub bytes: usize,
    /// Each step, in order.
    pub steps: Vec<Step>,
}

/// One smoke step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// What it did (`memcpy_sync H2D`).
    pub name: String,
    /// Milliseconds.
    pub ms: f64,
    /// The failure, None on success.
    pub error: Option<String>,
}

/// A copy direction and host-memory kind the bench measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// Host to device from pinned (`cudaMallocHost`) memory.
    H2dPinned,
    /// Host to device from pageable (ordinary) memory.
    H2dPageable,
    /// Device to host into pinned memory.
    D2hPinned,
    /// Device to host into pageable memory.
    D2hPageable,
    /// Device to device.
    D2d,
}

impl CopyKind {
    /// Every kind, in table order.
    pub const ALL: [CopyKind; 5] = [
        CopyKind::H2dPinned,
        CopyKind::H2dPageable,
        CopyKind::D2hPinned,
        CopyKind::D2hPageable,
        CopyKind::D2d,
    ];

    /// The JSON name (`h2d_pinned`).
    pub fn id(self) -> &'static str {
        match self {
            CopyKind::H2dPinned => "h2d_pinned",
            CopyKind::H2dPageable => "h2d_pageable",
            CopyKind::D2hPinned => "d2h_pinned",
            CopyKind::D2hPageable => "d2h_pageable",
            CopyKind::D2d => "d2d",
        }
    }

    /// The column title (`H2D pinned`).
    pub fn title(self) -> &'static str {
        match self {
            CopyKind::H2dPinned => "H2D pinned",
            CopyKind::H2dPageable => "H2D pageable",
            CopyKind::D2hPinned => "D2H pinned",
            CopyKind::D2hPageable => "D2H pageable",
            CopyKind::D2d => "D2D",
        }
    }
}

/// One copy measurement: the median of `reps` timed copies.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyFigure {
    /// Direction and memory.
    pub kind: CopyKind,
    /// Bytes per copy.
    pub size: usize,
    /// Timed repetitions (after one untimed warm-up).
    pub reps: usize,
    /// Median milliseconds, from CUDA events around the copy.
    pub median_ms: f64,
    /// `size / median`, in GB/s (10^9 bytes per second).
    pub gbps: f64,
}

/// An allocation call the bench times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// `cudaMalloc`.
    DeviceMalloc,
    /// `cudaFree`.
    DeviceFree,
    /// `cudaMallocHost` (pinned).
    HostMalloc,
    /// `cudaFreeHost`.
    HostFree,
}

impl AllocKind {
    /// Every kind, in table order.
    pub const ALL: [AllocKind; 4] = [
        AllocKind::DeviceMalloc,
        AllocKind::DeviceFree,
        AllocKind::HostMalloc,
        AllocKind::HostFree,
    ];

    /// The JSON name (`device_malloc`).
    pub fn id(self) -> &'static str {
        match self {
            AllocKind::DeviceMalloc => "device_malloc",
            AllocKind::DeviceFree => "device_free",
            AllocKind::HostMalloc => "host_malloc",
            AllocKind::HostFree => "host_free",
        }
    }

    /// The CUDA call.
    pub fn call(self) -> &'static str {
        match self {
            AllocKind::DeviceMalloc => "cudaMalloc",
            AllocKind::DeviceFree => "cudaFree",
            AllocKind::HostMalloc => "cudaMallocHost",
            AllocKind::HostFree => "cudaFreeHost",
        }
    }
}

/// One allocation-latency measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocFigure {
    /// Which call.
    pub kind: AllocKind,
    /// Bytes.
    pub size: usize,
    /// Timed repetitions.
    pub reps: usize,
    /// Median wall-clock microseconds of one call.
    pub median_us: f64,
}

/// The bench's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Bench {
    /// The device measured.
    pub device: i32,
    /// The size ladder.
    pub sizes: Vec<usize>,
    /// Copy figures, by size then kind.
    pub copies: Vec<CopyFigure>,
    /// Allocation latencies.
    pub allocations: Vec<AllocFigure>,
    /// The failure that stopped it, if any.
    pub error: Option<String>,
    /// Why it did not run (no usable device), if it did not.
    pub skipped: Option<String>,
}

impl Bench {
    /// A bench that did not run, and why.
    pub fn skipped(device: i32, why: impl Into<String>) -> Bench {
        Bench {
            device,
            sizes: Vec::new(),
            copies: Vec::new(),
            allocations: Vec::new(),
            error: None,
            skipped: Some(why.into()),
        }
    }

    /// The figure for `kind` at `size`, if measured.
    pub fn copy(&self, kind: CopyKind, size: usize) -> Option<&CopyFigure> {
        self.copies
            .iter()
            .find(|c| c.kind == kind && c.size == size)
    }
}

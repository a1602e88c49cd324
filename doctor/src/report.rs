//! The doctor's report as plain data: what was found and measured. The lowest layer of the
//! doctor: it names no other module. Gathering fills it (`facts`, `loader`, `nodes`, `env` in
//! the doctor's process; `probes`, `smoke`, `bench` in the probe process), `evidence` reads it
//! for `diagnose`, `text` and `json` print it with the diagnosis. The parts the probe process
//! measures travel to the doctor as serde data (`protocol`), so they are the doctor's own
//! types, not the library's.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A CUDA error code with cudart's name and description for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaErr {
    /// The `cudaError_t` value.
    pub code: i32,
    /// `cudaGetErrorName` (`cudaErrorInsufficientDriver`).
    pub name: String,
    /// `cudaGetErrorString`.
    pub description: String,
}

impl CudaErr {
    /// `cudaErrorInsufficientDriver`.
    pub const INSUFFICIENT_DRIVER: i32 = 35;
    /// `cudaErrorStubLibrary`: the toolkit's stub libcuda was loaded.
    pub const STUB_LIBRARY: i32 = 34;
    /// `cudaErrorNoDevice`.
    pub const NO_DEVICE: i32 = 100;
}

impl fmt::Display for CudaErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.name, self.code, self.description)
    }
}

/// A failed call: the library's whole message, the CUDA call that failed, its code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The whole message.
    pub message: String,
    /// The CUDA call that failed, `""` when none (or not known).
    pub call: String,
    /// The CUDA error, None when no CUDA call failed.
    pub cuda_error: Option<CudaErr>,
}

impl Failure {
    /// The CUDA error code, 0 when none.
    pub fn code(&self) -> i32 {
        self.cuda_error.as_ref().map_or(0, |e| e.code)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// What the doctor reports about a device (the library's `device::Properties`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceProperties {
    /// Marketing name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Global memory in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// PCI bus id (`0000:3b:00.0`).
    pub pci_bus_id: String,
    /// Copy engines that run concurrently with kernels.
    pub async_engines: i32,
    /// Unified virtual addressing.
    pub unified_addressing: bool,
    /// Stream-ordered memory pools supported.
    pub memory_pools: bool,
}

/// serde for an `f64` that may be NaN or infinite: JSON has neither, so they travel as `null`
/// and come back as NaN.
pub mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `v`, or `null` when it is not finite.
    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }

    /// Reads a number, `null` as NaN.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

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
    /// How the probes that call into the driver and the runtime went (they run in a child
    /// process under a watchdog).
    pub watchdog: Watchdog,
}

/// The facts build.rs recorded (the library's `runtime::build`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Build {
    /// The crate version.
    pub crate_version: String,
    /// `static`, `dynamic` or `loaded`.
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
    /// The `loaded` mode's own runtimes, where the build made them: `(major, file)`.
    pub own_runtimes: Vec<(u32, String)>,
}

/// Facts about this machine that need no CUDA device.
#[derive(Clone, Debug)]
pub struct Machine {
    /// `cudaRuntimeGetVersion`; None when its probe did not finish (see `Report::watchdog`).
    pub runtime_version: Option<Result<i32, CudaErr>>,
    /// `cudaDriverGetVersion`: the CUDA version the driver supports, 0 without a driver; None
    /// when its probe did not finish.
    pub driver_version: Option<Result<i32, CudaErr>>,
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
    /// `static` (linked in), `dynamic` or `loaded` (opened by the library at run time).
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
    /// Every shared libcudart mapped into this process (`/proc/self/maps`; for `loaded`, into
    /// the probe process once it loaded one).
    pub shared_mapped: Vec<String>,
    /// The `loaded` mode: the library's choice of runtime, made in the probe process; None for
    /// the other modes or when that probe did not run.
    pub loaded: Option<LoadedRuntime>,
}

/// The `loaded` mode's choice of CUDA runtime (the library's `runtime::cudart_library`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadedRuntime {
    /// The file loaded; None when none could be.
    pub path: Option<String>,
    /// Its `cudaRuntimeGetVersion`.
    pub version: Option<i32>,
    /// Why this one, or why none.
    pub why: String,
    /// What the driver told the loader (`cuDriverGetVersion`), or why there is none.
    pub driver: String,
    /// Every place looked at, in order: (place, outcome).
    pub tried: Vec<(String, String)>,
    /// Every shared libcudart mapped into the probe process after the choice.
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Libcuda {
    /// It loads.
    Loaded {
        /// The path the loader used (dladdr of `cuInit`).
        path: String,
        /// That path with links resolved (`libcuda.so.580.95.05`), when different.
        resolved: Option<String>,
    },
    /// `dlopen` failed (or did not finish: the watchdog's words then).
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

/// `cudaGetDeviceCount`, timed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceCount {
    /// The count, or the error explaining why there is none; None when the probe did not
    /// finish (see `Report::watchdog`).
    pub result: Option<Result<i32, Failure>>,
    /// Milliseconds the call took; NaN when it did not finish.
    #[serde(with = "nan_as_null")]
    pub ms: f64,
}

impl DeviceCount {
    /// The count, 0 on error or when not known.
    pub fn count(&self) -> i32 {
        match &self.result {
            Some(Ok(n)) => *n,
            _ => 0,
        }
    }

    /// Not measured: its probe did not finish.
    pub fn unknown() -> DeviceCount {
        DeviceCount {
            result: None,
            ms: f64::NAN,
        }
    }
}

/// One device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Device id.
    pub id: i32,
    /// `cudaGetDeviceProperties` and friends.
    pub properties: Result<DeviceProperties, Failure>,
    /// `cudaMemGetInfo`: (free, total) bytes.
    pub memory: Result<(usize, usize), Failure>,
    /// NVML's view of the device's memory: the processes on it and what each uses, or why NVML
    /// cannot say; None when its probe did not finish.
    #[serde(default)]
    pub nvml: Option<Result<NvmlUsage, String>>,
}

/// A device's memory as NVML (libnvidia-ml.so.1) shows it, asked by the probe process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlUsage {
    /// Total memory of the device.
    pub total_bytes: u64,
    /// Memory in use on the device, by every process.
    pub used_bytes: u64,
    /// The compute processes on the device, in NVML's order.
    pub processes: Vec<ProcessMemory>,
    /// The pid of the process that asked (the doctor's probe process), which holds a context
    /// on the device and so is in the list too.
    pub probe_pid: u32,
}

/// One process's use of a device's memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// Its process id.
    pub pid: u32,
    /// Device memory it uses; None where NVML cannot say (no permission, MIG).
    pub used_bytes: Option<u64>,
}

impl NvmlUsage {
    /// The processes other than the probe process: those the library's out-of-memory report
    /// counts as other processes.
    pub fn others(&self) -> impl Iterator<Item = &ProcessMemory> {
        self.processes.iter().filter(|p| p.pid != self.probe_pid)
    }

    /// What the other processes use, of those whose use NVML can say.
    pub fn others_bytes(&self) -> u64 {
        self.others().filter_map(|p| p.used_bytes).sum()
    }
}

/// Whether `from` can access `to`'s memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerAccess {
    /// Accessing device.
    pub from: i32,
    /// Accessed device.
    pub to: i32,
    /// `cudaDeviceCanAccessPeer`.
    pub result: Result<bool, Failure>,
}

/// The smoke test's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SmokeStatus {
    /// Every step succeeded and the data came back intact.
    Passed,
    /// A step failed or the data differed.
    Failed,
    /// Not run, and why.
    Skipped(String),
}

/// One timed call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The CUDA call.
    pub call: String,
    /// Milliseconds.
    #[serde(with = "nan_as_null")]
    pub ms: f64,
}

/// The smoke test: context creation, then the llaisys table end to end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Smoke {
    /// The device tested.
    pub device: i32,
    /// The outcome.
    pub status: SmokeStatus,
    /// The probe process's first CUDA calls, in order, with their milliseconds: the version
    /// calls (`cudaDriverGetVersion` loads the driver and initialises it) and
    /// `cudaGetDeviceCount`.
    pub first_calls: Vec<Call>,
    /// Context creation (the library's `device::init`: cudaInitDevice, cudaSetDevice,
    /// cudaFree(0)), in milliseconds, or its error: the first call that needs the device, done
    /// explicitly before anything else touches it.
    pub context_ms: Option<Result<f64, Failure>>,
    /// Bytes copied through the table.
    pub bytes: usize,
    /// Each step, in order.
    pub steps: Vec<Step>,
}

impl Smoke {
    /// A smoke test that did not run, and why.
    pub fn skipped(
        device: i32,
        why: impl Into<String>,
        context: Option<Result<f64, Failure>>,
    ) -> Smoke {
        Smoke {
            device,
            status: SmokeStatus::Skipped(why.into()),
            first_calls: Vec::new(),
            context_ms: context,
            bytes: 0,
            steps: Vec::new(),
        }
    }
}

/// One smoke step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// What it did (`memcpy_sync H2D`).
    pub name: String,
    /// Milliseconds.
    #[serde(with = "nan_as_null")]
    pub ms: f64,
    /// The failure, None on success.
    pub error: Option<String>,
}

/// A copy direction and host-memory kind the bench measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyFigure {
    /// Direction and memory.
    pub kind: CopyKind,
    /// Bytes per copy.
    pub size: usize,
    /// Timed repetitions (after one untimed warm-up).
    pub reps: usize,
    /// Median milliseconds, from CUDA events around the copy.
    #[serde(with = "nan_as_null")]
    pub median_ms: f64,
    /// `size / median`, in GB/s (10^9 bytes per second).
    #[serde(with = "nan_as_null")]
    pub gbps: f64,
}

/// An allocation call the bench times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocFigure {
    /// Which call.
    pub kind: AllocKind,
    /// Bytes.
    pub size: usize,
    /// Timed repetitions.
    pub reps: usize,
    /// Median wall-clock microseconds of one call.
    #[serde(with = "nan_as_null")]
    pub median_us: f64,
}

/// The bench's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

/// How one probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeStatus {
    /// It returned.
    Ok,
    /// It did not return within the time limit; the watchdog killed the probe process.
    Hung,
    /// The probe process died in it (a signal, or an exit without finishing).
    Crashed,
}

impl ProbeStatus {
    /// `ok`, `hung`, `crashed`.
    pub fn id(self) -> &'static str {
        match self {
            ProbeStatus::Ok => "ok",
            ProbeStatus::Hung => "hung",
            ProbeStatus::Crashed => "crashed",
        }
    }
}

/// One probe: a call (or a few) into the driver or the runtime, run in the probe process.
#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    /// What it does (`cudaDriverGetVersion`, `smoke: malloc_host`).
    pub name: String,
    /// Milliseconds from its start to its end (or to the watchdog's verdict).
    pub ms: f64,
    /// How it ended.
    pub status: ProbeStatus,
}

/// How the probe process failed.
#[derive(Clone, Debug, PartialEq)]
pub enum How {
    /// A probe did not return within the limit; the process was killed.
    Hung {
        /// The limit, in seconds.
        after_s: f64,
    },
    /// The process died of a signal.
    Signal {
        /// The signal number.
        number: i32,
        /// `SIGSEGV`.
        name: String,
        /// `segmentation fault`.
        words: String,
    },
    /// The process exited without finishing (status).
    Exited {
        /// Its exit status.
        code: i32,
    },
    /// The probe process could not be started or read.
    NotStarted {
        /// Why.
        error: String,
    },
}

/// The probe that hung or crashed.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeFailure {
    /// Its name (`cudaDriverGetVersion`); `start of the probe process` before the first
    /// probe, `exit of the probe process` after the last.
    pub probe: String,
    /// What happened.
    pub how: How,
}

/// The watchdog's account: every probe that touches the driver or the runtime runs in a child
/// process (this program, started again), one probe at a time, each with a time limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Watchdog {
    /// The limit per probe in seconds; None: no limit (`--timeout 0`).
    pub timeout_s: Option<f64>,
    /// Every probe started, in order.
    pub probes: Vec<Probe>,
    /// The probe that hung or crashed, None when all finished.
    pub failure: Option<ProbeFailure>,
    /// What the probe processes wrote on stderr (the driver's or cudart's own messages), cut
    /// to its last 4 KiB.
    pub stderr: String,
}

/// A device for the unit tests of the report's printers: `id`, a Hopper GPU named `name` with
/// `total_gib` GiB at `bus`, `free_gib` free, and `nvml`.
#[cfg(test)]
pub(crate) fn sample_device(
    id: i32,
    name: &str,
    bus: &str,
    (free_gib, total_gib): (usize, usize),
    nvml: Option<Result<NvmlUsage, String>>,
) -> DeviceReport {
    DeviceReport {
        id,
        properties: Ok(DeviceProperties {
            name: name.into(),
            compute_capability: (9, 0),
            total_memory: total_gib << 30,
            multiprocessors: 132,
            pci_bus_id: bus.into(),
            async_engines: 3,
            unified_addressing: true,
            memory_pools: true,
        }),
        memory: Ok((free_gib << 30, total_gib << 30)),
        nvml,
    }
}

//! The names of the probes and of the probe process's phases: what the probe process announces
//! (`protocol`), what the watchdog records, what the report and the diagnosis name. One list, so
//! that the process that makes a probe and the code that explains it agree on its name.

/// Which probes a probe process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Group {
    /// `dlopen("libcuda.so.1")` and where it came from.
    Libcuda,
    /// Every cudart call of the report.
    Cuda,
}

impl Group {
    /// The value of `--probe-process`.
    pub fn arg(self) -> &'static str {
        match self {
            Group::Libcuda => "libcuda",
            Group::Cuda => "cuda",
        }
    }
}

/// The phase before the first probe announced itself (the process starting: the dynamic
/// loader, libraries' initialisers).
pub const STARTING: &str = "start of the probe process";
/// The phase after the last probe (exit handlers: cudart's and the driver's teardown).
pub const EXITING: &str = "exit of the probe process";

/// This program's own `dlopen` of the driver's library (group `libcuda`).
pub const LIBCUDA: &str = "dlopen libcuda.so.1";
/// The `loaded` mode: the library finds and opens a CUDA runtime (it asks libcuda.so.1 for the
/// driver's CUDA version first).
pub const LOAD_CUDART: &str = "load the CUDA runtime";
/// cudart's first call, which needs no driver.
pub const RUNTIME_VERSION: &str = "cudaRuntimeGetVersion";
/// cudart loads libcuda.so.1 here and calls the driver's `cuInit`.
pub const DRIVER_VERSION: &str = "cudaDriverGetVersion";
/// Counting the devices.
pub const DEVICE_COUNT: &str = "cudaGetDeviceCount";
/// The peer-access matrix.
pub const PEER_ACCESS: &str = "peer access";
/// The start of [`context`]'s names.
pub const CONTEXT_PREFIX: &str = "context on device ";
/// The start of [`device`]'s names.
pub const DEVICE_PREFIX: &str = "device ";
/// The start of [`nvml`]'s names.
pub const NVML_PREFIX: &str = "NVML on device ";
/// The start of [`smoke`]'s names.
pub const SMOKE_PREFIX: &str = "smoke: ";
/// The start of the bench's measurements (`bench: H2D pinned 4 KiB (1/45)`), which are its
/// progress lines too.
pub const BENCH_PREFIX: &str = "bench: ";

/// Context creation on `device`: `context on device 0`.
pub fn context(device: i32) -> String {
    format!("{CONTEXT_PREFIX}{device}")
}

/// Reading device `id`'s properties and free memory: `device 0`.
pub fn device(id: i32) -> String {
    format!("{DEVICE_PREFIX}{id}")
}

/// NVML's list of the processes on device `id` and their memory (the first loads and starts
/// NVML): `NVML on device 0`.
pub fn nvml(id: i32) -> String {
    format!("{NVML_PREFIX}{id}")
}

/// A step of the smoke test: `smoke: malloc_host`.
pub fn smoke(step: &str) -> String {
    format!("{SMOKE_PREFIX}{step}")
}

/// Whether `name` is a phase of the probe process rather than a probe.
pub fn is_phase(name: &str) -> bool {
    name == STARTING || name == EXITING
}

//! The diagnosis: from the evidence, the causes of what is wrong, each in plain words with its
//! fix, and the verdict that sets the exit status. Pure logic, so that tests can feed it
//! evidence this machine cannot show (a driver too old, hidden GPUs, locked device nodes).

use crate::backend::version_string;
use crate::evidence::Evidence;
use crate::exit;
use crate::names::{
    BENCH_PREFIX, CONTEXT_PREFIX, DEVICE_COUNT, DEVICE_PREFIX, DRIVER_VERSION, EXITING, LIBCUDA,
    LOAD_CUDART, NVML_PREFIX, PEER_ACCESS, RUNTIME_VERSION, SMOKE_PREFIX, STARTING,
};
use crate::options::{seconds, TIMEOUT_ENV};
use crate::report::{CudaErr, DeviceNode, How, Libcuda, LoaderAnswer, ProbeFailure};

/// What is wrong (or worth knowing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A probe did not return within the watchdog's time limit.
    ProbeHung,
    /// The probe process died (a signal, or an exit) during a probe.
    ProbeCrashed,
    /// The probe process could not be started.
    ProbeNotStarted,
    /// `libcuda.so.1` cannot be loaded: no driver.
    NoDriver,
    /// The driver supports an older CUDA than the runtime needs.
    DriverTooOld,
    /// The driver supports an older CUDA than the runtime, which works through CUDA's
    /// minor-version compatibility with fewer features (a note).
    DriverOlderThanRuntime,
    /// A libcuda loads but does not work (the toolkit's stub, a version mismatch...).
    DriverUnusable,
    /// The driver works but there is no CUDA device.
    NoDevice,
    /// `CUDA_VISIBLE_DEVICES` hides every GPU the machine has.
    HiddenByVisibleDevices,
    /// `CUDA_VISIBLE_DEVICES` hides some of the GPUs (a note).
    PartlyHiddenByVisibleDevices,
    /// `/dev/nvidia*` missing or not accessible to this user.
    DeviceNodesInaccessible,
    /// Dynamic feature: the loader finds no shared libcudart without `LD_LIBRARY_PATH`.
    SharedCudartNotFound,
    /// Dynamic feature: libcudart comes from elsewhere than the folder the build linked (a note).
    SharedCudartElsewhere,
    /// The loaded libcudart is older than the headers the crate was built against.
    RuntimeOlderThanHeaders,
    /// Two cudarts in one process.
    MixedCudart,
    /// The `loaded` mode found no CUDA runtime it could load (the driver is not the reason).
    NoCudaRuntime,
    /// A check (a device query, the smoke test, the bench) failed.
    CheckFailed,
}

impl Cause {
    /// The stable name used in the JSON (`no_driver`).
    pub fn id(self) -> &'static str {
        match self {
            Cause::ProbeHung => "probe_hung",
            Cause::ProbeCrashed => "probe_crashed",
            Cause::ProbeNotStarted => "probe_not_started",
            Cause::NoDriver => "no_driver",
            Cause::DriverTooOld => "driver_too_old",
            Cause::DriverOlderThanRuntime => "driver_older_than_runtime",
            Cause::DriverUnusable => "driver_unusable",
            Cause::NoDevice => "no_device",
            Cause::HiddenByVisibleDevices => "hidden_by_cuda_visible_devices",
            Cause::PartlyHiddenByVisibleDevices => "partly_hidden_by_cuda_visible_devices",
            Cause::DeviceNodesInaccessible => "device_nodes_inaccessible",
            Cause::SharedCudartNotFound => "shared_cudart_not_found",
            Cause::SharedCudartElsewhere => "shared_cudart_elsewhere",
            Cause::RuntimeOlderThanHeaders => "runtime_older_than_headers",
            Cause::MixedCudart => "mixed_cudart",
            Cause::NoCudaRuntime => "no_cuda_runtime",
            Cause::CheckFailed => "check_failed",
        }
    }

    /// The verdict this cause gives when it is an error.
    pub fn status(self) -> Status {
        match self {
            Cause::ProbeHung | Cause::ProbeCrashed | Cause::ProbeNotStarted => Status::ProbeFailed,
            Cause::NoDriver | Cause::DriverTooOld | Cause::DriverUnusable => Status::NoDriver,
            Cause::NoDevice | Cause::HiddenByVisibleDevices | Cause::DeviceNodesInaccessible => {
                Status::NoDevice
            }
            _ => Status::CheckFailed,
        }
    }
}

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// CUDA does not work here, or a check failed: sets the exit status.
    Error,
    /// Works now, but will break somewhere or sometime.
    Warning,
    /// Worth knowing.
    Note,
}

impl Severity {
    /// `error`, `warning`, `note`.
    pub fn id(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// One cause, in plain words, with its fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The cause.
    pub cause: Cause,
    /// How much it matters.
    pub severity: Severity,
    /// What is wrong and the evidence, in plain words.
    pub summary: String,
    /// What to do.
    pub fix: String,
}

/// The overall verdict, which is the exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Everything works (exit 0).
    Healthy,
    /// A probe hung or crashed: the driver or the runtime did not answer (exit 5).
    ProbeFailed,
    /// No usable NVIDIA driver: none, too old, or broken (exit 2).
    NoDriver,
    /// A driver but no usable device: none, hidden, or locked device nodes (exit 3).
    NoDevice,
    /// A check failed (exit 4).
    CheckFailed,
}

impl Status {
    /// The process exit status (`exit`).
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Healthy => exit::HEALTHY,
            Status::ProbeFailed => exit::PROBE_FAILED,
            Status::NoDriver => exit::NO_DRIVER,
            Status::NoDevice => exit::NO_DEVICE,
            Status::CheckFailed => exit::CHECK_FAILED,
        }
    }

    /// `healthy`, `probe_failed`, `no_driver`, `no_device`, `check_failed`.
    pub fn id(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::ProbeFailed => "probe_failed",
            Status::NoDriver => "no_driver",
            Status::NoDevice => "no_device",
            Status::CheckFailed => "check_failed",
        }
    }

    /// In words.
    pub fn words(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::ProbeFailed => "a probe hung or crashed",
            Status::NoDriver => "no NVIDIA driver usable",
            Status::NoDevice => "no CUDA device usable",
            Status::CheckFailed => "a check failed",
        }
    }
}

/// The findings and the verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    /// Every finding, errors first.
    pub findings: Vec<Finding>,
    /// The verdict: the most basic error's, or healthy.
    pub status: Status,
}

impl Default for Diagnosis {
    fn default() -> Diagnosis {
        Diagnosis {
            findings: Vec::new(),
            status: Status::Healthy,
        }
    }
}

impl Diagnosis {
    /// The findings of `cause`.
    pub fn find(&self, cause: Cause) -> Option<&Finding> {
        self.findings.iter().find(|f| f.cause == cause)
    }
}

/// Diagnoses `ev`.
pub fn diagnose(ev: &Evidence) -> Diagnosis {
    let mut f = Vec::new();
    if let Some(pf) = &ev.probe_failure {
        f.push(probe_failure(ev, pf));
    }
    let no_runtime = no_cuda_runtime(ev);
    match &ev.device_count {
        // Not known: the probe failure above says why.
        None => {}
        // The `loaded` mode loaded no runtime for a reason other than the driver: that is the
        // cause, not the devices.
        Some(Err(e)) if no_runtime.is_some() && e.code != CudaErr::INSUFFICIENT_DRIVER => {}
        Some(Ok(n)) if *n > 0 => partly_hidden(ev, *n, &mut f),
        Some(Err(e)) if e.code == CudaErr::INSUFFICIENT_DRIVER => f.push(insufficient_driver(ev)),
        Some(Err(e)) if e.code == CudaErr::STUB_LIBRARY => f.push(stub_library(ev)),
        Some(Ok(_)) => f.push(no_device(ev, None)),
        Some(Err(e)) => f.push(no_device(ev, Some(e))),
    }
    f.extend(no_runtime);
    older_driver_note(ev, &mut f);
    libcudart(ev, &mut f);
    for (what, error) in &ev.failed_checks {
        f.push(Finding {
            cause: Cause::CheckFailed,
            severity: Severity::Error,
            summary: format!("check failed: {what}: {error}"),
            fix: "Read the CUDA error above: it names the call and its arguments. Run \
                  `nvidia-smi` to see the device's state (memory in use, errors, another \
                  process holding it in exclusive mode), and `dmesg | grep -i nvrm` for Xid \
                  errors; rerun with CUDA_LAUNCH_BLOCKING=1 to pin an asynchronous error to its \
                  call."
                .into(),
        });
    }
    f.sort_by_key(|x| x.severity);
    let status = f
        .iter()
        .filter(|x| x.severity == Severity::Error)
        .map(|x| x.cause.status())
        .min()
        .unwrap_or(Status::Healthy);
    Diagnosis {
        findings: f,
        status,
    }
}

/// The oldest NVIDIA Linux driver branch for a CUDA major version: a runtime of that major
/// version runs on it through CUDA's minor-version compatibility (NVIDIA's CUDA Compatibility
/// guide: 13.x >= 580, 12.x >= 525, 11.x >= 450.80.02).
pub fn minimum_driver(cuda_major: i32) -> Option<&'static str> {
    match cuda_major {
        13 => Some("580"),
        12 => Some("525"),
        11 => Some("450.80.02"),
        _ => None,
    }
}

/// The driver branch of the toolkit release of `runtime`, which has every feature of that
/// runtime (the release notes' "toolkit driver"); None where this table does not know it.
pub fn full_feature_driver(runtime: i32) -> Option<&'static str> {
    match runtime {
        12090 => Some("575"),
        13000 => Some("580"),
        _ => None,
    }
}

/// The driver the runtime of `ev` needs: "580 or newer (a driver that supports CUDA 13.0)".
fn needed_driver(ev: &Evidence) -> String {
    let Some(r) = ev.runtime_version.filter(|&r| r > 0) else {
        return "a driver that supports this program's CUDA runtime".into();
    };
    match minimum_driver(r / 1000) {
        Some(d) => format!("{d} or newer (a driver that supports CUDA {}.0)", r / 1000),
        None => format!("a driver that supports CUDA {}", version_string(r)),
    }
}

/// "this program's CUDA 13.0 runtime".
fn runtime_words(ev: &Evidence) -> String {
    match ev.runtime_version.filter(|&r| r > 0) {
        Some(r) => format!("this program's CUDA {} runtime", version_string(r)),
        None => "this program's CUDA runtime".into(),
    }
}

/// The project's other build, for a driver too old for this one: a CUDA 13 runtime's driver
/// may still serve the CUDA 12.9 build, through minor-version compatibility. None when that
/// would not help (the runtime is 12.x already, or the driver is older than CUDA 12).
fn older_driver_build(ev: &Evidence) -> Option<String> {
    let r = ev.runtime_version.filter(|&r| r > 0)?;
    if r / 1000 < 13 {
        return None;
    }
    if ev.driver_version.is_some_and(|d| d > 0 && d < 12000) {
        return None;
    }
    Some(
        "the CUDA 12.9 build serves older drivers, from 525 on, through CUDA's minor-version \
         compatibility (575 or newer for every CUDA 12.9 feature): run `bash \
         scripts/bootstrap.sh --cuda12`, then build with `CUDA_HOME=$PWD/.deps/cuda12 cargo \
         build --release` (`CUDA_HOME=$PWD/.deps/cuda12 bash scripts/run.sh` runs this doctor \
         from that build)"
            .into(),
    )
}

fn libcuda_words(ev: &Evidence) -> String {
    match &ev.libcuda {
        Libcuda::Loaded { path, resolved } => match resolved {
            Some(r) => format!("libcuda.so.1 loads from {path} ({r})"),
            None => format!("libcuda.so.1 loads from {path}"),
        },
        Libcuda::NotLoadable { error } => format!("libcuda.so.1 cannot be loaded ({error})"),
    }
}

fn module_words(ev: &Evidence) -> String {
    match &ev.kernel_module {
        Some(v) => format!("kernel module {v} loaded"),
        None => "no NVIDIA kernel module loaded (/proc/driver/nvidia/version absent)".into(),
    }
}

fn install_driver_fix(ev: &Evidence) -> String {
    let need = ev
        .runtime_version
        .and_then(|r| minimum_driver(r / 1000).map(|d| (r, d)));
    let (which, branch) = match need {
        Some((r, d)) => (
            format!(
                "driver {d} or newer (this program's CUDA runtime is {})",
                version_string(r)
            ),
            d.split('.').next().unwrap_or(d),
        ),
        None => ("a recent driver".into(), "<branch>"),
    };
    format!(
        "Install the NVIDIA {which}: on Debian/Ubuntu `sudo apt-get install nvidia-driver-{branch}` \
         (or NVIDIA's .run installer), then check with `nvidia-smi`. In a container, start it \
         with the NVIDIA Container Toolkit (`docker run --gpus all ...`), which mounts \
         libcuda.so.1 and /dev/nvidia* into it. If the driver is installed but in a folder the \
         loader does not search, add that folder to /etc/ld.so.conf.d/ and run `ldconfig`."
    )
}

fn insufficient_driver(ev: &Evidence) -> Finding {
    let runtime = ev.runtime_version.unwrap_or(0);
    let driver = ev.driver_version.unwrap_or(0);
    if let Libcuda::NotLoadable { error } = &ev.libcuda {
        let module = if ev.kernel_module.is_some() {
            format!(
                " The {} all the same: the driver's user-space part is missing or not on the \
                 loader's path.",
                module_words(ev)
            )
        } else {
            String::new()
        };
        return Finding {
            cause: Cause::NoDriver,
            severity: Severity::Error,
            summary: format!(
                "no NVIDIA driver: libcuda.so.1, the driver's library that CUDA loads, cannot be \
                 loaded (dlopen says: {error}), so cudaGetDeviceCount returns \
                 cudaErrorInsufficientDriver (35) and cudaDriverGetVersion {driver}.{module}"
            ),
            fix: install_driver_fix(ev),
        };
    }
    let other_build = older_driver_build(ev)
        .map(|b| format!(" Or keep this driver: {b}."))
        .unwrap_or_default();
    if driver > 0 && runtime > 0 && driver < runtime {
        let (rv, dv) = (version_string(runtime), version_string(driver));
        return Finding {
            cause: Cause::DriverTooOld,
            severity: Severity::Error,
            summary: format!(
                "driver too old for the runtime: the NVIDIA driver ({}; {}) supports CUDA {dv}, \
                 but {} needs NVIDIA driver {}; cudaGetDeviceCount returns \
                 cudaErrorInsufficientDriver (35).",
                libcuda_words(ev),
                module_words(ev),
                runtime_words(ev),
                needed_driver(ev),
            ),
            fix: format!(
                "Upgrade the NVIDIA driver to {} and reboot (or reload the nvidia kernel \
                 module); check with `nvidia-smi`.{other_build} A driver serves every runtime of \
                 its own CUDA major version and older ones; a runtime of a newer major version \
                 needs a newer driver (CUDA {rv} needs {}.x, this driver has {dv}).",
                needed_driver(ev),
                runtime / 1000,
            ),
        };
    }
    let reported = match ev.driver_version {
        Some(0) | None => "but cudart could not read a CUDA version from it".to_string(),
        Some(d) => format!("and it reports CUDA {}", version_string(d)),
    };
    Finding {
        cause: Cause::DriverUnusable,
        severity: Severity::Error,
        summary: format!(
            "NVIDIA driver unusable: {} {reported}, yet cudaGetDeviceCount returns \
             cudaErrorInsufficientDriver (35): {} needs NVIDIA driver {} ({}).",
            libcuda_words(ev),
            runtime_words(ev),
            needed_driver(ev),
            module_words(ev)
        ),
        fix: format!(
            "Check that libcuda.so.1 belongs to the installed driver (`nvidia-smi` shows the \
             driver version; the libcuda file name carries it) and that no other libcuda.so.1 \
             comes first on LD_LIBRARY_PATH; reinstall the driver if they differ, or upgrade it \
             to {}.{other_build}",
            needed_driver(ev)
        ),
    }
}

/// A driver older than the runtime that works all the same (minor-version compatibility).
fn older_driver_note(ev: &Evidence, f: &mut Vec<Finding>) {
    let (Some(r), Some(d)) = (ev.runtime_version, ev.driver_version) else {
        return;
    };
    let insufficient =
        matches!(&ev.device_count, Some(Err(e)) if e.code == CudaErr::INSUFFICIENT_DRIVER);
    if d <= 0 || d >= r || insufficient || ev.device_count.is_none() {
        return;
    }
    let full = full_feature_driver(r).map_or_else(
        || format!("a driver that supports CUDA {}", version_string(r)),
        |b| format!("driver {b} or newer"),
    );
    f.push(Finding {
        cause: Cause::DriverOlderThanRuntime,
        severity: Severity::Note,
        summary: format!(
            "the driver supports CUDA {}, older than this program's CUDA {} runtime: it runs \
             through CUDA's minor-version compatibility, but calls that need a newer driver fail \
             with cudaErrorCallRequiresNewerDriver (36).",
            version_string(d),
            version_string(r)
        ),
        fix: format!(
            "Nothing, if everything used works; {full} has every CUDA {} feature.",
            version_string(r)
        ),
    });
}

fn stub_library(ev: &Evidence) -> Finding {
    Finding {
        cause: Cause::DriverUnusable,
        severity: Severity::Error,
        summary: format!(
            "no NVIDIA driver: the libcuda this process loaded is the CUDA toolkit's stub \
             (cudaGetDeviceCount returns cudaErrorStubLibrary, 34): {}. The stub exists only to \
             link against and has no driver behind it.",
            libcuda_words(ev)
        ),
        fix: format!(
            "Remove the toolkit's `stubs` folder from LD_LIBRARY_PATH (and from ld.so.conf), and \
             install the real driver if there is none. {}",
            install_driver_fix(ev)
        ),
    }
}

/// The physical GPU count, from /proc or the device nodes.
fn gpus_words(ev: &Evidence) -> String {
    match ev.gpus_on_host {
        Some(1) => "1 NVIDIA GPU".into(),
        Some(n) => format!("{n} NVIDIA GPUs"),
        None => "no NVIDIA GPU that the kernel shows".into(),
    }
}

/// Explains each entry of CUDA_VISIBLE_DEVICES against `gpus` physical GPUs, and says whether
/// the value can hide every GPU (empty, a negative or missing index, a UUID that cannot be
/// checked here, or text CUDA does not read). A list of valid indices hides nothing.
pub fn explain_visible_devices(value: &str, gpus: Option<usize>) -> (String, bool) {
    let v = value.trim();
    if v.is_empty() {
        return (
            "it is empty, which CUDA reads as \"no device\"".into(),
            true,
        );
    }
    let mut parts = Vec::new();
    let mut hides = false;
    for entry in v.split(',').map(str::trim) {
        let words = if let Ok(i) = entry.parse::<i64>() {
            match gpus {
                _ if i < 0 => {
                    hides = true;
                    format!("{entry} means no device (CUDA stops at it)")
                }
                Some(n) if i as u128 >= n as u128 => {
                    hides = true;
                    format!(
                        "{entry} names a GPU this machine does not have (indices 0..{}), so \
                         CUDA stops reading there",
                        n.saturating_sub(1)
                    )
                }
                _ => format!("{entry} is a valid index"),
            }
        } else if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            hides = true;
            format!("{entry} is a UUID: compare it with `nvidia-smi -L`")
        } else {
            hides = true;
            format!(
                "'{entry}' is neither an index nor a GPU-/MIG- UUID, so CUDA stops reading there"
            )
        };
        parts.push(words);
    }
    (parts.join("; "), hides)
}

fn partly_hidden(ev: &Evidence, seen: i32, f: &mut Vec<Finding>) {
    let (Some(cvd), Some(gpus)) = (&ev.visible_devices, ev.gpus_on_host) else {
        return;
    };
    if gpus > seen as usize {
        f.push(Finding {
            cause: Cause::PartlyHiddenByVisibleDevices,
            severity: Severity::Note,
            summary: format!(
                "CUDA_VISIBLE_DEVICES={cvd} shows {seen} of this machine's {}; CUDA numbers the \
                 ones it shows from 0.",
                gpus_words(ev)
            ),
            fix: "Nothing, if that is intended; unset CUDA_VISIBLE_DEVICES to use every GPU."
                .into(),
        });
    }
}

/// Nodes CUDA needs that are missing or locked: (missing, locked).
fn node_trouble(ev: &Evidence) -> (Vec<&DeviceNode>, Vec<&DeviceNode>) {
    let numbered: Vec<&DeviceNode> = ev
        .device_nodes
        .iter()
        .filter(|n| {
            n.path
                .trim_start_matches("/dev/nvidia")
                .parse::<u32>()
                .is_ok()
        })
        .collect();
    let ctl = ev.device_nodes.iter().find(|n| n.path == "/dev/nvidiactl");
    let mut missing = Vec::new();
    let mut locked = Vec::new();
    match ctl {
        Some(c) if !c.exists => missing.push(c),
        Some(c) if !c.accessible => locked.push(c),
        _ => {}
    }
    if let Some(u) = ev.device_nodes.iter().find(|n| n.path == "/dev/nvidia-uvm") {
        if u.exists && !u.accessible {
            locked.push(u);
        }
    }
    if !numbered.is_empty() && numbered.iter().all(|n| !n.accessible) {
        locked.extend(numbered);
    }
    (missing, locked)
}

/// No device: `error` is cudaGetDeviceCount's, None when it answered 0.
fn no_device(ev: &Evidence, error: Option<&CudaErr>) -> Finding {
    let code = match error {
        Some(e) => format!("cudaGetDeviceCount returns {} ({})", e.name, e.code),
        None => "cudaGetDeviceCount answers 0 devices".to_string(),
    };
    if let (Some(cvd), Some(n)) = (&ev.visible_devices, ev.gpus_on_host) {
        let (entries, hides) = explain_visible_devices(cvd, Some(n));
        if n > 0 && hides {
            return Finding {
                cause: Cause::HiddenByVisibleDevices,
                severity: Severity::Error,
                summary: format!(
                    "devices hidden by CUDA_VISIBLE_DEVICES: this machine has {}, but \
                     CUDA_VISIBLE_DEVICES={cvd} hides every one ({code}). Entry by entry: \
                     {entries}.",
                    gpus_words(ev),
                ),
                fix: format!(
                    "Unset CUDA_VISIBLE_DEVICES to see every GPU, or set it to indices from 0 to \
                     {} or to UUIDs from `nvidia-smi -L` (for example CUDA_VISIBLE_DEVICES=0).",
                    n.saturating_sub(1)
                ),
            };
        }
    }
    let driver_present = matches!(ev.libcuda, Libcuda::Loaded { .. });
    let (missing, locked) = node_trouble(ev);
    if driver_present && (!missing.is_empty() || !locked.is_empty()) {
        let mut what = Vec::new();
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|n| n.path.as_str()).collect();
            what.push(format!(
                "{} does not exist ({})",
                names.join(", "),
                module_words(ev)
            ));
        }
        if !locked.is_empty() {
            let names: Vec<String> = locked
                .iter()
                .map(|n| format!("{} (mode {:o}, owner {}:{})", n.path, n.mode, n.uid, n.gid))
                .collect();
            what.push(format!(
                "this user (uid {}) may not open {} for reading and writing",
                ev.uid,
                names.join(", ")
            ));
        }
        return Finding {
            cause: Cause::DeviceNodesInaccessible,
            severity: Severity::Error,
            summary: format!(
                "device nodes not accessible: the driver's library is installed ({}), but \
                 {}; {code}.",
                libcuda_words(ev),
                what.join(", and ")
            ),
            fix: "If a node is missing: load the kernel module (`sudo modprobe nvidia`, or \
                  reboot after installing the driver; running `nvidia-smi` as root creates the \
                  nodes), or in a container pass the GPUs in (`docker run --gpus all`, or \
                  `--device /dev/nvidiactl --device /dev/nvidia-uvm --device /dev/nvidia0`). If \
                  a node is locked: add this user to the group that owns it (`ls -l \
                  /dev/nvidia*`; often `sudo usermod -aG video $USER`, then log in again), or \
                  fix the udev rule or the container's device permissions."
                .into(),
        };
    }
    if !driver_present {
        return Finding {
            cause: Cause::NoDriver,
            severity: Severity::Error,
            summary: format!("no NVIDIA driver: {}; {code}.", libcuda_words(ev)),
            fix: install_driver_fix(ev),
        };
    }
    if let Some(error) = error.filter(|e| e.code != CudaErr::NO_DEVICE) {
        return Finding {
            cause: Cause::DriverUnusable,
            severity: Severity::Error,
            summary: format!(
                "CUDA cannot start: {code}: {}. {}; {}; the driver supports CUDA {}.",
                error.description,
                libcuda_words(ev),
                module_words(ev),
                version_string(ev.driver_version.unwrap_or(0))
            ),
            fix: format!(
                "{}Run `nvidia-smi`: \"Driver/library version mismatch\" means the kernel \
                 module and libcuda come from different driver versions (reboot, or reload the \
                 module); otherwise see `sudo dmesg | grep -i -e nvrm -e xid` for the driver's \
                 own error.",
                if error.code == 2 {
                    "The driver ran out of memory while initialising: check free host memory \
                     (`free -h`), the locked-memory limit (`ulimit -l`) and GPU memory held by \
                     other processes (`nvidia-smi`). "
                } else {
                    ""
                }
            ),
        };
    }
    Finding {
        cause: Cause::NoDevice,
        severity: Severity::Error,
        summary: format!(
            "driver present but no device: {} and supports CUDA {}, {}, yet {code}: the kernel \
             shows {}.",
            libcuda_words(ev),
            version_string(ev.driver_version.unwrap_or(0)),
            module_words(ev),
            gpus_words(ev)
        ),
        fix: "Run `nvidia-smi`: if it lists no GPU, this machine (or VM, or container) has none \
              attached, or the driver does not support it (`dmesg | grep -i nvrm` says why); \
              a VM needs the GPU passed through, a container needs `--gpus all` (check \
              NVIDIA_VISIBLE_DEVICES if it is set)."
            .into(),
    }
}

/// The `loaded` mode without a runtime, when the driver is not the reason (a driver too old for
/// every runtime answers cudaErrorInsufficientDriver, which the driver's findings explain).
fn no_cuda_runtime(ev: &Evidence) -> Option<Finding> {
    let loaded = ev.libcudart.loaded.as_ref()?;
    if loaded.path.is_some() || loaded.version.is_some() {
        return None;
    }
    if let Some(Err(e)) = &ev.device_count {
        if e.code == CudaErr::INSUFFICIENT_DRIVER {
            return None;
        }
    }
    Some(Finding {
        cause: Cause::NoCudaRuntime,
        severity: Severity::Error,
        summary: format!("no CUDA runtime could be loaded: {}", loaded.why),
        fix: "Install a CUDA runtime where the library looks: `python3 -m pip install \
              nvidia-cuda-runtime` (CUDA 13, driver 580 or newer) or `python3 -m pip install \
              nvidia-cuda-runtime-cu12` (CUDA 12, driver 525 or newer) for the Python on PATH \
              (or LLAISYS_NVIDIA_PYTHON), or the system's CUDA toolkit; or set \
              LLAISYS_NVIDIA_CUDART_LIBRARY to a libcudart.so.13 or .so.12, or to its folder."
            .into(),
    })
}

fn libcudart(ev: &Evidence, f: &mut Vec<Finding>) {
    let lc = &ev.libcudart;
    if ev.link_mode == "loaded" {
        // One runtime of the process: the one the library opened; the dispatch serves both
        // majors, so no comparison with the headers' version.
        let mapped = lc
            .loaded
            .as_ref()
            .map_or(&lc.shared_mapped, |l| &l.shared_mapped);
        if mapped.len() > 1 {
            f.push(mixed(mapped, "two shared libcudart files are loaded"));
        }
        return;
    }
    if ev.link_mode == "dynamic" {
        let lib = std::path::Path::new(&lc.built_path)
            .file_name()
            .map_or_else(|| "libcudart".into(), |n| n.to_string_lossy().into_owned());
        if lc.without_ld_library_path == LoaderAnswer::NotFound {
            let built = if lc.built_path_exists {
                format!("{} exists", lc.built_path)
            } else {
                format!("{} no longer exists", lc.built_path)
            };
            f.push(Finding {
                cause: Cause::SharedCudartNotFound,
                severity: Severity::Warning,
                summary: format!(
                    "shared libcudart not found without LD_LIBRARY_PATH: asked for this program \
                     with LD_LIBRARY_PATH removed, the loader answers `{lib} => not found` (the \
                     build linked {}: {built}). This run started only because LD_LIBRARY_PATH \
                     leads to {}; this build's other programs and libllaisys_nvidia.so fail to \
                     start where it is not set (\"error while loading shared libraries: {lib}\").",
                    lc.built_path,
                    lc.loaded_from.as_deref().unwrap_or("a libcudart")
                ),
                fix: format!(
                    "Restore the library the build linked (`bash scripts/bootstrap.sh`, then \
                     rebuild), or copy {lib} next to the program and libllaisys_nvidia.so (their \
                     rpath has $ORIGIN), or add its folder to /etc/ld.so.conf.d/ and run \
                     `ldconfig`; or build with the static feature (the default), which needs no \
                     shared libcudart at run time."
                ),
            });
        }
        if let (Some(from), Some(via)) = (&lc.loaded_from, &lc.found_via) {
            if from != &lc.built_path && !via.starts_with("the rpath") {
                f.push(Finding {
                    cause: Cause::SharedCudartElsewhere,
                    severity: Severity::Note,
                    summary: format!(
                        "libcudart comes from {from}, found through {via}, not from {} that the \
                         build linked.",
                        lc.built_path
                    ),
                    fix: "Nothing, if that library is the CUDA you mean to use; the runtime \
                          version above is the one in use."
                        .into(),
                });
            }
        }
        let distinct = lc.shared_mapped.len();
        if distinct > 1 {
            f.push(mixed(
                &lc.shared_mapped,
                "two shared libcudart files are loaded",
            ));
        }
    } else if !lc.shared_mapped.is_empty() {
        f.push(mixed(
            &lc.shared_mapped,
            "a shared libcudart is loaded besides the static one linked into this program",
        ));
    }
    if let Some(r) = ev.runtime_version {
        if r > 0 && r < ev.built_cudart_version {
            f.push(Finding {
                cause: Cause::RuntimeOlderThanHeaders,
                severity: Severity::Warning,
                summary: format!(
                    "the libcudart in use is CUDA {}, older than the headers this crate was \
                     built against (CUDA {}): calls added in between fail or are missing.",
                    version_string(r),
                    version_string(ev.built_cudart_version)
                ),
                fix: format!(
                    "Put a libcudart of CUDA {} or newer first on the loader's path, or rebuild \
                     against CUDA {}.",
                    version_string(ev.built_cudart_version),
                    version_string(r)
                ),
            });
        }
    }
}

fn mixed(paths: &[String], what: &str) -> Finding {
    Finding {
        cause: Cause::MixedCudart,
        severity: Severity::Warning,
        summary: format!(
            "{what} ({}): each cudart keeps its own state (current device, streams, last \
             error) and they meet only in the driver's per-thread context.",
            paths.join(", ")
        ),
        fix: "Keep one cudart per process: build this crate with the dynamic feature to share \
              the host's libcudart, or keep the host from loading its own."
            .into(),
    }
}

/// What a probe does, for the finding about it.
fn probe_does(probe: &str) -> &'static str {
    match probe {
        LIBCUDA => "this program's own dlopen of the driver's library, which runs its initialisers",
        LOAD_CUDART => "the library's choice of CUDA runtime: libcuda.so.1's cuDriverGetVersion, then opening a libcudart",
        RUNTIME_VERSION => "cudart's first call, which needs no driver",
        DRIVER_VERSION => "cudart loads libcuda.so.1 here and calls the driver's cuInit: the driver's initialisation",
        DEVICE_COUNT => "counting the devices",
        PEER_ACCESS => "asking which devices can reach each other's memory",
        STARTING => "the probe process starting, before its first probe (the dynamic loader, library initialisers)",
        EXITING => "the probe process exiting after its last probe (cudart's and the driver's teardown)",
        p if p.starts_with(CONTEXT_PREFIX) => "creating the device's context",
        p if p.starts_with(DEVICE_PREFIX) => "reading the device's properties and free memory (which creates its context)",
        p if p.starts_with(NVML_PREFIX) => "NVML (libnvidia-ml.so.1, loaded and started by the first of these) listing the processes on the device and their memory",
        p if p.starts_with(SMOKE_PREFIX) => "a call of the llaisys table in the smoke test",
        p if p.starts_with(BENCH_PREFIX) => "a measurement of the bench",
        _ => "a call into the driver or the runtime",
    }
}

/// Whether a probe is work on a device (after the driver came up) rather than the driver's
/// loading and initialisation.
fn device_work(probe: &str) -> bool {
    probe.starts_with(SMOKE_PREFIX) || probe.starts_with(BENCH_PREFIX) || probe == PEER_ACCESS
}

fn stderr_words(ev: &Evidence) -> String {
    let t = ev.probe_stderr.trim();
    if t.is_empty() {
        " It wrote nothing on stderr.".into()
    } else {
        format!(" It wrote on stderr: \"{}\".", t.replace('\n', " | "))
    }
}

fn probe_failure(ev: &Evidence, pf: &ProbeFailure) -> Finding {
    let probe = &pf.probe;
    let does = probe_does(probe);
    let setup = format!("{}; {}.", libcuda_words(ev), module_words(ev));
    let check_driver = format!(
        "Run `nvidia-smi`: if it hangs or fails too, the driver or a GPU is stuck: look for Xid \
         errors (`sudo dmesg | grep -i -e xid -e nvrm`) and for processes stuck in state D \
         (`ps -eo pid,stat,cmd | grep -w D`), then reset the GPU (`sudo nvidia-smi -r`) or \
         reboot. If `nvidia-smi` works, the libcuda.so.1 this program loads may not be the \
         installed driver's: {}; check LD_LIBRARY_PATH and LD_PRELOAD, and that `ldconfig -p \
         | grep libcuda` names the driver whose version the kernel module has (`cat \
         /proc/driver/nvidia/version`).",
        libcuda_words(ev)
    );
    let (cause, summary, fix) = match &pf.how {
        How::Hung { after_s } => {
            let slow = format!(
                " A slow first initialisation (many GPUs, persistence mode off) can pass {} s: \
                 enable persistence mode (`sudo nvidia-smi -pm 1`, or the nvidia-persistenced \
                 service), or allow more time with `--timeout SECONDS` (or {}=SECONDS).",
                seconds(*after_s),
                TIMEOUT_ENV
            );
            let fix = if device_work(probe) {
                format!(
                    "A call on the device did not return: the GPU may be faulting or stuck. \
                     Check `nvidia-smi` (another process holding the GPU, memory, utilisation) \
                     and Xid errors (`sudo dmesg | grep -i -e xid -e nvrm`); reset the GPU \
                     (`sudo nvidia-smi -r`) or reboot if it stays stuck.{slow}"
                )
            } else {
                format!("{check_driver}{slow}")
            };
            (
                Cause::ProbeHung,
                format!(
                    "probe hung: `{probe}` ({does}) did not return within {} s, so the watchdog \
                     killed the probe process; the probes after it did not run. {setup}{}",
                    seconds(*after_s),
                    stderr_words(ev)
                ),
                fix,
            )
        }
        How::Signal { .. } | How::Exited { .. } => {
            let died = match &pf.how {
                How::Signal { name, words, .. } => format!("died of {name} ({words})"),
                How::Exited { code } => format!("exited with status {code} without finishing"),
                _ => String::new(),
            };
            let fix = if device_work(probe) {
                format!(
                    "The process died during work on the device: check Xid errors (`sudo dmesg \
                     | grep -i -e xid -e nvrm`) and `nvidia-smi`; a crash inside the driver's \
                     library also means a libcuda.so.1 that does not match the kernel module. \
                     {check_driver}"
                )
            } else {
                format!(
                    "A crash inside the driver's library usually means a libcuda.so.1 that does \
                     not belong to the loaded kernel module (a copy on LD_LIBRARY_PATH, or one \
                     baked into a container image), a damaged driver install (reinstall the \
                     driver: its libcuda and kernel module must have the same version), or an \
                     LD_PRELOAD library; `sudo dmesg | tail` shows what the kernel saw. \
                     {check_driver}"
                )
            };
            (
                Cause::ProbeCrashed,
                format!(
                    "probe crashed: the probe process {died} in `{probe}` ({does}); the probes \
                     after it did not run. {setup}{}",
                    stderr_words(ev)
                ),
                fix,
            )
        }
        How::NotStarted { error } => (
            Cause::ProbeNotStarted,
            format!(
                "the doctor could not start its probe process, so nothing that calls into the \
                 driver or the runtime ran: {error}."
            ),
            "Check that this program's file still exists and may be executed (it starts itself \
             again for the probes), and that the system can start processes (ulimit -u, free \
             memory)."
                .into(),
        ),
    };
    Finding {
        cause,
        severity: Severity::Error,
        summary,
        fix,
    }
}

//! The diagnosis: from the evidence, the causes of what is wrong, each in plain words with its
//! fix, and the verdict that sets the exit status. Pure logic, so that tests can feed it
//! evidence this machine cannot show (a driver too old, hidden GPUs, locked device nodes).

use super::evidence::Evidence;
use super::report::{DeviceNode, Libcuda, LoaderAnswer};
use crate::error::CudaError;
use crate::runtime::version_string;

/// `cudaErrorStubLibrary` (34): the toolkit's stub libcuda was loaded instead of the driver's.
const STUB_LIBRARY: CudaError = CudaError::from_code(34);

/// What is wrong (or worth knowing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `libcuda.so.1` cannot be loaded: no driver.
    NoDriver,
    /// The driver supports an older CUDA than the runtime needs.
    DriverTooOld,
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
    /// A check (a device query, the smoke test, the bench) failed.
    CheckFailed,
}

impl Cause {
    /// The stable name used in the JSON (`no_driver`).
    pub fn id(self) -> &'static str {
        match self {
            Cause::NoDriver => "no_driver",
            Cause::DriverTooOld => "driver_too_old",
            Cause::DriverUnusable => "driver_unusable",
            Cause::NoDevice => "no_device",
            Cause::HiddenByVisibleDevices => "hidden_by_cuda_visible_devices",
            Cause::PartlyHiddenByVisibleDevices => "partly_hidden_by_cuda_visible_devices",
            Cause::DeviceNodesInaccessible => "device_nodes_inaccessible",
            Cause::SharedCudartNotFound => "shared_cudart_not_found",
            Cause::SharedCudartElsewhere => "shared_cudart_elsewhere",
            Cause::RuntimeOlderThanHeaders => "runtime_older_than_headers",
            Cause::MixedCudart => "mixed_cudart",
            Cause::CheckFailed => "check_failed",
        }
    }

    /// The verdict this cause gives when it is an error.
    pub fn status(self) -> Status {
        match self {
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
    /// No usable NVIDIA driver: none, too old, or broken (exit 2).
    NoDriver,
    /// A driver but no usable device: none, hidden, or locked device nodes (exit 3).
    NoDevice,
    /// A check failed (exit 4).
    CheckFailed,
}

impl Status {
    /// The process exit status (`doctor::exit`).
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Healthy => super::exit::HEALTHY,
            Status::NoDriver => super::exit::NO_DRIVER,
            Status::NoDevice => super::exit::NO_DEVICE,
            Status::CheckFailed => super::exit::CHECK_FAILED,
        }
    }

    /// `healthy`, `no_driver`, `no_device`, `check_failed`.
    pub fn id(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::NoDriver => "no_driver",
            Status::NoDevice => "no_device",
            Status::CheckFailed => "check_failed",
        }
    }

    /// In words.
    pub fn words(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
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
    match ev.device_count {
        Ok(n) if n > 0 => partly_hidden(ev, n, &mut f),
        Err(e) if e == CudaError::INSUFFICIENT_DRIVER => f.push(insufficient_driver(ev)),
        Err(e) if e == STUB_LIBRARY => f.push(stub_library(ev)),
        Ok(_) => f.push(no_device(ev, CudaError::NO_DEVICE)),
        Err(e) => f.push(no_device(ev, e)),
    }
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

/// The oldest NVIDIA Linux driver branch for a CUDA major version.
pub fn minimum_driver(cuda_major: i32) -> Option<&'static str> {
    match cuda_major {
        13 => Some("580"),
        12 => Some("525"),
        11 => Some("450.80.02"),
        _ => None,
    }
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
    if driver > 0 && runtime > 0 && driver < runtime {
        let (rv, dv) = (version_string(runtime), version_string(driver));
        let need = minimum_driver(runtime / 1000)
            .map(|d| format!(" (NVIDIA driver {d} or newer on Linux)"))
            .unwrap_or_default();
        return Finding {
            cause: Cause::DriverTooOld,
            severity: Severity::Error,
            summary: format!(
                "driver too old for the runtime: the NVIDIA driver ({}; {}) supports CUDA {dv}, \
                 but this program's CUDA runtime is {rv}, which needs a driver that supports \
                 CUDA {}.0 or newer{need}; cudaGetDeviceCount returns \
                 cudaErrorInsufficientDriver (35).",
                libcuda_words(ev),
                module_words(ev),
                runtime / 1000
            ),
            fix: format!(
                "Either upgrade the driver{need} and reboot (or reload the nvidia kernel module), \
                 or use a CUDA runtime this driver supports, CUDA {dv} or older: for CUDA 12, run \
                 `bash scripts/bootstrap.sh --cuda12` and rebuild with \
                 `CUDA_HOME=$PWD/.deps/cuda12 cargo build`. The driver must be at least as new \
                 as the runtime's major version; within one major version, CUDA's minor-version \
                 compatibility lets an older driver run a newer runtime."
            ),
        };
    }
    Finding {
        cause: Cause::DriverUnusable,
        severity: Severity::Error,
        summary: format!(
            "NVIDIA driver unusable: {}, but it reports CUDA version {} and cudaGetDeviceCount \
             returns cudaErrorInsufficientDriver (35) for this CUDA {} runtime ({}).",
            libcuda_words(ev),
            version_string(driver),
            version_string(runtime),
            module_words(ev)
        ),
        fix: "Check that libcuda.so.1 belongs to the installed driver (`nvidia-smi` shows the \
              driver version; the libcuda file name carries it) and that no other libcuda.so.1 \
              comes first on LD_LIBRARY_PATH; reinstall the driver if they differ."
            .into(),
    }
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

fn no_device(ev: &Evidence, error: CudaError) -> Finding {
    let code = format!(
        "cudaGetDeviceCount returns {} ({})",
        error.name(),
        error.code()
    );
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
    if error != CudaError::NO_DEVICE {
        return Finding {
            cause: Cause::DriverUnusable,
            severity: Severity::Error,
            summary: format!(
                "CUDA cannot start: {code}: {}. {}; {}; the driver supports CUDA {}.",
                error.description(),
                libcuda_words(ev),
                module_words(ev),
                version_string(ev.driver_version.unwrap_or(0))
            ),
            fix: "Run `nvidia-smi`: \"Driver/library version mismatch\" means the kernel module \
                  and libcuda come from different driver versions (reboot, or reload the \
                  module); otherwise see `dmesg | grep -i nvrm` for the driver's own error."
                .into(),
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

fn libcudart(ev: &Evidence, f: &mut Vec<Finding>) {
    let lc = &ev.libcudart;
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

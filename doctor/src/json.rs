//! `--json`: the report as the `llaisys-nvidia-doctor/1` document that docs/doctor-json.md
//! describes member by member, written by serde_json from the structs below, which are that
//! schema (their fields in its order). Members are only ever added within a schema version; a
//! renamed or removed member, or a changed meaning, makes a new version.

use crate::backend::version_string;
use crate::diagnose::Diagnosis;
use crate::report::{
    nan_as_null, Bench, Build, CudaErr, DeviceCount, DeviceNode, DeviceReport, Failure, How,
    Libcuda, Libcudart, LoaderAnswer, Machine, NvmlUsage, PeerAccess, Report, Smoke, SmokeStatus,
    Watchdog,
};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// The schema's name and version, the document's first member.
pub const SCHEMA: &str = "llaisys-nvidia-doctor/1";

/// The document of `r` and its diagnosis `d` as text (two-space indent), with a final newline.
pub fn render(r: &Report, d: &Diagnosis) -> String {
    let mut s = serde_json::to_string_pretty(&document(r, d))
        .unwrap_or_else(|e| format!("{{\"schema\": \"{SCHEMA}\", \"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// A number that is written as `null` when it is not finite (JSON has no NaN or infinity).
#[derive(Serialize)]
#[serde(transparent)]
struct Num(#[serde(with = "nan_as_null")] f64);

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    build: BuildJ<'a>,
    machine: MachineJ<'a>,
    device_count: DeviceCountJ,
    devices: Vec<DeviceJ<'a>>,
    peer_access: Vec<Vec<Option<bool>>>,
    smoke: SmokeJ<'a>,
    bench: Option<BenchJ<'a>>,
    diagnosis: DiagnosisJ<'a>,
    watchdog: WatchdogJ<'a>,
}

/// The whole document, as serde data.
fn document<'a>(r: &'a Report, d: &'a Diagnosis) -> Document<'a> {
    Document {
        schema: SCHEMA,
        build: build(&r.build),
        machine: machine(&r.machine),
        device_count: device_count(&r.device_count),
        devices: r.devices.iter().map(device).collect(),
        peer_access: peer_matrix(r.devices.len(), &r.peer_access),
        smoke: smoke(&r.smoke),
        bench: r.bench.as_ref().map(bench),
        diagnosis: diagnosis(d),
        watchdog: watchdog(&r.watchdog),
    }
}

#[derive(Serialize)]
struct VersionJ {
    number: i32,
    text: String,
}

fn version(v: i32) -> VersionJ {
    VersionJ {
        number: v,
        text: version_string(v),
    }
}

#[derive(Serialize)]
struct CudaErrJ<'a> {
    code: i32,
    name: &'a str,
    description: &'a str,
}

fn cuda_error(e: &CudaErr) -> CudaErrJ<'_> {
    CudaErrJ {
        code: e.code,
        name: &e.name,
        description: &e.description,
    }
}

#[derive(Serialize)]
struct ErrorJ<'a> {
    message: &'a str,
    call: &'a str,
    cuda_error: Option<CudaErrJ<'a>>,
}

fn error(e: &Failure) -> ErrorJ<'_> {
    ErrorJ {
        message: &e.message,
        call: &e.call,
        cuda_error: e.cuda_error.as_ref().map(cuda_error),
    }
}

#[derive(Serialize)]
struct BuildJ<'a> {
    crate_version: &'a str,
    link_mode: &'a str,
    cuda_root: &'a str,
    cuda_origin: &'a str,
    cudart_version: VersionJ,
    lib_dir: &'a str,
    lib_name: &'a str,
    own_runtimes: Vec<OwnRuntimeJ<'a>>,
}

#[derive(Serialize)]
struct OwnRuntimeJ<'a> {
    major: u32,
    made_at: &'a str,
}

fn build(b: &Build) -> BuildJ<'_> {
    BuildJ {
        crate_version: &b.crate_version,
        link_mode: &b.link_mode,
        cuda_root: &b.cuda_root,
        cuda_origin: &b.cuda_origin,
        cudart_version: version(b.cudart_version),
        lib_dir: &b.lib_dir,
        lib_name: &b.lib_name,
        own_runtimes: b
            .own_runtimes
            .iter()
            .map(|(major, made_at)| OwnRuntimeJ {
                major: *major,
                made_at,
            })
            .collect(),
    }
}

/// `{number, text, error}`: the number and its text (`null` for 0, "none"), or the error; all
/// three `null` when the probe did not finish.
#[derive(Serialize)]
struct VersionOrErrorJ<'a> {
    number: Option<i32>,
    text: Option<String>,
    error: Option<CudaErrJ<'a>>,
}

fn version_or_error(r: &Option<Result<i32, CudaErr>>) -> VersionOrErrorJ<'_> {
    match r {
        Some(Ok(v)) => VersionOrErrorJ {
            number: Some(*v),
            text: (*v > 0).then(|| version_string(*v)),
            error: None,
        },
        Some(Err(e)) => VersionOrErrorJ {
            number: None,
            text: None,
            error: Some(cuda_error(e)),
        },
        None => VersionOrErrorJ {
            number: None,
            text: None,
            error: None,
        },
    }
}

#[derive(Serialize)]
struct GpusOnHostJ<'a> {
    count: usize,
    source: &'a str,
}

/// The environment, name to value, in the report's order.
struct EnvJ<'a>(&'a [(String, String)]);

impl Serialize for EnvJ<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
struct MachineJ<'a> {
    runtime_version: VersionOrErrorJ<'a>,
    driver_version: VersionOrErrorJ<'a>,
    kernel_module: Option<&'a str>,
    libcudart: LibcudartJ<'a>,
    libcuda: LibcudaJ<'a>,
    device_nodes: Vec<DeviceNodeJ<'a>>,
    gpus_on_host: Option<GpusOnHostJ<'a>>,
    env: EnvJ<'a>,
}

fn machine(m: &Machine) -> MachineJ<'_> {
    MachineJ {
        runtime_version: version_or_error(&m.runtime_version),
        driver_version: version_or_error(&m.driver_version),
        kernel_module: m.kernel_module.as_deref(),
        libcudart: libcudart(&m.libcudart),
        libcuda: libcuda(&m.libcuda),
        device_nodes: m.device_nodes.iter().map(device_node).collect(),
        gpus_on_host: m.gpus_on_host.as_ref().map(|g| GpusOnHostJ {
            count: g.count,
            source: &g.source,
        }),
        env: EnvJ(&m.env),
    }
}

#[derive(Serialize)]
struct LoaderJ<'a> {
    status: &'static str,
    path: Option<&'a str>,
    detail: Option<&'a str>,
}

#[derive(Serialize)]
struct LibcudartJ<'a> {
    link_mode: &'a str,
    linked_in: bool,
    loaded_from: Option<&'a str>,
    found_via: Option<&'a str>,
    built_path: &'a str,
    built_path_exists: bool,
    without_ld_library_path: LoaderJ<'a>,
    shared_mapped: &'a [String],
    /// The `loaded` mode's choice (null for the other modes).
    loaded: Option<LoadedJ<'a>>,
}

#[derive(Serialize)]
struct LoadedJ<'a> {
    path: Option<&'a str>,
    version: Option<VersionJ>,
    why: &'a str,
    driver: &'a str,
    tried: Vec<TriedJ<'a>>,
}

#[derive(Serialize)]
struct TriedJ<'a> {
    place: &'a str,
    outcome: &'a str,
}

fn libcudart(l: &Libcudart) -> LibcudartJ<'_> {
    let (status, path, detail) = match &l.without_ld_library_path {
        LoaderAnswer::NotChecked(why) => ("not_checked", None, Some(why.as_str())),
        LoaderAnswer::Found(p) => ("found", Some(p.as_str()), None),
        LoaderAnswer::NotFound => ("not_found", None, None),
    };
    LibcudartJ {
        link_mode: &l.link_mode,
        linked_in: l.link_mode == "static",
        loaded_from: l.loaded_from.as_deref(),
        found_via: l.found_via.as_deref(),
        built_path: &l.built_path,
        built_path_exists: l.built_path_exists,
        without_ld_library_path: LoaderJ {
            status,
            path,
            detail,
        },
        shared_mapped: &l.shared_mapped,
        loaded: l.loaded.as_ref().map(|c| LoadedJ {
            path: c.path.as_deref(),
            version: c.version.map(version),
            why: &c.why,
            driver: &c.driver,
            tried: c
                .tried
                .iter()
                .map(|(place, outcome)| TriedJ { place, outcome })
                .collect(),
        }),
    }
}

#[derive(Serialize)]
struct LibcudaJ<'a> {
    loadable: bool,
    path: Option<&'a str>,
    resolved: Option<&'a str>,
    error: Option<&'a str>,
}

fn libcuda(l: &Libcuda) -> LibcudaJ<'_> {
    match l {
        Libcuda::Loaded { path, resolved } => LibcudaJ {
            loadable: true,
            path: Some(path),
            resolved: resolved.as_deref(),
            error: None,
        },
        Libcuda::NotLoadable { error } => LibcudaJ {
            loadable: false,
            path: None,
            resolved: None,
            error: Some(error),
        },
    }
}

#[derive(Serialize)]
struct DeviceNodeJ<'a> {
    path: &'a str,
    exists: bool,
    accessible: bool,
    mode: String,
    uid: u32,
    gid: u32,
}

fn device_node(n: &DeviceNode) -> DeviceNodeJ<'_> {
    DeviceNodeJ {
        path: &n.path,
        exists: n.exists,
        accessible: n.accessible,
        mode: format!("{:04o}", n.mode),
        uid: n.uid,
        gid: n.gid,
    }
}

#[derive(Serialize)]
struct DeviceCountJ {
    count: i32,
    error: Option<CudaErr>,
    ms: Num,
}

fn device_count(c: &DeviceCount) -> DeviceCountJ {
    let error = match &c.result {
        Some(Err(e)) => e.cuda_error.clone(),
        _ => None,
    };
    DeviceCountJ {
        count: c.count(),
        error,
        ms: Num(c.ms),
    }
}

#[derive(Serialize)]
struct ComputeCapabilityJ {
    major: i32,
    minor: i32,
    text: String,
}

/// Every key is always present; the property fields are `null` when `properties_error` is set.
#[derive(Serialize)]
struct DeviceJ<'a> {
    id: i32,
    name: Option<&'a str>,
    compute_capability: Option<ComputeCapabilityJ>,
    memory_total: Option<usize>,
    memory_free: Option<usize>,
    multiprocessors: Option<i32>,
    pci_bus_id: Option<&'a str>,
    async_engines: Option<i32>,
    unified_addressing: Option<bool>,
    memory_pools: Option<bool>,
    properties_error: Option<ErrorJ<'a>>,
    memory_error: Option<ErrorJ<'a>>,
    nvml: Option<NvmlJ>,
    nvml_error: Option<&'a str>,
}

/// NVML's view of a device's memory; `other_processes` and `other_processes_bytes` are the
/// figures of the library's out-of-memory report (the probe process left out).
#[derive(Serialize)]
struct NvmlJ {
    total_bytes: u64,
    used_bytes: u64,
    probe_pid: u32,
    other_processes: usize,
    other_processes_bytes: u64,
    processes: Vec<ProcessJ>,
}

#[derive(Serialize)]
struct ProcessJ {
    pid: u32,
    used_bytes: Option<u64>,
    probe_process: bool,
}

fn nvml(u: &NvmlUsage) -> NvmlJ {
    NvmlJ {
        total_bytes: u.total_bytes,
        used_bytes: u.used_bytes,
        probe_pid: u.probe_pid,
        other_processes: u.others().count(),
        other_processes_bytes: u.others_bytes(),
        processes: u
            .processes
            .iter()
            .map(|p| ProcessJ {
                pid: p.pid,
                used_bytes: p.used_bytes,
                probe_process: p.pid == u.probe_pid,
            })
            .collect(),
    }
}

fn device(d: &DeviceReport) -> DeviceJ<'_> {
    let p = d.properties.as_ref().ok();
    DeviceJ {
        id: d.id,
        name: p.map(|p| p.name.as_str()),
        compute_capability: p.map(|p| {
            let (major, minor) = p.compute_capability;
            ComputeCapabilityJ {
                major,
                minor,
                text: format!("{major}.{minor}"),
            }
        }),
        memory_total: p.map(|p| p.total_memory),
        memory_free: d.memory.as_ref().ok().map(|(free, _)| *free),
        multiprocessors: p.map(|p| p.multiprocessors),
        pci_bus_id: p.map(|p| p.pci_bus_id.as_str()),
        async_engines: p.map(|p| p.async_engines),
        unified_addressing: p.map(|p| p.unified_addressing),
        memory_pools: p.map(|p| p.memory_pools),
        properties_error: d.properties.as_ref().err().map(error),
        memory_error: d.memory.as_ref().err().map(error),
        nvml: d.nvml.as_ref().and_then(|n| n.as_ref().ok()).map(nvml),
        nvml_error: d
            .nvml
            .as_ref()
            .and_then(|n| n.as_ref().err())
            .map(String::as_str),
    }
}

/// `m[i][j]`: device i can access device j's memory; `null` on the diagonal and where the
/// query failed.
fn peer_matrix(n: usize, peers: &[PeerAccess]) -> Vec<Vec<Option<bool>>> {
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    peers
                        .iter()
                        .find(|p| p.from as usize == i && p.to as usize == j)
                        .and_then(|p| p.result.as_ref().ok().copied())
                })
                .collect()
        })
        .collect()
}

#[derive(Serialize)]
struct CallJ<'a> {
    call: &'a str,
    ms: Num,
}

#[derive(Serialize)]
struct StepJ<'a> {
    name: &'a str,
    ok: bool,
    ms: Num,
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct SmokeJ<'a> {
    status: &'static str,
    reason: Option<&'a str>,
    device: i32,
    first_calls: Vec<CallJ<'a>>,
    context_ms: Option<Num>,
    context_error: Option<ErrorJ<'a>>,
    bytes: usize,
    steps: Vec<StepJ<'a>>,
}

fn smoke(s: &Smoke) -> SmokeJ<'_> {
    let (status, reason) = match &s.status {
        SmokeStatus::Passed => ("passed", None),
        SmokeStatus::Failed => ("failed", None),
        SmokeStatus::Skipped(why) => ("skipped", Some(why.as_str())),
    };
    let (context_ms, context_error) = match &s.context_ms {
        None => (None, None),
        Some(Ok(ms)) => (Some(Num(*ms)), None),
        Some(Err(e)) => (None, Some(error(e))),
    };
    SmokeJ {
        status,
        reason,
        device: s.device,
        first_calls: s
            .first_calls
            .iter()
            .map(|c| CallJ {
                call: &c.call,
                ms: Num(c.ms),
            })
            .collect(),
        context_ms,
        context_error,
        bytes: s.bytes,
        steps: s
            .steps
            .iter()
            .map(|st| StepJ {
                name: &st.name,
                ok: st.error.is_none(),
                ms: Num(st.ms),
                error: st.error.as_deref(),
            })
            .collect(),
    }
}

#[derive(Serialize)]
struct CopyJ {
    kind: &'static str,
    bytes: usize,
    reps: usize,
    median_ms: Num,
    gb_per_s: Num,
}

#[derive(Serialize)]
struct AllocJ {
    kind: &'static str,
    call: &'static str,
    bytes: usize,
    reps: usize,
    median_us: Num,
}

#[derive(Serialize)]
struct BenchJ<'a> {
    device: i32,
    sizes: &'a [usize],
    copies: Vec<CopyJ>,
    allocations: Vec<AllocJ>,
    error: Option<&'a str>,
    skipped: Option<&'a str>,
}

fn bench(b: &Bench) -> BenchJ<'_> {
    BenchJ {
        device: b.device,
        sizes: &b.sizes,
        copies: b
            .copies
            .iter()
            .map(|c| CopyJ {
                kind: c.kind.id(),
                bytes: c.size,
                reps: c.reps,
                median_ms: Num(c.median_ms),
                gb_per_s: Num(c.gbps),
            })
            .collect(),
        allocations: b
            .allocations
            .iter()
            .map(|a| AllocJ {
                kind: a.kind.id(),
                call: a.kind.call(),
                bytes: a.size,
                reps: a.reps,
                median_us: Num(a.median_us),
            })
            .collect(),
        error: b.error.as_deref(),
        skipped: b.skipped.as_deref(),
    }
}

#[derive(Serialize)]
struct FindingJ<'a> {
    cause: &'static str,
    severity: &'static str,
    summary: &'a str,
    fix: &'a str,
}

#[derive(Serialize)]
struct DiagnosisJ<'a> {
    status: &'static str,
    exit_code: i32,
    findings: Vec<FindingJ<'a>>,
}

fn diagnosis(d: &Diagnosis) -> DiagnosisJ<'_> {
    DiagnosisJ {
        status: d.status.id(),
        exit_code: d.status.exit_code(),
        findings: d
            .findings
            .iter()
            .map(|f| FindingJ {
                cause: f.cause.id(),
                severity: f.severity.id(),
                summary: &f.summary,
                fix: &f.fix,
            })
            .collect(),
    }
}

#[derive(Serialize)]
struct ProbeJ<'a> {
    name: &'a str,
    ms: Num,
    status: &'static str,
}

#[derive(Serialize)]
struct WatchdogJ<'a> {
    timeout_s: Option<f64>,
    status: &'static str,
    probe: Option<&'a str>,
    signal: Option<&'a str>,
    exit_code: Option<i32>,
    error: Option<&'a str>,
    stderr: &'a str,
    probes: Vec<ProbeJ<'a>>,
}

fn watchdog(w: &Watchdog) -> WatchdogJ<'_> {
    let f = w.failure.as_ref();
    let status = match f.map(|f| &f.how) {
        None => "ok",
        Some(How::Hung { .. }) => "hung",
        Some(How::Signal { .. }) => "crashed",
        Some(How::Exited { .. }) => "exited",
        Some(How::NotStarted { .. }) => "not_started",
    };
    let (mut signal, mut exit_code, mut error) = (None, None, None);
    match f.map(|f| &f.how) {
        Some(How::Signal { name, .. }) => signal = Some(name.as_str()),
        Some(How::Exited { code }) => exit_code = Some(*code),
        Some(How::NotStarted { error: e }) => error = Some(e.as_str()),
        _ => {}
    }
    WatchdogJ {
        timeout_s: w.timeout_s,
        status,
        probe: f.map(|f| f.probe.as_str()),
        signal,
        exit_code,
        error,
        stderr: &w.stderr,
        probes: w
            .probes
            .iter()
            .map(|p| ProbeJ {
                name: &p.name,
                ms: Num(p.ms),
                status: p.status.id(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ProcessMemory;
    use serde_json::{json, Value};

    const GIB: u64 = 1 << 30;

    fn device_with(nvml: Option<Result<NvmlUsage, String>>) -> DeviceReport {
        crate::report::sample_device(1, "NVIDIA H200", "0000:3b:00.0", (100, 140), nvml)
    }

    fn value(d: &DeviceReport) -> Value {
        serde_json::to_value(device(d)).expect("serialises")
    }

    #[test]
    fn a_device_holds_nvml_figures_and_processes_the_probe_process_marked() {
        let u = NvmlUsage {
            total_bytes: 140 * GIB,
            used_bytes: 40 * GIB,
            processes: vec![
                ProcessMemory {
                    pid: 4242,
                    used_bytes: Some(30 * GIB),
                },
                ProcessMemory {
                    pid: 4343,
                    used_bytes: None,
                },
                ProcessMemory {
                    pid: 777,
                    used_bytes: Some(GIB / 2),
                },
            ],
            probe_pid: 777,
        };
        let v = value(&device_with(Some(Ok(u))));
        assert_eq!(
            v["nvml"],
            json!({
                "total_bytes": 140 * GIB,
                "used_bytes": 40 * GIB,
                "probe_pid": 777,
                "other_processes": 2,
                "other_processes_bytes": 30 * GIB,
                "processes": [
                    {"pid": 4242, "used_bytes": 30 * GIB, "probe_process": false},
                    {"pid": 4343, "used_bytes": null, "probe_process": false},
                    {"pid": 777, "used_bytes": GIB / 2, "probe_process": true},
                ],
            })
        );
        assert_eq!(v["nvml_error"], Value::Null);
        // The members before keep their names, values and order; the new ones come last.
        assert_eq!(v["memory_total"], json!(140u64 << 30));
        assert_eq!(v["memory_free"], json!(100u64 << 30));
        assert_eq!(v["pci_bus_id"], "0000:3b:00.0");
        // In the document's own order (the struct's): find each key after the one before.
        let text = serde_json::to_string(&device(&device_with(None))).expect("serialises");
        let mut at = 0;
        for key in [
            "id",
            "name",
            "compute_capability",
            "memory_total",
            "memory_free",
            "multiprocessors",
            "pci_bus_id",
            "async_engines",
            "unified_addressing",
            "memory_pools",
            "properties_error",
            "memory_error",
            "nvml",
            "nvml_error",
        ] {
            let quoted = format!("\"{key}\":");
            let found = text[at..].find(&quoted);
            assert!(found.is_some(), "{key} missing or out of order in {text}");
            at += found.unwrap_or(0) + quoted.len();
        }
        assert_eq!(v.as_object().map(|o| o.len()), Some(14), "{v}");
    }

    #[test]
    fn nvml_unavailable_is_a_reason_and_an_unfinished_probe_is_null() {
        let why = "libnvidia-ml.so.1 not found";
        let v = value(&device_with(Some(Err(why.into()))));
        assert_eq!(v["nvml"], Value::Null);
        assert_eq!(v["nvml_error"], why);
        let v = value(&device_with(None));
        assert_eq!(v["nvml"], Value::Null);
        assert_eq!(v["nvml_error"], Value::Null);
        assert!(v.as_object().expect("object").contains_key("nvml_error"));
    }
}

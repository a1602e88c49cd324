//! `--json`: the report as the `llaisys-nvidia-doctor/1` document that docs/doctor-json.md
//! describes field by field. Fields are only ever added within a schema version; a renamed or
//! removed field, or a changed meaning, makes a new version.

use super::diagnose::Diagnosis;
use super::json_writer::Json;
use super::report::{
    Bench, Build, DeviceCount, DeviceNode, DeviceReport, Libcuda, Libcudart, LoaderAnswer, Machine,
    PeerAccess, Report, Smoke, SmokeStatus,
};
use crate::error::{CudaError, Error};
use crate::runtime::version_string;

/// The schema's name and version, the document's first field.
pub const SCHEMA: &str = "llaisys-nvidia-doctor/1";

/// The whole document.
pub fn document(r: &Report) -> Json {
    Json::Obj(vec![
        ("schema".into(), Json::str(SCHEMA)),
        ("build".into(), build(&r.build)),
        ("machine".into(), machine(&r.machine)),
        ("device_count".into(), device_count(&r.device_count)),
        (
            "devices".into(),
            Json::Arr(r.devices.iter().map(device).collect()),
        ),
        (
            "peer_access".into(),
            peer_matrix(r.devices.len(), &r.peer_access),
        ),
        ("smoke".into(), smoke(&r.smoke)),
        ("bench".into(), r.bench.as_ref().map_or(Json::Null, bench)),
        ("diagnosis".into(), diagnosis(&r.diagnosis)),
    ])
}

/// The document as text, with a final newline.
pub fn render(r: &Report) -> String {
    let mut s = document(r).to_pretty();
    s.push('\n');
    s
}

fn obj(fields: Vec<(&str, Json)>) -> Json {
    Json::Obj(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn version(v: i32) -> Json {
    obj(vec![
        ("number", Json::Int(v.into())),
        ("text", Json::str(version_string(v))),
    ])
}

fn cuda_error(e: CudaError) -> Json {
    obj(vec![
        ("code", Json::Int(e.code().into())),
        ("name", Json::str(e.name())),
        ("description", Json::str(e.description())),
    ])
}

fn error(e: &Error) -> Json {
    let cuda = e.cuda_error();
    obj(vec![
        ("message", Json::str(e.to_string())),
        ("call", Json::str(e.call())),
        (
            "cuda_error",
            if cuda.is_success() {
                Json::Null
            } else {
                cuda_error(cuda)
            },
        ),
    ])
}

fn build(b: &Build) -> Json {
    obj(vec![
        ("crate_version", Json::str(&b.crate_version)),
        ("link_mode", Json::str(&b.link_mode)),
        ("cuda_root", Json::str(&b.cuda_root)),
        ("cuda_origin", Json::str(&b.cuda_origin)),
        ("cudart_version", version(b.cudart_version)),
        ("lib_dir", Json::str(&b.lib_dir)),
        ("lib_name", Json::str(&b.lib_name)),
    ])
}

/// `{number, text, error}`: the number and its text (`null` for 0, "none"), or the error.
fn version_or_error(r: &Result<i32, CudaError>) -> Json {
    match r {
        Ok(v) => obj(vec![
            ("number", Json::Int((*v).into())),
            (
                "text",
                if *v > 0 {
                    Json::str(version_string(*v))
                } else {
                    Json::Null
                },
            ),
            ("error", Json::Null),
        ]),
        Err(e) => obj(vec![
            ("number", Json::Null),
            ("text", Json::Null),
            ("error", cuda_error(*e)),
        ]),
    }
}

fn machine(m: &Machine) -> Json {
    obj(vec![
        ("runtime_version", version_or_error(&m.runtime_version)),
        ("driver_version", version_or_error(&m.driver_version)),
        ("kernel_module", Json::opt_str(m.kernel_module.clone())),
        ("libcudart", libcudart(&m.libcudart)),
        ("libcuda", libcuda(&m.libcuda)),
        (
            "device_nodes",
            Json::Arr(m.device_nodes.iter().map(device_node).collect()),
        ),
        (
            "gpus_on_host",
            m.gpus_on_host.as_ref().map_or(Json::Null, |g| {
                obj(vec![
                    ("count", Json::uint(g.count)),
                    ("source", Json::str(&g.source)),
                ])
            }),
        ),
        (
            "env",
            Json::Obj(
                m.env
                    .iter()
                    .map(|(k, v)| (k.clone(), Json::str(v)))
                    .collect(),
            ),
        ),
    ])
}

fn libcudart(l: &Libcudart) -> Json {
    let loader = match &l.without_ld_library_path {
        LoaderAnswer::NotChecked(why) => obj(vec![
            ("status", Json::str("not_checked")),
            ("path", Json::Null),
            ("detail", Json::str(why)),
        ]),
        LoaderAnswer::Found(p) => obj(vec![
            ("status", Json::str("found")),
            ("path", Json::str(p)),
            ("detail", Json::Null),
        ]),
        LoaderAnswer::NotFound => obj(vec![
            ("status", Json::str("not_found")),
            ("path", Json::Null),
            ("detail", Json::Null),
        ]),
    };
    obj(vec![
        ("link_mode", Json::str(&l.link_mode)),
        ("linked_in", Json::Bool(l.link_mode == "static")),
        ("loaded_from", Json::opt_str(l.loaded_from.clone())),
        ("found_via", Json::opt_str(l.found_via.clone())),
        ("built_path", Json::str(&l.built_path)),
        ("built_path_exists", Json::Bool(l.built_path_exists)),
        ("without_ld_library_path", loader),
        (
            "shared_mapped",
            Json::Arr(l.shared_mapped.iter().map(Json::str).collect()),
        ),
    ])
}

fn libcuda(l: &Libcuda) -> Json {
    match l {
        Libcuda::Loaded { path, resolved } => obj(vec![
            ("loadable", Json::Bool(true)),
            ("path", Json::str(path)),
            ("resolved", Json::opt_str(resolved.clone())),
            ("error", Json::Null),
        ]),
        Libcuda::NotLoadable { error } => obj(vec![
            ("loadable", Json::Bool(false)),
            ("path", Json::Null),
            ("resolved", Json::Null),
            ("error", Json::str(error)),
        ]),
    }
}

fn device_node(n: &DeviceNode) -> Json {
    obj(vec![
        ("path", Json::str(&n.path)),
        ("exists", Json::Bool(n.exists)),
        ("accessible", Json::Bool(n.accessible)),
        ("mode", Json::str(format!("{:04o}", n.mode))),
        ("uid", Json::Int(n.uid.into())),
        ("gid", Json::Int(n.gid.into())),
    ])
}

fn device_count(c: &DeviceCount) -> Json {
    let (count, err) = match &c.result {
        Ok(n) => (Json::Int((*n).into()), Json::Null),
        Err(e) => (Json::Int(0), cuda_error(e.cuda_error())),
    };
    obj(vec![
        ("count", count),
        ("error", err),
        ("ms", Json::Num(c.ms)),
    ])
}

/// Every key is always present; the property fields are `null` when `properties_error` is set.
fn device(d: &DeviceReport) -> Json {
    let p = d.properties.as_ref().ok();
    let cc = p.map_or(Json::Null, |p| {
        let (major, minor) = p.compute_capability;
        obj(vec![
            ("major", Json::Int(major.into())),
            ("minor", Json::Int(minor.into())),
            ("text", Json::str(format!("{major}.{minor}"))),
        ])
    });
    let field = |f: &dyn Fn(&crate::device::Properties) -> Json| p.map_or(Json::Null, f);
    let (free, memory_error) = match &d.memory {
        Ok((free, _)) => (Json::uint(*free), Json::Null),
        Err(e) => (Json::Null, error(e)),
    };
    obj(vec![
        ("id", Json::Int(d.id.into())),
        ("name", field(&|p| Json::str(&p.name))),
        ("compute_capability", cc),
        ("memory_total", field(&|p| Json::uint(p.total_memory))),
        ("memory_free", free),
        (
            "multiprocessors",
            field(&|p| Json::Int(p.multiprocessors.into())),
        ),
        ("pci_bus_id", field(&|p| Json::str(&p.pci_bus_id))),
        (
            "async_engines",
            field(&|p| Json::Int(p.async_engines.into())),
        ),
        (
            "unified_addressing",
            field(&|p| Json::Bool(p.unified_addressing)),
        ),
        ("memory_pools", field(&|p| Json::Bool(p.memory_pools))),
        (
            "properties_error",
            d.properties.as_ref().err().map_or(Json::Null, error),
        ),
        ("memory_error", memory_error),
    ])
}

/// `m[i][j]`: device i can access device j's memory; `null` on the diagonal and where the
/// query failed.
fn peer_matrix(n: usize, peers: &[PeerAccess]) -> Json {
    Json::Arr(
        (0..n)
            .map(|i| {
                Json::Arr(
                    (0..n)
                        .map(|j| {
                            peers
                                .iter()
                                .find(|p| p.from as usize == i && p.to as usize == j)
                                .and_then(|p| p.result.as_ref().ok())
                                .map_or(Json::Null, |&b| Json::Bool(b))
                        })
                        .collect(),
                )
            })
            .collect(),
    )
}

fn smoke(s: &Smoke) -> Json {
    let (status, reason) = match &s.status {
        SmokeStatus::Passed => ("passed", Json::Null),
        SmokeStatus::Failed => ("failed", Json::Null),
        SmokeStatus::Skipped(why) => ("skipped", Json::str(why)),
    };
    let (context_ms, context_error) = match &s.context_ms {
        None => (Json::Null, Json::Null),
        Some(Ok(ms)) => (Json::Num(*ms), Json::Null),
        Some(Err(e)) => (Json::Null, error(e)),
    };
    obj(vec![
        ("status", Json::str(status)),
        ("reason", reason),
        ("device", Json::Int(s.device.into())),
        (
            "first_calls",
            Json::Arr(
                s.first_calls
                    .iter()
                    .map(|(call, ms)| obj(vec![("call", Json::str(call)), ("ms", Json::Num(*ms))]))
                    .collect(),
            ),
        ),
        ("context_ms", context_ms),
        ("context_error", context_error),
        ("bytes", Json::uint(s.bytes)),
        (
            "steps",
            Json::Arr(
                s.steps
                    .iter()
                    .map(|st| {
                        obj(vec![
                            ("name", Json::str(&st.name)),
                            ("ok", Json::Bool(st.error.is_none())),
                            ("ms", Json::Num(st.ms)),
                            ("error", Json::opt_str(st.error.clone())),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}

fn bench(b: &Bench) -> Json {
    obj(vec![
        ("device", Json::Int(b.device.into())),
        (
            "sizes",
            Json::Arr(b.sizes.iter().map(|&s| Json::uint(s)).collect()),
        ),
        (
            "copies",
            Json::Arr(
                b.copies
                    .iter()
                    .map(|c| {
                        obj(vec![
                            ("kind", Json::str(c.kind.id())),
                            ("bytes", Json::uint(c.size)),
                            ("reps", Json::uint(c.reps)),
                            ("median_ms", Json::Num(c.median_ms)),
                            ("gb_per_s", Json::Num(c.gbps)),
                        ])
                    })
                    .collect(),
            ),
        ),
        (
            "allocations",
            Json::Arr(
                b.allocations
                    .iter()
                    .map(|a| {
                        obj(vec![
                            ("kind", Json::str(a.kind.id())),
                            ("call", Json::str(a.kind.call())),
                            ("bytes", Json::uint(a.size)),
                            ("reps", Json::uint(a.reps)),
                            ("median_us", Json::Num(a.median_us)),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("error", Json::opt_str(b.error.clone())),
        ("skipped", Json::opt_str(b.skipped.clone())),
    ])
}

fn diagnosis(d: &Diagnosis) -> Json {
    obj(vec![
        ("status", Json::str(d.status.id())),
        ("exit_code", Json::Int(d.status.exit_code().into())),
        (
            "findings",
            Json::Arr(
                d.findings
                    .iter()
                    .map(|f| {
                        obj(vec![
                            ("cause", Json::str(f.cause.id())),
                            ("severity", Json::str(f.severity.id())),
                            ("summary", Json::str(&f.summary)),
                            ("fix", Json::str(&f.fix)),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}

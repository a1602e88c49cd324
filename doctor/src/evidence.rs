//! The evidence the diagnosis reasons from: plain values read off a report, or made up by a test
//! to cover a cause this machine cannot show.

use crate::env;
use crate::report::{CudaErr, DeviceNode, Libcuda, Libcudart, ProbeFailure, Report, SmokeStatus};

/// What the diagnosis looks at.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// `static`, `dynamic` or `loaded`.
    pub link_mode: String,
    /// `CUDART_VERSION` of the headers built against.
    pub built_cudart_version: i32,
    /// `cudaRuntimeGetVersion`, None when it failed or did not finish.
    pub runtime_version: Option<i32>,
    /// `cudaDriverGetVersion` (0: no driver), None when it failed or did not finish.
    pub driver_version: Option<i32>,
    /// `cudaGetDeviceCount`; None when its probe did not finish.
    pub device_count: Option<Result<i32, CudaErr>>,
    /// Whether `libcuda.so.1` loads.
    pub libcuda: Libcuda,
    /// The kernel module's version, when loaded.
    pub kernel_module: Option<String>,
    /// GPUs the kernel sees, None when it shows none.
    pub gpus_on_host: Option<usize>,
    /// `/dev/nvidia*`.
    pub device_nodes: Vec<DeviceNode>,
    /// `CUDA_VISIBLE_DEVICES`, when set.
    pub visible_devices: Option<String>,
    /// Where libcudart comes from.
    pub libcudart: Libcudart,
    /// This process's uid (for the device-node message).
    pub uid: u32,
    /// Checks that failed once a device was there: (what, the error).
    pub failed_checks: Vec<(String, String)>,
    /// The probe that hung or crashed, if one did.
    pub probe_failure: Option<ProbeFailure>,
    /// What the probe processes wrote on stderr.
    pub probe_stderr: String,
}

impl Evidence {
    /// Reads the evidence off `report`.
    pub fn from_report(report: &Report) -> Evidence {
        let m = &report.machine;
        Evidence {
            link_mode: report.build.link_mode.clone(),
            built_cudart_version: report.build.cudart_version,
            runtime_version: m.runtime_version.clone().and_then(Result::ok),
            driver_version: m.driver_version.clone().and_then(Result::ok),
            device_count: report.device_count.result.as_ref().map(|r| {
                r.as_ref().map(|&n| n).map_err(|f| {
                    f.cuda_error.clone().unwrap_or(CudaErr {
                        code: 0,
                        name: "no CUDA error".into(),
                        description: f.message.clone(),
                    })
                })
            }),
            libcuda: m.libcuda.clone(),
            kernel_module: m.kernel_module.clone(),
            gpus_on_host: m.gpus_on_host.as_ref().map(|g| g.count),
            device_nodes: m.device_nodes.clone(),
            visible_devices: env::value(&m.env, "CUDA_VISIBLE_DEVICES").map(str::to_string),
            libcudart: m.libcudart.clone(),
            // SAFETY: getuid has no preconditions and cannot fail.
            uid: unsafe { libc::getuid() },
            failed_checks: failed_checks(report),
            probe_failure: report.watchdog.failure.clone(),
            probe_stderr: report.watchdog.stderr.clone(),
        }
    }
}

fn failed_checks(report: &Report) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(Err(e)) = &report.machine.runtime_version {
        out.push(("cudaRuntimeGetVersion".into(), e.to_string()));
    }
    for d in &report.devices {
        if let Err(e) = &d.properties {
            out.push((format!("properties of device {}", d.id), e.to_string()));
        }
        if let Err(e) = &d.memory {
            out.push((format!("memory of device {}", d.id), e.to_string()));
        }
    }
    for p in &report.peer_access {
        if let Err(e) = &p.result {
            out.push((format!("peer access {} -> {}", p.from, p.to), e.to_string()));
        }
    }
    if report.smoke.status == SmokeStatus::Failed {
        for s in report.smoke.steps.iter().filter(|s| s.error.is_some()) {
            let e = s.error.clone().unwrap_or_default();
            out.push((format!("smoke test: {}", s.name), e));
        }
    }
    if let Some(e) = report.bench.as_ref().and_then(|b| b.error.as_ref()) {
        out.push(("bench".into(), e.clone()));
    }
    out
}

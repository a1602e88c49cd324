//! Gathering the facts of the report: this build (here), and in the probe process each device,
//! NVML's view of its memory, and the peer-access matrix.

use crate::backend::{self, build as b};
use crate::report::{Build, DeviceProperties, DeviceReport, Failure, NvmlUsage, PeerAccess};
use std::time::Instant;

/// The facts build.rs recorded.
pub fn build() -> Build {
    Build {
        crate_version: b::CRATE_VERSION.to_string(),
        link_mode: b::LINK_MODE.to_string(),
        cuda_root: b::CUDA_ROOT.to_string(),
        cuda_origin: b::CUDA_ORIGIN.to_string(),
        cudart_version: b::cudart_version(),
        lib_dir: b::LIB_DIR.to_string(),
        lib_name: b::LIB_NAME.to_string(),
        own_runtimes: b::bundled_runtimes()
            .into_iter()
            .map(|(m, f)| (m, f.to_string()))
            .collect(),
    }
}

/// Runs `f` and says how many milliseconds it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed().as_secs_f64() * 1e3)
}

/// Properties and memory of device `id`. Reading free memory makes the device current
/// (creating its context).
pub fn device(id: i32) -> DeviceReport {
    DeviceReport {
        id,
        properties: backend::device::properties(id),
        memory: backend::device::set(id).and_then(|()| backend::device::mem_info()),
        nvml: None,
    }
}

/// NVML's view of the device whose properties are `properties`: every process on it and what
/// each uses, or why NVML cannot say. The first call loads and starts NVML.
pub fn nvml(properties: &Result<DeviceProperties, Failure>) -> Result<NvmlUsage, String> {
    match properties {
        Ok(p) => backend::nvml::device_usage(&p.pci_bus_id),
        Err(e) => Err(format!(
            "not asked: the device's PCI bus id is unknown (its properties are unreadable: {e})"
        )),
    }
}

/// `cudaDeviceCanAccessPeer` for every ordered pair of distinct devices of `0..count`.
pub fn peers(count: i32) -> Vec<PeerAccess> {
    let mut out = Vec::new();
    for from in 0..count {
        for to in (0..count).filter(|&t| t != from) {
            out.push(PeerAccess {
                from,
                to,
                result: backend::device::can_access_peer(from, to),
            });
        }
    }
    out
}

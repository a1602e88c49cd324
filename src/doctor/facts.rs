//! Gathering the facts of the report: this build, this machine, the device count (timed, the
//! first call that initialises the driver), each device and the peer-access matrix.

use super::report::{Build, DeviceCount, DeviceReport, Machine, PeerAccess};
use super::{env, loader, nodes};
use crate::error::CudaError;
use crate::{device, runtime};
use std::time::Instant;

/// The facts build.rs recorded.
pub fn build() -> Build {
    Build {
        crate_version: runtime::build::CRATE_VERSION.to_string(),
        link_mode: runtime::build::LINK_MODE.to_string(),
        cuda_root: runtime::build::CUDA_ROOT.to_string(),
        cuda_origin: runtime::build::CUDA_ORIGIN.to_string(),
        cudart_version: runtime::build::cudart_version(),
        lib_dir: runtime::build::LIB_DIR.to_string(),
        lib_name: runtime::build::LIB_NAME.to_string(),
    }
}

/// Facts about the machine, and the first CUDA calls made to read them with their
/// milliseconds (`cudaDriverGetVersion` is the first that loads the driver). Creates no context.
pub fn machine() -> (Machine, Vec<(String, f64)>) {
    let (runtime_version, runtime_ms) = timed(runtime::runtime_version);
    let (driver_version, driver_ms) = timed(runtime::driver_version);
    let machine = Machine {
        runtime_version: runtime_version.map_err(|e| e.cuda_error()),
        driver_version: driver_version.map_err(|e| e.cuda_error()),
        kernel_module: nodes::kernel_module(),
        libcudart: loader::libcudart(),
        libcuda: loader::probe_libcuda(),
        device_nodes: nodes::device_nodes(),
        gpus_on_host: nodes::gpus_on_host(),
        env: env::cuda_env(),
    };
    let calls = vec![
        ("cudaRuntimeGetVersion".to_string(), runtime_ms),
        ("cudaDriverGetVersion".to_string(), driver_ms),
    ];
    (machine, calls)
}

/// Runs `f` and says how many milliseconds it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed().as_secs_f64() * 1e3)
}

/// `cudaGetDeviceCount`, timed.
pub fn device_count() -> DeviceCount {
    let (result, ms) = timed(runtime::device_count);
    DeviceCount { result, ms }
}

/// Properties and memory of devices `0..count`. Reading free memory makes each device current
/// (creating its context); the caller restores the device it wants.
pub fn devices(count: i32) -> Vec<DeviceReport> {
    (0..count)
        .map(|id| DeviceReport {
            id,
            properties: device::properties(id),
            memory: device::set(id).and_then(|()| device::mem_info()),
        })
        .collect()
}

/// `cudaDeviceCanAccessPeer` for every ordered pair of distinct devices.
pub fn peers(count: i32) -> Vec<PeerAccess> {
    let mut out = Vec::new();
    for from in 0..count {
        for to in (0..count).filter(|&t| t != from) {
            out.push(PeerAccess {
                from,
                to,
                result: device::can_access_peer(from, to),
            });
        }
    }
    out
}

/// The CUDA error of a device count that failed, None when it succeeded.
pub fn count_error(count: &DeviceCount) -> Option<CudaError> {
    count.result.as_ref().err().map(|e| e.cuda_error())
}

//! The compute processes of a device: `nvmlDeviceGetComputeRunningProcesses_v3`, else `_v2`,
//! else the unversioned one, each with NVML's count in/out pattern (a first call with no buffer
//! asks for the count; `NVML_ERROR_INSUFFICIENT_SIZE` means the list grew, so ask again with
//! more room).

use super::loader::Library;
use super::sys;
use super::ProcessUsage;
use std::os::raw::c_uint;

/// How many calls one list may take before giving up (processes keep starting).
const ATTEMPTS: usize = 8;
/// Room kept for processes that start between two calls.
const SPARE: c_uint = 8;
/// The most entries asked for; NVML's own limit is far below.
const MAX_ENTRIES: c_uint = 1 << 16;

/// An entry of one of NVML's process layouts.
trait Entry: Copy + Default {
    fn usage(&self) -> ProcessUsage;
}

/// `usedGpuMemory` as an `Option`: `NVML_VALUE_NOT_AVAILABLE` is None.
fn bytes(used: u64) -> Option<u64> {
    (used != sys::VALUE_NOT_AVAILABLE).then_some(used)
}

impl Entry for sys::ProcessInfoV2 {
    fn usage(&self) -> ProcessUsage {
        ProcessUsage {
            pid: self.pid,
            used_bytes: bytes(self.used_gpu_memory),
        }
    }
}

impl Entry for sys::ProcessInfoV1 {
    fn usage(&self) -> ProcessUsage {
        ProcessUsage {
            pid: self.pid,
            used_bytes: bytes(self.used_gpu_memory),
        }
    }
}

/// Whether `version` ("535.54.03") is a driver whose `_v3` list has 32-byte entries
/// ([`sys::V3_WIDE_DRIVERS`]), which the v2 layout would misread.
pub fn v3_is_wide(version: &str) -> bool {
    let mut parts = version.trim().split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => {
            let (wide_major, fixed_minor) = sys::V3_WIDE_DRIVERS;
            major == wide_major && minor < fixed_minor
        }
        _ => false,
    }
}

/// The compute processes on `device`, through the newest list function whose layout is known
/// for this driver.
pub fn list(lib: &Library, device: sys::Device) -> Result<Vec<ProcessUsage>, String> {
    let wide = lib.driver_version.as_deref().is_some_and(v3_is_wide);
    if let (Some(f), false) = (lib.fns.processes_v3, wide) {
        return ask(lib, "nvmlDeviceGetComputeRunningProcesses_v3", device, f);
    }
    if let Some(f) = lib.fns.processes_v2 {
        return ask(lib, "nvmlDeviceGetComputeRunningProcesses_v2", device, f);
    }
    if let Some(f) = lib.fns.processes_v1 {
        return ask(lib, "nvmlDeviceGetComputeRunningProcesses", device, f);
    }
    Err(format!(
        "{} has none of nvmlDeviceGetComputeRunningProcesses_v3 (used only outside drivers \
         535.43 to 535.97), _v2 or the unversioned one{}",
        lib.path,
        lib.driver_version
            .as_deref()
            .map(|v| format!(" (driver {v})"))
            .unwrap_or_default()
    ))
}

/// One list function with the count in/out pattern.
fn ask<E: Entry>(
    lib: &Library,
    name: &str,
    device: sys::Device,
    f: unsafe extern "C" fn(sys::Device, *mut c_uint, *mut E) -> sys::Return,
) -> Result<Vec<ProcessUsage>, String> {
    let mut room: c_uint = 0;
    for _ in 0..ATTEMPTS {
        let mut buf = vec![E::default(); room as usize];
        let mut count = room;
        let ptr = if buf.is_empty() {
            std::ptr::null_mut()
        } else {
            buf.as_mut_ptr()
        };
        // SAFETY: `device` is a handle NVML gave; `ptr` is NULL with a count of 0 (NVML then
        // only reports the count) or `count` entries of the layout this function writes
        // (sys.rs), and `count` is a valid in/out pointer.
        let rc = unsafe { f(device, &mut count, ptr) };
        match rc {
            sys::SUCCESS => {
                let n = (count as usize).min(buf.len());
                return Ok(buf.iter().take(n).map(Entry::usage).collect());
            }
            sys::ERROR_INSUFFICIENT_SIZE if room < MAX_ENTRIES => {
                room = count
                    .max(room.saturating_mul(2))
                    .saturating_add(SPARE)
                    .min(MAX_ENTRIES);
            }
            _ => return Err(lib.failure(name, rc)),
        }
    }
    Err(format!(
        "{name} kept reporting more processes than the {room} entries given ({ATTEMPTS} calls)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_535_before_98_has_the_wide_v3_layout() {
        for wide in ["535.43.02", "535.54.03", "535.86.10", "535.86.05"] {
            assert!(v3_is_wide(wide), "{wide}");
        }
        for v2 in [
            "535.98",
            "535.104.05",
            "530.41.03",
            "525.60.13",
            "580.82.07",
            "",
            "x.y",
        ] {
            assert!(!v3_is_wide(v2), "{v2}");
        }
    }

    #[test]
    fn not_available_is_none() {
        assert_eq!(bytes(u64::MAX), None);
        assert_eq!(bytes(0), Some(0));
        assert_eq!(bytes(1 << 30), Some(1 << 30));
    }
}

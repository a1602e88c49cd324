//! NVML (the driver's management library), loaded at run time: what each process uses of a
//! device's memory, for the out-of-memory report and the doctor.
//!
//! `libnvidia-ml.so.1` is opened with `dlopen` on the first call and started once
//! (`nvmlInit_v2`); it is never a link-time dependency, so the crate builds and runs where it
//! is missing, and every call then says why in words. [`LIBRARY_VAR`] names the file (or its
//! folder) to use instead of the dynamic loader's search.
//!
//! - `sys`: the C types, constants and function types, written by hand from `nvml.h`.
//! - `loader`: finding, opening and starting the library, once per process.
//! - `processes`: the compute process list and which of its versions to call.

mod loader;
mod processes;
mod sys;

pub use loader::LIBRARY_VAR;

/// One process's use of a device's memory, as NVML reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessUsage {
    /// Its process id.
    pub pid: u32,
    /// Device memory it uses; None where NVML cannot say (no permission, MIG).
    pub used_bytes: Option<u64>,
}

/// A device's memory as NVML sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceUsage {
    /// Total memory of the device.
    pub total_bytes: u64,
    /// Memory in use on the device, by every process.
    pub used_bytes: u64,
    /// The compute processes on the device.
    pub processes: Vec<ProcessUsage>,
}

/// The device with PCI bus id `pci_bus_id` (as `cudaDeviceGetPCIBusId` gives it, like
/// "0000:00:06.0"), or why NVML cannot say (not found, refused to start, no such device), in
/// words.
pub fn device_usage(pci_bus_id: &str) -> Result<DeviceUsage, String> {
    let lib = loader::get()?;
    let within = |why: String| format!("device {pci_bus_id}: {why} ({})", lib.path);
    let bus = loader::bus_id(pci_bus_id)?;
    let mut device: sys::Device = std::ptr::null_mut();
    // SAFETY: a NUL-terminated bus id and a valid out pointer; NVML is started (`loader::get`).
    let rc = unsafe { (lib.fns.handle_by_bus_id)(bus.as_ptr(), &mut device) };
    if rc != sys::SUCCESS {
        let call = format!("nvmlDeviceGetHandleByPciBusId_v2(\"{pci_bus_id}\")");
        return Err(within(lib.failure(&call, rc)));
    }
    let mut memory = sys::Memory::default();
    // SAFETY: a handle NVML just gave and a valid out pointer of nvmlMemory_t's layout.
    let rc = unsafe { (lib.fns.memory_info)(device, &mut memory) };
    if rc != sys::SUCCESS {
        return Err(within(lib.failure("nvmlDeviceGetMemoryInfo", rc)));
    }
    let processes = processes::list(lib, device).map_err(within)?;
    Ok(DeviceUsage {
        total_bytes: memory.total,
        used_bytes: memory.used,
        processes,
    })
}

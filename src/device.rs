//! The current device of the calling thread (CUDA keeps it per thread), synchronisation, and
//! device properties.

use crate::error::Result;
use crate::raw;
use std::ffi::CStr;
use std::os::raw::c_int;

/// Makes `id` the calling thread's current device (`cudaSetDevice`).
pub fn set(id: i32) -> Result<()> {
    cuda!(cudaSetDevice(id); "device={id}")
}

/// The calling thread's current device (`cudaGetDevice`).
pub fn current() -> Result<i32> {
    let mut d: c_int = 0;
    cuda!(cudaGetDevice(&mut d))?;
    Ok(d)
}

/// Waits for all work on the current device (`cudaDeviceSynchronize`).
pub fn synchronize() -> Result<()> {
    cuda!(cudaDeviceSynchronize())
}

/// Free and total memory of the current device (`cudaMemGetInfo`).
pub fn mem_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    cuda!(cudaMemGetInfo(&mut free, &mut total))?;
    Ok((free, total))
}

/// What the doctor and the status API report about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Properties {
    /// Device id.
    pub id: i32,
    /// Marketing name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Global memory in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// PCI bus id (`0000:3b:00.0`).
    pub pci_bus_id: String,
    /// Copy engines that can run concurrently with kernels.
    pub async_engines: i32,
    /// Unified virtual addressing with the host.
    pub unified_addressing: bool,
    /// Stream-ordered memory pools (`cudaMallocAsync`) supported.
    pub memory_pools: bool,
}

/// Reads the properties of device `id`.
pub fn properties(id: i32) -> Result<Properties> {
    // SAFETY: cudaDeviceProp is plain data; all-zero is a valid value to be overwritten.
    let mut p: raw::cudaDeviceProp = unsafe { std::mem::zeroed() };
    cuda!(cudaGetDeviceProperties(&mut p, id); "device={id}")?;
    let attr = |a: raw::cudaDeviceAttr| -> Result<i32> {
        let mut v: c_int = 0;
        cuda!(cudaDeviceGetAttribute(&mut v, a, id); "device={id}")?;
        Ok(v)
    };
    let memory_pools = attr(raw::cudaDeviceAttr::cudaDevAttrMemoryPoolsSupported)? != 0;
    let mut bus = [0 as std::os::raw::c_char; 32];
    cuda!(cudaDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, id); "device={id}")?;
    // SAFETY: cudaDeviceGetPCIBusId wrote a NUL-terminated string into `bus`.
    let pci_bus_id = unsafe { CStr::from_ptr(bus.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `name` is a NUL-terminated char array filled by cudart.
    let name = unsafe { CStr::from_ptr(p.name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Ok(Properties {
        id,
        name,
        compute_capability: (p.major, p.minor),
        total_memory: p.totalGlobalMem,
        multiprocessors: p.multiProcessorCount,
        pci_bus_id,
        async_engines: p.asyncEngineCount,
        unified_addressing: p.unifiedAddressing != 0,
        memory_pools,
    })
}

/// Whether device `from` can access memory of device `to` (`cudaDeviceCanAccessPeer`).
pub fn can_access_peer(from: i32, to: i32) -> Result<bool> {
    let mut v: c_int = 0;
    cuda!(cudaDeviceCanAccessPeer(&mut v, from, to); "device={from} peer={to}")?;
    Ok(v != 0)
}

//! The current device of the calling thread (CUDA keeps it per thread), synchronisation, and
//! device properties.

use crate::error::{Error, Result};
use crate::raw;
use std::ffi::CStr;
use std::os::raw::c_int;

/// Makes `id` the calling thread's current device (`cudaSetDevice`) and notes it in use (the
/// first time, the memory pools of the other devices in use grant it access; should that fail,
/// the error says so and `id` is current all the same).
pub fn set(id: i32) -> Result<()> {
    cuda!(cudaSetDevice(id); "device={id}")?;
    crate::cache::cross::device_seen(id).map_err(|e| {
        Error::cuda(
            e.call(),
            e.cuda_error(),
            format!("{} (device {id} is current all the same)", e.detail()),
        )
    })
}

/// Runs `f` with `id` as the calling thread's current device, then makes the device that was
/// current before current again, also when `f` fails. A failure of `f` wins over one of the
/// restore. An internal switch: it does not count as using a device (see `set`).
pub fn with<T>(id: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let before = current()?;
    if before == id {
        return f();
    }
    cuda!(cudaSetDevice(id); "device={id}")?;
    let r = f();
    let restored = cuda!(cudaSetDevice(before); "device={before} (restoring)");
    let v = r?;
    restored?;
    Ok(v)
}

/// Runs `f`, which queues work on `stream` of `device`: NULL names the legacy stream of the
/// *current* device, so for NULL `device` is made current meanwhile (see `with`).
pub fn for_stream<T>(
    stream: raw::cudaStream_t,
    device: i32,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if stream.is_null() {
        with(device, f)
    } else {
        f()
    }
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

/// Creates the context of `device` now and makes it current for this thread; returns how long
/// it took. Several processes starting at once can hit transient failures
/// (cudaErrorDevicesUnavailable, cudaErrorInitializationError, cudaErrorUnknown): those are tried
/// again, three times in all, 50 ms then 200 ms apart.
pub fn init(device: i32) -> Result<std::time::Duration> {
    const TRANSIENT: [i32; 3] = [46, 3, 999];
    let start = std::time::Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let r = cuda!(cudaInitDevice(device, 0, 0); "device={device} attempt={attempt}")
            .and_then(|()| set(device))
            .and_then(
                |()| cuda!(cudaFree(std::ptr::null_mut()); "device={device} (context creation)"),
            );
        match r {
            Ok(()) => return Ok(start.elapsed()),
            Err(e) if attempt < 3 && TRANSIENT.contains(&e.cuda_error().code()) => {
                std::thread::sleep(std::time::Duration::from_millis(if attempt == 1 {
                    50
                } else {
                    200
                }));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Lets the current device access memory of `peer` (`cudaDeviceEnablePeerAccess`); already
/// enabled is success.
pub fn enable_peer_access(peer: i32) -> Result<()> {
    match cuda!(cudaDeviceEnablePeerAccess(peer, 0); "peer={peer}") {
        Err(e) if e.cuda_error() == crate::CudaError::PEER_ACCESS_ALREADY_ENABLED => {
            // cudart keeps the error as its last error; clear it.
            crate::runtime::take_last_cuda_error();
            Ok(())
        }
        r => r,
    }
}

/// Whether device `from` can access memory of device `to` (`cudaDeviceCanAccessPeer`).
pub fn can_access_peer(from: i32, to: i32) -> Result<bool> {
    let mut v: c_int = 0;
    cuda!(cudaDeviceCanAccessPeer(&mut v, from, to); "device={from} peer={to}")?;
    Ok(v != 0)
}

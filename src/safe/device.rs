//! The current device of the calling thread (CUDA keeps it per thread), synchronisation, and
//! device properties. Plain cudart: marking a device "in use" for the caches is the operations
//! layer's job (`ops::device`).

use crate::cudart::calls::{self as cudart, Detail};
use crate::error::{CudaError, Result};

/// Makes `id` the calling thread's current device (`cudaSetDevice`).
pub fn set(id: i32) -> Result<()> {
    cudart::set_device(id).detail(|| format!("device={id}"))
}

/// Runs `f` with `id` as the calling thread's current device, then makes the device that was
/// current before current again, also when `f` fails. A failure of `f` wins over one of the
/// restore. For work whose effects the caller books, `run_on` keeps the two apart.
pub(crate) fn with<T>(id: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
    run_on(id, f).into_result()
}

/// What `run_on` did: `f`'s own result (an error of making `id` current when `f` did not run),
/// and apart from it whether the device current before could be made current again.
pub(crate) struct Ran<T> {
    pub(crate) result: Result<T>,
    pub(crate) restored: Result<()>,
}

impl<T> Ran<T> {
    /// Work done on the current device: nothing to restore.
    pub(crate) fn here(result: Result<T>) -> Ran<T> {
        Ran {
            result,
            restored: Ok(()),
        }
    }

    /// `f`'s result, or the failure to restore when `f` succeeded (its work is then done).
    pub(crate) fn into_result(self) -> Result<T> {
        let v = self.result?;
        self.restored?;
        Ok(v)
    }

    /// As `into_result`, for work the caller must not leave behind an error: when `f`
    /// succeeded but the earlier device could not be made current again, `undo` takes `f`'s
    /// work back (or keeps it for later) before the failure to restore is returned.
    pub(crate) fn undone_unless_restored(self, undo: impl FnOnce(T)) -> Result<T> {
        let v = self.result?;
        if let Err(e) = self.restored {
            undo(v);
            return Err(e);
        }
        Ok(v)
    }
}

/// As `with`, for work whose effects the caller books (a free, a destroy): when `f` succeeds
/// and the earlier device cannot be made current again, its work is done all the same, so the
/// caller books `result` and reports `restored`.
pub(crate) fn run_on<T>(id: i32, f: impl FnOnce() -> Result<T>) -> Ran<T> {
    let before = match current() {
        Ok(d) => d,
        Err(e) => return Ran::here(Err(e)),
    };
    if before == id {
        return Ran::here(f());
    }
    if let Err(e) = set(id) {
        return Ran::here(Err(e));
    }
    let result = f();
    let restored = cudart::set_device(before)
        .detail(|| format!("device={before} (restoring it as current after work on device {id})"));
    Ran { result, restored }
}

/// Runs `f`, which queues work on `stream` of `device`: NULL names the legacy stream of the
/// *current* device, so for NULL `device` is made current meanwhile (see `with`).
pub(crate) fn for_stream<T>(
    stream: cudart::StreamHandle,
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
    Ok(cudart::get_device()?)
}

/// The current device, or -1 when it cannot be read (for messages).
pub fn current_or_unknown() -> i32 {
    current().unwrap_or(-1)
}

/// Waits for all work on the current device (`cudaDeviceSynchronize`).
pub fn synchronize() -> Result<()> {
    Ok(cudart::device_synchronize()?)
}

/// Free and total memory of the current device (`cudaMemGetInfo`).
pub fn mem_info() -> Result<(usize, usize)> {
    Ok(cudart::mem_get_info()?)
}

/// The PCI bus id of `device` (`0000:3b:00.0`).
pub fn pci_bus_id(device: i32) -> Result<String> {
    Ok(cudart::device_get_pci_bus_id(device)?)
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
    let detail = || format!("device={id}");
    let p = cudart::get_device_properties(id).detail(detail)?;
    let memory_pools = cudart::memory_pools_supported(id).detail(detail)?;
    let pci_bus_id = cudart::device_get_pci_bus_id(id).detail(detail)?;
    // SAFETY: `name` is a NUL-terminated char array filled by cudart.
    let name = unsafe { std::ffi::CStr::from_ptr(p.name.as_ptr()) }
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

/// Whether `device` supports stream-ordered memory pools.
pub(crate) fn memory_pools_supported(device: i32) -> Result<bool> {
    cudart::memory_pools_supported(device).detail(|| format!("device={device}"))
}

/// Creates the context of `device` now and makes it current for this thread; returns how long
/// it took. Several processes starting at once can hit transient failures
/// (cudaErrorDevicesUnavailable, cudaErrorInitializationError, cudaErrorUnknown): those are tried
/// again, three times in all, 50 ms then 200 ms apart.
pub fn init(device: i32) -> Result<std::time::Duration> {
    const TRANSIENT: [i32; 3] = [46, 3, 999];
    let start = std::time::Instant::now();
    let mut attempt: usize = 0;
    loop {
        attempt += 1;
        let r = cudart::init_device(device)
            .detail(|| format!("device={device} attempt={attempt}"))
            .and_then(|()| create_context(device));
        match r {
            Ok(()) => return Ok(start.elapsed()),
            Err(e) if attempt < 3 && TRANSIENT.contains(&e.cuda_error().code()) => {
                std::thread::sleep(std::time::Duration::from_millis([50, 200][attempt - 1]));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Makes `device` current and creates its primary context (`cudaSetDevice`, `cudaFree(0)`).
pub fn create_context(device: i32) -> Result<()> {
    set(device)?;
    cudart::create_context().detail(|| format!("device={device} (context creation)"))
}

/// Lets the current device access memory of `peer` (`cudaDeviceEnablePeerAccess`); already
/// enabled is success.
pub fn enable_peer_access(peer: i32) -> Result<()> {
    match cudart::device_enable_peer_access(peer) {
        Err(e) if e.code == CudaError::PEER_ACCESS_ALREADY_ENABLED => {
            // cudart keeps the error as its last error; clear it.
            cudart::get_last_error();
            Ok(())
        }
        r => r.detail(|| format!("peer={peer}")),
    }
}

/// Whether device `from` can access memory of device `to` (`cudaDeviceCanAccessPeer`).
pub fn can_access_peer(from: i32, to: i32) -> Result<bool> {
    cudart::device_can_access_peer(from, to).detail(|| format!("device={from} peer={to}"))
}

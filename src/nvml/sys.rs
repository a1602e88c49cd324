//! NVML's C types, constants and function types, written by hand from the driver's `nvml.h`
//! (only what this module calls). The layouts are those of `nvml.h` as CUDA 12 and 13 ship it:
//!
//! ```c
//! typedef struct nvmlMemory_st { unsigned long long total, free, used; } nvmlMemory_t;
//! typedef struct nvmlProcessInfo_v1_st {            // nvmlDeviceGetComputeRunningProcesses
//!     unsigned int pid; unsigned long long usedGpuMemory;
//! } nvmlProcessInfo_v1_t;                            // 16 bytes
//! typedef struct nvmlProcessInfo_v2_st {            // ..._v2, and ..._v3 as nvmlProcessInfo_t
//!     unsigned int pid; unsigned long long usedGpuMemory;
//!     unsigned int gpuInstanceId; unsigned int computeInstanceId;
//! } nvmlProcessInfo_v2_t;                            // 24 bytes
//! ```
//!
//! `nvmlDeviceGetComputeRunningProcesses_v3` takes `nvmlProcessInfo_t`, which is the v2 layout
//! in every driver except 535.43 to 535.86: their `nvml.h` gave it a fifth field,
//! `unsigned long long usedGpuCcProtectedMemory` (32 bytes), and 535.98 took it out again
//! without a new version. [`V3_WIDE_DRIVERS`] names those drivers; on them `_v3` is not used.

use std::os::raw::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// `nvmlReturn_t` (a C enum: int-sized).
pub type Return = c_int;
/// `nvmlDevice_t`: an opaque pointer owned by NVML.
pub type Device = *mut c_void;

/// `NVML_SUCCESS`.
pub const SUCCESS: Return = 0;
/// `NVML_ERROR_INSUFFICIENT_SIZE`: the buffer is too small; the count says how many there are.
pub const ERROR_INSUFFICIENT_SIZE: Return = 7;
/// `NVML_VALUE_NOT_AVAILABLE`: `(unsigned long long)(-1)`, a figure NVML cannot give.
pub const VALUE_NOT_AVAILABLE: c_ulonglong = c_ulonglong::MAX;
/// `NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE`.
pub const DRIVER_VERSION_BUFFER_SIZE: usize = 80;
/// The drivers whose `_v3` process list has 32-byte entries: major 535 below minor 98.
pub const V3_WIDE_DRIVERS: (u32, u32) = (535, 98);

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// `total`: the device's memory, in bytes.
    pub total: c_ulonglong,
    /// `free`: unallocated memory, in bytes.
    pub free: c_ulonglong,
    /// `used`: allocated memory, in bytes (every process and the driver's own).
    pub used: c_ulonglong,
}

/// `nvmlProcessInfo_v1_t`, the entry of the unversioned process list.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessInfoV1 {
    /// `pid`.
    pub pid: c_uint,
    /// `usedGpuMemory` ([`VALUE_NOT_AVAILABLE`] when unknown).
    pub used_gpu_memory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t`, the entry of the `_v2` and (outside [`V3_WIDE_DRIVERS`]) `_v3`
/// process lists.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessInfoV2 {
    /// `pid`.
    pub pid: c_uint,
    /// `usedGpuMemory` ([`VALUE_NOT_AVAILABLE`] when unknown).
    pub used_gpu_memory: c_ulonglong,
    /// `gpuInstanceId` (MIG; 0xFFFFFFFF otherwise).
    pub gpu_instance_id: c_uint,
    /// `computeInstanceId` (MIG; 0xFFFFFFFF otherwise).
    pub compute_instance_id: c_uint,
}

// The sizes nvml.h gives them on every 64-bit Linux.
const _: () = assert!(std::mem::size_of::<Memory>() == 24);
const _: () = assert!(std::mem::size_of::<ProcessInfoV1>() == 16);
const _: () = assert!(std::mem::size_of::<ProcessInfoV2>() == 24);

/// `nvmlReturn_t nvmlInit_v2(void)`.
pub type InitV2 = unsafe extern "C" fn() -> Return;
/// `const char *nvmlErrorString(nvmlReturn_t)`.
pub type ErrorString = unsafe extern "C" fn(Return) -> *const c_char;
/// `nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)`.
pub type SystemGetDriverVersion = unsafe extern "C" fn(*mut c_char, c_uint) -> Return;
/// `nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)`.
pub type DeviceGetHandleByPciBusIdV2 = unsafe extern "C" fn(*const c_char, *mut Device) -> Return;
/// `nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *)`.
pub type DeviceGetMemoryInfo = unsafe extern "C" fn(Device, *mut Memory) -> Return;
/// `nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2` and `_v3`
/// `(nvmlDevice_t, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos)`.
pub type DeviceGetComputeRunningProcessesV2 =
    unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfoV2) -> Return;
/// `nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned int *infoCount,
/// nvmlProcessInfo_v1_t *infos)`.
pub type DeviceGetComputeRunningProcessesV1 =
    unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfoV1) -> Return;

/// The name nvml.h gives a return code, for messages (`NVML_ERROR_NOT_FOUND`).
pub fn return_name(code: Return) -> &'static str {
    match code {
        0 => "NVML_SUCCESS",
        1 => "NVML_ERROR_UNINITIALIZED",
        2 => "NVML_ERROR_INVALID_ARGUMENT",
        3 => "NVML_ERROR_NOT_SUPPORTED",
        4 => "NVML_ERROR_NO_PERMISSION",
        5 => "NVML_ERROR_ALREADY_INITIALIZED",
        6 => "NVML_ERROR_NOT_FOUND",
        7 => "NVML_ERROR_INSUFFICIENT_SIZE",
        8 => "NVML_ERROR_INSUFFICIENT_POWER",
        9 => "NVML_ERROR_DRIVER_NOT_LOADED",
        10 => "NVML_ERROR_TIMEOUT",
        11 => "NVML_ERROR_IRQ_ISSUE",
        12 => "NVML_ERROR_LIBRARY_NOT_FOUND",
        13 => "NVML_ERROR_FUNCTION_NOT_FOUND",
        14 => "NVML_ERROR_CORRUPTED_INFOROM",
        15 => "NVML_ERROR_GPU_IS_LOST",
        16 => "NVML_ERROR_RESET_REQUIRED",
        17 => "NVML_ERROR_OPERATING_SYSTEM",
        18 => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        19 => "NVML_ERROR_IN_USE",
        20 => "NVML_ERROR_MEMORY",
        21 => "NVML_ERROR_NO_DATA",
        22 => "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
        23 => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        24 => "NVML_ERROR_FREQ_NOT_SUPPORTED",
        25 => "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        26 => "NVML_ERROR_DEPRECATED",
        27 => "NVML_ERROR_NOT_READY",
        28 => "NVML_ERROR_GPU_NOT_FOUND",
        29 => "NVML_ERROR_INVALID_STATE",
        30 => "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
        999 => "NVML_ERROR_UNKNOWN",
        _ => "an NVML error this library does not know",
    }
}

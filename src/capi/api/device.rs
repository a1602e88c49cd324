//! Devices: count, explicit initialisation, current device, properties, memory, synchronize,
//! peer access.

use super::{reset, status, status_out};
use crate::ops;
use crate::safe::device;
use std::os::raw::{c_char, c_double, c_int};

/// Device properties (`llaisysNvidiaDeviceProperties` in the header).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DeviceProperties {
    /// NUL-terminated name.
    pub name: [c_char; 256],
    /// Compute capability, major.
    pub major: c_int,
    /// Compute capability, minor.
    pub minor: c_int,
    /// Global memory in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: c_int,
    /// NUL-terminated PCI bus id.
    pub pci_bus_id: [c_char; 32],
    /// Copy engines that run concurrently with kernels.
    pub async_engines: c_int,
    /// 1 with unified virtual addressing.
    pub unified_addressing: c_int,
    /// 1 when stream-ordered memory pools are supported.
    pub memory_pools: c_int,
}

impl DeviceProperties {
    /// Every field zero: what `llaisysNvidiaGetDeviceProperties` leaves on failure.
    pub const ZERO: DeviceProperties = DeviceProperties {
        name: [0; 256],
        major: 0,
        minor: 0,
        total_memory: 0,
        multiprocessors: 0,
        pci_bus_id: [0; 32],
        async_engines: 0,
        unified_addressing: 0,
        memory_pools: 0,
    };
}

fn fill_str<const N: usize>(dst: &mut [c_char; N], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
}

/// Writes the number of devices to `*count` (always written, 0 when there are none); the status
/// says why there are none (CUDA error 35: no driver, 100: no device).
///
/// # Safety
/// `count` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaDeviceCount(count: *mut c_int) -> c_int {
    let device_count = ops::device_count_checked;
    // SAFETY: `count` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaDeviceCount", count, "count", 0, device_count) }
}

/// Creates the context of `device` now, makes it current and writes the ms it took to `*ms`.
///
/// # Safety
/// `ms` is NULL or valid for writing a double.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaInitDevice(dev: c_int, ms: *mut c_double) -> c_int {
    // SAFETY: `ms` is NULL or valid for writing (this function's contract).
    unsafe { reset(ms, 0.0) };
    status("llaisysNvidiaInitDevice", || {
        let took = ops::init_device(dev)?;
        // SAFETY: `ms` is NULL or valid for writing (this function's contract).
        unsafe { reset(ms, took.as_secs_f64() * 1e3) };
        Ok(())
    })
}

/// Writes the calling thread's current device to `*dev` (-1 on failure).
///
/// # Safety
/// `dev` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGetDevice(dev: *mut c_int) -> c_int {
    // SAFETY: `dev` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaGetDevice", dev, "device", -1, device::current) }
}

/// Makes `dev` the calling thread's current device (devices are per thread, as in CUDA).
#[no_mangle]
pub extern "C" fn llaisysNvidiaSetDevice(dev: c_int) -> c_int {
    status("llaisysNvidiaSetDevice", || ops::set_device(dev))
}

/// Waits for all work on the current device.
#[no_mangle]
pub extern "C" fn llaisysNvidiaDeviceSynchronize() -> c_int {
    status("llaisysNvidiaDeviceSynchronize", ops::device_synchronize)
}

/// Fills `*props` with the properties of `dev` (all zero on failure).
///
/// # Safety
/// `props` is NULL or valid for writing a `DeviceProperties`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGetDeviceProperties(
    dev: c_int,
    props: *mut DeviceProperties,
) -> c_int {
    let properties = || {
        let p = device::properties(dev)?;
        let mut v = DeviceProperties {
            major: p.compute_capability.0,
            minor: p.compute_capability.1,
            total_memory: p.total_memory,
            multiprocessors: p.multiprocessors,
            async_engines: p.async_engines,
            unified_addressing: p.unified_addressing as c_int,
            memory_pools: p.memory_pools as c_int,
            ..DeviceProperties::ZERO
        };
        fill_str(&mut v.name, &p.name);
        fill_str(&mut v.pci_bus_id, &p.pci_bus_id);
        Ok(v)
    };
    // SAFETY: `props` is NULL or valid for writing (this function's contract).
    unsafe {
        status_out(
            "llaisysNvidiaGetDeviceProperties",
            props,
            "props",
            DeviceProperties::ZERO,
            properties,
        )
    }
}

/// Writes free and total memory of the current device (either pointer may be NULL; 0 on failure).
///
/// # Safety
/// `free` and `total` are each NULL or valid for writing a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaMemGetInfo(free: *mut usize, total: *mut usize) -> c_int {
    // SAFETY: each is NULL or valid for writing (this function's contract).
    unsafe {
        reset(free, 0);
        reset(total, 0);
    }
    status("llaisysNvidiaMemGetInfo", || {
        let (f, t) = device::mem_info()?;
        // SAFETY: `free` and `total` are each NULL or valid for writing (as above).
        unsafe {
            reset(free, f);
            reset(total, t);
        }
        Ok(())
    })
}

/// Writes 1 to `*can` when `dev` can access memory of `peer`, else 0 (0 on failure).
///
/// # Safety
/// `can` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaDeviceCanAccessPeer(
    can: *mut c_int,
    dev: c_int,
    peer: c_int,
) -> c_int {
    // SAFETY: `can` is NULL or valid for writing (this function's contract).
    unsafe {
        status_out("llaisysNvidiaDeviceCanAccessPeer", can, "can", 0, || {
            Ok(device::can_access_peer(dev, peer)? as c_int)
        })
    }
}

/// Lets the current device access memory of `peer`; already enabled is success.
#[no_mangle]
pub extern "C" fn llaisysNvidiaDeviceEnablePeerAccess(peer: c_int) -> c_int {
    status("llaisysNvidiaDeviceEnablePeerAccess", || {
        device::enable_peer_access(peer)
    })
}

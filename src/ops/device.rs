//! Devices: what get_device_count, set_device, device_synchronize and the status API's device
//! functions do. A device a caller makes current counts as in use (the caches' peer access).

use super::Redetail;
use crate::cache;
use crate::error::{CudaError, Error, Result};
use crate::safe::device;
use std::sync::OnceLock;

/// The device count of this process, read once (CUDA fixes it at init too), and when it is 0
/// because of an error, that error. Only the code is kept (no heap memory in a static: a
/// library loaded and unloaded again and again leaves nothing behind).
pub fn device_count() -> (i32, Option<Error>) {
    static COUNT: OnceLock<(i32, Option<(&'static str, CudaError)>)> = OnceLock::new();
    let (n, e) = COUNT.get_or_init(|| match crate::safe::runtime::device_count() {
        Ok(n) => (n, None),
        Err(e) => (0, Some((e.call(), e.cuda_error()))),
    });
    (
        *n,
        e.map(|(call, code)| Error::cuda(call, code, String::new())),
    )
}

/// The device count with the reason when there are none: `Err` for no driver (35), no device
/// (100) or a broken setup (the status API's `llaisysNvidiaDeviceCount`).
pub fn device_count_checked() -> Result<i32> {
    match device_count() {
        (_, Some(e)) => Err(e),
        (n, None) => Ok(n),
    }
}

/// Makes `id` the calling thread's current device and notes it in use (the first time, the
/// memory pools of the other devices in use grant it access; should that fail, the error says
/// so and `id` is current all the same).
#[inline]
pub fn set_device(id: i32) -> Result<()> {
    device::set(id).redetail(|_| format!("device={id}, device count {}", device_count().0))?;
    cache::device::device_seen(id)
        .redetail(|e| format!("{} (device {id} is current all the same)", e.detail()))
}

/// Creates the context of `device` now, makes it current and notes it in use; returns how long
/// the context took (see `device::init`).
pub fn init_device(id: i32) -> Result<std::time::Duration> {
    let took = device::init(id)?;
    set_device(id)?;
    Ok(took)
}

/// Waits for all work on the current device; refused while a stream of it captures a graph.
pub fn device_synchronize() -> Result<()> {
    super::capturing::device_not_capturing()?;
    device::synchronize()?;
    // Freed memory beyond the device's release threshold goes back (a failure there is the
    // cache's, not this call's).
    if cache::threshold::any() {
        if let Ok(d) = device::current() {
            cache::device::set_aside(cache::device::keep_within_threshold(d));
        }
    }
    Ok(())
}

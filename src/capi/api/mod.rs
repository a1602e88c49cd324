//! The status-returning C API beyond the llaisys table (`llaisysNvidia*` in the header): every
//! function returns a `llaisysNvidiaStatus_t` (0 success), sets the thread's last error on
//! failure (code, CUDA error, message) and never calls the error handler. Streams, memory and
//! copies share the table's machinery (caches, checks), so the two can be mixed.
//!
//! One file per area: `device`, `streams` (streams and events), `memory`, `copies`, `graphs`
//! (capture and CUDA graphs), `versions`.

pub mod copies;
pub mod device;
pub mod graphs;
pub mod memory;
pub mod streams;
pub mod versions;

use crate::capi::policy;
use crate::error::{Error, Result};
use std::os::raw::c_int;

/// `LLAISYS_NVIDIA_SUCCESS`: what a status-returning call returns when it worked (failures are
/// the `ErrorKind` values).
pub const SUCCESS: c_int = 0;

/// Runs `body` as a status-returning API call: `SUCCESS`, or the status with the last error set.
pub(crate) fn status(function: &'static str, body: impl FnOnce() -> Result<()>) -> c_int {
    match policy::catch_panic(function, body) {
        Ok(()) => SUCCESS,
        Err(e) => {
            let record = policy::Record::new(function, &e);
            let status = record.status;
            policy::set_last(Some(std::sync::Arc::new(record)));
            status
        }
    }
}

/// Writes `value` to a caller's out-parameter; NULL is an invalid argument.
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
pub(crate) unsafe fn out<T>(out: *mut T, name: &str, value: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::invalid_argument(format!(
            "{name}=NULL: nowhere to write the result"
        )));
    }
    // SAFETY: the caller's contract; not NULL (checked).
    unsafe { out.write(value) };
    Ok(())
}

/// Writes NULL to a caller's pointer out-parameter before anything else can fail (a refusal in a
/// forked child included): on every failure it then holds NULL. NULL itself is left alone.
///
/// # Safety
/// `out` is NULL or valid for writing.
pub(crate) unsafe fn clear<T>(out: *mut *mut T) {
    if !out.is_null() {
        // SAFETY: the caller's contract; not NULL (checked).
        unsafe { out.write(std::ptr::null_mut()) };
    }
}

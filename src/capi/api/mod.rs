//! The status-returning C API beyond the llaisys table (`llaisysNvidia*` in the header): every
//! function returns a `llaisysNvidiaStatus_t` (0 success), sets the thread's last error on
//! failure (code, CUDA error, message) and never calls the error handler. Streams, memory and
//! copies share the table's machinery (caches, checks), so the two can be mixed.

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

/// A failure a status call reports: it makes the record kept as the thread's last error.
/// `Error` (CUDA, bad input) and the communicator's errors are failures.
pub(crate) trait Failure: From<Error> {
    /// The record of this failure raised in our `function`.
    fn record(&self, function: &str) -> policy::Record;
}

impl Failure for Error {
    fn record(&self, function: &str) -> policy::Record {
        policy::Record::new(function, self)
    }
}

/// Runs `body` as a status-returning API call: `SUCCESS`, or the status with the last error set
/// (a panic inside is an internal error; a forked child is refused without running `body`).
/// For bodies failing with the crate's `Error`; `status_of` is the same for any `Failure`.
pub(crate) fn status(function: &'static str, body: impl FnOnce() -> Result<()>) -> c_int {
    status_of(function, body)
}

/// `status` for a body failing with any `Failure` (the communicator's calls): the one wrapper
/// that runs a call, records its failure as the thread's last error and returns its status.
pub(crate) fn status_of<E: Failure>(
    function: &'static str,
    body: impl FnOnce() -> std::result::Result<(), E>,
) -> c_int {
    let outcome = policy::catch_panic(function, || Ok(body())).unwrap_or_else(|e| Err(e.into()));
    match outcome {
        Ok(()) => SUCCESS,
        Err(e) => {
            let record = e.record(function);
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
    // SAFETY: `out` is not NULL (checked), so valid for writing a `T` (contract).
    unsafe { out.write(value) };
    Ok(())
}

/// Runs `body` as a status call whose result goes to the out-parameter `p` (`name` in messages):
/// `failure` is written first (`reset`), a NULL `p` is refused before `body` runs (nothing it
/// would make is lost), and its value is written once it worked. `status_out_of`: any `Failure`.
///
/// # Safety
/// `p` is NULL or valid for writing a `T`.
pub(crate) unsafe fn status_out<T: Copy>(
    function: &'static str,
    p: *mut T,
    name: &str,
    failure: T,
    body: impl FnOnce() -> Result<T>,
) -> c_int {
    // SAFETY: `p` is NULL or valid for writing a `T` (this function's contract).
    unsafe { status_out_of(function, p, name, failure, body) }
}

/// `status_out` for a body failing with any `Failure` (the communicator's calls).
///
/// # Safety
/// `p` is NULL or valid for writing a `T`.
pub(crate) unsafe fn status_out_of<T: Copy, E: Failure>(
    function: &'static str,
    p: *mut T,
    name: &str,
    failure: T,
    body: impl FnOnce() -> std::result::Result<T, E>,
) -> c_int {
    // SAFETY: `p` is NULL or valid for writing a `T` (this function's contract).
    unsafe { reset(p, failure) };
    status_of(function, || -> std::result::Result<(), E> {
        // SAFETY: as above; `out` refuses NULL.
        unsafe { out(p, name, failure) }?;
        let value = body()?;
        // SAFETY: as above.
        Ok(unsafe { out(p, name, value) }?)
    })
}

/// `status_out` with two out-parameters, each `(pointer, name)`; a NULL `first` is refused before
/// a NULL `second`.
///
/// # Safety
/// Each pointer is NULL or valid for writing its type.
pub(crate) unsafe fn status_out2<T: Copy, U: Copy>(
    function: &'static str,
    first: (*mut T, &str),
    second: (*mut U, &str),
    failure: (T, U),
    body: impl FnOnce() -> Result<(T, U)>,
) -> c_int {
    let ((p, p_name), (q, q_name)) = (first, second);
    // SAFETY: `p` and `q` are each NULL or valid for writing (this function's contract).
    unsafe {
        reset(p, failure.0);
        reset(q, failure.1);
    }
    status(function, || {
        // SAFETY: as above; `out` refuses NULL.
        unsafe {
            out(p, p_name, failure.0)?;
            out(q, q_name, failure.1)?;
        }
        let (a, b) = body()?;
        // SAFETY: as above.
        unsafe {
            out(p, p_name, a)?;
            out(q, q_name, b)
        }
    })
}

/// Writes `value`, an out-parameter's failure value, before anything can fail (a forked child's
/// refusal included), so that it holds it on every failure. NULL is left alone.
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
pub(crate) unsafe fn reset<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: `out` is not NULL (checked), so valid for writing a `T` (contract).
        unsafe { out.write(value) };
    }
}

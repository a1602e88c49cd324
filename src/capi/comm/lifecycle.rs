//! NCCL's version and path, unique ids, the timeout, joining, a communicator's shape and state,
//! destroy and abort, synchronize, and groups. Every out-parameter gets its failure value first
//! (`api::reset`), so it holds it on every failure.

use super::{Comm, CommId, Stream};
use crate::capi::api::{out, reset, status_of as status, status_out_of as status_out};
use crate::capi::policy;
use crate::nccl::{Error, Result};
use crate::ops::comm as ops;
use std::os::raw::{c_char, c_int};
use std::ptr::null_mut;

/// Loads NCCL if needed and writes its version code (23203 = 2.32.3); 0 on failure.
///
/// # Safety
/// `version` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaNcclGetVersion(version: *mut c_int) -> c_int {
    let code = || ops::version().map(|(v, _)| v);
    // SAFETY: `version` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaNcclGetVersion", version, "version", 0, code) }
}

/// Copies the path NCCL was loaded from into `buf` and its full length to `*length`.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes; `length` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaNcclLibraryPath(
    buf: *mut c_char,
    len: usize,
    length: *mut usize,
) -> c_int {
    // SAFETY: `buf` is NULL or valid for `len` bytes and `length` NULL or valid for writing
    // (this function's contract); the empty string fits any `len` > 0.
    unsafe {
        policy::copy_out(c"", buf, len);
        reset(length, 0);
    }
    status("llaisysNvidiaNcclLibraryPath", || -> Result<()> {
        let (_, path) = ops::version()?;
        let c = std::ffi::CString::new(path.replace('\0', "?")).unwrap_or_default();
        // SAFETY: `buf` is NULL or valid for writing `len` bytes (this function's contract).
        let n = unsafe { policy::copy_out(&c, buf, len) };
        // SAFETY: `length` is NULL or valid for writing (this function's contract).
        unsafe { reset(length, n) };
        Ok(())
    })
}

/// Writes a new unique id into `*id` (all zeros on failure).
///
/// # Safety
/// `id` is NULL or valid for writing a `CommId`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommGetUniqueId(id: *mut CommId) -> c_int {
    let zeros = CommId { internal: [0; 128] };
    // SAFETY: `id` is NULL or valid for writing (this function's contract).
    unsafe { reset(id, zeros) };
    status("llaisysNvidiaCommGetUniqueId", || -> Result<()> {
        if id.is_null() {
            return Err(Error::invalid("id=NULL: nowhere to write the unique id"));
        }
        let bytes = ops::unique_id()?;
        let v = CommId {
            internal: bytes.map(|b| b as c_char),
        };
        // SAFETY: `id` is NULL or valid for writing (this function's contract).
        Ok(unsafe { out(id, "id", v) }?)
    })
}

/// Sets the timeout (milliseconds, 0: no limit) of communicators made from now on.
#[no_mangle]
pub extern "C" fn llaisysNvidiaCommSetTimeout(ms: i64) -> c_int {
    status("llaisysNvidiaCommSetTimeout", || ops::set_timeout(ms))
}

/// Joins rank `rank` of `nranks` on the calling thread's current device; `*comm` is NULL on
/// failure.
///
/// # Safety
/// `comm` is NULL or valid for writing; `id` is NULL or valid for reading a `CommId`.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommInitRank(
    comm: *mut Comm,
    nranks: c_int,
    id: *const CommId,
    rank: c_int,
) -> c_int {
    let join = || -> Result<Comm> {
        if id.is_null() {
            return Err(Error::invalid("id=NULL: no unique id"));
        }
        // The bytes as they are (`c_char` is `i8` or `u8` depending on the target).
        // SAFETY: `id` is not NULL (checked), so valid for reading (this function's contract).
        let bytes = unsafe { (*id).internal }.map(|b| b.to_ne_bytes()[0]);
        Ok(ops::init_rank(nranks, &bytes, rank)? as Comm)
    };
    // SAFETY: `comm` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaCommInitRank", comm, "comm", null_mut(), join) }
}

/// One communicator per device, made together: `comms[i]` is rank i on `devices[i]` (NULL:
/// devices 0..ndev-1); every `comms[i]` is NULL on failure.
///
/// # Safety
/// `comms` is NULL or valid for writing `ndev` handles; `devices` is NULL or valid for reading
/// `ndev` ints.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommInitAll(
    comms: *mut Comm,
    ndev: c_int,
    devices: *const c_int,
) -> c_int {
    let n = usize::try_from(ndev).unwrap_or(0);
    if !comms.is_null() {
        for i in 0..n {
            // SAFETY: `comms` is valid for writing `ndev` handles (contract) and `i` < `ndev`.
            unsafe { comms.add(i).write(null_mut()) };
        }
    }
    status("llaisysNvidiaCommInitAll", || -> Result<()> {
        if comms.is_null() {
            return Err(Error::invalid(
                "comms=NULL: nowhere to write the communicators",
            ));
        }
        if ndev < 1 {
            return Err(Error::invalid(format!("ndev={ndev}: at least 1")));
        }
        let list = if devices.is_null() {
            None
        } else {
            // SAFETY: `devices` is not NULL, so valid for `ndev` reads (this function's contract).
            Some(unsafe { std::slice::from_raw_parts(devices, n) })
        };
        let handles = ops::init_all(ndev, list)?;
        for (i, h) in handles.into_iter().enumerate().take(n) {
            // SAFETY: `comms` is valid for writing `ndev` handles (not NULL, checked; this
            // function's contract) and `i` < `ndev`.
            unsafe { comms.add(i).write(h as Comm) };
        }
        Ok(())
    })
}

/// Destroys `comm`, flushing its queued work (bounded by its timeout); NULL does nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaCommDestroy(comm: Comm) -> c_int {
    status("llaisysNvidiaCommDestroy", || ops::destroy(comm))
}

/// Aborts `comm` (its queued work stops) and frees the handle. NULL does nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaCommAbort(comm: Comm) -> c_int {
    status("llaisysNvidiaCommAbort", || ops::abort(comm))
}

/// The rank of `comm` (-1 on failure).
///
/// # Safety
/// `rank` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommRank(comm: Comm, rank: *mut c_int) -> c_int {
    // SAFETY: `rank` is NULL or valid for writing (this function's contract).
    unsafe { shape_field("llaisysNvidiaCommRank", comm, (rank, "rank", -1), |s| s.0) }
}

/// The number of ranks of `comm` (0 on failure).
///
/// # Safety
/// `size` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommSize(comm: Comm, size: *mut c_int) -> c_int {
    // SAFETY: `size` is NULL or valid for writing (this function's contract).
    unsafe { shape_field("llaisysNvidiaCommSize", comm, (size, "size", 0), |s| s.1) }
}

/// The CUDA device of `comm` (-1 on failure).
///
/// # Safety
/// `device` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommDevice(comm: Comm, device: *mut c_int) -> c_int {
    // SAFETY: `device` is NULL or valid for writing (this function's contract).
    unsafe {
        shape_field(
            "llaisysNvidiaCommDevice",
            comm,
            (device, "device", -1),
            |s| s.2,
        )
    }
}

/// `pick` of `comm`'s (rank, size, device) into `*value` (`name` in messages), as `function`;
/// `failure` is written first.
///
/// # Safety
/// `value` is NULL or valid for writing an int.
unsafe fn shape_field(
    function: &'static str,
    comm: Comm,
    (value, name, failure): (*mut c_int, &str, c_int),
    pick: fn((c_int, c_int, c_int)) -> c_int,
) -> c_int {
    // SAFETY: `value` is NULL or valid for writing (this function's contract).
    unsafe { reset(value, failure) };
    status(function, || -> Result<()> {
        let v = pick(ops::shape(comm)?);
        // SAFETY: `value` is NULL or valid for writing (this function's contract).
        Ok(unsafe { out(value, name, v) }?)
    })
}

/// Writes `ncclCommGetAsyncError` of `comm` into `*result` (0 on failure).
///
/// # Safety
/// `result` is NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommGetAsyncError(comm: Comm, result: *mut c_int) -> c_int {
    let query = || ops::async_error(comm).map(|r| r.0);
    // SAFETY: `result` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaCommGetAsyncError", result, "result", 0, query) }
}

/// Waits for `stream` while watching `comm`; aborts it on an asynchronous NCCL error or after
/// `timeout_ms` (-1: the communicator's timeout, 0: no limit).
#[no_mangle]
pub extern "C" fn llaisysNvidiaCommSynchronize(
    comm: Comm,
    stream: Stream,
    timeout_ms: i64,
) -> c_int {
    status("llaisysNvidiaCommSynchronize", || {
        ops::synchronize(comm, stream, timeout_ms)
    })
}

/// Opens a group of NCCL calls on this thread (nestable).
#[no_mangle]
pub extern "C" fn llaisysNvidiaGroupStart() -> c_int {
    status("llaisysNvidiaGroupStart", ops::group_start)
}

/// Closes the innermost group; the outermost launches it.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGroupEnd() -> c_int {
    status("llaisysNvidiaGroupEnd", ops::group_end)
}

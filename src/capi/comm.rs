//! The communicator's C API (`llaisysNvidiaComm*`, `llaisysNvidiaGroup*`, declared in the last
//! block of `csrc/llaisys_runtime.h`) and its llaisys-style function table
//! (`LlaisysNvidiaCommAPI`). Same error model as the rest of the status API: every function
//! returns a status (0 success), sets the thread's last error on failure (with the NCCL code in
//! `llaisysNvidiaLastNcclError`) and never calls the error handler. The bodies are in
//! `ops::comm`.

use super::policy::{self, Record};
use crate::nccl::{Error, Result};
use crate::ops::comm as ops;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

/// `llaisysNvidiaCommId`: NCCL's unique id as 128 opaque bytes, to send to every rank.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CommId {
    /// The bytes.
    pub internal: [c_char; ops::UNIQUE_ID_BYTES],
}

/// `llaisysNvidiaComm_t`: a communicator handle.
pub type Comm = *mut c_void;
/// `llaisysStream_t`.
pub type Stream = *mut c_void;

/// Runs `body` as a status call of the communicator: 0, or the status with the last error set.
fn status(function: &'static str, body: impl FnOnce() -> Result<()>) -> c_int {
    let outcome = policy::catch_panic(function, || Ok(body())).unwrap_or_else(|e| Err(e.into()));
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            let record = record(function, &e);
            let s = record.status;
            policy::set_last(Some(Arc::new(record)));
            s
        }
    }
}

fn record(function: &str, e: &Error) -> Record {
    match e {
        Error::Base(base) => Record::new(function, base),
        other => {
            let device = if matches!(other, Error::Unavailable { .. }) {
                -1
            } else {
                crate::device::current_or_unknown()
            };
            let on = if device >= 0 {
                format!(" on device {device}")
            } else {
                String::new()
            };
            Record::with_nccl(
                other.status(),
                other.cuda_code(),
                other.nccl_code(),
                device,
                function,
                other.call(),
                &format!("llaisys-nvidia: {function}{on}: {other}"),
            )
        }
    }
}

/// # Safety
/// `out` is NULL or valid for writing a `T`.
unsafe fn out<T>(out: *mut T, name: &str, value: T) -> Result<()> {
    // SAFETY: caller contract.
    unsafe { super::api::out(out, name, value) }.map_err(Error::from)
}

/// The `ncclResult_t` of the calling thread's last error (0 when none, or when no NCCL call
/// failed; 7 `ncclInProgress` for a timeout).
#[no_mangle]
pub extern "C" fn llaisysNvidiaLastNcclError() -> c_int {
    policy::last().map_or(0, |r| r.nccl_error)
}

/// Loads NCCL if needed and writes its version code (23203 = 2.32.3).
///
/// # Safety
/// `version` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaNcclGetVersion(version: *mut c_int) -> c_int {
    status("llaisysNvidiaNcclGetVersion", || {
        // SAFETY: caller contract.
        unsafe { out(version, "version", 0) }?;
        let (v, _) = ops::version()?;
        // SAFETY: caller contract.
        unsafe { out(version, "version", v) }
    })
}

/// Copies the path NCCL was loaded from into `buf` (NUL-terminated, truncated to `len`) and
/// writes its full length to `*length` (may be NULL).
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes; `length` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaNcclLibraryPath(
    buf: *mut c_char,
    len: usize,
    length: *mut usize,
) -> c_int {
    status("llaisysNvidiaNcclLibraryPath", || {
        let (_, path) = ops::version()?;
        let c = std::ffi::CString::new(path.replace('\0', "?")).unwrap_or_default();
        // SAFETY: caller contract.
        let n = unsafe { policy::copy_out(&c, buf, len) };
        if !length.is_null() {
            // SAFETY: caller contract.
            unsafe { *length = n };
        }
        Ok(())
    })
}

/// Writes a new unique id into `*id`. Needs no GPU (NCCL opens its bootstrap socket).
///
/// # Safety
/// `id` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommGetUniqueId(id: *mut CommId) -> c_int {
    status("llaisysNvidiaCommGetUniqueId", || {
        if id.is_null() {
            return Err(Error::invalid("id=NULL: nowhere to write the unique id"));
        }
        let bytes = ops::unique_id()?;
        let v = CommId {
            internal: bytes.map(|b| b as c_char),
        };
        // SAFETY: caller contract.
        unsafe { out(id, "id", v) }
    })
}

/// Sets the timeout (milliseconds, 0: no limit) of communicators made from now on; it
/// overrides LLAISYS_NVIDIA_NCCL_TIMEOUT_MS.
#[no_mangle]
pub extern "C" fn llaisysNvidiaCommSetTimeout(ms: i64) -> c_int {
    status("llaisysNvidiaCommSetTimeout", || ops::set_timeout(ms))
}

/// Joins rank `rank` of `nranks` on the calling thread's current device.
///
/// # Safety
/// `comm` is NULL or valid for writing; `id` is NULL or valid for reading.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommInitRank(
    comm: *mut Comm,
    nranks: c_int,
    id: *const CommId,
    rank: c_int,
) -> c_int {
    status("llaisysNvidiaCommInitRank", || {
        // SAFETY: caller contract.
        unsafe { out(comm, "comm", std::ptr::null_mut()) }?;
        if id.is_null() {
            return Err(Error::invalid("id=NULL: no unique id"));
        }
        // SAFETY: caller contract.
        let bytes = unsafe { (*id).internal }.map(|b| b as u8);
        let h = ops::init_rank(nranks, &bytes, rank)?;
        // SAFETY: caller contract.
        unsafe { out(comm, "comm", h as Comm) }
    })
}

/// One communicator per device, made together: `comms[i]` is rank i on `devices[i]` (NULL:
/// devices 0..ndev-1).
///
/// # Safety
/// `comms` is NULL or valid for `ndev` writes; `devices` is NULL or valid for `ndev` reads.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommInitAll(
    comms: *mut Comm,
    ndev: c_int,
    devices: *const c_int,
) -> c_int {
    status("llaisysNvidiaCommInitAll", || {
        if comms.is_null() {
            return Err(Error::invalid(
                "comms=NULL: nowhere to write the communicators",
            ));
        }
        if ndev < 1 {
            return Err(Error::invalid(format!("ndev={ndev}: at least 1")));
        }
        for i in 0..ndev as usize {
            // SAFETY: caller contract.
            unsafe { *comms.add(i) = std::ptr::null_mut() };
        }
        let list = if devices.is_null() {
            None
        } else {
            // SAFETY: caller contract.
            Some(unsafe { std::slice::from_raw_parts(devices, ndev as usize) })
        };
        let handles = ops::init_all(ndev, list)?;
        for (i, h) in handles.into_iter().enumerate() {
            // SAFETY: caller contract.
            unsafe { *comms.add(i) = h as Comm };
        }
        Ok(())
    })
}

/// Destroys `comm`: its queued work is flushed (bounded by its timeout; aborted past it).
/// NULL does nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaCommDestroy(comm: Comm) -> c_int {
    status("llaisysNvidiaCommDestroy", || ops::destroy(comm))
}

/// Aborts `comm` (its queued work stops) and frees the handle. NULL does nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaCommAbort(comm: Comm) -> c_int {
    status("llaisysNvidiaCommAbort", || ops::abort(comm))
}

/// The rank of `comm`.
///
/// # Safety
/// `rank` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommRank(comm: Comm, rank: *mut c_int) -> c_int {
    status("llaisysNvidiaCommRank", || {
        let (r, _, _) = ops::shape(comm)?;
        // SAFETY: caller contract.
        unsafe { out(rank, "rank", r) }
    })
}

/// The number of ranks of `comm`.
///
/// # Safety
/// `size` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommSize(comm: Comm, size: *mut c_int) -> c_int {
    status("llaisysNvidiaCommSize", || {
        let (_, n, _) = ops::shape(comm)?;
        // SAFETY: caller contract.
        unsafe { out(size, "size", n) }
    })
}

/// The CUDA device of `comm`.
///
/// # Safety
/// `device` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommDevice(comm: Comm, device: *mut c_int) -> c_int {
    status("llaisysNvidiaCommDevice", || {
        let (_, _, d) = ops::shape(comm)?;
        // SAFETY: caller contract.
        unsafe { out(device, "device", d) }
    })
}

/// Writes `ncclCommGetAsyncError` of `comm` (0 healthy, 7 still in progress, else the error of
/// earlier asynchronous work) into `*result`.
///
/// # Safety
/// `result` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaCommGetAsyncError(comm: Comm, result: *mut c_int) -> c_int {
    status("llaisysNvidiaCommGetAsyncError", || {
        // SAFETY: caller contract.
        unsafe { out(result, "result", 0) }?;
        let r = ops::async_error(comm)?;
        // SAFETY: caller contract.
        unsafe { out(result, "result", r.0) }
    })
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

/// All-reduce.
///
/// # Safety
/// The buffers are device-accessible for `count` elements until the work has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    status("llaisysNvidiaAllReduce", || {
        // SAFETY: caller contract (the header\'s).
        unsafe { ops::all_reduce(sendbuff, recvbuff, count, dtype, op, comm, stream) }
    })
}

/// All-gather.
///
/// # Safety
/// `sendbuff` holds `sendcount` elements, `recvbuff` `nranks * sendcount`, until the work has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    dtype: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    status("llaisysNvidiaAllGather", || {
        // SAFETY: caller contract (the header\'s).
        unsafe { ops::all_gather(sendbuff, recvbuff, sendcount, dtype, comm, stream) }
    })
}

/// Reduce-scatter.
///
/// # Safety
/// `sendbuff` holds `nranks * recvcount` elements, `recvbuff` `recvcount`, until the work has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    dtype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    status("llaisysNvidiaReduceScatter", || {
        // SAFETY: caller contract (the header\'s).
        unsafe { ops::reduce_scatter(sendbuff, recvbuff, recvcount, dtype, op, comm, stream) }
    })
}

/// Broadcast from `root`.
///
/// # Safety
/// The buffers are device-accessible for `count` elements until the work has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    status("llaisysNvidiaBroadcast", || {
        // SAFETY: caller contract (the header\'s).
        unsafe { ops::broadcast(sendbuff, recvbuff, count, dtype, root, comm, stream) }
    })
}

/// Reduce to `root`.
///
/// # Safety
/// The buffers are device-accessible for `count` elements until the work has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    status("llaisysNvidiaReduce", || {
        // SAFETY: caller contract (the header\'s).
        unsafe { ops::reduce(sendbuff, recvbuff, count, dtype, op, root, comm, stream) }
    })
}

/// Sends `count` elements to `peer`.
///
/// # Safety
/// `sendbuff` is device-accessible for `count` elements until the work has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaSend(
    sendbuff: *const c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    status("llaisysNvidiaSend", || {
        // SAFETY: caller contract (the header\'s).
        unsafe { ops::send(sendbuff, count, dtype, peer, comm, stream) }
    })
}

/// Receives `count` elements from `peer`.
///
/// # Safety
/// `recvbuff` is device-accessible for `count` elements until the work has run.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaRecv(
    recvbuff: *mut c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    status("llaisysNvidiaRecv", || {
        // SAFETY: caller contract (the header\'s).
        unsafe { ops::recv(recvbuff, count, dtype, peer, comm, stream) }
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

/// The llaisys-style table of the common subset (`LlaisysNvidiaCommAPI`); field order is the ABI.
#[repr(C)]
pub struct LlaisysNvidiaCommAPI {
    /// `llaisysNvidiaCommGetUniqueId`
    pub get_unique_id: unsafe extern "C" fn(*mut CommId) -> c_int,
    /// `llaisysNvidiaCommInitRank`
    pub init_rank: unsafe extern "C" fn(*mut Comm, c_int, *const CommId, c_int) -> c_int,
    /// `llaisysNvidiaCommInitAll`
    pub init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int,
    /// `llaisysNvidiaCommDestroy`
    pub destroy: extern "C" fn(Comm) -> c_int,
    /// `llaisysNvidiaCommAbort`
    pub abort: extern "C" fn(Comm) -> c_int,
    /// `llaisysNvidiaCommRank`
    pub get_rank: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    /// `llaisysNvidiaCommSize`
    pub get_size: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    /// `llaisysNvidiaAllReduce`
    pub allreduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    /// `llaisysNvidiaAllGather`
    pub allgather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int,
    /// `llaisysNvidiaReduceScatter`
    pub reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    /// `llaisysNvidiaBroadcast`
    pub broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    /// `llaisysNvidiaSend`
    pub send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    /// `llaisysNvidiaRecv`
    pub recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int,
    /// `llaisysNvidiaGroupStart`
    pub group_start: extern "C" fn() -> c_int,
    /// `llaisysNvidiaGroupEnd`
    pub group_end: extern "C" fn() -> c_int,
    /// `llaisysNvidiaCommSynchronize`
    pub synchronize: extern "C" fn(Comm, Stream, i64) -> c_int,
}

/// The one communicator table.
pub static COMM_TABLE: LlaisysNvidiaCommAPI = LlaisysNvidiaCommAPI {
    get_unique_id: llaisysNvidiaCommGetUniqueId,
    init_rank: llaisysNvidiaCommInitRank,
    init_all: llaisysNvidiaCommInitAll,
    destroy: llaisysNvidiaCommDestroy,
    abort: llaisysNvidiaCommAbort,
    get_rank: llaisysNvidiaCommRank,
    get_size: llaisysNvidiaCommSize,
    allreduce: llaisysNvidiaAllReduce,
    allgather: llaisysNvidiaAllGather,
    reduce_scatter: llaisysNvidiaReduceScatter,
    broadcast: llaisysNvidiaBroadcast,
    send: llaisysNvidiaSend,
    recv: llaisysNvidiaRecv,
    group_start: llaisysNvidiaGroupStart,
    group_end: llaisysNvidiaGroupEnd,
    synchronize: llaisysNvidiaCommSynchronize,
};

/// Returns the communicator table; never NULL, never fails, loads nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGetCommAPI() -> *const LlaisysNvidiaCommAPI {
    &COMM_TABLE
}

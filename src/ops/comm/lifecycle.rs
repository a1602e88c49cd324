//! The communicator's life: NCCL's version and unique ids, joining (one rank, or every device
//! of this process), its shape and state, waiting for its work, destroying and aborting it.

use super::group::refuse_in_group;
use super::registry::{adopt, lookup, retire, Entry};
use super::timeout::timeout;
use crate::cudart::calls::StreamHandle;
use crate::nccl::api;
use crate::nccl::communicator::{self, Communicator, Stop};
use crate::nccl::loader;
use crate::nccl::{sys, Error, NcclResult, Result};
use std::os::raw::{c_int, c_void};
use std::time::Duration;

/// Bytes of a unique id (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = sys::NCCL_UNIQUE_ID_BYTES as usize;

/// The loaded NCCL: (version code, path).
pub fn version() -> Result<(c_int, String)> {
    let lib = loader::get()?;
    Ok((lib.version, lib.path.clone()))
}

/// A new unique id (128 opaque bytes to hand to every rank).
pub fn unique_id() -> Result<[u8; UNIQUE_ID_BYTES]> {
    let lib = loader::get()?;
    // SAFETY: get_unique_id has no precondition beyond a loaded library.
    let id = unsafe { api::get_unique_id(lib) }?;
    // The bytes as they are: `c_char` is `i8` or `u8` depending on the target.
    Ok(id.internal.map(|b| b.to_ne_bytes()[0]))
}

/// Joins rank `rank` of `nranks` on the current device; returns the handle.
pub fn init_rank(nranks: c_int, id: &[u8; UNIQUE_ID_BYTES], rank: c_int) -> Result<usize> {
    if nranks < 1 {
        return Err(Error::invalid(format!("nranks={nranks}: at least 1")));
    }
    if rank < 0 || rank >= nranks {
        return Err(Error::invalid(format!(
            "rank={rank} is not in 0..{} (nranks={nranks})",
            nranks - 1
        )));
    }
    if id.iter().all(|&b| b == 0) {
        return Err(Error::invalid(
            "id is all zeros: not one made by llaisysNvidiaCommGetUniqueId",
        ));
    }
    refuse_in_group("llaisysNvidiaCommInitRank")?;
    let timeout = timeout()?;
    let mut raw_id = sys::ncclUniqueId::default();
    for (d, s) in raw_id.internal.iter_mut().zip(id) {
        *d = *s as _;
    }
    let comm = Communicator::init_rank(nranks, raw_id, rank, timeout)?;
    adopt(comm, timeout)
}

/// One communicator per device (`devices`, or 0..n-1 when None); returns the handles.
pub fn init_all(n: c_int, devices: Option<&[c_int]>) -> Result<Vec<usize>> {
    if n < 1 {
        return Err(Error::invalid(format!("ndev={n}: at least 1")));
    }
    let list: Vec<c_int> = match devices {
        Some(d) => d.to_vec(),
        None => (0..n).collect(),
    };
    for (i, d) in list.iter().enumerate() {
        if *d < 0 {
            return Err(Error::invalid(format!("devices[{i}]={d} is not a device")));
        }
        if list[..i].contains(d) {
            return Err(Error::invalid(format!(
                "devices[{i}]={d} is listed twice (NCCL allows one rank per device)"
            )));
        }
    }
    refuse_in_group("llaisysNvidiaCommInitAll")?;
    let timeout = timeout()?;
    loader::get()?;
    let count = crate::safe::runtime::device_count()?;
    if let Some((i, d)) = list.iter().enumerate().find(|(_, &d)| d >= count) {
        return Err(Error::invalid(format!(
            "devices[{i}]={d}: this machine has {count} CUDA device(s)"
        )));
    }
    let comms = Communicator::init_all(&list, timeout)?;
    let mut handles = Vec::with_capacity(comms.len());
    for c in comms {
        match adopt(c, timeout) {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in handles {
                    let _ = abort(h as *mut c_void);
                }
                return Err(e);
            }
        }
    }
    Ok(handles)
}

/// Destroys (finalize, polled up to the timeout, then destroy; aborted instead on failure).
/// NULL does nothing.
pub fn destroy(h: *mut c_void) -> Result<()> {
    end(h, |c, entry| {
        if entry.marked_aborted() {
            // Marked aborted with NCCL's communicator still there (its group's thread exited):
            // nothing of it is worth finishing.
            return c.abort().map_err(|e| e.context(&entry.name()));
        }
        c.destroy(entry.timeout)
            .map_err(|e| e.context(&format!("{} (aborted instead)", entry.name())))
    })
}

/// Aborts and forgets. NULL does nothing.
pub fn abort(h: *mut c_void) -> Result<()> {
    end(h, |c, entry| {
        c.abort().map_err(|e| e.context(&entry.name()))
    })
}

/// Takes `h` out of the registry and, once no call uses it, ends its NCCL communicator with
/// `how` (nothing to end when it was aborted already). NULL does nothing.
fn end(h: *mut c_void, how: impl FnOnce(Communicator, &Entry) -> Result<()>) -> Result<()> {
    retire(h, |owner, entry| owner.map_or(Ok(()), |c| how(c, entry))).map(|_| ())
}

/// (rank, ranks, device).
pub fn shape(h: *mut c_void) -> Result<(c_int, c_int, c_int)> {
    let e = lookup(h)?;
    Ok((e.rank, e.size, e.device))
}

/// `ncclCommGetAsyncError` of a live communicator.
pub fn async_error(h: *mut c_void) -> Result<NcclResult> {
    let e = lookup(h)?;
    let _use = e.live()?;
    // SAFETY: `e.raw` is live: `live()` checked it is not aborted and its guard, held, keeps
    // abort and destroy out until the call returns.
    unsafe { api::comm_get_async_error(e.lib, e.raw) }
}

/// Waits for `stream` (NULL: the legacy stream of the communicator's device) while watching
/// the communicator: on an asynchronous NCCL error, or after `timeout_ms` (-1: the
/// communicator's timeout; 0: no limit), the communicator is aborted (its kernels return, so
/// the stream drains) and the error returned.
pub fn synchronize(h: *mut c_void, s: *mut c_void, timeout_ms: i64) -> Result<()> {
    if timeout_ms < -1 {
        return Err(Error::invalid(format!(
            "timeout_ms={timeout_ms}: -1 (the communicator's), 0 (no limit) or milliseconds"
        )));
    }
    let e = lookup(h)?;
    e.check_stream(s)?;
    let limit = if timeout_ms == -1 {
        e.timeout
    } else {
        Duration::from_millis(timeout_ms as u64)
    };
    let stream: StreamHandle = s.cast();
    let waited = {
        let _use = e.live()?;
        let outcome = communicator::poll(limit, Some(&e.cancel), || {
            // SAFETY: `e.raw` is live: the `live()` guard is held across the wait.
            let state = unsafe { api::comm_get_async_error(e.lib, e.raw) }?;
            if state != NcclResult::SUCCESS && state != NcclResult::IN_PROGRESS {
                return Err(api::nccl_error(
                    e.lib,
                    "ncclCommGetAsyncError",
                    state,
                    e.raw,
                ));
            }
            // SAFETY: `stream` is NULL or a live stream of ours (`check_stream` above).
            let done = crate::safe::device::for_stream(stream, e.device, || unsafe {
                crate::safe::stream::query(stream)
            })?;
            Ok(done.then_some(()))
        });
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Stop::Timeout)) => Err(Error::Timeout {
                call: "llaisysNvidiaCommSynchronize",
                waited: limit,
                detail: format!("stream={s:p}"),
            }),
            Ok(Err(Stop::Cancelled)) => Err(Error::invalid(format!(
                "{}: being aborted by another thread",
                e.name()
            ))),
            Err(err) => Err(err),
        }
    };
    e.settle(waited)
}

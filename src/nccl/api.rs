//! One thin `unsafe fn` per NCCL call of the communicator's life: the function from the loaded
//! library (a missing one is [`Error::Unavailable`] naming it and the NCCL release that has it),
//! the call, and its `ncclResult_t` turned into [`Progress`] or an [`Error::Nccl`] carrying
//! `ncclGetErrorString` and `ncclGetLastError`. The collectives have one such function for all
//! of them, `collectives::call`, made from the list. Nothing here checks arguments: `ops::comm`
//! does, before these run.

use super::error::{Error, NcclResult, Result};
use super::loader::Library;
use super::sys;
use std::os::raw::c_int;

/// What a call on a non-blocking communicator may answer besides an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Done (or, for a collective, queued on its stream).
    Done,
    /// `ncclInProgress`: poll `ncclCommGetAsyncError` until it is no longer in progress.
    InProgress,
}

/// Turns a return value into `Progress` or the error, reading NCCL's last error text at once.
pub fn check(lib: &Library, call: &'static str, rc: sys::ncclResult_t) -> Result<Progress> {
    let code = NcclResult::from_raw(rc);
    if code == NcclResult::SUCCESS {
        return Ok(Progress::Done);
    }
    if code == NcclResult::IN_PROGRESS {
        return Ok(Progress::InProgress);
    }
    Err(nccl_error(lib, call, code, std::ptr::null_mut()))
}

/// The error for `code` reported for `call`.
pub fn nccl_error(
    lib: &Library,
    call: &'static str,
    code: NcclResult,
    comm: sys::ncclComm_t,
) -> Error {
    Error::Nccl {
        call,
        code,
        description: lib.error_string(code),
        last: lib.last_error(comm),
        detail: String::new(),
    }
}

macro_rules! function {
    ($lib:expr, $field:ident, $name:literal, $since:literal) => {
        $lib.fns.$field.ok_or_else(|| $lib.missing($name, $since))?
    };
}

/// `ncclGetUniqueId`. Needs no GPU: NCCL picks a network interface and opens the bootstrap's
/// listening socket (a thread of NCCL's serves it until the ranks have joined).
///
/// # Safety
/// No precondition beyond a loaded library.
pub unsafe fn get_unique_id(lib: &Library) -> Result<sys::ncclUniqueId> {
    let f = function!(lib, get_unique_id, "ncclGetUniqueId", "1.0");
    let mut id = sys::ncclUniqueId::default();
    // SAFETY: ncclGetUniqueId writes one ncclUniqueId through `id`, valid for writing.
    check(lib, "ncclGetUniqueId", unsafe { f(&mut id) })?;
    Ok(id)
}

/// `ncclCommInitRankConfig`: `*comm` is set even when the answer is `InProgress`.
///
/// # Safety
/// `comm` is valid for writing; `config` was made by `config_initializer` (then changed).
pub unsafe fn comm_init_rank_config(
    lib: &Library,
    comm: &mut sys::ncclComm_t,
    nranks: c_int,
    id: sys::ncclUniqueId,
    rank: c_int,
    config: &mut sys::ncclConfig_t,
) -> Result<Progress> {
    let f = function!(lib, comm_init_rank_config, "ncclCommInitRankConfig", "2.14");
    // SAFETY: `comm` is valid for writing and `config` came from `config_initializer` (this
    // function's contract); `id` and the ranks are passed by value.
    check(lib, "ncclCommInitRankConfig", unsafe {
        f(comm, nranks, id, rank, config)
    })
}

/// `ncclCommGetAsyncError`: the communicator's state (`ncclSuccess`, `ncclInProgress`, or the
/// error of earlier asynchronous work).
///
/// # Safety
/// `comm` is a live communicator (not destroyed, not aborted).
pub unsafe fn comm_get_async_error(lib: &Library, comm: sys::ncclComm_t) -> Result<NcclResult> {
    let f = function!(lib, comm_get_async_error, "ncclCommGetAsyncError", "2.4");
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: `comm` is live (this function's contract); `state` is valid for writing.
    check(lib, "ncclCommGetAsyncError", unsafe { f(comm, &mut state) })?;
    Ok(NcclResult::from_raw(state))
}

/// Calls whose only argument is the communicator (or none), answering [`Progress`]; the
/// loader's field for each is the function's name.
macro_rules! progress_calls {
    ($($(#[$m:meta])* fn $name:ident($($comm:ident)?) = $call:literal since $since:literal;)*) => {$(
        $(#[$m])*
        pub unsafe fn $name(lib: &Library $(, $comm: sys::ncclComm_t)?) -> Result<Progress> {
            let f = function!(lib, $name, $call, $since);
            // SAFETY: the caller keeps this function's `# Safety` contract, which is the call's.
            check(lib, $call, unsafe { f($($comm)?) })
        }
    )*};
}

progress_calls! {
    /// `ncclCommFinalize`: flushes the communicator's work (non-blocking: may be `InProgress`).
    ///
    /// # Safety
    /// `comm` is a live communicator.
    fn comm_finalize(comm) = "ncclCommFinalize" since "2.14";

    /// `ncclCommDestroy`: frees the communicator.
    ///
    /// # Safety
    /// `comm` is a live communicator, not used again.
    fn comm_destroy(comm) = "ncclCommDestroy" since "1.0";

    /// `ncclCommAbort`: stops the communicator's work (its kernels return) and frees it.
    ///
    /// # Safety
    /// `comm` is a communicator (live, or one whose initialisation is still in progress), not
    /// used again.
    fn comm_abort(comm) = "ncclCommAbort" since "2.4";

    /// `ncclGroupStart`.
    ///
    /// # Safety
    /// Must be matched by [`group_end`] on this thread.
    fn group_start() = "ncclGroupStart" since "2.0";

    /// `ncclGroupEnd`: launches what the group queued (non-blocking communicators: may be
    /// `InProgress`, then each communicator of the group is polled).
    ///
    /// # Safety
    /// Every communicator used in the group is still live.
    fn group_end() = "ncclGroupEnd" since "2.0";
}

/// `ncclCommCount`, `ncclCommUserRank`, `ncclCommCuDevice`: (ranks, rank, device).
///
/// # Safety
/// `comm` is a live, initialised communicator.
pub unsafe fn comm_shape(lib: &Library, comm: sys::ncclComm_t) -> Result<(c_int, c_int, c_int)> {
    let count = function!(lib, comm_count, "ncclCommCount", "1.0");
    let rank = function!(lib, comm_user_rank, "ncclCommUserRank", "1.0");
    let device = function!(lib, comm_cu_device, "ncclCommCuDevice", "1.0");
    let (mut n, mut r, mut d) = (0, 0, 0);
    // SAFETY: `comm` is live and initialised (this function's contract); each call writes one
    // int through a pointer valid here.
    unsafe {
        check(lib, "ncclCommCount", count(comm, &mut n))?;
        check(lib, "ncclCommUserRank", rank(comm, &mut r))?;
        check(lib, "ncclCommCuDevice", device(comm, &mut d))?;
    }
    Ok((n, r, d))
}

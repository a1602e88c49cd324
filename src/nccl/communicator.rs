//! The safe layer: [`Communicator`] owns one `ncclComm_t`, made non-blocking (`blocking = 0`):
//! no NCCL call waits for other ranks, so a rank that dies or never joins cannot hang the caller.
//! Whatever NCCL answers with `ncclInProgress` is polled here with `ncclCommGetAsyncError` up to
//! a timeout; past it the communicator is aborted (`ncclCommAbort`) and the error says so.
//!
//! Dropping a `Communicator` aborts it (an abort never waits for other ranks); `destroy` is the
//! orderly end (`ncclCommFinalize`, polled, then `ncclCommDestroy`).
//!
//! NVLink SHARP / multicast (NVLS) is off in every communicator made here (the config's
//! `nvlsHostMode` = disable; an NCCL that predates the field still needs `NCCL_NVLS_ENABLE=0`)
//! unless `LLAISYS_NVIDIA_NCCL_NVLS=1`: on our machines, multicast can take shared GPUs out of
//! service.

use super::api::{self, Progress};
use super::error::{Error, NcclResult, Result};
use super::loader::{self, Library};
use super::sys;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// One NCCL communicator.
pub struct Communicator {
    raw: sys::ncclComm_t,
    lib: &'static Library,
}

// SAFETY: an ncclComm_t may be used from any thread (one at a time, which the layer above
// ensures); ncclCommAbort may be called from another thread.
unsafe impl Send for Communicator {}
// SAFETY: shared use is one call at a time (the layer above holds a lock per communicator),
// which NCCL allows from any thread; abort may come from another thread.
unsafe impl Sync for Communicator {}

/// The configuration of every communicator: non-blocking, NVLS off (see the module docs).
pub fn config() -> sys::ncclConfig_t {
    let mut c = sys::config_initializer();
    c.blocking = 0;
    let nvls_allowed = std::env::var("LLAISYS_NVIDIA_NCCL_NVLS").as_deref() == Ok("1");
    if !nvls_allowed {
        c.nvlsHostMode = sys::ncclNvlsHostMode_t::ncclNvlsHostModeDisable.0 as c_int;
    }
    c
}

/// How a wait ended early.
pub enum Stop {
    /// The deadline passed.
    Timeout,
    /// Someone asked (another thread aborting the communicator).
    Cancelled,
}

/// Polls `ready` with a short back-off until it answers `Some`, `timeout` passes (zero: never),
/// or `cancel` is set.
pub fn poll<T>(
    timeout: Duration,
    cancel: Option<&AtomicBool>,
    mut ready: impl FnMut() -> Result<Option<T>>,
) -> Result<std::result::Result<T, Stop>> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(20);
    loop {
        if let Some(v) = ready()? {
            return Ok(Ok(v));
        }
        if cancel.is_some_and(|c| c.load(Relaxed)) {
            return Ok(Err(Stop::Cancelled));
        }
        if !timeout.is_zero() && start.elapsed() >= timeout {
            return Ok(Err(Stop::Timeout));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

impl Communicator {
    /// Joins rank `rank` of `nranks` on the calling thread's current device, waiting up to
    /// `timeout` (zero: no limit) for the others. On timeout or error the half-made communicator
    /// is aborted.
    pub fn init_rank(
        nranks: c_int,
        id: sys::ncclUniqueId,
        rank: c_int,
        timeout: Duration,
    ) -> Result<Communicator> {
        let lib = loader::get()?;
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        let mut cfg = config();
        // SAFETY: `raw` is writable; `cfg` comes from the header's initializer.
        let started =
            unsafe { api::comm_init_rank_config(lib, &mut raw, nranks, id, rank, &mut cfg) };
        let detail = format!("nranks={nranks} rank={rank}");
        let progress = match started {
            Ok(p) => p,
            Err(e) => {
                if !raw.is_null() {
                    // A half-made communicator NCCL handed out with the error: aborted.
                    drop(Communicator { raw, lib });
                }
                return Err(e.context(&detail));
            }
        };
        if raw.is_null() {
            return Err(Error::invalid(format!(
                "ncclCommInitRankConfig returned no communicator ({detail})"
            )));
        }
        let comm = Communicator { raw, lib };
        if progress == Progress::InProgress {
            comm.wait("ncclCommInitRankConfig", timeout, None)
                .map_err(|e| e.context(&detail))?;
        }
        Ok(comm)
    }

    /// One communicator per device of `devices` (rank i on `devices[i]`), made together in one
    /// group from this thread, as `ncclCommInitAll` does, but non-blocking and with a timeout.
    pub fn init_all(devices: &[c_int], timeout: Duration) -> Result<Vec<Communicator>> {
        let lib = loader::get()?;
        let n = devices.len() as c_int;
        // SAFETY: get_unique_id has no precondition beyond a loaded library.
        let id = unsafe { api::get_unique_id(lib) }?;
        let mut made: Vec<Communicator> = Vec::with_capacity(devices.len());
        let mut cfg = config();
        // SAFETY: the group is ended below (`group_end`) on every path.
        unsafe { api::group_start(lib) }?;
        let mut first_err = None;
        for (rank, &device) in devices.iter().enumerate() {
            let mut raw: sys::ncclComm_t = std::ptr::null_mut();
            let r = crate::safe::device::with(device, || {
                // SAFETY: `raw` is writable; `cfg` comes from the header's initializer.
                Ok(unsafe {
                    api::comm_init_rank_config(lib, &mut raw, n, id, rank as c_int, &mut cfg)
                })
            });
            let e = match r {
                Ok(Ok(_)) if !raw.is_null() => {
                    made.push(Communicator { raw, lib });
                    continue;
                }
                Ok(Ok(_)) => Error::invalid(format!(
                    "ncclCommInitRankConfig returned no communicator (device {device})"
                )),
                Ok(Err(e)) => e.context(&format!("device {device}")),
                Err(e) => Error::Base(e),
            };
            first_err.get_or_insert(e);
        }
        // SAFETY: every communicator the group made is live: `made` owns them until this
        // returns (dropped, they are aborted after the group ends).
        let ended = unsafe { api::group_end(lib) };
        if let Some(e) = first_err {
            return Err(e); // `made` is dropped: aborted
        }
        ended?;
        for (c, d) in made.iter().zip(devices) {
            c.wait("ncclCommInitRankConfig", timeout, None)
                .map_err(|e| e.context(&format!("device {d}, {n} devices")))?;
        }
        Ok(made)
    }

    /// The raw handle, still owned by `self`.
    pub fn raw(&self) -> sys::ncclComm_t {
        self.raw
    }

    /// The loaded library.
    pub fn library(&self) -> &'static Library {
        self.lib
    }

    /// `ncclCommGetAsyncError`.
    pub fn async_error(&self) -> Result<NcclResult> {
        // SAFETY: `self` owns `raw`, live until dropped, destroyed or aborted (all by value).
        unsafe { api::comm_get_async_error(self.lib, self.raw) }
    }

    /// (ranks, rank, device).
    pub fn shape(&self) -> Result<(c_int, c_int, c_int)> {
        // SAFETY: `self` owns `raw`, live until dropped (by value); a `Communicator` is made
        // only once initialised.
        unsafe { api::comm_shape(self.lib, self.raw) }
    }

    /// Polls until the communicator is no longer in progress: `Ok` when it is healthy, the
    /// asynchronous error (reported for `call`) otherwise; a timeout (zero: none) is an error too.
    /// Nothing is aborted here: the caller decides (it may hold locks the abort needs).
    pub fn wait(
        &self,
        call: &'static str,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
    ) -> Result<()> {
        let outcome = poll(timeout, cancel, || {
            let state = self.async_error()?;
            Ok((state != NcclResult::IN_PROGRESS).then_some(state))
        })?;
        match outcome {
            Ok(state) if state == NcclResult::SUCCESS => Ok(()),
            Ok(state) => Err(api::nccl_error(self.lib, call, state, self.raw)),
            Err(Stop::Timeout) => Err(Error::Timeout {
                call,
                waited: timeout,
                detail: String::new(),
            }),
            Err(Stop::Cancelled) => Err(Error::invalid(format!(
                "{call}: the wait was cut short: the communicator is being aborted by another thread"
            ))),
        }
    }

    /// Finalizes (flushing its work, polled up to `timeout`), then destroys. On any failure
    /// the communicator is aborted instead and the error returned.
    pub fn destroy(self, timeout: Duration) -> Result<()> {
        let lib = self.lib;
        // SAFETY: `self` owns `raw`, live until it is consumed here.
        let finalized = match unsafe { api::comm_finalize(lib, self.raw) } {
            Ok(Progress::InProgress) => self.wait("ncclCommFinalize", timeout, None),
            Ok(Progress::Done) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = finalized {
            return Err(match self.abort() {
                Ok(()) => e,
                Err(abort) => e.context(&format!("then the abort failed: {abort}")),
            });
        }
        let raw = self.raw;
        std::mem::forget(self);
        // SAFETY: `raw` was ours (forgotten above, so not aborted on drop), finalized, and is
        // never used again.
        unsafe { api::comm_destroy(lib, raw) }.map(|_| ())
    }

    /// Aborts: NCCL stops the communicator's work (queued kernels return early) and frees it.
    pub fn abort(self) -> Result<()> {
        let (lib, raw) = (self.lib, self.raw);
        std::mem::forget(self);
        // SAFETY: `raw` was ours (forgotten above, so not aborted twice) and is never used
        // again.
        unsafe { api::comm_abort(lib, raw) }.map(|_| ())
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // SAFETY: `raw` is ours and, being dropped, never used again. A failure has nowhere to
        // go; `abort` reports it.
        let _ = unsafe { api::comm_abort(self.lib, self.raw) };
    }
}

//! The registry of communicators: a handle is a token of ours (never reused in a process), not
//! a pointer, so one that was destroyed, or any other value (a raw `ncclComm_t` of another
//! library, garbage), is refused with a clear error; NCCL's own object stays inside its
//! [`Entry`], with what a call needs to use it safely (one call at a time, abort from another
//! thread, the reason it was aborted).

use crate::cudart::StreamHandle;
use crate::event::Event;
use crate::nccl::communicator::Communicator;
use crate::nccl::loader::Library;
use crate::nccl::{sys, Error, Result};
use crate::ops::validate;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

/// A communicator of ours.
pub(super) struct Entry {
    /// The token handed out as `llaisysNvidiaComm_t`.
    pub(super) handle: usize,
    /// NCCL's communicator, owned by `owner`.
    pub(super) raw: sys::ncclComm_t,
    /// The NCCL it was made with.
    pub(super) lib: &'static Library,
    /// The owner; `None` once aborted by a timeout or an error of ours.
    pub(super) owner: Mutex<Option<Communicator>>,
    /// Its rank, number of ranks and CUDA device.
    pub(super) rank: c_int,
    /// See `rank`.
    pub(super) size: c_int,
    /// See `rank`.
    pub(super) device: c_int,
    /// The bound of every wait on it (zero: none).
    pub(super) timeout: Duration,
    /// Read: a call is using `raw`. Write: it is being aborted or destroyed.
    pub(super) busy: RwLock<()>,
    /// Set before the write lock is taken: waits holding the read lock end early.
    pub(super) cancel: AtomicBool,
    /// Why it was aborted, when it was.
    pub(super) aborted: Mutex<Option<String>>,
    /// Open groups that queued work of it (it may not be destroyed before they end).
    pub(super) group_pending: AtomicUsize,
    /// Event for ordering the legacy stream after work on non-blocking streams.
    pub(super) event: Mutex<Option<Event>>,
}

// SAFETY: `raw` is used only under `busy`, as NCCL allows (one call at a time per communicator,
// abort from another thread once no call is in NCCL).
unsafe impl Send for Entry {}
// SAFETY: shared use of `raw` goes through `busy` too: calls hold its read lock (NCCL allows
// one call at a time per communicator: `live` is taken per call), abort and destroy its write
// lock.
unsafe impl Sync for Entry {}

static COMMS: Mutex<Option<HashMap<usize, Arc<Entry>>>> = Mutex::new(None);
static NEXT: AtomicUsize = AtomicUsize::new(1);

/// Runs `f` on the map of live handles.
fn registry<T>(f: impl FnOnce(&mut HashMap<usize, Arc<Entry>>) -> T) -> T {
    let mut g = COMMS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// Registers a communicator just made; returns its handle.
pub(super) fn adopt(comm: Communicator, timeout: Duration) -> Result<usize> {
    let (size, rank, device) = comm.shape()?;
    crate::cache::device::device_seen(device)?;
    let handle = NEXT.fetch_add(1, Relaxed) << 4;
    let entry = Arc::new(Entry {
        handle,
        raw: comm.raw(),
        lib: comm.library(),
        owner: Mutex::new(Some(comm)),
        rank,
        size,
        device,
        timeout,
        busy: RwLock::new(()),
        cancel: AtomicBool::new(false),
        aborted: Mutex::new(None),
        group_pending: AtomicUsize::new(0),
        event: Mutex::new(None),
    });
    registry(|m| m.insert(handle, entry));
    Ok(handle)
}

/// The communicator of handle `h`, or the error saying why there is none.
pub(super) fn lookup(h: *mut c_void) -> Result<Arc<Entry>> {
    if h.is_null() {
        return Err(Error::invalid("comm=NULL: no communicator"));
    }
    registry(|m| m.get(&(h as usize)).cloned()).ok_or_else(|| {
        Error::invalid(format!(
            "comm={h:p} is not a communicator of llaisys-nvidia, or was already destroyed or \
             aborted (a raw ncclComm_t of another library is not accepted)"
        ))
    })
}

impl Entry {
    /// The handle with its rank, size and device, for messages.
    pub(super) fn name(&self) -> String {
        format!(
            "comm={:#x} (rank {} of {}, device {})",
            self.handle, self.rank, self.size, self.device
        )
    }

    /// The right to use `raw` for one call; refused once it is aborted or being aborted.
    pub(super) fn live(&self) -> Result<RwLockReadGuard<'_, ()>> {
        let refuse = |why: String| {
            Err(Error::invalid(format!(
                "{} {why}; destroy it (llaisysNvidiaCommDestroy) and make a new one",
                self.name()
            )))
        };
        if self.cancel.load(Relaxed) {
            return refuse("is being aborted".into());
        }
        let guard = self.busy.read().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = self
            .aborted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            return refuse(format!("was aborted ({why})"));
        }
        Ok(guard)
    }

    /// Aborts the NCCL communicator after a timeout or an asynchronous error of ours; the handle
    /// stays (answering with the reason) until destroyed.
    pub(super) fn abort_for(&self, reason: &Error) {
        self.cancel.store(true, Relaxed);
        let _excl = self.busy.write().unwrap_or_else(|e| e.into_inner());
        let owner = self.owner.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut why = reason.to_string();
        if let Some(c) = owner {
            if let Err(e) = c.abort() {
                why.push_str(&format!("; ncclCommAbort then failed: {e}"));
            }
        }
        *self.aborted.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        self.cancel.store(false, Relaxed);
    }

    /// The outcome of a wait, aborting on timeout or asynchronous error. Call without holding
    /// `busy`.
    pub(super) fn settle(&self, waited: Result<()>) -> Result<()> {
        match waited {
            Ok(()) => Ok(()),
            Err(e @ (Error::Timeout { .. } | Error::Nccl { .. })) => {
                let e = e.context(&format!("{} aborted", self.name()));
                self.abort_for(&e);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Waits until NCCL is no longer working on it (after `call` answered `ncclInProgress`),
    /// up to its timeout, aborting it past that or on an asynchronous error.
    pub(super) fn wait(&self, call: &'static str) -> Result<()> {
        let waited = {
            let _use = self.live()?;
            self.owner_wait(call)
        };
        self.settle(waited)
    }

    /// The wait itself, on the owner (already aborted: an error).
    fn owner_wait(&self, call: &'static str) -> Result<()> {
        match self
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(c) => c.wait(call, self.timeout, Some(&self.cancel)),
            None => Err(Error::invalid(format!("{} was aborted", self.name()))),
        }
    }

    /// The stream's device must be the communicator's (NULL: its legacy stream).
    pub(super) fn check_stream(&self, s: *mut c_void) -> Result<()> {
        if let Some(d) = validate::check_stream(s.cast())? {
            if d != self.device {
                return Err(Error::invalid(format!(
                    "stream={s:p} belongs to device {d}, {} to device {}: NCCL runs on the \
                     communicator's device",
                    self.name(),
                    self.device
                )));
            }
        }
        Ok(())
    }

    /// `r` (the `what`: root or peer) must be a rank of this communicator.
    pub(super) fn check_rank(&self, r: c_int, what: &str) -> Result<()> {
        if r < 0 || r >= self.size {
            return Err(Error::invalid(format!(
                "{what}={r} is not a rank of {} (0..{})",
                self.name(),
                self.size - 1
            )));
        }
        Ok(())
    }

    /// Makes the legacy stream of the communicator's device wait for the work queued so far
    /// on `s`, through the entry's event (made on first use).
    pub(super) fn legacy_waits_for(&self, s: StreamHandle) -> Result<()> {
        let mut e = crate::sync::lock(&self.event);
        if e.is_none() {
            *e = Some(Event::on_device(self.device)?);
        }
        let ev = e
            .as_ref()
            .map(Event::as_raw)
            .unwrap_or(std::ptr::null_mut());
        // SAFETY: `s` is a live stream of ours on the communicator's device (checked by the
        // caller); the event is ours, of that device.
        unsafe { crate::event::record(ev, s) }?;
        crate::device::with(self.device, || {
            // SAFETY: NULL is the legacy stream; the event is live.
            unsafe { crate::stream::wait_event(std::ptr::null_mut(), ev) }
        })?;
        Ok(())
    }
}

/// Takes `h` out of the registry for good, once nothing else may use it.
pub(super) fn retire(h: *mut c_void) -> Result<Option<Arc<Entry>>> {
    if h.is_null() {
        return Ok(None);
    }
    let entry = lookup(h)?;
    if entry.group_pending.load(Relaxed) > 0 {
        return Err(Error::invalid(format!(
            "{} has work queued in an open group (llaisysNvidiaGroupStart without GroupEnd): \
             end the group first",
            entry.name()
        )));
    }
    registry(|m| m.remove(&(h as usize)));
    entry.cancel.store(true, Relaxed);
    Ok(Some(entry))
}

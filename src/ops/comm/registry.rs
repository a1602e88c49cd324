//! The registry of communicators: a handle is a token of ours (never reused in a process), not
//! a pointer, so one that was destroyed, or any other value (a raw `ncclComm_t` of another
//! library, garbage), is refused with a clear error; NCCL's own object stays inside its
//! [`Entry`], with what a call needs to use it safely (one call at a time, abort from another
//! thread, the reason it was aborted, the open groups that queued work of it).

use crate::cudart::calls::StreamHandle;
use crate::nccl::communicator::Communicator;
use crate::nccl::loader::Library;
use crate::nccl::{sys, Error, Result};
use crate::ops::validate;
use crate::safe::event::Event;
use crate::util::sync::{lock, read, write};
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
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
    pub(super) size: c_int,
    pub(super) device: c_int,
    /// The bound of every wait on it (zero: none).
    pub(super) timeout: Duration,
    /// Read: a call is using `raw`. Write: it is being aborted or destroyed.
    pub(super) busy: RwLock<()>,
    /// Held around each call that queues work on `raw` (NCCL's communicators take one such
    /// call at a time; `ncclCommGetAsyncError` may be asked meanwhile).
    pub(super) one_call: Mutex<()>,
    /// Set before the write lock is taken: waits holding the read lock end early.
    pub(super) cancel: AtomicBool,
    /// Why it was aborted, when it was.
    pub(super) aborted: Mutex<Option<String>>,
    /// Open groups that queued work of it (it may not be destroyed or aborted before they end:
    /// their `ncclGroupEnd` launches that work). Raised only under `busy`'s read lock, so that
    /// under its write lock the count cannot grow, and under `aborted`'s lock, where `retire`
    /// decides (`group_joined`).
    pub(super) group_pending: AtomicUsize,
    /// Set under `aborted`'s lock once a destroy or abort of the handle (`retire`) goes on: no
    /// open group may queue work of it from then on.
    retiring: AtomicBool,
    /// The thread (`group::thread_token`) whose open group holds work of it, 0 when none: NCCL
    /// ties a communicator to one thread's group until it ends, so calls of other threads are
    /// refused meanwhile. Set and read under `one_call`, cleared when `group_pending` drops to 0.
    pub(super) grouped_by: AtomicU64,
    /// Event for ordering the legacy stream after work on non-blocking streams.
    pub(super) event: Mutex<Option<Event>>,
}

// SAFETY: `raw` is used only under `busy`, as NCCL allows (one call that queues work at a time
// per communicator, under `one_call`; `ncclCommGetAsyncError` beside it; abort and destroy from
// another thread once no call is in NCCL).
unsafe impl Send for Entry {}
// SAFETY: shared use of `raw` goes through `busy` too: calls hold its read lock (`live`, per
// call) and those that queue work `one_call` as well; abort and destroy hold its write lock.
unsafe impl Sync for Entry {}

static COMMS: Mutex<Option<HashMap<usize, Arc<Entry>>>> = Mutex::new(None);
static NEXT: AtomicUsize = AtomicUsize::new(1);

/// Runs `f` on the map of live handles.
fn registry<T>(f: impl FnOnce(&mut HashMap<usize, Arc<Entry>>) -> T) -> T {
    let mut g = lock(&COMMS);
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
        one_call: Mutex::new(()),
        cancel: AtomicBool::new(false),
        aborted: Mutex::new(None),
        group_pending: AtomicUsize::new(0),
        retiring: AtomicBool::new(false),
        grouped_by: AtomicU64::new(0),
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
    registry(|m| m.get(&(h as usize)).cloned()).ok_or_else(|| not_ours(h))
}

fn not_ours(h: *mut c_void) -> Error {
    Error::invalid(format!(
        "comm={h:p} is not a communicator of llaisys-nvidia, or was already destroyed or \
         aborted (a raw ncclComm_t of another library is not accepted)"
    ))
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
        let guard = read(&self.busy);
        if let Some(why) = lock(&self.aborted).as_ref() {
            return refuse(format!("was aborted ({why})"));
        }
        Ok(guard)
    }

    /// Aborts the NCCL communicator after a timeout or an asynchronous error of ours; the handle
    /// stays (answering with the reason) until destroyed. While an open group has work of it
    /// queued, it is only marked aborted (every later call refused); `ncclCommAbort` follows
    /// once the last such group has ended (`group_left`), since that group's `ncclGroupEnd`
    /// launches the work on it. True when NCCL's communicator was aborted now, false when that
    /// waits for the group.
    pub(super) fn abort_for(&self, reason: &Error) -> bool {
        self.cancel.store(true, Relaxed);
        let _excl = write(&self.busy);
        // Marked, and the groups counted, under the lock `group_left` counts them under: one of
        // the two aborts.
        let now = {
            let mut aborted = lock(&self.aborted);
            *aborted = Some(reason.to_string());
            self.group_pending.load(Relaxed) == 0
        };
        if now {
            self.abort_owner();
        }
        self.cancel.store(false, Relaxed);
        now
    }

    /// An open group of the calling thread queues work of it for the first time (under
    /// `busy`'s read lock): counted, unless a destroy or abort of the handle already goes on.
    /// Decided under the lock `retire` decides under, so that of a destroy and a group racing
    /// for it exactly one is refused, and a refused destroy has ended no other call's wait.
    pub(super) fn group_joined(&self) -> Result<()> {
        let _decide = lock(&self.aborted);
        if self.retiring.load(Relaxed) {
            return Err(Error::invalid(format!(
                "{} is being destroyed or aborted by another thread",
                self.name()
            )));
        }
        self.group_pending.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Whether a destroy or abort of the handle may go on (no open group holds work of it); if
    /// so, from now on no group may queue work of it (`group_joined`).
    fn start_retiring(&self) -> bool {
        let _decide = lock(&self.aborted);
        let free = self.group_pending.load(Relaxed) == 0;
        if free {
            self.retiring.store(true, Relaxed);
        }
        free
    }

    /// The thread whose open group held work of it exits (its thread-local group is dropped):
    /// that work is never launched, and NCCL's communicator stays tied to the dead thread's
    /// group, so it is marked aborted (every later call refused). NCCL is not called here, on
    /// an exiting thread inside its open group: the destroy aborts it (`marked_aborted`).
    pub(super) fn group_abandoned(&self) {
        let mut aborted = lock(&self.aborted);
        aborted.get_or_insert_with(|| {
            "a thread exited with a group open that held work of it, never launched".into()
        });
        if self.group_pending.fetch_sub(1, Relaxed) == 1 {
            self.grouped_by.store(0, Relaxed);
        }
    }

    /// True once it is marked aborted (its NCCL communicator aborted, or to be aborted).
    pub(super) fn marked_aborted(&self) -> bool {
        lock(&self.aborted).is_some()
    }

    /// `ncclCommAbort` of the owner, if it is still there (call under `busy`'s write lock, once
    /// marked aborted); a failure is added to the reason.
    fn abort_owner(&self) {
        let owner = lock(&self.owner).take();
        if let Some(Err(e)) = owner.map(Communicator::abort) {
            if let Some(why) = lock(&self.aborted).as_mut() {
                why.push_str(&format!("; ncclCommAbort then failed: {e}"));
            }
        }
    }

    /// An open group that queued work of it has ended: once none is left, other threads may
    /// use it again, and an abort that waited for the group (`abort_for`) is done.
    pub(super) fn group_left(&self) {
        let abort = {
            let aborted = lock(&self.aborted);
            let last = self.group_pending.fetch_sub(1, Relaxed) == 1;
            if last {
                self.grouped_by.store(0, Relaxed);
            }
            last && aborted.is_some()
        };
        if abort {
            let _excl = write(&self.busy);
            if self.group_pending.load(Relaxed) == 0 {
                self.abort_owner();
            }
        }
    }

    /// The outcome of a wait, aborting on timeout or asynchronous error. Call without holding
    /// `busy`.
    pub(super) fn settle(&self, waited: Result<()>) -> Result<()> {
        match waited {
            Ok(()) => Ok(()),
            Err(e @ (Error::Timeout { .. } | Error::Nccl { .. })) => {
                let context = if self.abort_for(&e) {
                    format!("{} aborted", self.name())
                } else {
                    format!(
                        "{} marked aborted: an open group holds work of it, so ncclCommAbort \
                         follows when that group ends, and its kernels run until then",
                        self.name()
                    )
                };
                Err(e.context(&context))
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
        match lock(&self.owner).as_ref() {
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
        let mut e = lock(&self.event);
        if e.is_none() {
            *e = Some(Event::on_device(self.device)?);
        }
        let ev = e
            .as_ref()
            .map(Event::as_raw)
            .unwrap_or(std::ptr::null_mut());
        // SAFETY: `s` is a live stream of ours on the communicator's device (checked by the
        // caller); the event is ours, of that device.
        unsafe { crate::safe::event::record(ev, s) }?;
        crate::safe::device::with(self.device, || {
            // SAFETY: NULL is the legacy stream; the event is live.
            unsafe { crate::safe::stream::wait_event(std::ptr::null_mut(), ev) }
        })?;
        Ok(())
    }
}

/// Takes `h` out of the registry for good and runs `end` on its owner (None once aborted), with no
/// call using it and none able to start: under `busy`'s write lock, where no open group can queue
/// more work of it either. Refused while an open group has work of it queued; NULL does nothing.
pub(super) fn retire<T>(
    h: *mut c_void,
    end: impl FnOnce(Option<Communicator>, &Entry) -> Result<T>,
) -> Result<Option<T>> {
    if h.is_null() {
        return Ok(None);
    }
    let entry = lookup(h)?;
    let grouped = |e: &Entry| {
        Error::invalid(format!(
            "{} has work queued in an open group (llaisysNvidiaGroupStart without GroupEnd): \
             end the group first",
            e.name()
        ))
    };
    if !entry.start_retiring() {
        return Err(grouped(&entry));
    }
    // The destroy goes on: waits holding the read lock end early, and no group can queue more
    // work of it (`start_retiring`).
    entry.cancel.store(true, Relaxed);
    let _excl = write(&entry.busy);
    if registry(|m| m.remove(&(h as usize))).is_none() {
        // Another thread's destroy or abort of the same handle came first.
        return Err(not_ours(h));
    }
    let owner = lock(&entry.owner).take();
    let ended = end(owner, &entry);
    // A call that passed `live`'s first check and waited for the read lock meanwhile is refused
    // once it gets it (marked after `end`, which asks whether it was aborted before).
    lock(&entry.aborted).get_or_insert_with(|| "destroyed by another thread".into());
    ended.map(Some)
}

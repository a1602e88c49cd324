//! Groups of NCCL calls, per thread and nestable as NCCL's: the depth and the communicators
//! that queued work in the open group (which may not be destroyed before it ends), and the
//! group calls themselves.

use super::registry::Entry;
use crate::nccl::api::{self, Progress};
use crate::nccl::loader;
use crate::nccl::{Error, Result};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The calling thread's open groups.
#[derive(Default)]
struct Group {
    /// How many are open (nested).
    depth: u32,
    /// The communicators that queued work in them.
    comms: Vec<Arc<Entry>>,
}

/// A thread that exits with a group open: its work is never launched, and the communicators
/// that queued work in it are marked aborted (`Entry::group_abandoned`).
impl Drop for Group {
    fn drop(&mut self) {
        for c in self.comms.drain(..) {
            c.group_abandoned();
        }
    }
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
    static TOKEN: u64 = NEXT_TOKEN.fetch_add(1, Relaxed);
}

/// Thread tokens (`thread_token`), from 1.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A number of the calling thread, never 0 and never another thread's; 0 during its exit.
fn thread_token() -> u64 {
    TOKEN.try_with(|t| *t).unwrap_or(0)
}

/// Before a call queues work of `entry` (under its `one_call` lock and `busy`'s read lock):
/// refused while an open group of another thread holds work of it (NCCL would add this call's
/// work to that group); in an open group of this thread, notes that `entry` queued work in it.
/// True when in a group.
pub(super) fn join_group(entry: &Arc<Entry>) -> Result<bool> {
    let me = thread_token();
    let holder = entry.grouped_by.load(Relaxed);
    if holder != 0 && holder != me {
        return Err(Error::invalid(format!(
            "{} has work queued in an open group of another thread (its \
             llaisysNvidiaGroupStart without GroupEnd yet): NCCL would add this call's work to \
             that group; make the call on that thread, or after its GroupEnd",
            entry.name()
        )));
    }
    let joined = GROUP.try_with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Ok(false);
        }
        if !g.comms.iter().any(|c| Arc::ptr_eq(c, entry)) {
            entry.group_joined()?;
            entry.grouped_by.store(me, Relaxed);
            g.comms.push(entry.clone());
        }
        Ok(true)
    });
    joined.unwrap_or(Ok(false))
}

/// Opens a group (nestable) on this thread.
pub fn group_start() -> Result<()> {
    let lib = loader::get()?;
    GROUP
        .try_with(|_| ())
        .map_err(|_| Error::invalid("group_start during thread exit"))?;
    // SAFETY: ncclGroupStart has no precondition; the depth counted below lets group_end match it.
    unsafe { api::group_start(lib) }?;
    let _ = GROUP.try_with(|g| g.borrow_mut().depth += 1);
    Ok(())
}

/// Closes the innermost group; the outermost one launches what the group queued and, for each
/// communicator that NCCL is still working on, polls it up to its timeout.
pub fn group_end() -> Result<()> {
    let (depth, comms) = GROUP
        .try_with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return (0, Vec::new());
            }
            g.depth -= 1;
            let comms = if g.depth == 0 {
                std::mem::take(&mut g.comms)
            } else {
                Vec::new()
            };
            (g.depth + 1, comms)
        })
        .unwrap_or((0, Vec::new()));
    if depth == 0 {
        return Err(Error::invalid(
            "llaisysNvidiaGroupEnd without llaisysNvidiaGroupStart on this thread",
        ));
    }
    let ended = loader::get().and_then(|lib| {
        // SAFETY: every communicator used in the group is live: one with work in an open group
        // is neither destroyed nor aborted before the group ends (`group_pending`: `retire`
        // refuses, `abort_for` defers NCCL's abort to `group_left`).
        unsafe { api::group_end(lib) }
    });
    for c in &comms {
        c.group_left();
    }
    match ended? {
        Progress::Done => Ok(()),
        Progress::InProgress => {
            let mut first = None;
            for c in &comms {
                if let Err(e) = c.wait("ncclGroupEnd") {
                    first.get_or_insert(e);
                }
            }
            first.map_or(Ok(()), Err)
        }
    }
}

/// Refuses `what` (joining) inside an open group of this thread.
pub(super) fn refuse_in_group(what: &str) -> Result<()> {
    if GROUP.try_with(|g| g.borrow().depth).unwrap_or(0) > 0 {
        return Err(Error::invalid(format!(
            "{what} inside an open group (llaisysNvidiaGroupStart without GroupEnd on this \
             thread): end the group first; llaisysNvidiaCommInitAll makes several communicators \
             of one thread together"
        )));
    }
    Ok(())
}

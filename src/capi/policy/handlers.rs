//! The process-wide error handler and the calls of it in flight.
//!
//! A failing call copies the handler and its user data under the lock and calls it after
//! releasing the lock (a handler may call into the library, or replace itself). So that a host
//! may free the old user data once `llaisysNvidiaSetErrorHandler` returns, `set_handler` waits
//! until no call of an older generation still runs, except on its own thread (from inside a
//! handler it does not wait at all). A handler that never returns keeps it waiting; after 10 s
//! it says so on stderr, once.

use super::{ErrorHandler, Record};
use std::cell::{Cell, UnsafeCell};
use std::os::raw::c_void;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

struct Slot {
    handler: ErrorHandler,
    user_data: usize,
    /// Bumped by every `set_handler`.
    generation: u64,
    /// (generation, handler calls running) for each generation with calls still running.
    running: Vec<(u64, usize)>,
    /// Threads waiting in `set_handler`.
    waiters: usize,
}

static SLOT: Mutex<Slot> = Mutex::new(Slot {
    handler: None,
    user_data: 0,
    generation: 0,
    running: Vec::new(),
    waiters: 0,
});
static FINISHED: Condvar = Condvar::new();

thread_local! {
    /// Handler calls this thread is inside. No destructor: usable at any point of the thread.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

fn lock() -> MutexGuard<'static, Slot> {
    SLOT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Installs `handler` for the whole process (None: the default, print and abort). Returns once
/// no other thread still runs a handler installed before, unless called from inside a handler.
pub fn set_handler(handler: ErrorHandler, user_data: *mut c_void) {
    let mut slot = lock();
    slot.handler = handler;
    slot.user_data = user_data as usize;
    slot.generation += 1;
    let installed = slot.generation;
    if DEPTH.get() > 0 {
        return;
    }
    let mut warned = false;
    while slot.running.iter().any(|&(g, _)| g < installed) {
        slot.waiters += 1;
        let (s, waited) = FINISHED
            .wait_timeout(slot, Duration::from_secs(10))
            .unwrap_or_else(PoisonError::into_inner);
        slot = s;
        slot.waiters -= 1;
        if waited.timed_out() && !warned {
            warned = true;
            drop(slot); // not held while stderr may block
            super::write_stderr(
                b"llaisys-nvidia: llaisysNvidiaSetErrorHandler has waited 10 s for calls of the \
                  old error handler still running on other threads (a handler that does not \
                  return, or one left by longjmp, which is not supported); still waiting\n",
            );
            slot = lock();
        }
    }
}

/// The installed handler and its user data.
pub fn handler() -> (ErrorHandler, *mut c_void) {
    let slot = lock();
    (slot.handler, slot.user_data as *mut c_void)
}

/// Frees the list of running calls when none is running (at unload: a host that loads and
/// unloads the library keeps nothing of it). Never waits: when another thread holds the lock
/// (at exit) the list stays.
pub(super) fn release() {
    let mut slot = match SLOT.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    if slot.running.is_empty() {
        slot.running = Vec::new();
    }
}

/// One running call of a handler of `generation`; counted until dropped (on return or while a
/// C++ exception unwinds through the caller).
struct Running {
    generation: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        DEPTH.set(DEPTH.get().saturating_sub(1));
        let mut slot = lock();
        // Absent only in a forked child, which forgets the parent's calls.
        if let Some(i) = slot.running.iter().position(|&(g, _)| g == self.generation) {
            slot.running[i].1 -= 1;
            if slot.running[i].1 == 0 {
                slot.running.swap_remove(i);
            }
        }
        let notify = slot.waiters > 0;
        drop(slot);
        if notify {
            FINISHED.notify_all();
        }
    }
}

/// Hands `record` to the installed handler; false when none is installed (the default).
pub(super) fn call(record: &Record) -> bool {
    let (handler, user_data, _running) = {
        let mut slot = lock();
        let Some(handler) = slot.handler else {
            return false;
        };
        let generation = slot.generation;
        match slot.running.iter_mut().find(|(g, _)| *g == generation) {
            Some(entry) => entry.1 += 1,
            None => slot.running.push((generation, 1)),
        }
        DEPTH.set(DEPTH.get() + 1);
        (handler, slot.user_data, Running { generation })
    };
    let view = record.view();
    // SAFETY: `view` points into `record`, alive until the handler returns or unwinds; the
    // handler and its user data are what the host installed together.
    unsafe { handler(&view, user_data as *mut c_void) };
    true
}

// ---- fork -----------------------------------------------------------------------------------

/// The lock, held by the forking thread from its prepare handler to its parent or child handler.
struct HeldAcrossFork(UnsafeCell<Option<MutexGuard<'static, Slot>>>);

// SAFETY: touched only by the forking thread between its prepare and parent/child fork handlers;
// glibc runs those under its fork lock, one fork at a time.
unsafe impl Sync for HeldAcrossFork {}

static HELD: HeldAcrossFork = HeldAcrossFork(UnsafeCell::new(None));

/// Prepare handler: takes the lock, so the child gets the slot consistent and can unlock it
/// (a lock held by another thread at fork would stay locked forever in the child). The lock is
/// never held while a handler runs, so this waits only for a pointer swap.
pub(super) fn before_fork() {
    let slot = lock();
    // SAFETY: only the forking thread touches `HELD`, between its prepare and parent/child
    // handlers, which glibc runs under its fork lock (`HeldAcrossFork`).
    unsafe { *HELD.0.get() = Some(slot) };
}

/// Parent and child handler: releases the lock. The child forgets the handler calls of the
/// parent's threads (they do not exist in it), so its `set_handler` never waits for them.
pub(super) fn after_fork(in_child: bool) {
    // SAFETY: as in `before_fork`: only the forking thread, under glibc's fork lock.
    let held = unsafe { (*HELD.0.get()).take() };
    if let Some(mut slot) = held {
        if in_child {
            slot.running.clear();
            slot.waiters = 0;
        }
    }
}

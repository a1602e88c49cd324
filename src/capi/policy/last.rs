//! The calling thread's last error, kept as the value of a pthread key.
//!
//! Not a Rust `thread_local!`: one whose value has a destructor cannot be used once that
//! destructor ran (`with` panics), and glibc runs those destructors before pthread key
//! destructors, `atexit` handlers and C++ static destructors (and before C++ `thread_local`
//! destructors registered earlier), all places a C host may call us from.
//!
//! # Thread exit (the guarantees: docs/lifecycle.md)
//! Our key is made at load, usually before the host's, so ours runs first in each of glibc's
//! destructor rounds: our destructor puts the value back in the first rounds and frees it in round
//! 3 of 4 (`PTHREAD_DESTRUCTOR_ITERATIONS`), counting its runs in a `thread_local!` without a
//! destructor. To count every round, a thread's slot is never empty once it has called into the
//! library: "no error" is a sentinel value, not NULL (`touch`, at every call's entry); a thread
//! first counted a round late (its first call from a later key's destructor) is still freed. A
//! record first stored in round 2 or later by a thread that never called in before can outlive
//! the rounds (one per such thread). At `exit()` the unload hook (`delete`) frees the exiting
//! thread's record; other threads still running keep theirs.
//!
//! Where no key is available (pthread_key_create failed, or after the unload hook deleted it),
//! the last error is not recorded: the getters answer "none", the calls behave as always.

use super::Record;
use std::cell::Cell;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// 0: not created yet; `NONE`: not available; otherwise the key plus one.
static KEY: AtomicU64 = AtomicU64::new(0);
const NONE: u64 = u64::MAX;

/// The rounds of key destructors the C library runs at most (`PTHREAD_DESTRUCTOR_ITERATIONS`).
static ROUNDS: AtomicU8 = AtomicU8::new(POSIX_ROUNDS);
/// `_POSIX_THREAD_DESTRUCTOR_ITERATIONS`, the least a C library may run (glibc and musl: 4).
const POSIX_ROUNDS: u8 = 4;

/// The slot's value for "no error" (its address; never freed).
static NO_ERROR: u8 = 0;

thread_local! {
    /// How many times our key's destructor ran on this thread. No destructor of its own.
    static ROUNDS_DONE: Cell<u8> = const { Cell::new(0) };
}

fn no_error() -> *const c_void {
    std::ptr::addr_of!(NO_ERROR).cast()
}

/// Creates the key (once, from `load::init`).
pub(super) fn create() {
    // SAFETY: sysconf only reads a limit.
    let rounds = unsafe { libc::sysconf(libc::_SC_THREAD_DESTRUCTOR_ITERATIONS) };
    if let Ok(r) = u8::try_from(rounds) {
        ROUNDS.store(r.max(1), Ordering::Relaxed);
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is valid for writing; `at_thread_exit` accepts every value this module
    // stores (NULL, the sentinel, or an `Arc::into_raw` of `set_last`).
    let made = unsafe { libc::pthread_key_create(&mut key, Some(at_thread_exit)) } == 0;
    let value = if made { u64::from(key) + 1 } else { NONE };
    let _ = KEY.compare_exchange(0, value, Ordering::AcqRel, Ordering::Acquire);
}

/// Deletes the key (at unload, so no thread exiting later calls into unmapped code), freeing the
/// calling thread's record first (at exit: the exiting thread's). Values other threads still
/// hold are leaked; later calls record nothing.
pub(super) fn delete() {
    let k = KEY.swap(NONE, Ordering::AcqRel);
    if k != 0 && k != NONE {
        let key = key_of(k);
        // SAFETY: the key was created by `create` and is deleted once (the swap above); the
        // calling thread's value is owned by its slot, which is cleared before it is freed.
        unsafe {
            let own = libc::pthread_getspecific(key);
            if libc::pthread_setspecific(key, std::ptr::null()) == 0 {
                free_value(own);
            }
            libc::pthread_key_delete(key);
        }
    }
}

fn key_of(k: u64) -> libc::pthread_key_t {
    libc::pthread_key_t::try_from(k - 1).unwrap_or_default()
}

fn key() -> Option<libc::pthread_key_t> {
    let mut k = KEY.load(Ordering::Acquire);
    if k == 0 {
        // The load-time hook did not run (possible for the rlib); initialise now.
        super::ensure_loaded();
        k = KEY.load(Ordering::Acquire);
    }
    (k != 0 && k != NONE).then(|| key_of(k))
}

/// Marks the calling thread as one that called into the library: its slot holds at least the
/// "no error" value from now on, so that our destructor counts every round at its exit.
#[inline]
pub(super) fn touch() {
    let Some(key) = key() else {
        return;
    };
    // SAFETY: `key` is a live key of ours; the sentinel is never freed.
    unsafe {
        if libc::pthread_getspecific(key).is_null() {
            libc::pthread_setspecific(key, no_error());
        }
    }
}

/// The key's destructor (see "Thread exit"): puts the value back for the destructors of later
/// keys and rounds, and frees it in the last round but one.
unsafe extern "C" fn at_thread_exit(p: *mut c_void) {
    let done = ROUNDS_DONE
        .try_with(|r| {
            let n = r.get().saturating_add(1);
            r.set(n);
            n
        })
        .unwrap_or(u8::MAX);
    if done.saturating_add(1) < ROUNDS.load(Ordering::Relaxed) {
        if let Some(key) = key() {
            // SAFETY: `key` is live (its destructor is running); the slot owns `p` again.
            if unsafe { libc::pthread_setspecific(key, p) } == 0 {
                return;
            }
        }
    }
    // SAFETY: glibc handed over the slot's value and cleared the slot; it was not put back.
    unsafe { free_value(p) };
}

/// Frees a value of the slot: an `Arc::into_raw` of `set_last`; NULL and the sentinel are not
/// allocated.
///
/// # Safety
/// `p` is NULL, the sentinel, or a pointer of `Arc::into_raw` that no slot holds any more.
unsafe fn free_value(p: *mut c_void) {
    if !p.is_null() && p.cast_const() != no_error() {
        // SAFETY: `p` is neither NULL nor the sentinel, so an `Arc::into_raw` of `set_last`
        // that no slot holds any more (this function's contract): its reference is ours.
        drop(unsafe { Arc::from_raw(p.cast_const().cast::<Record>()) });
    }
}

/// Sets the calling thread's last error (None clears it) without calling the handler.
pub fn set_last(record: Option<Arc<Record>>) {
    let Some(key) = key() else {
        return;
    };
    // SAFETY: `key` is a live key of ours.
    let old = unsafe { libc::pthread_getspecific(key) };
    let new = record.map_or(no_error(), |r| Arc::into_raw(r).cast::<c_void>());
    // SAFETY: `key` is a live key of ours; the slot now owns `new`.
    if unsafe { libc::pthread_setspecific(key, new) } != 0 {
        // Not stored (out of memory): the slot keeps `old`; `new` goes back.
        // SAFETY: `new` is the sentinel or came from `Arc::into_raw` just above, not stored.
        unsafe { free_value(new.cast_mut()) };
        return;
    }
    // SAFETY: `old` was the slot's value, owned by it, replaced now (a clone of the same record
    // has the same address and its own count, so this stays balanced).
    unsafe { free_value(old) };
}

/// The calling thread's last error.
pub fn last() -> Option<Arc<Record>> {
    let key = key()?;
    // SAFETY: `key` is a live key of ours.
    let p = unsafe { libc::pthread_getspecific(key) }.cast_const();
    if p.is_null() || p == no_error() {
        return None;
    }
    // SAFETY: the slot's value is an `Arc::into_raw` it owns; we take one more reference.
    unsafe {
        Arc::increment_strong_count(p.cast::<Record>());
        Some(Arc::from_raw(p.cast::<Record>()))
    }
}

//! The calling thread's last error, kept as the value of a pthread key.
//!
//! Not a Rust `thread_local!`: one whose value has a destructor cannot be used once that
//! destructor ran (`with` panics), and glibc runs those destructors before pthread key
//! destructors, `atexit` handlers and C++ static destructors (and before C++ `thread_local`
//! destructors registered earlier), all places a C host may call us from. A pthread key's value
//! can be read and written until the thread's very end. Its destructor frees the record when the
//! thread exits; glibc calls key destructors again while they leave new values behind (up to
//! PTHREAD_DESTRUCTOR_ITERATIONS rounds), so a record stored from another key's destructor is
//! freed too, unless it was stored in the last round. At `exit()` the exiting thread's record is
//! freed by the unload hook (`delete`); other threads still running keep theirs.
//!
//! Where no key is available (pthread_key_create failed, or after the library's unload hook
//! deleted it), the last error is not recorded: the getters answer "none", the calls themselves
//! behave as always.

use super::Record;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// 0: not created yet; `NONE`: not available; otherwise the key plus one.
static KEY: AtomicU64 = AtomicU64::new(0);
const NONE: u64 = u64::MAX;

/// Creates the key (once, from `load::init`).
pub(super) fn create() {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is valid for writing; `free_record` frees exactly the values `set_last`
    // stores (pointers of `Arc::into_raw`).
    let made = unsafe { libc::pthread_key_create(&mut key, Some(free_record)) } == 0;
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
        // calling thread's value is owned by its slot, cleared before it is freed.
        unsafe {
            let own = libc::pthread_getspecific(key);
            if libc::pthread_setspecific(key, std::ptr::null()) == 0 {
                free_record(own);
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

/// The key's destructor: drops the thread's record.
unsafe extern "C" fn free_record(p: *mut c_void) {
    if !p.is_null() {
        // SAFETY: every non-NULL value of the key is an `Arc::into_raw` of `set_last`, owned by
        // the key; glibc hands it over once and clears the slot.
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
    let new = record.map_or(std::ptr::null(), |r| Arc::into_raw(r).cast::<c_void>());
    // SAFETY: as above; the slot now owns `new`.
    if unsafe { libc::pthread_setspecific(key, new) } != 0 {
        // Not stored (out of memory): the slot keeps `old`; `new` goes back.
        // SAFETY: `new` came from `Arc::into_raw` just above and was not stored.
        unsafe { free_record(new.cast_mut()) };
        return;
    }
    // SAFETY: `old` was the slot's value, owned by it, replaced now (a clone of the same record
    // has the same address and its own count, so this stays balanced).
    unsafe { free_record(old) };
}

/// The calling thread's last error.
pub fn last() -> Option<Arc<Record>> {
    let key = key()?;
    // SAFETY: `key` is a live key of ours.
    let p = unsafe { libc::pthread_getspecific(key) }.cast_const();
    if p.is_null() {
        return None;
    }
    // SAFETY: the slot's value is an `Arc::into_raw` it owns; we take one more reference.
    unsafe {
        Arc::increment_strong_count(p.cast::<Record>());
        Some(Arc::from_raw(p.cast::<Record>()))
    }
}

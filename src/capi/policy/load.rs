//! What runs when the library is loaded and unloaded.
//!
//! At load (an ELF constructor, before any call and before the host can fork): the last-error
//! key and the fork handlers. Without a lock: a `Once` that another thread of the parent was
//! inside at fork would block the child forever. Should the constructor not run (an rlib whose
//! object the linker dropped), the first call initialises instead.
//!
//! At unload (an ELF destructor: dlclose of the cdylib, or process exit): the last-error key is
//! deleted, so a thread exiting later never runs its destructor from unmapped code, and what the
//! library made for its own books is freed (this thread's last error, the handler's list of
//! running calls, what was registered with `release_at_unload`).

use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

/// 0: not started; 1: being initialised; 2: done.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Creates the last-error key and registers the fork handlers, once. Never waits: a thread that
/// finds another one initialising goes on without (only possible when the constructor did not run).
#[inline]
pub(super) fn init() {
    if STATE.load(Ordering::Acquire) != 2 {
        init_once();
    }
}

#[cold]
#[inline(never)]
fn init_once() {
    if STATE
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        super::last::create();
        super::fork::register();
        STATE.store(2, Ordering::Release);
    }
}

extern "C" fn at_load() {
    init();
}

/// Functions registered by `release_at_unload` (a fixed number: no allocation to free).
static RELEASE: [AtomicPtr<()>; 4] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 4];

/// Registers `release`, which frees what a module keeps in a static, to run at unload (once per
/// function however often it is registered). False when the list is full. A release function must
/// never wait for a lock: it runs at process exit while other threads may still be inside the
/// library, and in forked children, where a lock another thread of the parent held stays locked.
pub fn release_at_unload(release: fn()) -> bool {
    let f = release as *mut ();
    RELEASE.iter().any(|slot| {
        match slot.compare_exchange(std::ptr::null_mut(), f, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(held) => held == f,
        }
    })
}

extern "C" fn at_unload() {
    super::last::delete();
    super::handlers::release();
    for slot in &RELEASE {
        let f = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !f.is_null() {
            // SAFETY: every non-NULL value of `RELEASE` is a `fn()` stored by
            // `release_at_unload`, and a function pointer round-trips through `*mut ()`.
            let release = unsafe { std::mem::transmute::<*mut (), fn()>(f) };
            release();
        }
    }
}

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;

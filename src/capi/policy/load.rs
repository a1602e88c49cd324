//! What runs when the library is loaded and unloaded.
//!
//! At load (an ELF constructor, before any call and before the host can fork): the last-error
//! key and the fork handlers. Without a lock: a `Once` that another thread of the parent was
//! inside at fork would block the child forever. Should the constructor not run (an rlib whose
//! object the linker dropped), the first call initialises instead.
//!
//! At unload (an ELF destructor: dlclose of the cdylib, or process exit): the last-error key is
//! deleted, so a thread exiting later never runs its destructor from unmapped code.

use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not started; 1: being initialised; 2: done.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Creates the last-error key and registers the fork handlers, once. Never waits: a thread that
/// finds another one initialising goes on without (only possible when the constructor did not
/// run).
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

extern "C" fn at_unload() {
    super::last::delete();
}

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;

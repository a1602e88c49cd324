//! fork(): a child of a process that used the library refuses every call but the handler and
//! last-error functions (why: the header and docs/lifecycle.md). Once any call that can reach
//! CUDA, a cache or a registry has started in the parent (`enter`), a child forked afterwards
//! answers such calls with status CUDA and cudaErrorInitializationError, without touching any
//! lock another thread of the parent may have held. The prepare handler takes the handler's own
//! lock across fork, so the handler functions and the last error keep working in the child.

use crate::error::{CudaError, Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};

/// cudaErrorInitializationError: what a forked child's refused calls report.
pub(super) const CUDA_ERROR_AFTER_FORK: i32 = 3;

/// Set by the first call that may reach CUDA or the library's locks.
static USED: AtomicBool = AtomicBool::new(false);
/// Set in a child forked after `USED`.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Marks the library as used and refuses in a forked child. Called by every entry point that may
/// reach CUDA or the library's state, before it does.
#[inline]
pub(super) fn enter() -> Result<()> {
    super::ensure_loaded();
    if !USED.load(Ordering::Relaxed) {
        // Before any lock of this call is taken: a fork from now on gives a refusing child.
        USED.store(true, Ordering::SeqCst);
    }
    if FORKED.load(Ordering::Relaxed) {
        return Err(refusal());
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn refusal() -> Error {
    Error::cuda(
        "",
        CudaError::from_code(CUDA_ERROR_AFTER_FORK),
        "called in a forked child",
    )
}

/// True in a child forked after the library was used.
pub(super) fn forked_child() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Registers the fork handlers (once, from `load::init`).
pub(super) fn register() {
    // SAFETY: the three handlers are `extern "C"` functions that never unwind and live as long
    // as the library (glibc drops them when the library is unloaded).
    let _ = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

extern "C" fn prepare() {
    super::handlers::before_fork();
}

extern "C" fn parent() {
    super::handlers::after_fork(false);
}

extern "C" fn child() {
    if USED.load(Ordering::SeqCst) {
        FORKED.store(true, Ordering::SeqCst);
    }
    super::handlers::after_fork(true);
}

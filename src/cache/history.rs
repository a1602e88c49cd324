//! The call site of each device block in use, kept only with `LLAISYS_NVIDIA_MEMORY_HISTORY=1`
//! (read once): a backtrace taken at the allocation, which a memory snapshot shows. Taking one
//! costs far more than the allocation itself: for finding who holds memory, not for serving.

use crate::util::hash::AddrMap;
use crate::util::sync::lock;
use std::backtrace::Backtrace;
use std::sync::{Mutex, OnceLock};

/// The variable that turns it on.
pub const VAR: &str = "LLAISYS_NVIDIA_MEMORY_HISTORY";

/// Each block's backtrace, its symbols resolved only when a snapshot asks for it.
static SITES: Mutex<Option<AddrMap<Backtrace>>> = Mutex::new(None);

/// True when call sites are kept.
#[inline]
pub(crate) fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| crate::util::env::flag_on(VAR))
}

/// Keeps the call site of the block at `p`, just handed out.
#[inline(always)]
pub(crate) fn note(p: usize) {
    if on() {
        keep(p);
    }
}

/// Forgets the block at `p`, freed.
#[inline(always)]
pub(crate) fn forget(p: usize) {
    if on() {
        drop_site(p);
    }
}

// The work itself out of line: the allocation's fast path keeps only the flag's test.
#[cold]
#[inline(never)]
fn keep(p: usize) {
    let site = Backtrace::force_capture();
    lock(&SITES)
        .get_or_insert_with(AddrMap::default)
        .insert(p, site);
}

#[cold]
#[inline(never)]
fn drop_site(p: usize) {
    if let Some(sites) = lock(&SITES).as_mut() {
        sites.remove(&p);
    }
}

/// The call site of the block at `p`, when kept.
pub(crate) fn site(p: usize) -> Option<String> {
    lock(&SITES)
        .as_ref()
        .and_then(|s| s.get(&p).map(Backtrace::to_string))
}

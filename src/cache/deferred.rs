//! Frees that must wait for the legacy stream.
//!
//! Neither `cudaFreeAsync` on the legacy stream nor `cudaFree` may run while a stream of the
//! device captures a graph (`legacy_stream`). Such frees are kept here and done by the first
//! later call that finds the device's legacy stream usable ([`flush`]). The memory is in no list
//! meanwhile, so it is not handed out.

use super::{graph_pool, large, recycle::Block};
use crate::error::Result;
use crate::safe::pool;
use crate::util::sync::lock;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

/// How a kept block leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// `cudaFreeAsync` on the legacy stream, back into the device's pool.
    Pool,
    /// `cudaFree` of a large block (`cache::large`, which counts it).
    Large,
    /// `cudaFree` of a block from plain `cudaMalloc` (the cache switched off).
    Plain,
    /// `cudaFree` of a graph pool's block (`cache::graph_pool`, which counts it).
    Graph,
}

struct Kept {
    device: i32,
    block: Block,
    how: How,
}

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());
/// Set while `KEPT` may hold something.
static ANY: AtomicBool = AtomicBool::new(false);

/// Keeps the free of `block` of `device` for later.
pub(crate) fn push(device: i32, block: Block, how: How) {
    lock(&KEPT).push(Kept { device, block, how });
    ANY.store(true, Relaxed);
}

/// True while frees are kept.
#[inline]
pub(crate) fn any() -> bool {
    ANY.load(Relaxed)
}

/// Does the kept frees whose device's legacy stream may be used now; the others stay. The first
/// failure is returned (that block stays kept).
pub(crate) fn flush() -> Result<()> {
    if !any() {
        return Ok(());
    }
    let all = std::mem::take(&mut *lock(&KEPT));
    let mut left = Vec::new();
    let mut first_err = None;
    for k in all {
        let ran = crate::safe::device::run_on(k.device, || free_now(&k));
        match ran.result {
            Ok(true) => {}
            Ok(false) => left.push(k),
            Err(e) => {
                left.push(k);
                first_err.get_or_insert(e);
            }
        }
        // A free done stays done when the device current before cannot be made current again.
        if let Err(e) = ran.restored {
            first_err.get_or_insert(e);
        }
    }
    let mut kept = lock(&KEPT);
    kept.extend(left);
    ANY.store(!kept.is_empty(), Relaxed);
    drop(kept);
    first_err.map_or(Ok(()), Err)
}

/// Frees `k` on its device (current) if its legacy stream may be used (after other devices'
/// users, `cross`); false when it may not.
fn free_now(k: &Kept) -> Result<bool> {
    let Some(_legacy) = crate::cache::legacy_stream::usable(k.device)? else {
        return Ok(false);
    };
    // The caller may capture another device: relaxed mode lets this device's cudaFree through.
    let _relaxed = crate::safe::capture::Relaxed::new();
    super::cross::order_before_free(k.device)?;
    let p = k.block.ptr as *mut c_void;
    match k.how {
        // SAFETY: pool memory of ours that nobody holds since its free_device; the free is on the
        // legacy stream, so after every use queued on the legacy and blocking streams.
        How::Pool => unsafe { pool::free_async(p, k.block.size, std::ptr::null_mut()) }?,
        // SAFETY: a large block of ours, freed once; cudaFree waits for the device.
        How::Large => unsafe { large::free_now(k.block, k.device) }?,
        // SAFETY: cudaMalloc memory of ours, freed once; cudaFree waits for the device.
        How::Plain => unsafe { crate::safe::memory::free_device(p) }?,
        How::Graph => {
            // SAFETY: a graph pool block nobody holds and no graph can use any more; cudaFree
            // waits for the device, so for any replay still running.
            unsafe { crate::safe::memory::free_device(p) }?;
            graph_pool::note_freed(k.device, k.block.size);
        }
    }
    Ok(true)
}

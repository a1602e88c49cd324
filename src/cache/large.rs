//! Large device blocks from cudaMalloc instead of the pool.
//!
//! A 16 MiB D2D copy between pool blocks runs 1-3% slower than between cudaMalloc blocks (one
//! H200, docs/benchmark.md). So blocks from `LLAISYS_NVIDIA_DEVICE_LARGE_BYTES` up (default
//! 16 MiB; 0: none) that `recycle` can keep come from cudaMalloc, on the legacy stream with one
//! device in use only (`cache::device` decides).
//!
//! cudaFree waits for the whole device, so a large block leaving `recycle` is *parked* here, and
//! the parked blocks are freed together once they pass recycle's budget (one device wait per
//! budget's worth of frees). release_cached frees them all.

use super::recycle::{self, Block};
use super::MAX_DEVICES;
use crate::error::Result;
use crate::util::sync::lock;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// One device's large blocks.
struct LargeBlocks {
    /// Bytes of the device's cudaMalloc blocks that we hold (handed out, kept or parked).
    held: AtomicU64,
    /// Blocks that left `recycle`, waiting to be freed together.
    parked: Mutex<Vec<Block>>,
    /// Their bytes (written under the lock; read without it by `flush`).
    parked_bytes: AtomicU64,
}

static DEVICES: [LargeBlocks; MAX_DEVICES] = [const {
    LargeBlocks {
        held: AtomicU64::new(0),
        parked: Mutex::new(Vec::new()),
        parked_bytes: AtomicU64::new(0),
    }
}; MAX_DEVICES];

impl LargeBlocks {
    /// Empties the parked list, whose lock `parked` is.
    fn take_parked(&self, parked: &mut Vec<Block>) -> Vec<Block> {
        self.parked_bytes.store(0, Relaxed);
        std::mem::take(parked)
    }
}

/// The smallest size taken from cudaMalloc (0: none). Read once.
fn threshold() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| {
        crate::util::env::number("LLAISYS_NVIDIA_DEVICE_LARGE_BYTES").unwrap_or(16 << 20)
    })
}

/// True when a block of `size` bytes (on the legacy stream, one device in use) comes from
/// cudaMalloc: from the threshold up, and only sizes `recycle` keeps.
pub(crate) fn wanted(size: usize) -> bool {
    let t = threshold();
    t > 0 && size >= t && recycle::takes(size)
}

fn of(device: i32) -> Option<&'static LargeBlocks> {
    super::entry(&DEVICES, device)
}

/// Allocates a large block on the current device, `device`.
pub(crate) fn alloc(size: usize, device: i32) -> Result<*mut c_void> {
    // cudaMalloc is "potentially unsafe" beside another thread's global capture; relaxed mode
    // lets it through without touching the capture.
    let p = {
        let _relaxed = crate::safe::capture::Relaxed::new();
        crate::safe::memory::alloc_device(size)?
    };
    if let Some(large) = of(device) {
        large.held.fetch_add(size as u64, Relaxed);
    }
    Ok(p)
}

/// Frees a large block now (cudaFree: waits for the device, so every use of it is over).
///
/// # Safety
/// `b` is a cudaMalloc block of ours on the current device, `device`, freed once.
pub(crate) unsafe fn free_now(b: Block, device: i32) -> Result<()> {
    // SAFETY: `b` is a block of ours from `memory::alloc_device`, not yet freed, freed once here
    // (this function's contract).
    unsafe { crate::safe::memory::free_device(b.ptr as *mut c_void) }?;
    if let Some(large) = of(device) {
        large.held.fetch_sub(b.size as u64, Relaxed);
    }
    Ok(())
}

/// Parks a large block that left the cache; once the parked bytes pass recycle's budget, frees
/// them all (on the current device, `device`). Blocks that could not be freed are handed back,
/// with the first failure.
pub(crate) fn park(device: i32, b: Block) -> Flushed {
    let large = match super::checked_entry(&DEVICES, device) {
        Ok(large) => large,
        Err(e) => return Err((vec![b], e)),
    };
    let mut parked = lock(&large.parked);
    parked.push(b);
    let bytes = large.parked_bytes.fetch_add(b.size as u64, Relaxed) + b.size as u64;
    if bytes <= recycle::budget() as u64 {
        return Ok(());
    }
    let all = large.take_parked(&mut parked);
    drop(parked);
    flush_blocks(device, all)
}

/// Frees every parked block of `device` (current).
pub(crate) fn flush(device: i32) -> Flushed {
    let Some(large) = of(device).filter(|l| l.parked_bytes.load(Relaxed) > 0) else {
        return Ok(());
    };
    let all = large.take_parked(&mut lock(&large.parked));
    flush_blocks(device, all)
}

/// The blocks that could not be freed, with the first failure.
type Flushed = std::result::Result<(), (Vec<Block>, crate::error::Error)>;

fn flush_blocks(device: i32, blocks: Vec<Block>) -> Flushed {
    let mut left = Vec::new();
    let mut first_err = None;
    // This thread may capture another device (the callers asked `legacy_stream::usable`).
    let _relaxed = (!blocks.is_empty()).then(crate::safe::capture::Relaxed::new);
    for b in blocks {
        // SAFETY: parked blocks are ours, kept by no list and handed out to no one.
        if let Err(e) = unsafe { free_now(b, device) } {
            left.push(b);
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        None => Ok(()),
        Some(e) => Err((left, e)),
    }
}

/// The parked blocks of `device` (what a snapshot lists).
pub(crate) fn parked(device: i32) -> Vec<Block> {
    of(device).map_or_else(Vec::new, |l| lock(&l.parked).clone())
}

/// Bytes of cudaMalloc blocks of `device` we hold (in use, kept or parked).
pub(crate) fn held(device: i32) -> u64 {
    of(device).map_or(0, |l| l.held.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sizes_recycle_keeps_from_the_threshold_up() {
        // The defaults (no test sets these variables): 16 MiB up to recycle's largest size.
        assert!(!wanted((16 << 20) - 1));
        assert!(wanted(16 << 20));
        assert!(wanted(recycle::budget() / 8));
        assert!(
            !wanted(recycle::budget() / 8 + 1),
            "would be freed at every free_device"
        );
    }

    #[test]
    fn parked_blocks_wait_for_the_budget_and_failures_come_back() {
        // Device 58: no other test uses it; no driver in CI, so a flush fails and hands back.
        let b = Block {
            ptr: 0x80_0000,
            size: 1 << 20,
            raw: true,
        };
        assert!(park(58, b).is_ok(), "under the budget: parked");
        let (back, _) = flush(58).expect_err("cudaFree of a fake pointer fails");
        assert_eq!(back, vec![b], "nothing lost");
        assert!(flush(58).is_ok(), "nothing left parked");
        assert!(
            park(MAX_DEVICES as i32, b).is_err(),
            "device out of range refused"
        );
    }
}

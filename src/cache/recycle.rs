//! Freed device blocks kept on the host and handed out again without a driver call.
//!
//! A pool free on the legacy stream (`cudaFreeAsync`, ~1 us on the H200 machine) is safe because
//! it is a barrier there. Here a freed block is kept as *pending*; once `BATCH` blocks (or half
//! the byte budget) are pending, one event recorded on the legacy stream gives the same barrier
//! and they become *ready*. malloc_device hands out only ready blocks (exact size), so the new
//! owner's work is queued after every use of the old owner, as with the pool.
//!
//! The budget (`LLAISYS_NVIDIA_DEVICE_RECYCLE_BYTES`, default 1 GiB per device; 0: off) bounds
//! the pending bytes by half of it; the ready bytes by `ready_limit`, beyond which the largest
//! go back to the pool (or, from cudaMalloc, to `cache::large`). Blocks over an eighth of the
//! budget bypass it. Used only with one device in use, on the legacy stream. While a capture
//! forbids the legacy stream, frees stay pending: nothing freed then is handed out before a
//! barrier recorded after the capture.

use super::MAX_DEVICES;
use crate::error::Result;
use crate::safe::event::Event;
use crate::util::sync::lock;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Pending blocks that trigger the barrier.
const BATCH: usize = 16;
/// Ready blocks kept at most per device.
const MAX_READY: usize = 4096;

/// A freed device block: its address, its size, and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) ptr: usize,
    pub(crate) size: usize,
    /// From cudaMalloc (`cache::large`), not from the pool: leaves the cache with cudaFree.
    pub(crate) raw: bool,
}

struct Lists {
    /// Freed, not yet behind a barrier: not handed out.
    pending: Vec<Block>,
    pending_bytes: usize,
    /// Behind a barrier on the legacy stream: may be handed out. Blocks by size.
    ready: BTreeMap<usize, Vec<Block>>,
    ready_count: usize,
    ready_bytes: usize,
    /// A size's list emptied out of `ready`, kept for the next size that needs one.
    spare: Vec<Block>,
    /// The barrier's event, made on the device on first use.
    marker: Option<Event>,
}

static LISTS: [Mutex<Lists>; MAX_DEVICES] = [const {
    Mutex::new(Lists {
        pending: Vec::new(),
        pending_bytes: 0,
        ready: BTreeMap::new(),
        ready_count: 0,
        ready_bytes: 0,
        spare: Vec::new(),
        marker: None,
    })
}; MAX_DEVICES];

/// `LLAISYS_NVIDIA_DEVICE_RECYCLE_BYTES` when set. Read once.
fn setting() -> Option<usize> {
    static B: OnceLock<Option<usize>> = OnceLock::new();
    *B.get_or_init(|| crate::util::env::number("LLAISYS_NVIDIA_DEVICE_RECYCLE_BYTES"))
}

/// The byte budget per device (0: off): the setting, else `BUDGET`.
pub(crate) fn budget() -> usize {
    setting().unwrap_or(BUDGET)
}

/// The default budget.
const BUDGET: usize = 1 << 30;
/// Without the setting, the ready bytes may grow to this fraction of the device's memory: a
/// model freed and loaded again finds its blocks ready (docs/caches.md).
const READY_SHARE: usize = 16;

/// The most ready bytes kept for a device of `total` bytes: the setting, else the larger of the
/// budget and `total / READY_SHARE`.
pub(crate) fn ready_limit(total: usize) -> usize {
    setting().unwrap_or(BUDGET.max(total / READY_SHARE))
}

fn lists(device: i32) -> Option<&'static Mutex<Lists>> {
    super::entry(&LISTS, device)
}

/// True when a block of `size` bytes may be kept.
pub(crate) fn takes(size: usize) -> bool {
    let b = budget();
    b > 0 && size <= b / 8
}

/// A ready block of exactly `size` bytes of `device`, if one is kept.
pub(crate) fn take(device: i32, size: usize) -> Option<Block> {
    if !takes(size) {
        return None;
    }
    let mut l = lock(lists(device)?);
    let mut entry = match l.ready.entry(size) {
        std::collections::btree_map::Entry::Occupied(e) => e,
        std::collections::btree_map::Entry::Vacant(_) => return None,
    };
    let block = entry.get_mut().pop();
    // No empty list stays in the map (evict and drain rely on it).
    if entry.get().is_empty() {
        let emptied = entry.remove();
        l.keep_spare(emptied);
    }
    let block = block?;
    l.ready_count -= 1;
    l.ready_bytes -= size;
    Some(block)
}

impl Lists {
    fn add_ready(&mut self, b: Block) {
        let spare = &mut self.spare;
        self.ready
            .entry(b.size)
            .or_insert_with(|| std::mem::take(spare))
            .push(b);
        self.ready_count += 1;
        self.ready_bytes += b.size;
    }

    /// Keeps an emptied size list for reuse (the larger of it and the one kept).
    fn keep_spare(&mut self, emptied: Vec<Block>) {
        if emptied.capacity() > self.spare.capacity() {
            self.spare = emptied;
        }
    }

    /// Takes `block` back out of the pending list; false when another free's barrier has made
    /// it ready meanwhile.
    fn take_back(&mut self, block: Block) -> bool {
        let Some(i) = self.pending.iter().rposition(|b| *b == block) else {
            return false;
        };
        self.pending.swap_remove(i);
        self.pending_bytes -= block.size;
        true
    }

    /// Takes a ready block of the largest size kept; None when none is left.
    fn evict(&mut self) -> Option<Block> {
        loop {
            let mut last = self.ready.last_entry()?;
            let size = *last.key();
            let block = last.get_mut().pop();
            if last.get().is_empty() {
                let emptied = last.remove();
                self.keep_spare(emptied);
            }
            if let Some(block) = block {
                self.ready_count -= 1;
                self.ready_bytes -= size;
                return Some(block);
            }
        }
    }
}

/// True when `count` pending blocks of `bytes` in all call for a barrier.
fn due(count: usize, bytes: usize) -> bool {
    count >= BATCH || bytes >= budget() / 2
}

/// Keeps a freed block as pending when that makes no barrier due (no CUDA call). False: nothing
/// was done; [`keep`] it, with `device` current.
pub(crate) fn keep_pending(device: i32, block: Block) -> Result<bool> {
    let mut l = lock(super::checked_entry(&LISTS, device)?);
    if due(l.pending.len() + 1, l.pending_bytes + block.size) {
        return Ok(false);
    }
    l.pending.push(block);
    l.pending_bytes += block.size;
    Ok(true)
}

/// Keeps a freed block of `device` (current: the barrier goes on its legacy stream). Ok: kept;
/// the blocks returned (over `limit` ready bytes) go back to the pool. While a capture forbids
/// the legacy stream no barrier is recorded and the blocks stay pending. Err: the barrier failed;
/// the block is not kept (the caller frees it) unless another free's barrier made it ready
/// meanwhile (`not_kept`).
pub(crate) fn keep(device: i32, block: Block, limit: usize) -> Result<Vec<Block>> {
    let lists = super::checked_entry(&LISTS, device)?;
    let due = {
        let mut l = lock(lists);
        l.pending.push(block);
        l.pending_bytes += block.size;
        due(l.pending.len(), l.pending_bytes)
    };
    if !due {
        return Ok(Vec::new());
    }
    // Asked without the lists' lock held: the gate is always taken before it.
    let legacy = match crate::cache::legacy_stream::usable(device) {
        Ok(Some(permission)) => permission,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return not_kept(&mut lock(lists), block, e),
    };
    let mut l = lock(lists);
    if let Err(e) = barrier(&mut l, device) {
        return not_kept(&mut l, block, e);
    }
    drop(legacy);
    // The pending list keeps its capacity for the next batch.
    let mut moved = std::mem::take(&mut l.pending);
    l.pending_bytes = 0;
    for b in moved.drain(..) {
        l.add_ready(b);
    }
    l.pending = moved;
    let mut out = Vec::new();
    while l.ready_bytes > limit || l.ready_count > MAX_READY {
        match l.evict() {
            Some(b) => out.push(b),
            None => break,
        }
    }
    Ok(out)
}

/// `keep`'s answer when its barrier failed with `e`: the block is taken back out of the pending
/// list (Err), unless another free's barrier has made it ready already (kept; `e` cleared).
fn not_kept(l: &mut Lists, block: Block, e: crate::error::Error) -> Result<Vec<Block>> {
    if l.take_back(block) {
        return Err(e);
    }
    crate::safe::runtime::take_last_cuda_error();
    Ok(Vec::new())
}

/// Takes back a block that could not go back to the pool, as *pending* (it may have had no
/// barrier after its free yet).
pub(crate) fn restore(device: i32, block: Block) {
    if let Some(lists) = lists(device) {
        let mut l = lock(lists);
        l.pending.push(block);
        l.pending_bytes += block.size;
    }
}

/// Records the barrier on the legacy stream of `device` (current).
fn barrier(l: &mut Lists, device: i32) -> Result<()> {
    if l.marker.is_none() {
        l.marker = Some(Event::on_device(device)?);
    }
    let Some(marker) = &l.marker else {
        return Ok(());
    };
    // SAFETY: NULL is the legacy stream of the current device, the event's device.
    let recorded = unsafe { marker.record_raw(std::ptr::null_mut()) };
    if recorded
        .as_ref()
        .is_err_and(|e| e.cuda_error() == crate::error::CudaError::STREAM_CAPTURE_IMPLICIT)
    {
        // Refused by a capture begun since (`Event::abandon`): the next barrier gets a new one.
        if let Some(old) = l.marker.take() {
            old.abandon();
        }
    } else if recorded.is_ok() {
        // The marker lives for the process (only ever abandoned, never destroyed).
        crate::cache::legacy_stream::note_barrier(device, marker.as_raw());
    }
    recorded
}

/// Every kept block of `device` (pending and ready), left kept: what a snapshot lists.
pub(crate) fn kept(device: i32) -> Vec<Block> {
    let Some(lists) = lists(device) else {
        return Vec::new();
    };
    let l = lock(lists);
    l.pending
        .iter()
        .chain(l.ready.values().flatten())
        .copied()
        .collect()
}

/// Takes every kept block of `device` (pending and ready), to go back to the pool (or to CUDA).
pub(crate) fn drain(device: i32) -> Vec<Block> {
    let Some(lists) = lists(device) else {
        return Vec::new();
    };
    let mut l = lock(lists);
    let mut all = std::mem::take(&mut l.pending);
    while let Some(b) = l.evict() {
        all.push(b);
    }
    l.pending_bytes = 0;
    all
}

/// Bytes kept for `device`.
#[cfg(test)]
pub(crate) fn kept_bytes(device: i32) -> usize {
    lists(device).map_or(0, |l| {
        let l = lock(l);
        l.pending_bytes + l.ready_bytes
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool block.
    fn pooled(ptr: usize, size: usize) -> Block {
        Block {
            ptr,
            size,
            raw: false,
        }
    }

    #[test]
    fn pending_blocks_are_never_handed_out() {
        // Device 63: no test allocates there. Fewer than BATCH frees: no barrier, nothing ready.
        for i in 0..BATCH - 1 {
            let back = keep(63, pooled(0x1000 * (i + 1), 4096), budget());
            assert_eq!(back.ok(), Some(Vec::new()));
        }
        assert_eq!(take(63, 4096), None);
        assert_eq!(kept_bytes(63), (BATCH - 1) * 4096);
        let all = drain(63);
        assert_eq!(all.len(), BATCH - 1);
        assert_eq!(kept_bytes(63), 0);
    }

    #[test]
    fn a_failed_barrier_keeps_nothing_new_and_hands_out_nothing() {
        // Device 62 exists nowhere we run (and CI has no driver): the BATCH-th free cannot
        // make or record the barrier's event.
        for i in 0..BATCH - 1 {
            assert!(keep(62, pooled(0x1000 * (i + 1), 512), budget()).is_ok());
        }
        let last = pooled(0x10_0000, 512);
        assert!(
            keep(62, last, budget()).is_err(),
            "no driver: the barrier fails"
        );
        assert_eq!(take(62, 512), None, "nothing became ready");
        assert_eq!(
            kept_bytes(62),
            (BATCH - 1) * 512,
            "the failed block is not kept"
        );
        assert!(!drain(62).contains(&last));
    }

    #[test]
    fn the_ready_bytes_grow_with_the_device_memory_unless_set() {
        match setting() {
            None => {
                assert_eq!(ready_limit(0), 1 << 30, "the budget at least");
                assert_eq!(ready_limit(8 << 30), 1 << 30);
                assert_eq!(ready_limit(80 << 30), 5 << 30, "a sixteenth of 80 GiB");
                assert_eq!(ready_limit(141 << 30), (141 << 30) / 16);
            }
            Some(set) => {
                assert_eq!(ready_limit(0), set);
                assert_eq!(ready_limit(141 << 30), set, "the setting wins");
            }
        }
    }

    /// Test-only: puts blocks on the ready list as a barrier would.
    fn make_ready(device: i32, blocks: &[Block]) {
        let mut l = lock(lists(device).expect("device"));
        for &b in blocks {
            l.add_ready(b);
        }
    }

    #[test]
    fn taking_the_last_block_of_a_size_leaves_nothing_for_drain_to_miss() {
        let (big, small) = (pooled(0x20_0000, 200), pooled(0x30_0000, 100));
        make_ready(61, &[big, small]);
        assert_eq!(take(61, 200), Some(big));
        assert_eq!(take(61, 200), None);
        assert_eq!(
            drain(61),
            vec![small],
            "a smaller size behind an emptied larger one"
        );
        assert_eq!(kept_bytes(61), 0);
    }

    #[test]
    fn keep_pending_stops_short_of_a_due_barrier_and_keeps_nothing_then() {
        // Device 56: no other test uses it. Up to BATCH - 1 blocks wait without a barrier.
        let block = |i: usize| pooled(0x70_0000 + i * 0x1000, 128);
        for i in 0..BATCH - 1 {
            assert_eq!(keep_pending(56, block(i)).ok(), Some(true), "block {i}");
        }
        assert_eq!(
            keep_pending(56, block(BATCH)).ok(),
            Some(false),
            "a barrier is due"
        );
        assert_eq!(
            kept_bytes(56),
            (BATCH - 1) * 128,
            "the refused block is not kept"
        );
        assert_eq!(take(56, 128), None, "pending blocks are not handed out");
        assert!(keep_pending(MAX_DEVICES as i32, block(0)).is_err());
        assert_eq!(drain(56).len(), BATCH - 1);
    }

    #[test]
    fn an_emptied_size_list_is_reused_by_the_next_size() {
        // Device 57: no other test uses it.
        let blocks: Vec<Block> = (0..5)
            .map(|i| pooled(0x50_0000 + i * 0x1000, 300))
            .collect();
        make_ready(57, &blocks);
        for b in blocks.iter().rev() {
            assert_eq!(take(57, 300), Some(*b));
        }
        let kept = lock(&LISTS[57]).spare.capacity();
        assert!(kept >= blocks.len(), "the emptied list is kept ({kept})");
        let other = pooled(0x60_0000, 700);
        make_ready(57, &[other]);
        {
            let l = lock(&LISTS[57]);
            assert_eq!(l.spare.capacity(), 0, "handed to the new size");
            assert_eq!(l.ready.get(&700).map(Vec::capacity), Some(kept));
        }
        assert_eq!(drain(57), vec![other]);
    }

    #[test]
    fn eviction_goes_past_emptied_sizes_and_restored_blocks_wait_for_a_barrier() {
        let blocks: Vec<Block> = (0..4)
            .map(|i| pooled(0x40_0000 + i * 0x1000, 64 + i))
            .collect();
        make_ready(60, &blocks);
        // Empty the largest size, then evict: the next largest comes out.
        assert!(take(60, 67).is_some());
        let mut l = lock(lists(60).expect("device"));
        assert_eq!(l.evict().map(|b| b.size), Some(66));
        drop(l);
        // A block that could not be freed comes back as pending: never handed out before the
        // next barrier.
        let back = pooled(0x50_0000, 64);
        assert!(take(60, 64).is_some());
        restore(60, back);
        assert_eq!(take(60, 64), None);
        let rest = drain(60);
        assert_eq!(
            rest,
            vec![back, blocks[1]],
            "the restored block and the one left ready"
        );
        assert_eq!(kept_bytes(60), 0);
    }

    #[test]
    fn a_block_keeps_its_origin_through_the_lists() {
        // Device 59: no other test uses it. A cudaMalloc block and a pool block of one size.
        let (raw, pool) = (
            Block {
                ptr: 0x60_0000,
                size: 300,
                raw: true,
            },
            pooled(0x70_0000, 300),
        );
        make_ready(59, &[raw, pool]);
        let mut out = vec![take(59, 300), take(59, 300)];
        out.sort_by_key(|b| b.map(|b| b.ptr));
        assert_eq!(out, vec![Some(raw), Some(pool)]);
        restore(59, raw);
        assert_eq!(drain(59), vec![raw], "drain hands the origin back");
    }

    #[test]
    fn large_blocks_bypass_the_lists() {
        assert!(!takes(budget() / 8 + 1));
        assert!(takes(4096));
    }
}

//! Large blocks made ahead: one cudaMalloc carved into several blocks of one size, for a run of
//! allocations of that size.
//!
//! A cudaMalloc costs about the same whatever its size: on one H200 49 us for a 27.5 MB block,
//! 50 us for four of them, 121 us for 84 (`alloc_probe`, docs/caches.md). A model's weights ask
//! for dozens of blocks of one size in a row (84 MLP matrices of 27.5 MB in the weights
//! benchmark's model), each `cudaMalloc` a gap in the copies around it. So when the n-th large
//! allocation in a row asks for the same size, one cudaMalloc makes up to n blocks of it (at
//! most `slab_bytes`, 256 MiB by default): the blocks made ahead never outnumber those the run
//! has already asked for, and the next ones are handed out with no driver call. Not on another
//! thread: cudaMallocs there slow the copies beside them (docs/caches.md).
//!
//! A slab's memory goes back to CUDA (cudaFree) once every block of it has been freed to CUDA
//! (`large::free_now`); a block freed before its siblings is dead until then, never handed out
//! again (so no use of it can overlap a new owner's). Blocks made ahead and never handed out
//! are freed the same way by release_cached and the out-of-memory retry (`large::flush`). What
//! a run can hold beyond what it asked for is thus bounded by `slab_bytes` per size.
//! `LLAISYS_NVIDIA_DEVICE_SLAB_BYTES=0` makes every large block its own cudaMalloc.

use super::recycle::Block;
use crate::sync::lock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// Devices with a table.
const DEVICES: usize = 64;
/// The alignment of a slab's blocks (cudaMalloc's own is 256 bytes).
const ALIGN: usize = 512;

/// The most bytes one cudaMalloc makes for a run (0: one block per cudaMalloc). Read once.
fn slab_bytes() -> usize {
    static B: OnceLock<usize> = OnceLock::new();
    *B.get_or_init(|| crate::env::number("LLAISYS_NVIDIA_DEVICE_SLAB_BYTES").unwrap_or(256 << 20))
}

/// One cudaMalloc's blocks not yet freed to CUDA.
struct Slab {
    len: usize,
    live: usize,
}

struct Table {
    /// By base address.
    slabs: BTreeMap<usize, Slab>,
    /// Made ahead, never handed out.
    ahead: Vec<Block>,
    /// The size of the latest large allocations and how many came in a row.
    run_size: usize,
    run: usize,
}

/// Blocks made ahead per device (written under the table's lock; read without it, so that
/// `take_ahead` of a device with none, as every free while several devices are in use asks,
/// takes no lock).
static AHEAD: [AtomicUsize; DEVICES] = [const { AtomicUsize::new(0) }; DEVICES];

static TABLES: [Mutex<Table>; DEVICES] = [const {
    Mutex::new(Table {
        slabs: BTreeMap::new(),
        ahead: Vec::new(),
        run_size: 0,
        run: 0,
    })
}; DEVICES];

/// The distance between a slab's blocks of `size` bytes: `size` rounded up to `ALIGN`.
pub(crate) fn stride(size: usize) -> usize {
    size.div_ceil(ALIGN) * ALIGN
}

/// How many blocks of `size` one cudaMalloc makes for the `run`-th allocation in a row of that
/// size: the run's length, within `cap` bytes, at least one.
fn blocks_for(size: usize, run: usize, cap: usize) -> usize {
    if size == 0 {
        return 1;
    }
    run.min(cap / stride(size)).max(1)
}

/// What a large allocation of `size` on `device` should do.
pub(crate) enum Plan {
    /// A block made ahead, to hand out as it is.
    Ready(Block),
    /// Make `n` blocks with one cudaMalloc (1: a plain block).
    Make(usize),
}

/// Counts an allocation of `size` in the run and says where its block comes from.
pub(crate) fn plan(device: usize, size: usize) -> Plan {
    let Some(table) = TABLES.get(device) else {
        return Plan::Make(1);
    };
    let mut t = lock(table);
    if t.run_size == size {
        t.run += 1;
    } else {
        t.run_size = size;
        t.run = 1;
    }
    if let Some(i) = t.ahead.iter().rposition(|b| b.size == size) {
        AHEAD[device].fetch_sub(1, Relaxed);
        return Plan::Ready(t.ahead.swap_remove(i));
    }
    Plan::Make(blocks_for(size, t.run, slab_bytes()))
}

/// Records a cudaMalloc of `n` blocks of `size` at `base` (`n` strides): the first is handed
/// out, the others are kept to be.
pub(crate) fn carved(device: usize, base: usize, size: usize, n: usize) {
    let Some(table) = TABLES.get(device).filter(|_| n > 1) else {
        return;
    };
    let mut t = lock(table);
    t.slabs.insert(
        base,
        Slab {
            len: stride(size) * n,
            live: n,
        },
    );
    t.ahead.extend((1..n).map(|k| Block {
        ptr: base + k * stride(size),
        size,
        raw: true,
    }));
    AHEAD[device].fetch_add(n - 1, Relaxed);
}

/// What freeing block `b` to CUDA comes to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Free {
    /// Not a slab's block: cudaFree it.
    Plain,
    /// A slab's block with siblings still live: nothing to free yet.
    Held,
    /// The slab's last block: cudaFree the slab (base, bytes); `restore` it if that fails.
    Slab(usize, usize),
}

/// Counts block `b` of `device` out of its slab.
pub(crate) fn free(device: usize, b: Block) -> Free {
    let Some(table) = TABLES.get(device) else {
        return Free::Plain;
    };
    let mut t = lock(table);
    let Some((&base, slab)) = t.slabs.range_mut(..=b.ptr).next_back() else {
        return Free::Plain;
    };
    if b.ptr >= base + slab.len {
        return Free::Plain;
    }
    slab.live -= 1;
    if slab.live > 0 {
        return Free::Held;
    }
    let len = slab.len;
    t.slabs.remove(&base);
    Free::Slab(base, len)
}

/// Puts back a slab whose cudaFree failed, with its last block (which the caller keeps) live.
pub(crate) fn restore(device: usize, base: usize, len: usize) {
    if let Some(table) = TABLES.get(device) {
        lock(table).slabs.insert(base, Slab { len, live: 1 });
    }
}

/// Takes the blocks of `device` made ahead and never handed out (to be freed to CUDA).
pub(crate) fn take_ahead(device: usize) -> Vec<Block> {
    let Some(table) = TABLES
        .get(device)
        .filter(|_| AHEAD[device].load(Relaxed) > 0)
    else {
        return Vec::new();
    };
    let mut t = lock(table);
    AHEAD[device].store(0, Relaxed);
    std::mem::take(&mut t.ahead)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_makes_at_most_as_many_blocks_ahead_as_it_has_asked_for_within_the_cap() {
        let mib = 1usize << 20;
        assert_eq!(blocks_for(27 * mib, 1, 256 * mib), 1, "a first block alone");
        assert_eq!(blocks_for(27 * mib, 2, 256 * mib), 2);
        assert_eq!(blocks_for(27 * mib, 5, 256 * mib), 5);
        assert_eq!(blocks_for(27 * mib, 40, 256 * mib), 9, "within 256 MiB");
        assert_eq!(
            blocks_for(200 * mib, 40, 256 * mib),
            1,
            "larger than half the cap"
        );
        assert_eq!(blocks_for(27 * mib, 40, 0), 1, "off");
        assert_eq!(
            blocks_for(64 * mib + 1, 40, 256 * mib),
            3,
            "strides fill it"
        );
        assert_eq!(
            (stride(1000), stride(1024), stride(1025)),
            (1024, 1024, 1536)
        );
    }

    #[test]
    fn blocks_made_ahead_are_handed_out_and_the_slab_is_freed_with_its_last_block() {
        // Device 61: no other test uses it; addresses are never dereferenced.
        let d = 61;
        let size = (1 << 20) + 1;
        let step = stride(size);
        assert!(matches!(plan(d, size), Plan::Make(1)), "first of a run");
        let Plan::Make(n) = plan(d, size) else {
            panic!("nothing made ahead yet");
        };
        assert_eq!(n, 2, "second of a run: two blocks");
        let base = 0x4000_0000;
        carved(d, base, size, 3);
        let Plan::Ready(b1) = plan(d, size) else {
            panic!("a block made ahead");
        };
        let Plan::Ready(b2) = plan(d, size) else {
            panic!("a block made ahead");
        };
        let mut got = [b1.ptr, b2.ptr];
        got.sort_unstable();
        assert_eq!(got, [base + step, base + 2 * step]);
        assert!(b1.raw && b1.size == size);
        assert!(matches!(plan(d, size), Plan::Make(_)), "none left ahead");
        assert!(
            matches!(plan(d, 2 * size), Plan::Make(1)),
            "another size starts a run"
        );

        let block = |ptr| Block {
            ptr,
            size,
            raw: true,
        };
        assert_eq!(free(d, block(0x10)), Free::Plain, "below every slab");
        assert_eq!(
            free(d, block(base + 3 * step)),
            Free::Plain,
            "past the slab"
        );
        assert_eq!(free(d, b2), Free::Held);
        assert_eq!(free(d, block(base)), Free::Held);
        assert_eq!(free(d, b1), Free::Slab(base, 3 * step), "the last block");
        restore(d, base, 3 * step);
        assert_eq!(
            free(d, b1),
            Free::Slab(base, 3 * step),
            "restored with one live"
        );
        assert_eq!(free(d, b1), Free::Plain, "gone");
        assert_eq!(free(64, b1), Free::Plain, "device out of range");
    }

    #[test]
    fn blocks_made_ahead_are_taken_for_release() {
        let d = 62;
        carved(d, 0x8000_0000, 4096, 4);
        let mut ahead = take_ahead(d);
        ahead.sort_by_key(|b| b.ptr);
        assert_eq!(
            ahead.iter().map(|b| b.ptr).collect::<Vec<_>>(),
            [0x8000_1000, 0x8000_2000, 0x8000_3000]
        );
        assert!(take_ahead(d).is_empty());
        assert!(matches!(plan(d, 4096), Plan::Make(1)), "nothing left ahead");
    }
}

//! Allocation caches behind the table's malloc/free, and their switches and statistics.
//!
//! - [`device`]: device memory from a stream-ordered pool per device, allocated and freed in the
//!   order of the legacy default stream, so a block is reused only after its users have run.
//! - [`recycle`]: freed device blocks handed out again with no driver call, behind one event on
//!   the legacy stream per batch of frees.
//! - [`host`]: pinned host memory in size classes, reused only after events recorded at free
//!   time on the streams that used it (PyTorch's CachingHostAllocator scheme).
//! - [`cross`]: with several devices, frees and reuse ordered with other devices' streams that
//!   used the memory.
//! - [`in_use`]: which devices are in use (one bit each).
//! - [`graph_pool`]: memory of graphs captured through the library, kept for their replays.
//! - [`history`]: the call site of each block in use, when asked for (snapshots).
//! - [`deferred`]: frees that wait while a capture forbids the legacy stream.
//! - [`large`]: blocks from 16 MiB up from cudaMalloc instead of the pool.
//! - [`limit`]: a cap per device on what the library holds there.
//! - [`threshold`]: the most freed memory the device cache keeps per device.
//! - [`legacy_stream`]: when the caches may queue work on a device's legacy stream, and the
//!   side stream used instead.
//! - [`copies`]: what a copy does with the caches' memory: the one door of `ops::copies`.
//!
//! While a stream captures a graph, the caches queue nothing on the legacy stream (frees wait;
//! new memory comes from the side stream) and never hand out memory freed during the capture
//! before it has ended. Per-device state lives in tables of [`MAX_DEVICES`] entries ([`entry`]).
//!
//! Switches, read once per process: `LLAISYS_NVIDIA_DEVICE_CACHE=0` (plain cudaMalloc/cudaFree),
//! `LLAISYS_NVIDIA_HOST_CACHE=0` (plain cudaMallocHost/cudaFreeHost).

pub(crate) mod copies;
pub(crate) mod cross;
pub(crate) mod deferred;
pub(crate) mod device;
pub(crate) mod graph_pool;
pub(crate) mod history;
pub(crate) mod host;
pub(crate) mod in_use;
pub(crate) mod large;
pub(crate) mod legacy_stream;
pub(crate) mod limit;
pub(crate) mod recycle;
pub(crate) mod threshold;

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Device ids the per-device tables hold (`in_use` keeps one bit per device in a u64).
pub(crate) const MAX_DEVICES: usize = 64;
const _: () = assert!(MAX_DEVICES <= u64::BITS as usize);

/// `device`'s entry of a per-device table; None for an id outside 0..MAX_DEVICES.
#[inline]
pub(crate) fn entry<T>(table: &[T; MAX_DEVICES], device: i32) -> Option<&T> {
    usize::try_from(device).ok().and_then(|d| table.get(d))
}

/// [`entry`], with an id outside 0..MAX_DEVICES as an internal error.
#[inline]
pub(crate) fn checked_entry<T>(table: &[T; MAX_DEVICES], device: i32) -> Result<&T> {
    entry(table, device).ok_or_else(|| outside(device))
}

#[cold]
#[inline(never)]
fn outside(device: i32) -> Error {
    Error::internal(format!("device {device} outside 0..{MAX_DEVICES}"))
}

/// Statistics of one allocator (`llaisysNvidiaAllocatorStats` in the header).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes handed out and not yet freed (as requested by the callers).
    pub in_use_bytes: u64,
    /// The highest `in_use_bytes` seen.
    pub peak_in_use_bytes: u64,
    /// Bytes held by the cache and not handed out (reserved - in use), ready or waiting on work.
    pub cached_bytes: u64,
    /// Successful allocations.
    pub alloc_count: u64,
    /// Frees of our pointers.
    pub free_count: u64,
    /// Allocations served from cached memory.
    pub cache_hits: u64,
    /// Allocations that had to get new memory from CUDA.
    pub cache_misses: u64,
    /// Out-of-memory failures retried after releasing cached memory.
    pub oom_retries: u64,
}

/// Lock-free counters behind `AllocatorStats`.
#[derive(Default)]
pub(crate) struct Counters {
    in_use: AtomicU64,
    peak: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    oom_retries: AtomicU64,
}

impl Counters {
    pub(crate) const fn new() -> Counters {
        Counters {
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            oom_retries: AtomicU64::new(0),
        }
    }

    /// Counts an allocation; returns the allocation count with it (its number).
    pub(crate) fn allocated(&self, bytes: usize, hit: bool) -> u64 {
        let now = self.in_use.fetch_add(bytes as u64, Relaxed) + bytes as u64;
        self.peak.fetch_max(now, Relaxed);
        let seq = self.allocs.fetch_add(1, Relaxed) + 1;
        if hit {
            self.hits.fetch_add(1, Relaxed);
        } else {
            self.misses.fetch_add(1, Relaxed);
        }
        seq
    }

    pub(crate) fn freed(&self, bytes: usize) {
        self.in_use.fetch_sub(bytes as u64, Relaxed);
        self.frees.fetch_add(1, Relaxed);
    }

    pub(crate) fn oom_retry(&self) {
        self.oom_retries.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self, cached_bytes: u64) -> AllocatorStats {
        AllocatorStats {
            in_use_bytes: self.in_use.load(Relaxed),
            peak_in_use_bytes: self.peak.load(Relaxed),
            cached_bytes,
            alloc_count: self.allocs.load(Relaxed),
            free_count: self.frees.load(Relaxed),
            cache_hits: self.hits.load(Relaxed),
            cache_misses: self.misses.load(Relaxed),
            oom_retries: self.oom_retries.load(Relaxed),
        }
    }

    pub(crate) fn reset_peak(&self) {
        self.peak.store(self.in_use.load(Relaxed), Relaxed);
    }
}

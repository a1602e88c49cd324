//! Fast copies between pageable host memory and the device.
//!
//! cudaMemcpy from pageable memory goes through the driver's own small staging buffers with one
//! host thread (8-16 GB/s on a 55 GB/s link). Here a large copy is cut into chunks, and the
//! calling thread and the pool's threads (`workers`) each take chunks one after another, each
//! through a pinned staging slot of its own (`staging`), with no step in which all of them
//! wait for each other: while some threads copy host memory, the copy engine moves the chunks
//! others have queued. Every chunk's DMA is queued on the caller's stream, so the copy keeps
//! the stream's order.
//!
//! - H2D: chunk -> slot (host copy), cudaMemcpyAsync slot -> device on the stream, the slot's
//!   event recorded. Returns once every chunk is queued, i.e. the caller's buffer has been read
//!   (as cudaMemcpy does); a slot is reused once its event has completed.
//! - D2H: cudaMemcpyAsync device -> slot on the stream, the slot's event waited for, slot ->
//!   caller. Returns with the data in the caller's buffer (as cudaMemcpy does).
//!
//! Switches: `LLAISYS_NVIDIA_PAGEABLE_FAST=0` turns it off; it applies from
//! `LLAISYS_NVIDIA_PAGEABLE_MIN_BYTES` (default 1 MiB) up; smaller copies use cudaMemcpy.
//! `LLAISYS_NVIDIA_PAGEABLE_THREADS` sets the host threads (default: 3/4 of the cores, at most
//! 12).

mod staging;
mod workers;

use crate::copy::{self, MemcpyKind};
use crate::cudart::StreamHandle;
use crate::error::{Error, Result};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

pub(crate) use staging::release as release_staging;

/// The largest chunk (one staging slot's buffer).
const CHUNK_MAX: usize = 8 << 20;
/// The smallest chunk: below it the cost of queuing a DMA is no longer small beside it.
const CHUNK_MIN: usize = 256 << 10;
/// Staging slots per copy: chunks in flight at once.
const SLOTS: usize = 4;

/// Which way a staged copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Pageable host memory to device memory.
    HostToDevice,
    /// Device memory to pageable host memory.
    DeviceToHost,
}

/// The settings, read once per process.
pub struct Config {
    /// Whether the fast path is on.
    pub enabled: bool,
    /// The smallest copy that takes it.
    pub min_bytes: usize,
    /// Host threads that copy (the caller included).
    pub threads: usize,
}

/// The process's settings.
pub(crate) fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let threads = crate::env::number("LLAISYS_NVIDIA_PAGEABLE_THREADS")
            .unwrap_or_else(|| {
                // Three quarters of the cores, at most 12: on the H200 machine (16 cores) 12
                // threads moved 41-47 GB/s, 8 threads 28-38 GB/s (benchmark, docs/benchmark.md).
                let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
                (cores * 3 / 4).clamp(1, 12)
            })
            .clamp(1, 64);
        Config {
            enabled: crate::env::switch_on("LLAISYS_NVIDIA_PAGEABLE_FAST"),
            min_bytes: crate::env::number("LLAISYS_NVIDIA_PAGEABLE_MIN_BYTES").unwrap_or(1 << 20),
            threads,
        }
    })
}

/// True when a copy of `size` bytes between pageable memory and the device should be staged.
pub(crate) fn wanted(size: usize) -> bool {
    let c = config();
    c.enabled && size >= c.min_bytes
}

/// One host copy shared by the caller and the pool's threads: pieces of at least 128 KiB,
/// claimed one after another.
struct HostCopy {
    dst: usize,
    src: usize,
    len: usize,
    piece: usize,
    pieces: usize,
    next: AtomicUsize,
    done: AtomicUsize,
}

impl workers::Task for HostCopy {
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.pieces {
                return;
            }
            let off = i * self.piece;
            let n = self.piece.min(self.len - off);
            // SAFETY: `par_copy`'s caller keeps both ranges valid and disjoint until every piece
            // is done (it waits for that); pieces do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (self.src + off) as *const u8,
                    (self.dst + off) as *mut u8,
                    n,
                )
            };
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.pieces
    }
}

/// Copies `len` bytes with the caller and the pool's threads together (the probe's best shape:
/// every thread on the same chunk, so the chunk's DMA can start as early as possible).
///
/// # Safety
/// `dst` and `src` are valid for `len` bytes and do not overlap.
unsafe fn par_copy(dst: *mut u8, src: *const u8, len: usize) {
    const MIN_PIECE: usize = 128 << 10;
    let threads = config().threads;
    let parts = (len / MIN_PIECE).clamp(1, threads * 2);
    if parts == 1 || threads == 1 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let piece = len.div_ceil(parts).next_multiple_of(64);
    let job = Arc::new(HostCopy {
        dst: dst as usize,
        src: src as usize,
        len,
        piece,
        pieces: len.div_ceil(piece),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    let pieces = job.pieces;
    workers::run(job, threads - 1, (threads - 1).min(pieces - 1));
}

/// The chunk size for a copy of `size` bytes: about a quarter of it, so that even a 1 MiB copy
/// overlaps host copying with the copy engine, within [CHUNK_MIN, CHUNK_MAX] (the shapes the
/// pageable probe found best: docs/benchmark.md).
fn chunk_for(size: usize) -> usize {
    (size / 4)
        .next_multiple_of(64 << 10)
        .clamp(CHUNK_MIN, CHUNK_MAX)
}

/// Queues one chunk's cudaMemcpyAsync between a staging buffer and the device.
///
/// # Safety
/// `dst`/`src` are valid for `n` bytes until the copy has run; `stream` is NULL or live.
unsafe fn chunk_copy(
    dst: *mut u8,
    src: *const u8,
    n: usize,
    kind: MemcpyKind,
    stream: StreamHandle,
    off: usize,
) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { copy::memcpy_async(dst.cast(), src.cast(), n, kind, stream) }.map_err(|e| {
        Error::cuda(
            e.call(),
            e.cuda_error(),
            format!("{} (chunk at {off})", e.detail()),
        )
    })
}

/// # Safety
/// `dst` is device memory and `src` pageable memory, both valid for `size` bytes; `stream` is
/// NULL or a live stream of `device`.
unsafe fn h2d(
    set: &staging::Set,
    device: i32,
    dst: *mut u8,
    src: *const u8,
    size: usize,
    stream: StreamHandle,
) -> Result<()> {
    let chunk = chunk_for(size);
    for (k, off) in (0..size).step_by(chunk).enumerate() {
        let n = chunk.min(size - off);
        let mut slot = set.slot(k);
        let buf = slot.prepare(device)?;
        // SAFETY: the caller's contract for `src` and `dst`; `buf` holds CHUNK_MAX >= n bytes
        // and no queued copy uses it any more (prepared).
        unsafe {
            par_copy(buf, src.add(off), n);
            chunk_copy(dst.add(off), buf, n, MemcpyKind::H2D, stream, off)?;
            slot.record(stream)?;
        }
    }
    Ok(())
}

/// # Safety
/// `dst` is pageable memory and `src` device memory, both valid for `size` bytes; `stream` is
/// NULL or a live stream of `device`.
unsafe fn d2h(
    set: &staging::Set,
    device: i32,
    dst: *mut u8,
    src: *const u8,
    size: usize,
    stream: StreamHandle,
) -> Result<()> {
    let chunk = chunk_for(size);
    let chunks = size.div_ceil(chunk);
    let enqueue = |k: usize| -> Result<()> {
        let off = k * chunk;
        let n = chunk.min(size - off);
        let mut slot = set.slot(k);
        let buf = slot.prepare(device)?;
        // SAFETY: the caller's contract for `src`; `buf` is an idle staging buffer of
        // CHUNK_MAX >= n bytes.
        unsafe {
            chunk_copy(buf, src.add(off), n, MemcpyKind::D2H, stream, off)?;
            slot.record(stream)
        }
    };
    // Keep SLOTS - 1 chunks queued ahead of the one being copied out.
    for k in 0..chunks.min(SLOTS - 1) {
        enqueue(k)?;
    }
    for k in 0..chunks {
        if k + SLOTS - 1 < chunks {
            enqueue(k + SLOTS - 1)?;
        }
        let off = k * chunk;
        let mut slot = set.slot(k);
        let buf = slot.prepare(device)?;
        // SAFETY: the chunk has landed in the staging buffer (prepare waited for its event);
        // the caller's contract for `dst`.
        unsafe { par_copy(dst.add(off), buf, chunk.min(size - off)) };
    }
    Ok(())
}

/// Copies `size` bytes between pageable `host` memory and `device` memory through pinned
/// staging, on `stream` (NULL: the legacy default stream) of `stream_device` (None: NULL, the
/// current device). With `wait` the copy is complete on return; without it an H2D copy may still
/// be in flight (the caller's buffer is already read).
///
/// # Safety
/// `host` and `device` are valid for `size` bytes; `device` is device memory; `stream` is NULL
/// or a live stream.
pub(crate) unsafe fn copy(
    direction: Direction,
    device: *mut c_void,
    host: *mut c_void,
    size: usize,
    stream: StreamHandle,
    stream_device: Option<i32>,
    wait: bool,
) -> Result<()> {
    // Events are recorded on `stream`, so they are made on its device.
    let stream_device = match stream_device {
        Some(d) => d,
        None if stream.is_null() => crate::device::current()?,
        // SAFETY: the caller's contract: a live stream.
        None => unsafe { crate::stream::device_of(stream) }?,
    };
    let set = staging::take(SLOTS);
    // SAFETY: the caller's contract; the set is ours for this copy.
    let mut result = unsafe {
        match direction {
            Direction::HostToDevice => h2d(
                &set,
                stream_device,
                device.cast(),
                host.cast(),
                size,
                stream,
            ),
            Direction::DeviceToHost => d2h(
                &set,
                stream_device,
                host.cast(),
                device.cast(),
                size,
                stream,
            ),
        }
    };
    if result.is_ok() && wait && direction == Direction::HostToDevice {
        result = set.wait_all();
    }
    if result.is_err() {
        // A chunk may be queued without its event: reuse the set only once the stream is idle;
        // if even that fails, the set is dropped (its buffers leak rather than be overwritten
        // while a copy may still read them).
        // SAFETY: `stream` is NULL or a live stream (the caller's contract).
        if unsafe { crate::stream::synchronize(stream) }.is_ok() {
            set.mark_idle();
            staging::give_back(set);
        } else {
            crate::runtime::take_last_cuda_error();
        }
    } else {
        staging::give_back(set);
    }
    result.map_err(|e| {
        Error::cuda(
            e.call(),
            e.cuda_error(),
            format!(
                "{} [staged pageable copy {direction:?} size={size} stream={stream:p}]",
                e.detail()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_bounded_and_aligned() {
        assert_eq!(chunk_for(1 << 20), CHUNK_MIN);
        assert_eq!(chunk_for(4 << 20), 1 << 20);
        assert_eq!(chunk_for(1 << 30), CHUNK_MAX);
        assert_eq!(chunk_for((64 << 20) + 3) % (64 << 10), 0);
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn par_copy_copies_every_byte_of_every_size_from_many_threads() {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for (k, len) in [1usize, 63, 4096, (128 << 10) + 1, 1 << 20, (3 << 20) + 17]
                        .into_iter()
                        .enumerate()
                    {
                        let src = pattern(len, (k + t) as u8);
                        let mut dst = vec![0u8; len];
                        // SAFETY: both vectors hold `len` bytes and are distinct.
                        unsafe { par_copy(dst.as_mut_ptr(), src.as_ptr(), len) };
                        assert!(dst == src, "thread {t} len {len}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("copy thread");
        }
    }
}

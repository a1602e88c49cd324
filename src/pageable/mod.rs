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
use crate::sync::lock;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub(crate) use staging::release as release_staging;

/// The largest chunk (one staging slot's buffer).
const CHUNK_MAX: usize = 2 << 20;
/// The smallest chunk: below it the cost of queuing a DMA is no longer small beside it.
const CHUNK_MIN: usize = 128 << 10;

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

/// Which way the copy goes, and the two sides.
struct Job {
    direction: Direction,
    device: usize,
    host: usize,
    size: usize,
    chunk: usize,
    chunks: usize,
    stream: usize,
    stream_device: i32,
    set: Arc<staging::Set>,
    next: AtomicUsize,
    /// Chunks done, or given up after an error.
    settled: AtomicUsize,
    error: Mutex<Option<Error>>,
}

impl Job {
    /// One chunk: through its slot, in the job's direction.
    ///
    /// # Safety
    /// The job's pointers are valid for its size (the caller of `copy` waits until the job is
    /// finished); its stream is NULL or live.
    unsafe fn chunk(&self, k: usize) -> Result<()> {
        let off = k * self.chunk;
        let n = self.chunk.min(self.size - off);
        let stream = self.stream as StreamHandle;
        let device = (self.device + off) as *mut u8;
        let host = (self.host + off) as *mut u8;
        let mut slot = self.set.slot(k);
        let buf = slot.prepare(self.stream_device)?;
        let at = |e: Error| {
            Error::cuda(
                e.call(),
                e.cuda_error(),
                format!("{} (chunk at {off})", e.detail()),
            )
        };
        match self.direction {
            Direction::HostToDevice => {
                // SAFETY: the caller's contract for `host`; `buf` holds CHUNK_MAX >= n bytes and
                // no queued copy uses it any more (prepared).
                unsafe {
                    std::ptr::copy_nonoverlapping(host, buf, n);
                    copy::memcpy_async(device.cast(), buf.cast(), n, MemcpyKind::H2D, stream)
                        .map_err(at)?;
                    slot.record(stream)
                }
            }
            Direction::DeviceToHost => {
                // SAFETY: as above; the host copy waits for the chunk's DMA.
                unsafe {
                    copy::memcpy_async(buf.cast(), device.cast(), n, MemcpyKind::D2H, stream)
                        .map_err(at)?;
                    slot.record(stream)?;
                    slot.wait()?;
                    std::ptr::copy_nonoverlapping(buf, host, n);
                }
                Ok(())
            }
        }
    }
}

impl workers::Task for Job {
    fn work(&self) {
        // NULL names the legacy stream of the *current* device: a pool thread makes the
        // stream's device current first.
        if self.stream == 0 && crate::device::current().ok() != Some(self.stream_device) {
            if let Err(e) = crate::device::set(self.stream_device) {
                lock(&self.error).get_or_insert(e);
            }
        }
        loop {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if k >= self.chunks {
                return;
            }
            if lock(&self.error).is_none() {
                // SAFETY: the caller of `copy` keeps the memory valid until the job has
                // finished, which it waits for.
                if let Err(e) = unsafe { self.chunk(k) } {
                    lock(&self.error).get_or_insert(e);
                }
            }
            self.settled.fetch_add(1, Ordering::Release);
        }
    }

    fn finished(&self) -> bool {
        self.settled.load(Ordering::Acquire) >= self.chunks
    }
}

/// The chunk size for a copy of `size` bytes by `threads` threads: about two chunks a thread,
/// so that host copies and DMAs overlap, within [CHUNK_MIN, CHUNK_MAX].
fn chunk_for(size: usize, threads: usize) -> usize {
    (size / (2 * threads.max(1)))
        .next_multiple_of(64 << 10)
        .clamp(CHUNK_MIN, CHUNK_MAX)
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
    let threads = config().threads;
    let chunk = chunk_for(size, threads);
    let chunks = size.div_ceil(chunk);
    let set = staging::take(2 * threads.max(1));
    let job = Arc::new(Job {
        direction,
        device: device as usize,
        host: host as usize,
        size,
        chunk,
        chunks,
        stream: stream as usize,
        stream_device,
        set: set.clone(),
        next: AtomicUsize::new(0),
        settled: AtomicUsize::new(0),
        error: Mutex::new(None),
    });
    workers::run(job.clone(), threads - 1, (threads - 1).min(chunks - 1));
    let mut result = lock(&job.error).take().map_or(Ok(()), Err);
    if result.is_ok() && wait && direction == Direction::HostToDevice {
        result = set.wait_all();
    }
    drop(job);
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
        assert_eq!(chunk_for(1 << 20, 12), CHUNK_MIN);
        assert_eq!(chunk_for(64 << 20, 12), CHUNK_MAX);
        assert_eq!(chunk_for(16 << 20, 12) % (64 << 10), 0);
        assert_eq!(chunk_for(16 << 20, 1), CHUNK_MAX);
        assert_eq!(chunk_for(1 << 20, 0), 512 << 10);
    }
}

//! Fast copies between pageable host memory and the device.
//!
//! cudaMemcpy from pageable memory goes through the driver's own small staging buffers with one
//! host thread (8-16 GB/s on a 55 GB/s link). Here a large copy is cut into chunks staged
//! through pinned buffers (`staging`, one slot per chunk in flight), the host copies done by the
//! calling thread and the pool's threads (`workers`). The default engine (`pipeline`) runs the
//! whole copy as one pipeline: the threads take its pieces in order and copy each as soon as its
//! chunk is ready while the copy engine moves other chunks; the earlier engine (below,
//! `LLAISYS_NVIDIA_PAGEABLE_PIPELINE=0`) copies chunk after chunk, all threads on one chunk.
//! Every chunk's DMA is queued on the caller's stream, so the copy keeps the stream's order.
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
//! 12), `LLAISYS_NVIDIA_PAGEABLE_H2D_THREADS` those of every H2D copy (unset: the same, and H2D
//! copies from 8 MiB adapt between half of them and all, `adapt`). Tuning (defaults measured on
//! the H200 machine, docs/benchmark.md):
//! `LLAISYS_NVIDIA_PAGEABLE_CHUNK` the largest chunk (bytes, at most 8 MiB),
//! `LLAISYS_NVIDIA_PAGEABLE_FIRST_CHUNK` the first chunk of both directions (later ones double
//! up to the largest; 0: all equal; unset: 256 KiB for H2D, equal chunks for D2H),
//! `LLAISYS_NVIDIA_PAGEABLE_PIECE` the largest piece one host thread copies at a time (the
//! chunk-by-chunk engine: the smallest),
//! `LLAISYS_NVIDIA_PAGEABLE_SLOTS` staging buffers per copy (2..16),
//! `LLAISYS_NVIDIA_PAGEABLE_STREAMING` non-temporal stores (0 none, 1 into the staging
//! buffers, 2 also into the caller's buffer; unset: the staging buffers, and the caller's buffer
//! of D2H copies from 32 MiB);
//! `LLAISYS_NVIDIA_PAGEABLE_PIPELINE=0` the engine of chunk-by-chunk copies instead of the
//! pipelined one (`pipeline`, the default);
//! `LLAISYS_NVIDIA_PAGEABLE_SPIN_US` how long the host threads spin after a copy before they
//! sleep (default 250, at most 1000000; `workers`);
//! `LLAISYS_NVIDIA_PAGEABLE_TRACE=N` where the time of every N-th copy goes (`trace`).

mod adapt;
mod hostcopy;
mod pipeline;
mod staging;
mod trace;
mod workers;

use hostcopy::{par_copy, Stores};
use trace::{Phase, Trace};

use crate::copy::{self, MemcpyKind};
use crate::cudart::StreamHandle;
use crate::error::{Error, Result};
use std::os::raw::c_void;
use std::sync::OnceLock;

pub(crate) use staging::release as release_staging;

/// The largest chunk (one staging slot's buffer).
const CHUNK_MAX: usize = 8 << 20;
/// The smallest chunk: below it the cost of queuing a DMA is no longer small beside it.
const CHUNK_MIN: usize = 256 << 10;
/// By default, an H2D copy's first chunk (later ones double up to the chunk size): the copy
/// engine starts after a short host copy instead of a quarter of the copy (H200 machine, three
/// interleaved rounds: H2D 16 and 64 MiB 1-2 GB/s faster with 256 KiB than with equal chunks;
/// D2H 4-6 GB/s slower, so D2H keeps equal chunks; docs/benchmark.md).
const H2D_FIRST_CHUNK: usize = 256 << 10;
/// By default, D2H copies from this size write the caller's buffer with non-temporal stores:
/// beyond what the CPU caches keep (at 64 MiB they were faster on the H200 machine, at 16 MiB
/// slower than ordinary stores: docs/benchmark.md).
const STREAMING_FROM: usize = 32 << 20;

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
    /// Host threads of an H2D copy (the caller included), at most `threads`; with
    /// `h2d_adaptive`, the most (the fewest: half of it).
    pub h2d_threads: usize,
    /// Whether large H2D copies adapt their threads (`adapt`): unless
    /// `LLAISYS_NVIDIA_PAGEABLE_H2D_THREADS` is set.
    pub h2d_adaptive: bool,
    /// The largest chunk, None: a quarter of the copy within [CHUNK_MIN, CHUNK_MAX].
    pub chunk: Option<usize>,
    /// The first chunk of an H2D copy (later ones double up to the largest); 0: all equal.
    pub h2d_first_chunk: usize,
    /// The first chunk of a D2H copy, as `h2d_first_chunk`.
    pub d2h_first_chunk: usize,
    /// The piece one host thread copies at a time: the pipeline's largest, the chunk-by-chunk
    /// engine's smallest.
    pub piece: usize,
    /// Staging buffers per copy: chunks in flight at once.
    pub slots: usize,
    /// Whether host copies into the staging buffers (H2D) use non-temporal stores.
    pub streaming_into_staging: bool,
    /// The smallest D2H copy whose caller's buffer is written with non-temporal stores
    /// (`usize::MAX`: none).
    pub streaming_from: usize,
    /// The pipelined engine (`pipeline`); off: chunk by chunk, every thread on one chunk.
    pub pipelined: bool,
}

impl Config {
    /// The host threads (the caller included) of a copy that goes `direction`.
    pub fn threads_for(&self, direction: Direction) -> usize {
        match direction {
            Direction::HostToDevice => self.h2d_threads,
            Direction::DeviceToHost => self.threads,
        }
    }
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
        let h2d_fixed: Option<usize> = crate::env::number("LLAISYS_NVIDIA_PAGEABLE_H2D_THREADS");
        let kib = |k: usize| k << 10;
        let first_chunk = crate::env::number("LLAISYS_NVIDIA_PAGEABLE_FIRST_CHUNK")
            .map(|c: usize| c.min(CHUNK_MAX).next_multiple_of(kib(64)));
        let streaming: Option<u8> = crate::env::number("LLAISYS_NVIDIA_PAGEABLE_STREAMING");
        let config = Config {
            enabled: crate::env::switch_on("LLAISYS_NVIDIA_PAGEABLE_FAST"),
            min_bytes: crate::env::number("LLAISYS_NVIDIA_PAGEABLE_MIN_BYTES").unwrap_or(1 << 20),
            threads,
            h2d_threads: h2d_fixed.unwrap_or(threads).clamp(1, threads),
            h2d_adaptive: h2d_fixed.is_none(),
            chunk: crate::env::number("LLAISYS_NVIDIA_PAGEABLE_CHUNK")
                .map(|c: usize| c.min(CHUNK_MAX).next_multiple_of(kib(64)).max(kib(64))),
            h2d_first_chunk: first_chunk.unwrap_or(H2D_FIRST_CHUNK),
            d2h_first_chunk: first_chunk.unwrap_or(0),
            piece: crate::env::number("LLAISYS_NVIDIA_PAGEABLE_PIECE")
                .map_or(kib(64), |p: usize| p.clamp(kib(4), CHUNK_MAX)),
            slots: crate::env::number("LLAISYS_NVIDIA_PAGEABLE_SLOTS")
                .map_or(4, |k: usize| k.clamp(2, 16)),
            // Unset: staging, and D2H destinations from STREAMING_FROM; 0 never; 1 staging
            // only; 2 (and more) staging and every D2H destination.
            streaming_into_staging: streaming != Some(0),
            streaming_from: match streaming {
                None => STREAMING_FROM,
                Some(2..) => 0,
                Some(_) => usize::MAX,
            },
            pipelined: crate::env::switch_on("LLAISYS_NVIDIA_PAGEABLE_PIPELINE"),
        };
        // How long the host threads spin after a copy before they sleep (default 250 us, at
        // most a second: they must sleep some time).
        workers::set_spin(std::time::Duration::from_micros(
            crate::env::number("LLAISYS_NVIDIA_PAGEABLE_SPIN_US")
                .map_or(250, |us: u64| us.min(1_000_000)),
        ));
        config
    })
}

/// True when a copy of `size` bytes between pageable memory and the device should be staged.
#[inline]
pub(crate) fn wanted(size: usize) -> bool {
    let c = config();
    c.enabled && size >= c.min_bytes
}

/// The chunk size for a copy of `size` bytes: about a quarter of it, so that even a 1 MiB copy
/// overlaps host copying with the copy engine, within [CHUNK_MIN, CHUNK_MAX] (the shapes the
/// pageable probe and the sweeps found best: docs/benchmark.md; a 1 MiB D2H in two chunks of
/// 512 KiB was slower, its first DMA landing 20-28 us after it was queued, against 10-12 us for
/// 256 KiB).
fn chunk_for(size: usize) -> usize {
    (size / 4)
        .next_multiple_of(64 << 10)
        .clamp(CHUNK_MIN, CHUNK_MAX)
}

/// The chunks (offset, length) of a copy of `size` bytes: the first `first` bytes long (when
/// set and smaller than the largest chunk), each next one twice the last, up to `largest`.
fn plan(size: usize, largest: usize, first: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(size.div_ceil(largest) + 8);
    let mut next = if first > 0 {
        first.min(largest)
    } else {
        largest
    };
    let mut off = 0;
    while off < size {
        let n = next.min(size - off);
        out.push((off, n));
        off += n;
        next = (next * 2).min(largest);
    }
    out
}

/// The chunks of a copy of `size` bytes going `direction` with the process's settings.
fn chunks(size: usize, direction: Direction) -> Vec<(usize, usize)> {
    let c = config();
    let first = match direction {
        Direction::HostToDevice => c.h2d_first_chunk,
        Direction::DeviceToHost => c.d2h_first_chunk,
    };
    plan(size, c.chunk.unwrap_or_else(|| chunk_for(size)), first)
}

/// The stores of a host copy (into a staging buffer, or into the caller's buffer of a copy of
/// `size` bytes) with the process's settings.
fn stores(into_staging: bool, size: usize) -> Stores {
    let c = config();
    let streaming = if into_staging {
        c.streaming_into_staging
    } else {
        size >= c.streaming_from
    };
    if streaming {
        Stores::Streaming
    } else {
        Stores::Cached
    }
}

/// Copies one chunk's bytes on the host with the process's settings.
///
/// # Safety
/// As `par_copy`.
unsafe fn host_copy(dst: *mut u8, src: *const u8, n: usize, direction: Direction, stores: Stores) {
    let c = config();
    // SAFETY: the caller's contract.
    unsafe { par_copy(dst, src, n, c.threads_for(direction), c.piece, stores) }
}

/// The bounds of an H2D copy whose host threads adapt (`adapt`): from half the H2D threads to
/// all of them.
#[derive(Clone, Copy)]
struct Adapt {
    lo: usize,
    hi: usize,
}

impl Adapt {
    /// Some for a copy whose threads adapt: H2D, from `adapt::ADAPT_FROM` bytes, unless the
    /// threads are fixed.
    fn of(direction: Direction, size: usize) -> Option<Adapt> {
        let c = config();
        (direction == Direction::HostToDevice && c.h2d_adaptive && size >= adapt::ADAPT_FROM).then(
            || Adapt {
                lo: c.h2d_threads.div_ceil(2),
                hi: c.h2d_threads,
            },
        )
    }

    fn threads(self) -> usize {
        adapt::threads(self.lo, self.hi)
    }

    fn copied(self, threads: usize, seen: adapt::InFlight) {
        adapt::copied(threads, seen, self.lo, self.hi);
    }
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
    tr: &Trace,
) -> Result<()> {
    let stores = stores(true, size);
    for (k, (off, n)) in chunks(size, Direction::HostToDevice)
        .into_iter()
        .enumerate()
    {
        let mut slot = set.slot(k);
        let buf = tr.time(Phase::Wait, || slot.prepare(device))?;
        // SAFETY: the caller's contract for `src` and `dst`; `buf` holds CHUNK_MAX >= n bytes
        // and no queued copy uses it any more (prepared).
        unsafe {
            tr.time(Phase::HostCopy, || {
                host_copy(buf, src.add(off), n, Direction::HostToDevice, stores)
            });
            tr.time(Phase::Enqueue, || {
                chunk_copy(dst.add(off), buf, n, MemcpyKind::H2D, stream, off)
            })?;
            tr.time(Phase::Record, || slot.record(stream))?;
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
    tr: &Trace,
) -> Result<()> {
    let plan = chunks(size, Direction::DeviceToHost);
    let stores = stores(false, size);
    let chunks = plan.len();
    let ahead = set.slots.len() - 1;
    let enqueue = |k: usize| -> Result<()> {
        let (off, n) = plan[k];
        let mut slot = set.slot(k);
        let buf = tr.time(Phase::Wait, || slot.prepare(device))?;
        // SAFETY: the caller's contract for `src`; `buf` is an idle staging buffer of
        // CHUNK_MAX >= n bytes.
        unsafe {
            tr.time(Phase::Enqueue, || {
                chunk_copy(buf, src.add(off), n, MemcpyKind::D2H, stream, off)
            })?;
            tr.time(Phase::Record, || slot.record(stream))
        }
    };
    // Keep all but one slot's chunks queued ahead of the one being copied out.
    for k in 0..chunks.min(ahead) {
        enqueue(k)?;
    }
    for (k, &(off, n)) in plan.iter().enumerate() {
        if k + ahead < chunks {
            enqueue(k + ahead)?;
        }
        let mut slot = set.slot(k);
        let buf = tr.time(Phase::Wait, || slot.prepare(device))?;
        // SAFETY: the chunk has landed in the staging buffer (prepare waited for its event);
        // the caller's contract for `dst`.
        tr.time(Phase::HostCopy, || unsafe {
            host_copy(dst.add(off), buf, n, Direction::DeviceToHost, stores)
        });
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
    let tr = Trace::start();
    let set = staging::take(config().slots);
    if tr.active() {
        let idle = set.known_idle();
        tr.mark(if idle { "set_idle" } else { "set_busy" }, set.slots.len());
    }
    let adapt = Adapt::of(direction, size).filter(|_| config().pipelined);
    let threads = adapt.map_or(config().threads_for(direction), Adapt::threads);
    // SAFETY: the caller's contract; the set is ours for this copy.
    let mut result = unsafe {
        match direction {
            _ if config().pipelined => {
                let plan = chunks(size, direction);
                pipeline::run(
                    pipeline::Request {
                        set: &set,
                        device: stream_device,
                        direction,
                        dev: device.cast(),
                        host: host.cast(),
                        stream,
                        threads,
                        piece: config().piece,
                        stores: stores(direction == Direction::HostToDevice, size),
                        count_in_flight: adapt.is_some(),
                    },
                    plan,
                    &tr,
                )
                .map(|seen| {
                    // Only copies that the pool's threads helped with say how fast the host
                    // side can go.
                    if let (Some(a), Some(seen)) = (adapt, seen) {
                        a.copied(threads, seen);
                    }
                })
            }
            Direction::HostToDevice => h2d(
                &set,
                stream_device,
                device.cast(),
                host.cast(),
                size,
                stream,
                &tr,
            ),
            Direction::DeviceToHost => d2h(
                &set,
                stream_device,
                host.cast(),
                device.cast(),
                size,
                stream,
                &tr,
            ),
        }
    };
    if result.is_ok() && wait && direction == Direction::HostToDevice {
        result = tr.time(Phase::Wait, || set.wait_all());
    }
    if tr.active() {
        tr.finish(format_args!(
            "{direction:?} {size} B, {} chunks, {threads} threads, stream {stream:p}",
            chunks(size, direction).len()
        ));
    }
    if result.is_err() {
        // A chunk may be queued without its event: reuse the set only once the stream is idle
        // and every slot's last recorded use (perhaps an earlier copy's, on another stream) has
        // completed; if either wait fails, the set is dropped (its buffers leak rather than be
        // overwritten while a copy may still read them).
        // SAFETY: `stream` is NULL or a live stream (the caller's contract).
        if unsafe { crate::stream::synchronize(stream) }.is_ok() && set.wait_all().is_ok() {
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

    #[test]
    fn plans_cover_every_byte_once_and_ramp_up() {
        for size in [1usize, (1 << 20) - 1, 1 << 20, (64 << 20) + 3] {
            for (largest, first) in [(256 << 10, 0), (1 << 20, 256 << 10), (8 << 20, 64 << 10)] {
                let p = plan(size, largest, first);
                let mut off = 0;
                for &(o, n) in &p {
                    assert_eq!(o, off, "size {size}: contiguous");
                    assert!(n > 0 && n <= largest);
                    off += n;
                }
                assert_eq!(off, size);
                if first > 0 && size > first {
                    assert_eq!(p[0].1, first);
                    assert_eq!(p[1].1, (2 * first).min(largest).min(size - first));
                }
            }
        }
    }
}

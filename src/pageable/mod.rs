//! Fast copies between pageable host memory and the device.
//!
//! cudaMemcpy from pageable memory goes through the driver's own small staging buffers with one
//! host thread, far below the link's rate (docs/benchmark.md). Here a copy of `H2D_MIN_BYTES`
//! (H2D) or `D2H_MIN_BYTES` (D2H) or more is cut into chunks staged through pinned buffers
//! (`staging`, one slot per chunk in flight) and run as one pipeline (`pipeline`): the calling
//! thread queues every chunk's DMA on the caller's stream, so the copy keeps the stream's order,
//! and the host threads (the caller and the pool's, `workers`) take the copy's pieces in order
//! and copy each one as soon as its chunk is ready. A smaller H2D `memcpy_sync` is staged only
//! behind a staged copy's DMA still pending on the legacy stream (`copy_behind`).
//!
//! - H2D: piece -> slot (host copy), cudaMemcpyAsync slot -> device on the stream once the
//!   chunk's pieces are in, the slot's event recorded. Returns once every chunk is queued, i.e.
//!   the caller's buffer has been read (as cudaMemcpy does); a slot is reused once its event
//!   has completed, except for a copy of up to `BEHIND_MAX` on the legacy stream written past
//!   the bytes the slot's pending DMA reads, behind it on that stream.
//! - D2H: cudaMemcpyAsync device -> slot on the stream, the slot's event polled, slot ->
//!   caller. Returns with the data in the caller's buffer (as cudaMemcpy does).
//!
//! Settings (docs/variables.md): `LLAISYS_NVIDIA_PAGEABLE_FAST=0` turns the path off;
//! `LLAISYS_NVIDIA_PAGEABLE_THREADS` bounds the host threads of a copy (default: 3/4 of the
//! cores, at most 12); `LLAISYS_NVIDIA_PAGEABLE_STORES` and `LLAISYS_NVIDIA_PAGEABLE_DEMOTE`
//! choose how H2D copies write the staging buffers (`StorePolicy`, developer settings for
//! tuning on a machine); `LLAISYS_NVIDIA_PAGEABLE_TRACE=N`, a developer tool, prints where the
//! time of every N-th copy goes (`trace`). The shape of a copy (chunks, pieces, staging
//! buffers, the default stores, the threads' spin) is fixed by constants, chosen with
//! `pageable_probe` and the table benchmark (docs/caches.md); H2D copies of 8 to 128 MiB with
//! non-temporal stores adapt their thread count below the bound (`adapt`).

mod adapt;
mod hostcopy;
mod pipeline;
mod recent;
mod staging;
mod trace;
mod workers;

use hostcopy::Stores;
use trace::{Phase, Trace};

use crate::cudart::StreamHandle;
use crate::error::{Error, Result};
use std::os::raw::c_void;
use std::sync::OnceLock;

pub(crate) use staging::release as release_staging;

/// The smallest H2D copy that is staged; smaller ones go to cudaMemcpy, whose fixed cost is
/// lower (unless a `memcpy_sync` can go behind a pending DMA: `copy_behind`). An H2D copy's
/// first chunk is short (`H2D_FIRST_CHUNK`), so from two chunks on its DMA overlaps the host
/// copy of the rest (a model's key and value projections, 768 KiB in the weights benchmark's
/// model, are above it: docs/benchmark.md).
const H2D_MIN_BYTES: usize = 512 << 10;
/// The smallest D2H copy that is staged: its first chunk lands before any is copied out.
const D2H_MIN_BYTES: usize = 1 << 20;
/// The largest chunk (one staging slot's buffer).
const CHUNK_MAX: usize = 8 << 20;
/// The smallest chunk: below it the cost of queuing a DMA is no longer small beside it.
const CHUNK_MIN: usize = 256 << 10;
/// An H2D copy's first chunk on an idle link (later ones double up to the chunk size): the copy
/// engine starts after a short host copy instead of a quarter of the copy. Behind earlier DMAs
/// still in flight the first chunk is longer (`first_chunk`). D2H copies use equal chunks,
/// which were faster for them (docs/caches.md).
const H2D_FIRST_CHUNK: usize = 256 << 10;
/// D2H copies from this size write the caller's buffer with non-temporal stores: beyond what
/// the CPU caches keep, where they are faster than ordinary stores (docs/caches.md).
const STREAMING_FROM: usize = 32 << 20;
/// H2D copies from this size write the staging buffers with ordinary stores: their source comes
/// from memory rather than the CPU caches, and the copy engine then reads the staging buffers
/// from the last-level cache instead of memory, which non-temporal stores would have sent them
/// to; smaller copies keep non-temporal stores, which were faster there (docs/caches.md).
const H2D_CACHED_FROM: usize = 128 << 20;

/// Which way a staged copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Pageable host memory to device memory.
    HostToDevice,
    /// Device memory to pageable host memory.
    DeviceToHost,
}

/// How an H2D copy writes the staging buffers (`LLAISYS_NVIDIA_PAGEABLE_STORES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StorePolicy {
    /// By size (the default, `size`): non-temporal stores below `H2D_CACHED_FROM`, ordinary
    /// ones from it.
    Size,
    /// Ordinary stores for every copy (`cached`).
    Cached,
    /// As `Size`, but ordinary stores also below `H2D_CACHED_FROM` for a source that none of
    /// the last copies read (`fresh`, `recent`): it comes from memory rather than the CPU
    /// caches, as a model's weights do.
    Fresh,
}

impl StorePolicy {
    /// The policy a value of the variable names; unset or unknown: `Size`.
    fn named(v: Option<&str>) -> StorePolicy {
        match v.map(str::trim) {
            Some("cached") => StorePolicy::Cached,
            Some("fresh") => StorePolicy::Fresh,
            _ => StorePolicy::Size,
        }
    }
}

/// The settings from the environment, read once per process.
struct Config {
    /// Whether the fast path is on (`LLAISYS_NVIDIA_PAGEABLE_FAST`).
    enabled: bool,
    /// Host threads that copy, the caller included (`LLAISYS_NVIDIA_PAGEABLE_THREADS`).
    threads: usize,
    /// How H2D copies write the staging buffers (`LLAISYS_NVIDIA_PAGEABLE_STORES`).
    stores: StorePolicy,
    /// Whether lines written with ordinary stores into a staging buffer are then moved out of
    /// the core's own caches to the shared one (`LLAISYS_NVIDIA_PAGEABLE_DEMOTE`).
    demote: bool,
}

/// The process's settings.
fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| Config {
        enabled: crate::env::switch_on("LLAISYS_NVIDIA_PAGEABLE_FAST"),
        threads: crate::env::number("LLAISYS_NVIDIA_PAGEABLE_THREADS")
            .unwrap_or_else(|| {
                // Three quarters of the cores, at most 12: enough to keep up with the link
                // while leaving cores to the application (docs/caches.md).
                let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
                (cores * 3 / 4).clamp(1, 12)
            })
            .clamp(1, 64),
        stores: StorePolicy::named(
            std::env::var("LLAISYS_NVIDIA_PAGEABLE_STORES")
                .ok()
                .as_deref(),
        ),
        demote: crate::env::flag_on("LLAISYS_NVIDIA_PAGEABLE_DEMOTE"),
    })
}

/// True when a copy of `size` bytes between pageable memory and the device going `direction`
/// should be staged.
#[inline]
pub(crate) fn wanted(size: usize, direction: Direction) -> bool {
    config().enabled && size >= min_bytes(direction)
}

/// The smallest staged copy going `direction`.
fn min_bytes(direction: Direction) -> usize {
    match direction {
        Direction::HostToDevice => H2D_MIN_BYTES,
        Direction::DeviceToHost => D2H_MIN_BYTES,
    }
}

/// The chunk size for a copy of `size` bytes: about a quarter of it, so that even a 1 MiB copy
/// overlaps host copying with the copy engine, within [CHUNK_MIN, CHUNK_MAX] (docs/caches.md).
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

/// The first chunk of an H2D copy whose chunks are at most `largest` bytes, queued behind
/// `pending` bytes of DMAs from the set's staging buffers, `oldest` of them from the slot the
/// copy starts at: the copy engine stays busy with the others (`pending - oldest`) while the
/// host copies the first chunk, so it may be as long as they are. A ramp from
/// `H2D_FIRST_CHUNK` behind DMAs in flight would hold small chunks in buffers that could each
/// hold the largest, and the copy engine could run dry between them.
fn first_chunk(pending: usize, oldest: usize, largest: usize) -> usize {
    let behind = pending.saturating_sub(oldest) / (64 << 10) * (64 << 10);
    behind.clamp(H2D_FIRST_CHUNK, largest.max(H2D_FIRST_CHUNK))
}

/// The largest H2D copy written behind a staging slot's last use (`staging::Set::room_behind`)
/// as one chunk, instead of taking slots of its own: a model's key and value projections
/// between its large matrices, each of which would otherwise hold a slot that could hold a
/// whole chunk while the copy engine runs through the slots' DMAs; and its norms and biases
/// (below `H2D_MIN_BYTES`, staged only so: `copy_behind`), which would otherwise go to
/// cudaMemcpy and wait for the stream.
const BEHIND_MAX: usize = 1 << 20;

/// The chunks of a copy of `size` bytes going `direction`; an H2D copy's first chunk as
/// `first_chunk` says behind `pending` bytes in flight, `oldest` of them in its first slot.
fn chunks(size: usize, direction: Direction, pending: usize, oldest: usize) -> Vec<(usize, usize)> {
    match direction {
        Direction::HostToDevice => {
            // Behind DMAs in flight a copy needs no short chunks to start the copy engine: its
            // chunks may be as long as its first (up to a slot's buffer).
            let first = first_chunk(pending, oldest, CHUNK_MAX);
            plan(size, chunk_for(size).max(first), first)
        }
        Direction::DeviceToHost => plan(size, chunk_for(size), 0),
    }
}

/// The stores of a copy of `size` bytes from or to `host`, as the process's settings say
/// (`stores_as`).
fn stores(direction: Direction, size: usize, host: usize) -> Stores {
    let c = config();
    stores_as(c.stores, c.demote, direction, size, || {
        recent::seen_again(host, size)
    })
}

/// The stores of a copy's host side: H2D writes the staging buffers, by default with
/// non-temporal stores below `H2D_CACHED_FROM` bytes (the copy engine then reads memory, not
/// lines dirty in a core's cache) and ordinary ones from it, as `policy` says (`seen_again`:
/// whether the copy's source is that of a recent copy, asked once for `Fresh`); with `demote`
/// ordinary stores into a staging buffer are followed by moving the lines to the shared cache.
/// D2H writes the caller's buffer, with non-temporal stores from `STREAMING_FROM` bytes.
fn stores_as(
    policy: StorePolicy,
    demote: bool,
    direction: Direction,
    size: usize,
    seen_again: impl FnOnce() -> bool,
) -> Stores {
    match direction {
        Direction::HostToDevice => {
            let cached = match policy {
                StorePolicy::Size => size >= H2D_CACHED_FROM,
                StorePolicy::Cached => true,
                // Asked first, so that every copy's source is noted.
                StorePolicy::Fresh => !seen_again() || size >= H2D_CACHED_FROM,
            };
            match (cached, demote) {
                (false, _) => Stores::Streaming,
                (true, false) => Stores::Cached,
                (true, true) => Stores::Demoted,
            }
        }
        Direction::DeviceToHost if size >= STREAMING_FROM => Stores::Streaming,
        Direction::DeviceToHost => Stores::Cached,
    }
}

/// The bounds of an H2D copy whose host threads adapt (`adapt`): from half the threads to all
/// of them. Only copies with non-temporal stores adapt: with ordinary stores (from
/// `H2D_CACHED_FROM`) fewer threads were slower whatever the balance, so those use them all
/// (docs/caches.md).
#[derive(Clone, Copy)]
struct Adapt {
    lo: usize,
    hi: usize,
}

impl Adapt {
    /// Some for a copy whose threads adapt: H2D with non-temporal stores, from
    /// `adapt::ADAPT_FROM` bytes.
    fn of(direction: Direction, size: usize, stores: Stores) -> Option<Adapt> {
        let threads = config().threads;
        (direction == Direction::HostToDevice
            && size >= adapt::ADAPT_FROM
            && stores == Stores::Streaming)
            .then(|| Adapt {
                lo: threads.div_ceil(2),
                hi: threads,
            })
    }

    fn threads(self) -> usize {
        adapt::threads(self.lo, self.hi)
    }

    fn copied(self, threads: usize, seen: adapt::InFlight) {
        adapt::copied(threads, seen, self.lo, self.hi);
    }
}

/// Copies `size` bytes between pageable `host` memory and `device` memory through pinned
/// staging, on `stream` (NULL: the legacy default stream) of `stream_device` (None: NULL, the
/// current device). With `wait` the copy is complete on return; without it an H2D copy may still
/// be in flight (the caller's buffer is already read).
///
/// # Safety
/// `host` is pageable memory valid for `size` bytes until this returns; `device` is device
/// memory valid for `size` bytes until the copy has run on `stream`; `stream` is NULL or a live
/// stream, of `stream_device` when that is given.
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
        // SAFETY: `stream` is not NULL here, so it is a live stream (this function's contract).
        None => unsafe { crate::stream::device_of(stream) }?,
    };
    let set = staging::take();
    let next_slot = set.first_slot();
    let last_slot = next_slot + set.slots.len() - 1;
    // A small H2D copy on the legacy stream goes behind the last slot's last use (pending, or
    // completed but not yet seen) if it has room, as one chunk; any other copy starts at the
    // next slot.
    let behind_at =
        (direction == Direction::HostToDevice && stream.is_null() && size <= BEHIND_MAX)
            .then(|| set.room_behind(last_slot, stream_device, size))
            .flatten();
    let layout = match behind_at {
        Some(at) => Layout::behind(last_slot, at, size),
        None => {
            let (pending, oldest) = match direction {
                Direction::HostToDevice => set.pending_bytes(next_slot),
                Direction::DeviceToHost => (0, 0),
            };
            Layout {
                first_slot: next_slot,
                plan: chunks(size, direction, pending, oldest),
                behind_at: None,
            }
        }
    };
    // SAFETY: this function's contract; `stream_device` is `stream`'s device (given, or found
    // above); the set was taken for this copy alone, and a layout behind a pending DMA was
    // found in it by `room_behind` on the legacy stream of that device.
    unsafe {
        run(
            direction,
            device,
            host,
            size,
            stream,
            stream_device,
            wait,
            set,
            layout,
        )
    }
}

/// False when `copy_behind` would do nothing because no staged H2D copy may be in flight (one
/// atomic load): the caller need not look at its pointers.
#[inline]
pub(crate) fn copy_behind_possible() -> bool {
    config().enabled && staging::h2d_maybe_in_flight()
}

/// memcpy_sync of an H2D copy of `size` bytes from pageable `host` memory too small for
/// `wanted`, on the legacy stream of the current device: staged as one chunk behind a staged
/// copy's DMA still pending there when a staging buffer has room behind it (`staging::take_behind`;
/// the copy waits for nothing), so that it neither waits for that DMA, as `cudaMemcpy` would
/// (it waits for the stream first), nor lets the copy engine run dry between large copies (a
/// model's norms and biases between its matrices). Returns false, having done nothing, when no
/// such DMA is pending or no buffer has room: the caller copies with `cudaMemcpy`. One atomic
/// load when no staged H2D copy may be in flight.
///
/// # Safety
/// `host` is pageable memory valid for `size` bytes until this returns; `device` is device
/// memory valid for `size` bytes until the copy has run on the legacy stream.
pub(crate) unsafe fn copy_behind(
    device: *mut c_void,
    host: *mut c_void,
    size: usize,
) -> Result<bool> {
    if size > BEHIND_MAX || !copy_behind_possible() {
        return Ok(false);
    }
    let current = crate::device::current()?;
    let Some((set, slot, at)) = staging::take_behind(current, size) else {
        return Ok(false);
    };
    // SAFETY: this function's contract; NULL is the legacy stream of `current`, on which the
    // slot's pending DMA was queued (`take_behind`), with room behind it; the set was taken
    // for this copy alone.
    unsafe {
        run(
            Direction::HostToDevice,
            device,
            host,
            size,
            std::ptr::null_mut(),
            current,
            false,
            set,
            Layout::behind(slot, at, size),
        )
    }?;
    Ok(true)
}

/// Where a staged copy goes in its set.
struct Layout {
    /// The slot of the first chunk.
    first_slot: usize,
    /// The chunks (offset, length).
    plan: Vec<(usize, usize)>,
    /// For one chunk written behind the first slot's pending DMA: where in its buffer.
    behind_at: Option<usize>,
}

impl Layout {
    /// One chunk of `size` bytes at byte `at` of slot `slot`'s buffer, behind its pending DMA.
    fn behind(slot: usize, at: usize, size: usize) -> Layout {
        Layout {
            first_slot: slot,
            plan: vec![(0, size)],
            behind_at: Some(at),
        }
    }
}

/// Runs a staged copy laid out as `layout` in `set`, then gives the set back (or drops it when
/// a failed copy may still use it).
///
/// # Safety
/// As `copy`; `stream_device` is the device of `stream`; the set is this copy's alone; a layout
/// behind a pending DMA is one that `room_behind` found on the legacy stream of `stream_device`,
/// and `stream` is then NULL.
#[allow(clippy::too_many_arguments)]
unsafe fn run(
    direction: Direction,
    device: *mut c_void,
    host: *mut c_void,
    size: usize,
    stream: StreamHandle,
    stream_device: i32,
    wait: bool,
    set: std::sync::Arc<staging::Set>,
    layout: Layout,
) -> Result<()> {
    let tr = Trace::start();
    if tr.active() {
        let idle = set.known_idle();
        tr.mark(if idle { "set_idle" } else { "set_busy" }, set.slots.len());
        if let Some(at) = layout.behind_at {
            tr.mark("behind_at", at);
        }
        tr.mark(
            "first_chunk_kib",
            layout.plan.first().map_or(0, |c| c.1 >> 10),
        );
    }
    let stores = stores(direction, size, host as usize);
    let adapt = Adapt::of(direction, size, stores);
    let threads = adapt.map_or(config().threads, Adapt::threads);
    let chunk_count = layout.plan.len();
    set.used(layout.first_slot, chunk_count);
    // SAFETY: `device` and `host` hold `size` bytes, the plan's chunks cover exactly those, and
    // they stay valid until the copy has run (this function's contract); `stream` is NULL or a
    // live stream of `stream_device`; the set was taken from the kept sets (or made) for this
    // copy alone, and a chunk behind a pending DMA has the room `room_behind` found, on the
    // stream of that DMA (this function's contract).
    let mut result = unsafe {
        pipeline::run(
            pipeline::Request {
                set: &set,
                device: stream_device,
                direction,
                dev: device.cast(),
                host: host.cast(),
                stream,
                threads,
                stores,
                count_in_flight: adapt.is_some(),
                first_slot: layout.first_slot,
                behind_at: layout.behind_at,
            },
            layout.plan,
            &tr,
        )
    }
    .map(|seen| {
        // Only copies that the pool's threads helped with say how fast the host side can go.
        if let (Some(a), Some(seen)) = (adapt, seen) {
            a.copied(threads, seen);
        }
    });
    if result.is_ok() && wait && direction == Direction::HostToDevice {
        result = tr.time(Phase::Wait, || set.wait_all());
    }
    if tr.active() {
        tr.finish(format_args!(
            "{direction:?} {size} B, {chunk_count} chunks, {threads} threads, {stores:?} stores, stream {stream:p}"
        ));
    }
    if result.is_err() {
        // A chunk may be queued without its event: reuse the set only once the stream is idle
        // and every slot's last recorded use (perhaps an earlier copy's, on another stream) has
        // completed; if either wait fails, the set is dropped (its buffers leak rather than be
        // overwritten while a copy may still read them).
        // SAFETY: `stream` is NULL or a live stream (this function's contract).
        if unsafe { crate::stream::synchronize(stream) }.is_ok() && set.wait_all().is_ok() {
            staging::give_back(set);
        } else {
            crate::runtime::take_last_cuda_error();
        }
    } else {
        staging::give_back(set);
        if !wait && direction == Direction::HostToDevice && stream.is_null() {
            staging::h2d_queued(stream_device);
        }
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

    #[test]
    fn h2d_starts_with_a_short_chunk_d2h_uses_equal_ones() {
        let h2d = chunks(16 << 20, Direction::HostToDevice, 0, 0);
        assert_eq!(
            h2d.iter().map(|c| c.1).take(5).collect::<Vec<_>>(),
            [256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20]
        );
        let d2h = chunks(16 << 20, Direction::DeviceToHost, 24 << 20, 8 << 20);
        assert_eq!(
            d2h,
            [
                (0, 4 << 20),
                (4 << 20, 4 << 20),
                (8 << 20, 4 << 20),
                (12 << 20, 4 << 20)
            ]
        );
    }

    #[test]
    fn behind_dmas_in_flight_an_h2d_copy_starts_with_as_much_as_the_others_hold() {
        let mib = 1 << 20;
        // Idle (or only the first slot's DMA pending): the short first chunk.
        assert_eq!(first_chunk(0, 0, 8 * mib), H2D_FIRST_CHUNK);
        assert_eq!(first_chunk(8 * mib, 8 * mib, 8 * mib), H2D_FIRST_CHUNK);
        // Behind 6 MiB + 100 KiB in the other slots: 6 MiB + 64 KiB (a multiple of 64 KiB).
        assert_eq!(
            first_chunk(8 * mib + 6 * mib + (100 << 10), 8 * mib, 8 * mib),
            6 * mib + (64 << 10)
        );
        // Never beyond the copy's largest chunk, never below the short one.
        assert_eq!(first_chunk(30 * mib, 2 * mib, 4 * mib), 4 * mib);
        assert_eq!(first_chunk(30 * mib, 2 * mib, 64 << 10), H2D_FIRST_CHUNK);
        assert_eq!(first_chunk(100 << 10, 0, 8 * mib), H2D_FIRST_CHUNK);
        // Behind 12 MiB in flight a 27 MiB copy takes whole slots (its chunk size would be a
        // quarter of it); a 768 KiB one behind 3 MiB is one chunk (not three of 256 KiB).
        let h2d = chunks(27 * mib, Direction::HostToDevice, 20 * mib, 8 * mib);
        assert_eq!(
            h2d.iter().map(|c| c.1).collect::<Vec<_>>(),
            [8 * mib, 8 * mib, 8 * mib, 3 * mib]
        );
        let kv = chunks(768 << 10, Direction::HostToDevice, 4 * mib, mib);
        assert_eq!(kv, [(0, 768 << 10)]);
        // With less in flight the chunks double from the first up to the usual size.
        let h2d = chunks(27 * mib, Direction::HostToDevice, 3 * mib, 2 * mib);
        assert_eq!(h2d[0].1, mib);
        assert_eq!(h2d[1].1, 2 * mib);
        assert!(h2d.iter().all(|c| c.1 <= chunk_for(27 * mib)));
        assert_eq!(h2d.iter().map(|c| c.1).sum::<usize>(), 27 * mib);
    }

    #[test]
    fn h2d_copies_are_staged_from_half_a_mib_d2h_copies_from_one() {
        assert_eq!(min_bytes(Direction::HostToDevice), 512 << 10);
        assert_eq!(min_bytes(Direction::DeviceToHost), 1 << 20);
        let on = config().enabled;
        assert_eq!(wanted(512 << 10, Direction::HostToDevice), on);
        assert!(!wanted((512 << 10) - 1, Direction::HostToDevice));
        assert!(!wanted((1 << 20) - 1, Direction::DeviceToHost));
        assert_eq!(wanted(1 << 20, Direction::DeviceToHost), on);
    }

    #[test]
    fn only_h2d_copies_with_non_temporal_stores_adapt_their_threads() {
        let (h2d, nt, cached) = (Direction::HostToDevice, Stores::Streaming, Stores::Cached);
        assert!(Adapt::of(h2d, adapt::ADAPT_FROM - 1, nt).is_none());
        assert!(Adapt::of(h2d, adapt::ADAPT_FROM, nt).is_some());
        assert!(Adapt::of(h2d, H2D_CACHED_FROM - 1, nt).is_some());
        assert!(Adapt::of(h2d, H2D_CACHED_FROM - 1, cached).is_none());
        assert!(Adapt::of(h2d, 64 << 20, Stores::Demoted).is_none());
        assert!(Adapt::of(Direction::DeviceToHost, 64 << 20, nt).is_none());
    }

    /// The stores of `policy` (without demotion) for an H2D copy of `size` whose source was
    /// (`again`) or was not read by a recent copy; panics if `Fresh` does not ask exactly once.
    fn h2d_stores(policy: StorePolicy, size: usize, again: bool) -> Stores {
        let asked = std::cell::Cell::new(0);
        let s = stores_as(policy, false, Direction::HostToDevice, size, || {
            asked.set(asked.get() + 1);
            again
        });
        let want = usize::from(policy == StorePolicy::Fresh);
        assert_eq!(
            asked.get(),
            want,
            "{policy:?} asks whether the source is recent"
        );
        s
    }

    #[test]
    fn large_d2h_copies_stream_into_the_callers_buffer_large_h2d_copies_stage_through_the_cache() {
        use StorePolicy::*;
        for again in [false, true] {
            assert_eq!(h2d_stores(Size, H2D_MIN_BYTES, again), Stores::Streaming);
            assert_eq!(
                h2d_stores(Size, H2D_CACHED_FROM - 1, again),
                Stores::Streaming
            );
            assert_eq!(h2d_stores(Size, H2D_CACHED_FROM, again), Stores::Cached);
            // `cached`: ordinary stores whatever the size.
            assert_eq!(h2d_stores(Cached, H2D_MIN_BYTES, again), Stores::Cached);
            assert_eq!(h2d_stores(Cached, 4 << 30, again), Stores::Cached);
            // `fresh`: from `H2D_CACHED_FROM` as `size`.
            assert_eq!(h2d_stores(Fresh, H2D_CACHED_FROM, again), Stores::Cached);
        }
        // `fresh` below it: ordinary stores for a source no recent copy read, else as `size`.
        assert_eq!(h2d_stores(Fresh, 32 << 20, false), Stores::Cached);
        assert_eq!(h2d_stores(Fresh, 32 << 20, true), Stores::Streaming);
        // Demotion follows ordinary stores into staging buffers only.
        let demoted =
            |policy, size| stores_as(policy, true, Direction::HostToDevice, size, || false);
        assert_eq!(demoted(Size, H2D_CACHED_FROM), Stores::Demoted);
        assert_eq!(demoted(Size, H2D_MIN_BYTES), Stores::Streaming);
        assert_eq!(demoted(Cached, H2D_MIN_BYTES), Stores::Demoted);
        let d2h = |size, demote| {
            stores_as(Cached, demote, Direction::DeviceToHost, size, || {
                panic!("a D2H copy's destination is not noted")
            })
        };
        for demote in [false, true] {
            assert_eq!(d2h((32 << 20) - 1, demote), Stores::Cached);
            assert_eq!(d2h(32 << 20, demote), Stores::Streaming);
        }
    }

    #[test]
    fn the_store_policy_is_named_by_its_variable() {
        assert_eq!(StorePolicy::named(None), StorePolicy::Size);
        assert_eq!(StorePolicy::named(Some("size")), StorePolicy::Size);
        assert_eq!(StorePolicy::named(Some(" cached ")), StorePolicy::Cached);
        assert_eq!(StorePolicy::named(Some("fresh")), StorePolicy::Fresh);
        assert_eq!(StorePolicy::named(Some("bogus")), StorePolicy::Size);
    }
}

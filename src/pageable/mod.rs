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
//! Settings (docs/variables.md, read by `policy`): `LLAISYS_NVIDIA_PAGEABLE_FAST=0` turns the
//! path off; `LLAISYS_NVIDIA_PAGEABLE_THREADS` bounds the host threads of a copy (default: 3/4
//! of the cores, at most 12). The shape of a copy (chunks: `plan`; pieces, staging buffers,
//! stores, the threads' spin) is fixed by constants and, for the stores of an H2D copy below
//! 128 MiB, by whether a recent copy read its source (`recent`), chosen with the benchmarks
//! (docs/caches.md); H2D copies of 8 to 128 MiB with non-temporal stores adapt their thread
//! count below the bound (`adapt`).

mod adapt;
mod hostcopy;
mod pinned_pages;
mod pipeline;
mod plan;
mod policy;
mod recent;
mod staging;
mod workers;

use plan::{chunks, BEHIND_MAX};
use policy::{config, stores, Adapt};

use crate::cudart::calls::StreamHandle;
use crate::error::{Error, Result};
use std::os::raw::c_void;

pub(crate) use staging::release as release_staging;

/// The smallest H2D copy that is staged; smaller ones go to cudaMemcpy, whose fixed cost is
/// lower (unless a `memcpy_sync` can go behind a pending DMA: `copy_behind`). An H2D copy's
/// first chunk is short (`plan`), so from two chunks on its DMA overlaps the host
/// copy of the rest (a model's key and value projections, 768 KiB in the weights benchmark's
/// model, are above it: docs/benchmark.md).
const H2D_MIN_BYTES: usize = 512 << 10;
/// The smallest D2H copy that is staged: its first chunk lands before any is copied out.
const D2H_MIN_BYTES: usize = 1 << 20;

/// Which way a staged copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Pageable host memory to device memory.
    HostToDevice,
    /// Device memory to pageable host memory.
    DeviceToHost,
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
        None if stream.is_null() => crate::safe::device::current()?,
        // SAFETY: `stream` is not NULL here, so it is a live stream (this function's contract).
        None => unsafe { crate::safe::stream::device_of(stream) }?,
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
    let current = crate::safe::device::current()?;
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
    let stores = stores(direction, size, host as usize);
    let adapt = Adapt::of(direction, size, stores);
    let threads = adapt.map_or(config().threads, Adapt::threads);
    set.used(layout.first_slot, layout.plan.len());
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
        )
    }
    .map(|seen| {
        // Only copies that the pool's threads helped with say how fast the host side can go.
        if let (Some(a), Some(seen)) = (adapt, seen) {
            a.copied(threads, seen);
        }
    });
    if result.is_ok() && wait && direction == Direction::HostToDevice {
        result = set.wait_all();
    }
    if result.is_err() {
        // A chunk may be queued without its event: reuse the set only once the stream is idle
        // and every slot's last recorded use (perhaps an earlier copy's, on another stream) has
        // completed; if either wait fails, the set is dropped (its buffers leak rather than be
        // overwritten while a copy may still read them).
        // SAFETY: `stream` is NULL or a live stream (this function's contract).
        if unsafe { crate::safe::stream::synchronize(stream) }.is_ok() && set.wait_all().is_ok() {
            staging::give_back(set);
        } else {
            crate::safe::runtime::take_last_cuda_error();
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
    fn h2d_copies_are_staged_from_half_a_mib_d2h_copies_from_one() {
        assert_eq!(min_bytes(Direction::HostToDevice), 512 << 10);
        assert_eq!(min_bytes(Direction::DeviceToHost), 1 << 20);
        let on = config().enabled;
        assert_eq!(wanted(512 << 10, Direction::HostToDevice), on);
        assert!(!wanted((512 << 10) - 1, Direction::HostToDevice));
        assert!(!wanted((1 << 20) - 1, Direction::DeviceToHost));
        assert_eq!(wanted(1 << 20, Direction::DeviceToHost), on);
    }
}

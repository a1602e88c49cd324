//! Fast copies between pageable host memory and the device.
//!
//! cudaMemcpy from pageable memory runs far below the link's rate (docs/benchmark.md). Here a
//! copy of `H2D_MIN_BYTES` / `D2H_MIN_BYTES` or more is cut into chunks staged through pinned
//! buffers (`staging`) and run as one pipeline (`pipeline`): the calling thread queues every
//! chunk's DMA on the caller's stream, keeping the stream's order, and the host threads
//! (`workers`) copy the pieces. A smaller H2D `memcpy_sync` is staged only behind a staged
//! copy's DMA still pending on the legacy stream (`copy_behind`).
//!
//! - H2D returns once every chunk is queued (the caller's buffer has been read, as cudaMemcpy);
//!   a slot is reused once its event has completed, or written past the bytes its pending DMA
//!   reads, behind it on the legacy stream.
//! - D2H returns with the data in the caller's buffer.
//! - On the legacy stream, the copy asks before each use of it whether a stream of the device
//!   captures, and moves the rest of its work to the device's private stream once one does,
//!   returning complete (`lane`).
//!
//! Settings (docs/variables.md, `policy`): `LLAISYS_NVIDIA_PAGEABLE_FAST=0` turns the path off;
//! `LLAISYS_NVIDIA_PAGEABLE_THREADS` bounds the host threads of a copy (default: 3/4 of the
//! cores, at most 12). The rest is fixed by constants measured with the benchmarks
//! (docs/caches.md), with stores chosen by `recent` and thread counts by `adapt`.

mod adapt;
mod hostcopy;
mod lane;
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

/// The smallest H2D copy that is staged; below, cudaMemcpy's fixed cost is lower (a model's
/// 768 KiB key and value projections are above it: docs/benchmark.md).
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
    // A small H2D copy on the legacy stream goes behind the last slot's last use if it has
    // room, as one chunk; any other copy starts at the next slot.
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

/// False when `copy_behind` would do nothing because no staged H2D copy may be in flight.
#[inline]
pub(crate) fn copy_behind_possible() -> bool {
    config().enabled && staging::h2d_maybe_in_flight()
}

/// memcpy_sync of an H2D copy too small for `wanted`, on the legacy stream of the current
/// device: staged as one chunk behind a staged copy's DMA still pending there when a staging
/// buffer has room behind it, so that it does not wait for that DMA as `cudaMemcpy` would.
/// Returns false, having done nothing, otherwise: the caller copies with `cudaMemcpy`.
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
    let lane = lane::Lane::new(stream, stream_device);
    // SAFETY: `device` and `host` hold `size` bytes, which the plan's chunks cover exactly, valid
    // until the copy has run; `stream` is NULL or a live stream of `stream_device`; the set is
    // this copy's alone, and a chunk behind a pending DMA has the room `room_behind` found, on
    // that DMA's stream (this function's contract).
    let mut result = unsafe {
        pipeline::run(
            pipeline::Request {
                set: &set,
                device: stream_device,
                direction,
                dev: device.cast(),
                host: host.cast(),
                lane: &lane,
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
    // A copy that left the legacy stream is complete on return (`lane`).
    let wait = wait || lane.moved();
    if result.is_ok() && wait && direction == Direction::HostToDevice {
        result = set.wait_all();
    }
    if result.is_err() {
        // A chunk may be queued without its event: reuse the set only once the stream and every
        // slot are idle; else it leaks rather than be overwritten while a copy may read it.
        let moved = lane.moved();
        let idle = lane.next().and_then(|(now, _legacy)| {
            // SAFETY: the lane's stream is NULL or a live stream (this function's contract).
            unsafe { crate::safe::stream::synchronize(now) }
        });
        // Moved just now, the side stream does not cover a chunk left on the legacy stream.
        if idle.is_ok() && lane.moved() == moved && set.wait_all().is_ok() {
            staging::give_back(set);
        } else {
            crate::safe::runtime::take_last_cuda_error();
        }
    } else {
        let pending = !wait && direction == Direction::HostToDevice && stream.is_null();
        if pending {
            // Its DMAs may still be in flight on the legacy stream: a copy that a capture sends
            // to the side stream later waits for them.
            // SAFETY: the lane's last event is live (a slot's, of `stream_device`) while the set
            // is this copy's.
            result = unsafe {
                crate::cache::legacy_stream::fence_after(stream_device, lane.last_on_legacy())
            };
        }
        staging::give_back(set);
        if pending {
            staging::h2d_queued(stream_device);
        }
    }
    drop(lane);
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

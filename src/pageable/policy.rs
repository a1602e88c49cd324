//! How a staged copy's host side writes memory and how many host threads copy: the process's
//! settings (`LLAISYS_NVIDIA_PAGEABLE_FAST`, `LLAISYS_NVIDIA_PAGEABLE_THREADS`, read once), the
//! stores of each copy and the bounds of the copies whose threads adapt (docs/caches.md,
//! docs/variables.md).

use super::hostcopy::Stores;
use super::{adapt, recent, Direction};
use std::sync::OnceLock;

/// D2H copies from this size write the caller's buffer with non-temporal stores: beyond what
/// the CPU caches keep, where they are faster than ordinary stores (docs/caches.md).
const STREAMING_FROM: usize = 32 << 20;
/// H2D copies from this size write the staging buffers with ordinary stores whatever their
/// source (`stores_as`, docs/caches.md).
const H2D_CACHED_FROM: usize = 128 << 20;

/// The settings from the environment, read once per process.
pub(super) struct Config {
    /// Whether the fast path is on (`LLAISYS_NVIDIA_PAGEABLE_FAST`).
    pub(super) enabled: bool,
    /// Host threads that copy, the caller included (`LLAISYS_NVIDIA_PAGEABLE_THREADS`).
    pub(super) threads: usize,
}

/// The process's settings.
pub(super) fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| Config {
        enabled: crate::util::env::switch_on("LLAISYS_NVIDIA_PAGEABLE_FAST"),
        threads: crate::util::env::number("LLAISYS_NVIDIA_PAGEABLE_THREADS")
            .unwrap_or_else(|| {
                // Three quarters of the cores, at most 12: enough to keep up with the link
                // while leaving cores to the application (docs/caches.md).
                let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
                (cores * 3 / 4).clamp(1, 12)
            })
            .clamp(1, 64),
    })
}

/// The stores of a copy of `size` bytes from or to `host` (`stores_as`); an H2D copy's source
/// is noted among the recent ones (`recent`).
pub(super) fn stores(direction: Direction, size: usize, host: usize) -> Stores {
    stores_as(direction, size, || recent::seen_again(host, size))
}

/// The stores of a copy's host side. H2D writes the staging buffers with ordinary stores from
/// `H2D_CACHED_FROM` bytes and for a source no recent copy read (the copy engine then reads
/// them from the last-level cache), else with non-temporal ones; `seen_again` is asked once for
/// every H2D copy. D2H uses non-temporal stores from `STREAMING_FROM` bytes.
fn stores_as(direction: Direction, size: usize, seen_again: impl FnOnce() -> bool) -> Stores {
    match direction {
        Direction::HostToDevice => {
            // Asked first, so that every copy's source is noted.
            if seen_again() && size < H2D_CACHED_FROM {
                Stores::Streaming
            } else {
                Stores::Cached
            }
        }
        Direction::DeviceToHost if size >= STREAMING_FROM => Stores::Streaming,
        Direction::DeviceToHost => Stores::Cached,
    }
}

/// The bounds of an H2D copy whose host threads adapt (`adapt`): from half the threads to all
/// of them. Only non-temporal copies adapt: with ordinary stores fewer threads were slower.
#[derive(Clone, Copy)]
pub(super) struct Adapt {
    lo: usize,
    hi: usize,
}

impl Adapt {
    /// Some for a copy whose threads adapt: H2D with non-temporal stores, from
    /// `adapt::ADAPT_FROM` bytes.
    pub(super) fn of(direction: Direction, size: usize, stores: Stores) -> Option<Adapt> {
        let threads = config().threads;
        (direction == Direction::HostToDevice
            && size >= adapt::ADAPT_FROM
            && stores == Stores::Streaming)
            .then(|| Adapt {
                lo: threads.div_ceil(2),
                hi: threads,
            })
    }

    pub(super) fn threads(self) -> usize {
        adapt::threads(self.lo, self.hi)
    }

    pub(super) fn copied(self, threads: usize, seen: adapt::InFlight) {
        adapt::copied(threads, seen, self.lo, self.hi);
    }
}

#[cfg(test)]
mod tests {
    use super::super::H2D_MIN_BYTES;
    use super::*;

    #[test]
    fn only_h2d_copies_with_non_temporal_stores_adapt_their_threads() {
        let (h2d, nt, cached) = (Direction::HostToDevice, Stores::Streaming, Stores::Cached);
        assert!(Adapt::of(h2d, adapt::ADAPT_FROM - 1, nt).is_none());
        assert!(Adapt::of(h2d, adapt::ADAPT_FROM, nt).is_some());
        assert!(Adapt::of(h2d, H2D_CACHED_FROM - 1, nt).is_some());
        assert!(Adapt::of(h2d, H2D_CACHED_FROM - 1, cached).is_none());
        assert!(Adapt::of(Direction::DeviceToHost, 64 << 20, nt).is_none());
    }

    /// The stores of an H2D copy of `size` whose source was (`again`) or was not read by a
    /// recent copy; panics unless that is asked exactly once.
    fn h2d_stores(size: usize, again: bool) -> Stores {
        let asked = std::cell::Cell::new(0);
        let s = stores_as(Direction::HostToDevice, size, || {
            asked.set(asked.get() + 1);
            again
        });
        assert_eq!(asked.get(), 1, "every H2D copy's source is noted");
        s
    }

    #[test]
    fn large_d2h_copies_stream_into_the_callers_buffer_large_h2d_copies_stage_through_the_cache() {
        // From `H2D_CACHED_FROM`: ordinary stores whatever the source.
        for again in [false, true] {
            assert_eq!(h2d_stores(H2D_CACHED_FROM, again), Stores::Cached);
            assert_eq!(h2d_stores(4 << 30, again), Stores::Cached);
        }
        // Below it: ordinary stores for a source no recent copy read, else non-temporal ones.
        for size in [H2D_MIN_BYTES, 32 << 20, H2D_CACHED_FROM - 1] {
            assert_eq!(h2d_stores(size, false), Stores::Cached);
            assert_eq!(h2d_stores(size, true), Stores::Streaming);
        }
        let d2h = |size| {
            stores_as(Direction::DeviceToHost, size, || {
                panic!("a D2H copy's destination is not noted")
            })
        };
        assert_eq!(d2h((32 << 20) - 1), Stores::Cached);
        assert_eq!(d2h(32 << 20), Stores::Streaming);
    }
}

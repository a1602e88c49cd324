//! How a staged copy's host side writes memory and how many host threads copy: the process's
//! settings (`LLAISYS_NVIDIA_PAGEABLE_*`, read once), the store policy of H2D copies and the
//! bounds of the copies whose threads adapt (docs/caches.md, docs/variables.md).

use super::hostcopy::Stores;
use super::{adapt, recent, Direction};
use std::sync::OnceLock;

/// D2H copies from this size write the caller's buffer with non-temporal stores: beyond what
/// the CPU caches keep, where they are faster than ordinary stores (docs/caches.md).
const STREAMING_FROM: usize = 32 << 20;
/// H2D copies from this size write the staging buffers with ordinary stores: their source comes
/// from memory rather than the CPU caches, and the copy engine then reads the staging buffers
/// from the last-level cache instead of memory, which non-temporal stores would have sent them
/// to; smaller copies keep non-temporal stores where their source was read lately (in the CPU
/// caches, where they were faster) and take ordinary ones where it was not (`StorePolicy::Fresh`,
/// docs/caches.md).
const H2D_CACHED_FROM: usize = 128 << 20;

/// How an H2D copy writes the staging buffers (`LLAISYS_NVIDIA_PAGEABLE_STORES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StorePolicy {
    /// By size (`size`): non-temporal stores below `H2D_CACHED_FROM`, ordinary ones from it.
    Size,
    /// Ordinary stores for every copy (`cached`).
    Cached,
    /// As `Size`, but ordinary stores also below `H2D_CACHED_FROM` for a source that none of
    /// the last copies read (`recent`): it comes from memory rather than the CPU caches, as a
    /// model's weights do, while a source copied again (a buffer the application reuses) keeps
    /// non-temporal stores. The default (`fresh`).
    Fresh,
}

impl StorePolicy {
    /// The policy a value of the variable names; unset or unknown: `Fresh`.
    fn named(v: Option<&str>) -> StorePolicy {
        match v.map(str::trim) {
            Some("size") => StorePolicy::Size,
            Some("cached") => StorePolicy::Cached,
            _ => StorePolicy::Fresh,
        }
    }
}

/// The settings from the environment, read once per process.
pub(super) struct Config {
    /// Whether the fast path is on (`LLAISYS_NVIDIA_PAGEABLE_FAST`).
    pub(super) enabled: bool,
    /// Host threads that copy, the caller included (`LLAISYS_NVIDIA_PAGEABLE_THREADS`).
    pub(super) threads: usize,
    /// How H2D copies write the staging buffers (`LLAISYS_NVIDIA_PAGEABLE_STORES`).
    stores: StorePolicy,
    /// Whether lines written with ordinary stores into a staging buffer are then moved out of
    /// the core's own caches to the shared one (`LLAISYS_NVIDIA_PAGEABLE_DEMOTE`).
    demote: bool,
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
        stores: StorePolicy::named(
            std::env::var("LLAISYS_NVIDIA_PAGEABLE_STORES")
                .ok()
                .as_deref(),
        ),
        demote: crate::util::env::flag_on("LLAISYS_NVIDIA_PAGEABLE_DEMOTE"),
    })
}

/// The stores of a copy of `size` bytes from or to `host`, as the process's settings say
/// (`stores_as`).
pub(super) fn stores(direction: Direction, size: usize, host: usize) -> Stores {
    let c = config();
    stores_as(c.stores, c.demote, direction, size, || {
        recent::seen_again(host, size)
    })
}

/// The stores of a copy's host side. H2D writes the staging buffers as `policy` says; by
/// default with ordinary stores from `H2D_CACHED_FROM` bytes and for a source no recent copy
/// read (the staging buffers then stay in the last-level cache, where the copy engine reads
/// them), else with non-temporal ones (the copy engine then reads memory, not lines dirty in a
/// core's cache). `seen_again` says whether the copy's source is that of a recent copy, asked
/// once for `Fresh`. With `demote` ordinary stores into a staging buffer are followed by moving
/// the lines to the shared cache.
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
        assert_eq!(StorePolicy::named(None), StorePolicy::Fresh);
        assert_eq!(StorePolicy::named(Some("fresh")), StorePolicy::Fresh);
        assert_eq!(StorePolicy::named(Some("size")), StorePolicy::Size);
        assert_eq!(StorePolicy::named(Some(" cached ")), StorePolicy::Cached);
        assert_eq!(StorePolicy::named(Some("bogus")), StorePolicy::Fresh);
    }
}

//! The host threads of large H2D staged copies, adapted copy by copy.
//!
//! Host threads and the copy engine share the host's memory: where the host copy is much faster
//! than the link, fewer threads finish sooner (docs/caches.md). When a copy's last chunk is
//! queued, if every staging buffer still waits for its DMA the host was a ring ahead (one thread
//! fewer next time); if at most one does, the link waited (one more). Which copies take part:
//! `super::policy::Adapt::of`.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The smallest H2D copy whose threads adapt.
pub(super) const ADAPT_FROM: usize = 8 << 20;

/// The threads (the caller included) of the next adapted copy; 0 before the first.
static CURRENT: AtomicUsize = AtomicUsize::new(0);

/// The threads of the next adapted copy, within `lo..=hi` (the first: `hi`).
pub(super) fn threads(lo: usize, hi: usize) -> usize {
    match CURRENT.load(Ordering::Relaxed) {
        0 => hi,
        n => n.clamp(lo, hi),
    }
}

/// What an H2D copy saw when its last chunk was queued: `pending` of its last `of` chunks (one
/// per staging buffer) still waited for their DMA.
#[derive(Clone, Copy, Debug)]
pub(super) struct InFlight {
    pub(super) pending: usize,
    pub(super) of: usize,
}

/// After an adapted copy that used `threads` and saw `seen`.
pub(super) fn copied(threads: usize, seen: InFlight, lo: usize, hi: usize) {
    CURRENT.store(
        step(threads, seen.pending, seen.of, lo, hi),
        Ordering::Relaxed,
    );
}

/// The next copy's threads.
fn step(threads: usize, pending: usize, in_flight: usize, lo: usize, hi: usize) -> usize {
    let next = if in_flight >= 2 && pending >= in_flight {
        threads.saturating_sub(1)
    } else if pending <= 1 {
        threads + 1
    } else {
        threads
    };
    next.clamp(lo.min(hi), hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_ahead_takes_a_thread_off_a_waiting_link_adds_one_within_bounds() {
        // Every buffer in flight: one fewer, not below lo.
        assert_eq!(step(12, 4, 4, 6, 12), 11);
        assert_eq!(step(6, 4, 4, 6, 12), 6);
        assert_eq!(step(7, 3, 3, 6, 12), 6);
        // At most one in flight: the link waited; one more, not above hi.
        assert_eq!(step(8, 1, 4, 6, 12), 9);
        assert_eq!(step(8, 0, 4, 6, 12), 9);
        assert_eq!(step(12, 1, 4, 6, 12), 12);
        // In between: kept.
        assert_eq!(step(9, 2, 4, 6, 12), 9);
        assert_eq!(step(9, 3, 4, 6, 12), 9);
        // A one-chunk copy says nothing about the balance (in_flight 1, pending 1): one more.
        assert_eq!(step(9, 1, 1, 6, 12), 10);
        // Bounds that cross (hi below lo): hi wins.
        assert_eq!(step(5, 0, 4, 6, 4), 4);
    }

    #[test]
    fn the_first_copy_uses_every_thread_then_the_last_step() {
        // CURRENT is global; this is the only test that writes it.
        assert_eq!(threads(6, 12), 12);
        copied(12, InFlight { pending: 4, of: 4 }, 6, 12);
        assert_eq!(threads(6, 12), 11);
        copied(11, InFlight { pending: 1, of: 4 }, 6, 12);
        assert_eq!(threads(6, 12), 12);
        // Bounds are applied when read too (another setting of them).
        assert_eq!(threads(2, 8), 8);
    }
}

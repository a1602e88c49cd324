//! The sources of the last H2D staged copies (`super::policy::stores`): a copy whose source
//! overlaps one of theirs likely finds it in the CPU caches; any other reads it from memory.

use std::sync::Mutex;

/// How many copies' sources are kept.
const KEPT: usize = 8;

/// The last `KEPT` sources, [start, end) each, written round.
struct Ring {
    ranges: [(usize, usize); KEPT],
    next: usize,
}

static RECENT: Mutex<Ring> = Mutex::new(Ring {
    ranges: [(0, 0); KEPT],
    next: 0,
});

/// Notes the source of a copy, `len` bytes at `at`; true when it overlaps the source of one of
/// the last `KEPT` copies noted (an empty one overlaps nothing).
pub(super) fn seen_again(at: usize, len: usize) -> bool {
    if len == 0 {
        return false;
    }
    let end = at.saturating_add(len);
    let mut ring = crate::util::sync::lock(&RECENT);
    let again = ring.ranges.iter().any(|&(s, e)| s < end && at < e);
    let k = ring.next;
    ring.ranges[k] = (at, end);
    ring.next = (k + 1) % KEPT;
    again
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_seen_again_while_among_the_last_copies_and_only_where_it_overlaps() {
        // RECENT is global; this is the only test that writes it. Addresses far from 0 (the
        // ring's empty entries are [0, 0), which overlap nothing).
        let base = 1usize << 40;
        assert!(!seen_again(base, 4096));
        assert!(seen_again(base, 4096), "the same range");
        assert!(
            seen_again(base + 4095, 10),
            "a range that overlaps its last byte"
        );
        assert!(!seen_again(base + 8192, 4096), "a range beside it");
        // KEPT other copies later, the first range has left the ring.
        for k in 0..KEPT {
            assert!(!seen_again(base + ((k + 10) << 20), 4096));
        }
        assert!(!seen_again(base, 4096));
        assert!(
            !seen_again(base + 100, 0),
            "an empty range overlaps nothing"
        );
    }
}

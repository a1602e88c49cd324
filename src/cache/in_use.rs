//! The devices in use in this process (set_device, a stream, a pool), one bit each: once more
//! than one is in use, pools grant peer access and `cross` orders work between devices.

use super::MAX_DEVICES;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static SEEN: AtomicU64 = AtomicU64::new(0);

/// The bit of `device`, None for ids outside 0..MAX_DEVICES (never marked).
pub(crate) fn bit(device: i32) -> Option<u64> {
    usize::try_from(device)
        .ok()
        .filter(|&b| b < MAX_DEVICES)
        .map(|b| 1u64 << b)
}

/// True once `device` is in use.
pub(crate) fn contains(device: i32) -> bool {
    bit(device).is_some_and(|b| SEEN.load(Relaxed) & b != 0)
}

/// Marks `device` in use.
pub(crate) fn mark(device: i32) {
    if let Some(b) = bit(device) {
        SEEN.fetch_or(b, Relaxed);
    }
}

/// The devices in use, one bit each.
pub(crate) fn seen() -> u64 {
    SEEN.load(Relaxed)
}

/// True once more than one device is in use.
#[inline]
pub(crate) fn several() -> bool {
    SEEN.load(Relaxed).count_ones() > 1
}

//! A release threshold per device: the most unused memory the device cache keeps there once
//! freed. By default it keeps all of it (the fastest reuse); with a threshold, memory beyond it
//! goes back to CUDA at the next free or synchronize, so that other libraries of the process
//! and other processes can have it. Set by the status API, or for every device by
//! `LLAISYS_NVIDIA_RELEASE_THRESHOLD` (bytes, read once); a threshold set for a device replaces
//! the variable's there.

use super::MAX_DEVICES;
use crate::error::Result;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// The variable that sets every device's threshold.
pub const VAR: &str = "LLAISYS_NVIDIA_RELEASE_THRESHOLD";

/// A device's own threshold: `UNSET` (the variable's, if any), `KEEP_ALL` (none), else the
/// threshold plus one (so that 0 bytes can be set).
static SET: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(UNSET) }; MAX_DEVICES];
const UNSET: u64 = 0;
const KEEP_ALL: u64 = u64::MAX;

/// Whether a threshold was ever set through the API: until then (and without the variable)
/// frees ask nothing.
static ANY: AtomicBool = AtomicBool::new(false);

/// True when some device may have a threshold.
#[inline]
pub(crate) fn any() -> bool {
    ANY.load(Relaxed) || from_env().is_some()
}

/// The variable's threshold, read once.
fn from_env() -> Option<u64> {
    static ENV: OnceLock<Option<u64>> = OnceLock::new();
    *ENV.get_or_init(|| crate::util::env::number::<u64>(VAR).filter(|&b| b < KEEP_ALL - 1))
}

/// Sets `device`'s threshold in bytes (None: keep all freed memory, the variable's aside).
pub(crate) fn set(device: i32, bytes: Option<u64>) -> Result<()> {
    let raw = bytes.map_or(KEEP_ALL, |b| b.min(KEEP_ALL - 2) + 1);
    super::checked_entry(&SET, device)?.store(raw, Relaxed);
    if bytes.is_some() {
        ANY.store(true, Relaxed);
    }
    Ok(())
}

/// `device`'s threshold in bytes; None when it keeps all freed memory.
#[inline]
pub(crate) fn of(device: i32) -> Option<u64> {
    match super::entry(&SET, device).map_or(UNSET, |s| s.load(Relaxed)) {
        UNSET => from_env(),
        KEEP_ALL => None,
        raw => Some(raw - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_keeps_its_own_threshold_zero_included() {
        // Devices 52 and 53: no other test of this process uses them.
        set(52, Some(0)).expect("set");
        set(53, Some(1 << 30)).expect("set");
        assert_eq!((of(52), of(53)), (Some(0), Some(1 << 30)));
        assert!(any());
        set(52, None).expect("set");
        assert_eq!(of(52), None);
        assert!(set(MAX_DEVICES as i32, None).is_err());
    }
}

//! A cap per device on the device memory the library holds there (in use and cached, graph
//! pools included), so that processes and other libraries can share a GPU: set in bytes or as
//! a fraction of the device's memory through the status API, or for every device by
//! `LLAISYS_NVIDIA_MEMORY_LIMIT` (read once: bytes, or a fraction such as `0.5` or `50%`).
//! A limit set for a device replaces the variable's there; setting 0 lifts it. The device cache
//! asks [`bytes`] before it takes new memory from CUDA (`device::within_limit`).

use super::MAX_DEVICES;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// The variable that limits every device.
pub const VAR: &str = "LLAISYS_NVIDIA_MEMORY_LIMIT";

/// A device's own setting: `UNSET` (the variable's, if any), `NONE` (lifted), a byte count, or
/// a fraction in millionths tagged by `FRACTION`.
static SET: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(UNSET) }; MAX_DEVICES];
const UNSET: u64 = 0;
const NONE: u64 = u64::MAX;
const FRACTION: u64 = 1 << 63;
const MILLIONTHS: f64 = 1e6;

/// What a limit is: bytes, or a fraction of the device's memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Limit {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this fraction (0 < f <= 1) of the device's memory.
    Fraction(f64),
}

impl Limit {
    /// The limit in bytes on a device of `total` bytes.
    pub(crate) fn bytes_of(self, total: u64) -> u64 {
        match self {
            Limit::Bytes(b) => b,
            Limit::Fraction(f) => (total as f64 * f) as u64,
        }
    }

    fn encode(self) -> u64 {
        match self {
            Limit::Bytes(b) => b.clamp(1, FRACTION - 1),
            Limit::Fraction(f) => FRACTION | (f * MILLIONTHS).round() as u64,
        }
    }

    fn decode(raw: u64) -> Option<Limit> {
        match raw {
            UNSET | NONE => None,
            r if r & FRACTION != 0 => Some(Limit::Fraction((r & !FRACTION) as f64 / MILLIONTHS)),
            r => Some(Limit::Bytes(r)),
        }
    }
}

/// Parses a limit: a byte count (`8589934592`), or a fraction of the device (`0.5`, `50%`),
/// above 0 and at most all of it. None for anything else.
pub(crate) fn parse(text: &str) -> Option<Limit> {
    let text = text.trim();
    if let Some(percent) = text.strip_suffix('%') {
        return fraction(percent.trim().parse::<f64>().ok()? / 100.0);
    }
    if text.contains('.') {
        return fraction(text.parse().ok()?);
    }
    text.parse::<u64>()
        .ok()
        .filter(|&b| b > 0 && b < FRACTION)
        .map(Limit::Bytes)
}

/// A fraction above 0 and at most 1 (NaN is neither).
fn fraction(f: f64) -> Option<Limit> {
    (f > 0.0 && f <= 1.0).then_some(Limit::Fraction(f))
}

/// The variable's limit, read once (None when unset or not a limit).
fn from_env() -> Option<Limit> {
    static ENV: OnceLock<Option<Limit>> = OnceLock::new();
    *ENV.get_or_init(|| std::env::var(VAR).ok().as_deref().and_then(parse))
}

fn slot(device: i32) -> Result<&'static AtomicU64> {
    super::checked_entry(&SET, device)
}

/// Sets `device`'s limit (None: lifted, the variable's too).
pub(crate) fn set(device: i32, limit: Option<Limit>) -> Result<()> {
    if let Some(Limit::Fraction(f)) = limit {
        if fraction(f).is_none() {
            return Err(Error::invalid_argument(format!(
                "fraction={f}: a memory limit is a fraction above 0 and at most 1 of the device"
            )));
        }
    }
    slot(device)?.store(limit.map_or(NONE, Limit::encode), Relaxed);
    Ok(())
}

/// `device`'s limit: its own, else the variable's, else none.
pub(crate) fn of(device: i32) -> Option<Limit> {
    let raw = super::entry(&SET, device).map_or(UNSET, |s| s.load(Relaxed));
    match raw {
        UNSET => from_env(),
        r => Limit::decode(r),
    }
}

/// `device`'s limit in bytes on a device of `total` bytes; None when it has none.
pub(crate) fn bytes(device: i32, total: u64) -> Option<u64> {
    of(device).map(|l| l.bytes_of(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_bytes_or_a_fraction_of_the_device() {
        assert_eq!(parse("8589934592"), Some(Limit::Bytes(8 << 30)));
        assert_eq!(parse(" 0.5 "), Some(Limit::Fraction(0.5)));
        assert_eq!(parse("50%"), Some(Limit::Fraction(0.5)));
        assert_eq!(parse("1.0"), Some(Limit::Fraction(1.0)));
        for bad in [
            "", "0", "0.0", "1.5", "150%", "-1", "-0.5", "NaN", "1e9", "8G", "abc",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(Limit::Fraction(0.25).bytes_of(80 << 30), 20 << 30);
        assert_eq!(Limit::Bytes(123).bytes_of(80 << 30), 123);
    }

    #[test]
    fn a_device_keeps_its_own_limit_and_zero_lifts_it() {
        // Devices 50 and 51: no other test of this process uses them.
        set(50, Some(Limit::Bytes(1 << 30))).expect("set");
        set(51, Some(Limit::Fraction(0.75))).expect("set");
        assert_eq!(bytes(50, 80 << 30), Some(1 << 30));
        assert_eq!(bytes(51, 80 << 30), Some(60 << 30));
        set(50, None).expect("lift");
        assert_eq!(bytes(50, 80 << 30), None);
        let e = set(51, Some(Limit::Fraction(1.5))).expect_err("refused");
        assert!(e.to_string().contains("fraction=1.5"), "{e}");
        assert_eq!(
            bytes(51, 80 << 30),
            Some(60 << 30),
            "unchanged by the refusal"
        );
        assert!(set(MAX_DEVICES as i32, None).is_err());
    }
}

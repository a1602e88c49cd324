//! The timeout of communicators made from now on: `llaisysNvidiaCommSetTimeout`, else
//! `LLAISYS_NVIDIA_NCCL_TIMEOUT_MS`, else 300000 ms (0: no limit).

use crate::nccl::{Error, Result};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::Duration;

/// The variable setting the default timeout.
pub const TIMEOUT_VAR: &str = "LLAISYS_NVIDIA_NCCL_TIMEOUT_MS";
/// The default without the variable: 5 minutes.
pub const DEFAULT_TIMEOUT_MS: i64 = 300_000;
static TIMEOUT_MS: AtomicI64 = AtomicI64::new(-1);

/// Sets the timeout of communicators made from now on (0: no limit).
pub fn set_timeout(ms: i64) -> Result<()> {
    if ms < 0 {
        return Err(Error::invalid(format!(
            "timeout_ms={ms}: milliseconds, 0 for no limit"
        )));
    }
    TIMEOUT_MS.store(ms, Relaxed);
    Ok(())
}

/// The timeout for a communicator made now.
pub fn timeout() -> Result<Duration> {
    let ms = TIMEOUT_MS.load(Relaxed);
    if ms >= 0 {
        return Ok(Duration::from_millis(ms as u64));
    }
    match std::env::var(TIMEOUT_VAR) {
        Err(_) => Ok(Duration::from_millis(DEFAULT_TIMEOUT_MS as u64)),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| {
                Error::invalid(format!(
                    "{TIMEOUT_VAR}={v:?} is not a number of milliseconds (0: no limit)"
                ))
            }),
    }
}

//! What a run of the doctor, or of `llaisys-nvidia memory`, is asked to do, and the watchdog's
//! time limit (its default, the variable that sets it, and how seconds are written).

use std::path::PathBuf;
use std::time::Duration;

/// The watchdog's time limit per probe when neither `--timeout` nor the variable sets one.
pub const DEFAULT_TIMEOUT_S: f64 = 20.0;
/// The environment variable that sets the time limit per probe (seconds; 0: none).
pub const TIMEOUT_ENV: &str = "LLAISYS_NVIDIA_DOCTOR_TIMEOUT";

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Print the JSON document instead of text.
    pub json: bool,
    /// Run the bench too.
    pub bench: bool,
    /// The device the smoke test and the bench use.
    pub device: i32,
    /// The watchdog's limit per probe; None: no limit.
    pub timeout: Option<Duration>,
}

impl Default for Options {
    /// Text, no bench, device 0, the default time limit.
    fn default() -> Options {
        Options {
            json: false,
            bench: false,
            device: 0,
            timeout: Some(Duration::from_secs_f64(DEFAULT_TIMEOUT_S)),
        }
    }
}

/// What `llaisys-nvidia memory` is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryOptions {
    /// The memory snapshot to read.
    pub snapshot: PathBuf,
    /// Where to write the HTML page too, if anywhere.
    pub html: Option<PathBuf>,
}

/// Seconds as written on the command line: `20`, `0.5`.
pub fn seconds(s: f64) -> String {
    let t = format!("{s:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

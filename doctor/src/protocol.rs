//! What the probe process tells the doctor: one JSON object per line on its stdout. A probe
//! announces itself (`Start`) before it calls into the driver or the runtime, so that when the
//! process hangs or dies the doctor knows in which probe; each result follows as a `Part`.
//! Lines that are not messages (a driver printing to stdout) are kept as stray output.

use crate::report::{
    nan_as_null, Bench, CudaErr, DeviceReport, Failure, Libcuda, LoadedRuntime, NvmlUsage,
    PeerAccess, Smoke,
};
use serde::{Deserialize, Serialize};
use std::io::Write;

/// One line of the probe process's stdout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    /// A probe begins; the watchdog's clock for it starts now.
    Start {
        /// Its name.
        probe: String,
    },
    /// A line for the bench's progress display.
    Progress {
        /// The line.
        line: String,
    },
    /// A result.
    Part(Part),
    /// Every probe asked for has run.
    End,
}

/// A result of the probe process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Part {
    /// Whether `libcuda.so.1` loads, from where.
    Libcuda(Libcuda),
    /// The `loaded` mode: which CUDA runtime the library loaded, why, every place tried.
    LoadedRuntime(LoadedRuntime),
    /// `cudaRuntimeGetVersion` and its milliseconds.
    RuntimeVersion {
        /// The version or the error.
        result: Result<i32, CudaErr>,
        /// Milliseconds.
        #[serde(with = "nan_as_null")]
        ms: f64,
    },
    /// `cudaDriverGetVersion` and its milliseconds.
    DriverVersion {
        /// The version or the error.
        result: Result<i32, CudaErr>,
        /// Milliseconds.
        #[serde(with = "nan_as_null")]
        ms: f64,
    },
    /// `cudaGetDeviceCount` and its milliseconds.
    DeviceCount {
        /// The count or the error.
        result: Result<i32, Failure>,
        /// Milliseconds.
        #[serde(with = "nan_as_null")]
        ms: f64,
    },
    /// Context creation on the chosen device: milliseconds or the error.
    Context(Result<f64, Failure>),
    /// One device's facts (boxed: the largest part by far).
    Device(Box<DeviceReport>),
    /// NVML's view of device `device`'s memory, or why NVML cannot say.
    Nvml {
        /// The device id.
        device: i32,
        /// The processes on it and their memory, or the reason.
        usage: Result<NvmlUsage, String>,
    },
    /// The peer-access matrix.
    Peers(Vec<PeerAccess>),
    /// The smoke test.
    Smoke(Smoke),
    /// The bench.
    Bench(Bench),
}

/// Writes one message as a line and flushes it, so that the doctor has it even if the process
/// dies right after. A failed write (the doctor gone) ends the probe process: nobody listens.
pub fn send(out: &mut dyn Write, msg: &Msg) {
    let line = match serde_json::to_string(msg) {
        Ok(l) => l,
        Err(e) => format!("{{\"unserialisable\": \"{e}\"}}"),
    };
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(1);
    }
}

/// Reads one line: a message, or None for stray output.
pub fn parse(line: &str) -> Option<Msg> {
    serde_json::from_str(line).ok()
}

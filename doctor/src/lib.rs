//! `llaisys-nvidia doctor`: explains a CUDA setup for the llaisys NVIDIA backend and measures
//! it. A crate of its own above the library's public Rust API; every use of the library is in
//! [`backend`].
//!
//! One file per job:
//! - [`report`]: the report's data types.
//! - gathering here: [`facts`] (build facts), [`loader`] (where libcudart comes from, the
//!   loader's answer), [`nodes`] (`/dev/nvidia*`, GPUs the kernel sees), [`env`](mod@env) (CUDA
//!   environment variables). Nothing here calls into the driver or the CUDA runtime.
//! - in the probe process, under the [`watchdog`]: [`probes`] (libcuda.so.1, versions, the
//!   device count, the context, devices, peers), [`smoke`] (the llaisys table end to end),
//!   [`bench`](mod@bench) (copy bandwidth and allocation latency); [`protocol`] carries their
//!   results back.
//! - concluding: [`evidence`] and [`diagnose`] (causes in plain words, fixes, the verdict).
//! - printing: [`text`], [`json`]; [`cli`] parses the command line.
//!
//! Exit status ([`exit`]): 0 healthy, 2 no usable NVIDIA driver, 3 no usable CUDA device, 4 a
//! check failed, 5 a probe hung or crashed, 64 usage error, 1 the doctor itself failed (its
//! output could not be written).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod backend;
pub mod bench;
pub mod cli;
pub mod diagnose;
pub mod env;
pub mod evidence;
pub mod facts;
pub mod json;
pub mod loader;
pub mod nodes;
pub mod probes;
pub mod protocol;
pub mod report;
pub mod smoke;
pub mod text;
pub mod watchdog;

use probes::Group;
use protocol::Part;
use report::{Bench, Call, DeviceCount, How, Libcuda, Machine, ProbeFailure, Report, Smoke};
use std::time::Duration;

/// The exit statuses of `llaisys-nvidia doctor`. Values are never reused for another meaning.
pub mod exit {
    /// Everything works.
    pub const HEALTHY: i32 = 0;
    /// The doctor itself failed (its output could not be written).
    pub const DOCTOR_FAILED: i32 = 1;
    /// No usable NVIDIA driver: libcuda.so.1 cannot be loaded, is the toolkit's stub, is too old
    /// for this runtime, or does not work.
    pub const NO_DRIVER: i32 = 2;
    /// A driver but no usable CUDA device: none, all hidden by CUDA_VISIBLE_DEVICES, or the
    /// device nodes missing or locked.
    pub const NO_DEVICE: i32 = 3;
    /// A check failed: a device query, the smoke test, or the bench.
    pub const CHECK_FAILED: i32 = 4;
    /// A probe hung (past the watchdog's time limit) or crashed: the driver or the runtime did
    /// not answer.
    pub const PROBE_FAILED: i32 = 5;
    /// Bad command line (`EX_USAGE` of sysexits.h).
    pub const USAGE: i32 = 64;
}

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

/// Gathers (the driver's and the runtime's part in probe processes under the watchdog),
/// checks and diagnoses; `progress` receives the bench's progress lines.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&str)) -> Report {
    let mut watchdog = report::Watchdog {
        timeout_s: opts.timeout.map(|t| t.as_secs_f64()),
        probes: Vec::new(),
        failure: None,
        stderr: String::new(),
    };
    let mut parts = Vec::new();
    for group in [Group::Libcuda, Group::Cuda] {
        let run = watchdog::run(group, opts, progress);
        parts.extend(run.parts);
        watchdog.probes.extend(run.probes);
        if !run.stderr.is_empty() {
            if !watchdog.stderr.is_empty() {
                watchdog.stderr.push('\n');
            }
            watchdog.stderr.push_str(&run.stderr);
        }
        let Some(failure) = run.failure else {
            continue;
        };
        // A failure at exit (a driver's teardown) came after every result: the next probe
        // process still runs. After any other, the next would meet the same driver.
        let at_exit = failure.probe == watchdog::EXITING;
        // The report names one failure: a probe's before an exit's.
        let keep_first = watchdog
            .failure
            .as_ref()
            .is_some_and(|f| f.probe != watchdog::EXITING || at_exit);
        if !keep_first {
            watchdog.failure = Some(failure);
        }
        if !at_exit {
            break;
        }
    }
    let mut report = assemble(opts, parts, watchdog);
    report.diagnosis = diagnose::diagnose(&evidence::Evidence::from_report(&report));
    report
}

/// The report from this process's own facts and the probe processes' parts.
fn assemble(opts: &Options, parts: Vec<Part>, watchdog: report::Watchdog) -> Report {
    let not_run = watchdog
        .failure
        .as_ref()
        .map(|f| format!("not run: {}", failure_words(f)));
    let mut machine = Machine {
        runtime_version: None,
        driver_version: None,
        kernel_module: nodes::kernel_module(),
        libcudart: loader::libcudart(),
        libcuda: Libcuda::NotLoadable {
            error: not_run.clone().unwrap_or_else(|| "not probed".into()),
        },
        device_nodes: nodes::device_nodes(),
        gpus_on_host: nodes::gpus_on_host(),
        env: env::cuda_env(),
    };
    let mut device_count = DeviceCount::unknown();
    let mut first_calls = Vec::new();
    let (mut context, mut devices, mut peer_access) = (None, Vec::new(), Vec::new());
    let (mut smoke, mut bench) = (None, None);
    for part in parts {
        match part {
            Part::Libcuda(l) => machine.libcuda = l,
            Part::RuntimeVersion { result, ms } => {
                machine.runtime_version = Some(result);
                first_calls.push(call("cudaRuntimeGetVersion", ms));
            }
            Part::DriverVersion { result, ms } => {
                machine.driver_version = Some(result);
                first_calls.push(call("cudaDriverGetVersion", ms));
            }
            Part::DeviceCount { result, ms } => {
                device_count = DeviceCount {
                    result: Some(result),
                    ms,
                };
                first_calls.push(call("cudaGetDeviceCount", ms));
            }
            Part::Context(c) => context = Some(c),
            Part::Device(d) => devices.push(d),
            Part::Peers(p) => peer_access = p,
            Part::Smoke(s) => smoke = Some(s),
            Part::Bench(b) => bench = Some(b),
        }
    }
    let why = not_run.unwrap_or_else(|| "not run: the probe process ended early".into());
    let mut smoke = smoke.unwrap_or_else(|| Smoke::skipped(opts.device, why.clone(), context));
    smoke.first_calls = first_calls;
    let bench = opts
        .bench
        .then(|| bench.unwrap_or_else(|| Bench::skipped(opts.device, why)));
    Report {
        build: facts::build(),
        machine,
        device_count,
        devices,
        peer_access,
        smoke,
        bench,
        watchdog,
        diagnosis: diagnose::Diagnosis::default(),
    }
}

fn call(name: &str, ms: f64) -> Call {
    Call {
        call: name.into(),
        ms,
    }
}

/// The probe's failure in a few words: "`cudaDriverGetVersion` hung (no answer within 20 s)".
pub fn failure_words(f: &ProbeFailure) -> String {
    match &f.how {
        How::Hung { after_s } => format!(
            "the probe `{}` hung (no answer within {} s; the watchdog killed it)",
            f.probe,
            seconds(*after_s)
        ),
        How::Signal { name, words, .. } => {
            format!("the probe `{}` crashed ({name}, {words})", f.probe)
        }
        How::Exited { code } => format!(
            "the probe process exited with status {code} during `{}`",
            f.probe
        ),
        How::NotStarted { error } => format!("the probe process did not start: {error}"),
    }
}

/// Seconds as written on the command line: `20`, `0.5`.
pub fn seconds(s: f64) -> String {
    let t = format!("{s:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Why the bench cannot run on `device` of `count`.
pub fn bench_skip_reason(device: i32, count: i32) -> String {
    if count <= 0 {
        "no CUDA device".into()
    } else {
        format!("device {device} does not exist (CUDA shows {count})")
    }
}

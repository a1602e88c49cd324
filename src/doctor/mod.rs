//! `llaisys-nvidia doctor`: explains a CUDA setup and measures it.
//!
//! One file per job:
//! - [`report`]: the report's data types.
//! - gathering: [`facts`] (build, versions, devices, peers), [`loader`] (libcuda.so.1, where
//!   libcudart comes from, the loader's answer), [`nodes`] (`/dev/nvidia*`, GPUs the kernel
//!   sees), [`env`](mod@env) (CUDA environment variables).
//! - checking: [`smoke`] (context creation and the llaisys table end to end), [`bench`](mod@bench) (copy
//!   bandwidth and allocation latency).
//! - concluding: [`evidence`] and [`diagnose`] (causes in plain words, fixes, the verdict).
//! - printing: [`text`], [`json`] (over [`json_writer`]); [`cli`] parses the command line.
//!
//! Exit status ([`exit`]): 0 healthy, 2 no usable NVIDIA driver, 3 no usable CUDA device, 4 a
//! check failed, 64 usage error, 1 the doctor itself failed (its output could not be written).

pub mod bench;
pub mod cli;
pub mod diagnose;
pub mod env;
pub mod evidence;
pub mod facts;
pub mod json;
pub mod json_writer;
pub mod loader;
pub mod nodes;
pub mod report;
pub mod smoke;
pub mod text;

use report::Report;

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
    /// Bad command line (`EX_USAGE` of sysexits.h).
    pub const USAGE: i32 = 64;
}

/// What to run (the default: text, no bench, device 0).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Print the JSON document instead of text.
    pub json: bool,
    /// Run the bench too.
    pub bench: bool,
    /// The device the smoke test and the bench use.
    pub device: i32,
}

/// Gathers, checks and diagnoses; `progress` receives the bench's progress lines.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&str)) -> Report {
    let build = facts::build();
    let (machine, mut first_calls) = facts::machine();
    let device_count = facts::device_count();
    first_calls.push(("cudaGetDeviceCount".into(), device_count.ms));
    let count = device_count.count();
    let usable = opts.device >= 0 && opts.device < count;
    // Context creation first, so that its time is the real first-context cost.
    let context = usable.then(|| smoke::create_context(opts.device));
    let devices = facts::devices(count);
    let peer_access = facts::peers(count);
    let mut smoke = smoke::run(opts.device, count, context);
    smoke.first_calls = first_calls;
    let bench = opts.bench.then(|| {
        if usable {
            bench::run(opts.device, progress)
        } else {
            report::Bench::skipped(opts.device, bench_skip_reason(opts.device, count))
        }
    });
    if usable {
        // Reading every device's memory changed the current device; put back the chosen one.
        let _ = crate::device::set(opts.device);
    }
    let mut report = Report {
        build,
        machine,
        device_count,
        devices,
        peer_access,
        smoke,
        bench,
        diagnosis: diagnose::Diagnosis::default(),
    };
    report.diagnosis = diagnose::diagnose(&evidence::Evidence::from_report(&report));
    report
}

/// Why the bench cannot run on `device` of `count`.
fn bench_skip_reason(device: i32, count: i32) -> String {
    if count <= 0 {
        "no CUDA device".into()
    } else {
        format!("device {device} does not exist (CUDA shows {count})")
    }
}

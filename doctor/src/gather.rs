//! Gathering the whole report: the probe processes under the watchdog (`libcuda`, then `cuda`),
//! and this process's own facts (the build, the loader, the device nodes, the environment),
//! put together into a [`Report`]. What a probe that hung or crashed would have read stays
//! unknown and says why; nothing is made up.

use crate::names::{self, Group};
use crate::options::{seconds, Options};
use crate::protocol::Part;
use crate::report::{
    self, Bench, Call, DeviceCount, How, Libcuda, Machine, ProbeFailure, Report, Smoke,
};
use crate::watchdog::{self, Notice};
use crate::{env, facts, loader, nodes};

/// Gathers the report: the driver's and the runtime's part in probe processes under the
/// watchdog; `notices` hears the bench's progress and which probe the watchdog waits for.
pub fn report(opts: &Options, notices: &mut dyn FnMut(Notice)) -> Report {
    let mut watchdog = report::Watchdog {
        timeout_s: opts.timeout.map(|t| t.as_secs_f64()),
        probes: Vec::new(),
        failure: None,
        stderr: String::new(),
    };
    let mut parts = Vec::new();
    for group in [Group::Libcuda, Group::Cuda] {
        let run = watchdog::run(group, opts, notices);
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
        let at_exit = failure.probe == names::EXITING;
        // The report names one failure: a probe's before an exit's.
        let keep_first = watchdog
            .failure
            .as_ref()
            .is_some_and(|f| f.probe != names::EXITING || at_exit);
        if !keep_first {
            watchdog.failure = Some(failure);
        }
        if !at_exit {
            break;
        }
    }
    assemble(opts, parts, watchdog)
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
            Part::LoadedRuntime(l) => {
                machine.libcudart.loaded_from = l.path.clone();
                machine.libcudart.shared_mapped = l.shared_mapped.clone();
                machine.libcudart.loaded = Some(l);
            }
            Part::RuntimeVersion { result, ms } => {
                machine.runtime_version = Some(result);
                first_calls.push(call(names::RUNTIME_VERSION, ms));
            }
            Part::DriverVersion { result, ms } => {
                machine.driver_version = Some(result);
                first_calls.push(call(names::DRIVER_VERSION, ms));
            }
            Part::DeviceCount { result, ms } => {
                device_count = DeviceCount {
                    result: Some(result),
                    ms,
                };
                first_calls.push(call(names::DEVICE_COUNT, ms));
            }
            Part::Context(c) => context = Some(c),
            Part::Device(d) => devices.push(*d),
            Part::Nvml { device, usage } => {
                if let Some(d) = devices.iter_mut().find(|d| d.id == device) {
                    d.nvml = Some(usage);
                }
            }
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
    }
}

fn call(name: &str, ms: f64) -> Call {
    Call {
        call: name.into(),
        ms,
    }
}

/// The probe's failure in a few words: "the probe `cudaDriverGetVersion` hung (no answer
/// within 20 s; the watchdog killed it)".
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

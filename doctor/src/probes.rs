//! The probe process: this program started again by the watchdog (`watchdog`) with the hidden
//! `--probe-process GROUP` option. It makes every call into the driver and the runtime, one
//! probe at a time, and tells the doctor about each on stdout (`protocol`) before making it, so
//! that a probe that hangs or crashes takes only this process down, and the doctor can say
//! which probe it was.
//!
//! Two groups, two processes: `libcuda` (this program's own `dlopen` of libcuda.so.1, which runs
//! the library's initialisers), then `cuda` (cudart's calls, in the order a process makes them:
//! in the `loaded` mode the choice of runtime first, then versions, the device count, the
//! context, the devices each with NVML's view of its memory, peers, the smoke test, the bench),
//! so that the first CUDA calls of the `cuda` process are the real first calls, timed.

use crate::names::{self, Group};
use crate::protocol::{send, Msg, Part};
use crate::report::Bench;
use crate::{backend, bench, facts, loader, smoke};
use std::io::Write;

/// Runs the probes of `group` for `device` (the bench too with `bench`), writing messages to
/// `out`.
pub fn run(group: Group, device: i32, bench: bool, out: &mut dyn Write) {
    match group {
        Group::Libcuda => {
            start(out, names::LIBCUDA);
            send(out, &Msg::Part(Part::Libcuda(loader::probe_libcuda())));
        }
        Group::Cuda => cuda(device, bench, out),
    }
    send(out, &Msg::End);
}

/// Announces `probe`.
fn start(out: &mut dyn Write, probe: &str) {
    send(
        out,
        &Msg::Start {
            probe: probe.to_string(),
        },
    );
}

fn cuda(device: i32, with_bench: bool, out: &mut dyn Write) {
    if backend::build::LINK_MODE == "loaded" {
        start(out, names::LOAD_CUDART);
        let mut l = backend::loaded_runtime();
        l.shared_mapped = loader::mapped_objects("libcudart");
        send(out, &Msg::Part(Part::LoadedRuntime(l)));
    }
    start(out, names::RUNTIME_VERSION);
    let (result, ms) = facts::timed(backend::runtime_version);
    send(out, &Msg::Part(Part::RuntimeVersion { result, ms }));
    start(out, names::DRIVER_VERSION);
    let (result, ms) = facts::timed(backend::driver_version);
    send(out, &Msg::Part(Part::DriverVersion { result, ms }));
    start(out, names::DEVICE_COUNT);
    let (result, ms) = facts::timed(backend::device_count);
    let count = *result.as_ref().unwrap_or(&0);
    send(out, &Msg::Part(Part::DeviceCount { result, ms }));
    let usable = device >= 0 && device < count;
    // Context creation first, so that its time is the real first-context cost.
    let context = usable.then(|| {
        start(out, &names::context(device));
        let c = backend::device::init(device);
        send(out, &Msg::Part(Part::Context(c.clone())));
        c
    });
    for id in 0..count {
        start(out, &names::device(id));
        let d = facts::device(id);
        send(out, &Msg::Part(Part::Device(Box::new(d.clone()))));
        // NVML can hang in a broken driver as CUDA can: a probe of its own.
        start(out, &names::nvml(id));
        let usage = facts::nvml(&d.properties);
        send(out, &Msg::Part(Part::Nvml { device: id, usage }));
    }
    if count > 1 {
        start(out, names::PEER_ACCESS);
        send(out, &Msg::Part(Part::Peers(facts::peers(count))));
    }
    let s = smoke::run(device, count, context, &mut |step| {
        start(out, &names::smoke(step))
    });
    send(out, &Msg::Part(Part::Smoke(s)));
    if with_bench {
        let b = if usable {
            bench::run(device, &mut |line| {
                if !line.is_empty() {
                    start(out, line);
                }
                send(
                    out,
                    &Msg::Progress {
                        line: line.to_string(),
                    },
                );
            })
        } else {
            Bench::skipped(device, bench::skip_reason(device, count))
        };
        send(out, &Msg::Part(Part::Bench(b)));
    }
}

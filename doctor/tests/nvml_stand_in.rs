//! Host-only tests of the doctor's NVML probe (`facts::nvml`, what the probe process runs for
//! each device) over the library's stand-in NVML: tests/fixtures/stand_nvml.c, compiled here
//! with `cc` as libnvidia-ml.so.1 and named with LLAISYS_NVIDIA_NVML_LIBRARY. Its one device,
//! bus id "0000:00:06.0", has two compute processes: pid 4242 using 512 MiB and pid 4343 whose
//! use NVML cannot say. NVML is loaded and started once per process, so each case runs in a
//! child process of this test binary with its own environment.
//! - The stand-in: exactly its figures and processes, the asking process's pid as the probe
//!   process's, the result unchanged through the probe protocol; an unknown bus id and a device
//!   without readable properties are reasons in words.
//! - An `nvmlInit_v2` that fails, and a missing library: the reason names the call or the path.

mod support;

use llaisys_nvidia_doctor::backend::nvml::LIBRARY_VAR;
use llaisys_nvidia_doctor::facts;
use llaisys_nvidia_doctor::protocol::{self, Msg, Part};
use llaisys_nvidia_doctor::report::{DeviceProperties, Failure, NvmlUsage, ProcessMemory};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::child::{require_child, TestChild};

const SOURCE: &str = include_str!("../../tests/fixtures/stand_nvml.c");

/// The stand-in's device.
const BUS: &str = "0000:00:06.0";

/// The stand-in compiled with `defines` into a folder of its own; the library's file.
fn stand_in(name: &str, defines: &[&str]) -> PathBuf {
    support::c_library(
        "llaisys-doctor-nvml",
        name,
        SOURCE,
        "libnvidia-ml.so.1",
        defines,
    )
}

/// Runs the ignored test `name` in a child with LLAISYS_NVIDIA_NVML_LIBRARY set to `library`;
/// asserts that it passed and returns what it printed.
fn in_child(name: &str, library: &Path) -> String {
    TestChild::new(name)
        .env(LIBRARY_VAR, library)
        .limit(Duration::from_secs(120))
        .run_passing()
}

/// Device properties with bus id `bus`.
fn properties(bus: &str) -> Result<DeviceProperties, Failure> {
    Ok(DeviceProperties {
        name: "NVIDIA H100 80GB HBM3".into(),
        compute_capability: (9, 0),
        total_memory: 85_520_809_984,
        multiprocessors: 132,
        pci_bus_id: bus.into(),
        async_engines: 3,
        unified_addressing: true,
        memory_pools: true,
    })
}

#[test]
fn the_stand_in_gives_its_processes_and_the_probe_process_pid() {
    let out = in_child("child_stand_in", &stand_in("default", &[]));
    assert!(out.contains("unknown bus id: "), "{out}");
}

#[test]
#[ignore = "entry point of a child process: run by the_stand_in_gives_its_processes_and_the_probe_process_pid"]
fn child_stand_in() {
    require_child("child_stand_in");
    let want = NvmlUsage {
        total_bytes: 85_520_809_984,
        used_bytes: 1_234_567_168,
        processes: vec![
            ProcessMemory {
                pid: 4242,
                used_bytes: Some(512 << 20),
            },
            ProcessMemory {
                pid: 4343,
                used_bytes: None,
            },
        ],
        probe_pid: std::process::id(),
    };
    let got = facts::nvml(&properties(BUS));
    assert_eq!(got, Ok(want.clone()));
    let u = got.as_ref().expect("checked above");
    // Neither is this process: both count as other processes, one of them measured.
    assert_eq!(u.others().count(), 2);
    assert_eq!(u.others_bytes(), 512 << 20);
    // What the probe process sends is what the doctor reads.
    let msg = Msg::Part(Part::Nvml {
        device: 0,
        usage: got.clone(),
    });
    let mut line = Vec::new();
    protocol::send(&mut line, &msg);
    let line = String::from_utf8(line).expect("UTF-8");
    assert_eq!(protocol::parse(line.trim_end()), Some(msg));
    // A device NVML does not know: the reason names it and NVML's error.
    let err = facts::nvml(&properties("0000:99:00.0")).expect_err("an unknown bus id");
    println!("unknown bus id: {err}");
    for part in ["0000:99:00.0", "Not Found"] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    // A device whose properties are unreadable has no bus id to ask about.
    let err = facts::nvml(&Err(Failure {
        message: "cudaGetDeviceProperties failed: cudaErrorUnknown".into(),
        call: "cudaGetDeviceProperties".into(),
        cuda_error: None,
    }))
    .expect_err("no bus id");
    assert!(err.contains("PCI bus id is unknown"), "{err}");
    assert!(err.contains("cudaErrorUnknown"), "{err}");
    // Asked again, the loaded NVML answers the same.
    assert_eq!(facts::nvml(&properties(BUS)), Ok(want));
}

#[test]
fn an_nvml_that_fails_to_start_is_a_reason_naming_the_call() {
    let out = in_child("child_fail_init", &stand_in("fail-init", &["-DFAIL_INIT"]));
    assert!(out.contains("reason: "), "{out}");
}

#[test]
#[ignore = "entry point of a child process: run by an_nvml_that_fails_to_start_is_a_reason_naming_the_call"]
fn child_fail_init() {
    require_child("child_fail_init");
    let err = facts::nvml(&properties(BUS)).expect_err("nvmlInit_v2 fails");
    println!("reason: {err}");
    for part in ["nvmlInit_v2", "Driver Not Loaded"] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
}

#[test]
fn a_missing_nvml_is_a_reason_naming_the_file() {
    let missing = std::env::temp_dir()
        .join(format!("llaisys-doctor-nvml-{}", std::process::id()))
        .join("no-such-libnvidia-ml.so.1");
    assert!(!missing.exists());
    let out = in_child("child_missing", &missing);
    assert!(out.contains("no-such-libnvidia-ml.so.1"), "{out}");
}

#[test]
#[ignore = "entry point of a child process: run by a_missing_nvml_is_a_reason_naming_the_file"]
fn child_missing() {
    require_child("child_missing");
    let err = facts::nvml(&properties(BUS)).expect_err("no such library");
    println!("reason: {err}");
    let named = std::env::var(LIBRARY_VAR).expect("set by the parent");
    assert!(err.contains(&named), "{named} missing from: {err}");
}

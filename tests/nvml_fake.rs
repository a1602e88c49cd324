//! Host-only tests of `llaisys_nvidia::nvml` over a stand-in NVML (tests/fixtures/stand_nvml.c,
//! built as libnvidia-ml.so.1 in several variants). NVML is loaded and started once per
//! process, so each case runs in a child process of this test binary with its own environment.
//! - `LLAISYS_NVIDIA_NVML_LIBRARY` naming the stand-in: exactly its figures and processes (one
//!   whose use NVML cannot say); an unknown bus id is an error naming it and NVML's error.
//! - The variable naming a folder; the dynamic loader's path when the variable is unset.
//! - A driver whose `_v3` list has 32-byte entries (535.54): the `_v2` list is used instead;
//!   a library with only the unversioned list: its 16-byte layout.
//! - The variable naming a missing file: the error names the path, and nothing else is tried.
//! - An `nvmlInit_v2` that fails: the error names the call, NVML's message and code, every time.

mod support;

use llaisys_nvidia::nvml::{self, DeviceUsage, ProcessUsage};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The stand-in's device.
const BUS: &str = "0000:00:06.0";

/// What the stand-in reports for `BUS`.
fn expected() -> DeviceUsage {
    DeviceUsage {
        total_bytes: 85_520_809_984,
        used_bytes: 1_234_567_168,
        processes: vec![
            ProcessUsage {
                pid: 4242,
                used_bytes: Some(512 << 20),
            },
            ProcessUsage {
                pid: 4343,
                used_bytes: None,
            },
        ],
    }
}

/// The folder of the stand-in built with `define` ("" for the default), built once per variant.
fn stand_in(define: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, dir)) = built.iter().find(|(d, _)| d == define) {
        return dir.clone();
    }
    let name = format!("stand-nvml{}", define.to_lowercase().replace("-d", "-"));
    let mut extra = vec!["-Wall".to_string(), "-Wextra".into(), "-Werror".into()];
    extra.push("-Wl,-soname,libnvidia-ml.so.1".into());
    if !define.is_empty() {
        extra.push(define.into());
    }
    let dir = support::c_shared_library(
        "tests/fixtures/stand_nvml.c",
        &support::tmp_dir().join(name),
        "libnvidia-ml.so.1",
        &extra,
    );
    built.push((define.to_string(), dir.clone()));
    dir
}

/// The stand-in's file.
fn stand_in_file(define: &str) -> PathBuf {
    stand_in(define).join("libnvidia-ml.so.1")
}

/// Runs the ignored test `name` in a child with `var` set to `value` (None: unset) and
/// LD_LIBRARY_PATH set to `loader_path` (None: an empty folder); asserts that it passed.
fn in_child(name: &str, value: Option<&Path>, loader_path: Option<&Path>) -> String {
    static EMPTY: OnceLock<PathBuf> = OnceLock::new();
    let empty = EMPTY.get_or_init(|| support::scratch("nvml-empty"));
    let child = support::child::TestChild::new(name)
        .loader_path(loader_path.unwrap_or(empty))
        .limit(std::time::Duration::from_secs(120));
    let child = match value {
        Some(v) => child.env(nvml::LIBRARY_VAR, v),
        None => child.env_remove(nvml::LIBRARY_VAR),
    };
    child.run_passing()
}

#[test]
fn the_variable_naming_the_stand_in_gives_its_figures_and_processes() {
    in_child("child_figures", Some(&stand_in_file("")), None);
}

#[test]
#[ignore = "entry point of a child process: run by the_variable_naming_the_stand_in_gives_its_figures_and_processes"]
fn child_figures() {
    support::child::require_child("child_figures");
    assert_eq!(nvml::device_usage(BUS), Ok(expected()));
    // Asked again: the loaded library answers the same.
    assert_eq!(nvml::device_usage(BUS), Ok(expected()));
    let err = nvml::device_usage("0000:99:00.0").expect_err("an unknown bus id");
    println!("unknown bus id: {err}");
    for part in [
        "0000:99:00.0",
        "nvmlDeviceGetHandleByPciBusId_v2",
        "Not Found",
        "NVML error 6",
        "NVML_ERROR_NOT_FOUND",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    let err = nvml::device_usage("0000:00:06.0\0x").expect_err("a bus id with a NUL byte");
    assert!(err.contains("NUL"), "{err}");
}

#[test]
fn the_variable_naming_a_folder_and_a_535_driver_use_the_v2_list() {
    in_child("child_folder_535", Some(&stand_in("-DDRIVER_535")), None);
}

#[test]
#[ignore = "entry point of a child process: run by the_variable_naming_a_folder_and_a_535_driver_use_the_v2_list"]
fn child_folder_535() {
    support::child::require_child("child_folder_535");
    // The stand-in's _v3 writes 32-byte entries: read as 24-byte ones, the second process
    // would have pid 0.
    assert_eq!(nvml::device_usage(BUS), Ok(expected()));
}

#[test]
fn unset_the_dynamic_loader_finds_it_and_the_unversioned_list_serves() {
    let dir = stand_in("-DONLY_V1");
    in_child("child_loader_v1", None, Some(&dir));
}

#[test]
#[ignore = "entry point of a child process: run by unset_the_dynamic_loader_finds_it_and_the_unversioned_list_serves"]
fn child_loader_v1() {
    support::child::require_child("child_loader_v1");
    assert!(std::env::var_os(nvml::LIBRARY_VAR).is_none());
    assert_eq!(nvml::device_usage(BUS), Ok(expected()));
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let missing = support::scratch("nvml-missing").join("no-such-libnvidia-ml.so.1");
    assert!(!missing.exists());
    // The stand-in on the loader's path must not be used when the variable is set.
    let dir = stand_in("");
    let out = in_child("child_missing", Some(&missing), Some(&dir));
    assert!(out.contains("missing file: "), "{out}");
}

#[test]
#[ignore = "entry point of a child process: run by a_missing_file_is_an_error_naming_it"]
fn child_missing() {
    support::child::require_child("child_missing");
    let missing = std::env::var(nvml::LIBRARY_VAR).expect("the variable is set");
    let err = nvml::device_usage(BUS).expect_err("no library");
    println!("missing file: {err}");
    for part in [
        format!("{}={missing}", nvml::LIBRARY_VAR),
        "libnvidia-ml.so.1".to_string(),
        "nothing else is searched".to_string(),
        "fix:".to_string(),
    ] {
        assert!(err.contains(&part), "{part:?} missing from: {err}");
    }
}

#[test]
fn a_failing_init_is_an_error_naming_nvml_init_and_its_message() {
    in_child("child_fail_init", Some(&stand_in_file("-DFAIL_INIT")), None);
}

#[test]
#[ignore = "entry point of a child process: run by a_failing_init_is_an_error_naming_nvml_init_and_its_message"]
fn child_fail_init() {
    support::child::require_child("child_fail_init");
    let err = nvml::device_usage(BUS).expect_err("init fails");
    println!("failing init: {err}");
    for part in [
        "nvmlInit_v2 failed",
        "Driver Not Loaded",
        "NVML error 9",
        "NVML_ERROR_DRIVER_NOT_LOADED",
        "libnvidia-ml.so.1",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    // Loaded and started once: the next call gives the same answer.
    assert_eq!(nvml::device_usage(BUS), Err(err));
}

//! Every environment variable the build script reads, in one place.
//!
//! `TRACKED` is both what [`declare`] announces with `cargo:rerun-if-env-changed` and the only
//! names [`tracked`] will read, so a variable cannot be read without being declared.
//! `CARGO_SET` are the variables cargo itself sets for build scripts (a change of them is a new
//! build anyway); [`cargo`] and [`cargo_flag`] read only those. `tests/discovery.rs` checks that
//! no other file of the build script reads the environment and that every name used is listed.
//!
//! Read by the crates the build script uses, and declared by them: the `cc` crate (CC, CFLAGS,
//! CC_<target>, CRATE_CC_NO_DEFAULTS, ...) and bindgen through `CargoCallbacks`
//! (BINDGEN_EXTRA_CLANG_ARGS, ...). clang-sys reads LIBCLANG_PATH, which is in `TRACKED`.

use anyhow::{bail, Context, Result};
use std::env;
use std::ffi::OsString;

/// The variables a user may set that change what the build does; each is declared.
pub const TRACKED: [&str; 8] = [
    // The CUDA root variables (discover::ROOT_VARS).
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
    // Where `nvcc` is looked for.
    "PATH",
    // Where libclang is looked for first.
    "LIBCLANG_PATH",
    // The python3 whose site-packages may hold the CUDA wheels.
    "LLAISYS_NVIDIA_PYTHON",
    // The folder of NCCL's nccl.h for the communicator's bindings (build/nccl.rs).
    "LLAISYS_NVIDIA_NCCL_INCLUDE",
];

/// The variables cargo sets for build scripts that this build script reads.
pub const CARGO_SET: [&str; 7] = [
    "CARGO_MANIFEST_DIR",
    "OUT_DIR",
    "TARGET",
    "HOST",
    "CARGO_FEATURE_STATIC",
    "CARGO_FEATURE_DYNAMIC",
    "CARGO_FEATURE_LOADED",
];

/// Prints `cargo:rerun-if-env-changed` for every variable of `TRACKED`.
pub fn declare() {
    for v in TRACKED {
        println!("cargo:rerun-if-env-changed={v}");
    }
}

/// A variable of `TRACKED`; `None` when unset or not UTF-8.
pub fn tracked(name: &str) -> Result<Option<String>> {
    Ok(tracked_os(name)?.and_then(|v| v.into_string().ok()))
}

/// A variable of `TRACKED`, as the OS has it.
pub fn tracked_os(name: &str) -> Result<Option<OsString>> {
    if !TRACKED.contains(&name) {
        bail!("llaisys-nvidia build script bug: {name} is read but not in build/vars.rs TRACKED");
    }
    Ok(env::var_os(name))
}

/// A variable cargo sets for every build script.
pub fn cargo(name: &str) -> Result<String> {
    if !CARGO_SET.contains(&name) {
        bail!("llaisys-nvidia build script bug: {name} is not in build/vars.rs CARGO_SET");
    }
    env::var(name).with_context(|| {
        format!("{name} is not set: cargo sets it for build scripts; build with cargo")
    })
}

/// Whether a cargo-set flag variable (`CARGO_FEATURE_*`) is present.
pub fn cargo_flag(name: &str) -> Result<bool> {
    if !CARGO_SET.contains(&name) {
        bail!("llaisys-nvidia build script bug: {name} is not in build/vars.rs CARGO_SET");
    }
    Ok(env::var_os(name).is_some())
}

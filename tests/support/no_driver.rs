//! A machine without a driver, made on any machine: a process whose loader finds the stand-in
//! libcuda.so.1 of tests/fixtures/no_driver_libcuda.c first (LD_LIBRARY_PATH). cudart loads it,
//! finds none of the driver's entry points in it, and answers as with no driver installed:
//! cudaErrorInsufficientDriver (35) from every call that needs the driver, driver version 0.
//! On a machine without a driver that is what it answers anyway; on one with an NVIDIA driver
//! the installed libcuda.so.1 is never loaded.
//!
//! `test` runs a test's body in such a child process of its test binary (`child` and `enter`
//! are its two halves, for a child that needs more of its own environment); `run` (in support)
//! runs the tests' C/C++ programs the same way.
#![allow(dead_code)]

use super::child::{self, TestChild};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The stand-in's source, in the crate.
const SOURCE: &str = "tests/fixtures/no_driver_libcuda.c";

/// The symbol that tells the stand-in from a real libcuda.so.1.
const MARKER: &std::ffi::CStr = c"llaisys_test_no_driver_stand_in";

/// The folder holding the stand-in libcuda.so.1 and nothing else; built once (cc), and again
/// when its source is newer.
pub fn loader_dir() -> PathBuf {
    use std::sync::OnceLock;
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let dir = super::tmp_dir().join("no-driver");
    let lib = dir.join("libcuda.so.1");
    let source = super::source_dir().join(SOURCE);
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&lib).is_some() && modified(&lib) >= modified(&source) {
        return dir;
    }
    std::fs::create_dir_all(&dir).expect("the stand-in's folder");
    // Built under a name of this process, then renamed: another test binary may be loading it.
    let partial = dir.join(format!(".libcuda.so.1.{}", std::process::id()));
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args(["-shared", "-fPIC", "-Wall", "-Wextra", "-Werror"])
        .arg("-Wl,-soname,libcuda.so.1")
        .arg("-o")
        .arg(&partial)
        .arg(&source);
    child::run(&mut cmd, child::DEFAULT_LIMIT).ok();
    std::fs::rename(&partial, &lib).expect("rename the stand-in into place");
    dir
}

/// Fails unless the libcuda.so.1 this process loads is the stand-in (and keeps it loaded, so
/// that cudart's own dlopen gets this very library).
#[track_caller]
pub fn assert_stand_in_loaded() {
    // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process's life.
    let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
    assert!(
        !handle.is_null(),
        "the no-driver stand-in libcuda.so.1 does not load (LD_LIBRARY_PATH={:?})",
        std::env::var_os("LD_LIBRARY_PATH")
    );
    // SAFETY: a handle dlopen returned and a NUL-terminated symbol name.
    let marker = unsafe { libc::dlsym(handle, MARKER.as_ptr()) };
    assert!(
        !marker.is_null(),
        "the libcuda.so.1 this process loads is not the no-driver stand-in: an installed driver \
         would answer instead (LD_LIBRARY_PATH={:?})",
        std::env::var_os("LD_LIBRARY_PATH")
    );
}

/// The test `name` of this test binary, to run in a child process without a driver: the
/// stand-in first on its loader path. The child's side calls `enter`.
pub fn child(name: &str) -> TestChild {
    TestChild::new(name).loader_path(&loader_dir())
}

/// The child's side of `child(name)`: fails unless this process is that child and the
/// stand-in is the libcuda.so.1 it loads.
#[track_caller]
pub fn enter(name: &str) {
    child::require_child(name);
    assert_stand_in_loaded();
}

/// Runs `body` as the test `name` (its exact name in this test binary) without a driver. In the
/// test run, it starts the same test again in a child process (`child`) and asserts that the
/// child ran it and passed; in that child, it checks that the stand-in is what loads and runs
/// `body`.
#[track_caller]
pub fn test(name: &str, body: impl FnOnce()) {
    if child::is_child(name) {
        enter(name);
        body();
        return;
    }
    child(name).run_passing();
}

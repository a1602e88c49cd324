//! What the doctor's test binaries share: the binary under test, and the tests' one process
//! runner (the library's tests/support/child.rs: a bounded wait, a bounded read).
#![allow(dead_code)]

#[path = "../../../tests/support/child.rs"]
pub mod child;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output};
use std::time::Duration;

/// How long one run of the doctor (or a tool a test starts) may take before it is killed and
/// the test fails: the doctor's own watchdog stops a hanging probe after 20 s by default.
pub const LIMIT: Duration = Duration::from_secs(300);

/// The `llaisys-nvidia` binary under test: the file `LLAISYS_NVIDIA_DOCTOR_BIN` names (staged
/// tests, run on another machine, carry the binary with them: scripts/stage-gpu.sh,
/// scripts/stage-host-tests.sh), else the one cargo built beside these tests.
pub fn bin() -> PathBuf {
    let bin = std::env::var_os("LLAISYS_NVIDIA_DOCTOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_llaisys-nvidia")));
    assert!(bin.is_file(), "no doctor binary at {}", bin.display());
    bin
}

/// Runs `cmd` (stdin from /dev/null) through the runner, at most `LIMIT`, and returns what
/// `Command::output` would; a process still running at the limit fails the test.
#[track_caller]
pub fn output(cmd: &mut Command) -> Output {
    let f = child::run(cmd, LIMIT);
    let status = match f.end {
        child::End::Exited(code) => ExitStatus::from_raw((code & 0xff) << 8),
        child::End::Signal(signal) => ExitStatus::from_raw(signal),
        child::End::TimedOut(_) => panic!("{}", f.report()),
    };
    Output {
        status,
        stdout: f.stdout.into_bytes(),
        stderr: f.stderr.into_bytes(),
    }
}

/// `source` (a C file of the library's tests/fixtures) compiled with `defines` into
/// `<temp>/<group>-<pid>/<name>/<library>`, a shared library; returns its path.
pub fn c_library(
    group: &str,
    name: &str,
    source: &str,
    library: &str,
    defines: &[&str],
) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("{group}-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("source.c");
    std::fs::write(&src, source).expect("write the C source");
    let lib = dir.join(library);
    let out = output(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-o"])
            .arg(&lib)
            .arg(&src)
            .args(defines),
    );
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

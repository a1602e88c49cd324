//! Host-only tests of what the header promises about the last error and unloading, with C and
//! C++ programs (tests/c/last_error_exit.{c,cpp}, tests/c/unload_cycles.c) linked against the
//! staticlib and the cdylib, or loading the cdylib with dlopen. Every failing call they make is
//! bad input, refused the same way with or without a GPU; the unload test runs over a stand-in
//! libcuda.so.1 that reports a driver older than the runtime, so its calls take the same path on
//! every machine.
//! - The calling thread's last error is readable in its own pthread key destructors (of a key
//!   made after the library was loaded, whose destructor runs after the library's), in atexit
//!   handlers and in C++ thread_local and static destructors; records are freed when threads
//!   exit.
//! - A host that loads the cdylib, makes failing calls (one through an error handler) and
//!   unloads it, again and again, keeps no memory per cycle.

mod old_driver;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::Linkage;

fn run_ok(exe: &Path, args: &[&str], envs: &[(&str, &Path)]) -> String {
    let out = Command::new(exe)
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let text = support::output_text(&out);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({:?}):\n{text}",
        exe.display(),
        out.status
    );
    text
}

#[test]
fn last_error_is_kept_in_key_destructors_and_at_exit() {
    for linkage in [Linkage::Static, Linkage::Dynamic] {
        let exe = support::build_c_client("last_error_exit.c", linkage, &["-pthread"]);
        for (args, ok) in [
            (&["key"][..], "ok: key destructors, rounds 1 and 2"),
            (&["first"][..], "ok: first call in a key destructor"),
            (&["leak", "200"][..], "ok: records freed at thread exit"),
            (&["atexit"][..], "ok: atexit"),
        ] {
            let text = run_ok(&exe, args, &[]);
            assert!(text.contains(ok), "{linkage:?} {args:?}:\n{text}");
        }
    }
}

#[test]
fn last_error_is_kept_in_cpp_destructors() {
    for linkage in [Linkage::Static, Linkage::Dynamic] {
        let exe = support::build_c_client("last_error_exit.cpp", linkage, &["-pthread"]);
        for (mode, ok) in [
            ("thread_local", "ok: C++ thread_local destructor"),
            ("static", "ok: C++ static destructor"),
        ] {
            let text = run_ok(&exe, &[mode], &[]);
            assert!(text.contains(ok), "{linkage:?} {mode}:\n{text}");
        }
    }
}

/// tests/c/unload_cycles.c, built without linking the library (it loads the cdylib itself).
fn unload_host() -> PathBuf {
    let exe = support::scratch("contract").join("unload_cycles");
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg(format!("-I{}", support::csrc().display()))
        .arg(support::tests_dir().join("c/unload_cycles.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-ldl");
    support::compile(cmd);
    exe
}

#[test]
fn unloading_keeps_no_memory_per_cycle() {
    let cdylib = support::target_dir().join("libllaisys_nvidia.so");
    let host = unload_host();
    let driver = old_driver::dir();
    let text = run_ok(
        &host,
        &[cdylib.to_str().unwrap(), "50", "1000"],
        &[("LD_LIBRARY_PATH", &driver)],
    );
    assert!(text.contains("unloaded: yes"), "{text}");
    let growth: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("growth per cycle: "))
        .and_then(|l| l.trim_end_matches(" bytes").parse().ok())
        .unwrap_or_else(|| panic!("no growth line:\n{text}"));
    // A record, its strings and a vector of the handler's bookkeeping kept per cycle would be
    // hundreds of bytes a cycle; nothing kept reads 0.
    assert!(growth < 8.0, "{growth} bytes kept per load cycle:\n{text}");
}

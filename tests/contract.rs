//! Host-only tests of what the header promises about the last error and unloading, with C and
//! C++ programs (tests/c/last_error_exit.{c,cpp}, tests/c/unload_cycles.c) linked against the
//! staticlib and the cdylib, or loading the cdylib with dlopen. They run without a driver on any
//! machine (`support::run`: the no-driver stand-in libcuda.so.1 first on the loader's path), so
//! their calls take the same path everywhere; every failing call of the last-error programs is
//! bad input, refused the same way with or without a driver.
//! - The calling thread's last error is readable in its own pthread key destructors (of a key
//!   made after the library was loaded, whose destructor runs after the library's), in atexit
//!   handlers and in C++ thread_local and static destructors; records are freed when threads
//!   exit.
//! - A host that loads the cdylib, makes failing calls (one through an error handler) and
//!   unloads it, again and again, keeps no memory per cycle.

mod support;

use std::path::PathBuf;
use std::process::Command;
use support::Linkage;

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
            let text = support::run_ok(&exe, args);
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
            let text = support::run_ok(&exe, &[mode]);
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
    let text = support::run_ok(&host, &[cdylib.to_str().unwrap(), "50", "1000"]);
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

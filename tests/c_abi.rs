//! Host-only tests of the C ABI: real C and C++ clients compiled with the system compilers
//! against csrc/llaisys_runtime.h and linked against the staticlib and the cdylib that this
//! `cargo test` built, run without a driver (`support::run`: the clients check the no-driver
//! answers), the ABI layout against Rust, the exported symbols, and the documented link lines.

mod support;

use llaisys_nvidia::ffi::LlaisysNvidiaError;
use llaisys_nvidia::ffi::LlaisysRuntimeAPI;
use std::mem::{offset_of, size_of};
use support::{build_c_client, run, run_ok, Linkage};

#[test]
fn c_client_against_staticlib() {
    let exe = build_c_client("client.c", Linkage::Static, &[]);
    let out = run_ok(&exe, &["checks"]);
    assert!(out.contains("ok: "), "{out}");
}

#[test]
fn c_client_against_cdylib() {
    let exe = build_c_client("client.c", Linkage::Dynamic, &[]);
    let out = run_ok(&exe, &["checks"]);
    assert!(out.contains("ok: "), "{out}");
}

#[test]
fn cpp_client_catches_exceptions_staticlib() {
    let exe = build_c_client("client.cpp", Linkage::Static, &[]);
    let out = run_ok(&exe, &[]);
    assert!(out.contains("ok: "), "{out}");
}

#[test]
fn cpp_client_catches_exceptions_cdylib() {
    let exe = build_c_client("client.cpp", Linkage::Dynamic, &[]);
    let out = run_ok(&exe, &[]);
    assert!(out.contains("ok: "), "{out}");
}

#[test]
fn default_handler_prints_one_line_and_aborts() {
    for linkage in [Linkage::Static, Linkage::Dynamic] {
        let exe = build_c_client("client.c", linkage, &[]);
        let out = run(&exe, &["abort"]);
        assert_eq!(
            out.signal(),
            Some(6),
            "not aborted by SIGABRT: {}",
            out.report()
        );
        assert!(!out.stdout.contains("returned after"), "{}", out.stdout);
        let stderr = &out.stderr;
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one line, got {stderr}");
        for needle in [
            "llaisys-nvidia: create_stream",
            "cudaStreamCreate",
            "cudaErrorInsufficientDriver (35)",
            "aborting",
        ] {
            assert!(lines[0].contains(needle), "{needle} missing from {stderr}");
        }
    }
}

#[test]
fn abi_layout_matches_rust() {
    let exe = build_c_client("client.c", Linkage::Static, &[]);
    let out = run_ok(&exe, &["layout"]);
    let c: std::collections::HashMap<&str, usize> = out
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect();
    let rust = [
        ("sizeof", size_of::<LlaisysRuntimeAPI>()),
        (
            "get_device_count",
            offset_of!(LlaisysRuntimeAPI, get_device_count),
        ),
        ("set_device", offset_of!(LlaisysRuntimeAPI, set_device)),
        (
            "device_synchronize",
            offset_of!(LlaisysRuntimeAPI, device_synchronize),
        ),
        (
            "create_stream",
            offset_of!(LlaisysRuntimeAPI, create_stream),
        ),
        (
            "destroy_stream",
            offset_of!(LlaisysRuntimeAPI, destroy_stream),
        ),
        (
            "stream_synchronize",
            offset_of!(LlaisysRuntimeAPI, stream_synchronize),
        ),
        (
            "malloc_device",
            offset_of!(LlaisysRuntimeAPI, malloc_device),
        ),
        ("free_device", offset_of!(LlaisysRuntimeAPI, free_device)),
        ("malloc_host", offset_of!(LlaisysRuntimeAPI, malloc_host)),
        ("free_host", offset_of!(LlaisysRuntimeAPI, free_host)),
        ("memcpy_sync", offset_of!(LlaisysRuntimeAPI, memcpy_sync)),
        ("memcpy_async", offset_of!(LlaisysRuntimeAPI, memcpy_async)),
        ("sizeof_error", size_of::<LlaisysNvidiaError>()),
        ("error_message", offset_of!(LlaisysNvidiaError, message)),
        (
            "LLAISYS_MEMCPY_H2H",
            llaisys_nvidia::copy::MemcpyKind::H2H as usize,
        ),
        (
            "LLAISYS_MEMCPY_H2D",
            llaisys_nvidia::copy::MemcpyKind::H2D as usize,
        ),
        (
            "LLAISYS_MEMCPY_D2H",
            llaisys_nvidia::copy::MemcpyKind::D2H as usize,
        ),
        (
            "LLAISYS_MEMCPY_D2D",
            llaisys_nvidia::copy::MemcpyKind::D2D as usize,
        ),
        ("LLAISYS_DEVICE_NVIDIA", 1),
        (
            "LLAISYS_NVIDIA_ERROR_INTERNAL",
            llaisys_nvidia::ErrorKind::Internal as usize,
        ),
    ];
    for (k, v) in rust {
        assert_eq!(
            c.get(k),
            Some(&v),
            "{k}: C says {:?}, Rust says {v}",
            c.get(k)
        );
    }
    // The table is 12 pointers in llaisys's order, with no padding.
    assert_eq!(size_of::<LlaisysRuntimeAPI>(), 12 * size_of::<usize>());
    // The memcpy kinds equal cudaMemcpyKind's values.
    use llaisys_nvidia::sys::cudaMemcpyKind as K;
    assert_eq!(K::cudaMemcpyHostToHost.0, 0);
    assert_eq!(K::cudaMemcpyHostToDevice.0, 1);
    assert_eq!(K::cudaMemcpyDeviceToHost.0, 2);
    assert_eq!(K::cudaMemcpyDeviceToDevice.0, 3);
}

#[test]
fn cdylib_exports_only_our_symbols() {
    let lib = support::target_dir().join("libllaisys_nvidia.so");
    let out = run_ok(
        std::path::Path::new("nm"),
        &["-D", "--defined-only", lib.to_str().unwrap_or_default()],
    );
    let exported: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let expected = [
        "llaisysNvidiaClearLastError",
        "llaisysNvidiaDeviceMemoryStats",
        "llaisysNvidiaHostMemoryStats",
        "llaisysNvidiaReleaseCachedMemory",
        "llaisysNvidiaResetPeakMemoryStats",
        "llaisysNvidiaGetErrorHandler",
        "llaisysNvidiaGetRuntimeAPI",
        "llaisysNvidiaLastCudaError",
        "llaisysNvidiaLastErrorDevice",
        "llaisysNvidiaLastErrorMessage",
        "llaisysNvidiaLastErrorStatus",
        "llaisysNvidiaSetErrorHandler",
    ];
    for e in expected {
        assert!(exported.contains(&e), "{e} not exported: {exported:?}");
    }
    let foreign: Vec<&&str> = exported
        .iter()
        .filter(|s| !s.starts_with("llaisysNvidia"))
        .collect();
    assert!(foreign.is_empty(), "unexpected exports: {foreign:?}");
    // Every exported function is declared in the header.
    let header = std::fs::read_to_string(support::csrc().join("llaisys_runtime.h")).unwrap();
    for e in &exported {
        assert!(
            header.contains(&format!("{e}(")),
            "{e} not declared in the header"
        );
    }
}

#[test]
fn staticlib_exports_are_as_documented() {
    // README "Linking": the staticlib carries our llaisysNvidia* symbols and, with the static
    // feature, every cuda* symbol of libcudart_static.a.
    let lib = support::target_dir().join("libllaisys_nvidia.a");
    let out = run_ok(
        std::path::Path::new("nm"),
        &["-g", "--defined-only", lib.to_str().unwrap_or_default()],
    );
    let text_syms: Vec<&str> = out
        .lines()
        .filter_map(|l| {
            let mut t = l.split_whitespace();
            let (_, kind, name) = (t.next()?, t.next()?, t.next()?);
            (kind == "T").then_some(name)
        })
        .collect();
    assert!(text_syms.contains(&"llaisysNvidiaGetRuntimeAPI"));
    let cuda = text_syms.iter().filter(|s| s.starts_with("cuda")).count();
    if llaisys_nvidia::runtime::build::LINK_MODE == "static" {
        assert!(
            cuda > 100,
            "static cudart not inside the staticlib ({cuda} cuda* symbols)"
        );
        assert!(text_syms.contains(&"cudaMalloc"));
    } else {
        assert_eq!(cuda, 0, "dynamic feature must not carry cudart");
    }
}

#[test]
fn clients_leak_nothing_and_touch_no_bad_memory_under_valgrind() {
    // valgrind is part of the test environment (scripts/test.sh installs it when missing).
    if !support::tool_or_skip(
        "clients_leak_nothing_and_touch_no_bad_memory_under_valgrind",
        "valgrind",
    ) {
        return;
    }
    for (src, args) in [("client.c", &["checks"][..]), ("client.cpp", &[][..])] {
        for linkage in [Linkage::Static, Linkage::Dynamic] {
            let exe = build_c_client(src, linkage, &[]);
            let mut cmd_args = vec![
                "-q",
                "--leak-check=full",
                "--errors-for-leak-kinds=definite,possible",
                "--error-exitcode=97",
            ];
            let exe_s = exe.to_str().unwrap_or_default();
            cmd_args.push(exe_s);
            cmd_args.extend_from_slice(args);
            let out = run(std::path::Path::new("valgrind"), &cmd_args);
            assert!(
                out.success(),
                "{src} ({linkage:?}) under valgrind: {}",
                out.report()
            );
        }
    }
}

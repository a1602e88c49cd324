//! Host-only: scripts/install.sh for C/C++ frameworks that are not llaisys. It installs this
//! build's link mode (the CUDA 12.9 build with `--cuda12`) under a fresh prefix; then a CMake
//! project (`find_package(llaisys-nvidia)`, tests/fixtures/consumer) and plain pkg-config
//! command lines build a C program against the prefix, with the shared and with the static
//! library, and each program, run without a driver (`support::run`), reports 0 devices. The static link line in the
//! .pc files and the CMake target is rustc's real `--print native-static-libs`, the README's
//! documented line; the CMake static target carries `--exclude-libs`, so a shared library that
//! links it exports no `cuda*` symbol.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{documented_static_flags, run_ok};

fn crate_dir() -> PathBuf {
    support::source_dir()
}

fn build_name() -> (String, bool, bool) {
    let dynamic = llaisys_nvidia::runtime::build::LINK_MODE == "dynamic";
    let cuda12 = llaisys_nvidia::runtime::build::CUDART_VERSION.starts_with("12");
    let name = format!(
        "{}{}",
        llaisys_nvidia::runtime::build::LINK_MODE,
        if cuda12 { "-cuda12" } else { "" }
    );
    (name, dynamic, cuda12)
}

/// Runs a command, asserts success, returns stdout.
fn ok(cmd: &mut Command) -> String {
    support::child::run(cmd, support::child::DEFAULT_LIMIT).ok()
}

/// The prefix (installed once per test binary: the tests share it) and cargo's folder.
fn installed() -> (PathBuf, PathBuf) {
    use std::sync::OnceLock;
    static PREFIX: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let (name, _, cuda12) = build_name();
            let root = support::tmp_dir().join(format!("install-{name}"));
            let prefix = root.join("prefix");
            let cargo_target = root.join("cargo-target");
            let _ = std::fs::remove_dir_all(&prefix);
            let mut cmd = Command::new("bash");
            cmd.arg(crate_dir().join("scripts/install.sh"))
                .arg("--prefix")
                .arg(&prefix)
                .env("CARGO_TARGET_DIR", &cargo_target);
            for v in [
                "CUDA_HOME",
                "CUDA_PATH",
                "CUDA_ROOT",
                "CUDA_TOOLKIT_ROOT_DIR",
            ] {
                cmd.env_remove(v);
            }
            let mode = llaisys_nvidia::runtime::build::LINK_MODE;
            if mode != "static" {
                cmd.args(["--cudart", mode]);
            }
            if cuda12 {
                cmd.arg("--cuda12");
            }
            let out = ok(&mut cmd);
            assert!(out.contains("installed under"), "{out}");
            (prefix, cargo_target)
        })
        .clone()
}

/// rustc's own `--print native-static-libs` for the staticlib install.sh built (replayed by
/// cargo from its cache when nothing changed).
fn rustc_native_static_libs(cargo_target: &Path) -> String {
    let (_, _, cuda12) = build_name();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(crate_dir())
        .args([
            "rustc",
            "--release",
            "--lib",
            "--crate-type",
            "staticlib,cdylib",
        ])
        .arg("--target-dir")
        .arg(cargo_target);
    for v in [
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "CUDA_TOOLKIT_ROOT_DIR",
    ] {
        cmd.env_remove(v);
    }
    if cuda12 {
        cmd.env("CUDA_HOME", crate_dir().join(".deps/cuda12"));
    }
    let mode = llaisys_nvidia::runtime::build::LINK_MODE;
    if mode != "static" {
        cmd.args(["--no-default-features", "--features", mode]);
    }
    cmd.args(["--", "--print", "native-static-libs"]);
    let out = support::child::run(&mut cmd, support::child::DEFAULT_LIMIT);
    assert!(out.success(), "{}", out.report());
    let stderr = out.stderr;
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("native-static-libs:")
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no native-static-libs note in:\n{stderr}"))
}

fn pc_field(pc: &str, field: &str) -> String {
    pc.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}: ")))
        .unwrap_or_else(|| panic!("no {field} in:\n{pc}"))
        .to_string()
}

#[test]
fn install_lays_out_libraries_headers_pkgconfig_and_cmake() {
    let (prefix, cargo_target) = installed();
    for f in [
        "include/llaisys-nvidia/llaisys_runtime.h",
        "include/llaisys-nvidia/llaisys_nvidia_exceptions.hpp",
        "lib/libllaisys_nvidia.a",
        "lib/libllaisys_nvidia.so",
        "lib/pkgconfig/llaisys-nvidia.pc",
        "lib/pkgconfig/llaisys-nvidia-static.pc",
        "lib/cmake/llaisys-nvidia/llaisys-nvidiaConfig.cmake",
        "lib/cmake/llaisys-nvidia/llaisys-nvidiaConfigVersion.cmake",
    ] {
        assert!(prefix.join(f).is_file(), "{f} not installed");
    }
    // The loaded mode's own runtimes go beside the library, which loads them from there.
    for major in [13, 12] {
        let own = prefix.join(format!("lib/libllaisys_nvidia_cudart{major}.so"));
        let loaded = llaisys_nvidia::runtime::build::LINK_MODE == "loaded";
        assert_eq!(own.is_file(), loaded, "{}", own.display());
    }
    assert_eq!(
        std::fs::read(prefix.join("include/llaisys-nvidia/llaisys_runtime.h")).unwrap(),
        std::fs::read(crate_dir().join("csrc/llaisys_runtime.h")).unwrap()
    );
    // The cdylib exports only our functions.
    let so = prefix.join("lib/libllaisys_nvidia.so");
    let syms = run_ok(
        Path::new("nm"),
        &["-D", "--defined-only", so.to_str().unwrap()],
    );
    let foreign: Vec<&str> = syms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| !s.starts_with("llaisysNvidia"))
        .collect();
    assert!(foreign.is_empty(), "the cdylib exports {foreign:?}");
    // The static line, in both .pc files and the CMake target: rustc's, token for token.
    let natives = rustc_native_static_libs(&cargo_target);
    let shared_pc =
        std::fs::read_to_string(prefix.join("lib/pkgconfig/llaisys-nvidia.pc")).unwrap();
    let static_pc =
        std::fs::read_to_string(prefix.join("lib/pkgconfig/llaisys-nvidia-static.pc")).unwrap();
    let cmake =
        std::fs::read_to_string(prefix.join("lib/cmake/llaisys-nvidia/llaisys-nvidiaConfig.cmake"))
            .unwrap();
    let private = pc_field(&shared_pc, "Libs.private");
    let static_libs = pc_field(&static_pc, "Libs");
    let (_, dynamic, _) = build_name();
    let lib_dir = llaisys_nvidia::runtime::build::LIB_DIR;
    let search = format!("-L{lib_dir} -Wl,-rpath,{lib_dir} ");
    let expect = if dynamic {
        format!("{search}{natives}")
    } else {
        natives.clone()
    };
    assert_eq!(private, expect, "llaisys-nvidia.pc Libs.private");
    assert_eq!(
        static_libs,
        format!("${{libdir}}/libllaisys_nvidia.a {expect}"),
        "llaisys-nvidia-static.pc Libs"
    );
    assert_eq!(pc_field(&shared_pc, "Libs"), "-L${libdir} -lllaisys_nvidia");
    let cmake_list: Vec<String> = expect
        .split_whitespace()
        .map(|f| match f.strip_prefix("-l") {
            Some(n) if !n.starts_with(':') => n.to_string(),
            _ => f.to_string(),
        })
        .collect();
    let want = format!("INTERFACE_LINK_LIBRARIES \"{}\"", cmake_list.join(";"));
    assert!(cmake.contains(&want), "no {want} in:\n{cmake}");
    assert!(cmake.contains("INTERFACE_LINK_OPTIONS \"-Wl,--exclude-libs,libllaisys_nvidia.a\""));
    // ... and the README's documented line for this feature (tests/c_link.rs: = rustc's too).
    let l_flags = |s: &str| {
        let mut v: Vec<String> = s
            .split_whitespace()
            .filter(|t| t.starts_with("-l"))
            .map(|t| t.replace("-l:", "-l"))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let documented = documented_static_flags().join(" ");
    assert_eq!(l_flags(&private), l_flags(&documented), "README link line");
    for text in [&shared_pc, &static_pc, &cmake] {
        assert!(!text.contains('@'), "a placeholder is left:\n{text}");
    }
    assert!(
        shared_pc.contains(&format!("prefix={}", prefix.display())),
        "{shared_pc}"
    );
}

fn check_runs(exe: &Path, shared: bool) {
    let out = run_ok(exe, &[]);
    // Without a driver: no devices, through the table and the status API.
    assert!(
        out.contains("devices 0 (status API: 0"),
        "{}: {out}",
        exe.display()
    );
    assert!(out.contains("version 0.1.0"), "{out}");
    let dynamic = run_ok(Path::new("readelf"), &["-d", exe.to_str().unwrap()]);
    let needs_ours = dynamic
        .lines()
        .any(|l| l.contains("NEEDED") && l.contains("libllaisys_nvidia"));
    assert_eq!(needs_ours, shared, "{}:\n{dynamic}", exe.display());
}

#[test]
fn cmake_project_finds_the_package_and_links_both_libraries() {
    let (prefix, _) = installed();
    let build = support::tmp_dir()
        .join(format!("install-{}", build_name().0))
        .join("cmake-build");
    let _ = std::fs::remove_dir_all(&build);
    ok(Command::new("cmake")
        .arg("-S")
        .arg(crate_dir().join("tests/fixtures/consumer"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .env_remove("LD_LIBRARY_PATH"));
    ok(Command::new("cmake").arg("--build").arg(&build));
    check_runs(&build.join("consumer_shared"), true);
    check_runs(&build.join("consumer_static"), false);
    // The shared library with the static target inside keeps cudart (and us) private.
    let plugin = build.join("libconsumer_plugin.so");
    let syms = run_ok(
        Path::new("nm"),
        &["-D", "--defined-only", plugin.to_str().unwrap()],
    );
    let leaked: Vec<&str> = syms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("cuda") || s.starts_with("llaisysNvidia"))
        .collect();
    assert!(
        leaked.is_empty(),
        "libconsumer_plugin.so exports {leaked:?}"
    );
    assert!(syms.contains("consumer_plugin_device_count"), "{syms}");
    // A version newer than installed is refused.
    let newer = build.with_file_name("cmake-newer");
    let _ = std::fs::remove_dir_all(&newer);
    std::fs::create_dir_all(&newer).unwrap();
    std::fs::write(
        newer.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.13)\nproject(n C)\nfind_package(llaisys-nvidia 0.2 REQUIRED)\n",
    )
    .unwrap();
    let out = support::child::run(
        Command::new("cmake")
            .arg("-S")
            .arg(&newer)
            .arg("-B")
            .arg(newer.join("b"))
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display())),
        support::child::DEFAULT_LIMIT,
    );
    assert!(!out.success(), "0.2 accepted:\n{}", out.report());
}

#[test]
fn pkg_config_lines_build_a_shared_and_a_static_consumer() {
    let (prefix, _) = installed();
    let dir = support::tmp_dir()
        .join(format!("install-{}", build_name().0))
        .join("pkg-config");
    std::fs::create_dir_all(&dir).unwrap();
    let pkgconfig = |args: &[&str]| {
        ok(Command::new("pkg-config")
            .args(args)
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .env_remove("PKG_CONFIG_LIBDIR"))
        .trim()
        .to_string()
    };
    assert_eq!(pkgconfig(&["--modversion", "llaisys-nvidia"]), "0.1.0");
    let main = crate_dir().join("tests/fixtures/consumer/main.c");
    for (module, shared) in [("llaisys-nvidia", true), ("llaisys-nvidia-static", false)] {
        let flags = pkgconfig(&["--cflags", "--libs", module]);
        let exe = dir.join(module);
        let mut cmd = Command::new("cc");
        cmd.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg(&main)
            .arg("-o")
            .arg(&exe)
            .args(flags.split_whitespace());
        if shared {
            let libdir = pkgconfig(&["--variable=libdir", module]);
            cmd.arg(format!("-Wl,-rpath,{libdir}"));
        }
        ok(&mut cmd);
        check_runs(&exe, shared);
    }
    // `--static` of the shared module gives the static natives after our library.
    let st = pkgconfig(&["--static", "--libs", "llaisys-nvidia"]);
    let ours = st
        .find("-lllaisys_nvidia")
        .unwrap_or_else(|| panic!("{st}"));
    let natives = st.find("-lgcc_s").unwrap_or_else(|| panic!("{st}"));
    assert!(ours < natives, "{st}");
}

//! Host-only tests of how hosts link and include us: the documented link line equals rustc's
//! `--print native-static-libs`, the header coexists with llaisys's own headers in either order
//! (the real upstream tree's, `llaisys_tree::upstream`, and a fixture's that adds one type of
//! llaisys's own), the llaisys drop-in adapter builds against a fixture of the llaisys core and
//! answers through it (without a driver, `support::run`: no devices; tests/llaisys_upstream.rs
//! builds the real tree with it), and the dynamic feature finds libcudart at run time through
//! its rpath.

mod llaisys_tree;
mod support;

use std::path::Path;
use std::process::Command;
use support::{compile, csrc, documented_static_flags, run_ok, scratch, target_dir, tests_dir};

fn fixture() -> std::path::PathBuf {
    tests_dir().join("fixtures").join("llaisys")
}

#[test]
fn documented_link_line_is_rustc_native_static_libs() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if !support::tool_or_skip("documented_link_line_is_rustc_native_static_libs", &cargo) {
        return;
    }
    let dynamic = llaisys_nvidia::runtime::build::LINK_MODE == "dynamic";
    let mut cmd = Command::new(cargo);
    cmd.current_dir(support::source_dir())
        .args([
            "rustc",
            "--lib",
            "--crate-type",
            "staticlib",
            "--target-dir",
        ])
        .arg(support::tmp_dir().join(format!(
            "native-libs-{}",
            llaisys_nvidia::runtime::build::LINK_MODE
        )));
    if dynamic {
        cmd.args(["--no-default-features", "--features", "dynamic"]);
    }
    cmd.args(["--", "--print", "native-static-libs"]);
    let out = support::child::run(&mut cmd, support::child::DEFAULT_LIMIT);
    assert!(out.success(), "{}", out.report());
    let stderr = out.stderr;
    let printed = stderr
        .lines()
        .find_map(|l| l.split_once("native-static-libs:").map(|(_, v)| v.trim()))
        .unwrap_or_else(|| panic!("no native-static-libs note in:\n{stderr}"));
    let set = |it: &mut dyn Iterator<Item = String>| {
        let mut v: Vec<String> = it.filter(|t| t.starts_with("-l")).collect();
        v.sort();
        v.dedup();
        v
    };
    let rustc = set(&mut printed.split_whitespace().map(String::from));
    let documented = set(&mut documented_static_flags().into_iter());
    assert_eq!(
        documented, rustc,
        "README link line differs from rustc's native-static-libs"
    );
}

/// Compiles one translation unit that includes the given headers in order, with `llaisys` (a
/// folder holding llaisys.h and llaisys/runtime.h) on the include path when given.
fn compile_tu(name: &str, cpp: bool, includes: &[&str], llaisys: Option<&Path>) {
    let dir = scratch("headers");
    let src = dir.join(format!("{name}.{}", if cpp { "cpp" } else { "c" }));
    let mut text: String = includes.iter().map(|h| format!("#include {h}\n")).collect();
    // Use every shared name so a missing or conflicting definition fails to compile.
    text.push_str(
        "static const struct LlaisysRuntimeAPI *use(llaisysMemcpyKind_t k, llaisysStream_t s) {\n\
         (void)k; (void)s; return llaisysNvidiaGetRuntimeAPI(); }\n\
         int main(void) { get_device_count_api f = use(LLAISYS_MEMCPY_D2D, 0)->get_device_count;\n\
         llaisysDeviceType_t d = LLAISYS_DEVICE_NVIDIA; (void)d; return f == 0; }\n",
    );
    if includes.iter().any(|h| h.contains("llaisys.h")) || llaisys.is_some() {
        text.push_str("llaisysDataType_t only_in_llaisys = LLAISYS_DTYPE_F32;\n");
    }
    std::fs::write(&src, text).unwrap();
    let mut cmd = Command::new(if cpp { "c++" } else { "cc" });
    cmd.args(if cpp {
        [
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
        ]
    } else {
        [
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
        ]
    })
    .arg(format!("-I{}", csrc().display()));
    if let Some(dir) = llaisys {
        cmd.arg(format!("-I{}", dir.display()));
    }
    cmd.arg(&src);
    compile(cmd);
}

#[test]
fn header_compiles_alone_as_c99_and_cpp17() {
    compile_tu("alone_c", false, &["\"llaisys_runtime.h\""], None);
    compile_tu("alone_cpp", true, &["\"llaisys_runtime.h\""], None);
}

#[test]
fn header_coexists_with_llaisys_headers_in_either_order() {
    coexist("fixture", &fixture().join("include"));
}

#[test]
fn header_coexists_with_upstream_llaisys_headers_in_either_order() {
    let Some(up) = llaisys_tree::upstream() else {
        return;
    };
    coexist("upstream", &up.join("include"));
}

/// Our header beside llaisys's own (in the folder `include`), in every order, as C++ and C.
fn coexist(tag: &str, include: &Path) {
    let tu = |name: &str| format!("{tag}_{name}");
    // C++: llaisys.h and llaisys/runtime.h before and after ours.
    let theirs_first = [
        "<llaisys.h>",
        "<llaisys/runtime.h>",
        "\"llaisys_runtime.h\"",
    ];
    let ours_first = [
        "\"llaisys_runtime.h\"",
        "<llaisys.h>",
        "<llaisys/runtime.h>",
    ];
    let ours_between = [
        "<llaisys.h>",
        "\"llaisys_runtime.h\"",
        "<llaisys/runtime.h>",
    ];
    compile_tu(&tu("cpp_theirs_first"), true, &theirs_first, Some(include));
    compile_tu(&tu("cpp_ours_first"), true, &ours_first, Some(include));
    compile_tu(&tu("cpp_ours_between"), true, &ours_between, Some(include));
    // C: llaisys.h (their runtime.h is C++ only) before and after ours.
    compile_tu(
        &tu("c_theirs_first"),
        false,
        &["<llaisys.h>", "\"llaisys_runtime.h\""],
        Some(include),
    );
    compile_tu(
        &tu("c_ours_first"),
        false,
        &["\"llaisys_runtime.h\"", "<llaisys.h>"],
        Some(include),
    );
}

/// Lays out a llaisys tree: the fixture plus our adapter at src/device/nvidia/.
fn llaisys_tree(name: &str) -> std::path::PathBuf {
    let tree = scratch(name);
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    };
    for rel in [
        "include/llaisys.h",
        "include/llaisys/runtime.h",
        "src/device/runtime_api.hpp",
        "src/device/runtime_api.cpp",
    ] {
        copy(&fixture().join(rel), &tree.join(rel));
    }
    copy(
        &csrc().join("nvidia_runtime_api.cpp"),
        &tree.join("src/device/nvidia/nvidia_runtime_api.cpp"),
    );
    tree
}

#[test]
fn llaisys_adapter_builds_against_core_fixture_and_answers() {
    let tree = llaisys_tree("llaisys-tree");
    let main = tree.join("main.cpp");
    std::fs::write(
        &main,
        "#include \"llaisys/runtime.h\"\n#include <cstdio>\n\
         int main() {\n\
           const LlaisysRuntimeAPI *api = llaisysGetRuntimeAPI(LLAISYS_DEVICE_NVIDIA);\n\
           int n = api->get_device_count();\n\
           std::printf(\"nvidia devices through the core: %d\\n\", n);\n\
           return api->memcpy_async == nullptr;\n}\n",
    )
    .unwrap();
    let exe = tree.join("core");
    let mut cmd = Command::new("c++");
    cmd.args([
        "-std=c++17",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-DENABLE_NVIDIA_API",
    ])
    .arg(format!("-I{}", tree.join("include").display()))
    .arg(format!("-I{}", csrc().display()))
    .arg(tree.join("src/device/runtime_api.cpp"))
    .arg(tree.join("src/device/nvidia/nvidia_runtime_api.cpp"))
    .arg(&main)
    .arg("-o")
    .arg(&exe)
    .arg(target_dir().join("libllaisys_nvidia.a"))
    .args(documented_static_flags());
    compile(cmd);
    let out = run_ok(&exe, &[]);
    assert!(
        out.contains("nvidia devices through the core: 0"),
        "no driver, no devices: {out}"
    );
}

#[test]
fn dynamic_feature_finds_libcudart_through_rpath() {
    // A program of this package that calls cudart: this test binary (the doctor's binary, in
    // the doctor crate, is checked by doctor/tests/doctor.rs). The call keeps libcudart among
    // its needed libraries (the linker drops a library nothing calls).
    let version = llaisys_nvidia::runtime::runtime_version();
    assert!(version.as_ref().is_ok_and(|&v| v > 0), "{version:?}");
    let bin = std::env::current_exe().expect("current_exe");
    let lib = target_dir().join("libllaisys_nvidia.so");
    for file in [bin.as_path(), lib.as_path()] {
        let dynamic = run_ok(Path::new("readelf"), &["-d", file.to_str().unwrap()]);
        let needs_cudart = dynamic
            .lines()
            .any(|l| l.contains("NEEDED") && l.contains("libcudart"));
        if llaisys_nvidia::runtime::build::LINK_MODE == "static" {
            assert!(
                !needs_cudart,
                "static build needs a shared libcudart:\n{dynamic}"
            );
            continue;
        }
        assert!(needs_cudart, "{dynamic}");
        let runpath = dynamic
            .lines()
            .find(|l| l.contains("RUNPATH") || l.contains("RPATH"))
            .unwrap_or_else(|| panic!("no RUNPATH in {}:\n{dynamic}", file.display()));
        assert!(runpath.contains("$ORIGIN"), "{runpath}");
        assert!(
            runpath.contains(llaisys_nvidia::runtime::build::LIB_DIR),
            "{runpath}"
        );
    }
    // It runs with only the no-driver stand-in libcuda.so.1 on LD_LIBRARY_PATH (support::run):
    // libcudart comes through the rpath.
    let out = run_ok(&bin, &["--list"]);
    assert!(
        out.contains("dynamic_feature_finds_libcudart_through_rpath"),
        "{out}"
    );
}

#[test]
fn staticlib_inside_a_shared_core_exports_no_cudart() {
    // The README's plain g++ line for a llaisys core: libllaisys.so with our staticlib inside,
    // `--exclude-libs` keeping its cudart (and our symbols) private.
    let dir = llaisys_tree("shared-core");
    let lib = dir.join("libllaisys.so");
    let mut cmd = Command::new("c++");
    cmd.args([
        "-std=c++17",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-shared",
        "-DENABLE_NVIDIA_API",
    ])
    .arg(format!("-I{}", dir.join("include").display()))
    .arg(format!("-I{}", csrc().display()))
    .arg(dir.join("src/device/runtime_api.cpp"))
    .arg(dir.join("src/device/nvidia/nvidia_runtime_api.cpp"))
    .arg("-o")
    .arg(&lib)
    .arg(target_dir().join("libllaisys_nvidia.a"))
    .arg("-Wl,--exclude-libs,libllaisys_nvidia.a")
    .args(documented_static_flags());
    compile(cmd);
    let syms = run_ok(
        Path::new("nm"),
        &["-D", "--defined-only", lib.to_str().unwrap()],
    );
    let leaked: Vec<&str> = syms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("cuda") || s.starts_with("llaisysNvidia") || s.contains("rust"))
        .collect();
    assert!(leaked.is_empty(), "libllaisys.so re-exports: {leaked:?}");
    assert!(syms.contains("llaisysGetRuntimeAPI"), "{syms}");
    // A program using the core through its own export.
    let main = dir.join("main.cpp");
    std::fs::write(
        &main,
        "#include \"llaisys/runtime.h\"\n#include <cstdio>\nint main() {\n\
         std::printf(\"%d\\n\", llaisysGetRuntimeAPI(LLAISYS_DEVICE_NVIDIA)->get_device_count());\n}\n",
    )
    .unwrap();
    let exe = dir.join("main");
    let mut cmd = Command::new("c++");
    cmd.args(["-std=c++17"])
        .arg(format!("-I{}", fixture().join("include").display()))
        .arg(&main)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", dir.display()))
        .arg("-lllaisys")
        .arg(format!("-Wl,-rpath,{}", dir.display()));
    compile(cmd);
    assert_eq!(run_ok(&exe, &[]).trim(), "0", "no driver, no devices");
}

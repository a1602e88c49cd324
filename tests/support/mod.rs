//! Shared helpers of the host-only tests: where the sources and the built libraries are, the
//! link lines the README documents, compiling and running C/C++ clients, the one process runner
//! (`child`), and the no-driver condition (`no_driver`).
//!
//! Test binaries staged to another machine (scripts/stage-host-tests.sh) find what they need
//! through these variables instead of the paths they were built with:
//! - `LLAISYS_TEST_SOURCE_DIR`: the crate's sources (csrc/, tests/, README.md);
//! - `LLAISYS_TEST_LIB_DIR`: the cdylib and staticlib, built beforehand (no cargo is run);
//! - `LLAISYS_TEST_CUDA_LIB`: the folder of libcudart.so.N for the dynamic link line;
//! - `LLAISYS_TEST_TMPDIR`: a scratch folder;
//! - `LLAISYS_TEST_STAGED=1`: a test that needs a tool this machine lacks (cargo, valgrind)
//!   prints a "skipped:" line instead of failing.
#![allow(dead_code)]

pub mod child;
pub mod no_driver;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes an executable shell script at `path` (mode 755). The text goes to a side file that
/// `install(1)` copies into place (the side file is removed after), so this process never holds
/// the script open for writing: a child forked meanwhile by another test's thread would inherit
/// that descriptor until its exec, and running the script then fails with ETXTBSY ("Text file
/// busy").
pub fn write_script(path: &Path, text: &str) {
    let side = path.with_extension("text");
    std::fs::write(&side, text).unwrap_or_else(|e| panic!("write {}: {e}", side.display()));
    let status = Command::new("install")
        .args(["-m", "755"])
        .arg(&side)
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("run install(1): {e}"));
    assert!(
        status.success(),
        "install {} -> {}: {status}",
        side.display(),
        path.display()
    );
    std::fs::remove_file(&side).unwrap_or_else(|e| panic!("remove {}: {e}", side.display()));
}

/// Which library a client links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// `libllaisys_nvidia.a`, with the README's documented flags.
    Static,
    /// `libllaisys_nvidia.so`.
    Dynamic,
}

/// A path given by the variable `var`, else `built` (the path at build time).
fn overridden(var: &str, built: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(built), PathBuf::from)
}

/// The crate's source folder (`LLAISYS_TEST_SOURCE_DIR`, else the one this test was built from).
pub fn source_dir() -> PathBuf {
    overridden("LLAISYS_TEST_SOURCE_DIR", env!("CARGO_MANIFEST_DIR"))
}

/// The folder of this build's libcudart.so.N (`LLAISYS_TEST_CUDA_LIB`, else the one it linked).
pub fn cuda_lib_dir() -> PathBuf {
    overridden(
        "LLAISYS_TEST_CUDA_LIB",
        llaisys_nvidia::runtime::build::LIB_DIR,
    )
}

/// Whether the test binaries run away from their build machine (`LLAISYS_TEST_STAGED=1`).
pub fn staged() -> bool {
    std::env::var("LLAISYS_TEST_STAGED").as_deref() == Ok("1")
}

/// Whether `program` is on PATH (a path with a slash: whether it exists).
pub fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Whether `tool` is there for `test`. Staged (`staged()`), a missing tool prints a visible
/// "skipped:" line and gives false (the test returns); elsewhere it fails the test.
#[track_caller]
pub fn tool_or_skip(test: &str, tool: &str) -> bool {
    if on_path(tool) {
        return true;
    }
    assert!(
        staged(),
        "{test}: {tool} not found (scripts/test.sh installs what the tests need)"
    );
    println!("skipped: {test}: needs {tool}, which this machine lacks");
    false
}

/// The folder holding the cdylib and staticlib: `LLAISYS_TEST_LIB_DIR` when set, else
/// target/<profile>. `cargo test` builds only the rlib, so the first call builds the library's
/// other crate types with the same features and profile (cargo reuses everything already
/// compiled; a no-op when up to date).
pub fn target_dir() -> PathBuf {
    use std::sync::OnceLock;
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(dir) = std::env::var_os("LLAISYS_TEST_LIB_DIR") {
                return PathBuf::from(dir);
            }
            let exe = std::env::current_exe().expect("current_exe");
            // target/<profile>/deps/<test binary>
            let dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test binary in target/<profile>/deps")
                .to_path_buf();
            let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cmd.current_dir(source_dir())
                .args(["build", "--lib", "--target-dir"])
                .arg(dir.parent().expect("target dir"));
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            if llaisys_nvidia::runtime::build::LINK_MODE == "dynamic" {
                cmd.args(["--no-default-features", "--features", "dynamic"]);
            }
            child::run(&mut cmd, child::DEFAULT_LIMIT).ok();
            dir
        })
        .clone()
}

/// The crate's csrc/ folder.
pub fn csrc() -> PathBuf {
    source_dir().join("csrc")
}

/// The crate's tests/ folder.
pub fn tests_dir() -> PathBuf {
    source_dir().join("tests")
}

/// The scratch folder of the tests (`LLAISYS_TEST_TMPDIR`, else cargo's for integration tests).
pub fn tmp_dir() -> PathBuf {
    overridden("LLAISYS_TEST_TMPDIR", env!("CARGO_TARGET_TMPDIR"))
}

/// A scratch folder for this test binary's outputs.
pub fn scratch(name: &str) -> PathBuf {
    let d = tmp_dir()
        .join(llaisys_nvidia::runtime::build::LINK_MODE)
        .join(name);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// The link line the README documents for a C/C++ host linking the staticlib with this build's
/// feature: the line after `<!-- link-line:FEATURE -->` (inside a ``` fence). Returns the
/// flags other than those naming our own library and its folder, with `$CUDA_LIB` replaced by
/// the CUDA library folder this build linked.
pub fn documented_static_flags() -> Vec<String> {
    let readme = std::fs::read_to_string(source_dir().join("README.md")).expect("README.md");
    let marker = format!(
        "<!-- link-line:{} -->",
        llaisys_nvidia::runtime::build::LINK_MODE
    );
    let line = readme
        .lines()
        .skip_while(|l| l.trim() != marker)
        .nth(2) // the marker, the ``` fence, the line
        .unwrap_or_else(|| panic!("README.md has no line after {marker}"));
    line.split_whitespace()
        .filter(|t| t.starts_with('-') && !t.contains("llaisys_nvidia") && !t.contains("$TARGET"))
        .map(|t| t.replace("$CUDA_LIB", &cuda_lib_dir().display().to_string()))
        .collect()
}

/// Compiles `tests/c/<src>` (C99 pedantic or C++17, warnings as errors) and links it as asked.
/// Each client is built once per test binary (tests run in parallel and share the outputs).
pub fn build_c_client(src: &str, linkage: Linkage, extra: &[&str]) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{src} {linkage:?} {extra:?}");
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let map = built.get_or_insert_with(HashMap::new);
    if let Some(p) = map.get(&key) {
        return p.clone();
    }
    let exe = build_uncached(src, linkage, extra);
    map.insert(key, exe.clone());
    exe
}

fn build_uncached(src: &str, linkage: Linkage, extra: &[&str]) -> PathBuf {
    let src_path = tests_dir().join("c").join(src);
    let cpp = src.ends_with(".cpp");
    let out = scratch("clients").join(format!(
        "{}-{}",
        src.replace('.', "_"),
        if linkage == Linkage::Static {
            "static"
        } else {
            "cdylib"
        }
    ));
    let mut cmd = Command::new(if cpp { "c++" } else { "cc" });
    if cpp {
        cmd.args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic"]);
    } else {
        cmd.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]);
    }
    cmd.arg(format!("-I{}", csrc().display()))
        .args(extra)
        .arg(&src_path)
        .arg("-o")
        .arg(&out);
    let target = target_dir();
    match linkage {
        Linkage::Static => {
            cmd.arg(target.join("libllaisys_nvidia.a"));
            cmd.args(
                documented_static_flags()
                    .iter()
                    .filter(|f| *f != "-lllaisys_nvidia"),
            );
        }
        Linkage::Dynamic => {
            cmd.arg(format!("-L{}", target.display()))
                .arg("-lllaisys_nvidia")
                .arg(format!("-Wl,-rpath,{}", target.display()));
        }
    }
    compile(cmd);
    out
}

/// The calling thread's last error message (`llaisysNvidiaLastErrorMessage`).
pub fn last_error_message() -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` holds `buf.len()` bytes; the call writes at most that, NUL included.
    unsafe {
        llaisys_nvidia::ffi::llaisysNvidiaLastErrorMessage(buf.as_mut_ptr().cast(), buf.len())
    };
    std::ffi::CStr::from_bytes_until_nul(&buf)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Runs a compiler command; fails the test with its output on error.
pub fn compile(mut cmd: Command) {
    child::run(&mut cmd, child::DEFAULT_LIMIT).ok();
}

/// Runs `exe args` as a program of these tests: on a machine without a driver, which the
/// no-driver stand-in (`no_driver`) creates on any machine, as the only LD_LIBRARY_PATH.
pub fn run(exe: &Path, args: &[&str]) -> child::Finished {
    run_with(exe, args, &[])
}

/// As `run`, with `env` added.
pub fn run_with(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> child::Finished {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", no_driver::loader_dir())
        .envs(env.iter().copied());
    child::run(&mut cmd, child::DEFAULT_LIMIT)
}

/// Runs (`run`) and asserts success; returns stdout.
#[track_caller]
pub fn run_ok(exe: &Path, args: &[&str]) -> String {
    run(exe, args).ok()
}

/// The folder of the asynchronous stand-in cudart (tests/fixtures/fake_cudart.c with
/// -DFAKE_ASYNC, as libcudart.so.13), built once per test binary.
pub fn fake_cudart() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        c_shared_library(
            "tests/fixtures/fake_cudart.c",
            &tmp_dir().join("fake-cudart"),
            "libcudart.so.13",
            &["-DFAKE_ASYNC", "-pthread", "-Wl,-soname,libcudart.so.13"].map(String::from),
        )
    })
}

/// A function of the stand-in cudart (`fake_cudart`), looked up in the copy the process loaded.
///
/// # Safety
/// `T` is the C type of `name` in tests/fixtures/fake_cudart.c.
pub unsafe fn fake_function<T: Copy>(name: &std::ffi::CStr) -> T {
    // SAFETY: RTLD_NOLOAD only finds the library the process already loaded; dlsym reads its
    // table; the symbol's type is `T` (this function's contract).
    unsafe {
        let lib = libc::dlopen(
            c"libcudart.so.13".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        );
        assert!(!lib.is_null(), "the stand-in cudart is loaded");
        let f = libc::dlsym(lib, name.as_ptr());
        assert!(!f.is_null(), "the stand-in has {name:?}");
        std::mem::transmute_copy(&f)
    }
}

/// Builds the C file `source` (a path in the crate) with `cc -shared -fPIC -O2` and `extra`
/// into `dir/name`, and returns `dir`; fails the test with cc's output when it does not build.
pub fn c_shared_library(source: &str, dir: &Path, name: &str, extra: &[String]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("scratch folder");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(cc);
    cmd.args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(dir.join(name))
        .args(extra)
        .arg(source_dir().join(source));
    compile(cmd);
    dir.to_path_buf()
}

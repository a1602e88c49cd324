//! Shared helpers of the host-only C/C++ tests: where the built libraries are, the link lines
//! the README documents, and compiling/running clients.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Which library a client links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// `libllaisys_nvidia.a`, with the README's documented flags.
    Static,
    /// `libllaisys_nvidia.so`.
    Dynamic,
}

/// The folder holding the cdylib and staticlib (target/<profile>). `cargo test` builds only the
/// rlib, so the first call builds the library's other crate types with the same features and
/// profile (cargo reuses everything already compiled; a no-op when up to date).
pub fn target_dir() -> PathBuf {
    use std::sync::OnceLock;
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("current_exe");
            // target/<profile>/deps/<test binary>
            let dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test binary in target/<profile>/deps")
                .to_path_buf();
            let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
                .args(["build", "--lib", "--target-dir"])
                .arg(dir.parent().expect("target dir"));
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            if llaisys_nvidia::runtime::build::LINK_MODE == "dynamic" {
                cmd.args(["--no-default-features", "--features", "dynamic"]);
            }
            let out = cmd.output().expect("cargo build --lib");
            assert!(
                out.status.success(),
                "{cmd:?} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            dir
        })
        .clone()
}

/// The crate's csrc/ folder.
pub fn csrc() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc")
}

/// The crate's tests/ folder.
pub fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// A scratch folder for this test binary's outputs.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
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
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
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
        .map(|t| t.replace("$CUDA_LIB", llaisys_nvidia::runtime::build::LIB_DIR))
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

/// Runs a compiler command; fails the test with its output on error.
pub fn compile(mut cmd: Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A finished process's stdout then stderr, as text (for assertion messages and searches).
pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the ignored test `child` of the calling test binary in a child process, with `flag=1`,
/// `lib_dir` as the loader path (a stand-in library there) and `envs`; returns whether it
/// exited 0, and its stdout then stderr.
pub fn run_child(
    child: &str,
    flag: &str,
    lib_dir: &Path,
    envs: &[(String, String)],
) -> (bool, String) {
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(&exe)
        .args(["--ignored", "--exact", child, "--nocapture"])
        .env(flag, "1")
        .env("LD_LIBRARY_PATH", lib_dir)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap_or_else(|e| panic!("cannot run the child {child}: {e}"));
    (out.status.success(), output_text(&out))
}

/// Runs `exe args` with a clean loader path; returns its output.
pub fn run(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()))
}

/// Runs and asserts success; returns stdout.
pub fn run_ok(exe: &Path, args: &[&str]) -> String {
    let out = run(exe, args);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({:?}):\n{}{}",
        exe.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds the C file `source` (a path in the crate) with `cc -shared -fPIC -O2` and `extra`
/// into `dir/name`, and returns `dir`; fails the test with cc's output when it does not build.
pub fn c_shared_library(source: &str, dir: &Path, name: &str, extra: &[String]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("scratch folder");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(dir.join(name))
        .args(extra)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(source))
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "cc {source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

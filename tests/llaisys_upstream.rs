//! Host-only: README "Use from llaisys", read from the README and run as written on a fresh copy
//! of the real upstream llaisys tree (`llaisys_tree::upstream`, the rule of scripts/upstream.sh),
//! for this build's link mode (the CUDA 12.9 build with the README's `--cuda12`), in an environment
//! with nothing but a fresh shell's PATH, cargo, and a venv whose Python sees torch and
//! safetensors (.deps/python, from `bootstrap.sh --llaisys-python`), on a machine without a
//! driver (the no-driver stand-in first on LD_LIBRARY_PATH, `support::no_driver`):
//! - the build succeeds, `libllaisys.so` defines llaisys's NVIDIA getter and exports no `cuda*`;
//! - `xmake install` and the rest change nothing outside the tree (and its HOME);
//! - upstream's `test/test_runtime.py --device cpu` passes, `--device nvidia` finds 0 devices and
//!   skips, and `llaisys.RuntimeAPI(DeviceType.NVIDIA).get_device_count()` answers 0 from the
//!   installed package with the tree's build/ removed (the package carries what it needs);
//! - the static CUDA 13 flow runs once more as an unprivileged user.
//!
//! The crate builds through xmake into `<this target dir>/tmp/llaisys-upstream-*/cargo-target`,
//! kept between runs, so a rerun only rebuilds what changed.

mod llaisys_tree;
mod support;

use llaisys_tree::{copy_tree, text, upstream, xmake_bin_dir};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::child;
use support::source_dir;

/// How long the README flow may take (a cold cargo build of the library and the xmake build of
/// upstream, on a busy machine).
const FLOW_LIMIT: Duration = Duration::from_secs(3600);

/// The user the unprivileged run uses (made with useradd when missing).
const USER: &str = "llaisys-ci";

/// The README's block after `<!-- llaisys-flow -->` (inside its ```sh fence).
fn readme_flow() -> String {
    let readme = std::fs::read_to_string(source_dir().join("README.md")).expect("README.md");
    let mut lines = readme
        .lines()
        .skip_while(|l| l.trim() != "<!-- llaisys-flow -->");
    assert!(
        lines.next().is_some(),
        "README.md has no <!-- llaisys-flow --> marker"
    );
    assert_eq!(
        lines.next().map(str::trim),
        Some("```sh"),
        "no ```sh after the marker"
    );
    let block: Vec<&str> = lines.take_while(|l| l.trim() != "```").collect();
    assert!(!block.is_empty(), "empty llaisys-flow block");
    block.join("\n")
}

/// The README block for `tree`, with the two placeholders the README names filled in and the
/// plug command's documented options for this build added.
fn flow_script(tree: &Path, plug_options: &[&str]) -> String {
    let flow = readme_flow();
    let plug_line = flow
        .lines()
        .find(|l| l.contains("scripts/plug-llaisys.sh"))
        .expect("the README flow runs scripts/plug-llaisys.sh");
    for o in plug_options {
        assert!(
            plug_line.contains(o),
            "the README's plug line does not mention {o}: {plug_line}"
        );
    }
    let mut script = String::from("set -euxo pipefail\n");
    for line in flow.lines() {
        // The checkout first: "/path/to/llaisys" is a prefix of it.
        let mut l = line
            .replace(
                "/path/to/llaisys-nvidia",
                source_dir().to_str().expect("utf-8"),
            )
            .replace("/path/to/llaisys", tree.to_str().expect("utf-8"));
        if line.contains("scripts/plug-llaisys.sh") && !plug_options.is_empty() {
            l = l.replacen(
                "plug-llaisys.sh",
                &format!("plug-llaisys.sh {}", plug_options.join(" ")),
                1,
            );
        }
        script.push_str(&l);
        script.push('\n');
        // `set -e` does not stop at a failed command inside `a && b && c`: a user would see it
        // fail, so must the test.
        if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            script
                .push_str("s=$?; [ \"$s\" = 0 ] || { echo \"flow: exit $s\" >&2; exit \"$s\"; }\n");
        }
    }
    script
}

/// One run's folders; the same paths every time (build.rs reruns when PATH changes, and PATH
/// names the venv), the tree, HOME and venv made fresh.
struct Layout {
    root: PathBuf,
    tree: PathBuf,
    home: PathBuf,
    venv: PathBuf,
    cargo_target: PathBuf,
}

fn layout(name: &str) -> Layout {
    let root = support::tmp_dir().join(format!("llaisys-upstream-{name}"));
    Layout {
        tree: root.join("tree"),
        home: root.join("home"),
        venv: root.join("venv"),
        cargo_target: root.join("cargo-target"),
        root,
    }
}

fn real_python() -> PathBuf {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", "import sys; print(sys.executable)"]);
    PathBuf::from(child::run(&mut cmd, child::DEFAULT_LIMIT).ok().trim())
}

fn deps_python() -> PathBuf {
    let d = source_dir().join(".deps/python");
    assert!(
        d.join("torch").is_dir() && d.join("safetensors").is_dir() && d.join("pip").is_dir(),
        "{} lacks torch/safetensors/pip: run `bash scripts/bootstrap.sh --llaisys-python`",
        d.display()
    );
    d
}

/// Fresh tree, HOME and venv (`python`, `pip` in its bin/).
fn prepare(l: &Layout, upstream: &Path) {
    copy_tree(upstream, &l.tree);
    for d in [&l.home, &l.venv] {
        let _ = std::fs::remove_dir_all(d);
    }
    std::fs::create_dir_all(&l.home).expect("home");
    std::fs::create_dir_all(&l.cargo_target).expect("cargo target");
    let mut venv = Command::new(real_python());
    venv.args(["-m", "venv", "--without-pip"]).arg(&l.venv);
    child::run(&mut venv, child::DEFAULT_LIMIT).ok();
    // pip itself comes from .deps/python (PYTHONPATH); it installs into the venv.
    let pip = l.venv.join("bin/pip");
    support::write_script(
        &pip,
        "#!/bin/sh\nexec \"$(dirname \"$0\")/python\" -m pip \"$@\"\n",
    );
}

/// A command in a fresh shell's environment: nothing of this test's, only PATH (the venv,
/// cargo, the system folders), HOME, where rustup and cargo live, where cargo builds, the
/// Python packages upstream needs, offline, and the no-driver stand-in on LD_LIBRARY_PATH.
fn fresh_env(cmd: &mut Command, l: &Layout) {
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let cargo = PathBuf::from(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    let cargo_dir = cargo
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(format!("{real_home}/.cargo/bin")));
    let path = format!(
        "{}:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        l.venv.join("bin").display(),
        cargo_dir.display()
    );
    let var = |k: &str, d: String| std::env::var(k).unwrap_or(d);
    cmd.env_clear()
        .env("PATH", path)
        .env("HOME", &l.home)
        .env("LANG", "C.UTF-8")
        .env(
            "CARGO_HOME",
            var("CARGO_HOME", format!("{real_home}/.cargo")),
        )
        .env(
            "RUSTUP_HOME",
            var("RUSTUP_HOME", format!("{real_home}/.rustup")),
        )
        .env("CARGO_TARGET_DIR", &l.cargo_target)
        .env("PYTHONPATH", deps_python())
        .env("PIP_NO_DEPS", "1")
        .env("PIP_NO_INDEX", "1")
        .env("PIP_NO_BUILD_ISOLATION", "0")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_NO_CACHE_DIR", "1")
        .env("LD_LIBRARY_PATH", support::no_driver::loader_dir())
        .current_dir(&l.home);
}

/// Runs the README flow in `l.tree`, as this process's user or, with `as_user`, through
/// setpriv as that user (who can read everything, as any user can read a system's toolchain,
/// and write only what it owns).
fn run_flow(l: &Layout, plug_options: &[&str], as_user: Option<&str>) -> String {
    let script = flow_script(&l.tree, plug_options);
    let mut cmd = match as_user {
        None => Command::new("bash"),
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={u}"),
                &format!("--regid={u}"),
                "--clear-groups",
                "--inh-caps=+dac_read_search",
                "--ambient-caps=+dac_read_search",
                "bash",
            ]);
            c
        }
    };
    fresh_env(&mut cmd, l);
    if as_user.is_some() {
        // The toolchain here lives under root's HOME (mode 700): rustc's own lld there cannot
        // be run by that user, so should cargo relink, it links with the system's ld, as a user
        // with a toolchain of their own would.
        cmd.env("RUSTFLAGS", "-Clinker-features=-lld");
    }
    let started = Instant::now();
    cmd.arg("-c").arg(&script);
    let out = child::run(&mut cmd, FLOW_LIMIT);
    let log = text(&out);
    let who = as_user.unwrap_or("self");
    std::fs::write(l.root.join(format!("flow-{who}.log")), &log).expect("write the flow's log");
    println!(
        "README flow ({}{}) took {:.0} s",
        if plug_options.is_empty() {
            "static".to_string()
        } else {
            plug_options.join(" ")
        },
        as_user.map(|u| format!(", as {u}")).unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.success(),
        "README flow failed ({}):\n{script}\n---\n{log}",
        out.end
    );
    // Upstream's runtime test: CPU passes, NVIDIA finds no device (no driver) and skips.
    for want in [
        "Found 1 cpu devices",
        "Found 0 nvidia devices",
        "Skipped",
        "xmake install",
    ] {
        assert!(
            log.contains(want),
            "no '{want}' in the flow's output:\n{log}"
        );
    }
    assert_eq!(log.matches("Test passed!").count(), 2, "{log}");
    assert!(log.contains("install ok!"), "{log}");
    log
}

fn tool(program: &str, args: &[&str]) -> String {
    child::run(Command::new(program).args(args), child::DEFAULT_LIMIT).ok()
}

const GETTER: &str = "_ZN7llaisys6device6nvidia13getRuntimeAPIEv";

fn check_library(l: &Layout, dynamic: bool) {
    let lib = l.tree.join("build/linux/x86_64/release/libllaisys.so");
    let lib_s = lib.to_str().unwrap();
    let defined = tool("nm", &["-D", "--defined-only", lib_s]);
    assert!(defined.contains("llaisysGetRuntimeAPI"), "{defined}");
    let cuda: Vec<&str> = defined
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("cuda"))
        .collect();
    assert!(
        cuda.is_empty(),
        "libllaisys.so exports cudart symbols: {cuda:?}"
    );
    let undefined = tool("nm", &["-D", "--undefined-only", lib_s]);
    assert!(
        !undefined.contains(GETTER),
        "the getter is undefined:\n{undefined}"
    );
    // The getter is defined by our adapter, linked in (upstream's release build hides it).
    let adapter = l
        .tree
        .join("build/linux/x86_64/release/libllaisys-device-nvidia.a");
    let adapter_syms = tool("nm", &["--defined-only", adapter.to_str().unwrap()]);
    assert!(
        adapter_syms.contains(&format!("T {GETTER}")),
        "{adapter_syms}"
    );
    let dyn_section = tool("readelf", &["-d", lib_s]);
    let needs = |name: &str| {
        dyn_section
            .lines()
            .any(|l| l.contains("NEEDED") && l.contains(name))
    };
    assert!(
        !needs("libcudart"),
        "libllaisys.so needs a shared libcudart:\n{dyn_section}"
    );
    assert_eq!(needs("libllaisys_nvidia"), dynamic, "{dyn_section}");
    if dynamic {
        let runpath = dyn_section
            .lines()
            .find(|l| l.contains("RUNPATH") || l.contains("RPATH"))
            .unwrap_or_else(|| panic!("no RUNPATH:\n{dyn_section}"));
        assert!(runpath.contains("[$ORIGIN"), "{runpath}");
        assert!(
            !runpath.contains(l.cargo_target.to_str().unwrap()),
            "libllaisys.so finds us in cargo's target folder: {runpath}"
        );
    }
}

/// After the flow, with the tree's build/ and lib/ gone: the installed package alone answers,
/// loading its own copies (and, dynamic, our cdylib from beside it).
fn check_installed_package(l: &Layout, dynamic: bool) {
    for d in ["build", "lib"] {
        std::fs::remove_dir_all(l.tree.join(d)).unwrap_or_else(|e| panic!("rm {d}: {e}"));
    }
    let probe = "import llaisys\n\
                 api = llaisys.RuntimeAPI(llaisys.DeviceType.NVIDIA)\n\
                 print('count', api.get_device_count())\n\
                 print('cpu', llaisys.RuntimeAPI(llaisys.DeviceType.CPU).get_device_count())\n\
                 for line in open('/proc/self/maps'):\n\
                 \x20   p = line.split()[-1]\n\
                 \x20   if 'libllaisys' in p or 'libcudart' in p: print('map', p)\n";
    let mut cmd = Command::new(l.venv.join("bin/python"));
    fresh_env(&mut cmd, l);
    let out = child::run(cmd.args(["-c", probe]), child::DEFAULT_LIMIT);
    let log = text(&out);
    assert!(out.success(), "{}", out.report());
    assert!(log.contains("count 0\n"), "no driver, no devices: {log}");
    assert!(log.contains("cpu 1\n"), "{log}");
    let maps: BTreeSet<&str> = log.lines().filter_map(|l| l.strip_prefix("map ")).collect();
    let site = l.venv.join("lib");
    let from_venv = |name: &str| {
        maps.iter()
            .any(|p| p.ends_with(name) && p.starts_with(site.to_str().unwrap()))
    };
    assert!(
        from_venv("/libllaisys.so"),
        "libllaisys.so not loaded from the venv: {maps:?}"
    );
    if dynamic {
        assert!(
            from_venv("/libllaisys_nvidia.so"),
            "our cdylib not from the venv: {maps:?}"
        );
        assert!(maps.iter().any(|p| p.contains("libcudart.so.")), "{maps:?}");
    } else {
        assert!(
            !maps
                .iter()
                .any(|p| p.contains("libllaisys_nvidia") || p.contains("libcudart")),
            "static build loads a shared library of ours or cudart's: {maps:?}"
        );
    }
}

/// (path, size, mtime) of everything under /usr/local, xmake's default install prefix.
fn usr_local() -> BTreeSet<(PathBuf, u64, i64)> {
    fn walk(d: &Path, out: &mut BTreeSet<(PathBuf, u64, i64)>) {
        let Ok(entries) = std::fs::read_dir(d) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            use std::os::unix::fs::MetadataExt;
            out.insert((p.clone(), m.len(), m.mtime()));
            if m.is_dir() {
                walk(&p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(Path::new("/usr/local"), &mut out);
    out
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn ensure_user() {
    if child::run(Command::new("id").arg(USER), child::DEFAULT_LIMIT).success() {
        return;
    }
    tool(
        "useradd",
        &[
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            USER,
        ],
    );
}

fn chown(user: &str, paths: &[&Path]) {
    let mut args = vec!["-R".to_string(), format!("{user}:{user}")];
    args.extend(paths.iter().map(|p| p.to_str().unwrap().to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    tool("chown", &refs);
}

#[test]
fn readme_llaisys_flow_builds_upstream_and_runs_its_tests() {
    let Some(up) = upstream() else { return };
    xmake_bin_dir();
    deps_python();
    let dynamic = llaisys_nvidia::runtime::build::LINK_MODE == "dynamic";
    let cuda12 = llaisys_nvidia::runtime::build::CUDART_VERSION.starts_with("12");
    let mut options = Vec::new();
    if dynamic {
        options.extend(["--cudart", "dynamic"]);
    }
    if cuda12 {
        options.push("--cuda12");
    }
    let name = format!(
        "{}{}",
        llaisys_nvidia::runtime::build::LINK_MODE,
        if cuda12 { "-cuda12" } else { "" }
    );
    let l = layout(&name);
    prepare(&l, &up);
    let before = usr_local();
    let log = run_flow(&l, &options, None);
    let changed: Vec<_> = before
        .symmetric_difference(&usr_local())
        .take(10)
        .cloned()
        .collect();
    assert!(
        changed.is_empty(),
        "the flow changed /usr/local: {changed:?}\n{log}"
    );
    let rule = std::fs::read_to_string(l.tree.join("xmake/nvidia.lua")).unwrap();
    if cuda12 {
        assert!(rule.contains(".deps/cuda12\""), "{rule}");
    }
    check_library(&l, dynamic);
    check_installed_package(&l, dynamic);

    // Once as an unprivileged user: the static CUDA 13 flow again, on a tree, HOME, venv and
    // cargo folder it owns (cargo's build from above is reused: that user could not link Rust
    // code with a toolchain under root's HOME, and needs not).
    if dynamic || cuda12 {
        return;
    }
    if !is_root() {
        println!("this run was already unprivileged: no second run");
        return;
    }
    ensure_user();
    prepare(&l, &up);
    chown(USER, &[&l.root]);
    run_flow(&l, &options, Some(USER));
    let owner = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(l.tree.join("python/llaisys/libllaisys/libllaisys.so"))
            .expect("installed libllaisys.so")
            .uid()
    };
    assert_ne!(owner, 0, "the unprivileged run's library belongs to root");
}

//! Host-only: the plug command (scripts/plug-llaisys.sh) and the xmake rule (csrc/xmake/nvidia.lua)
//! on copies of the real upstream llaisys tree, without building: plugging puts the adapter and
//! the rule in place and the stub away, is idempotent, switches modes, refuses what is not a
//! llaisys tree, and `--undo` gives the tree back byte for byte (a user's own files included);
//! xmake then sees `llaisys-device` depend on `llaisys-device-nvidia` with upstream's xmake.lua
//! unchanged. The build and the Python tests: tests/llaisys_upstream.rs.

mod llaisys_tree;
mod support;

use llaisys_tree::{
    copy_tree, differences, plug, plug_ok, snapshot, text, upstream, xmake_bin_dir,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::child::{self, Finished};
use support::source_dir;

const STUB: &str = "src/device/nvidia/nvidia_runtime_api.cu";
const ADAPTER: &str = "src/device/nvidia/nvidia_runtime_api.cpp";
const RULE: &str = "xmake/nvidia.lua";

/// A fresh copy of the upstream tree for one test, or None (said why) outside CI.
fn tree(name: &str) -> Option<PathBuf> {
    let up = upstream()?;
    let t = support::tmp_dir().join("plug").join(name);
    copy_tree(&up, &t);
    Some(t)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn read(t: &Path, rel: &str) -> String {
    std::fs::read_to_string(t.join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

#[test]
fn plug_twice_then_undo_gives_back_the_tree() {
    let Some(t) = tree("twice") else { return };
    let before = snapshot(&t);
    assert!(t.join(STUB).is_file(), "upstream tree without the stub?");
    let out = plug_ok(&[s(&t)]);
    // The stub is away, kept for --undo; the adapter is ours; the rule names this checkout.
    assert!(!t.join(STUB).exists());
    assert_eq!(
        std::fs::read(t.join(".llaisys-nvidia/saved").join(STUB)).unwrap(),
        before[Path::new(STUB)]
    );
    assert_eq!(
        read(&t, ADAPTER),
        std::fs::read_to_string(source_dir().join("csrc/nvidia_runtime_api.cpp")).unwrap()
    );
    let rule = read(&t, RULE);
    let crate_line = format!("local crate = \"{}\"", source_dir().display());
    assert!(rule.contains(&crate_line), "{rule}");
    assert!(rule.contains("local cudart = \"static\""), "{rule}");
    assert!(
        !rule.contains("@LLAISYS_NVIDIA_"),
        "placeholders left:\n{rule}"
    );
    // Upstream's own files are untouched.
    for f in ["xmake.lua", "xmake/cpu.lua", "src/device/runtime_api.hpp"] {
        assert_eq!(
            std::fs::read(t.join(f)).unwrap(),
            before[Path::new(f)],
            "{f} changed"
        );
    }
    // It says what to run next, with the variables a fresh shell needs.
    for want in [
        "xmake f --nv-gpu=y && xmake && xmake install",
        "pip install ./python",
        "--undo",
    ] {
        assert!(out.contains(want), "no '{want}' in:\n{out}");
    }
    if unsafe_is_root() {
        assert!(out.contains("export XMAKE_ROOT=y"), "{out}");
    }
    // Idempotent: a second plug changes nothing.
    let once = snapshot(&t);
    plug_ok(&[s(&t)]);
    assert_eq!(differences(&once, &snapshot(&t)), Vec::<String>::new());
    // --undo: byte for byte the tree we started from.
    let out = plug_ok(&["--undo", s(&t)]);
    assert!(out.contains("taken out"), "{out}");
    assert_eq!(differences(&before, &snapshot(&t)), Vec::<String>::new());
    // A second --undo has nothing to undo and says so.
    let again = plug(&["--undo", s(&t)]);
    assert!(!again.success());
    assert!(text(&again).contains("nothing to undo"), "{}", text(&again));
}

fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn plug_switches_modes_and_cuda_root() {
    let Some(t) = tree("modes") else { return };
    let before = snapshot(&t);
    plug_ok(&["--cudart", "dynamic", s(&t)]);
    assert!(read(&t, RULE).contains("local cudart = \"dynamic\""));
    assert!(read(&t, ".llaisys-nvidia/plugged").contains("cudart dynamic"));
    // The CUDA 12.9 build, for drivers older than r580: the root is written into the rule.
    plug_ok(&["--cuda12", s(&t)]);
    let rule = read(&t, RULE);
    let cuda12 = source_dir().join(".deps/cuda12");
    let want = format!("local cuda_home = \"{}\"", cuda12.display());
    assert!(rule.contains(&want), "{rule}");
    assert!(rule.contains("local cudart = \"static\""), "{rule}");
    // Back to the default: no CUDA root of ours, static.
    plug_ok(&[s(&t)]);
    assert!(read(&t, RULE).contains("local cuda_home = \"\""));
    // A dynamic install's cdylib and a loaded install's runtimes do not survive a switch to
    // static (they would be installed).
    std::fs::create_dir_all(t.join("lib")).unwrap();
    let old = [
        "lib/libllaisys_nvidia.so",
        "lib/libllaisys_nvidia_cudart13.so",
    ];
    for f in old {
        std::fs::write(t.join(f), b"old").unwrap();
    }
    plug_ok(&[s(&t)]);
    for f in old {
        assert!(!t.join(f).exists(), "{f}");
    }
    // The loaded mode: our staticlib inside libllaisys.so (no cdylib installed either), built
    // with the feature of that name.
    std::fs::write(t.join("lib/libllaisys_nvidia.so"), b"old").unwrap();
    plug_ok(&["--cudart", "loaded", s(&t)]);
    let rule = read(&t, RULE);
    assert!(rule.contains("local cudart = \"loaded\""), "{rule}");
    assert!(read(&t, ".llaisys-nvidia/plugged").contains("cudart loaded"));
    assert!(!t.join("lib/libllaisys_nvidia.so").exists());
    std::fs::remove_dir(t.join("lib")).unwrap();
    plug_ok(&["--undo", s(&t)]);
    assert_eq!(differences(&before, &snapshot(&t)), Vec::<String>::new());
}

#[test]
fn plug_refuses_what_is_not_a_llaisys_tree() {
    let empty = support::tmp_dir().join("plug/empty");
    let _ = std::fs::remove_dir_all(&empty);
    std::fs::create_dir_all(&empty).unwrap();
    for args in [
        vec![s(&empty)],
        vec![source_dir().to_str().unwrap()],
        vec!["--cudart", "shared", s(&empty)],
        vec!["--no-such-option", s(&empty)],
        vec![s(&empty), s(&empty)],
    ] {
        let out = plug(&args);
        assert!(!out.success(), "{args:?} succeeded:\n{}", text(&out));
        assert!(
            text(&out).contains("plug-llaisys: "),
            "{args:?}: {}",
            text(&out)
        );
    }
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "wrote into {empty:?}"
    );
    let out = plug(&[s(&empty)]);
    assert!(
        text(&out).contains("is not a llaisys tree"),
        "{}",
        text(&out)
    );
    let Some(t) = tree("refuse-bad-cuda") else {
        return;
    };
    let before = snapshot(&t);
    let out = plug(&["--cuda-home", s(&empty), s(&t)]);
    assert!(!out.success());
    assert!(
        text(&out).contains("no include/cuda_runtime.h"),
        "{}",
        text(&out)
    );
    assert_eq!(differences(&before, &snapshot(&t)), Vec::<String>::new());
}

#[test]
fn undo_gives_back_a_users_own_rule_and_refuses_edited_files() {
    let Some(t) = tree("users-rule") else { return };
    // A user who had written their own xmake/nvidia.lua (upstream's README invites it).
    std::fs::write(t.join(RULE), "-- my own CUDA rule\n").unwrap();
    let before = snapshot(&t);
    plug_ok(&[s(&t)]);
    assert!(read(&t, RULE).contains("llaisys-nvidia"));
    assert_eq!(
        read(&t, &format!(".llaisys-nvidia/saved/{RULE}")),
        "-- my own CUDA rule\n"
    );
    // An edit to a plugged file is not thrown away by --undo.
    let edited = format!("{}-- my edit\n", read(&t, ADAPTER));
    std::fs::write(t.join(ADAPTER), &edited).unwrap();
    let plugged = snapshot(&t);
    let out = plug(&["--undo", s(&t)]);
    assert!(!out.success());
    assert!(
        text(&out).contains("was changed after plugging"),
        "{}",
        text(&out)
    );
    assert_eq!(differences(&plugged, &snapshot(&t)), Vec::<String>::new());
    // With the edit taken back, --undo gives back the user's own rule and the stub.
    std::fs::write(t.join(ADAPTER), edited.replace("-- my edit\n", "")).unwrap();
    plug_ok(&["--undo", s(&t)]);
    assert_eq!(differences(&before, &snapshot(&t)), Vec::<String>::new());
}

fn xmake(tree: &Path, home: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new(xmake_bin_dir().join("xmake"));
    cmd.args(args)
        .current_dir(tree)
        .env("HOME", home)
        .env("XMAKE_ROOT", "y")
        .env_remove("LLAISYS_NVIDIA_DIR");
    child::run(&mut cmd, child::DEFAULT_LIMIT)
}

#[test]
fn xmake_sees_llaisys_device_depend_on_the_nvidia_target() {
    let Some(t) = tree("show") else { return };
    let home = support::tmp_dir().join("plug/show-home");
    std::fs::create_dir_all(&home).unwrap();
    // A hand copy of the rule that nobody wrote a checkout into fails with the fix in its message.
    std::fs::copy(source_dir().join("csrc/xmake/nvidia.lua"), t.join(RULE)).unwrap();
    let out = xmake(&t, &home, &["f", "--nv-gpu=y", "-y"]);
    assert!(!out.success(), "{}", text(&out));
    assert!(
        text(&out).contains("run llaisys-nvidia's scripts/plug-llaisys.sh"),
        "{}",
        text(&out)
    );
    std::fs::remove_file(t.join(RULE)).unwrap();
    plug_ok(&[s(&t)]);
    let ok = |args: &[&str]| {
        let out = xmake(&t, &home, args);
        assert!(out.success(), "xmake {args:?}:\n{}", text(&out));
        text(&out)
    };
    ok(&["f", "--nv-gpu=y", "-y"]);
    let device = ok(&["show", "-t", "llaisys-device"]);
    let deps: Vec<&str> = device
        .lines()
        .skip_while(|l| l.trim() != "deps:")
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("->"))
        .collect();
    assert!(
        deps.iter().any(|l| l.contains("llaisys-device-nvidia")),
        "llaisys-device does not depend on llaisys-device-nvidia:\n{device}"
    );
    let nvidia = ok(&["show", "-t", "llaisys-device-nvidia"]);
    assert!(nvidia.contains("src/device/nvidia/*.cpp"), "{nvidia}");
    assert!(
        nvidia.contains("--exclude-libs,libllaisys_nvidia.a"),
        "{nvidia}"
    );
    // Without --nv-gpu upstream's build is as it was: no NVIDIA target at all.
    ok(&["f", "--nv-gpu=n", "-y"]);
    let device = ok(&["show", "-t", "llaisys-device"]);
    assert!(!device.contains("llaisys-device-nvidia"), "{device}");
}

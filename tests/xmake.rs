//! Host-only: the xmake integration (csrc/xmake/nvidia.lua) builds a fixture of the llaisys tree
//! with `xmake f --nv-gpu=y && xmake`, as a llaisys user would: the rule runs cargo, links this
//! crate into the shared `libllaisys.so`, which exports its own symbols and none of cudart's, and
//! answers through the core's dispatch. xmake comes from the bootstrap (.deps/xmake).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{compile, run_ok, scratch, tests_dir};

fn xmake() -> PathBuf {
    let x = Path::new(env!("CARGO_MANIFEST_DIR")).join(".deps/xmake/bin/xmake");
    assert!(
        x.is_file(),
        "{} missing: run `bash scripts/bootstrap.sh` (installs xmake-wheel)",
        x.display()
    );
    x
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("entry");
        let dst = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&dst).expect("mkdir");
            copy_tree(&entry.path(), &dst);
        } else {
            std::fs::copy(entry.path(), &dst).expect("copy");
        }
    }
}

#[test]
fn llaisys_builds_with_our_xmake_rule_and_answers() {
    let mode = llaisys_nvidia::runtime::build::LINK_MODE;
    let tree = scratch("xmake-llaisys");
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::create_dir_all(&tree).expect("tree");
    copy_tree(&tests_dir().join("fixtures/llaisys"), &tree);
    let csrc = Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc");
    std::fs::create_dir_all(tree.join("xmake")).expect("mkdir");
    std::fs::create_dir_all(tree.join("src/device/nvidia")).expect("mkdir");
    std::fs::copy(csrc.join("xmake/nvidia.lua"), tree.join("xmake/nvidia.lua")).expect("copy");
    std::fs::copy(
        csrc.join("nvidia_runtime_api.cpp"),
        tree.join("src/device/nvidia/nvidia_runtime_api.cpp"),
    )
    .expect("copy");
    // The rule's cargo build goes to a target folder of this test (release profile).
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("xmake-cargo-{mode}"));
    let xm = |args: &[&str]| {
        let out = Command::new(xmake())
            .args(args)
            .current_dir(&tree)
            .env("XMAKE_ROOT", "y")
            .env("LLAISYS_NVIDIA_DIR", env!("CARGO_MANIFEST_DIR"))
            .env("LLAISYS_NVIDIA_FEATURE", mode)
            .env("CARGO_TARGET_DIR", &target)
            .env(
                "CARGO",
                std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()),
            )
            .output()
            .expect("run xmake");
        assert!(
            out.status.success(),
            "xmake {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    xm(&["f", "--nv-gpu=y", "-y", "-c"]);
    xm(&["-y"]);
    let lib = tree.join("build/linux/x86_64/release/libllaisys.so");
    assert!(lib.is_file(), "no {}", lib.display());
    let syms = run_ok(
        Path::new("nm"),
        &["-D", "--defined-only", lib.to_str().unwrap()],
    );
    assert!(syms.contains("llaisysGetRuntimeAPI"), "{syms}");
    let leaked: Vec<&str> = syms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("cuda"))
        .collect();
    assert!(
        leaked.is_empty(),
        "libllaisys.so exports cudart symbols: {leaked:?}"
    );
    // A program of the core's users: the NVIDIA device count through the core's own dispatch.
    let main = tree.join("main.c");
    std::fs::write(
        &main,
        "#include <stdio.h>\nint llaisysFixtureNvidiaDeviceCount(void);\n\
         int main(void) { printf(\"%d\\n\", llaisysFixtureNvidiaDeviceCount()); return 0; }\n",
    )
    .unwrap();
    let exe = tree.join("main");
    let libdir = lib.parent().unwrap();
    let mut cmd = Command::new("cc");
    cmd.arg(&main)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", libdir.display()))
        .arg("-lllaisys")
        .arg(format!("-Wl,-rpath,{}", libdir.display()));
    compile(cmd);
    let expected = llaisys_nvidia::runtime::device_count().unwrap_or(0);
    assert_eq!(run_ok(&exe, &[]).trim(), expected.to_string());
}

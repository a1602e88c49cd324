//! Host-only: a clone with nothing beside it passes its own tests. The files of this checkout
//! (`git ls-files`, untracked files that git does not ignore included) are copied to
//! `<tmp>/clone/`, with nothing else in `<tmp>` (no `../shared`), and there
//! `cargo test --offline --no-default-features --features dynamic --test bench_fake --test c_link
//! --test discovery` runs (the dynamic build: tests/bench_fake.rs exists only there) with `CI`,
//! `LLAISYS_UPSTREAM_DIR` and the test harness's own variables removed. It must exit 0, run tests
//! in each of the three binaries, and the tests that need the upstream llaisys tree must say
//! they skipped and why. The clone's `.deps` links to this checkout's (CUDA, libclang, nccl.h:
//! no second bootstrap), without `.deps/llaisys-upstream`; its build goes to
//! `<target>/standalone`, kept between runs (a cold build and run took 70 s on 2 cores, a
//! rerun 30 s: only what changed is compiled again).
//!
//! Also: scripts/upstream.sh and `llaisys_tree::find_upstream` apply the same rule.

mod llaisys_tree;
mod support;

use llaisys_tree::{find_upstream_in, skipped, FETCH_COMMAND};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::child;
use support::source_dir;

/// The child's build and tests (a cold build and run took 70 s on 2 cores).
const LIMIT: Duration = Duration::from_secs(900);

/// The test binaries the clone runs: the bench tools' (stand-in cudart), the C/C++ link tests
/// (one of which needs the upstream tree), the build script's discovery.
const TESTS: &[&str] = &["bench_fake", "c_link", "discovery"];

/// The test in `TESTS` that needs the upstream llaisys tree.
const NEEDS_UPSTREAM: &str = "header_coexists_with_upstream_llaisys_headers_in_either_order";

/// The files a clone of this working tree has, relative to `root`, or None (said why) without
/// git or outside a git checkout.
fn checkout_files(root: &Path) -> Option<Vec<PathBuf>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output();
    let why = match out {
        Ok(o) if o.status.success() => {
            let files: Vec<PathBuf> = o
                .stdout
                .split(|&b| b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
                .filter(|p| root.join(p).is_file()) // deleted but not yet committed
                .collect();
            if files.iter().any(|p| p == Path::new("Cargo.toml")) {
                return Some(files);
            }
            // An enclosing repository that ignores this folder lists nothing of it.
            format!(
                "`git ls-files` lists no Cargo.toml in {} (not a checkout of this crate)",
                root.display()
            )
        }
        Ok(o) => format!(
            "`git ls-files` failed in {} (not a git checkout?): {}",
            root.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("git is not installed ({e})"),
    };
    // Without git there is no list of the files a clone has; copying everything would carry
    // build outputs and whatever lies around.
    skipped(&why);
    None
}

fn copy_files(root: &Path, files: &[PathBuf], to: &Path) {
    for rel in files {
        let dst = to.join(rel);
        std::fs::create_dir_all(dst.parent().expect("file in a folder"))
            .unwrap_or_else(|e| panic!("mkdir for {}: {e}", dst.display()));
        let src = root.join(rel);
        std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", rel.display()));
        // The checkout's times: cargo then finds the clone's last build (same place) fresh
        // where the sources did not change, and rebuilds only what did.
        let modified = std::fs::metadata(&src)
            .and_then(|m| m.modified())
            .expect("mtime");
        std::fs::File::options()
            .write(true)
            .open(&dst)
            .and_then(|f| f.set_modified(modified))
            .unwrap_or_else(|e| panic!("set the time of {}: {e}", dst.display()));
    }
}

/// `clone/.deps`: a link to each of this checkout's `.deps/*` but the upstream tree (which
/// `bash scripts/upstream.sh` fetched there, if it did) and a fetch's leftovers.
fn link_deps(root: &Path, clone: &Path) {
    let deps = clone.join(".deps");
    std::fs::create_dir_all(&deps).expect("mkdir .deps");
    let Ok(entries) = std::fs::read_dir(root.join(".deps")) else {
        return; // no bootstrap here: the clone's build says what is missing
    };
    for e in entries {
        let e = e.expect("dir entry");
        let name = e.file_name();
        if name.to_string_lossy().starts_with("llaisys-upstream") {
            continue;
        }
        std::os::unix::fs::symlink(e.path(), deps.join(&name)).expect("symlink into .deps");
    }
}

/// This build's target folder (the parent of cargo's tmp folder for integration tests).
fn target_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .to_path_buf()
}

/// The `passed` count of each `test result:` line.
fn passed_counts(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .map(|rest| {
            rest.split(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .expect("test result: ok. N passed")
        })
        .collect()
}

#[test]
fn a_clone_with_nothing_beside_it_passes_its_host_tests() {
    use llaisys_nvidia::runtime::build::{CUDART_VERSION, LINK_MODE};
    if LINK_MODE != "static" || CUDART_VERSION.starts_with("12") {
        // The clone's build is the same whatever this one's: once per suite is enough.
        skipped("runs in the default build (static, CUDA 13) only");
        return;
    }
    let root = source_dir();
    let Some(files) = checkout_files(&root) else {
        return;
    };
    // One place, so that the next run's cargo finds this one's build of the clone.
    let tmp = support::tmp_dir().join("standalone");
    let _ = std::fs::remove_dir_all(&tmp);
    let clone = tmp.join("clone");
    copy_files(&root, &files, &clone);
    link_deps(&root, &clone);
    assert!(
        !tmp.join("shared").exists(),
        "{} exists: the clone must have no ../shared",
        tmp.join("shared").display()
    );

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut args = vec![
        "test",
        "--offline",
        "--no-default-features",
        "--features",
        "dynamic",
    ];
    for t in TESTS {
        args.extend(["--test", t]);
    }
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&clone).args(&args);
    // What a stranger's shell would not have: CI, our variables, the ones cargo set for this
    // test (a user's own CARGO_* settings stay); git stops at the clone (the folder it is in
    // may lie inside this checkout).
    const CARGO_SETS: &[&str] = &[
        "CARGO_PKG_",
        "CARGO_BIN_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
    ];
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let cargo_set = CARGO_SETS.iter().any(|p| k.starts_with(p));
        if k == "CI" || k.starts_with("LLAISYS_") || cargo_set {
            cmd.env_remove(&*k);
        }
    }
    cmd.env("CARGO_TARGET_DIR", target_root().join("standalone"))
        .env("GIT_CEILING_DIRECTORIES", &tmp);
    let run = child::run(&mut cmd, LIMIT);
    let text = run.text();
    println!(
        "standalone: `cargo {}` in {} took {:.0} s",
        args.join(" "),
        clone.display(),
        run.took.as_secs_f64()
    );
    // cargo names each binary on stderr, libtest counts on stdout, in the same order.
    let binaries = run.stderr.lines().filter_map(|l| {
        let l = l.trim_start().strip_prefix("Running ")?;
        Some(l.split(' ').next().unwrap_or(l))
    });
    let results = run.stdout.lines().filter(|l| l.starts_with("test result:"));
    for (binary, result) in binaries.zip(results) {
        println!("standalone:   {binary}: {result}");
    }
    assert!(run.success(), "{}", run.report());
    let passed = passed_counts(&run.stdout);
    assert!(
        passed.len() == TESTS.len() && passed.iter().all(|&n| n > 0),
        "each of {TESTS:?} must pass tests (passed: {passed:?}):\n{}",
        run.report()
    );
    let skip = text
        .lines()
        .find(|l| l.contains(&format!("skipped: {NEEDS_UPSTREAM}: ")))
        .unwrap_or_else(|| panic!("{NEEDS_UPSTREAM} printed no skip line:\n{}", run.report()));
    for said in ["no ../shared/llaisys-upstream", FETCH_COMMAND] {
        assert!(
            skip.contains(said),
            "the skip line does not say {said:?}: {skip}"
        );
    }
    println!(
        "standalone: {} passed; {}",
        passed.iter().sum::<u64>(),
        skip.trim()
    );
}

/// A fake upstream tree: the two files the rule looks for.
fn fake_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("src/device")).expect("mkdir");
    std::fs::write(dir.join("xmake.lua"), "").expect("write");
    std::fs::write(dir.join("src/device/runtime_api.hpp"), "").expect("write");
}

/// What `bash scripts/upstream.sh --find` answers in the checkout `clone` (with `var` as
/// LLAISYS_UPSTREAM_DIR, or unset), as the Rust rule answers: a folder or None.
fn script_finds(clone: &Path, var: Option<&Path>) -> Option<PathBuf> {
    let mut cmd = Command::new("bash");
    cmd.arg(clone.join("scripts/upstream.sh")).arg("--find");
    match var {
        Some(v) => cmd.env("LLAISYS_UPSTREAM_DIR", v),
        None => cmd.env_remove("LLAISYS_UPSTREAM_DIR"),
    };
    let out = child::run(&mut cmd, Duration::from_secs(30));
    match out.code() {
        Some(0) => Some(PathBuf::from(out.stdout.trim_end())),
        Some(1) => None,
        _ => panic!("{}", out.report()),
    }
}

#[test]
fn the_script_and_the_tests_find_the_same_upstream_tree() {
    let base = support::tmp_dir().join(format!("upstream-rule-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let clone = base.join("clone");
    std::fs::create_dir_all(clone.join("scripts")).expect("mkdir");
    std::fs::copy(
        source_dir().join("scripts/upstream.sh"),
        clone.join("scripts/upstream.sh"),
    )
    .expect("copy scripts/upstream.sh");
    let clone = clone.canonicalize().expect("canonical");
    let base = clone.parent().expect("parent").to_path_buf();
    let shared = base.join("shared/llaisys-upstream");
    let fetched = clone.join(".deps/llaisys-upstream");
    let elsewhere = base.join("elsewhere");
    let missing = base.join("missing");

    let check = |case: &str, var: Option<&Path>, want: Option<&Path>| {
        let rust = find_upstream_in(&clone, var.map(|v| v.as_os_str().to_owned())).ok();
        let script = script_finds(&clone, var);
        assert_eq!(rust.as_deref(), want, "{case}: the tests' rule");
        assert_eq!(script.as_deref(), want, "{case}: scripts/upstream.sh");
    };
    check("nothing anywhere", None, None);
    fake_tree(&fetched);
    check("only .deps", None, Some(&fetched));
    std::fs::create_dir_all(&shared).expect("mkdir");
    check("an empty ../shared tree", None, Some(&fetched));
    fake_tree(&shared);
    check("../shared and .deps", None, Some(&shared));
    fake_tree(&elsewhere);
    check("the variable first", Some(&elsewhere), Some(&elsewhere));
    check("the variable alone", Some(&missing), None);
    let _ = std::fs::remove_dir_all(&base);
}

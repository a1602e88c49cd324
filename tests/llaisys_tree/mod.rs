//! Shared by tests/xmake.rs, tests/llaisys_upstream.rs, tests/c_link.rs and tests/standalone.rs:
//! the real upstream llaisys tree (found by the rule of scripts/upstream.sh), fresh copies of it,
//! the plug command and xmake.
#![allow(dead_code)]

use crate::support::child::{self, Finished};
use crate::support::source_dir;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The command that fetches the tree, for the messages.
pub const FETCH_COMMAND: &str = "bash scripts/upstream.sh";

fn is_tree(dir: &Path) -> bool {
    dir.join("xmake.lua").is_file() && dir.join("src/device/runtime_api.hpp").is_file()
}

/// The upstream llaisys tree by the rule of scripts/upstream.sh (keep the two alike;
/// tests/standalone.rs compares them): `LLAISYS_UPSTREAM_DIR` when set (nothing else then),
/// else ../shared/llaisys-upstream beside this crate, else .deps/llaisys-upstream (what
/// `bash scripts/upstream.sh` fetches). Err: what is missing and what provides it.
pub fn find_upstream() -> Result<PathBuf, String> {
    find_upstream_in(&source_dir(), std::env::var_os("LLAISYS_UPSTREAM_DIR"))
}

/// `find_upstream` for the checkout `root`, with `var` as the value of `LLAISYS_UPSTREAM_DIR`.
pub fn find_upstream_in(root: &Path, var: Option<OsString>) -> Result<PathBuf, String> {
    if let Some(dir) = var {
        let dir = PathBuf::from(dir);
        if is_tree(&dir) {
            return Ok(dir);
        }
        return Err(format!(
            "no upstream llaisys tree at LLAISYS_UPSTREAM_DIR={} (no xmake.lua and \
             src/device/runtime_api.hpp there); point it at an unmodified llaisys checkout, or \
             unset it and run `{FETCH_COMMAND}`",
            dir.display()
        ));
    }
    for rel in ["../shared/llaisys-upstream", ".deps/llaisys-upstream"] {
        let dir = root.join(rel);
        if is_tree(&dir) {
            return Ok(dir.canonicalize().unwrap_or(dir));
        }
    }
    Err(format!(
        "no upstream llaisys tree (LLAISYS_UPSTREAM_DIR unset, no ../shared/llaisys-upstream \
         beside the checkout, no .deps/llaisys-upstream); `{FETCH_COMMAND}` fetches it (needs \
         github.com), or set LLAISYS_UPSTREAM_DIR to an unmodified llaisys checkout"
    ))
}

/// The unmodified upstream llaisys tree (`find_upstream`). Under CI (`CI=true`) a missing tree
/// fails the test; elsewhere the test prints a "skipped:" line naming what is missing and the
/// command that provides it, and gets `None` (the caller then ends).
pub fn upstream() -> Option<PathBuf> {
    match find_upstream() {
        Ok(dir) => Some(dir),
        Err(why) => {
            assert!(!under_ci(), "CI=true and {why}");
            skipped(&why);
            None
        }
    }
}

/// Prints "skipped: TEST: WHY" on the process's stderr itself, past libtest's capture (which
/// holds only what `print!`/`eprint!` write), so `cargo test` shows it beside the test's "ok"
/// (and scripts/test.sh's summary lists it).
pub fn skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().filter(|n| *n != "main").unwrap_or("test");
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {why}");
}

/// A fresh, writable copy of `from` at `to` (removed first).
pub fn copy_tree(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    copy_into(from, to);
}

fn copy_into(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("mkdir {}: {e}", to.display()));
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()))
    {
        let entry = entry.expect("dir entry");
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            copy_into(&src, &dst);
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
            let exec = entry.metadata().expect("metadata").permissions().mode() & 0o111 != 0;
            let mode = if exec { 0o755 } else { 0o644 };
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
    }
}

/// Every file under `dir` (relative path -> bytes), for comparing trees byte for byte.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let p = entry.expect("entry").path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).expect("under root").to_path_buf();
                out.insert(rel, std::fs::read(&p).expect("read file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The paths that differ between two snapshots (added, removed or changed).
pub fn differences(a: &BTreeMap<PathBuf, Vec<u8>>, b: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<String> {
    let mut d = Vec::new();
    for (p, v) in a {
        match b.get(p) {
            None => d.push(format!("only before: {}", p.display())),
            Some(w) if w != v => d.push(format!("changed: {}", p.display())),
            _ => {}
        }
    }
    for p in b.keys().filter(|p| !a.contains_key(*p)) {
        d.push(format!("only after: {}", p.display()));
    }
    d
}

/// Runs `bash scripts/plug-llaisys.sh ARGS` (not checked).
pub fn plug(args: &[&str]) -> Finished {
    let mut cmd = Command::new("bash");
    cmd.arg(source_dir().join("scripts/plug-llaisys.sh"))
        .args(args);
    child::run(&mut cmd, child::DEFAULT_LIMIT)
}

/// Runs the plug command and asserts it succeeded; returns its stdout.
#[track_caller]
pub fn plug_ok(args: &[&str]) -> String {
    plug(args).ok()
}

/// The bootstrap's xmake folder (.deps/xmake/bin).
pub fn xmake_bin_dir() -> PathBuf {
    let d = source_dir().join(".deps/xmake/bin");
    assert!(
        d.join("xmake").is_file(),
        "{} missing: run `bash scripts/bootstrap.sh` (installs xmake-wheel)",
        d.display()
    );
    d
}

/// Everything a process printed, without terminal colours.
pub fn text(out: &Finished) -> String {
    let s = out.text();
    let mut clean = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            clean.push(c);
        }
    }
    clean
}

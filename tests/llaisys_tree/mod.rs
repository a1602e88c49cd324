//! Shared by tests/xmake.rs and tests/llaisys_upstream.rs: the real upstream llaisys tree
//! (`LLAISYS_UPSTREAM_DIR`, default ../shared/llaisys-upstream beside this crate), fresh copies
//! of it, the plug command and xmake.
#![allow(dead_code)]

use crate::support::child::{self, Finished};
use crate::support::source_dir;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The unmodified upstream llaisys tree. Under CI (`CI=true`) a missing tree fails the test;
/// elsewhere the test says so plainly and returns `None` (the caller then ends).
pub fn upstream() -> Option<PathBuf> {
    let (dir, from) = match std::env::var_os("LLAISYS_UPSTREAM_DIR") {
        Some(d) => (PathBuf::from(d), "LLAISYS_UPSTREAM_DIR"),
        None => (
            source_dir().join("../shared/llaisys-upstream"),
            "the default ../shared/llaisys-upstream",
        ),
    };
    let ok = dir.join("xmake.lua").is_file() && dir.join("src/device/runtime_api.hpp").is_file();
    if ok {
        return Some(dir);
    }
    let msg = format!(
        "no llaisys tree at {} ({from}): set LLAISYS_UPSTREAM_DIR to an unmodified llaisys checkout",
        dir.display()
    );
    assert!(!under_ci(), "CI=true and {msg}");
    println!("skipped: {msg}");
    eprintln!("skipped: {msg}");
    None
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

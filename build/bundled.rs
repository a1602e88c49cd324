//! The `loaded` mode's own runtimes: for each CUDA major whose `libcudart_static.a` the build
//! found, a shared library `libllaisys_nvidia_cudart<major>.so` made of that archive, which
//! exports the runtime's `cuda*` functions under their own names. The library loads it first,
//! from beside itself (src/cudart/loaded.rs): NVIDIA's static runtime costs about 20-30 ns less per
//! call than its shared `libcudart.so` (docs/benchmark.md, "The link modes' cost per call").
//!
//! The archive's symbols are all hidden (it is meant to be linked into one program), so each
//! exported function is a one-instruction jump to the archive's own, renamed first with
//! `objcopy --redefine-syms` so the jump and the export can share the name. Needs `nm` and
//! `objcopy` (binutils, beside every GNU C toolchain) and an x86_64 or aarch64 target; without
//! them, or without the archive, no such library is made and the build says so (the library
//! then loads the system's runtimes only).

use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file name of the runtime made for `major` (src/cudart/loaded.rs's `bundled_file_name`).
pub fn file_name(major: u32) -> String {
    format!("libllaisys_nvidia_cudart{major}.so")
}

/// Prefix of the archive's functions once renamed.
const RENAMED: &str = "__llaisys_nvidia_archive_";

/// Makes the runtime of `major` from `archive` into `out_dir`; returns its path.
pub fn make(
    compiler: &cc::Tool,
    target: &str,
    major: u32,
    archive: &Path,
    out_dir: &Path,
) -> Result<PathBuf> {
    let jump = match target.split('-').next() {
        Some("x86_64") => "jmp",
        Some("aarch64") => "b",
        _ => bail!("no jump instruction known for the target {target}"),
    };
    println!("cargo:rerun-if-changed={}", archive.display());
    let dir = out_dir.join(format!("bundled-v{major}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let names = functions(compiler, archive)?;
    if names.is_empty() {
        bail!("{} defines no cuda* function", archive.display());
    }
    let mut map = String::new();
    let mut asm = String::from(".text\n");
    for n in &names {
        let _ = writeln!(map, "{n} {RENAMED}{n}");
        let _ = write!(
            asm,
            ".globl {n}\n.type {n},@function\n.p2align 4\n{n}:\n\t{jump} {RENAMED}{n}\n.size {n},.-{n}\n"
        );
    }
    asm.push_str(".section .note.GNU-stack,\"\",@progbits\n");
    let map_file = dir.join("renames.txt");
    let asm_file = dir.join("exports.S");
    let renamed = dir.join("libcudart_static_renamed.a");
    std::fs::write(&map_file, map).context("cannot write the renames")?;
    std::fs::write(&asm_file, asm).context("cannot write the exports")?;
    let mut objcopy = Command::new(tool(compiler, "objcopy"));
    objcopy
        .arg(format!("--redefine-syms={}", map_file.display()))
        .arg(archive)
        .arg(&renamed);
    run(&mut objcopy)?;
    let file = dir.join(file_name(major));
    let mut link = compiler.to_command();
    link.arg("-shared")
        .arg("-fPIC")
        .arg("-o")
        .arg(&file)
        .arg(&asm_file)
        .arg(&renamed)
        .arg(format!("-Wl,-soname,{}", file_name(major)))
        .args([
            "-Wl,--no-undefined",
            "-Wl,-z,now",
            "-Wl,-z,noexecstack",
            "-Wl,--exclude-libs,ALL",
            "-s",
            "-lpthread",
            "-ldl",
            "-lrt",
        ]);
    run(&mut link)?;
    let _ = std::fs::remove_file(&renamed);
    Ok(file)
}

/// The `cuda*` functions `archive` defines (hidden or not), per `nm`.
fn functions(compiler: &cc::Tool, archive: &Path) -> Result<Vec<String>> {
    let mut nm = Command::new(tool(compiler, "nm"));
    nm.arg("--defined-only").arg("-g").arg(archive);
    let text = run(&mut nm)?;
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && name.starts_with("cuda")).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// A binutils program of the C toolchain: what the compiler names (`gcc -print-prog-name`),
/// else the bare name on PATH.
fn tool(compiler: &cc::Tool, name: &str) -> PathBuf {
    let asked = compiler
        .to_command()
        .arg(format!("-print-prog-name={name}"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|p| !p.is_empty());
    PathBuf::from(asked.unwrap_or_else(|| name.to_string()))
}

fn run(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

//! The CUDA headers' `#define cudaX cudaX_vN` renames (CUDA 12.9: `cudaGetDeviceProperties` ->
//! `cudaGetDeviceProperties_v2`, `cudaStreamGetCaptureInfo` -> `__CUDART_API_PTSZ(..._v2)`),
//! resolved by the C preprocessor rather than read from the header text: what a C caller of the
//! same headers calls is then exactly what the crate links.
//!
//! Two passes with the C compiler the `cc` crate finds (CC, CFLAGS, TARGET): `-E -dM` over
//! wrapper.h lists every object-like macro named `cuda*`; a probe file that includes wrapper.h and
//! then names each of them behind a marker is preprocessed (`-E -P`), and a name whose expansion
//! is a single identifier `name_vN` is a rename. bindgen sees the versioned function; the crate
//! gets the plain name and the link name stays versioned.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Put before each name in the probe; no header defines it, so it survives preprocessing.
const MARK: &str = "llaisys_nvidia_rename_probe_";

/// The names of the object-like macros starting with `cuda` in the output of `cc -E -dM`.
pub fn cuda_object_macros(dm_output: &str) -> Vec<String> {
    let mut names: Vec<String> = dm_output
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|rest| {
            let name_end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let (name, after) = rest.split_at(name_end);
            // `#define f(x) ...` is function-like: the `(` follows the name directly.
            (name.starts_with("cuda") && !after.starts_with('(')).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The probe: wrapper.h, then one line per name that the preprocessor expands.
pub fn probe_source(wrapper: &Path, names: &[String]) -> String {
    let mut src = format!("#include \"{}\"\n", wrapper.display());
    for (i, n) in names.iter().enumerate() {
        src.push_str(&format!("{MARK}{i} {n}\n"));
    }
    src
}

/// The (versioned, plain) pairs in the preprocessed probe: each marked line whose expansion is the
/// single identifier `plain_vN`.
pub fn parse_probe(expanded: &str, names: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in expanded.lines() {
        let Some(rest) = line.trim_start().strip_prefix(MARK) else {
            continue;
        };
        let (index, expansion) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let Some(plain) = index.parse::<usize>().ok().and_then(|i| names.get(i)) else {
            continue;
        };
        let expansion = expansion.trim();
        let versioned = expansion
            .strip_prefix(plain.as_str())
            .and_then(|s| s.strip_prefix("_v"))
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
        if versioned {
            out.push((expansion.to_string(), plain.clone()));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Resolves the renames of the headers in `include_dirs` as seen through `wrapper`, with the
/// compiler `compiler`; `scratch` is a folder for the two probe files.
pub fn resolve(
    compiler: &cc::Tool,
    wrapper: &Path,
    include_dirs: &[PathBuf],
    scratch: &Path,
) -> Result<Vec<(String, String)>> {
    std::fs::create_dir_all(scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let macros_c = scratch.join("llaisys_cuda_macros.c");
    write(&macros_c, &format!("#include \"{}\"\n", wrapper.display()))?;
    let dm = preprocess(compiler, include_dirs, &macros_c, &["-dM"])?;
    let names = cuda_object_macros(&dm);
    if names.is_empty() {
        bail!(
            "the C preprocessor found no cuda* macro in {} (with -I {:?}): the headers did not \
             come through",
            wrapper.display(),
            include_dirs
        );
    }
    let probe_c = scratch.join("llaisys_cuda_renames.c");
    write(&probe_c, &probe_source(wrapper, &names))?;
    let expanded = preprocess(compiler, include_dirs, &probe_c, &["-P"])?;
    Ok(parse_probe(&expanded, &names))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// `compiler -E <extra> -I... file`, its stdout.
fn preprocess(
    compiler: &cc::Tool,
    include_dirs: &[PathBuf],
    file: &Path,
    extra: &[&str],
) -> Result<String> {
    let mut cmd: Command = compiler.to_command();
    cmd.arg("-E").args(extra);
    for inc in include_dirs {
        cmd.arg(format!("-I{}", inc.display()));
    }
    cmd.arg(file);
    let out = cmd.output().with_context(|| {
        format!(
            "cannot run the C compiler {} (set CC to a working C compiler, or apt-get install -y \
             build-essential)",
            compiler.path().display()
        )
    })?;
    if !out.status.success() {
        // The program and its arguments only: `{cmd:?}` would print the whole environment cc
        // gives the compiler.
        let shown: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        bail!(
            "the C preprocessor failed ({}) on the CUDA headers: {}\n{}",
            out.status,
            shown.join(" "),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    String::from_utf8(out.stdout).context("the C preprocessor wrote text that is not UTF-8")
}

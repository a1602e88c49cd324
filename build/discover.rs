//! Finding a usable CUDA for the build: pure logic over a `Probe` of the environment, so that
//! `tests/discovery.rs` can drive it against fake roots made in temporary directories.
//!
//! A place counts only if it has `cuda_runtime.h`, `crt/host_config.h` and the library the chosen
//! link mode needs (the `loaded` mode needs none: it records the folder of `libcudart.so.N` when
//! there is one, for the run-time search, and takes the headers of each major it supports,
//! [`find_cuda_per_major`]). A place may be a toolkit root (`include/`, `lib64/`, `lib/`, or
//! `targets/<target>/` with the target folder of the cargo `TARGET`: `x86_64-linux`, `sbsa-linux`
//! or `aarch64-linux` for aarch64, see [`cuda_target_dirs`]), the CUDA 13 PyPI layout
//! (`nvidia/cu13`), the CUDA 12 PyPI layout (`nvidia/cuda_runtime` with `crt/` from
//! `nvidia/cuda_nvcc`), or a site-packages folder holding either.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// The CUDA root variables, in the order they are read. When any is set, only these are searched.
pub const ROOT_VARS: [&str; 4] = [
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
];

/// The pip packages that give a usable CUDA 13.0 (the GPU machine's driver is CUDA 13.0).
pub const PIP_CUDA13: &str = "nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88";
/// The pip packages that give a usable CUDA 12.9.
#[allow(dead_code)] // used by tests/discovery.rs and the README
pub const PIP_CUDA12: &str = "nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86";

/// The folders under a toolkit's `targets/` that may hold the headers and libraries for the
/// rust target `triple` (cargo's `TARGET`), in the order they are tried. CUDA names them
/// `x86_64-linux`; for aarch64 `sbsa-linux` (servers, Grace, the arm64-sbsa installers and
/// conda packages) and `aarch64-linux` (Jetson/L4T and the cross-aarch64 packages);
/// `ppc64le-linux`. Empty for a target CUDA has no folder for (only `include/`, `lib64/`, `lib/`
/// are looked at then).
pub fn cuda_target_dirs(triple: &str) -> Vec<String> {
    let mut parts = triple.split('-');
    let arch = parts.next().unwrap_or_default();
    if !parts.any(|p| p == "linux") {
        return Vec::new();
    }
    let dirs: &[&str] = match arch {
        "x86_64" => &["x86_64-linux"],
        "aarch64" => &["sbsa-linux", "aarch64-linux"],
        "powerpc64le" => &["ppc64le-linux"],
        _ => &[],
    };
    dirs.iter().map(|d| d.to_string()).collect()
}

/// How libcudart is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// `libcudart_static.a`.
    Static,
    /// The shared `libcudart.so` or, when only that exists, a versioned `libcudart.so.N`.
    Dynamic,
    /// Not linked: `libcudart.so.N` is loaded at run time; the build needs headers only.
    Loaded,
}

/// The CUDA majors the `loaded` mode supports, newest first (the order it prefers at run time).
pub const LOADED_MAJORS: [u32; 2] = [13, 12];

impl LinkMode {
    /// The feature name, as the user spells it.
    pub fn name(self) -> &'static str {
        match self {
            LinkMode::Static => "static",
            LinkMode::Dynamic => "dynamic",
            LinkMode::Loaded => "loaded",
        }
    }

    fn library_wanted(self) -> &'static str {
        match self {
            LinkMode::Static => "libcudart_static.a",
            LinkMode::Dynamic => "libcudart.so or libcudart.so.N",
            LinkMode::Loaded => "no library (CUDA 12 or 13 headers only)",
        }
    }
}

/// What the environment looks like to the search. `main()` of build.rs fills it from the real
/// environment; tests fill it with fake roots.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    /// The values of `ROOT_VARS`, in order (None when unset or empty).
    pub root_vars: Vec<(String, Option<String>)>,
    /// The project-local folders the bootstrap fills (`.deps/cuda13`, `.deps/cuda12`).
    pub project_local: Vec<PathBuf>,
    /// The directory holding `nvcc` on PATH, if any.
    pub nvcc_dir: Option<PathBuf>,
    /// site-packages folders of the active python3.
    pub site_packages: Vec<PathBuf>,
    /// Where `cuda-X.Y` and `cuda` are looked for (`/usr/local` outside tests).
    pub usr_local: PathBuf,
    /// The `targets/` folders for the cargo `TARGET` ([`cuda_target_dirs`]).
    pub cuda_targets: Vec<String>,
}

/// A usable CUDA: the include folders to give the compiler and the library to link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaRoot {
    /// Where it was found, in words (`CUDA_HOME=/opt/cuda`, `python3 wheels /x/site-packages`).
    pub origin: String,
    /// The folder that holds the headers and libraries (what `doctor` reports as the root).
    pub root: PathBuf,
    /// Include folders: the one with `cuda_runtime.h` first, then the one with `crt/` if different.
    pub include_dirs: Vec<PathBuf>,
    /// The folder holding the library.
    pub lib_dir: PathBuf,
    /// The file name of the library to link (`libcudart_static.a`, `libcudart.so`, `libcudart.so.13`).
    pub lib_name: String,
    /// `CUDART_VERSION` from `cuda_runtime_api.h` (13000 for 13.0).
    pub cudart_version: u32,
}

/// One place the search looked at and why it was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// Where it was found, in words.
    pub origin: String,
    /// Why it is unusable.
    pub reason: String,
}

/// The search failed: every place it looked, and why each was rejected.
#[derive(Clone, Debug)]
pub struct NotFound {
    /// The link mode the search was for.
    pub mode: LinkMode,
    /// The places, in search order.
    pub rejected: Vec<Rejected>,
    /// Names of root variables that were set (then nothing else was searched).
    pub vars_set: Vec<String>,
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mode == LinkMode::Loaded {
            writeln!(
                f,
                "llaisys-nvidia: no usable CUDA headers for the `loaded` link mode (a root \
                 needs cuda_runtime.h and crt/host_config.h of CUDA {}).",
                majors_text()
            )?;
        } else {
            writeln!(
                f,
                "llaisys-nvidia: no usable CUDA for the `{}` link mode (a root needs \
                 cuda_runtime.h, crt/host_config.h and {}).",
                self.mode.name(),
                self.mode.library_wanted()
            )?;
        }
        if !self.vars_set.is_empty() {
            writeln!(
                f,
                "{} set, so only the CUDA root variables were searched:",
                self.vars_set.join(", ")
            )?;
        } else {
            writeln!(f, "Looked in, in this order:")?;
        }
        if self.rejected.is_empty() {
            writeln!(f, "  (nowhere: no variable, no .deps/, no nvcc, no python3 wheels, no /usr/local/cuda*)")?;
        }
        for r in &self.rejected {
            writeln!(f, "  - {}: {}", r.origin, r.reason)?;
        }
        writeln!(f, "Fix, one of:")?;
        if !self.vars_set.is_empty() {
            writeln!(
                f,
                "  - point {} at a CUDA toolkit root or a folder holding the PyPI CUDA wheels, or unset it",
                self.vars_set.join("/")
            )?;
        }
        writeln!(f, "  - bash scripts/bootstrap.sh            (installs CUDA 13.0 from PyPI into .deps/, no GPU needed)")?;
        writeln!(f, "  - python3 -m pip install {PIP_CUDA13}")?;
        write!(
            f,
            "  - export CUDA_HOME=/usr/local/cuda      (an installed CUDA toolkit)"
        )
    }
}

impl std::error::Error for NotFound {}

/// Searches in the documented order and returns the first usable root.
pub fn find_cuda(probe: &Probe, mode: LinkMode) -> Result<CudaRoot, NotFound> {
    let mut rejected = Vec::new();
    let (candidates, vars_set) = candidates(probe);
    for (origin, path) in candidates {
        match inspect(&path, mode, &probe.cuda_targets) {
            Ok(mut root) => {
                root.origin = origin;
                return Ok(root);
            }
            Err(reason) => rejected.push(Rejected { origin, reason }),
        }
    }
    Err(NotFound {
        mode,
        rejected,
        vars_set,
    })
}

/// The `loaded` mode's search: the same places in the same order, every usable layout of each
/// (a site-packages folder may hold the CUDA 13 and the CUDA 12 wheels), the first root of each
/// major of [`LOADED_MAJORS`], newest major first: the crate's code is compiled against the
/// newest headers, whose functions the older runtime serves under its versioned names
/// (build/compare.rs). Fails only when no root of a supported major is found.
pub fn find_cuda_per_major(probe: &Probe) -> Result<Vec<CudaRoot>, NotFound> {
    let mode = LinkMode::Loaded;
    let mut rejected = Vec::new();
    let mut found: Vec<CudaRoot> = Vec::new();
    let (candidates, vars_set) = candidates(probe);
    for (origin, path) in candidates {
        let (roots, errors) = match inspect_each(&path, mode, &probe.cuda_targets) {
            Ok(r) => r,
            Err(reason) => {
                rejected.push(Rejected { origin, reason });
                continue;
            }
        };
        if roots.is_empty() {
            rejected.push(Rejected {
                origin,
                reason: errors.join("; "),
            });
            continue;
        }
        for mut root in roots {
            let major = root.cudart_version / 1000;
            if !LOADED_MAJORS.contains(&major) {
                rejected.push(Rejected {
                    origin: origin.clone(),
                    reason: format!(
                        "CUDA {major} headers in {}: the loaded mode supports CUDA {}",
                        root.root.display(),
                        majors_text()
                    ),
                });
            } else if !found.iter().any(|f| f.cudart_version / 1000 == major) {
                root.origin = origin.clone();
                found.push(root);
            }
        }
    }
    if found.is_empty() {
        return Err(NotFound {
            mode,
            rejected,
            vars_set,
        });
    }
    found.sort_by_key(|r| std::cmp::Reverse(r.cudart_version / 1000));
    Ok(found)
}

/// "13 and 12".
fn majors_text() -> String {
    let m: Vec<String> = LOADED_MAJORS.iter().map(u32::to_string).collect();
    m.join(" and ")
}

/// The places to look at, in order, and the names of the root variables that are set (when
/// any is, only they are places).
fn candidates(probe: &Probe) -> (Vec<(String, PathBuf)>, Vec<String>) {
    let vars_set: Vec<String> = probe
        .root_vars
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k.clone())
        .collect();
    let mut candidates: Vec<(String, PathBuf)> = Vec::new();
    if !vars_set.is_empty() {
        for (k, v) in &probe.root_vars {
            if let Some(v) = v {
                candidates.push((format!("{k}={v}"), PathBuf::from(v)));
            }
        }
    } else {
        for p in &probe.project_local {
            candidates.push((format!("project-local {}", p.display()), p.clone()));
        }
        if let Some(bin) = &probe.nvcc_dir {
            let root = bin.parent().unwrap_or(bin).to_path_buf();
            candidates.push((format!("nvcc on PATH ({})", bin.display()), root));
        }
        for sp in &probe.site_packages {
            candidates.push((format!("python3 wheels {}", sp.display()), sp.clone()));
        }
        for v in versioned_roots(&probe.usr_local) {
            candidates.push((v.display().to_string(), v));
        }
        let plain = probe.usr_local.join("cuda");
        candidates.push((plain.display().to_string(), plain));
    }
    (candidates, vars_set)
}

/// `cuda-X.Y` folders under `usr_local`, newest first.
fn versioned_roots(usr_local: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(Vec<u32>, PathBuf)> = Vec::new();
    if let Ok(entries) = fs::read_dir(usr_local) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(ver) = name.strip_prefix("cuda-") {
                let parts: Option<Vec<u32>> = ver.split('.').map(|p| p.parse().ok()).collect();
                if let Some(parts) = parts {
                    found.push((parts, e.path()));
                }
            }
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0));
    found.into_iter().map(|(_, p)| p).collect()
}

/// Checks one place; `Err` says why it is unusable. `targets` are the `targets/` folders to look
/// in ([`cuda_target_dirs`]).
pub fn inspect(path: &Path, mode: LinkMode, targets: &[String]) -> Result<CudaRoot, String> {
    let (found, errors) = inspect_each(path, mode, targets)?;
    found.into_iter().next().ok_or_else(|| errors.join("; "))
}

/// Every usable layout of one place, most specific first, and why each other layout is not:
/// `nvidia/cu13` and `nvidia/cuda_runtime` of a site-packages folder (an incomplete CUDA 13 must
/// not hide a complete CUDA 12), else the place itself as a toolkit root. `Err` when the place
/// is not a folder.
pub fn inspect_each(
    path: &Path,
    mode: LinkMode,
    targets: &[String],
) -> Result<(Vec<CudaRoot>, Vec<String>), String> {
    if !path.is_dir() {
        return Err(format!(
            "{} does not exist or is not a folder",
            path.display()
        ));
    }
    let cu13 = path.join("nvidia").join("cu13");
    let cu12 = path.join("nvidia").join("cuda_runtime");
    let mut layouts = Vec::new();
    if cu13.is_dir() {
        layouts.push((cu13.clone(), cu13));
    }
    if cu12.is_dir() {
        layouts.push((cu12, path.join("nvidia").join("cuda_nvcc")));
    }
    if layouts.is_empty() {
        let crt_root = if path.file_name().is_some_and(|n| n == "cuda_runtime") {
            path.parent()
                .map(|p| p.join("cuda_nvcc"))
                .unwrap_or_default()
        } else {
            path.to_path_buf()
        };
        layouts.push((path.to_path_buf(), crt_root));
    }
    let (mut found, mut errors) = (Vec::new(), Vec::new());
    for (root, crt_root) in layouts {
        match inspect_layout(&root, &crt_root, mode, targets) {
            Ok(r) => found.push(r),
            Err(e) => errors.push(e),
        }
    }
    Ok((found, errors))
}

/// Checks a root whose headers are in `root` and whose `crt/` may be in `crt_root` (the CUDA 12
/// wheels split them).
fn inspect_layout(
    root: &Path,
    crt_root: &Path,
    mode: LinkMode,
    targets: &[String],
) -> Result<CudaRoot, String> {
    let include_candidates = |r: &Path| {
        let mut dirs = vec![r.join("include")];
        dirs.extend(
            targets
                .iter()
                .map(|t| r.join("targets").join(t).join("include")),
        );
        dirs
    };
    let main_candidates = include_candidates(root);
    let main_inc = main_candidates
        .iter()
        .find(|d| d.join("cuda_runtime.h").is_file())
        .cloned()
        .ok_or_else(|| format!("no cuda_runtime.h in {}", shown(&main_candidates)))?;
    let mut crt_dirs = vec![main_inc.clone()];
    crt_dirs.extend(include_candidates(crt_root));
    let crt_inc = crt_dirs
        .into_iter()
        .find(|d| d.join("crt").join("host_config.h").is_file())
        .ok_or_else(|| {
            format!(
                "{} has cuda_runtime.h but no crt/host_config.h (the CUDA 13 runtime wheel needs \
                 nvidia-cuda-crt beside it; CUDA 12 needs nvidia-cuda-nvcc-cu12)",
                main_inc.display()
            )
        })?;
    let cudart_version = read_cudart_version(&main_inc.join("cuda_runtime_api.h"))?;
    let (lib_dir, lib_name) = find_library(root, mode, targets, cudart_version / 1000)?;
    let mut include_dirs = vec![main_inc.clone()];
    if crt_inc != main_inc {
        include_dirs.push(crt_inc);
    }
    Ok(CudaRoot {
        origin: String::new(),
        root: root.to_path_buf(),
        include_dirs,
        lib_dir,
        lib_name,
        cudart_version,
    })
}

/// Reads `#define CUDART_VERSION N` from the header.
pub fn read_cudart_version(header: &Path) -> Result<u32, String> {
    let text =
        fs::read_to_string(header).map_err(|e| format!("cannot read {}: {e}", header.display()))?;
    text.lines()
        .filter_map(|l| {
            let mut t = l.split_whitespace();
            match (t.next(), t.next(), t.next()) {
                (Some("#define"), Some("CUDART_VERSION"), Some(v)) => v.parse().ok(),
                _ => None,
            }
        })
        .next()
        .ok_or_else(|| format!("{} defines no CUDART_VERSION", header.display()))
}

/// Folders as the failure messages list them: `a, b or c`.
fn shown(dirs: &[PathBuf]) -> String {
    let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// The library the mode needs, in `lib64`, `lib` or `targets/<target>/lib`. For the `loaded`
/// mode, the folder holding `libcudart.so.<major>` (an empty name and `root/lib` when none does:
/// nothing is linked, and the run-time search then has no build-time folder for this major).
fn find_library(
    root: &Path,
    mode: LinkMode,
    targets: &[String],
    major: u32,
) -> Result<(PathBuf, String), String> {
    let mut dirs = vec![root.join("lib64"), root.join("lib")];
    dirs.extend(
        targets
            .iter()
            .map(|t| root.join("targets").join(t).join("lib")),
    );
    for d in dirs.iter().filter(|d| d.is_dir()) {
        match mode {
            LinkMode::Static => {
                if d.join("libcudart_static.a").is_file() {
                    return Ok((d.clone(), "libcudart_static.a".into()));
                }
            }
            LinkMode::Dynamic => {
                if d.join("libcudart.so").exists() {
                    return Ok((d.clone(), "libcudart.so".into()));
                }
                if let Some(name) = newest_versioned(d) {
                    return Ok((d.clone(), name));
                }
            }
            LinkMode::Loaded => {
                let name = format!("libcudart.so.{major}");
                if d.join(&name).exists() {
                    return Ok((d.clone(), name));
                }
            }
        }
    }
    if mode == LinkMode::Loaded {
        return Ok((root.join("lib"), String::new()));
    }
    Err(format!(
        "headers found but no {} in {}",
        mode.library_wanted(),
        shown(&dirs)
    ))
}

/// The `libcudart.so.N` with the highest N (PyPI wheels ship only versioned names).
fn newest_versioned(dir: &Path) -> Option<String> {
    let mut best: Option<(Vec<u32>, String)> = None;
    for e in fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(ver) = name.strip_prefix("libcudart.so.") else {
            continue;
        };
        let Some(parts) = ver
            .split('.')
            .map(|p| p.parse().ok())
            .collect::<Option<Vec<u32>>>()
        else {
            continue;
        };
        if best.as_ref().is_none_or(|(b, _)| parts > *b) {
            best = Some((parts, name));
        }
    }
    best.map(|(_, n)| n)
}

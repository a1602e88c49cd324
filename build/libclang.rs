//! Finding libclang for bindgen, and the builtin headers (`stddef.h`) it may lack.
//!
//! Order: LIBCLANG_PATH (as clang-sys reads it); the system's libclang (Debian/Ubuntu
//! `libclang-dev`, LLVM folders, the multiarch folder of the HOST the build script runs on); the
//! PyPI `libclang` wheel the bootstrap puts in `.deps/libclang`. The PyPI wheel ships no builtin
//! headers, so with it the C compiler's own `include` folder is passed instead
//! (`$CC -print-file-name=include`, the compiler the `cc` crate finds).

use crate::vars;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// What bindgen needs to parse the CUDA headers.
pub struct Clang {
    /// The folder holding libclang, given to clang-sys through LIBCLANG_PATH.
    pub dir: PathBuf,
    /// Extra `-isystem` folder with builtin headers, when libclang has none of its own.
    pub builtin_include: Option<PathBuf>,
    /// Where it was found, in words.
    pub origin: String,
}

const FIX: &str = "Fix, one of:\n  - bash scripts/bootstrap.sh        (puts the PyPI libclang wheel in .deps/libclang)\n  - apt-get install -y libclang-dev  (Debian/Ubuntu)\n  - export LIBCLANG_PATH=/folder/holding/libclang.so";

/// Finds libclang for the build script's `host` (cargo's `HOST`); `Err` lists where it looked.
/// `compiler` gives the builtin headers a libclang without its own resource folder lacks.
pub fn locate(manifest: &Path, host: &str, compiler: &cc::Tool) -> Result<Clang> {
    let mut looked = Vec::new();
    if let Some(p) = vars::tracked("LIBCLANG_PATH")?.filter(|p| !p.is_empty()) {
        let dir = PathBuf::from(&p);
        let dir = if dir.is_file() {
            dir.parent().map(Path::to_path_buf).unwrap_or(dir)
        } else {
            dir
        };
        if has_libclang(&dir) {
            return Ok(with_builtins(dir, format!("LIBCLANG_PATH={p}"), compiler));
        }
        bail!("llaisys-nvidia: LIBCLANG_PATH={p} holds no libclang.so / libclang-N.so.\n{FIX}");
    }
    looked.push("LIBCLANG_PATH: not set".to_string());
    let system = system_dirs(host);
    for dir in &system {
        if has_libclang(dir) {
            return Ok(with_builtins(
                dir.clone(),
                format!("system {}", dir.display()),
                compiler,
            ));
        }
    }
    let shown: Vec<String> = system.iter().map(|d| d.display().to_string()).collect();
    looked.push(format!(
        "system folders (/usr/lib/llvm-*/lib, {}): no libclang",
        shown
            .iter()
            .filter(|d| !d.starts_with("/usr/lib/llvm-"))
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let local = manifest.join(".deps/libclang/clang/native");
    if has_libclang(&local) {
        return Ok(with_builtins(
            local,
            "project-local .deps/libclang (PyPI)".into(),
            compiler,
        ));
    }
    looked.push(format!("{}: missing", local.display()));
    bail!(
        "llaisys-nvidia: bindgen needs libclang and none was found.\nLooked in:\n  - {}\n{FIX}",
        looked.join("\n  - ")
    )
}

/// The Debian/Ubuntu multiarch folder of a rust triple (`x86_64-linux-gnu`, `aarch64-linux-gnu`).
fn multiarch(triple: &str) -> Option<String> {
    let arch = match triple.split('-').next()? {
        "x86_64" => "x86_64",
        "aarch64" => "aarch64",
        "powerpc64le" => "powerpc64le",
        "riscv64gc" => "riscv64",
        "s390x" => "s390x",
        _ => return None,
    };
    triple
        .contains("-linux")
        .then(|| format!("{arch}-linux-gnu"))
}

fn system_dirs(host: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        let mut llvm: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("llvm-"))
            })
            .map(|p| p.join("lib"))
            .collect();
        llvm.sort();
        llvm.reverse();
        dirs.extend(llvm);
    }
    if let Some(m) = multiarch(host) {
        dirs.push(Path::new("/usr/lib").join(m));
    }
    for d in ["/usr/lib64", "/usr/local/lib"] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

fn has_libclang(dir: &Path) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    rd.flatten().any(|e| {
        let n = e.file_name().to_string_lossy().into_owned();
        // libclang.so, libclang.so.1, libclang-14.so.1; not libclang-cpp.
        n.starts_with("libclang.so")
            || (n.starts_with("libclang-") && n.as_bytes().get(9).is_some_and(u8::is_ascii_digit))
    })
}

/// A system libclang finds its own resource folder; the PyPI one does not.
fn with_builtins(dir: PathBuf, origin: String, compiler: &cc::Tool) -> Clang {
    let has_resource = dir.join("clang").is_dir();
    let builtin_include = if has_resource {
        None
    } else {
        cc_builtin_include(compiler)
    };
    Clang {
        dir,
        builtin_include,
        origin,
    }
}

/// The C compiler's builtin header folder (holds stddef.h).
pub fn cc_builtin_include(compiler: &cc::Tool) -> Option<PathBuf> {
    let out = compiler
        .to_command()
        .arg("-print-file-name=include")
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.join("stddef.h").is_file().then_some(p)
}

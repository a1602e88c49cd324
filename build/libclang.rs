//! Finding libclang for bindgen, and the builtin headers (`stddef.h`) it may lack.
//!
//! Order: LIBCLANG_PATH (as clang-sys reads it); the system's libclang (Debian/Ubuntu
//! `libclang-dev`, LLVM folders); the PyPI `libclang` wheel the bootstrap puts in `.deps/libclang`.
//! The PyPI wheel ships no builtin headers, so with it the C compiler's own `include` folder is
//! passed instead (`cc -print-file-name=include`).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Finds libclang; `Err` lists where it looked.
pub fn locate(manifest: &Path) -> Result<Clang, String> {
    let mut looked = Vec::new();
    if let Ok(p) = env::var("LIBCLANG_PATH") {
        let dir = PathBuf::from(&p);
        let dir = if dir.is_file() {
            dir.parent().map(Path::to_path_buf).unwrap_or(dir)
        } else {
            dir
        };
        if has_libclang(&dir) {
            return Ok(with_builtins(dir, format!("LIBCLANG_PATH={p}")));
        }
        return Err(format!(
            "llaisys-nvidia: LIBCLANG_PATH={p} holds no libclang.so / libclang-N.so.\n{FIX}"
        ));
    }
    looked.push("LIBCLANG_PATH: not set".to_string());
    for dir in system_dirs() {
        if has_libclang(&dir) {
            return Ok(with_builtins(
                dir.clone(),
                format!("system {}", dir.display()),
            ));
        }
    }
    looked.push("system folders (/usr/lib/llvm-*/lib, /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/local/lib): no libclang".into());
    let local = manifest.join(".deps/libclang/clang/native");
    if has_libclang(&local) {
        return Ok(with_builtins(
            local,
            "project-local .deps/libclang (PyPI)".into(),
        ));
    }
    looked.push(format!("{}: missing", local.display()));
    Err(format!(
        "llaisys-nvidia: bindgen needs libclang and none was found.\nLooked in:\n  - {}\n{FIX}",
        looked.join("\n  - ")
    ))
}

fn system_dirs() -> Vec<PathBuf> {
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
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/lib"] {
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
fn with_builtins(dir: PathBuf, origin: String) -> Clang {
    let has_resource = dir.join("clang").is_dir();
    let builtin_include = if has_resource {
        None
    } else {
        cc_builtin_include()
    };
    Clang {
        dir,
        builtin_include,
        origin,
    }
}

/// The C compiler's builtin header folder (holds stddef.h).
pub fn cc_builtin_include() -> Option<PathBuf> {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .arg("-print-file-name=include")
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.join("stddef.h").is_file().then_some(p)
}

//! Build script: finds CUDA (build/discover.rs), finds libclang (build/libclang.rs), runs bindgen
//! over wrapper.h, and links libcudart statically or dynamically. Every failure prints what was
//! tried and the command that fixes it, then exits 1: no panic a user can hit.

#[path = "build/bindings.rs"]
mod bindings;
#[path = "build/discover.rs"]
mod discover;
#[path = "build/libclang.rs"]
mod libclang;
#[path = "build/nccl.rs"]
mod nccl;

use discover::{CudaRoot, LinkMode, Probe, ROOT_VARS};
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    if let Err(msg) = run() {
        eprintln!("{msg}");
        // cargo shows stderr of a failed build script; also print as a warning line for `-q`.
        println!("cargo:warning=llaisys-nvidia build failed: see the message above");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build");
    for v in ROOT_VARS
        .iter()
        .chain(["PATH", "LIBCLANG_PATH", "LLAISYS_NVIDIA_PYTHON"].iter())
    {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let mode = link_mode()?;
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    // Stale-proofing: a new .deps (bootstrap) must be seen.
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join(".deps").display()
    );

    let probe = real_probe(&manifest);
    let cuda = discover::find_cuda(&probe, mode).map_err(|e| e.to_string())?;
    let clang = libclang::locate(&manifest)?;
    bindings::generate(
        &cuda,
        &clang,
        &manifest.join("wrapper.h"),
        &out.join("cudart.rs"),
    )?;
    nccl::generate(&manifest, &clang, &out)?;
    link(&cuda, mode);
    publish(&cuda, mode);
    Ok(())
}

/// The cargo feature chosen: exactly one of `static` and `dynamic`.
fn link_mode() -> Result<LinkMode, String> {
    let s = env::var_os("CARGO_FEATURE_STATIC").is_some();
    let d = env::var_os("CARGO_FEATURE_DYNAMIC").is_some();
    match (s, d) {
        (true, false) => Ok(LinkMode::Static),
        (false, true) => Ok(LinkMode::Dynamic),
        // src/lib.rs carries the compile_error! with the same words; this keeps the build script
        // from failing first with a less helpful message.
        (true, true) => Err(
            "llaisys-nvidia: features `static` and `dynamic` are both on; pick one: \
             `--no-default-features --features dynamic` for the shared libcudart, or the default \
             (`static`)."
                .into(),
        ),
        (false, false) => Err(
            "llaisys-nvidia: neither feature `static` nor `dynamic` is on; enable \
             one: `--features static` (libcudart_static.a) or `--features dynamic` (libcudart.so)."
                .into(),
        ),
    }
}

/// Reads the real environment into a `Probe`.
fn real_probe(manifest: &Path) -> Probe {
    let root_vars = ROOT_VARS
        .iter()
        .map(|k| {
            let v = env::var(k).ok().filter(|v| !v.trim().is_empty());
            (k.to_string(), v)
        })
        .collect();
    let deps = manifest.join(".deps");
    Probe {
        root_vars,
        project_local: vec![deps.join("cuda13"), deps.join("cuda12")],
        nvcc_dir: which("nvcc").and_then(|p| p.parent().map(Path::to_path_buf)),
        site_packages: python_site_packages(),
        usr_local: PathBuf::from("/usr/local"),
    }
}

fn which(exe: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|d| d.join(exe))
        .find(|p| p.is_file())
}

/// site-packages of the active python3 (or LLAISYS_NVIDIA_PYTHON); empty when there is none.
fn python_site_packages() -> Vec<PathBuf> {
    let py = env::var("LLAISYS_NVIDIA_PYTHON").unwrap_or_else(|_| "python3".into());
    let script =
        "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)";
    match Command::new(py).arg("-c").arg(script).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

fn link(cuda: &CudaRoot, mode: LinkMode) {
    let lib_dir = cuda.lib_dir.display();
    println!("cargo:rustc-link-search=native={lib_dir}");
    match mode {
        LinkMode::Static => {
            println!("cargo:rustc-link-lib=static=cudart_static");
            // libcudart_static.a dlopens libcuda.so.1 itself: no -lcuda, no driver at link time.
            for l in ["dl", "pthread", "rt"] {
                println!("cargo:rustc-link-lib=dylib={l}");
            }
        }
        LinkMode::Dynamic => {
            // `+verbatim` links libcudart.so.13 by its file name when no unversioned name exists.
            if cuda.lib_name == "libcudart.so" {
                println!("cargo:rustc-link-lib=dylib=cudart");
            } else {
                println!("cargo:rustc-link-lib=dylib:+verbatim={}", cuda.lib_name);
            }
            // Run-time lookup: next to the binary first (how the GPU stage ships it), then the
            // root it was built against. LD_LIBRARY_PATH still wins over neither (RUNPATH).
            println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN");
            println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
        }
    }
}

/// Build facts for the crate (env!) and for dependent crates (`links` metadata: DEP_LLAISYS_CUDART_*).
fn publish(cuda: &CudaRoot, mode: LinkMode) {
    // CUDA 13 changed some signatures (cudaMemPrefetchAsync, cudaMemAdvise take a location).
    println!("cargo:rustc-check-cfg=cfg(llaisys_cuda13)");
    if cuda.cudart_version >= 13000 {
        println!("cargo:rustc-cfg=llaisys_cuda13");
    }
    let facts = [
        ("CUDART_VERSION", cuda.cudart_version.to_string()),
        ("ROOT", cuda.root.display().to_string()),
        ("ORIGIN", cuda.origin.clone()),
        ("LINK_MODE", mode.name().to_string()),
        ("LIB_DIR", cuda.lib_dir.display().to_string()),
        ("LIB_NAME", cuda.lib_name.clone()),
        (
            "INCLUDE",
            env::join_paths(&cuda.include_dirs)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    ];
    for (k, v) in facts {
        println!("cargo:rustc-env=LLAISYS_NVIDIA_BUILD_{k}={v}");
        println!("cargo:{}={v}", k.to_lowercase());
    }
}

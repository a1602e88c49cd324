//! Build script: finds CUDA (build/discover.rs), resolves the headers' `#define` renames with
//! the C preprocessor (build/renames.rs), finds libclang (build/libclang.rs), runs bindgen over
//! wrapper.h, and links libcudart statically or dynamically. Every environment variable it
//! reads goes through build/vars.rs, which declares it. Every failure prints what was tried and
//! the command that fixes it, then exits 1: no panic a user can hit.

#[path = "build/bindings.rs"]
mod bindings;
#[path = "build/discover.rs"]
mod discover;
#[path = "build/libclang.rs"]
mod libclang;
#[path = "build/nccl.rs"]
mod nccl;
#[path = "build/renames.rs"]
mod renames;
#[path = "build/vars.rs"]
mod vars;

use anyhow::{bail, Context, Result};
use discover::{CudaRoot, LinkMode, Probe, ROOT_VARS};
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    if let Err(e) = run() {
        // The message, then each cause (not `{:?}`: with RUST_BACKTRACE set it adds a backtrace
        // of the build script, which helps no one fix their CUDA).
        eprintln!("{e}");
        for cause in e.chain().skip(1) {
            eprintln!("Caused by: {cause}");
        }
        // cargo shows stderr of a failed build script; also print as a warning line for `-q`.
        println!("cargo:warning=llaisys-nvidia build failed: see the message above");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build");
    vars::declare();
    let mode = link_mode()?;
    let manifest = PathBuf::from(vars::cargo("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(vars::cargo("OUT_DIR")?);
    let target = vars::cargo("TARGET")?;
    let host = vars::cargo("HOST")?;
    // Stale-proofing: a new .deps (bootstrap) must be seen.
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join(".deps").display()
    );

    let probe = real_probe(&manifest, &target)?;
    let cuda = discover::find_cuda(&probe, mode)?;
    // The C compiler as the `cc` crate finds it (CC, CFLAGS, TARGET; it declares those itself).
    let compiler = cc::Build::new()
        .cargo_warnings(false)
        .try_get_compiler()
        .context(
            "llaisys-nvidia: no C compiler for the preprocessor pass over the CUDA headers. Fix: \
             apt-get install -y build-essential, or set CC to a C compiler",
        )?;
    let wrapper = manifest.join("wrapper.h");
    let renames =
        renames::resolve(&compiler, &wrapper, &cuda.include_dirs, &out).with_context(|| {
            format!(
                "llaisys-nvidia: resolving the #define renames of the CUDA headers of {} ({}) \
                 failed",
                cuda.root.display(),
                cuda.origin
            )
        })?;
    let clang = libclang::locate(&manifest, &host, &compiler)?;
    bindings::generate(
        &cuda,
        &clang,
        &compiler,
        &wrapper,
        &renames,
        &out.join("cudart.rs"),
    )?;
    nccl::generate(&manifest, &clang, &compiler, &out).map_err(anyhow::Error::msg)?;
    link(&cuda, mode);
    publish(&cuda, mode, &renames);
    Ok(())
}

/// The cargo feature chosen. The features are additive: with both on (`--all-features`, or
/// `--features dynamic` on top of the default `static`) dynamic wins, as the explicit choice.
fn link_mode() -> Result<LinkMode> {
    let s = vars::cargo_flag("CARGO_FEATURE_STATIC")?;
    let d = vars::cargo_flag("CARGO_FEATURE_DYNAMIC")?;
    match (s, d) {
        (true, false) => Ok(LinkMode::Static),
        (false, true) => Ok(LinkMode::Dynamic),
        (true, true) => {
            println!(
                "cargo:warning=llaisys-nvidia: features `static` and `dynamic` are both on: \
                 `dynamic` wins (the shared libcudart is linked). For libcudart_static.a leave \
                 `dynamic` off."
            );
            Ok(LinkMode::Dynamic)
        }
        // src/lib.rs carries the compile_error! with the same words; this keeps the build script
        // from failing first with a less helpful message.
        (false, false) => bail!(
            "llaisys-nvidia: neither feature `static` nor `dynamic` is on; enable \
             one: `--features static` (libcudart_static.a) or `--features dynamic` (libcudart.so)."
        ),
    }
}

/// Reads the real environment into a `Probe`.
fn real_probe(manifest: &Path, target: &str) -> Result<Probe> {
    let mut root_vars = Vec::new();
    for k in ROOT_VARS {
        let v = vars::tracked(k)?.filter(|v| !v.trim().is_empty());
        root_vars.push((k.to_string(), v));
    }
    let deps = manifest.join(".deps");
    Ok(Probe {
        root_vars,
        project_local: vec![deps.join("cuda13"), deps.join("cuda12")],
        nvcc_dir: which("nvcc")?.and_then(|p| p.parent().map(Path::to_path_buf)),
        site_packages: python_site_packages()?,
        usr_local: PathBuf::from("/usr/local"),
        cuda_targets: discover::cuda_target_dirs(target),
    })
}

fn which(exe: &str) -> Result<Option<PathBuf>> {
    let Some(path) = vars::tracked_os("PATH")? else {
        return Ok(None);
    };
    Ok(std::env::split_paths(&path)
        .map(|d| d.join(exe))
        .find(|p| p.is_file()))
}

/// site-packages of the active python3 (or LLAISYS_NVIDIA_PYTHON); empty when there is none.
fn python_site_packages() -> Result<Vec<PathBuf>> {
    let py = vars::tracked("LLAISYS_NVIDIA_PYTHON")?
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into());
    let script =
        "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)";
    Ok(match Command::new(py).arg("-c").arg(script).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    })
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
fn publish(cuda: &CudaRoot, mode: LinkMode, renames: &[(String, String)]) {
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
            "RENAMES",
            renames
                .iter()
                .map(|(versioned, plain)| format!("{plain}={versioned}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
        (
            "INCLUDE",
            std::env::join_paths(&cuda.include_dirs)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    ];
    for (k, v) in facts {
        println!("cargo:rustc-env=LLAISYS_NVIDIA_BUILD_{k}={v}");
        println!("cargo:{}={v}", k.to_lowercase());
    }
}

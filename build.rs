//! Build script: finds CUDA (build/discover.rs), resolves the headers' `#define` renames with
//! the C preprocessor (build/renames.rs), finds libclang (build/libclang.rs), runs bindgen over
//! wrapper.h, and links libcudart statically or dynamically; in the `loaded` mode it links
//! nothing and writes the run-time dispatch over the CUDA 13 and 12 headers instead
//! (build/dispatch.rs). Every environment variable it reads goes through build/vars.rs, which
//! declares it. Every failure prints what was tried and the command that fixes it, then exits 1:
//! no panic a user can hit.

#[path = "build/bindings.rs"]
mod bindings;
#[path = "build/bundled.rs"]
mod bundled;
#[path = "build/compare.rs"]
mod compare;
#[path = "build/discover.rs"]
mod discover;
#[path = "build/dispatch.rs"]
mod dispatch;
#[path = "build/headers.rs"]
mod headers;
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
    let roots = if mode == LinkMode::Loaded {
        discover::find_cuda_per_major(&probe)?
    } else {
        vec![discover::find_cuda(&probe, mode)?]
    };
    let cuda = &roots[0];
    // The C compiler as the `cc` crate finds it (CC, CFLAGS, TARGET; it declares those itself).
    let compiler = cc::Build::new()
        .cargo_warnings(false)
        .try_get_compiler()
        .context(
            "llaisys-nvidia: no C compiler for the preprocessor pass over the CUDA headers. Fix: \
             apt-get install -y build-essential, or set CC to a C compiler",
        )?;
    let wrapper = manifest.join("wrapper.h");
    let clang = libclang::locate(&manifest, &host, &compiler)?;
    let mut renames_of_primary = Vec::new();
    let mut sets = Vec::new();
    for root in &roots {
        let major = root.cudart_version / 1000;
        // One scratch folder per header set for the preprocessor's probe files.
        let scratch = if mode == LinkMode::Loaded {
            out.join(format!("renames-v{major}"))
        } else {
            out.clone()
        };
        let renames = renames::resolve(&compiler, &wrapper, &root.include_dirs, &scratch)
            .with_context(|| {
                format!(
                    "llaisys-nvidia: resolving the #define renames of the CUDA headers of {} ({}) \
                     failed",
                    root.root.display(),
                    root.origin
                )
            })?;
        if mode == LinkMode::Loaded {
            let text = bindings::generate_text(
                root,
                &clang,
                &compiler,
                &wrapper,
                &renames,
                &[headers::DRIVER_VERSION],
            )?;
            let lib_dir = (!root.lib_name.is_empty()).then(|| root.lib_dir.display().to_string());
            sets.push(headers::HeaderSet {
                major,
                text,
                lib_dir,
            });
        } else {
            bindings::generate(
                root,
                &clang,
                &compiler,
                &wrapper,
                &renames,
                &out.join("cudart.rs"),
            )?;
        }
        if std::ptr::eq(root, cuda) {
            renames_of_primary = renames;
        }
    }
    let mut bundled = Vec::new();
    if mode == LinkMode::Loaded {
        loaded_bindings(&roots, &sets, &out)?;
        bundled = bundled_runtimes(&roots, &compiler, &target, &out);
    }
    nccl::generate(&manifest, &clang, &compiler, &out).map_err(anyhow::Error::msg)?;
    link(cuda, mode);
    publish(cuda, mode, &renames_of_primary, &roots, &bundled);
    Ok(())
}

/// The `loaded` mode's raw bindings (build/dispatch.rs), and a warning when a supported major's
/// headers were not found (the library then loads the other major only).
fn loaded_bindings(roots: &[CudaRoot], sets: &[headers::HeaderSet], out: &Path) -> Result<()> {
    let summary = dispatch::generate(sets, out)?;
    for major in discover::LOADED_MAJORS {
        if !roots.iter().any(|r| r.cudart_version / 1000 == major) {
            println!(
                "cargo:warning=llaisys-nvidia: the `loaded` mode found no CUDA {major} headers: \
                 this library will load CUDA {} runtimes only. For both: bash \
                 scripts/bootstrap.sh --cuda12, or set one CUDA root variable to each toolkit \
                 (CUDA_HOME and CUDA_PATH).",
                roots[0].cudart_version / 1000
            );
        }
    }
    for c in &summary.differing_constants {
        println!(
            "cargo:warning=llaisys-nvidia: a constant differs between the header sets: {c}; \
             calls pass the value of the CUDA {} headers",
            roots[0].cudart_version / 1000
        );
    }
    Ok(())
}

/// The `loaded` mode's own runtimes (build/bundled.rs), one per major whose static archive is
/// found: `(major, file)`. One that cannot be made is a warning: the library then loads the
/// system's runtimes of that major.
fn bundled_runtimes(
    roots: &[CudaRoot],
    compiler: &cc::Tool,
    target: &str,
    out: &Path,
) -> Vec<(u32, PathBuf)> {
    let mut made = Vec::new();
    for r in roots {
        let major = r.cudart_version / 1000;
        let archive = r.lib_dir.join("libcudart_static.a");
        let result = if archive.is_file() {
            bundled::make(compiler, target, major, &archive, out)
        } else {
            Err(anyhow::anyhow!("no {}", archive.display()))
        };
        match result {
            Ok(file) => made.push((major, file)),
            Err(e) => println!(
                "cargo:warning=llaisys-nvidia: no {} made ({e:#}): the library will load the \
                 system's CUDA {major} runtimes only",
                bundled::file_name(major)
            ),
        }
    }
    made
}

/// The cargo feature chosen. The features are additive: with more than one on
/// (`--all-features`, or `--features dynamic` or `loaded` on top of the default `static`) the
/// least default one wins, as the explicit choice: `loaded`, then `dynamic`.
fn link_mode() -> Result<LinkMode> {
    let s = vars::cargo_flag("CARGO_FEATURE_STATIC")?;
    let d = vars::cargo_flag("CARGO_FEATURE_DYNAMIC")?;
    let l = vars::cargo_flag("CARGO_FEATURE_LOADED")?;
    let on: Vec<&str> = [(s, "static"), (d, "dynamic"), (l, "loaded")]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
    let mode = if l {
        LinkMode::Loaded
    } else if d {
        LinkMode::Dynamic
    } else if s {
        LinkMode::Static
    } else {
        // src/lib.rs carries the compile_error! with the same words; this keeps the build
        // script from failing first with a less helpful message.
        bail!(
            "llaisys-nvidia: none of the features `static`, `dynamic`, `loaded` is on; enable \
             one: `--features static` (libcudart_static.a), `--features dynamic` \
             (libcudart.so) or `--features loaded` (libcudart loaded at run time)."
        )
    };
    if on.len() > 1 {
        println!(
            "cargo:warning=llaisys-nvidia: features {} are on: `{}` wins (`loaded` over \
             `dynamic` over `static`). For another mode build with --no-default-features \
             --features <mode>.",
            on.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(" and "),
            mode.name()
        );
    }
    Ok(mode)
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
    if mode != LinkMode::Loaded {
        println!("cargo:rustc-link-search=native={lib_dir}");
    }
    match mode {
        LinkMode::Static => {
            println!("cargo:rustc-link-lib=static=cudart_static");
            // libcudart_static.a dlopens libcuda.so.1 itself: no -lcuda, no driver at link time.
            for l in ["dl", "pthread", "rt"] {
                println!("cargo:rustc-link-lib=dylib={l}");
            }
        }
        // Nothing to link: the runtime is loaded at run time (src/cudart/loaded.rs).
        LinkMode::Loaded => {}
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
/// `roots` are every header set used (the `loaded` mode's: one per major, the primary first).
/// `bundled` are the `loaded` mode's own runtimes (`bundled_runtimes`).
fn publish(
    cuda: &CudaRoot,
    mode: LinkMode,
    renames: &[(String, String)],
    roots: &[CudaRoot],
    bundled: &[(u32, PathBuf)],
) {
    // CUDA 13 changed some signatures (cudaMemPrefetchAsync, cudaMemAdvise take a location).
    println!("cargo:rustc-check-cfg=cfg(llaisys_cuda13)");
    if cuda.cudart_version >= 13000 {
        println!("cargo:rustc-cfg=llaisys_cuda13");
    }
    // The link mode that won (a feature alone does not say: they are additive).
    println!("cargo:rustc-check-cfg=cfg(llaisys_loaded)");
    if mode == LinkMode::Loaded {
        println!("cargo:rustc-cfg=llaisys_loaded");
    }
    // The `loaded` mode: the majors it can load and, per major, the folder of libcudart.so.N
    // found at build time ("13=/x/lib,12=" when the CUDA 12 one had none).
    let loaded: Vec<String> = roots
        .iter()
        .filter(|_| mode == LinkMode::Loaded)
        .map(|r| {
            let dir = if r.lib_name.is_empty() {
                String::new()
            } else {
                r.lib_dir.display().to_string()
            };
            format!("{}={dir}", r.cudart_version / 1000)
        })
        .collect();
    // And the include folders of each major's headers ("13=/a:/b;12=/c:/d"), for tests that
    // build stand-in runtimes against them.
    let loaded_includes: Vec<String> = roots
        .iter()
        .filter(|_| mode == LinkMode::Loaded)
        .map(|r| {
            let dirs = std::env::join_paths(&r.include_dirs)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!("{}={dirs}", r.cudart_version / 1000)
        })
        .collect();
    let facts = [
        ("CUDART_VERSION", cuda.cudart_version.to_string()),
        ("ROOT", cuda.root.display().to_string()),
        ("ORIGIN", cuda.origin.clone()),
        ("LINK_MODE", mode.name().to_string()),
        ("LIB_DIR", cuda.lib_dir.display().to_string()),
        ("LIB_NAME", cuda.lib_name.clone()),
        ("LOADED_RUNTIMES", loaded.join(",")),
        ("LOADED_INCLUDES", loaded_includes.join(";")),
        (
            "BUNDLED_RUNTIMES",
            bundled
                .iter()
                .map(|(m, f)| format!("{m}={}", f.display()))
                .collect::<Vec<_>>()
                .join(","),
        ),
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

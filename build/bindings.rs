//! bindgen over wrapper.h: the cudart API only (allowlists), every C enum as a newtype over its
//! integer (a code the headers did not know is then just a value, never undefined behaviour), and
//! the header's `#define cudaX cudaX_vN` renames (build/renames.rs) mapped back to the plain name.

use crate::discover::CudaRoot;
use crate::libclang::Clang;
use anyhow::{anyhow, Context, Result};
use bindgen::callbacks::{ItemInfo, ParseCallbacks};
use std::path::Path;

#[derive(Debug)]
struct Callbacks {
    /// (versioned, plain): the Rust item gets the plain name, the link name stays versioned.
    renames: Vec<(String, String)>,
}

impl ParseCallbacks for Callbacks {
    fn item_name(&self, item: ItemInfo<'_>) -> Option<String> {
        self.renames
            .iter()
            .find(|(v, _)| v == item.name)
            .map(|(_, plain)| plain.clone())
    }

    /// Doxygen text is not Rust: fence it so rustdoc neither runs nor links it.
    fn process_comment(&self, comment: &str) -> Option<String> {
        let body = comment.replace("```", "'''");
        Some(format!("```text\n{}\n```", body.trim()))
    }
}

/// Writes the bindings to `out`. `renames` are (versioned, plain) pairs; `compiler` gives the
/// builtin headers when libclang lacks them.
pub fn generate(
    cuda: &CudaRoot,
    clang: &Clang,
    compiler: &cc::Tool,
    wrapper: &Path,
    renames: &[(String, String)],
    out: &Path,
) -> Result<()> {
    let text = generate_text(cuda, clang, compiler, wrapper, renames, &[])?;
    std::fs::write(out, text)
        .with_context(|| format!("llaisys-nvidia: cannot write {}", out.display()))
}

/// The bindings as text. `driver_functions` are functions of the driver API (`cuda.h`) to
/// declare too (the `loaded` mode asks the driver for its version before it loads a runtime).
pub fn generate_text(
    cuda: &CudaRoot,
    clang: &Clang,
    compiler: &cc::Tool,
    wrapper: &Path,
    renames: &[(String, String)],
    driver_functions: &[&str],
) -> Result<String> {
    // clang-sys (inside bindgen) loads libclang from LIBCLANG_PATH; bindgen offers no other way
    // to name the library.
    // SAFETY: the build script is single-threaded: no other thread reads or writes the
    // environment while it is changed (std::env::set_var's requirement, `unsafe` in edition 2024).
    unsafe { std::env::set_var("LIBCLANG_PATH", &clang.dir) };
    let attempt = |builtin: Option<&Path>| {
        let mut b = bindgen::Builder::default()
            .header(wrapper.display().to_string())
            .clang_arg("-xc")
            .allowlist_function("cuda.*")
            .allowlist_type("cuda.*")
            .allowlist_var("CUDART_VERSION|cuda.*")
            .default_enum_style(bindgen::EnumVariation::NewType {
                is_bitfield: false,
                is_global: false,
            })
            .newtype_enum("cudaError")
            .derive_default(true)
            .layout_tests(true)
            .generate_comments(true)
            .parse_callbacks(Box::new(Callbacks {
                renames: renames.to_vec(),
            }))
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        if !driver_functions.is_empty() {
            b = b.header_contents("llaisys_nvidia_driver.h", "#include <cuda.h>\n");
            for f in driver_functions {
                b = b.allowlist_function(f);
            }
        }
        for inc in &cuda.include_dirs {
            b = b.clang_arg(format!("-I{}", inc.display()));
        }
        if let Some(dir) = builtin {
            b = b.clang_arg(format!("-isystem{}", dir.display()));
        }
        // libclang load failures panic inside bindgen; turn them into our message.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.generate()))
            .map_err(|p| panic_text(&p))
            .and_then(|r| r.map_err(|e| e.to_string()))
    };
    let bindings = match attempt(clang.builtin_include.as_deref()) {
        Ok(b) => b,
        Err(first) if first.contains("file not found") && clang.builtin_include.is_none() => {
            // A libclang without its resource folder: retry with the C compiler's builtins.
            let cc_inc = crate::libclang::cc_builtin_include(compiler);
            attempt(cc_inc.as_deref()).map_err(|e| anyhow!(failure(cuda, clang, &e)))?
        }
        Err(e) => return Err(anyhow!(failure(cuda, clang, &e))),
    };
    Ok(bindings.to_string())
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "bindgen panicked".into())
}

fn failure(cuda: &CudaRoot, clang: &Clang, err: &str) -> String {
    let hint = if err.contains("stddef.h") || err.contains("stdint.h") {
        "libclang found no builtin headers (stddef.h). Install the compiler's headers \
         (apt-get install -y libclang-dev, or build-essential so `cc -print-file-name=include` \
         answers), or set LIBCLANG_PATH to a full LLVM install."
    } else if err.to_lowercase().contains("libclang") {
        "libclang could not be loaded. Run `bash scripts/bootstrap.sh`, or apt-get install -y \
         libclang-dev, or set LIBCLANG_PATH."
    } else {
        "the CUDA headers did not parse; check that the root's headers are complete (reinstall \
         the wheels with `bash scripts/bootstrap.sh`)."
    };
    format!(
        "llaisys-nvidia: bindgen failed on wrapper.h.\n  CUDA root: {} ({})\n  include: {:?}\n  \
         libclang: {} ({})\n  error: {err}\n{hint}",
        cuda.root.display(),
        cuda.origin,
        cuda.include_dirs,
        clang.dir.display(),
        clang.origin
    )
}

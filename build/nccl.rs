//! bindgen over NCCL's own `nccl.h` (the PyPI wheel `nvidia-nccl-cu13`, which the bootstrap puts
//! in `.deps/nccl`): types, constants and the *types* of the functions we call, never a function
//! declaration, so nothing links NCCL; `src/nccl/loader.rs` resolves the functions with `dlsym` at
//! run time.
//!
//! - Function types come from the header itself: the wrapper declares
//!   `typedef __typeof__(ncclAllReduce) *PFN_ncclAllReduce;` for each function in `FUNCTIONS`, so a
//!   signature can never differ from the header's.
//! - `nccl.h` includes `cuda_runtime.h`, `cuda_fp16.h` and `cuda_bf16.h`; it uses only
//!   `cudaStream_t` and `cudaEvent_t` from them. A three-line stand-in for those headers (written
//!   to OUT_DIR) replaces them, so the bindings do not depend on which CUDA root the build uses, and
//!   the Rust side uses `crate::cudart::sys::cudaStream_t` (the bindings leave the two types out).
//! - `ncclConfig_t` must be initialized with the header's `NCCL_CONFIG_INITIALIZER`; a macro
//!   bindgen cannot translate. It is translated here, field by field from the macro's text, into
//!   `config_initializer()`: a field the macro gains is then there too, or the build fails naming it.
//!
//! Header search: `LLAISYS_NVIDIA_NCCL_INCLUDE` (a folder holding nccl.h; when set nothing else is
//! searched), then `.deps/nccl/nvidia/nccl/include`. Without nccl.h the build fails and says how
//! to fix it, as it does without cudart.

use crate::libclang::Clang;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The NCCL functions the crate calls; each gets a `PFN_<name>` type.
const FUNCTIONS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclCommInitRankConfig",
    "ncclCommFinalize",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommGetAsyncError",
    "ncclCommCount",
    "ncclCommCuDevice",
    "ncclCommUserRank",
    "ncclAllReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBroadcast",
    "ncclReduce",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
];

const INCLUDE_VAR: &str = "LLAISYS_NVIDIA_NCCL_INCLUDE";

/// Finds nccl.h, writes `OUT_DIR/nccl.rs`, and tells the crate the header's version
/// (`LLAISYS_NVIDIA_BUILD_NCCL_VERSION`) and folder (`LLAISYS_NVIDIA_BUILD_NCCL_INCLUDE`).
pub fn generate(
    manifest: &Path,
    clang: &Clang,
    compiler: &cc::Tool,
    out_dir: &Path,
) -> Result<(), String> {
    let include = find_header(manifest)?;
    let header = include.join("nccl.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text = std::fs::read_to_string(&header)
        .map_err(|e| format!("llaisys-nvidia: cannot read {}: {e}", header.display()))?;
    let version = define_value(&text, "NCCL_VERSION_CODE").ok_or_else(|| {
        format!(
            "llaisys-nvidia: {} has no NCCL_VERSION_CODE: not NCCL's nccl.h?",
            header.display()
        )
    })?;

    let shim = out_dir.join("nccl-shim");
    std::fs::create_dir_all(&shim).map_err(|e| format!("llaisys-nvidia: {e}"))?;
    let stand_in = "/* llaisys-nvidia build: what nccl.h needs of CUDA's headers */\n\
                    #include <stddef.h>\n\
                    typedef struct CUstream_st *cudaStream_t;\n\
                    typedef struct CUevent_st *cudaEvent_t;\n\
                    #define CUDART_VERSION 13000\n";
    let empty = "/* llaisys-nvidia build: not needed by the bindings */\n";
    let files = [
        ("cuda_runtime.h", stand_in),
        ("cuda_fp16.h", empty),
        ("cuda_bf16.h", empty),
        ("cuda_fp8.h", empty),
    ];
    for (name, body) in files {
        std::fs::write(shim.join(name), body).map_err(|e| format!("llaisys-nvidia: {e}"))?;
    }
    let mut wrapper = String::from("#include <nccl.h>\n");
    for f in FUNCTIONS {
        let _ = writeln!(wrapper, "typedef __typeof__({f}) *PFN_{f};");
    }
    let wrapper_path = shim.join("llaisys_nccl_wrapper.h");
    std::fs::write(&wrapper_path, &wrapper).map_err(|e| format!("llaisys-nvidia: {e}"))?;

    // LIBCLANG_PATH was set for clang-sys by build/bindings.rs, which runs first.
    let attempt = |builtin: Option<&Path>| {
        let mut b = bindgen::Builder::default()
            .header(wrapper_path.display().to_string())
            .clang_arg("-xc")
            .clang_arg(format!("-I{}", shim.display()))
            .clang_arg(format!("-I{}", include.display()))
            .allowlist_type("nccl.*|PFN_nccl.*")
            .allowlist_var("NCCL_.*")
            .blocklist_type("cudaStream_t|CUstream_st|cudaEvent_t|CUevent_st")
            .default_enum_style(bindgen::EnumVariation::NewType {
                is_bitfield: false,
                is_global: false,
            })
            .derive_default(true)
            .layout_tests(true)
            .generate_comments(false);
        if let Some(dir) = builtin {
            b = b.clang_arg(format!("-isystem{}", dir.display()));
        }
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.generate()))
            .map_err(|_| "bindgen panicked (libclang could not be loaded?)".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
    };
    let bindings = match attempt(clang.builtin_include.as_deref()) {
        Ok(b) => b,
        Err(first) if first.contains("file not found") && clang.builtin_include.is_none() => {
            attempt(crate::libclang::cc_builtin_include(compiler).as_deref())
                .map_err(|e| failure(&header, &e))?
        }
        Err(e) => return Err(failure(&header, &e)),
    };
    let mut code = bindings.to_string();
    code.push_str(&config_initializer(&text)?);
    let out = out_dir.join("nccl.rs");
    std::fs::write(&out, code)
        .map_err(|e| format!("llaisys-nvidia: cannot write {}: {e}", out.display()))?;
    println!("cargo:rustc-env=LLAISYS_NVIDIA_BUILD_NCCL_VERSION={version}");
    println!(
        "cargo:rustc-env=LLAISYS_NVIDIA_BUILD_NCCL_INCLUDE={}",
        include.display()
    );
    Ok(())
}

fn find_header(manifest: &Path) -> Result<PathBuf, String> {
    let fix = "Fix, one of:\n  - bash scripts/bootstrap.sh   (installs the PyPI wheel nvidia-nccl-cu13 into \
               .deps/nccl)\n  - export LLAISYS_NVIDIA_NCCL_INCLUDE=/folder/holding/nccl.h";
    let set = crate::vars::tracked_os("LLAISYS_NVIDIA_NCCL_INCLUDE").map_err(|e| e.to_string())?;
    if let Some(v) = set.filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(&v);
        if dir.join("nccl.h").is_file() {
            return Ok(dir);
        }
        return Err(format!(
            "llaisys-nvidia: {INCLUDE_VAR}={} holds no nccl.h (when the variable is set nothing \
             else is searched).\n{fix}",
            dir.display()
        ));
    }
    let local = manifest.join(".deps/nccl/nvidia/nccl/include");
    if local.join("nccl.h").is_file() {
        return Ok(local);
    }
    Err(format!(
        "llaisys-nvidia: NCCL's nccl.h was not found (the communicator's bindings are made from \
         it; NCCL itself is loaded only at run time).\nLooked in:\n  - {INCLUDE_VAR}: not set\n  \
         - {}: missing\n{fix}",
        local.display()
    ))
}

/// The integer value of `#define NAME value`.
fn define_value(text: &str, name: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("#define")?.trim_start();
        let value = rest.strip_prefix(name)?;
        if !value.starts_with([' ', '\t']) {
            return None;
        }
        value.trim().parse().ok()
    })
}

/// Rust for `NCCL_CONFIG_INITIALIZER`: one `field: value` per line of the macro, each line being
/// `VALUE, /* field */`.
fn config_initializer(text: &str) -> Result<String, String> {
    let mut lines = text.lines().skip_while(|l| {
        !l.trim_start()
            .starts_with("#define NCCL_CONFIG_INITIALIZER")
    });
    if lines.next().is_none() {
        return Err("llaisys-nvidia: nccl.h has no NCCL_CONFIG_INITIALIZER".into());
    }
    let mut fields = String::new();
    for line in lines {
        let line = line.trim().trim_end_matches('\\').trim();
        if line.starts_with('}') {
            let body = format!(
                "\n/// `NCCL_CONFIG_INITIALIZER`, translated from nccl.h by build/nccl.rs.\n\
                 pub const fn config_initializer() -> ncclConfig_t {{\n    ncclConfig_t {{\n{fields}    }}\n}}\n"
            );
            return Ok(body);
        }
        let Some((value, comment)) = line.split_once("/*") else {
            return Err(format!(
                "llaisys-nvidia: unexpected line in NCCL_CONFIG_INITIALIZER: `{line}`"
            ));
        };
        let field = comment.trim_end_matches("*/").trim();
        let value = value.trim().trim_end_matches(',').trim();
        let rust = match value {
            "sizeof(ncclConfig_t)" => "::std::mem::size_of::<ncclConfig_t>()".to_string(),
            "NCCL_API_MAGIC" => "NCCL_API_MAGIC".to_string(),
            "NCCL_VERSION_CODE" => "NCCL_VERSION_CODE".to_string(),
            "NCCL_CONFIG_UNDEF_INT" => "i32::MIN".to_string(),
            "NCCL_CONFIG_UNDEF_PTR" => "::std::ptr::null()".to_string(),
            other => {
                return Err(format!(
                    "llaisys-nvidia: NCCL_CONFIG_INITIALIZER sets `{field}` to `{other}`, which \
                     build/nccl.rs does not know how to translate; teach it (this nccl.h is newer \
                     than the build script)"
                ))
            }
        };
        let _ = writeln!(fields, "        {field}: {rust},");
    }
    Err("llaisys-nvidia: NCCL_CONFIG_INITIALIZER has no closing brace".into())
}

fn failure(header: &Path, err: &str) -> String {
    format!(
        "llaisys-nvidia: bindgen failed on {}.\n  error: {err}\nReinstall the header with `bash \
         scripts/bootstrap.sh`, or check LIBCLANG_PATH (the cudart bindings use the same libclang).",
        header.display()
    )
}

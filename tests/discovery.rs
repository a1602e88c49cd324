//! Host-only tests of the build script's logic: the CUDA discovery in `build/discover.rs`, driven
//! against fake CUDA roots made in temporary folders (for the x86_64 and aarch64 target folders),
//! the `#define` renames that `build/renames.rs` resolves with the real C preprocessor, the
//! environment variables the build script reads (`build/vars.rs`), plus the real `.deps/` roots
//! the bootstrap installs and the build facts compiled into the crate. No GPU or driver needed.

#[path = "../build/discover.rs"]
mod discover;
#[path = "../build/renames.rs"]
mod renames;
#[path = "../build/vars.rs"]
#[allow(dead_code)] // the tests use its tables, not its readers
mod vars;

use discover::{
    cuda_target_dirs, find_cuda, find_cuda_per_major, inspect, read_cudart_version, CudaRoot,
    LinkMode, NotFound, Probe, Rejected, PIP_CUDA12, PIP_CUDA13, ROOT_VARS,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------------------------------------------------------------------------------------------
// Fake roots
// ---------------------------------------------------------------------------------------------

/// A fresh folder under the system temp dir, removed when dropped (also when a test panics).
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!(
            "llaisys-nvidia-discovery-{}-{test}-{n}",
            std::process::id()
        ));
        if path.exists() {
            fs::remove_dir_all(&path).expect("remove a stale temp dir");
        }
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` to `path`, creating its folders.
fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("path has a parent")).expect("mkdir -p");
    fs::write(path, text).expect("write file");
}

/// `cuda_runtime.h` and `cuda_runtime_api.h` (which, as in real CUDA, defines `CUDART_VERSION`)
/// in `inc`.
fn runtime_headers(inc: &Path, version: u32) {
    write(
        &inc.join("cuda_runtime.h"),
        &format!(
            "#pragma once\n/* CUDART_VERSION {version} */\n#include \"crt/host_config.h\"\n\
             #include \"cuda_runtime_api.h\"\n"
        ),
    );
    write(
        &inc.join("cuda_runtime_api.h"),
        &format!(
            "#pragma once\n#define __CUDART_API_VERSION CUDART_VERSION\n\
             #define CUDART_VERSION  {version}\n\
             #define cudaGetDeviceProperties cudaGetDeviceProperties_v2\n"
        ),
    );
}

/// `crt/host_config.h` in `inc`.
fn crt_header(inc: &Path) {
    write(&inc.join("crt").join("host_config.h"), "#pragma once\n");
}

/// Empty files standing for libraries.
fn libs(dir: &Path, names: &[&str]) {
    fs::create_dir_all(dir).expect("mkdir lib dir");
    for n in names {
        write(&dir.join(n), "");
    }
}

/// The `targets/` folders of the rust targets the tests build for.
const X86_64: &str = "x86_64-unknown-linux-gnu";
const AARCH64: &str = "aarch64-unknown-linux-gnu";

/// The `targets/` folders for x86_64, what most tests inspect with.
fn x86() -> Vec<String> {
    cuda_target_dirs(X86_64)
}

/// How a fake toolkit root lays out its folders.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `include/` and `lib64/`.
    Lib64,
    /// `include/` and `lib/`.
    Lib,
    /// `targets/<folder>/{include,lib}`.
    Targets(&'static str),
}

impl Layout {
    const ALL: [Layout; 3] = [Layout::Lib64, Layout::Lib, Layout::Targets("x86_64-linux")];

    fn include(self, root: &Path) -> PathBuf {
        match self {
            Layout::Lib64 | Layout::Lib => root.join("include"),
            Layout::Targets(t) => root.join("targets").join(t).join("include"),
        }
    }

    fn lib(self, root: &Path) -> PathBuf {
        match self {
            Layout::Lib64 => root.join("lib64"),
            Layout::Lib => root.join("lib"),
            Layout::Targets(t) => root.join("targets").join(t).join("lib"),
        }
    }
}

/// A complete toolkit root: both headers, `crt/host_config.h`, and the given libraries.
fn toolkit(root: &Path, layout: Layout, version: u32, lib_names: &[&str]) {
    let inc = layout.include(root);
    runtime_headers(&inc, version);
    crt_header(&inc);
    libs(&layout.lib(root), lib_names);
}

/// A toolkit root in the usual `include/` + `lib64/` layout with both the static and the shared
/// library.
fn full_toolkit(root: &Path, version: u32) {
    toolkit(
        root,
        Layout::Lib64,
        version,
        &["libcudart_static.a", "libcudart.so", "libcudart.so.13"],
    );
}

/// The CUDA 13 PyPI layout under a site-packages-like folder: `nvidia/cu13/{include,lib}`.
fn pypi_cu13(site: &Path) -> PathBuf {
    let cu13 = site.join("nvidia").join("cu13");
    runtime_headers(&cu13.join("include"), 13000);
    crt_header(&cu13.join("include"));
    libs(
        &cu13.join("lib"),
        &["libcudart_static.a", "libcudart.so.13"],
    );
    cu13
}

/// The CUDA 12 PyPI layout: `nvidia/cuda_runtime/{include,lib}` (no `crt/`), and, when `nvcc`,
/// `nvidia/cuda_nvcc/include/crt/host_config.h`. Returns the `cuda_runtime` folder.
fn pypi_cu12(site: &Path, nvcc: bool) -> PathBuf {
    let rt = site.join("nvidia").join("cuda_runtime");
    runtime_headers(&rt.join("include"), 12090);
    libs(&rt.join("lib"), &["libcudart_static.a", "libcudart.so.12"]);
    if nvcc {
        crt_header(&site.join("nvidia").join("cuda_nvcc").join("include"));
    }
    rt
}

/// A probe with no root variable set and nothing anywhere; `usr_local` is `base/usr-local`.
fn empty_probe(base: &Path) -> Probe {
    Probe {
        root_vars: ROOT_VARS.iter().map(|k| (k.to_string(), None)).collect(),
        project_local: Vec::new(),
        nvcc_dir: None,
        site_packages: Vec::new(),
        usr_local: base.join("usr-local"),
        cuda_targets: x86(),
    }
}

/// Sets one root variable of the probe.
fn set_root_var(probe: &mut Probe, var: &str, value: &Path) {
    let slot = probe
        .root_vars
        .iter_mut()
        .find(|(k, _)| k == var)
        .unwrap_or_else(|| panic!("{var} is not one of ROOT_VARS"));
    slot.1 = Some(value.display().to_string());
}

fn accepted(path: &Path, mode: LinkMode) -> CudaRoot {
    inspect(path, mode, &x86()).unwrap_or_else(|reason| {
        panic!(
            "{} should be accepted for {mode:?}, was rejected: {reason}",
            path.display()
        )
    })
}

fn rejected(path: &Path, mode: LinkMode) -> String {
    match inspect(path, mode, &x86()) {
        Ok(root) => panic!(
            "{} should be rejected for {mode:?}, was accepted: {root:?}",
            path.display()
        ),
        Err(reason) => reason,
    }
}

fn found(probe: &Probe, mode: LinkMode) -> CudaRoot {
    find_cuda(probe, mode)
        .unwrap_or_else(|nf| panic!("find_cuda should succeed for {mode:?}, failed:\n{nf}"))
}

fn not_found(probe: &Probe, mode: LinkMode) -> NotFound {
    match find_cuda(probe, mode) {
        Ok(root) => panic!("find_cuda should fail for {mode:?}, found {root:?}"),
        Err(nf) => nf,
    }
}

/// Removes a place's contents, leaving an empty folder (present but unusable).
fn spoil(path: &Path) {
    fs::remove_dir_all(path).expect("remove place");
    fs::create_dir_all(path).expect("recreate place empty");
}

fn origins(nf: &NotFound) -> Vec<String> {
    nf.rejected.iter().map(|r| r.origin.clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// Toolkit roots
// ---------------------------------------------------------------------------------------------

#[test]
fn valid_toolkit_root_is_accepted_for_static() {
    let t = TempDir::new("valid_static");
    let root = t.join("cuda");
    toolkit(&root, Layout::Lib64, 13000, &["libcudart_static.a"]);

    let cuda = accepted(&root, LinkMode::Static);
    assert_eq!(cuda.root, root);
    assert_eq!(cuda.include_dirs, vec![root.join("include")]);
    assert_eq!(cuda.lib_dir, root.join("lib64"));
    assert_eq!(cuda.lib_name, "libcudart_static.a");
    assert_eq!(cuda.cudart_version, 13000);
    assert_eq!(cuda.origin, "", "inspect leaves the origin to find_cuda");
}

#[test]
fn lib_lib64_and_targets_layouts_all_work_in_both_modes() {
    for layout in Layout::ALL {
        let t = TempDir::new(&format!("layout_{layout:?}"));
        let root = t.join("cuda");
        toolkit(
            &root,
            layout,
            12080,
            &["libcudart_static.a", "libcudart.so", "libcudart.so.12"],
        );

        let s = accepted(&root, LinkMode::Static);
        assert_eq!(s.include_dirs, vec![layout.include(&root)], "{layout:?}");
        assert_eq!(s.lib_dir, layout.lib(&root), "{layout:?}");
        assert_eq!(s.lib_name, "libcudart_static.a", "{layout:?}");
        assert_eq!(s.cudart_version, 12080, "{layout:?}");
        assert_eq!(s.root, root, "{layout:?}");

        let d = accepted(&root, LinkMode::Dynamic);
        assert_eq!(d.include_dirs, vec![layout.include(&root)], "{layout:?}");
        assert_eq!(d.lib_dir, layout.lib(&root), "{layout:?}");
        assert_eq!(d.lib_name, "libcudart.so", "{layout:?}");
        assert_eq!(d.cudart_version, 12080, "{layout:?}");
    }
}

#[test]
fn cudart_version_is_read_from_cuda_runtime_api_h() {
    let t = TempDir::new("version");
    let api = t.join("cuda_runtime_api.h");
    write(
        &api,
        "/* no version here */\n#define __CUDART_API_VERSION CUDART_VERSION\n\
         #define CUDART_VERSION  12090\n#define CUDART_VERSION 1\n",
    );
    assert_eq!(
        read_cudart_version(&api),
        Ok(12090),
        "first definition wins"
    );

    write(&api, "#pragma once\n");
    let err = read_cudart_version(&api).unwrap_err();
    assert!(err.contains("CUDART_VERSION"), "{err}");

    let missing = t.join("nope.h");
    let err = read_cudart_version(&missing).unwrap_err();
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn root_without_a_readable_version_is_rejected() {
    let t = TempDir::new("no_version");
    let root = t.join("cuda");
    toolkit(&root, Layout::Lib64, 13000, &["libcudart_static.a"]);
    write(
        &root.join("include").join("cuda_runtime_api.h"),
        "#pragma once\n",
    );
    let reason = rejected(&root, LinkMode::Static);
    assert!(reason.contains("CUDART_VERSION"), "{reason}");

    fs::remove_file(root.join("include").join("cuda_runtime_api.h")).unwrap();
    let reason = rejected(&root, LinkMode::Static);
    assert!(reason.contains("cuda_runtime_api.h"), "{reason}");
}

#[test]
fn missing_place_or_missing_cuda_runtime_h_is_rejected() {
    let t = TempDir::new("no_headers");
    let missing = t.join("does-not-exist");
    let reason = rejected(&missing, LinkMode::Static);
    assert!(reason.contains("does not exist"), "{reason}");
    assert!(reason.contains(&missing.display().to_string()), "{reason}");

    let root = t.join("cuda");
    libs(&root.join("lib64"), &["libcudart_static.a", "libcudart.so"]);
    crt_header(&root.join("include"));
    for mode in [LinkMode::Static, LinkMode::Dynamic] {
        let reason = rejected(&root, mode);
        assert!(reason.contains("cuda_runtime.h"), "{mode:?}: {reason}");
    }
}

#[test]
fn missing_crt_host_config_is_rejected_naming_it() {
    let t = TempDir::new("no_crt");
    for layout in Layout::ALL {
        let root = t.join(format!("{layout:?}"));
        toolkit(
            &root,
            layout,
            13000,
            &["libcudart_static.a", "libcudart.so"],
        );
        fs::remove_file(layout.include(&root).join("crt").join("host_config.h")).unwrap();
        for mode in [LinkMode::Static, LinkMode::Dynamic] {
            let reason = rejected(&root, mode);
            assert!(
                reason.contains("crt/host_config.h"),
                "{layout:?} {mode:?}: {reason}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Libraries
// ---------------------------------------------------------------------------------------------

#[test]
fn static_mode_rejects_a_root_with_only_the_shared_library() {
    let t = TempDir::new("static_needs_a");
    let root = t.join("cuda");
    toolkit(
        &root,
        Layout::Lib64,
        13000,
        &["libcudart.so", "libcudart.so.13"],
    );
    let reason = rejected(&root, LinkMode::Static);
    assert!(reason.contains("libcudart_static.a"), "{reason}");
    assert!(
        reason.contains(&root.join("lib64").display().to_string()),
        "the reason lists where it looked: {reason}"
    );
    // The same root is fine for the dynamic mode.
    assert_eq!(accepted(&root, LinkMode::Dynamic).lib_name, "libcudart.so");
}

#[test]
fn dynamic_mode_rejects_a_root_with_only_the_static_library() {
    let t = TempDir::new("dynamic_needs_so");
    let root = t.join("cuda");
    toolkit(&root, Layout::Lib64, 13000, &["libcudart_static.a"]);
    let reason = rejected(&root, LinkMode::Dynamic);
    assert!(reason.contains("libcudart.so"), "{reason}");
    assert!(!reason.contains("libcudart_static.a"), "{reason}");
    // The same root is fine for the static mode.
    assert_eq!(
        accepted(&root, LinkMode::Static).lib_name,
        "libcudart_static.a"
    );
}

#[test]
fn versioned_only_shared_libraries_pick_the_highest() {
    let t = TempDir::new("versioned");
    let root = t.join("cuda");
    // 9 sorts after 13 as text; the choice must be numeric. Non-numeric suffixes are ignored.
    toolkit(
        &root,
        Layout::Lib64,
        13000,
        &[
            "libcudart.so.12",
            "libcudart.so.13",
            "libcudart.so.9",
            "libcudart.so.99.bak",
        ],
    );
    let cuda = accepted(&root, LinkMode::Dynamic);
    assert_eq!(cuda.lib_name, "libcudart.so.13");
    assert_eq!(cuda.lib_dir, root.join("lib64"));
}

#[test]
fn unversioned_shared_library_is_preferred() {
    let t = TempDir::new("unversioned");
    let plain = t.join("plain");
    toolkit(
        &plain,
        Layout::Lib64,
        13000,
        &["libcudart.so.12", "libcudart.so", "libcudart.so.13"],
    );
    assert_eq!(accepted(&plain, LinkMode::Dynamic).lib_name, "libcudart.so");

    // As a real toolkit ships it: libcudart.so a symlink to the versioned file.
    let linked = t.join("linked");
    toolkit(&linked, Layout::Lib64, 13000, &["libcudart.so.13"]);
    std::os::unix::fs::symlink("libcudart.so.13", linked.join("lib64").join("libcudart.so"))
        .unwrap();
    assert_eq!(
        accepted(&linked, LinkMode::Dynamic).lib_name,
        "libcudart.so"
    );
}

// ---------------------------------------------------------------------------------------------
// PyPI layouts
// ---------------------------------------------------------------------------------------------

#[test]
fn pypi_cuda13_layout_in_site_packages_works() {
    let t = TempDir::new("pypi13");
    let site = t.join("site-packages");
    let cu13 = pypi_cu13(&site);

    let s = accepted(&site, LinkMode::Static);
    assert_eq!(s.root, cu13);
    assert_eq!(s.include_dirs, vec![cu13.join("include")]);
    assert_eq!(s.lib_dir, cu13.join("lib"));
    assert_eq!(s.lib_name, "libcudart_static.a");
    assert_eq!(s.cudart_version, 13000);

    let d = accepted(&site, LinkMode::Dynamic);
    assert_eq!(d.lib_dir, cu13.join("lib"));
    assert_eq!(d.lib_name, "libcudart.so.13");

    // Pointing at nvidia/cu13 itself works the same.
    assert_eq!(accepted(&cu13, LinkMode::Static).root, cu13);

    // And it is found through the probe's site-packages.
    let mut probe = empty_probe(t.path());
    probe.site_packages = vec![t.join("empty-site"), site.clone()];
    let cuda = found(&probe, LinkMode::Dynamic);
    assert_eq!(cuda.origin, format!("python3 wheels {}", site.display()));
    assert_eq!(cuda.root, cu13);
}

#[test]
fn pypi_cuda12_split_layout_works_with_cuda_nvcc() {
    let t = TempDir::new("pypi12");
    let site = t.join("site-packages");
    let rt = pypi_cu12(&site, true);
    let nvcc_inc = site.join("nvidia").join("cuda_nvcc").join("include");

    for (mode, lib) in [
        (LinkMode::Static, "libcudart_static.a"),
        (LinkMode::Dynamic, "libcudart.so.12"),
    ] {
        // Both the site-packages folder and nvidia/cuda_runtime itself.
        for place in [&site, &rt] {
            let cuda = accepted(place, mode);
            assert_eq!(cuda.root, rt, "{mode:?} {}", place.display());
            assert_eq!(
                cuda.include_dirs,
                vec![rt.join("include"), nvcc_inc.clone()],
                "{mode:?} {}",
                place.display()
            );
            assert_eq!(cuda.lib_dir, rt.join("lib"));
            assert_eq!(cuda.lib_name, lib);
            assert_eq!(cuda.cudart_version, 12090);
        }
    }
}

#[test]
fn pypi_cuda12_split_layout_without_cuda_nvcc_is_rejected() {
    let t = TempDir::new("pypi12_no_nvcc");
    let site = t.join("site-packages");
    let rt = pypi_cu12(&site, false);
    // The package the reason must name, taken from the pinned CUDA 12 packages.
    let nvcc_pkg = PIP_CUDA12
        .split_whitespace()
        .find(|p| p.starts_with("nvidia-cuda-nvcc"))
        .and_then(|p| p.split("==").next())
        .expect("PIP_CUDA12 names the nvcc wheel");
    assert_eq!(nvcc_pkg, "nvidia-cuda-nvcc-cu12");
    for mode in [LinkMode::Static, LinkMode::Dynamic] {
        for place in [&site, &rt] {
            let reason = rejected(place, mode);
            assert!(reason.contains(nvcc_pkg), "{mode:?}: {reason}");
            assert!(reason.contains("crt/host_config.h"), "{mode:?}: {reason}");
        }
    }
}

#[test]
fn pip_package_lists_match_the_bootstrap_script() {
    let script = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scripts")
            .join("bootstrap.sh"),
    )
    .expect("read scripts/bootstrap.sh");
    assert!(
        script.contains(&format!("CUDA13_PKGS=\"{PIP_CUDA13}\"")),
        "scripts/bootstrap.sh and discover::PIP_CUDA13 ({PIP_CUDA13}) disagree"
    );
    assert!(
        script.contains(&format!("CUDA12_PKGS=\"{PIP_CUDA12}\"")),
        "scripts/bootstrap.sh and discover::PIP_CUDA12 ({PIP_CUDA12}) disagree"
    );
}

// ---------------------------------------------------------------------------------------------
// Root variables
// ---------------------------------------------------------------------------------------------

/// A probe whose project-local folder and `/usr/local/cuda` are both valid.
fn probe_with_valid_fallbacks(t: &TempDir) -> Probe {
    let mut probe = empty_probe(t.path());
    let local = t.join("deps-cuda13");
    full_toolkit(&local, 13000);
    full_toolkit(&probe.usr_local.join("cuda"), 13000);
    probe.project_local = vec![local];
    probe
}

#[test]
fn a_bad_root_variable_fails_even_when_other_places_are_valid() {
    let t = TempDir::new("var_bad");
    let base = probe_with_valid_fallbacks(&t);
    // Sanity: without the variable the fallbacks are found.
    for mode in [LinkMode::Static, LinkMode::Dynamic] {
        found(&base, mode);
    }

    let no_crt = t.join("no-crt");
    toolkit(&no_crt, Layout::Lib64, 13000, &["libcudart_static.a"]);
    fs::remove_file(no_crt.join("include").join("crt").join("host_config.h")).unwrap();
    let missing = t.join("missing-root");

    for var in ROOT_VARS {
        for bad in [&no_crt, &missing] {
            for mode in [LinkMode::Static, LinkMode::Dynamic] {
                let mut probe = base.clone();
                set_root_var(&mut probe, var, bad);
                let nf = not_found(&probe, mode);
                let value = bad.display().to_string();
                assert_eq!(nf.mode, mode);
                assert_eq!(nf.vars_set, vec![var.to_string()]);
                assert_eq!(
                    origins(&nf),
                    vec![format!("{var}={value}")],
                    "only the variable is searched"
                );

                let text = nf.to_string();
                assert!(text.contains(var), "{text}");
                assert!(text.contains(&format!("{var}={value}")), "{text}");
                assert!(text.contains("bash scripts/bootstrap.sh"), "{text}");
                assert!(text.contains(PIP_CUDA13), "{text}");
                assert!(text.contains(&format!("point {var} at")), "{text}");
                assert!(text.contains(&nf.rejected[0].reason), "{text}");
                assert!(
                    !text.contains("project-local"),
                    "nothing else is listed: {text}"
                );
            }
        }
    }
}

#[test]
fn several_bad_root_variables_are_all_listed_in_order() {
    let t = TempDir::new("vars_bad");
    let mut probe = probe_with_valid_fallbacks(&t);
    let values: Vec<PathBuf> = ROOT_VARS
        .iter()
        .map(|v| t.join(format!("bad-{v}")))
        .collect();
    for (var, value) in ROOT_VARS.iter().zip(&values) {
        set_root_var(&mut probe, var, value);
    }
    let nf = not_found(&probe, LinkMode::Static);
    assert_eq!(nf.vars_set, ROOT_VARS.map(String::from).to_vec());
    let expected: Vec<String> = ROOT_VARS
        .iter()
        .zip(&values)
        .map(|(var, value)| format!("{var}={}", value.display()))
        .collect();
    assert_eq!(origins(&nf), expected);
    let text = nf.to_string();
    assert!(text.contains(&ROOT_VARS.join(", ")), "{text}");
    assert!(text.contains("bash scripts/bootstrap.sh"), "{text}");
}

#[test]
fn a_valid_root_variable_wins_over_everything_else() {
    let t = TempDir::new("var_good");
    let base = probe_with_valid_fallbacks(&t);
    let home = t.join("opt-cuda");
    toolkit(
        &home,
        Layout::Targets("x86_64-linux"),
        12090,
        &["libcudart_static.a", "libcudart.so.12"],
    );

    for var in ROOT_VARS {
        for mode in [LinkMode::Static, LinkMode::Dynamic] {
            let mut probe = base.clone();
            set_root_var(&mut probe, var, &home);
            let cuda = found(&probe, mode);
            assert_eq!(cuda.origin, format!("{var}={}", home.display()));
            assert_eq!(cuda.root, home);
            assert_eq!(cuda.cudart_version, 12090);
        }
    }

    // A bad earlier variable does not stop a good later one, and the first good one wins.
    let mut probe = base.clone();
    set_root_var(&mut probe, "CUDA_HOME", &t.join("nowhere"));
    set_root_var(&mut probe, "CUDA_PATH", &home);
    set_root_var(&mut probe, "CUDA_ROOT", &t.join("deps-cuda13"));
    let cuda = found(&probe, LinkMode::Static);
    assert_eq!(cuda.origin, format!("CUDA_PATH={}", home.display()));
}

// ---------------------------------------------------------------------------------------------
// Search order
// ---------------------------------------------------------------------------------------------

#[test]
fn search_order_without_root_variables() {
    let t = TempDir::new("order");
    let mut probe = empty_probe(t.path());
    let local13 = t.join("deps").join("cuda13");
    let local12 = t.join("deps").join("cuda12");
    let nvcc_root = t.join("nvcc-toolkit");
    let nvcc_bin = nvcc_root.join("bin");
    let site = t.join("site-packages");
    let usr = probe.usr_local.clone();
    let cuda_12_10 = usr.join("cuda-12.10");
    let cuda_12_9 = usr.join("cuda-12.9");
    let cuda_11_8 = usr.join("cuda-11.8");
    let cuda_9_2 = usr.join("cuda-9.2");
    let cuda = usr.join("cuda");

    full_toolkit(&local13, 13000);
    full_toolkit(&local12, 12091);
    full_toolkit(&nvcc_root, 12092);
    write(&nvcc_bin.join("nvcc"), "");
    pypi_cu13(&site);
    full_toolkit(&cuda_12_10, 12100);
    full_toolkit(&cuda_12_9, 12090);
    // Older versioned roots are present but unusable; they must still be listed, newest first.
    fs::create_dir_all(&cuda_11_8).unwrap();
    fs::create_dir_all(&cuda_9_2).unwrap();
    // Not cuda-X.Y: never looked at.
    full_toolkit(&usr.join("cuda-tools"), 1);
    full_toolkit(&usr.join("cuda-12.x"), 1);
    full_toolkit(&cuda, 11000);

    probe.project_local = vec![local13.clone(), local12.clone()];
    probe.nvcc_dir = Some(nvcc_bin.clone());
    probe.site_packages = vec![site.clone()];

    let expected_origins = vec![
        format!("project-local {}", local13.display()),
        format!("project-local {}", local12.display()),
        format!("nvcc on PATH ({})", nvcc_bin.display()),
        format!("python3 wheels {}", site.display()),
        cuda_12_10.display().to_string(),
        cuda_12_9.display().to_string(),
        cuda_11_8.display().to_string(),
        cuda_9_2.display().to_string(),
        cuda.display().to_string(),
    ];

    // Each step: the place expected to win now, its cudart version, then spoil it.
    let steps: Vec<(usize, PathBuf, PathBuf, u32)> = vec![
        (0, local13.clone(), local13.clone(), 13000),
        (1, local12.clone(), local12.clone(), 12091),
        (2, nvcc_root.clone(), nvcc_root.clone(), 12092),
        (3, site.join("nvidia").join("cu13"), site.clone(), 13000),
        (4, cuda_12_10.clone(), cuda_12_10.clone(), 12100),
        (5, cuda_12_9.clone(), cuda_12_9.clone(), 12090),
        (8, cuda.clone(), cuda.clone(), 11000),
    ];
    for (idx, root, place, version) in steps {
        for mode in [LinkMode::Static, LinkMode::Dynamic] {
            let got = found(&probe, mode);
            assert_eq!(got.origin, expected_origins[idx], "{mode:?}");
            assert_eq!(got.root, root, "{mode:?}");
            assert_eq!(got.cudart_version, version, "{mode:?}");
        }
        spoil(&place);
    }

    for mode in [LinkMode::Static, LinkMode::Dynamic] {
        let nf = not_found(&probe, mode);
        assert!(nf.vars_set.is_empty());
        assert_eq!(origins(&nf), expected_origins, "{mode:?}");
        let text = nf.to_string();
        assert!(text.contains("Looked in, in this order:"), "{text}");
        assert!(text.contains("bash scripts/bootstrap.sh"), "{text}");
        assert!(text.contains(PIP_CUDA13), "{text}");
        // Every rejected place is in the listing, in search order.
        let mut last = 0;
        for r in &nf.rejected {
            let line = format!("  - {}: {}", r.origin, r.reason);
            let at = text[last..]
                .find(&line)
                .unwrap_or_else(|| panic!("{line:?} missing or out of order in:\n{text}"));
            last += at + line.len();
        }
    }
}

#[test]
fn nothing_anywhere_lists_usr_local_cuda() {
    let t = TempDir::new("nothing");
    let probe = empty_probe(t.path());
    let nf = not_found(&probe, LinkMode::Static);
    let plain = probe.usr_local.join("cuda");
    assert_eq!(
        nf.rejected,
        vec![Rejected {
            origin: plain.display().to_string(),
            reason: format!("{} does not exist or is not a folder", plain.display()),
        }]
    );
    let text = nf.to_string();
    assert!(text.contains("static"), "{text}");
    assert!(text.contains("libcudart_static.a"), "{text}");
    assert!(text.contains("bash scripts/bootstrap.sh"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// #define renames, resolved by the C preprocessor
// ---------------------------------------------------------------------------------------------

/// The rust triple of the machine running the tests (the crate is Linux-only).
fn host_triple() -> String {
    let env = if cfg!(target_env = "musl") {
        "musl"
    } else {
        "gnu"
    };
    format!("{}-unknown-linux-{env}", std::env::consts::ARCH)
}

/// The C compiler as the build script gets it: the `cc` crate's choice (CC, CFLAGS).
fn c_compiler(defines: &[&str]) -> cc::Tool {
    let triple = host_triple();
    let mut b = cc::Build::new();
    b.cargo_metadata(false)
        .target(&triple)
        .host(&triple)
        .opt_level(0);
    for d in defines {
        b.define(d, None);
    }
    b.try_get_compiler()
        .unwrap_or_else(|e| panic!("the cc crate finds no C compiler: {e}"))
}

fn wrapper_h() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("wrapper.h")
}

fn pair(versioned: &str, plain: &str) -> (String, String) {
    (versioned.to_string(), plain.to_string())
}

/// A fake `cuda_runtime.h` shaped like the real one: the PTDS/PTSZ helpers defined in both
/// branches, renames through them, and look-alikes that are not renames.
const FAKE_RENAMING_HEADER: &str = "\
#pragma once
#define CUDART_VERSION  12090
#define __CUDART_API_VERSION CUDART_VERSION
#if defined(__CUDART_API_PER_THREAD_DEFAULT_STREAM)
    #define __CUDART_API_PTDS(api) api ## _ptds
    #define __CUDART_API_PTSZ(api) api ## _ptsz
#else
    #define __CUDART_API_PTDS(api) api
    #define __CUDART_API_PTSZ(api) api
#endif
#define __LLAISYS_TEST_VERSIONED(api, n) api ## _v ## n
#define cudaStreamGetCaptureInfo       __CUDART_API_PTSZ(cudaStreamGetCaptureInfo_v2)
#define cudaGetDeviceProperties cudaGetDeviceProperties_v2
#define cudaMemcpy                     __CUDART_API_PTDS(cudaMemcpy)
    #define cudaStreamGetCaptureInfo_v3    __CUDART_API_PTSZ(cudaStreamGetCaptureInfo_v3)
#define cudaPasted __LLAISYS_TEST_VERSIONED(cudaPasted, 3)
#if 0
#define cudaNeverDefined cudaNeverDefined_v2
#endif
#define cudaUndone cudaUndone_v2
#undef cudaUndone
#define cudaFoo cudaFooBar_v2
#define cudaBar cudaBar_vX
#define cudaMax(a, b) cudaMax_v2
#define notCuda notCuda_v2
#define cudaHostAllocDefault 0x00
#define cudaGetDeviceProperties cudaGetDeviceProperties_v2
";

#[test]
fn renames_are_what_the_preprocessor_expands() {
    let t = TempDir::new("renames");
    let inc = t.join("include");
    write(&inc.join("cuda_runtime.h"), FAKE_RENAMING_HEADER);
    let got = renames::resolve(&c_compiler(&[]), &wrapper_h(), &[inc], &t.join("scratch"))
        .unwrap_or_else(|e| panic!("{e:?}"));
    // Only what a C caller really gets: not the names under `#if 0` or `#undef` (a reading of the
    // header text would have taken them), not function-like macros, not other prefixes, and
    // token pasting is followed.
    assert_eq!(
        got,
        vec![
            pair("cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"),
            pair("cudaPasted_v3", "cudaPasted"),
            pair("cudaStreamGetCaptureInfo_v2", "cudaStreamGetCaptureInfo"),
        ]
    );

    // Headers without renames give none.
    let plain = t.join("plain");
    write(
        &plain.join("cuda_runtime.h"),
        "#pragma once\n#define CUDART_VERSION 13000\n#define cudaHostAllocDefault 0x00\n\
         #define cudaMemcpy cudaMemcpy\n",
    );
    let got = renames::resolve(&c_compiler(&[]), &wrapper_h(), &[plain], &t.join("s2"))
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn renames_failures_name_the_compiler_and_its_error() {
    let t = TempDir::new("renames_fail");
    // No cuda_runtime.h anywhere: the preprocessor's own message comes through.
    let err = renames::resolve(
        &c_compiler(&[]),
        &wrapper_h(),
        &[t.join("empty")],
        &t.join("scratch"),
    )
    .expect_err("no headers must fail");
    let text = format!("{err:?}");
    assert!(text.contains("the C preprocessor failed"), "{text}");
    assert!(text.contains("cuda_runtime.h"), "{text}");

    // CFLAGS defining CUDA_API_PER_THREAD_DEFAULT_STREAM hit wrapper.h's #error.
    let inc = t.join("include");
    write(&inc.join("cuda_runtime.h"), FAKE_RENAMING_HEADER);
    let err = renames::resolve(
        &c_compiler(&["CUDA_API_PER_THREAD_DEFAULT_STREAM"]),
        &wrapper_h(),
        &[inc],
        &t.join("scratch2"),
    )
    .expect_err("per-thread default stream must be refused");
    let text = format!("{err:?}");
    assert!(
        text.contains("must not be built with CUDA_API_PER_THREAD_DEFAULT_STREAM"),
        "{text}"
    );
}

#[test]
fn rename_parsing_keeps_only_single_versioned_identifiers() {
    let dm = "#define cudaA cudaA_v2\n#define cudaF(x) x\n#define cudaB\n#define other 1\n\
              #define cudaC(x)\n#define cudaA cudaA_v2\n#define cuda_d 3\n";
    let names = renames::cuda_object_macros(dm);
    assert_eq!(names, ["cudaA", "cudaB", "cuda_d"]);

    let src = renames::probe_source(Path::new("/w/wrapper.h"), &names);
    assert!(src.starts_with("#include \"/w/wrapper.h\"\n"), "{src}");
    let marks: Vec<&str> = src.lines().skip(1).collect();
    assert_eq!(marks.len(), names.len(), "{src}");
    for (line, name) in marks.iter().zip(&names) {
        assert!(line.ends_with(&format!(" {name}")), "{line}");
    }

    // The expansions, as the preprocessor would print them.
    let mark =
        |i: usize, exp: &str| format!("{}{exp}", &marks[i][..marks[i].len() - names[i].len()]);
    let expanded = [
        "int unrelated;".to_string(),
        mark(0, "cudaA_v2"),
        mark(1, ""),
        mark(2, "3"),
    ]
    .join("\n");
    assert_eq!(
        renames::parse_probe(&expanded, &names),
        vec![pair("cudaA_v2", "cudaA")]
    );
    for not_a_rename in [
        "cudaA_v",
        "cudaA_v2 + 1",
        "cudaA_vX",
        "cudaAB_v2",
        "(cudaA_v2)",
    ] {
        let expanded = mark(0, not_a_rename);
        assert!(
            renames::parse_probe(&expanded, &names).is_empty(),
            "{not_a_rename}"
        );
    }
}

/// The renames of a real `.deps/` root, through wrapper.h, as the build resolves them.
fn real_renames(cuda: &CudaRoot) -> Vec<(String, String)> {
    let t = TempDir::new("real_renames");
    // The compiler is a local so that no temporary outlives `t` (the same drop order in the
    // 2021 and 2024 editions).
    let compiler = c_compiler(&[]);
    renames::resolve(&compiler, &wrapper_h(), &cuda.include_dirs, t.path())
        .unwrap_or_else(|e| panic!("{e:?}"))
}

#[test]
fn cuda12_renames_from_the_real_headers() {
    let root = deps_dir("cuda12");
    assert!(
        root.is_dir(),
        "{} is missing: run `bash scripts/bootstrap.sh --cuda12` (scripts/test.sh does)",
        root.display()
    );
    let got = real_renames(&accepted(&root, LinkMode::Static));
    // The two the crate calls, and no rename whose plain name is not a cuda* API.
    for plain in ["cudaGetDeviceProperties", "cudaStreamGetCaptureInfo"] {
        assert!(
            got.contains(&pair(&format!("{plain}_v2"), plain)),
            "{got:?}"
        );
    }
    for (versioned, plain) in &got {
        assert!(plain.starts_with("cuda") && versioned.starts_with(plain.as_str()));
    }
}

#[test]
fn cuda13_headers_rename_neither_function_the_crate_calls() {
    let root = deps_dir("cuda13");
    let got = real_renames(&accepted(&root, LinkMode::Static));
    for plain in ["cudaGetDeviceProperties", "cudaStreamGetCaptureInfo"] {
        assert!(
            !got.iter().any(|(_, p)| p == plain),
            "{plain} is renamed in CUDA 13: {got:?}"
        );
    }
}

#[test]
fn the_built_bindings_carry_the_renames_the_build_resolved() {
    // What build.rs resolved for the root this crate was built against ...
    let built: Vec<(String, String)> = env!("LLAISYS_NVIDIA_BUILD_RENAMES")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (plain, versioned) = s.split_once('=').expect("plain=versioned");
            pair(versioned, plain)
        })
        .collect();
    // ... equals what the preprocessor gives the test for the same include folders ...
    let include: Vec<PathBuf> =
        std::env::split_paths(env!("LLAISYS_NVIDIA_BUILD_INCLUDE")).collect();
    let t = TempDir::new("built_renames");
    let again = renames::resolve(&c_compiler(&[]), &wrapper_h(), &include, t.path())
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(built, again);
    if llaisys_nvidia::runtime::build::cudart_version() / 1000 == 12 {
        assert!(
            built.contains(&pair(
                "cudaGetDeviceProperties_v2",
                "cudaGetDeviceProperties"
            )),
            "{built:?}"
        );
    }
    // ... and the generated bindings give each the plain name and link the versioned symbol
    // (the loaded mode: the dispatch resolves the versioned symbol of the primary headers).
    if llaisys_nvidia::runtime::build::LINK_MODE == "loaded" {
        let dispatch = fs::read_to_string(Path::new(env!("OUT_DIR")).join("cudart_loaded.rs"))
            .expect("OUT_DIR/cudart_loaded.rs");
        for (versioned, plain) in &built {
            let entry = format!("Symbol::new({plain:?}, &[Some(c{versioned:?})");
            assert!(
                dispatch.contains(&entry),
                "{entry} missing from the dispatch"
            );
        }
        return;
    }
    let bindings = fs::read_to_string(Path::new(env!("OUT_DIR")).join("cudart.rs"))
        .expect("OUT_DIR/cudart.rs");
    for (versioned, plain) in &built {
        let decl = format!("pub fn {plain}(");
        let at = bindings
            .find(&decl)
            .unwrap_or_else(|| panic!("{decl} missing from the bindings"));
        let before = &bindings[..at];
        let attr = before.rfind("#[link_name").expect("a link_name attribute");
        assert!(
            before[attr..].contains(versioned.as_str()),
            "{plain} does not link {versioned}: {}",
            &bindings[attr..at + decl.len()]
        );
        assert!(
            !bindings.contains(&format!("pub fn {versioned}(")),
            "{versioned} kept its own name"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// CUDA target folders
// ---------------------------------------------------------------------------------------------

#[test]
fn cuda_target_folders_follow_the_rust_target() {
    let dirs = |t: &str| cuda_target_dirs(t);
    assert_eq!(dirs(X86_64), ["x86_64-linux"]);
    assert_eq!(dirs(AARCH64), ["sbsa-linux", "aarch64-linux"]);
    assert_eq!(
        dirs("aarch64-unknown-linux-musl"),
        ["sbsa-linux", "aarch64-linux"]
    );
    assert_eq!(dirs("x86_64-unknown-linux-musl"), ["x86_64-linux"]);
    assert_eq!(dirs("powerpc64le-unknown-linux-gnu"), ["ppc64le-linux"]);
    for none in [
        "x86_64-pc-windows-msvc",
        "aarch64-apple-darwin",
        "riscv64gc-unknown-linux-gnu",
        "",
    ] {
        assert!(dirs(none).is_empty(), "{none}: {:?}", dirs(none));
    }
}

#[test]
fn aarch64_roots_are_found_in_their_target_folders() {
    let arm = cuda_target_dirs(AARCH64);
    for folder in ["sbsa-linux", "aarch64-linux"] {
        let t = TempDir::new(&format!("arm_{folder}"));
        let root = t.join("cuda");
        let layout = Layout::Targets(folder);
        toolkit(
            &root,
            layout,
            13000,
            &["libcudart_static.a", "libcudart.so.13"],
        );
        for (mode, lib) in [
            (LinkMode::Static, "libcudart_static.a"),
            (LinkMode::Dynamic, "libcudart.so.13"),
        ] {
            let cuda = inspect(&root, mode, &arm)
                .unwrap_or_else(|r| panic!("{folder} {mode:?} rejected: {r}"));
            assert_eq!(cuda.include_dirs, vec![layout.include(&root)], "{folder}");
            assert_eq!(cuda.lib_dir, layout.lib(&root), "{folder}");
            assert_eq!(cuda.lib_name, lib, "{folder}");

            // The x86_64 build does not take it, and says where it looked.
            let reason = inspect(&root, mode, &x86()).expect_err("x86_64 must not take it");
            let x86_inc = root.join("targets/x86_64-linux/include");
            assert!(reason.contains("cuda_runtime.h"), "{reason}");
            assert!(reason.contains(&x86_inc.display().to_string()), "{reason}");
        }

        // Through the whole search, as /usr/local/cuda of an aarch64 machine.
        let mut probe = empty_probe(t.path());
        probe.cuda_targets = arm.clone();
        toolkit(
            &probe.usr_local.join("cuda"),
            layout,
            12090,
            &["libcudart_static.a"],
        );
        let cuda = found(&probe, LinkMode::Static);
        assert_eq!(cuda.cudart_version, 12090);
        assert_eq!(cuda.lib_dir, layout.lib(&probe.usr_local.join("cuda")));
    }
}

#[test]
fn aarch64_search_names_both_folders_and_prefers_sbsa() {
    let arm = cuda_target_dirs(AARCH64);
    let t = TempDir::new("arm_order");
    // An x86_64 toolkit is not usable for aarch64; the reason lists every folder looked at.
    let x86_root = t.join("x86");
    toolkit(
        &x86_root,
        Layout::Targets("x86_64-linux"),
        13000,
        &["libcudart_static.a"],
    );
    let reason = inspect(&x86_root, LinkMode::Static, &arm).expect_err("x86_64 root on aarch64");
    for folder in [
        "include",
        "targets/sbsa-linux/include",
        "targets/aarch64-linux/include",
    ] {
        let p = x86_root.join(folder).display().to_string();
        assert!(reason.contains(&p), "{folder}: {reason}");
    }
    // Headers found but the library only in another target's folder.
    let mixed = t.join("mixed");
    runtime_headers(&mixed.join("targets/sbsa-linux/include"), 13000);
    crt_header(&mixed.join("targets/sbsa-linux/include"));
    libs(
        &mixed.join("targets/x86_64-linux/lib"),
        &["libcudart_static.a"],
    );
    let reason = inspect(&mixed, LinkMode::Static, &arm).expect_err("no aarch64 library");
    assert!(reason.contains("libcudart_static.a"), "{reason}");
    for folder in [
        "lib64",
        "lib",
        "targets/sbsa-linux/lib",
        "targets/aarch64-linux/lib",
    ] {
        let p = mixed.join(folder).display().to_string();
        assert!(reason.contains(&p), "{folder}: {reason}");
    }
    // Both folders present: sbsa-linux first.
    let both = t.join("both");
    for (folder, version) in [("sbsa-linux", 13000), ("aarch64-linux", 12060)] {
        toolkit(
            &both,
            Layout::Targets(folder),
            version,
            &["libcudart_static.a"],
        );
    }
    let cuda = inspect(&both, LinkMode::Static, &arm).expect("both");
    assert_eq!(cuda.cudart_version, 13000);
    assert_eq!(cuda.lib_dir, both.join("targets/sbsa-linux/lib"));
}

// ---------------------------------------------------------------------------------------------
// Environment variables of the build script
// ---------------------------------------------------------------------------------------------

/// build.rs and build/*.rs, with their paths relative to the crate.
fn build_script_sources() -> Vec<(String, String)> {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![base.join("build.rs")];
    let mut more: Vec<PathBuf> = fs::read_dir(base.join("build"))
        .expect("build/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    more.sort();
    files.extend(more);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            (
                rel,
                fs::read_to_string(&p).expect("read build script source"),
            )
        })
        .collect()
}

/// The string-literal first arguments of every call `call("NAME")` in `text`, and how many calls
/// had something else as their argument.
fn literal_args(text: &str, call: &str) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    let mut other = 0;
    for (at, _) in text.match_indices(call) {
        let rest = &text[at + call.len()..];
        match rest.strip_prefix('"').and_then(|r| r.split_once('"')) {
            Some((name, _)) => names.push(name.to_string()),
            None => other += 1,
        }
    }
    (names, other)
}

#[test]
fn every_environment_variable_the_build_script_reads_is_declared() {
    let sources = build_script_sources();
    assert!(sources.iter().any(|(f, _)| f == "build/vars.rs"));
    // Only build/vars.rs touches the process environment (reads through it are declared).
    let forbidden = [
        "env::var(",
        "env::var_os(",
        "env::vars(",
        "env::vars_os(",
        "env!(",
        "option_env!(",
        "use std::env::{",
        "use std::env::var",
        "env::remove_var(",
    ];
    let mut offenders = Vec::new();
    for (file, text) in &sources {
        if file == "build/vars.rs" {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for f in forbidden {
                if code.contains(f) {
                    offenders.push(format!("{file}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "read the environment through build/vars.rs (vars::tracked / vars::cargo), not directly:\n{}",
        offenders.join("\n")
    );

    // Every name read is in the right table.
    let mut tracked_reads = Vec::new();
    let mut cargo_reads = Vec::new();
    for (file, text) in &sources {
        for call in ["vars::tracked(", "vars::tracked_os("] {
            let (names, other) = literal_args(text, call);
            tracked_reads.extend(names.into_iter().map(|n| (file.clone(), n)));
            // The only computed name is the loop over the CUDA root variables in build.rs.
            if other > 0 {
                assert!(
                    file == "build.rs" && text.contains("for k in ROOT_VARS"),
                    "{file}: {call} with a computed name"
                );
            }
        }
        for call in ["vars::cargo(", "vars::cargo_flag("] {
            let (names, other) = literal_args(text, call);
            assert_eq!(other, 0, "{file}: {call} with a computed name");
            cargo_reads.extend(names.into_iter().map(|n| (file.clone(), n)));
        }
    }
    for (file, name) in &tracked_reads {
        assert!(
            vars::TRACKED.contains(&name.as_str()),
            "{file} reads {name}, not in vars::TRACKED"
        );
    }
    for (file, name) in &cargo_reads {
        assert!(
            vars::CARGO_SET.contains(&name.as_str()),
            "{file} reads {name}, not in vars::CARGO_SET"
        );
    }
    for v in ROOT_VARS {
        assert!(
            vars::TRACKED.contains(&v),
            "{v} (ROOT_VARS) is not in vars::TRACKED"
        );
    }
    for v in ["PATH", "LIBCLANG_PATH", "LLAISYS_NVIDIA_PYTHON"] {
        assert!(
            tracked_reads.iter().any(|(_, n)| n == v),
            "{v} is in the table but no longer read? {tracked_reads:?}"
        );
    }
    // CARGO_SET holds only what cargo sets for build scripts; a user variable there would be read
    // without a declaration.
    for v in vars::CARGO_SET {
        assert!(
            v.starts_with("CARGO_") || ["OUT_DIR", "TARGET", "HOST"].contains(&v),
            "{v} is not a variable cargo sets for build scripts"
        );
        assert!(
            cargo_reads.iter().any(|(_, n)| n == v),
            "{v} is listed but never read"
        );
    }

    // The real build script's output declares them all, plus what cc and bindgen read.
    let output = Path::new(env!("OUT_DIR"))
        .parent()
        .expect("OUT_DIR has a parent")
        .join("output");
    let output = fs::read_to_string(&output).expect("the build script's output file");
    let declared: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("cargo:rerun-if-env-changed="))
        .collect();
    for v in vars::TRACKED
        .iter()
        .chain(&["CC", "CFLAGS", "BINDGEN_EXTRA_CLANG_ARGS"])
    {
        assert!(
            declared.contains(v),
            "{v} is not declared; declared: {declared:?}"
        );
    }
}

#[test]
fn build_script_changes_the_environment_only_in_documented_unsafe_blocks() {
    // Edition 2024 makes set_var/remove_var unsafe; each use is an `unsafe` block with a SAFETY
    // comment right above it.
    for (file, text) in build_script_sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            if !(line.contains("set_var(") || line.contains("remove_var(")) {
                continue;
            }
            assert!(
                line.contains("unsafe {"),
                "{file}:{}: outside unsafe: {line}",
                n + 1
            );
            let above = lines[..n]
                .iter()
                .rev()
                .take_while(|l| l.trim_start().starts_with("//"));
            assert!(
                above.clone().any(|l| l.contains("SAFETY:")),
                "{file}:{}: no SAFETY comment above {line}",
                n + 1
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The real roots the bootstrap installs
// ---------------------------------------------------------------------------------------------

fn deps_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".deps")
        .join(name)
}

#[test]
fn bootstrapped_cuda13_is_accepted_in_both_modes() {
    let root = deps_dir("cuda13");
    assert!(
        root.is_dir(),
        "{} is missing: run `bash scripts/bootstrap.sh` first (it installs {PIP_CUDA13} there)",
        root.display()
    );
    let cu13 = root.join("nvidia").join("cu13");
    let s = accepted(&root, LinkMode::Static);
    assert_eq!(s.cudart_version, 13000);
    assert_eq!(s.root, cu13);
    assert_eq!(s.lib_name, "libcudart_static.a");
    assert!(s.lib_dir.join(&s.lib_name).is_file());

    let d = accepted(&root, LinkMode::Dynamic);
    assert_eq!(d.cudart_version, 13000);
    assert_eq!(d.root, cu13);
    assert!(
        d.lib_name.starts_with("libcudart.so"),
        "dynamic library: {}",
        d.lib_name
    );
    assert!(d.lib_dir.join(&d.lib_name).exists());
}

#[test]
fn bootstrapped_cuda12_when_present_is_accepted() {
    // .deps/cuda12 is installed only by `bash scripts/bootstrap.sh --cuda12`.
    let root = deps_dir("cuda12");
    if !root.is_dir() {
        eprintln!(
            "note: {} absent (`bash scripts/bootstrap.sh --cuda12` installs it); not checked",
            root.display()
        );
        return;
    }
    let nvidia = root.join("nvidia");
    for mode in [LinkMode::Static, LinkMode::Dynamic] {
        let cuda = accepted(&root, mode);
        assert_eq!(cuda.cudart_version / 1000, 12, "{mode:?}");
        assert_eq!(cuda.root, nvidia.join("cuda_runtime"));
        assert_eq!(
            cuda.include_dirs,
            vec![
                nvidia.join("cuda_runtime").join("include"),
                nvidia.join("cuda_nvcc").join("include"),
            ]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The facts compiled into the crate
// ---------------------------------------------------------------------------------------------

#[test]
fn compiled_in_build_facts_agree_with_the_linked_runtime() {
    use llaisys_nvidia::runtime::{self, build};

    let expected_mode = if cfg!(feature = "loaded") {
        "loaded"
    } else if cfg!(feature = "dynamic") {
        "dynamic"
    } else {
        "static"
    };
    assert_eq!(build::LINK_MODE, expected_mode);
    assert!(
        Path::new(build::LIB_DIR).join(build::LIB_NAME).exists(),
        "{}/{} does not exist",
        build::LIB_DIR,
        build::LIB_NAME
    );

    let built = build::cudart_version();
    assert!(built >= 10000, "CUDART_VERSION {:?}", build::CUDART_VERSION);
    let loaded = runtime::runtime_version().expect("cudaRuntimeGetVersion works without a driver");
    if build::LINK_MODE == "static" {
        assert_eq!(built, loaded, "static libcudart must match its headers");
    } else {
        assert_eq!(
            built / 1000,
            loaded / 1000,
            "loaded libcudart {} vs headers {}",
            runtime::version_string(loaded),
            runtime::version_string(built)
        );
    }
}

#[test]
fn incomplete_cuda13_wheel_does_not_hide_complete_cuda12() {
    let site = TempDir::new("cu13-broken-cu12-ok");
    // CUDA 13 runtime wheel without nvidia-cuda-crt beside a complete CUDA 12 pair.
    let cu13 = site.path().join("nvidia/cu13");
    write(&cu13.join("include/cuda_runtime.h"), "");
    write(
        &cu13.join("include/cuda_runtime_api.h"),
        "#define CUDART_VERSION 13000\n",
    );
    write(&cu13.join("lib/libcudart_static.a"), "");
    let rt = site.path().join("nvidia/cuda_runtime");
    write(&rt.join("include/cuda_runtime.h"), "");
    write(
        &rt.join("include/cuda_runtime_api.h"),
        "#define CUDART_VERSION 12090\n",
    );
    write(&rt.join("lib/libcudart_static.a"), "");
    write(
        &site
            .path()
            .join("nvidia/cuda_nvcc/include/crt/host_config.h"),
        "",
    );
    let root = inspect(site.path(), LinkMode::Static, &x86()).expect("CUDA 12 found");
    assert_eq!(root.cudart_version, 12090);
}

// ---------------------------------------------------------------------------------------------
// The loaded mode: headers of each major, no library needed
// ---------------------------------------------------------------------------------------------

fn per_major(probe: &Probe) -> Vec<CudaRoot> {
    find_cuda_per_major(probe)
        .unwrap_or_else(|nf| panic!("find_cuda_per_major should succeed, failed:\n{nf}"))
}

#[test]
fn loaded_mode_takes_both_wheel_sets_of_one_site_packages_newest_first() {
    let t = TempDir::new("loaded_both_wheels");
    let site = t.join("site");
    let cu13 = pypi_cu13(&site);
    let cu12 = pypi_cu12(&site, true);
    let mut probe = empty_probe(t.path());
    probe.site_packages = vec![site.clone()];
    let roots = per_major(&probe);
    let found: Vec<(u32, PathBuf, PathBuf, String)> = roots
        .iter()
        .map(|r| {
            (
                r.cudart_version,
                r.root.clone(),
                r.lib_dir.clone(),
                r.lib_name.clone(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (
                13000,
                cu13.clone(),
                cu13.join("lib"),
                "libcudart.so.13".into()
            ),
            (
                12090,
                cu12.clone(),
                cu12.join("lib"),
                "libcudart.so.12".into()
            ),
        ]
    );
    let origin = format!("python3 wheels {}", site.display());
    assert!(roots.iter().all(|r| r.origin == origin), "{roots:?}");
}

#[test]
fn loaded_mode_takes_one_root_per_major_from_the_root_variables_and_needs_no_library() {
    let t = TempDir::new("loaded_vars");
    // CUDA 12 found first; the newest headers come first all the same (the crate is compiled
    // against them).
    let twelve = t.join("cuda-12.9");
    toolkit(&twelve, Layout::Lib64, 12090, &[]);
    let thirteen = t.join("cuda-13.0");
    toolkit(&thirteen, Layout::Lib, 13000, &["libcudart.so.13"]);
    let other13 = t.join("cuda-13.1");
    full_toolkit(&other13, 13010);
    let mut probe = empty_probe(t.path());
    set_root_var(&mut probe, "CUDA_HOME", &twelve);
    set_root_var(&mut probe, "CUDA_PATH", &thirteen);
    set_root_var(&mut probe, "CUDA_ROOT", &other13);
    // Not searched: a root variable is set.
    probe.project_local = vec![t.join("never")];
    let roots = per_major(&probe);
    assert_eq!(roots.len(), 2, "{roots:?}");
    assert_eq!(
        (roots[0].cudart_version, roots[0].lib_name.as_str()),
        (13000, "libcudart.so.13")
    );
    assert_eq!(roots[0].lib_dir, thirteen.join("lib"));
    assert_eq!(roots[0].origin, format!("CUDA_PATH={}", thirteen.display()));
    assert_eq!(
        (roots[1].cudart_version, roots[1].lib_name.as_str()),
        (12090, ""),
        "no libcudart.so.12 beside the CUDA 12 headers: nothing recorded"
    );
    assert_eq!(roots[1].origin, format!("CUDA_HOME={}", twelve.display()));
    // One major only: that one.
    let mut probe = empty_probe(t.path());
    set_root_var(&mut probe, "CUDA_HOME", &thirteen);
    let roots = per_major(&probe);
    assert_eq!(roots.len(), 1);
    assert_eq!(roots[0].cudart_version, 13000);
}

#[test]
fn loaded_mode_passes_over_a_major_it_does_not_support_and_says_so() {
    let t = TempDir::new("loaded_major11");
    let eleven = t.join("cuda-11.8");
    full_toolkit(&eleven, 11080);
    let mut probe = empty_probe(t.path());
    set_root_var(&mut probe, "CUDA_HOME", &eleven);
    let nf = find_cuda_per_major(&probe).expect_err("CUDA 11 is not supported");
    assert_eq!(nf.mode, LinkMode::Loaded);
    assert_eq!(
        nf.rejected,
        vec![Rejected {
            origin: format!("CUDA_HOME={}", eleven.display()),
            reason: format!(
                "CUDA 11 headers in {}: the loaded mode supports CUDA 13 and 12",
                eleven.display()
            ),
        }]
    );
    let text = nf.to_string();
    assert!(
        text.starts_with(
            "llaisys-nvidia: no usable CUDA headers for the `loaded` link mode (a root needs \
             cuda_runtime.h and crt/host_config.h of CUDA 13 and 12)."
        ),
        "{text}"
    );
    // Headers without crt/: rejected with the usual reason.
    let site = t.join("site");
    let cu13 = pypi_cu13(&site);
    fs::remove_dir_all(cu13.join("include/crt")).unwrap();
    let mut probe = empty_probe(t.path());
    probe.site_packages = vec![site];
    let nf = find_cuda_per_major(&probe).expect_err("no crt/");
    assert!(
        nf.rejected[0]
            .reason
            .contains("has cuda_runtime.h but no crt/host_config.h"),
        "{:?}",
        nf.rejected
    );
}

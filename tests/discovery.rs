//! Host-only tests of the CUDA discovery in `build/discover.rs` (the logic build.rs runs), driven
//! against fake CUDA roots made in temporary folders, plus the real `.deps/` roots the bootstrap
//! installs and the build facts compiled into the crate. No GPU or driver needed.

#[path = "../build/discover.rs"]
mod discover;

use discover::{
    define_renames, find_cuda, inspect, read_cudart_version, CudaRoot, LinkMode, NotFound, Probe,
    Rejected, PIP_CUDA12, PIP_CUDA13, ROOT_VARS,
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

/// How a fake toolkit root lays out its folders.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `include/` and `lib64/`.
    Lib64,
    /// `include/` and `lib/`.
    Lib,
    /// `targets/x86_64-linux/{include,lib}`.
    Targets,
}

impl Layout {
    const ALL: [Layout; 3] = [Layout::Lib64, Layout::Lib, Layout::Targets];

    fn include(self, root: &Path) -> PathBuf {
        match self {
            Layout::Lib64 | Layout::Lib => root.join("include"),
            Layout::Targets => root.join("targets").join("x86_64-linux").join("include"),
        }
    }

    fn lib(self, root: &Path) -> PathBuf {
        match self {
            Layout::Lib64 => root.join("lib64"),
            Layout::Lib => root.join("lib"),
            Layout::Targets => root.join("targets").join("x86_64-linux").join("lib"),
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
    }
}

/// Sets one root variable of the probe.
fn set_var(probe: &mut Probe, var: &str, value: &Path) {
    let slot = probe
        .root_vars
        .iter_mut()
        .find(|(k, _)| k == var)
        .unwrap_or_else(|| panic!("{var} is not one of ROOT_VARS"));
    slot.1 = Some(value.display().to_string());
}

fn accepted(path: &Path, mode: LinkMode) -> CudaRoot {
    inspect(path, mode).unwrap_or_else(|reason| {
        panic!(
            "{} should be accepted for {mode:?}, was rejected: {reason}",
            path.display()
        )
    })
}

fn rejected(path: &Path, mode: LinkMode) -> String {
    match inspect(path, mode) {
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
                set_var(&mut probe, var, bad);
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
        set_var(&mut probe, var, value);
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
        Layout::Targets,
        12090,
        &["libcudart_static.a", "libcudart.so.12"],
    );

    for var in ROOT_VARS {
        for mode in [LinkMode::Static, LinkMode::Dynamic] {
            let mut probe = base.clone();
            set_var(&mut probe, var, &home);
            let cuda = found(&probe, mode);
            assert_eq!(cuda.origin, format!("{var}={}", home.display()));
            assert_eq!(cuda.root, home);
            assert_eq!(cuda.cudart_version, 12090);
        }
    }

    // A bad earlier variable does not stop a good later one, and the first good one wins.
    let mut probe = base.clone();
    set_var(&mut probe, "CUDA_HOME", &t.join("nowhere"));
    set_var(&mut probe, "CUDA_PATH", &home);
    set_var(&mut probe, "CUDA_ROOT", &t.join("deps-cuda13"));
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
// #define renames
// ---------------------------------------------------------------------------------------------

#[test]
fn define_renames_finds_versioned_api_names() {
    let header = "\
#pragma once
#define CUDART_VERSION  13000
#define __CUDART_API_VERSION CUDART_VERSION
#if defined(__CUDART_API_PER_THREAD_DEFAULT_STREAM)
    #define __CUDART_API_PTSZ(api) api ## _ptsz
#endif
#define cudaStreamGetCaptureInfo       __CUDART_API_PTSZ(cudaStreamGetCaptureInfo_v2)
#define cudaGetDeviceProperties cudaGetDeviceProperties_v2
#define cudaMemcpy                     __CUDART_API_PTDS(cudaMemcpy)
    #define cudaStreamGetCaptureInfo_v3    __CUDART_API_PTSZ(cudaStreamGetCaptureInfo_v3)
#define cudaFoo cudaFooBar_v2
#define cudaBar cudaBar_vX
#define cudaMax(a, b) cudaMax_v2
#define notCuda notCuda_v2
#define cudaGetDeviceProperties cudaGetDeviceProperties_v2
";
    assert_eq!(
        define_renames(header),
        vec![
            (
                "cudaGetDeviceProperties_v2".to_string(),
                "cudaGetDeviceProperties".to_string()
            ),
            (
                "cudaStreamGetCaptureInfo_v2".to_string(),
                "cudaStreamGetCaptureInfo".to_string()
            ),
        ]
    );
    assert!(define_renames("").is_empty());
    assert!(define_renames("#define CUDART_VERSION 13000\n#include <x.h>\n").is_empty());
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
    // The CUDA 12 header carries the `_v2` renames bindgen needs mapped back (CUDA 13 has none).
    let api = fs::read_to_string(
        nvidia
            .join("cuda_runtime")
            .join("include")
            .join("cuda_runtime_api.h"),
    )
    .unwrap();
    let renames = define_renames(&api);
    for plain in ["cudaGetDeviceProperties", "cudaStreamGetCaptureInfo"] {
        assert!(
            renames.contains(&(format!("{plain}_v2"), plain.to_string())),
            "{plain}: {renames:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The facts compiled into the crate
// ---------------------------------------------------------------------------------------------

#[test]
fn compiled_in_build_facts_agree_with_the_linked_runtime() {
    use llaisys_nvidia::runtime::{self, build};

    let expected_mode = if cfg!(feature = "dynamic") {
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
    let root = inspect(site.path(), LinkMode::Static).expect("CUDA 12 found");
    assert_eq!(root.cudart_version, 12090);
}

//! Host-only tests of the `loaded` link mode (this file builds with `--features loaded` only):
//! which CUDA runtime the library loads and what every call answers when there is none or it
//! lacks a function. Each case runs the probe `child_probe` (this test binary again) with its
//! own loader path: stand-in runtimes built here against the real CUDA 13 and 12 headers
//! (tests/fixtures/loaded/stand_in_cudart.c) and a stand-in driver library reporting the CUDA
//! version a case needs (tests/fixtures/fake_libcuda.c), which comes first on `LD_LIBRARY_PATH` and
//! so shadows a real driver where there is one. The probe calls the C ABI and prints what each
//! call answered; the parent asserts it exactly. Also: the built libraries depend on no
//! libcudart at link time, and every cudart function the crate calls exists in both majors.

#![cfg(feature = "loaded")]

mod support;

use llaisys_nvidia::ffi::{self, TABLE};
use llaisys_nvidia::runtime::build;
use llaisys_nvidia::runtime::bundled_file_name;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// What the stand-in accepts as a prefetch (STAND_IN_PREFETCH_BYTES).
const PREFETCH_BYTES: usize = 12288;

// ---- stand-ins ----------------------------------------------------------------------------

fn stand_ins() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("loaded-stand-ins")
}

/// The include folders of the headers of `major` the build used.
fn includes(major: u32) -> Vec<String> {
    let prefix = format!("{major}=");
    let dirs = build::LOADED_INCLUDES
        .split(';')
        .find_map(|e| e.strip_prefix(&prefix))
        .unwrap_or_else(|| {
            panic!(
                "this build has no CUDA {major} headers (LOADED_INCLUDES={:?}); the loaded mode's \
                 tests need both: bash scripts/bootstrap.sh --cuda12",
                build::LOADED_INCLUDES
            )
        });
    std::env::split_paths(dirs)
        .map(|d| format!("-I{}", d.display()))
        .collect()
}

/// Builds each stand-in once per test binary (tests run in parallel and share them).
fn built(key: &str, build: impl FnOnce(&Path)) -> PathBuf {
    static DONE: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    let dir = stand_ins().join(key);
    if !done.iter().any(|k| k == key) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("stand-in folder");
        build(&dir);
        done.push(key.to_string());
    }
    dir
}

/// A folder holding a stand-in `libcudart.so.<major>` (`variant`: a -D of the fixture).
fn runtime(major: u32, variant: &str) -> PathBuf {
    built(&format!("cudart{major}{variant}"), |dir| {
        let mut extra = includes(major);
        if !variant.is_empty() {
            extra.push(format!("-D{variant}"));
        }
        support::c_shared_library(
            "tests/fixtures/loaded/stand_in_cudart.c",
            dir,
            &format!("libcudart.so.{major}"),
            &extra,
        );
    })
}

/// A folder holding a stand-in `libcuda.so.1` whose cuDriverGetVersion answers `version`;
/// `None`: one without cuDriverGetVersion (no usable driver).
fn driver(version: Option<i32>) -> PathBuf {
    match version {
        Some(v) => built(&format!("driver{v}"), |dir| {
            support::c_shared_library(
                "tests/fixtures/fake_libcuda.c",
                dir,
                "libcuda.so.1",
                &[format!("-DFAKE_DRIVER_VERSION={v}")],
            );
        }),
        None => support::no_driver::loader_dir(),
    }
}

fn path_of(dirs: &[&Path]) -> String {
    std::env::join_paths(dirs)
        .expect("paths")
        .to_string_lossy()
        .into_owned()
}

// ---- the probe ----------------------------------------------------------------------------

fn last_message() -> String {
    support::last_error_message().replace('\n', " | ")
}

fn text(buf: &[c_char]) -> String {
    // SAFETY: NUL-terminated (zeroed, written by the library).
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// A status and, on failure, the CUDA error and the message.
fn outcome(st: c_int) -> String {
    if st == 0 {
        "0".into()
    } else {
        format!(
            "{st} cuda={} {}",
            ffi::llaisysNvidiaLastCudaError(),
            last_message()
        )
    }
}

/// The child's half: calls the C ABI and prints `key: value` lines for the parent.
#[test]
#[ignore = "entry point of a child process: run by the loaded mode's tests"]
fn child_probe() {
    support::child::require_child("child_probe");
    let mut version: c_int = -1;
    let mut report = vec![0 as c_char; 16384];
    let mut length = 0usize;
    // SAFETY: valid out-pointers and a buffer of its length.
    let st = unsafe {
        ffi::llaisysNvidiaCudartLibrary(
            &mut version,
            report.as_mut_ptr(),
            report.len(),
            &mut length,
        )
    };
    // libtest (one thread) has printed "test child_probe ... " without a newline.
    println!();
    println!("library status: {st}");
    println!("library version: {version}");
    assert_eq!(length, text(&report).len(), "the full length");
    for line in text(&report).lines() {
        println!("report: {line}");
    }
    // SAFETY: the table's function, no arguments.
    let count = unsafe { (TABLE.get_device_count)() };
    println!("count: {count}");
    if count == 0 {
        println!(
            "count error: cuda={} {}",
            ffi::llaisysNvidiaLastCudaError(),
            last_message()
        );
    }
    // SAFETY: zeroed plain data, written by the call.
    let mut props: ffi::DeviceProperties = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    let st = unsafe { ffi::llaisysNvidiaGetDeviceProperties(0, &mut props) };
    println!("properties: {}", outcome(st));
    if st == 0 {
        println!(
            "properties values: {} cc {}.{} {} B {} SMs bus {} engines {} uva {} pools {}",
            text(&props.name),
            props.major,
            props.minor,
            props.total_memory,
            props.multiprocessors,
            text(&props.pci_bus_id),
            props.async_engines,
            props.unified_addressing,
            props.memory_pools
        );
    }
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    let st = unsafe { ffi::llaisysNvidiaMemGetInfo(&mut free, &mut total) };
    println!("mem info: {}", outcome(st));
    let block = vec![0u8; PREFETCH_BYTES];
    let p = block.as_ptr().cast::<c_void>();
    // SAFETY: zeroed plain data, written by the call.
    let mut attr: ffi::PointerAttributes = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about; a valid out-pointer.
    let st = unsafe { ffi::llaisysNvidiaPointerGetAttributes(p, &mut attr) };
    println!("pointer: {}", outcome(st));
    if st == 0 {
        println!("pointer values: kind {} device {}", attr.kind, attr.device);
    }
    for device in [0, -1] {
        // SAFETY: the stand-in only looks at the arguments; the legacy stream.
        let st = unsafe {
            ffi::llaisysNvidiaMemPrefetch(p, PREFETCH_BYTES, device, std::ptr::null_mut())
        };
        println!("prefetch to {device}: {}", outcome(st));
    }
    // A function of the CUDA 13 headers only (the stand-ins do not have it either).
    let mut it: llaisys_nvidia::sys::cudaLogIterator = 0;
    // SAFETY: writes one iterator to a local, if anything.
    let rc = unsafe { llaisys_nvidia::sys::cudaLogsCurrent(&mut it, 0) };
    let e = llaisys_nvidia::Error::cuda(
        "cudaLogsCurrent",
        llaisys_nvidia::CudaError::from_raw(rc),
        "",
    );
    println!("logs current: {}", e.to_string().replace('\n', " | "));
    println!("probe: done");
}

/// Runs the probe with `LD_LIBRARY_PATH` = `dirs` and `envs`; returns its lines by key (a key
/// that repeats, `report`, keeps every value, in order).
fn probe(dirs: &[&Path], envs: &[(&str, String)]) -> BTreeMap<String, Vec<String>> {
    probe_of(&std::env::current_exe().expect("current_exe"), dirs, envs)
}

/// `probe`, run from `program` (a copy of this test binary).
fn probe_of(
    program: &Path,
    dirs: &[&Path],
    envs: &[(&str, String)],
) -> BTreeMap<String, Vec<String>> {
    let mut all: Vec<(String, String)> = vec![
        ("LD_LIBRARY_PATH".into(), path_of(dirs)),
        // No Python wheels: the cases are made of the places above.
        (
            "LLAISYS_NVIDIA_PYTHON".into(),
            "/nonexistent/llaisys-test-python".into(),
        ),
    ];
    all.extend(envs.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let out = support::child::TestChild::of_program(program, "child_probe")
        .env_remove("LLAISYS_NVIDIA_CUDART_LIBRARY")
        .envs(all.iter().map(|(k, v)| (k, v)))
        .run();
    let text = out.text();
    assert!(
        out.ran_one_test() && text.contains("probe: done"),
        "the probe failed ({:?}):\n{}",
        all,
        out.report()
    );
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(": ") {
            map.entry(k.to_string()).or_default().push(v.to_string());
        }
    }
    map
}

fn one<'a>(m: &'a BTreeMap<String, Vec<String>>, key: &str) -> &'a str {
    match m.get(key).map(Vec::as_slice) {
        Some([v]) => v,
        other => panic!("{key}: {other:?} in {m:#?}"),
    }
}

fn report(m: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    m.get("report").cloned().unwrap_or_default()
}

/// The `tried` line of the runtime of `major` made with the library, looked for beside this
/// test program, where the build does not put it.
fn not_beside(major: u32) -> String {
    let exe = std::fs::canonicalize(std::env::current_exe().expect("current_exe")).unwrap();
    let f = exe.with_file_name(bundled_file_name(major));
    format!("  - {} (beside this library): no such file", f.display())
}

fn file(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// The properties the stand-in of `major` reports, as the probe prints them.
fn stand_in_properties(major: u32) -> String {
    format!(
        "stand-in CUDA {major} cc 9.0 {} B 132 SMs bus 0000:{major}:00.0 engines 3 uva 1 pools 1",
        81559usize << 20
    )
}

/// The calls of a case where a stand-in runtime of `major` serves.
fn assert_served_by(m: &BTreeMap<String, Vec<String>>, major: u32) {
    assert_eq!(one(m, "count"), "1");
    assert_eq!(one(m, "properties"), "0");
    assert_eq!(one(m, "properties values"), stand_in_properties(major));
    assert_eq!(one(m, "pointer"), "0");
    assert_eq!(one(m, "pointer values"), "kind 3 device 0");
    assert_eq!(one(m, "prefetch to 0"), "0", "{m:#?}");
    assert_eq!(one(m, "prefetch to -1"), "0", "{m:#?}");
}

// ---- which runtime ---------------------------------------------------------------------------

#[test]
fn a_driver_for_cuda_13_gets_the_cuda_13_runtime() {
    let (drv, rt13, rt12) = (driver(Some(13000)), runtime(13, ""), runtime(12, ""));
    let m = probe(&[&drv, &rt13, &rt12], &[]);
    assert_eq!(one(&m, "library status"), "0");
    assert_eq!(one(&m, "library version"), "13000");
    let r = report(&m);
    assert_eq!(r[0], "link mode: loaded");
    assert_eq!(
        r[1],
        format!("runtime: {} (CUDA 13.0)", file(&rt13, "libcudart.so.13"))
    );
    assert_eq!(
        r[2],
        "why: CUDA 13.0: the newest runtime found that the driver (CUDA 13.0) supports, found \
         through the dynamic loader's path (LD_LIBRARY_PATH, RUNPATH, ld.so.cache, /lib, /usr/lib)"
    );
    assert_eq!(
        r[3],
        format!(
            "driver: supports CUDA 13.0 (cuDriverGetVersion of {})",
            file(&drv, "libcuda.so.1")
        )
    );
    assert_eq!(
        r[4..],
        [
            "tried:".to_string(),
            "  - LLAISYS_NVIDIA_CUDART_LIBRARY: not set".to_string(),
            not_beside(13),
            "  - libcudart.so.13 on the dynamic loader's path: loaded".to_string(),
        ]
    );
    assert_served_by(&m, 13);
    assert_eq!(one(&m, "mem info"), "0");
    // The CUDA 13 stand-in lacks it: the library and the symbol.
    assert_eq!(
        one(&m, "logs current"),
        format!(
            "cudaLogsCurrent failed: cudaErrorSharedObjectSymbolNotFound (302): shared object \
             symbol not found (stand-in) ({} (CUDA 13.0) has no cudaLogsCurrent: use a newer \
             CUDA 13 runtime)",
            file(&rt13, "libcudart.so.13")
        )
    );
}

#[test]
fn a_driver_for_cuda_12_only_gets_the_cuda_12_runtime_through_converted_structures() {
    // An r535-era driver (CUDA 12.2) with both runtimes on the loader path.
    let (drv, rt13, rt12) = (driver(Some(12020)), runtime(13, ""), runtime(12, ""));
    let m = probe(&[&drv, &rt13, &rt12], &[]);
    assert_eq!(one(&m, "library version"), "12090");
    let r = report(&m);
    assert_eq!(
        r[1],
        format!("runtime: {} (CUDA 12.9)", file(&rt12, "libcudart.so.12"))
    );
    assert!(
        r[2].starts_with(
            "why: CUDA 12.9: the newest runtime found that the driver (CUDA 12.2) supports"
        ),
        "{r:?}"
    );
    assert_eq!(
        r[4..],
        [
            "tried:".to_string(),
            "  - CUDA 13 runtimes: not considered: the driver supports CUDA 12.2 (CUDA 13 needs 13.0 or newer)".to_string(),
            "  - LLAISYS_NVIDIA_CUDART_LIBRARY: not set".to_string(),
            not_beside(12),
            "  - libcudart.so.12 on the dynamic loader's path: loaded".to_string(),
        ]
    );
    // cudaDeviceProp and cudaPointerAttributes differ between the majors, and the crate's
    // cudaMemPrefetchAsync is CUDA 12's cudaMemPrefetchAsync_v2 (the older one would answer
    // cudaErrorNotSupported).
    assert_served_by(&m, 12);
    // A function of CUDA 13 only: a status that names what it needs, and the library loaded.
    assert_eq!(
        one(&m, "logs current"),
        format!(
            "cudaLogsCurrent failed: cudaErrorSharedObjectSymbolNotFound (302): shared object \
             symbol not found (stand-in) (cudaLogsCurrent needs CUDA 13: the loaded runtime is \
             {} (CUDA 12.9), and the CUDA 12 headers declare no cudaLogsCurrent)",
            file(&rt12, "libcudart.so.12")
        )
    );
}

#[test]
fn the_variable_naming_a_file_wins_over_a_newer_runtime() {
    let (drv, rt13, rt12) = (driver(Some(13000)), runtime(13, ""), runtime(12, ""));
    let twelve = file(&rt12, "libcudart.so.12");
    let m = probe(
        &[&drv, &rt13],
        &[("LLAISYS_NVIDIA_CUDART_LIBRARY", twelve.clone())],
    );
    let r = report(&m);
    assert_eq!(r[1], format!("runtime: {twelve} (CUDA 12.9)"));
    assert_eq!(
        r[2],
        "why: CUDA 12.9: the runtime the file LLAISYS_NVIDIA_CUDART_LIBRARY names, which the \
         driver (CUDA 13.0) supports"
    );
    assert_eq!(
        r[4..],
        [
            "tried:".to_string(),
            format!("  - LLAISYS_NVIDIA_CUDART_LIBRARY={twelve}: loaded"),
        ]
    );
    assert_served_by(&m, 12);
}

#[test]
fn without_a_driver_the_newest_runtime_is_loaded() {
    let (drv, rt13, rt12) = (driver(None), runtime(13, ""), runtime(12, ""));
    let m = probe(&[&drv, &rt13, &rt12], &[]);
    let r = report(&m);
    assert_eq!(
        r[1],
        format!("runtime: {} (CUDA 13.0)", file(&rt13, "libcudart.so.13"))
    );
    assert!(
        r[2].starts_with("why: CUDA 13.0: no NVIDIA driver (libcuda.so.1 has no cuDriverGetVersion), so the newest runtime found"),
        "{r:?}"
    );
    assert_eq!(r[3], "driver: none: libcuda.so.1 has no cuDriverGetVersion");
}

#[test]
fn a_runtime_whose_version_call_fails_is_passed_over() {
    let (drv, broken, rt12) = (
        driver(Some(13000)),
        runtime(13, "VERSION_FAILS"),
        runtime(12, ""),
    );
    let m = probe(&[&drv, &broken, &rt12], &[]);
    let r = report(&m);
    let broken_file = file(&broken, "libcudart.so.13");
    assert_eq!(
        r[5..8],
        [
            "  - LLAISYS_NVIDIA_CUDART_LIBRARY: not set".to_string(),
            not_beside(13),
            format!(
                "  - libcudart.so.13 on the dynamic loader's path: {broken_file}: \
                 cudaRuntimeGetVersion returned 3"
            ),
        ]
    );
    // Next: the CUDA 13 runtime beside the headers at build time, if there was one, else the
    // CUDA 12 stand-in on the loader path.
    let built13 = build::LOADED_RUNTIMES
        .split(',')
        .find_map(|e| e.strip_prefix("13="))
        .filter(|d| !d.is_empty() && Path::new(d).join("libcudart.so.13").exists())
        .map(|d| Path::new(d).join("libcudart.so.13").display().to_string());
    match built13 {
        Some(f) => {
            assert_eq!(
                r[8],
                format!("  - {f} (the folder recorded at build time): loaded")
            );
            assert_eq!(one(&m, "library version"), "13000");
        }
        None => {
            assert_eq!(one(&m, "library version"), "12090");
            assert_served_by(&m, 12);
        }
    }
}

/// The runtimes made with the library (build/bundled.rs), by major, as the build made them.
fn bundled() -> Vec<(u32, PathBuf)> {
    build::bundled_runtimes()
        .into_iter()
        .map(|(m, f)| (m, PathBuf::from(f)))
        .collect()
}

/// A folder holding a copy of this test binary (a hard link where possible) and, unless
/// `without` names it, each runtime made with the library: an installation of the library with
/// its runtimes beside it. Returns the program.
fn installed_with_runtimes(without: Option<u32>) -> PathBuf {
    let key = format!("installed-without-{}", without.unwrap_or(0));
    let dir = built(&key, |dir| {
        let exe = std::env::current_exe().expect("current_exe");
        let program = dir.join("probe-program");
        if std::fs::hard_link(&exe, &program).is_err() {
            std::fs::copy(&exe, &program).expect("copy the test binary");
        }
        for (major, file) in bundled() {
            if Some(major) != without {
                std::fs::copy(&file, dir.join(bundled_file_name(major)))
                    .expect("copy a runtime made with the library");
            }
        }
    });
    std::fs::canonicalize(dir.join("probe-program")).expect("the program")
}

#[test]
fn the_runtime_made_with_the_library_beside_it_comes_before_every_other_place() {
    assert_eq!(
        bundled().iter().map(|(m, _)| *m).collect::<Vec<_>>(),
        [13, 12],
        "BUNDLED_RUNTIMES={}",
        build::BUNDLED_RUNTIMES
    );
    let (rt13, rt12) = (runtime(13, ""), runtime(12, ""));
    let program = installed_with_runtimes(None);
    let beside = |m: u32| file(program.parent().unwrap(), &bundled_file_name(m));
    // No driver (the stand-in without entry points shadows a real one): the newest, CUDA 13,
    // from beside the program, although the loader path offers both stand-ins. It is NVIDIA's
    // runtime, so without a driver it answers cudaErrorInsufficientDriver.
    let m = probe_of(&program, &[&driver(None), &rt13, &rt12], &[]);
    let r = report(&m);
    assert_eq!(
        r[1],
        format!("runtime: {} (CUDA 13.0)", beside(13)),
        "{r:#?}"
    );
    assert!(
        r[2].ends_with(
            "so the newest runtime found, through the folder of this library (the runtime \
             built with it); it answers cudaErrorInsufficientDriver"
        ),
        "{r:#?}"
    );
    assert_eq!(
        r[4..],
        [
            "tried:".to_string(),
            "  - LLAISYS_NVIDIA_CUDART_LIBRARY: not set".to_string(),
            format!("  - {} (beside this library): loaded", beside(13)),
        ]
    );
    assert_eq!(one(&m, "library version"), "13000");
    assert_eq!(one(&m, "count"), "0");
    assert!(
        one(&m, "count error").starts_with("cuda=35 "),
        "{}",
        one(&m, "count error")
    );
    // A driver for CUDA 12.2: the CUDA 12 one from beside the program. The stand-in driver is
    // older than this CUDA 12.9 runtime, which then answers cudaErrorInsufficientDriver.
    let m = probe_of(&program, &[&driver(Some(12020)), &rt13, &rt12], &[]);
    let r = report(&m);
    assert_eq!(
        r[1],
        format!("runtime: {} (CUDA 12.9)", beside(12)),
        "{r:#?}"
    );
    assert_eq!(
        r[5..],
        [
            "  - CUDA 13 runtimes: not considered: the driver supports CUDA 12.2 (CUDA 13 needs \
             13.0 or newer)"
                .to_string(),
            "  - LLAISYS_NVIDIA_CUDART_LIBRARY: not set".to_string(),
            format!("  - {} (beside this library): loaded", beside(12)),
        ]
    );
    assert_eq!(one(&m, "library version"), "12090");
    assert_eq!(one(&m, "count"), "0");
    // Without the CUDA 13 one beside it, the CUDA 13 runtime on the loader path comes before
    // the CUDA 12 one beside it: the newest major first, each major's places in turn.
    let without13 = installed_with_runtimes(Some(13));
    let m = probe_of(&without13, &[&driver(Some(13000)), &rt13, &rt12], &[]);
    let r = report(&m);
    let not13 = file(without13.parent().unwrap(), &bundled_file_name(13));
    assert_eq!(
        r[5..],
        [
            "  - LLAISYS_NVIDIA_CUDART_LIBRARY: not set".to_string(),
            format!("  - {not13} (beside this library): no such file"),
            "  - libcudart.so.13 on the dynamic loader's path: loaded".to_string(),
        ]
    );
    assert_served_by(&m, 13);
    // The variable still wins over it.
    let twelve = file(&rt12, "libcudart.so.12");
    let m = probe_of(
        &program,
        &[&driver(Some(13000)), &rt13],
        &[("LLAISYS_NVIDIA_CUDART_LIBRARY", twelve.clone())],
    );
    assert_eq!(report(&m)[1], format!("runtime: {twelve} (CUDA 12.9)"));
    assert_served_by(&m, 12);
}

// ---- no runtime, or one that lacks a function ------------------------------------------------

#[test]
fn a_driver_too_old_for_every_runtime_answers_insufficient_driver() {
    let (drv, rt13, rt12) = (driver(Some(11080)), runtime(13, ""), runtime(12, ""));
    let m = probe(&[&drv, &rt13, &rt12], &[]);
    let reason = format!(
        "the NVIDIA driver ({}) supports CUDA 11.8 and this library loads CUDA 13 or 12 \
         runtimes, which need a newer driver: update the NVIDIA driver",
        file(&drv, "libcuda.so.1")
    );
    assert_eq!(one(&m, "library status"), "0");
    assert_eq!(one(&m, "library version"), "0");
    let r = report(&m);
    assert_eq!(r[1], "runtime: none");
    assert_eq!(r[2], format!("why: {reason}"));
    assert_eq!(one(&m, "count"), "0");
    let message = format!("cudaGetDeviceCount failed: cudaErrorInsufficientDriver (35): {reason}");
    let count_error = one(&m, "count error");
    assert!(count_error.starts_with("cuda=35 "), "{count_error}");
    assert!(count_error.contains(&message), "{count_error}");
    for call in ["properties", "mem info", "pointer", "prefetch to 0"] {
        let o = one(&m, call);
        assert!(o.starts_with("1 cuda=35 "), "{call}: {o}");
        assert!(o.contains(&reason), "{call}: {o}");
    }
}

#[test]
fn no_runtime_in_the_folder_the_variable_names_answers_with_every_place_tried() {
    let drv = driver(Some(13000));
    let empty = built("empty-folder", |_| {});
    let m = probe(
        &[&drv],
        &[("LLAISYS_NVIDIA_CUDART_LIBRARY", empty.display().to_string())],
    );
    let e = empty.display();
    let places = format!(
        "{e}/libcudart.so.13 (LLAISYS_NVIDIA_CUDART_LIBRARY names the folder): no such file; \
         {e}/libcudart.so.12 (LLAISYS_NVIDIA_CUDART_LIBRARY names the folder): no such file (when \
         LLAISYS_NVIDIA_CUDART_LIBRARY is set nothing else is searched)"
    );
    let reason = format!(
        "no CUDA runtime (libcudart.so.13 or .so.12) could be loaded; looked at: {places}; fix: \
         install one (python3 -m pip install nvidia-cuda-runtime for CUDA 13, \
         nvidia-cuda-runtime-cu12 for CUDA 12) or set \
         LLAISYS_NVIDIA_CUDART_LIBRARY=/path/to/libcudart.so.N"
    );
    assert_eq!(one(&m, "library version"), "0");
    assert_eq!(report(&m)[2], format!("why: {reason}"));
    assert_eq!(one(&m, "count"), "0");
    let count_error = one(&m, "count error");
    assert!(
        count_error.contains(&format!(
            "cudaGetDeviceCount failed: cudaErrorSharedObjectInitFailed (303): {reason}"
        )),
        "{count_error}"
    );
    assert!(count_error.starts_with("cuda=303 "), "{count_error}");
    let o = one(&m, "mem info");
    assert!(o.starts_with("1 cuda=303 ") && o.contains(&reason), "{o}");
}

#[test]
fn the_variable_naming_a_bad_file_is_reported_and_nothing_else_is_searched() {
    let (drv, rt13) = (driver(Some(13000)), runtime(13, ""));
    let dir = built("bad-file", |d| {
        std::fs::write(d.join("libcudart.so.13"), "not a library\n").unwrap();
    });
    let bad = file(&dir, "libcudart.so.13");
    // The loader path holds a good runtime: it must not be used.
    let m = probe(
        &[&drv, &rt13],
        &[("LLAISYS_NVIDIA_CUDART_LIBRARY", bad.clone())],
    );
    let r = report(&m);
    assert_eq!(r[1], "runtime: none");
    assert!(
        r.iter().any(|l| l
            .starts_with(&format!("  - LLAISYS_NVIDIA_CUDART_LIBRARY={bad}: {bad}: "))
            && l.ends_with("(when LLAISYS_NVIDIA_CUDART_LIBRARY is set nothing else is searched)")),
        "{r:?}"
    );
    assert_eq!(one(&m, "count"), "0");
    assert!(one(&m, "count error").starts_with("cuda=303 "));

    // A library that is not a CUDA runtime (the driver stand-in).
    let not_cudart = file(&drv, "libcuda.so.1");
    let m = probe(
        &[&drv, &rt13],
        &[("LLAISYS_NVIDIA_CUDART_LIBRARY", not_cudart.clone())],
    );
    assert!(
        report(&m).iter().any(|l| l.contains(&format!(
            "{not_cudart} loads but has no cudaRuntimeGetVersion: not a CUDA runtime"
        ))),
        "{:?}",
        report(&m)
    );

    // A runtime the driver is too old for.
    let old = driver(Some(12020));
    let thirteen = file(&rt13, "libcudart.so.13");
    let m = probe(
        &[&old],
        &[("LLAISYS_NVIDIA_CUDART_LIBRARY", thirteen.clone())],
    );
    assert_eq!(
        report(&m)[5..],
        [
            "  - CUDA 13 runtimes: not considered: the driver supports CUDA 12.2 (CUDA 13 needs \
             13.0 or newer)"
                .to_string(),
            format!(
                "  - LLAISYS_NVIDIA_CUDART_LIBRARY={thirteen}: {thirteen} is CUDA 13.0 and the \
             driver supports CUDA 12.2 (CUDA 13 needs 13.0 or newer): update the NVIDIA driver \
             or use a CUDA 12 runtime (when LLAISYS_NVIDIA_CUDART_LIBRARY is set nothing else \
             is searched)"
            ),
        ],
    );
    // The only runtime found needs a newer driver: the driver is the reason.
    assert_eq!(one(&m, "count"), "0");
    assert!(
        one(&m, "count error").starts_with("cuda=35 "),
        "{}",
        one(&m, "count error")
    );
}

#[test]
fn a_runtime_that_lacks_a_function_fails_that_call_naming_library_and_symbol() {
    let (drv, lacking) = (driver(Some(13000)), runtime(13, "LACKS_MEM_GET_INFO"));
    let m = probe(&[&drv, &lacking], &[]);
    assert_served_by(&m, 13);
    let lib = file(&lacking, "libcudart.so.13");
    assert_eq!(
        one(&m, "mem info"),
        format!(
            "1 cuda=302 llaisys-nvidia: llaisysNvidiaMemGetInfo on device 0: cudaMemGetInfo \
             failed: cudaErrorSharedObjectSymbolNotFound (302): shared object symbol not found \
             (stand-in) ({lib} (CUDA 13.0) has no cudaMemGetInfo: use a newer CUDA 13 runtime)"
        )
    );
}

#[test]
fn a_runtime_whose_initialisation_fails_gives_a_count_of_0_with_its_error() {
    let (drv, failing) = (driver(Some(13000)), runtime(13, "DEVICE_COUNT_FAILS"));
    let m = probe(&[&drv, &failing], &[]);
    assert_eq!(one(&m, "library version"), "13000");
    assert_eq!(one(&m, "count"), "0");
    assert!(
        one(&m, "count error").starts_with("cuda=3 "),
        "{}",
        one(&m, "count error")
    );
}

// ---- the build ------------------------------------------------------------------------------

/// The loaded mode's cdylib and staticlib, built into this test binary's target folder.
fn libraries() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = built.as_ref() {
        return d.clone();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--lib",
            "--no-default-features",
            "--features",
            "loaded",
        ])
        .arg("--target-dir")
        .arg(dir.parent().expect("target dir"));
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    support::compile(cmd);
    *built = Some(dir.clone());
    dir
}

/// C symbol names in `nm` output lines (`ADDR TYPE NAME` or `TYPE NAME`) that belong to the CUDA
/// runtime or driver API (`cudaMalloc`, `cuInit`), not Rust's mangled names that contain them.
fn cuda_symbols(nm: &str) -> Vec<String> {
    nm.lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| {
            let s = s.split('@').next().unwrap_or(s);
            s.starts_with("cuda")
                || (s.starts_with("cu") && s.chars().nth(2).is_some_and(|c| c.is_ascii_uppercase()))
        })
        .map(String::from)
        .collect()
}

fn tool(args: &[&str], file: &Path) -> String {
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..]).arg(file);
    let out = support::child::run(&mut cmd, support::child::DEFAULT_LIMIT);
    assert!(out.success(), "{args:?}: {}", out.report());
    out.stdout
}

#[test]
fn the_libraries_have_no_link_time_cudart() {
    let dir = libraries();
    let so = dir.join("libllaisys_nvidia.so");
    let needed = tool(&["readelf", "-d"], &so);
    assert!(needed.contains("(NEEDED)"), "{needed}");
    for lib in ["libcudart", "libcuda."] {
        assert!(!needed.contains(lib), "NEEDED {lib}:\n{needed}");
    }
    let so_syms = cuda_symbols(&tool(&["nm", "-D"], &so));
    assert!(
        so_syms.is_empty(),
        "the cdylib names CUDA symbols: {so_syms:?}"
    );
    let a_syms = cuda_symbols(&tool(
        &["nm", "--defined-only", "-A"],
        &dir.join("libllaisys_nvidia.a"),
    ));
    assert!(
        a_syms.is_empty(),
        "the staticlib defines CUDA symbols: {a_syms:?}"
    );
    let a_undef = cuda_symbols(&tool(
        &["nm", "--undefined-only", "-A"],
        &dir.join("libllaisys_nvidia.a"),
    ));
    assert!(
        a_undef.is_empty(),
        "the staticlib needs CUDA symbols: {a_undef:?}"
    );
    // The check sees such names: the static build's libcudart_static.a is full of them.
    assert!(
        cuda_symbols("0000000000001234 T cudaMalloc\n U cuInit\n T _ZN3raw10cudaMalloc17h").len()
            == 2
    );
}

#[test]
fn every_cudart_function_the_crate_calls_is_there_in_both_majors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut used = std::collections::BTreeSet::new();
    for f in ["src/cudart/calls.rs", "src/error.rs"] {
        let code = std::fs::read_to_string(root.join(f)).unwrap();
        for part in code.split("raw::").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with("cuda") && part[name.len()..].starts_with('(') {
                used.insert(name);
            }
        }
    }
    assert!(used.contains("cudaMalloc") && used.len() > 60, "{used:?}");
    let out_dir = Path::new(env!("OUT_DIR"));
    let generated = std::fs::read_to_string(out_dir.join("cudart_loaded.rs")).unwrap();
    // `raw::cudaError(code)` builds a value; it is a type, not a function.
    let types = std::fs::read_to_string(out_dir.join("cudart_v13.rs"))
        .or_else(|_| std::fs::read_to_string(out_dir.join("cudart_v12.rs")))
        .unwrap();
    used.retain(|n| !types.contains(&format!("pub struct {n} (")));
    let majors = build::LOADED_RUNTIMES.split(',').count();
    assert_eq!(majors, 2, "both header sets: {}", build::LOADED_RUNTIMES);
    let mut absent = Vec::new();
    for name in &used {
        // The functions of the other major's headers only (CUDA 12's _v2 spellings) are used
        // only when the crate is compiled against those headers.
        let entry = format!("Symbol::new({name:?}, &[");
        let Some(line) = generated.lines().find(|l| l.contains(&entry)) else {
            if name.ends_with("_v2") {
                continue;
            }
            panic!("{name} is not dispatched");
        };
        if line.contains("None") {
            absent.push(line.trim().to_string());
        }
    }
    assert!(absent.is_empty(), "absent in a major: {absent:#?}");
}

#[test]
fn each_runtime_made_with_the_library_exports_every_function_the_crate_resolves_and_no_other() {
    let made = bundled();
    assert_eq!(
        made.len(),
        2,
        "BUNDLED_RUNTIMES={}",
        build::BUNDLED_RUNTIMES
    );
    // The majors in the order of the dispatch's symbol lists (LOADED_RUNTIMES's).
    let order: Vec<u32> = build::LOADED_RUNTIMES
        .split(',')
        .filter_map(|e| e.split_once('=')?.0.parse().ok())
        .collect();
    let generated =
        std::fs::read_to_string(Path::new(env!("OUT_DIR")).join("cudart_loaded.rs")).unwrap();
    let lists: Vec<Vec<Option<String>>> = generated
        .lines()
        .filter_map(|l| {
            l.split_once("Symbol::new(")?
                .1
                .split_once("&[")?
                .1
                .split_once(']')
        })
        .map(|(list, _)| {
            list.split(", ")
                .map(|e| {
                    e.strip_prefix("Some(c\"")
                        .and_then(|n| n.strip_suffix("\")"))
                        .map(String::from)
                })
                .collect()
        })
        .collect();
    assert!(lists.len() > 200, "{} dispatched functions", lists.len());
    for (major, file) in &made {
        assert_eq!(
            file.file_name().unwrap().to_string_lossy(),
            bundled_file_name(*major)
        );
        let dynamic = tool(&["readelf", "-d"], file);
        assert!(!dynamic.contains("libcudart"), "{dynamic}");
        let exported: std::collections::BTreeSet<String> =
            tool(&["nm", "-D", "--defined-only"], file)
                .lines()
                .filter_map(|l| l.split_whitespace().last())
                .map(String::from)
                .collect();
        let foreign: Vec<&String> = exported.iter().filter(|s| !s.starts_with("cuda")).collect();
        assert!(foreign.is_empty(), "{} exports {foreign:?}", file.display());
        let index = order
            .iter()
            .position(|m| m == major)
            .expect("a major of the build");
        let missing: Vec<&String> = lists
            .iter()
            .filter_map(|l| l.get(index)?.as_ref())
            .filter(|n| !exported.contains(*n))
            .collect();
        assert!(
            missing.is_empty(),
            "{} lacks functions the crate resolves for CUDA {major}: {missing:?}",
            file.display()
        );
        assert!(exported.contains("cudaSetDevice") && exported.len() > 300);
    }
}

#[test]
fn the_structures_that_differ_are_laid_out_differently() {
    use llaisys_nvidia::sys::{v12, v13};
    // Why cudaGetDeviceProperties is converted: fields the crate reads moved.
    assert_ne!(
        std::mem::offset_of!(v13::cudaDeviceProp, multiProcessorCount),
        std::mem::offset_of!(v12::cudaDeviceProp, multiProcessorCount)
    );
    assert_ne!(
        std::mem::size_of::<v13::cudaPointerAttributes>(),
        std::mem::size_of::<v12::cudaPointerAttributes>()
    );
}

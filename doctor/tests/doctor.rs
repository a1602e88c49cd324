//! Host-only tests of `llaisys-nvidia doctor`: the real binary's report, exit status, JSON and
//! environment section, and the diagnosis fed with made-up evidence so that every cause is
//! covered without a GPU. They pass on any machine: the tests of the no-driver report make that
//! condition themselves (`no_driver_dir`: a libcuda.so.1 that cannot be loaded, first on the
//! loader's path), on a machine with an NVIDIA driver too. The watchdog's tests with fake
//! drivers are in fake_driver.rs.

use llaisys_nvidia_doctor::backend::{self, build};
use llaisys_nvidia_doctor::child::{self, Outcome};
use llaisys_nvidia_doctor::diagnose::{
    diagnose, explain_visible_devices, Cause, Finding, Severity, Status,
};
use llaisys_nvidia_doctor::evidence::Evidence;
use llaisys_nvidia_doctor::report::{
    CudaErr, DeviceNode, How, Libcuda, Libcudart, LoadedRuntime, LoaderAnswer, ProbeFailure,
    SmokeStatus, Step,
};
use llaisys_nvidia_doctor::{display, env, exit, loader, nodes, smoke, text};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod support;

use support::bin;
use support::child as runner;

/// The binary with a clean environment: PATH, plus exactly `vars`.
fn doctor(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(args).env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        c.env("PATH", path);
    }
    for (k, v) in vars {
        c.env(k, v);
    }
    support::output(&mut c)
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8 output")
}

/// A folder whose `libcuda.so.1` is not a library. First on a process's LD_LIBRARY_PATH, it is
/// the file the loader finds for `libcuda.so.1`, and its load fails there ("file too short"):
/// the doctor and cudart then see no driver, on any machine, one with an NVIDIA driver too.
fn no_driver_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("llaisys-doctor-no-driver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        std::fs::write(dir.join("libcuda.so.1"), b"").expect("the empty libcuda.so.1");
        dir
    })
}

/// The binary as `doctor` runs it, without a driver (`no_driver_dir` as LD_LIBRARY_PATH).
fn doctor_without_driver(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let dir = no_driver_dir().to_str().expect("a UTF-8 temporary folder");
    let mut all = vars.to_vec();
    all.push(("LD_LIBRARY_PATH", dir));
    doctor(args, &all)
}

/// Runs the test `name` of this binary again in a child process without a driver, unless this
/// is that child: then returns true, and the test's body runs here (the loader's path is set at
/// a process's start, so an in-process test needs a process of its own for it).
fn in_a_process_without_driver(name: &str) -> bool {
    if runner::is_child(name) {
        assert!(
            matches!(loader::probe_libcuda(), Libcuda::NotLoadable { .. }),
            "the child process loads a libcuda.so.1"
        );
        return true;
    }
    let mut path = std::ffi::OsString::from(no_driver_dir());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        path.push(":");
        path.push(old);
    }
    runner::TestChild::new(name)
        .env("LD_LIBRARY_PATH", path)
        .limit(support::LIMIT)
        .run_passing();
    false
}

/// Runs `script` under python3 with `input` as its stdin (a file in between) and returns its
/// stdout; fails the test if python3 fails (a JSON that does not parse, a missing key).
fn python(input: &str, script: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let file = std::env::temp_dir().join(format!(
        "llaisys-doctor-python-input-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&file, input).expect("write python3's input");
    let out = support::output(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import sys\nsys.stdin = open(sys.argv[1])\n{script}"
            ))
            .arg(&file),
    );
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "python3 failed: {}\n--- input ---\n{input}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The lines of the text section `title` (between `== title` and the next `== `).
fn section<'a>(report: &'a str, title: &str) -> Vec<&'a str> {
    let head = format!("== {title}");
    report
        .lines()
        .skip_while(|l| *l != head)
        .skip(1)
        .take_while(|l| !l.starts_with("== "))
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// Asserts that `text` contains each of `parts`; shows `text` when one is missing.
#[track_caller]
fn assert_has(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} missing from:\n{text}");
    }
}

/// Asserts that `text` starts with `head`; shows `text` when it does not.
#[track_caller]
fn assert_starts(text: &str, head: &str) {
    assert!(text.starts_with(head), "{head:?} does not begin:\n{text}");
}

/// Asserts that `text` contains none of `parts`; shows `text` when one is there.
#[track_caller]
fn assert_lacks(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(!text.contains(part), "{part:?} found in:\n{text}");
    }
}

/// Asserts that a finding's summary says each of `summary` and its fix each of `fix`.
#[track_caller]
fn assert_says(f: &Finding, summary: &[&str], fix: &[&str]) {
    assert_has(&f.summary, summary);
    assert_has(&f.fix, fix);
}

#[test]
fn text_report_is_complete_and_says_no_driver_with_the_fix() {
    let vars = [("CUDA_VISIBLE_DEVICES", "7"), ("CUDA_LAUNCH_BLOCKING", "1")];
    for args in [&[][..], &["doctor"][..]] {
        let o = doctor_without_driver(args, &vars);
        let out = stdout(&o);
        for title in text::SECTIONS.iter().filter(|t| **t != "Bench") {
            assert!(
                out.contains(&format!("\n== {title}\n")),
                "section {title} missing:\n{out}"
            );
            if *title != "Peer access" && *title != "Environment" {
                assert!(
                    !section(&out, title).is_empty(),
                    "section {title} empty:\n{out}"
                );
            }
        }
        assert!(
            !out.contains("== Bench"),
            "bench ran without --bench:\n{out}"
        );
        let facts = [
            build::CRATE_VERSION,
            build::LINK_MODE,
            build::CUDA_ROOT,
            build::CUDART_VERSION,
        ];
        assert_has(&out, &facts);
        assert_eq!(o.status.code(), Some(exit::NO_DRIVER), "{out}");
        let diag = section(&out, "Diagnosis").join("\n");
        let said = [
            "error: no NVIDIA driver",
            "libcuda.so.1",
            "fix: Install the NVIDIA driver",
            "(exit 2)",
        ];
        assert_has(&diag, &said);
        let dlerror = format!(
            "cannot be loaded: {}/libcuda.so.1: file too short",
            no_driver_dir().display()
        );
        // The report wraps its lines: compare with runs of whitespace as one space.
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(&dlerror),
            "the libcuda line shows no dlerror ({dlerror}):\n{out}"
        );
        assert!(out.contains("skipped: no CUDA device"), "{out}");
    }
}

#[test]
fn environment_shown_is_exactly_what_is_set() {
    let vars = [("CUDA_VISIBLE_DEVICES", "7"), ("CUDA_LAUNCH_BLOCKING", "1")];
    let out = stdout(&doctor(&[], &vars));
    let env_lines: Vec<String> = section(&out, "Environment")
        .iter()
        .map(|l| l.trim().to_string())
        .collect();
    assert_eq!(
        env_lines,
        ["CUDA_VISIBLE_DEVICES=7", "CUDA_LAUNCH_BLOCKING=1"],
        "{out}"
    );
    let out = stdout(&doctor(&[], &[]));
    assert_eq!(
        section(&out, "Environment"),
        ["  (no CUDA-related variable is set)"],
        "{out}"
    );
    // An unknown CUDA_ variable and an awkward value are shown too, verbatim.
    let vars = [
        ("CUDA_SOMETHING_NEW", "a b\"c"),
        ("LD_LIBRARY_PATH", "/nowhere"),
    ];
    let out = stdout(&doctor(&[], &vars));
    let env_lines: Vec<&str> = section(&out, "Environment")
        .iter()
        .map(|l| l.trim())
        .collect();
    assert_eq!(
        env_lines,
        ["LD_LIBRARY_PATH=/nowhere", "CUDA_SOMETHING_NEW=a b\"c"],
        "{out}"
    );
}

#[test]
fn json_parses_and_holds_the_build_facts_and_the_environment() {
    let vars = [
        ("CUDA_VISIBLE_DEVICES", "7"),
        ("CUDA_LAUNCH_BLOCKING", "1"),
        (
            "CUDA_CACHE_PATH",
            "/var/cache/with \"quotes\" and \\ and \t tab",
        ),
    ];
    let o = doctor_without_driver(&["--json"], &vars);
    let out = stdout(&o);
    python(&out, "import json,sys; json.load(sys.stdin)");
    let facts = python(
        &out,
        "import json,sys\n\
         d=json.load(sys.stdin)\n\
         b=d['build']\n\
         print(d['schema'])\n\
         print(b['crate_version'])\n\
         print(b['link_mode'])\n\
         print(b['cudart_version']['number'])\n\
         print(b['cuda_root'])\n\
         print(b['lib_name'])\n\
         e=dict(d['machine']['env'])\n\
         ld=e.pop('LD_LIBRARY_PATH')\n\
         print(json.dumps(e))\n\
         print(d['machine']['libcudart']['linked_in'])\n\
         print(d['diagnosis']['exit_code'])\n\
         print(d['diagnosis']['status'])\n\
         print(d['smoke']['status'])\n\
         print(len(d['devices']), d['device_count']['count'])\n\
         print(d['bench'])\n\
         print(ld)",
    );
    let lines: Vec<&str> = facts.lines().collect();
    assert_eq!(lines[0], "llaisys-nvidia-doctor/1");
    assert_eq!(lines[1], build::CRATE_VERSION);
    assert_eq!(lines[2], build::LINK_MODE);
    assert_eq!(lines[3], build::CUDART_VERSION);
    assert_eq!(lines[3].parse::<i32>().ok(), Some(build::cudart_version()));
    assert_eq!(lines[4], build::CUDA_ROOT);
    assert_eq!(lines[5], build::LIB_NAME);
    assert_eq!(
        lines[6],
        r#"{"CUDA_VISIBLE_DEVICES": "7", "CUDA_LAUNCH_BLOCKING": "1", "CUDA_CACHE_PATH": "/var/cache/with \"quotes\" and \\ and \t tab"}"#
    );
    assert_eq!(
        lines[7],
        if build::LINK_MODE == "static" {
            "True"
        } else {
            "False"
        }
    );
    assert_eq!(lines[8], o.status.code().unwrap_or(-1).to_string());
    assert_eq!(lines[12], "None", "no bench without --bench");
    assert_eq!(lines[13], no_driver_dir().display().to_string());
    assert_eq!(o.status.code(), Some(exit::NO_DRIVER));
    assert_eq!(lines[9], "no_driver");
    assert_eq!(lines[10], "skipped");
    assert_eq!(lines[11], "0 0");
    let cause = python(
        &out,
        "import json,sys\n\
         d=json.load(sys.stdin)\n\
         f=d['diagnosis']['findings'][0]\n\
         print(f['cause'], f['severity'], d['device_count']['error']['code'], d['machine']['libcuda']['loadable'])",
    );
    assert_eq!(cause.trim(), "no_driver error 35 False");
}

#[test]
fn json_says_where_libcudart_comes_from() {
    let out = stdout(&doctor(&["--json"], &[]));
    let got = python(
        &out,
        "import json,sys\n\
         l=json.load(sys.stdin)['machine']['libcudart']\n\
         print(l['loaded_from']); print(l['found_via']); print(l['built_path']);\n\
         print(l['without_ld_library_path']['status']); print(l['without_ld_library_path']['path'])",
    );
    let lines: Vec<&str> = got.lines().collect();
    let built = format!("{}/{}", build::LIB_DIR, build::LIB_NAME);
    assert_eq!(lines[2], built);
    if build::LINK_MODE == "loaded" {
        // The library's own choice, made in the probe process: the file it opened (if any) and
        // every place it looked at.
        let choice = python(
            &out,
            "import json,sys\n\
             l=json.load(sys.stdin)['machine']['libcudart']\n\
             c=l['loaded']\n\
             print(c['path'] == l['loaded_from']); print(len(c['tried']) > 0); print(c['why'] != '')",
        );
        assert_eq!(
            choice.lines().collect::<Vec<_>>(),
            ["True", "True", "True"],
            "{out}"
        );
        assert_eq!(lines[1], "None");
        assert_eq!(lines[3], "not_checked");
    } else if build::LINK_MODE == "static" {
        // dladdr of a cudart function names this program itself: cudart is linked in.
        let exe = std::fs::canonicalize(bin()).expect("binary path");
        let shown = std::fs::canonicalize(lines[0]).expect("an existing file");
        assert_eq!(shown, exe, "{out}");
        assert_eq!(lines[1], "None");
        assert_eq!(lines[3], "not_checked");
    } else {
        // The path the loader opened: the rpath's lib folder, as the build wrote it.
        assert_eq!(lines[0], built, "{out}");
        assert_eq!(lines[1], "the rpath: the lib folder the build linked");
        assert_eq!(lines[3], "found", "{out}");
        assert_eq!(lines[4], built, "{out}");
    }
}

/// Dynamic feature: a libcudart put first by LD_LIBRARY_PATH is the one reported as loaded (the
/// loader really loaded it), and the loader's answer without LD_LIBRARY_PATH is the build's.
#[cfg(feature = "dynamic")]
#[test]
fn dynamic_reports_the_libcudart_the_loader_really_chose() {
    let built = format!("{}/{}", build::LIB_DIR, build::LIB_NAME);
    let dir = std::env::temp_dir().join(format!("llaisys-doctor-ld-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let copy = dir.join(build::LIB_NAME);
    std::fs::copy(&built, &copy).expect("copy libcudart");
    let dir_text = dir.display().to_string();
    let o = doctor(&["--json"], &[("LD_LIBRARY_PATH", dir_text.as_str())]);
    let got = python(
        &stdout(&o),
        "import json,sys\n\
         d=json.load(sys.stdin)\n\
         l=d['machine']['libcudart']\n\
         print(l['loaded_from']); print(l['found_via']);\n\
         print(l['without_ld_library_path']['status']); print(l['without_ld_library_path']['path'])\n\
         print(l['shared_mapped'])\n\
         print([f['cause'] for f in d['diagnosis']['findings']])",
    );
    let _ = std::fs::remove_dir_all(&dir);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines[0], copy.display().to_string(), "{got}");
    assert_eq!(lines[1], "LD_LIBRARY_PATH", "{got}");
    assert_eq!(lines[2], "found", "{got}");
    assert_eq!(lines[3], built, "{got}");
    assert_eq!(lines[4], format!("['{}']", copy.display()), "{got}");
    assert_has(lines[5], &["shared_cudart_elsewhere"]);
    assert_lacks(lines[5], &["shared_cudart_not_found"]);
}

#[test]
fn bench_without_a_device_says_skipped() {
    let o = doctor_without_driver(&["--bench"], &[]);
    let out = stdout(&o);
    assert_eq!(
        section(&out, "Bench"),
        ["  skipped: no CUDA device"],
        "{out}"
    );
    assert_eq!(o.status.code(), Some(exit::NO_DRIVER));
    let o = doctor_without_driver(&["doctor", "--json", "--bench", "--device", "3"], &[]);
    let got = python(
        &stdout(&o),
        "import json,sys\n\
         b=json.load(sys.stdin)['bench']\n\
         print(b['skipped'], b['device'], b['copies'], b['error'])",
    );
    assert_eq!(got.trim(), "no CUDA device 3 [] None");
}

#[test]
fn usage_errors_and_help() {
    for bad in [
        &["--frobnicate"][..],
        &["--device"],
        &["--device", "x"],
        &["--device=-1"],
        &["status"],
        &["--json", "doctor"],
        &["help"],
        &["--timeout", "x"],
        &["--timeout", "-1"],
        &["--timeout=inf"],
        &["--probe-process", "nonsense"],
    ] {
        let o = doctor(bad, &[]);
        assert_eq!(o.status.code(), Some(exit::USAGE), "{bad:?}");
        assert!(o.stdout.is_empty(), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("usage: llaisys-nvidia"),
            "{bad:?}"
        );
    }
    // A bad time limit in the environment is a usage error too, named as such.
    let o = doctor(&[], &[("LLAISYS_NVIDIA_DOCTOR_TIMEOUT", "soon")]);
    assert_eq!(o.status.code(), Some(exit::USAGE));
    assert!(String::from_utf8_lossy(&o.stderr).contains("soon"));
    for help in [&["--help"][..], &["-h"], &["doctor", "--help"]] {
        let o = doctor(help, &[]);
        assert_eq!(o.status.code(), Some(0), "{help:?}");
        let help = stdout(&o);
        let options = ["--json", "--bench", "--device", "--timeout"];
        assert_has(&help, &options);
        assert_has(&help, &["  2 ", "  3 ", "  4 ", "  5 ", "  64 "]);
        assert_lacks(&help, &["probe-process"]);
    }
    for version in [&["--version"][..], &["-V"], &["doctor", "-V"]] {
        let o = doctor(version, &[]);
        assert_eq!(o.status.code(), Some(0));
        let v = stdout(&o);
        assert_has(&v, &[build::CRATE_VERSION, build::LINK_MODE]);
    }
}

#[test]
fn every_driver_call_ran_in_a_probe_process_under_the_watchdog() {
    let o = doctor_without_driver(&["--json", "--timeout", "7.5"], &[]);
    let got = python(
        &stdout(&o),
        "import json,sys\n\
         w=json.load(sys.stdin)['watchdog']\n\
         print(w['timeout_s'], w['status'], w['probe'], w['signal'], w['exit_code'], w['error'])\n\
         print([p['name'] for p in w['probes']])\n\
         print(set(p['status'] for p in w['probes']), all(p['ms'] >= 0 for p in w['probes']))",
    );
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines[0], "7.5 ok None None None None", "{got}");
    assert_eq!(lines[2], "{'ok'} True", "{got}");
    // The loaded mode asks the driver and opens a runtime first, in a probe of its own.
    let load = if build::LINK_MODE == "loaded" {
        "'load the CUDA runtime', "
    } else {
        ""
    };
    assert_eq!(
        lines[1],
        format!(
            "['dlopen libcuda.so.1', {load}'cudaRuntimeGetVersion', 'cudaDriverGetVersion', \
             'cudaGetDeviceCount']"
        ),
        "{got}"
    );
    // 0 turns the limit off.
    let o = doctor(&["--json"], &[("LLAISYS_NVIDIA_DOCTOR_TIMEOUT", "0")]);
    let got = python(
        &stdout(&o),
        "import json,sys\nprint(json.load(sys.stdin)['watchdog']['timeout_s'])",
    );
    assert_eq!(got.trim(), "None");
    // The default.
    let got = python(
        &stdout(&doctor(&["--json"], &[])),
        "import json,sys\nprint(json.load(sys.stdin)['watchdog']['timeout_s'])",
    );
    assert_eq!(got.trim(), "20.0");
}

/// The smoke test's table calls never call the process-wide error handler: here, in this
/// process, with the default handler (which aborts the process) installed, a smoke test on a
/// device that cannot work (no driver) fails step by step and returns.
#[test]
fn smoke_test_reports_failures_without_the_error_handler() {
    if !in_a_process_without_driver("smoke_test_reports_failures_without_the_error_handler") {
        return;
    }
    let mut announced = Vec::new();
    let s = smoke::run(0, 1, Some(Ok(0.0)), &mut |step| {
        announced.push(step.to_string())
    });
    assert_eq!(s.status, SmokeStatus::Failed, "{s:#?}");
    let set = s
        .steps
        .iter()
        .find(|st| st.name == "set_device")
        .expect("a set_device step");
    let e = set.error.as_deref().expect("set_device failed");
    assert!(e.contains("cudaErrorInsufficientDriver"), "{e}");
    // The table answers 0 devices and says why as the last error: that step works.
    assert_eq!(s.steps[0].name, "get_device_count");
    assert_eq!(s.steps[0].error, None);
    assert_eq!(announced, ["get_device_count", "set_device"], "{s:#?}");
}

// ---- the diagnosis, from made-up evidence ----

fn node(path: &str, exists: bool, accessible: bool) -> DeviceNode {
    DeviceNode {
        path: path.into(),
        exists,
        accessible,
        mode: if exists { 0o660 } else { 0 },
        uid: 0,
        gid: 44,
    }
}

/// A working one-GPU machine, static build, CUDA 13.0 on a 13.0 driver.
fn healthy() -> Evidence {
    Evidence {
        link_mode: "static".into(),
        built_cudart_version: 13000,
        runtime_version: Some(13000),
        driver_version: Some(13000),
        device_count: Some(Ok(1)),
        libcuda: Libcuda::Loaded {
            path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
            resolved: Some("/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05".into()),
        },
        kernel_module: Some("580.95.05".into()),
        gpus_on_host: Some(1),
        device_nodes: vec![
            node("/dev/nvidiactl", true, true),
            node("/dev/nvidia-uvm", true, true),
            node("/dev/nvidia0", true, true),
        ],
        visible_devices: None,
        libcudart: Libcudart {
            link_mode: "static".into(),
            loaded_from: Some("/usr/bin/llaisys-nvidia".into()),
            found_via: None,
            built_path: "/cuda/lib/libcudart_static.a".into(),
            built_path_exists: true,
            without_ld_library_path: LoaderAnswer::NotChecked("static".into()),
            shared_mapped: Vec::new(),
            loaded: None,
        },
        uid: 1000,
        failed_checks: Vec::new(),
        probe_failure: None,
        probe_stderr: String::new(),
    }
}

/// cudaGetDeviceCount's answer `code`.
fn count_error(code: i32) -> Option<Result<i32, CudaErr>> {
    Some(Err(backend::cuda_error(code)))
}

/// The only error finding, checked to be of `cause`.
fn the_error(ev: &Evidence, cause: Cause) -> Finding {
    let d = diagnose(ev);
    let errors: Vec<_> = d
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    assert_eq!(errors.len(), 1, "{d:#?}");
    assert_eq!(errors[0].cause, cause, "{d:#?}");
    assert_eq!(d.status, cause.status());
    assert!(!errors[0].fix.is_empty());
    errors[0].clone()
}

#[test]
fn diagnosis_healthy_machine_has_no_finding() {
    let d = diagnose(&healthy());
    assert_eq!(d.status, Status::Healthy);
    assert_eq!(d.status.exit_code(), exit::HEALTHY);
    assert!(d.findings.is_empty(), "{d:#?}");
}

#[test]
fn diagnosis_no_driver() {
    let mut ev = healthy();
    ev.libcuda = Libcuda::NotLoadable {
        error: "libcuda.so.1: cannot open shared object file: No such file or directory".into(),
    };
    ev.driver_version = Some(0);
    ev.kernel_module = None;
    ev.gpus_on_host = None;
    ev.device_nodes.clear();
    ev.device_count = count_error(35);
    let f = the_error(&ev, Cause::NoDriver);
    assert_starts(&f.summary, "no NVIDIA driver");
    assert_says(
        &f,
        &["cannot open shared object file"],
        &["driver 580 or newer", "--gpus all"],
    );
    assert_eq!(diagnose(&ev).status.exit_code(), exit::NO_DRIVER);
    // The kernel module without its library: said so.
    ev.kernel_module = Some("580.95.05".into());
    let f = the_error(&ev, Cause::NoDriver);
    assert_has(&f.summary, &["user-space part is missing"]);
}

#[test]
fn diagnosis_driver_too_old_names_both_versions_and_what_to_do() {
    let mut ev = healthy();
    ev.driver_version = Some(12020);
    ev.kernel_module = Some("535.104.05".into());
    ev.device_count = count_error(35);
    let f = the_error(&ev, Cause::DriverTooOld);
    assert_starts(&f.summary, "driver too old");
    assert_says(
        &f,
        &[
            "supports CUDA 12.2",
            "CUDA 13.0 runtime needs NVIDIA driver 580 or newer",
            "535.104.05",
        ],
        &["580 or newer"],
    );
    // A 12.2 driver (r535) serves the CUDA 12.9 build: said so, with the commands.
    assert_has(
        &f.fix,
        &[
            "CUDA 12.9 build",
            "from 525 on",
            "575 or newer",
            "bash scripts/bootstrap.sh --cuda12",
            "CUDA_HOME=$PWD/.deps/cuda12",
        ],
    );
    assert_eq!(diagnose(&ev).status.exit_code(), exit::NO_DRIVER);
    // A driver older than CUDA 12 is too old for the CUDA 12.9 build as well: not offered.
    ev.driver_version = Some(11080);
    let f = the_error(&ev, Cause::DriverTooOld);
    assert_has(&f.fix, &["580 or newer"]);
    assert_lacks(&f.fix, &["CUDA 12.9 build"]);
    // A CUDA 12.9 build on a CUDA 11.8 driver: 525 or newer.
    ev.built_cudart_version = 12090;
    ev.runtime_version = Some(12090);
    let f = the_error(&ev, Cause::DriverTooOld);
    assert_says(
        &f,
        &["CUDA 12.9 runtime needs NVIDIA driver 525 or newer"],
        &["525 or newer"],
    );
    assert_lacks(&f.fix, &["CUDA 12.9 build"]);
}

#[test]
fn diagnosis_insufficient_driver_with_a_driver_names_the_driver_needed() {
    // cudaErrorInsufficientDriver while a libcuda loads that reports no usable version (not
    // older than the runtime): still the driver needed, and the build for older drivers.
    let mut ev = healthy();
    ev.driver_version = Some(0);
    ev.device_count = count_error(35);
    let f = the_error(&ev, Cause::DriverUnusable);
    assert_says(
        &f,
        &[
            "could not read a CUDA version",
            "needs NVIDIA driver 580 or newer",
        ],
        &["CUDA_HOME=$PWD/.deps/cuda12"],
    );
}

#[test]
fn diagnosis_driver_older_than_the_runtime_that_works_is_a_note() {
    // A CUDA 12.9 build on a CUDA 12.2 driver: minor-version compatibility.
    let mut ev = healthy();
    ev.built_cudart_version = 12090;
    ev.runtime_version = Some(12090);
    ev.driver_version = Some(12020);
    let d = diagnose(&ev);
    assert_eq!(d.status, Status::Healthy, "{d:#?}");
    let f = d.find(Cause::DriverOlderThanRuntime).expect("a note");
    assert_eq!(f.severity, Severity::Note);
    assert_says(f, &["minor-version compatibility"], &["575 or newer"]);
    // Equal versions: nothing to say.
    ev.driver_version = Some(12090);
    assert!(diagnose(&ev).findings.is_empty());
}

#[test]
fn diagnosis_of_a_probe_that_hung_or_crashed() {
    let mut ev = healthy();
    ev.device_count = None;
    ev.driver_version = None;
    ev.probe_failure = Some(ProbeFailure {
        probe: "cudaDriverGetVersion".into(),
        how: How::Hung { after_s: 20.0 },
    });
    ev.probe_stderr = "NVRM: something".into();
    let f = the_error(&ev, Cause::ProbeHung);
    assert_starts(&f.summary, "probe hung: `cudaDriverGetVersion`");
    assert_says(
        &f,
        &["cuInit", "within 20 s", "NVRM: something"],
        &["nvidia-smi", "--timeout"],
    );
    assert_eq!(diagnose(&ev).status.exit_code(), exit::PROBE_FAILED);
    // Work on the device that hangs: the GPU, not the driver's loading.
    ev.probe_failure = Some(ProbeFailure {
        probe: "smoke: malloc_host".into(),
        how: How::Hung { after_s: 0.5 },
    });
    ev.device_count = Some(Ok(1));
    let f = the_error(&ev, Cause::ProbeHung);
    assert_has(&f.summary, &["a call of the llaisys table", "within 0.5 s"]);
    assert_starts(&f.fix, "A call on the device did not return");
    // A crash names the signal.
    ev.probe_failure = Some(ProbeFailure {
        probe: "cudaGetDeviceCount".into(),
        how: How::Signal {
            number: 11,
            name: "SIGSEGV".into(),
            words: "segmentation fault".into(),
        },
    });
    ev.device_count = None;
    let f = the_error(&ev, Cause::ProbeCrashed);
    assert_says(&f, &["died of SIGSEGV"], &["kernel module"]);
    assert_eq!(diagnose(&ev).status, Status::ProbeFailed);
    // The most basic verdict wins over a failed check.
    ev.failed_checks = vec![("bench".into(), "x".into())];
    assert_eq!(diagnose(&ev).status, Status::ProbeFailed);
}

#[test]
fn diagnosis_stub_libcuda() {
    let mut ev = healthy();
    ev.libcuda = Libcuda::Loaded {
        path: "/usr/local/cuda/lib64/stubs/libcuda.so.1".into(),
        resolved: None,
    };
    ev.device_count = count_error(34);
    let f = the_error(&ev, Cause::DriverUnusable);
    assert_says(&f, &["stub"], &["stubs"]);
}

#[test]
fn diagnosis_hidden_by_cuda_visible_devices() {
    let mut ev = healthy();
    ev.gpus_on_host = Some(2);
    ev.device_nodes.push(node("/dev/nvidia1", true, true));
    ev.visible_devices = Some("7".into());
    ev.device_count = count_error(100);
    let f = the_error(&ev, Cause::HiddenByVisibleDevices);
    assert_says(
        &f,
        &[
            "CUDA_VISIBLE_DEVICES=7",
            "2 NVIDIA GPUs",
            "7 names a GPU this machine does not have (indices 0..1)",
        ],
        &["Unset CUDA_VISIBLE_DEVICES", "from 0 to 1"],
    );
    assert_eq!(diagnose(&ev).status.exit_code(), exit::NO_DEVICE);
    for hiding in ["", "-1", "NoDevFiles", "GPU-deadbeef"] {
        ev.visible_devices = Some(hiding.into());
        the_error(&ev, Cause::HiddenByVisibleDevices);
    }
    // A valid index hides nothing: the cause is elsewhere (here, locked nodes).
    ev.visible_devices = Some("0".into());
    ev.device_nodes = vec![
        node("/dev/nvidiactl", true, false),
        node("/dev/nvidia-uvm", true, true),
        node("/dev/nvidia0", true, false),
    ];
    the_error(&ev, Cause::DeviceNodesInaccessible);
}

#[test]
fn diagnosis_partly_hidden_is_a_note() {
    let mut ev = healthy();
    ev.gpus_on_host = Some(8);
    ev.visible_devices = Some("0,1".into());
    ev.device_count = Some(Ok(2));
    let d = diagnose(&ev);
    assert_eq!(d.status, Status::Healthy);
    let f = d
        .find(Cause::PartlyHiddenByVisibleDevices)
        .expect("a note about hidden GPUs");
    assert_eq!(f.severity, Severity::Note);
    assert_has(&f.summary, &["shows 2 of this machine's 8 NVIDIA GPUs"]);
}

#[test]
fn diagnosis_driver_present_but_no_device() {
    let mut ev = healthy();
    ev.gpus_on_host = None;
    ev.device_nodes = vec![
        node("/dev/nvidiactl", true, true),
        node("/dev/nvidia-uvm", true, true),
    ];
    ev.device_count = count_error(100);
    let f = the_error(&ev, Cause::NoDevice);
    assert_starts(&f.summary, "driver present but no device");
    assert_says(
        &f,
        &["supports CUDA 13.0", "cudaErrorNoDevice (100)"],
        &["nvidia-smi"],
    );
    assert_eq!(diagnose(&ev).status.exit_code(), exit::NO_DEVICE);
    // A count of 0 without an error reads the same.
    ev.device_count = Some(Ok(0));
    the_error(&ev, Cause::NoDevice);
}

#[test]
fn diagnosis_device_nodes_locked_or_missing() {
    let mut ev = healthy();
    ev.device_nodes = vec![
        node("/dev/nvidiactl", true, false),
        node("/dev/nvidia-uvm", true, false),
        node("/dev/nvidia0", true, false),
    ];
    ev.device_count = count_error(100);
    let f = the_error(&ev, Cause::DeviceNodesInaccessible);
    assert_starts(&f.summary, "device nodes not accessible");
    assert_says(
        &f,
        &[
            "uid 1000",
            "/dev/nvidiactl (mode 660, owner 0:44)",
            "/dev/nvidia0",
        ],
        &["usermod -aG video"],
    );
    assert_eq!(diagnose(&ev).status.exit_code(), exit::NO_DEVICE);
    // Another error code with locked nodes: still the nodes.
    ev.device_count = count_error(999);
    the_error(&ev, Cause::DeviceNodesInaccessible);
    // Missing control node: the kernel module or the container.
    ev.device_nodes = vec![
        node("/dev/nvidiactl", false, false),
        node("/dev/nvidia-uvm", false, false),
    ];
    ev.kernel_module = None;
    ev.gpus_on_host = None;
    ev.device_count = count_error(100);
    let f = the_error(&ev, Cause::DeviceNodesInaccessible);
    assert_says(&f, &["/dev/nvidiactl does not exist"], &["modprobe nvidia"]);
}

#[test]
fn diagnosis_other_init_errors_with_usable_nodes() {
    let mut ev = healthy();
    ev.device_count = count_error(999);
    let f = the_error(&ev, Cause::DriverUnusable);
    assert_says(&f, &["cudaErrorUnknown (999)"], &["version mismatch"]);
}

#[test]
fn diagnosis_shared_cudart_not_found_without_ld_library_path() {
    let mut ev = healthy();
    ev.link_mode = "dynamic".into();
    ev.libcudart = Libcudart {
        link_mode: "dynamic".into(),
        loaded_from: Some("/opt/cuda/lib/libcudart.so.13".into()),
        found_via: Some("LD_LIBRARY_PATH".into()),
        built_path: "/gone/lib/libcudart.so.13".into(),
        built_path_exists: false,
        without_ld_library_path: LoaderAnswer::NotFound,
        shared_mapped: vec!["/opt/cuda/lib/libcudart.so.13".into()],
        loaded: None,
    };
    let d = diagnose(&ev);
    let f = d.find(Cause::SharedCudartNotFound).expect("finding");
    assert_eq!(f.severity, Severity::Warning);
    assert_says(
        f,
        &[
            "libcudart.so.13 => not found",
            "/gone/lib/libcudart.so.13 no longer exists",
        ],
        &["$ORIGIN"],
    );
    assert!(d.find(Cause::SharedCudartElsewhere).is_some(), "{d:#?}");
    // A warning: this run works.
    assert_eq!(d.status, Status::Healthy);
    // Found through the rpath: nothing to say.
    ev.libcudart.without_ld_library_path = LoaderAnswer::Found("/gone/lib/libcudart.so.13".into());
    ev.libcudart.found_via = Some("the rpath: the lib folder the build linked".into());
    ev.libcudart.loaded_from = Some("/gone/lib/libcudart.so.13".into());
    assert!(diagnose(&ev).findings.is_empty(), "{:#?}", diagnose(&ev));
}

#[test]
fn diagnosis_mixed_and_old_cudart() {
    let mut ev = healthy();
    ev.libcudart.shared_mapped = vec!["/usr/lib/libcudart.so.12".into()];
    let d = diagnose(&ev);
    assert_eq!(
        d.find(Cause::MixedCudart).map(|f| f.severity),
        Some(Severity::Warning)
    );
    let mut ev = healthy();
    ev.link_mode = "dynamic".into();
    ev.libcudart.link_mode = "dynamic".into();
    ev.runtime_version = Some(13000);
    ev.built_cudart_version = 13010;
    let d = diagnose(&ev);
    let f = d.find(Cause::RuntimeOlderThanHeaders).expect("finding");
    assert!(f.summary.contains("CUDA 13.0, older than") && f.summary.contains("(CUDA 13.1)"));
}

/// The `loaded` mode's evidence: the library chose `version` at `path` (None: none loaded).
fn loaded(path: Option<&str>, version: Option<i32>, why: &str) -> Evidence {
    let mut ev = healthy();
    ev.link_mode = "loaded".into();
    ev.libcudart.link_mode = "loaded".into();
    ev.libcudart.loaded_from = path.map(String::from);
    ev.libcudart.loaded = Some(LoadedRuntime {
        path: path.map(String::from),
        version,
        why: why.into(),
        driver: "supports CUDA 13.0 (cuDriverGetVersion of /usr/lib/libcuda.so.1)".into(),
        tried: vec![("LLAISYS_NVIDIA_CUDART_LIBRARY".into(), "not set".into())],
        shared_mapped: path.map(String::from).into_iter().collect(),
    });
    ev.runtime_version = version;
    ev
}

#[test]
fn diagnosis_loaded_mode_serves_cuda_12_with_cuda_13_headers() {
    // The dispatch serves both majors: an older runtime than the headers is no finding.
    let ev = loaded(
        Some("/opt/cuda-12.9/lib64/libcudart.so.12"),
        Some(12090),
        "CUDA 12.9: the newest runtime found that the driver (CUDA 12.2) supports",
    );
    assert!(diagnose(&ev).findings.is_empty(), "{:#?}", diagnose(&ev));
    let mut two = ev.clone();
    if let Some(l) = two.libcudart.loaded.as_mut() {
        l.shared_mapped.push("/usr/lib/libcudart.so.13".into());
    }
    assert_eq!(
        diagnose(&two).find(Cause::MixedCudart).map(|f| f.severity),
        Some(Severity::Warning)
    );
}

#[test]
fn diagnosis_loaded_mode_without_a_runtime_names_the_cause_not_the_devices() {
    let why = "no CUDA runtime (libcudart.so.13 or .so.12) could be loaded; looked at: ...";
    let mut ev = loaded(None, None, why);
    ev.device_count = count_error(303);
    let d = diagnose(&ev);
    let f = the_error(&ev, Cause::NoCudaRuntime);
    assert_eq!(f.summary, format!("no CUDA runtime could be loaded: {why}"));
    assert_has(&f.fix, &["LLAISYS_NVIDIA_CUDART_LIBRARY"]);
    assert!(d.find(Cause::NoDevice).is_none(), "{d:#?}");
    assert_eq!(d.status, Status::CheckFailed);
    // A driver too old for every runtime: the driver's finding, as for any runtime.
    let mut ev = loaded(None, None, "the NVIDIA driver supports CUDA 11.8 ...");
    ev.device_count = count_error(35);
    ev.driver_version = Some(11080);
    let d = diagnose(&ev);
    assert!(d.find(Cause::NoCudaRuntime).is_none(), "{d:#?}");
    assert_eq!(d.status, Status::NoDriver);
}

#[test]
fn diagnosis_failed_checks_exit_4_unless_something_more_basic_is_wrong() {
    let mut ev = healthy();
    ev.failed_checks = vec![(
        "smoke test: malloc_device a".into(),
        "cudaMalloc failed: cudaErrorMemoryAllocation (2)".into(),
    )];
    let f = the_error(&ev, Cause::CheckFailed);
    assert_has(&f.summary, &["smoke test: malloc_device a"]);
    assert_eq!(diagnose(&ev).status.exit_code(), exit::CHECK_FAILED);
    // With no driver too, the verdict is the more basic one, and errors come first.
    ev.libcuda = Libcuda::NotLoadable { error: "x".into() };
    ev.device_count = count_error(35);
    ev.libcudart.shared_mapped = vec!["/x/libcudart.so.13".into()];
    let d = diagnose(&ev);
    assert_eq!(d.status, Status::NoDriver);
    assert_eq!(d.status.exit_code(), exit::NO_DRIVER);
    assert_eq!(
        d.findings.last().map(|f| f.severity),
        Some(Severity::Warning)
    );
}

#[test]
fn exit_codes_are_distinct_and_documented() {
    let codes = [
        exit::HEALTHY,
        exit::DOCTOR_FAILED,
        exit::NO_DRIVER,
        exit::NO_DEVICE,
        exit::CHECK_FAILED,
        exit::PROBE_FAILED,
        exit::USAGE,
    ];
    assert_eq!(codes, [0, 1, 2, 3, 4, 5, 64]);
    let docs = include_str!("../../docs/doctor-json.md");
    for (code, id) in [
        (0, "healthy"),
        (2, "no_driver"),
        (3, "no_device"),
        (4, "check_failed"),
        (5, "probe_failed"),
    ] {
        assert!(
            docs.contains(&format!("| {code} | `{id}`")),
            "docs/doctor-json.md lacks exit {code} ({id})"
        );
    }
}

#[test]
fn visible_devices_entries_are_explained() {
    let (t, hides) = explain_visible_devices("0,5,1", Some(2));
    assert!(hides);
    let said = [
        "0 is a valid index",
        "5 names a GPU this machine does not have",
    ];
    assert_has(&t, &said);
    assert!(!explain_visible_devices("1,0", Some(2)).1);
    assert!(explain_visible_devices("  ", Some(2)).1);
}

// ---- pieces ----

#[test]
fn json_strings_are_escaped_completely() {
    // Through the real binary: a value with every kind of awkward character (an environment
    // value cannot hold NUL) comes back from Python's parser unchanged.
    let nasty = "quote \" backslash \\ newline \n tab \t cr \r bell \u{7} unit \u{1f} del \u{7f} \
                 unicode é 漢 \u{2028} emoji 🦀 slash /";
    let out = stdout(&doctor(&["--json"], &[("CUDA_NASTY", nasty)]));
    let back = python(
        &out,
        "import json,sys\n\
         d=json.load(sys.stdin)\n\
         print(json.dumps(d['machine']['env']['CUDA_NASTY']))",
    );
    assert_eq!(
        back.trim(),
        "\"quote \\\" backslash \\\\ newline \\n tab \\t cr \\r bell \\u0007 unit \\u001f del \\u007f \
         unicode \\u00e9 \\u6f22 \\u2028 emoji \\ud83e\\udd80 slash /\""
    );
    // Control characters are escaped in the document itself, never written raw.
    assert!(!out.contains('\u{7}') && !out.contains('\u{1f}'), "{out}");
}

#[test]
fn numbers_that_are_not_finite_travel_as_null() {
    let step = Step {
        name: "x".into(),
        ms: f64::NAN,
        error: None,
    };
    let text = serde_json::to_string(&step).expect("serialises");
    assert_eq!(text, r#"{"name":"x","ms":null,"error":null}"#);
    let back: Step = serde_json::from_str(&text).expect("parses");
    assert!(back.ms.is_nan());
    let step = Step { ms: 1.5, ..back };
    let back: Step =
        serde_json::from_str(&serde_json::to_string(&step).expect("ser")).expect("parses");
    assert_eq!(back.ms, 1.5);
}

#[test]
fn loader_trace_lines_are_read_as_ldd_prints_them() {
    let trace = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                 \tlibcudart.so.13 => /x y/lib/libcudart.so.13 (0x00007f12)\n\
                 \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f00)\n";
    assert_eq!(
        loader::parse_trace(trace, "libcudart"),
        LoaderAnswer::Found("/x y/lib/libcudart.so.13".into())
    );
    assert_eq!(
        loader::parse_trace("\tlibcudart.so.13 => not found\n", "libcudart"),
        LoaderAnswer::NotFound
    );
    assert!(matches!(
        loader::parse_trace("\tstatically linked\n", "libcudart"),
        LoaderAnswer::NotChecked(_)
    ));
}

#[test]
fn kernel_module_versions_are_read() {
    assert_eq!(
        nodes::parse_module_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:42:03 UTC 2025\nGCC version: gcc 12"
        )
        .as_deref(),
        Some("580.95.05")
    );
    assert_eq!(
        nodes::parse_module_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.03  Release Build"
        )
        .as_deref(),
        Some("580.159.03")
    );
    assert_eq!(nodes::parse_module_version(""), None);
}

#[test]
fn environment_selection_keeps_known_order_then_sorted_others() {
    let vars = [
        ("PATH", "/bin"),
        ("CUDA_ZED", "z"),
        ("LD_LIBRARY_PATH", "/l"),
        ("CUDA_VISIBLE_DEVICES", "1"),
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_REQUIRE_CUDA", "cuda>=13.0 brand=tesla,driver>=535"),
        ("CUDA_ALPHA", "a"),
        ("HOME", "/root"),
    ]
    .map(|(k, v)| (k.into(), v.into()));
    let got = env::select(vars);
    let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "LD_LIBRARY_PATH",
            "CUDA_ALPHA",
            "CUDA_ZED"
        ]
    );
}

/// The doctor's binary finds the shared libcudart of the dynamic feature by itself (its own
/// build script writes the rpath the library's programs have), and needs none when static or
/// loaded.
#[test]
fn the_binary_finds_libcudart_through_its_rpath() {
    let out = support::output(Command::new("readelf").arg("-d").arg(bin()));
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let needs_cudart = dynamic
        .lines()
        .any(|l| l.contains("NEEDED") && l.contains("libcudart"));
    if build::LINK_MODE != "dynamic" {
        assert!(
            !needs_cudart,
            "a {} build needs a shared libcudart:\n{dynamic}",
            build::LINK_MODE
        );
    } else {
        assert!(needs_cudart, "{dynamic}");
        let runpath = dynamic
            .lines()
            .find(|l| l.contains("RUNPATH") || l.contains("RPATH"))
            .unwrap_or_else(|| panic!("no RUNPATH:\n{dynamic}"));
        assert_has(runpath, &["$ORIGIN", build::LIB_DIR]);
    }
    // It starts with no LD_LIBRARY_PATH (`doctor` clears the environment).
    let o = doctor(&["--version"], &[]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// `sh -c script` with stdout on a pipe, through the bounded read with `limit`; how long it
/// took.
fn sh_within(script: &str, limit: Duration) -> (Outcome, Duration) {
    let t = Instant::now();
    let c = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh runs");
    (child::output_within(c, limit), t.elapsed())
}

#[test]
fn a_child_whose_grandchild_keeps_stdout_open_is_read_within_the_bound() {
    // The child exits at once; the background `sleep` inherited its stdout and keeps it open
    // for 60 s.
    let (out, took) = sh_within("sleep 60 & echo \"holder $!\"", Duration::from_secs(30));
    let Outcome::Ended { status, stdout } = out else {
        panic!("{out:?}");
    };
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(status.code(), Some(0));
    let text = String::from_utf8_lossy(&stdout).into_owned();
    let pid: i32 = text
        .trim()
        .strip_prefix("holder ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{text:?}"));
    // SAFETY: kill takes a pid and a signal; the result is checked.
    assert_eq!(
        unsafe { libc::kill(pid, libc::SIGKILL) },
        0,
        "the sleep had gone"
    );
}

#[test]
fn a_child_that_crashes_is_told_from_one_that_does_not_answer() {
    let (out, _) = sh_within("echo partial; kill -SEGV $$", Duration::from_secs(30));
    let Outcome::Ended { status, stdout } = out else {
        panic!("{out:?}");
    };
    assert_eq!(status.signal(), Some(libc::SIGSEGV));
    assert_eq!(stdout, b"partial\n");
    assert_eq!(
        child::ended_words(status),
        "died of SIGSEGV (segmentation fault: an invalid memory access)"
    );
    let (out, took) = sh_within("echo started; exec sleep 60", Duration::from_millis(300));
    let Outcome::TimedOut { stdout } = out else {
        panic!("{out:?}");
    };
    assert_eq!(stdout, b"started\n");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (out, _) = sh_within("echo done; exit 3", Duration::from_secs(30));
    let Outcome::Ended { status, stdout } = out else {
        panic!("{out:?}");
    };
    assert_eq!(
        (status.code(), stdout.as_slice()),
        (Some(3), &b"done\n"[..])
    );
    assert_eq!(child::ended_words(status), "exited with status 3");
}

#[test]
fn the_waiting_line_names_the_probe_and_its_time() {
    let s = Duration::from_secs;
    assert_eq!(
        display::waiting_line("cudaDriverGetVersion", s(3), Some(s(20))),
        "llaisys-nvidia: waiting for `cudaDriverGetVersion` (3 s of 20 s)..."
    );
    assert_eq!(
        display::waiting_line(
            "exit of the probe process",
            s(1),
            Some(Duration::from_millis(2500))
        ),
        "llaisys-nvidia: waiting for the exit of the probe process (1 s of 2.5 s)..."
    );
    assert_eq!(
        display::waiting_line("smoke: malloc_host", s(7), None),
        "llaisys-nvidia: waiting for `smoke: malloc_host` (7 s, no time limit)..."
    );
}

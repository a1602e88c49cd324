//! Host-only tests of the doctor's watchdog and driver-version diagnosis with fake drivers: a
//! `libcuda.so.1` written in C (tests/fixtures/fake_libcuda.c, shared with the library's tests),
//! compiled here with `cc` into a temporary folder put first on LD_LIBRARY_PATH, whose cuInit
//! hangs, crashes, or fails (or first starts a helper process that keeps the probe process's
//! output open), or whose cuDriverGetVersion reports an old driver. cudart really loads each
//! and calls into it (the C file says how). Each test checks what the doctor concludes: which
//! probe, what to check, the exit status; and what it shows on stderr while it waits for a
//! hanging probe, on a pseudo-terminal and on a pipe. The `loaded` build is given the runtime
//! beside its headers (the one the static build links) through LLAISYS_NVIDIA_CUDART_LIBRARY,
//! and asks the fake driver for its version first, in a probe of its own.

use llaisys_nvidia_doctor::backend::build;
use llaisys_nvidia_doctor::exit;
use serde_json::Value;
use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::FromRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::bin;
const SOURCE: &str = include_str!("../../tests/fixtures/fake_libcuda.c");

/// Compiles the fake with `defines` into its own folder; returns the folder.
fn fake(name: &str, defines: &[&str]) -> PathBuf {
    let lib = support::c_library(
        "llaisys-doctor-fakes",
        name,
        SOURCE,
        "libcuda.so.1",
        defines,
    );
    lib.parent().expect("its folder").to_path_buf()
}

/// The doctor's command with a clean environment (PATH), the fake first on LD_LIBRARY_PATH,
/// `vars`.
fn command(fake: &Path, args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut c = Command::new(bin());
    c.args(args).env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        c.env("PATH", path);
    }
    c.env("LD_LIBRARY_PATH", fake);
    if build::LINK_MODE == "loaded" && !build::LIB_NAME.is_empty() {
        c.env(
            "LLAISYS_NVIDIA_CUDART_LIBRARY",
            Path::new(build::LIB_DIR).join(build::LIB_NAME),
        );
    }
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// The probes a run shows, `probes` for the static and dynamic builds: the `loaded` build's
/// choice of runtime comes right after the libcuda probe process's.
fn expected_probes(probes: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut v = probes.to_vec();
    if build::LINK_MODE == "loaded" {
        let at = v
            .iter()
            .position(|(p, _)| *p == "cudaRuntimeGetVersion")
            .unwrap_or(v.len());
        v.insert(at, ("load the CUDA runtime", "ok"));
    }
    v
}

/// The doctor run as `command` says, its stdout and stderr on pipes.
fn doctor(fake: &Path, args: &[&str], vars: &[(&str, &str)]) -> (Output, Duration) {
    let t = Instant::now();
    let o = support::output(&mut command(fake, args, vars));
    (o, t.elapsed())
}

/// A new pseudo-terminal: (master, slave), both closed on exec.
fn pty() -> (File, File) {
    // SAFETY: posix_openpt takes flags only; the result is checked below.
    let m = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
    // SAFETY: `m` is an open descriptor that nothing else owns; the File closes it.
    let master = unsafe { File::from_raw_fd(m) };
    // SAFETY: `m` is an open pseudo-terminal master (above).
    assert_eq!(unsafe { libc::grantpt(m) }, 0, "grantpt");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::unlockpt(m) }, 0, "unlockpt");
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `name` is writable for its whole length, which is passed.
    let r = unsafe { libc::ptsname_r(m, name.as_mut_ptr(), name.len()) };
    assert_eq!(r, 0, "ptsname_r");
    // SAFETY: ptsname_r wrote a NUL-terminated name into `name` (it returned 0).
    let path = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .expect("a UTF-8 terminal name")
        .to_string();
    let slave = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    (master, slave)
}

/// The doctor with its stderr on a pseudo-terminal (stdout on a pipe): its output, and every
/// byte it wrote on the terminal.
fn doctor_on_a_terminal(fake: &Path, args: &[&str]) -> (Output, Vec<u8>) {
    let (mut master, slave) = pty();
    let mut c = command(fake, args, &[]);
    c.stdout(Stdio::piped()).stderr(Stdio::from(slave));
    let child = c.spawn().expect("the llaisys-nvidia binary runs");
    // This process's copy of the slave closes with the command: when the doctor has gone, the
    // master reads the end (EIO).
    drop(c);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = master.read(&mut chunk) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        got
    });
    let o = child.wait_with_output().expect("the doctor finishes");
    (o, reader.join().expect("the terminal reader"))
}

/// Ends the helper process that the fake's `FAKE_HOLDER` started, named on the probe process's
/// stderr (`holder PID keeps stdout open`); its pid, which must have been alive.
fn end_holder(watchdog_stderr: &str) -> i32 {
    let pid: i32 = watchdog_stderr
        .split("holder ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no holder pid in {watchdog_stderr:?}"));
    // SAFETY: kill takes a pid and a signal; a pid that is gone gives an error, checked.
    let r = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(r, 0, "the holder {pid} had gone already");
    pid
}

/// The JSON report.
fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The first finding (errors come first).
fn first_finding(d: &Value) -> (&str, &str, &str) {
    let f = &d["diagnosis"]["findings"][0];
    (
        f["cause"].as_str().unwrap_or(""),
        f["summary"].as_str().unwrap_or(""),
        f["fix"].as_str().unwrap_or(""),
    )
}

fn lib_path(dir: &Path) -> String {
    dir.join("libcuda.so.1").display().to_string()
}

#[test]
fn cuinit_that_hangs_is_stopped_by_the_watchdog_and_named() {
    let dir = fake("hang", &["-DFAKE_HANG"]);
    // The limit from the variable, JSON.
    let (o, took) = doctor(&dir, &["--json"], &[("LLAISYS_NVIDIA_DOCTOR_TIMEOUT", "1")]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED), "{}", text(&o));
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let d = json(&o);
    let w = &d["watchdog"];
    assert_eq!(w["status"], "hung", "{w}");
    assert_eq!(w["probe"], "cudaDriverGetVersion", "{w}");
    assert_eq!(w["timeout_s"], 1.0, "{w}");
    assert!(
        w["stderr"]
            .as_str()
            .is_some_and(|s| s.contains("cuInit hangs now")),
        "{w}"
    );
    let probes: Vec<(&str, &str)> = w["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or(""),
                p["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        probes,
        expected_probes(&[
            ("dlopen libcuda.so.1", "ok"),
            ("cudaRuntimeGetVersion", "ok"),
            ("cudaDriverGetVersion", "hung")
        ])
    );
    // What finished is reported; what did not is null, never made up.
    assert_eq!(d["machine"]["libcuda"]["path"], lib_path(&dir).as_str());
    assert_eq!(
        d["machine"]["runtime_version"]["number"],
        build::cudart_version()
    );
    assert_eq!(
        d["machine"]["driver_version"],
        serde_json::json!({"number": null, "text": null, "error": null})
    );
    assert_eq!(
        d["device_count"],
        serde_json::json!({"count": 0, "error": null, "ms": null})
    );
    assert_eq!(d["smoke"]["status"], "skipped");
    assert!(d["smoke"]["reason"]
        .as_str()
        .is_some_and(|r| r.contains("`cudaDriverGetVersion` hung")));
    assert_eq!(d["diagnosis"]["status"], "probe_failed");
    assert_eq!(d["diagnosis"]["exit_code"], exit::PROBE_FAILED);
    let (cause, summary, fix) = first_finding(&d);
    assert_eq!(cause, "probe_hung");
    assert!(
        summary.starts_with("probe hung: `cudaDriverGetVersion`"),
        "{summary}"
    );
    assert!(summary.contains("calls the driver's cuInit"), "{summary}");
    assert!(summary.contains("within 1 s"), "{summary}");
    assert!(summary.contains(&lib_path(&dir)), "{summary}");
    assert!(summary.contains("cuInit hangs now"), "{summary}");
    for what in ["nvidia-smi", "dmesg", "LD_LIBRARY_PATH", "--timeout"] {
        assert!(fix.contains(what), "fix lacks {what}: {fix}");
    }
    // The flag, text: the same probe named, the verdict.
    let (o, _) = doctor(&dir, &["--timeout", "0.5"], &[]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED));
    let t = text(&o);
    assert!(
        t.contains("error: probe hung: `cudaDriverGetVersion`"),
        "{t}"
    );
    assert!(t.contains("within 0.5 s"), "{t}");
    assert!(
        t.contains("verdict: a probe hung or crashed (exit 5)"),
        "{t}"
    );
    assert!(
        t.contains("NVIDIA driver         unknown: its probe did not finish"),
        "{t}"
    );
}

#[test]
fn cuinit_that_crashes_is_reported_with_its_signal() {
    let dir = fake("crash", &["-DFAKE_CRASH"]);
    let (o, _) = doctor(&dir, &["--json"], &[]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED), "{}", text(&o));
    let d = json(&o);
    let w = &d["watchdog"];
    assert_eq!(w["status"], "crashed", "{w}");
    assert_eq!(w["signal"], "SIGSEGV", "{w}");
    assert_eq!(w["probe"], "cudaDriverGetVersion", "{w}");
    let (cause, summary, fix) = first_finding(&d);
    assert_eq!(cause, "probe_crashed");
    assert!(
        summary.contains("died of SIGSEGV (segmentation fault"),
        "{summary}"
    );
    assert!(summary.contains("in `cudaDriverGetVersion`"), "{summary}");
    assert!(summary.contains("cuInit crashes now"), "{summary}");
    for what in [
        "kernel module",
        "reinstall the driver",
        "LD_LIBRARY_PATH",
        "nvidia-smi",
    ] {
        assert!(fix.contains(what), "fix lacks {what}: {fix}");
    }
    let (o, _) = doctor(&dir, &[], &[]);
    assert!(text(&o).contains("error: probe crashed: the probe process died of SIGSEGV"));
}

#[test]
fn a_libcuda_whose_loading_hangs_is_named_and_cudart_not_tried() {
    let dir = fake("hang-on-load", &["-DFAKE_HANG_ON_LOAD"]);
    let (o, took) = doctor(&dir, &["--json", "--timeout", "1"], &[]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED));
    assert!(took < Duration::from_secs(15), "{took:?}");
    let d = json(&o);
    assert_eq!(d["watchdog"]["probe"], "dlopen libcuda.so.1");
    assert_eq!(d["watchdog"]["status"], "hung");
    assert_eq!(d["watchdog"]["probes"].as_array().map(Vec::len), Some(1));
    assert_eq!(d["machine"]["libcuda"]["loadable"], false);
    assert!(d["machine"]["libcuda"]["error"]
        .as_str()
        .is_some_and(|e| e.contains("`dlopen libcuda.so.1` hung")));
    let (cause, summary, _) = first_finding(&d);
    assert_eq!(cause, "probe_hung");
    assert!(summary.contains("runs its initialisers"), "{summary}");
    assert!(summary.contains("hangs while loading"), "{summary}");
}

#[test]
fn a_libcuda_that_crashes_in_its_teardown() {
    // The doctor's own dlopen keeps the library until its probe process exits: the crash comes
    // at exit, after every result, and the next probe process runs all the same. cudart instead
    // unloads libcuda.so.1 inside cudaDriverGetVersion when the driver's initialisation fails
    // (here: the fake's cuGetExportTable), so the teardown's crash comes in that probe.
    let dir = fake("crash-at-exit", &["-DFAKE_CRASH_AT_EXIT"]);
    let (o, _) = doctor(&dir, &["--json"], &[]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED));
    let d = json(&o);
    let w = &d["watchdog"];
    let probes: Vec<(&str, &str)> = w["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or(""),
                p["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    if build::LINK_MODE == "loaded" {
        // The library's own handle on libcuda.so.1 (it asked the driver's version) keeps it
        // loaded when cudart lets go: the teardown comes at exit, after every result.
        assert_eq!(
            probes,
            [
                ("dlopen libcuda.so.1", "ok"),
                ("exit of the probe process", "crashed"),
                ("load the CUDA runtime", "ok"),
                ("cudaRuntimeGetVersion", "ok"),
                ("cudaDriverGetVersion", "ok"),
                ("cudaGetDeviceCount", "ok"),
                ("exit of the probe process", "crashed")
            ],
            "{w}"
        );
        assert_eq!(w["probe"], "exit of the probe process", "{w}");
        return;
    }
    assert_eq!(
        probes,
        [
            ("dlopen libcuda.so.1", "ok"),
            ("exit of the probe process", "crashed"),
            ("cudaRuntimeGetVersion", "ok"),
            ("cudaDriverGetVersion", "crashed")
        ],
        "{w}"
    );
    assert_eq!(d["machine"]["libcuda"]["path"], lib_path(&dir).as_str());
    // The probe's failure is the one named, not the exit's.
    assert_eq!(w["probe"], "cudaDriverGetVersion", "{w}");
    assert_eq!(w["signal"], "SIGSEGV", "{w}");
    assert_eq!(
        w["stderr"]
            .as_str()
            .map(|s| s.matches("crashes at exit").count()),
        Some(2),
        "{w}"
    );
    let (cause, summary, _) = first_finding(&d);
    assert_eq!(cause, "probe_crashed");
    assert!(summary.contains("in `cudaDriverGetVersion`"), "{summary}");
}

/// cuInit failing with `code`: cudaGetDeviceCount says so, the driver version is read, and
/// the diagnosis names the failing call and what to check.
fn init_fails(code: i32, name: &str) {
    let dir = fake(
        &format!("init-{code}"),
        &[&format!("-DFAKE_INIT_RESULT={code}")],
    );
    let (o, _) = doctor(&dir, &["--json"], &[]);
    let d = json(&o);
    assert_eq!(d["watchdog"]["status"], "ok", "{}", d["watchdog"]);
    assert_eq!(d["machine"]["libcuda"]["path"], lib_path(&dir).as_str());
    assert_eq!(d["machine"]["driver_version"]["number"], 13000);
    assert_eq!(d["device_count"]["count"], 0);
    assert_eq!(d["device_count"]["error"]["code"], code);
    assert_eq!(d["device_count"]["error"]["name"], name);
    let (cause, summary, fix) = first_finding(&d);
    assert!(
        summary.contains(&format!("cudaGetDeviceCount returns {name} ({code})")),
        "{summary}"
    );
    assert!(summary.contains(&lib_path(&dir)), "{summary}");
    if Path::new("/dev/nvidiactl").exists() {
        // A machine with the driver's nodes: the driver's own error.
        assert_eq!(cause, "driver_unusable", "{summary}");
        assert_eq!(o.status.code(), Some(exit::NO_DRIVER));
        assert!(fix.contains("nvidia-smi"), "{fix}");
        if code == 2 {
            assert!(fix.contains("ran out of memory"), "{fix}");
        }
    } else {
        // Here (CI): no /dev/nvidiactl, which is why a real driver would fail.
        assert_eq!(cause, "device_nodes_inaccessible", "{summary}");
        assert_eq!(o.status.code(), Some(exit::NO_DEVICE));
        assert!(
            summary.contains("/dev/nvidiactl does not exist"),
            "{summary}"
        );
        assert!(fix.contains("modprobe nvidia"), "{fix}");
    }
}

#[test]
fn cuinit_returning_999_is_diagnosed() {
    init_fails(999, "cudaErrorUnknown");
}

#[test]
fn cuinit_returning_2_is_diagnosed() {
    init_fails(2, "cudaErrorMemoryAllocation");
}

/// The static and dynamic builds: one runtime, whose major decides. The `loaded` build chooses
/// the runtime for the driver (tests/loaded.rs: a driver for CUDA 12.2 gets the CUDA 12 runtime,
/// a driver too old for every runtime cudaErrorInsufficientDriver).
#[cfg(not(feature = "loaded"))]
#[test]
fn a_driver_older_than_the_build_names_the_driver_needed_and_the_cuda12_build() {
    let major = build::cudart_version() / 1000;
    // One CUDA major version older than this build's runtime.
    let (old, old_text) = if major >= 13 {
        (12020, "12.2")
    } else {
        (11080, "11.8")
    };
    let dir = fake(
        &format!("old-{old}"),
        &[&format!("-DFAKE_DRIVER_VERSION={old}")],
    );
    let (o, _) = doctor(&dir, &["--json"], &[]);
    assert_eq!(o.status.code(), Some(exit::NO_DRIVER), "{}", text(&o));
    let d = json(&o);
    assert_eq!(d["machine"]["driver_version"]["number"], old);
    assert_eq!(d["device_count"]["error"]["code"], 35);
    let (cause, summary, fix) = first_finding(&d);
    assert_eq!(cause, "driver_too_old");
    assert!(
        summary.contains(&format!("supports CUDA {old_text}")),
        "{summary}"
    );
    if major >= 13 {
        assert!(
            summary.contains("needs NVIDIA driver 580 or newer"),
            "{summary}"
        );
        assert!(
            fix.contains("Upgrade the NVIDIA driver to 580 or newer"),
            "{fix}"
        );
        assert!(
            fix.contains("the CUDA 12.9 build serves older drivers, from 525 on"),
            "{fix}"
        );
        assert!(fix.contains("bash scripts/bootstrap.sh --cuda12"), "{fix}");
        assert!(fix.contains("CUDA_HOME=$PWD/.deps/cuda12"), "{fix}");
    } else {
        assert!(
            summary.contains("needs NVIDIA driver 525 or newer"),
            "{summary}"
        );
        assert!(fix.contains("525 or newer"), "{fix}");
        assert!(!fix.contains("CUDA 12.9 build"), "{fix}");
    }
}

/// As above: the static and dynamic builds.
#[cfg(not(feature = "loaded"))]
#[test]
fn a_cuda12_driver_runs_the_cuda12_build_through_minor_version_compatibility() {
    let major = build::cudart_version() / 1000;
    let dir = fake("driver-12020", &["-DFAKE_DRIVER_VERSION=12020"]);
    let (o, _) = doctor(&dir, &["--json"], &[]);
    let d = json(&o);
    let causes: Vec<&str> = d["diagnosis"]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["cause"].as_str())
        .collect();
    if major >= 13 {
        // The CUDA 13 runtime refuses it (the test above).
        assert_eq!(d["device_count"]["error"]["code"], 35);
        assert_eq!(causes.first(), Some(&"driver_too_old"), "{causes:?}");
    } else {
        // CUDA 12.9 on a 12.2 driver: cudart goes on to cuInit (this fake's other entry points
        // then fail), and the doctor notes the minor-version compatibility.
        assert_ne!(
            d["device_count"]["error"]["code"], 35,
            "{}",
            d["device_count"]
        );
        assert!(causes.contains(&"driver_older_than_runtime"), "{causes:?}");
        let note = d["diagnosis"]["findings"]
            .as_array()
            .and_then(|fs| {
                fs.iter()
                    .find(|f| f["cause"] == "driver_older_than_runtime")
            })
            .expect("the note");
        assert_eq!(note["severity"], "note");
        assert!(note["fix"]
            .as_str()
            .is_some_and(|f| f.contains("575 or newer")));
    }
}

#[test]
fn a_hanging_probe_is_named_on_a_terminal_while_the_doctor_waits() {
    let dir = fake("hang-tty", &["-DFAKE_HANG"]);
    let (o, tty) = doctor_on_a_terminal(&dir, &["--timeout", "2"]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED), "{}", text(&o));
    let tty = String::from_utf8_lossy(&tty).into_owned();
    // Rewritten in place once a second, from the first second on, then cleared.
    assert!(
        tty.contains("\r\x1b[2Kllaisys-nvidia: waiting for `cudaDriverGetVersion` (1 s of 2 s)..."),
        "{tty:?}"
    );
    assert!(tty.ends_with("\r\x1b[2K"), "{tty:?}");
    assert!(!tty.contains('\n'), "{tty:?}");
    // The report itself is the same as on a pipe.
    let t = text(&o);
    assert!(
        t.contains("error: probe hung: `cudaDriverGetVersion`"),
        "{t}"
    );
    assert!(!t.contains("waiting for"), "{t}");
}

#[test]
fn nothing_is_said_while_waiting_with_json_on_a_terminal() {
    let dir = fake("hang-tty-json", &["-DFAKE_HANG"]);
    let (o, tty) = doctor_on_a_terminal(&dir, &["--json", "--timeout", "2"]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED), "{}", text(&o));
    assert_eq!(json(&o)["watchdog"]["status"], "hung");
    assert_eq!(String::from_utf8_lossy(&tty), "");
}

#[test]
fn nothing_is_said_while_waiting_on_a_pipe() {
    let dir = fake("hang-pipe", &["-DFAKE_HANG"]);
    let (o, took) = doctor(&dir, &["--timeout", "2"], &[]);
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED), "{}", text(&o));
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
}

/// The helper keeps the probe process's stdout open for 30 s after the probe process has
/// gone: the doctor must still finish at once, and name a crash a crash.
#[test]
fn a_probe_process_that_crashes_while_its_helper_keeps_stdout_open_is_reported_as_crashed() {
    let dir = fake("holder-crash", &["-DFAKE_HOLDER=30", "-DFAKE_CRASH"]);
    let (o, took) = doctor(&dir, &["--json", "--timeout", "20"], &[]);
    let d = json(&o);
    let w = &d["watchdog"];
    end_holder(w["stderr"].as_str().unwrap_or(""));
    assert_eq!(o.status.code(), Some(exit::PROBE_FAILED), "{w}");
    assert_eq!(w["status"], "crashed", "{w}");
    assert_eq!(w["signal"], "SIGSEGV", "{w}");
    assert_eq!(w["probe"], "cudaDriverGetVersion", "{w}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (cause, summary, _) = first_finding(&d);
    assert_eq!(cause, "probe_crashed", "{summary}");
    assert!(summary.contains("died of SIGSEGV"), "{summary}");
}

#[test]
fn a_probe_process_whose_helper_keeps_stdout_open_does_not_hold_the_doctor() {
    let dir = fake("holder-ok", &["-DFAKE_HOLDER=30"]);
    // No time limit: only the exit of the probe process ends the wait.
    let (o, took) = doctor(&dir, &["--json", "--timeout", "0"], &[]);
    let d = json(&o);
    let w = &d["watchdog"];
    end_holder(w["stderr"].as_str().unwrap_or(""));
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_eq!(w["status"], "ok", "{w}");
    let names: Vec<&str> = w["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"cudaGetDeviceCount"), "{names:?}");
    assert!(!names.contains(&"exit of the probe process"), "{names:?}");
}

//! Host-only test of the memory snapshot (docs/memory-snapshot.md), dynamic build only: the
//! child runs over tests/fixtures/fake_cudart.c built with -DFAKE_ASYNC as libcudart.so.13,
//! with call sites kept (`LLAISYS_NVIDIA_MEMORY_HISTORY=1`) and `LLAISYS_NVIDIA_OOM_SNAPSHOT`
//! naming a file. It holds a pool block on the legacy stream, one on a stream of its own, and a
//! freed large block (cached), writes a snapshot, and has Python's `json` read it: every block with
//! its state, origin, stream, number and call site. Bad paths are refused; an allocation out of
//! memory writes the snapshot its message names.
#![cfg(feature = "dynamic")]

use llaisys_nvidia::ffi;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::null_mut;

mod support;

use support::{fake_function as fake, last_error_message};

#[track_caller]
fn ok(status: libc::c_int) {
    assert_eq!(status, 0, "{}", last_error_message());
}

/// The lines Python prints for the snapshot at `path`: the document's head, then per device its
/// figures and one line per block (state origin size stream seq, and whether a site is kept).
fn read(path: &Path) -> Vec<String> {
    let script = r#"
import json, sys
d = json.load(open(sys.argv[1]))
print(d["format"], d["version"], d["pid"], d["history"])
for dev in d["devices"]:
    print("device", dev["device"], dev["total_bytes"], dev["limit_bytes"], dev["release_threshold_bytes"])
    for b in dev["blocks"]:
        site = b["site"]
        print(b["state"], b["origin"], b["size"], b["stream"], b["seq"],
              "site" if site and "child_snapshot" in site else site)
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "not a snapshot document: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llaisys-snapshot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

#[test]
#[ignore = "entry point of a child process: run by a_snapshot_lists_every_block_with_its_state"]
fn child_snapshot() {
    support::child::require_child("child_snapshot");
    let mut s = null_mut();
    let (mut a, mut b, mut c) = (null_mut(), null_mut(), null_mut());
    // SAFETY: the out pointers are writable; the stream and blocks are ours.
    unsafe {
        ok(ffi::llaisysNvidiaStreamCreate(&mut s, 0, 0));
        ok(ffi::llaisysNvidiaMallocDevice(&mut a, 1 << 20));
        ok(ffi::llaisysNvidiaMallocDevice(&mut b, 32 << 20));
        ok(ffi::llaisysNvidiaMallocAsync(&mut c, 4096, s));
    }
    ok(ffi::llaisysNvidiaFreeDevice(b));
    let path = temp("snapshot.json");
    let name = std::ffi::CString::new(path.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: a NUL-terminated path.
    ok(unsafe { ffi::llaisysNvidiaMemorySnapshot(name.as_ptr()) });
    let lines = read(&path);
    let stream = format!("{:#x}", s as usize);
    let mut want = vec![
        format!(
            "llaisys-nvidia memory snapshot 1 {} True",
            std::process::id()
        ),
        format!("device 0 {} 0 None", 80u64 << 30),
    ];
    // By address: the fake's blocks come from malloc, in no fixed order.
    let mut blocks = vec![
        (a as usize, "in_use pool 1048576 0x0 1 site".to_string()),
        (
            b as usize,
            "cached cudaMalloc 33554432 None None None".to_string(),
        ),
        (c as usize, format!("in_use pool 4096 {stream} 3 site")),
    ];
    blocks.sort();
    want.extend(blocks.into_iter().map(|(_, l)| l));
    assert_eq!(lines, want);
    // No path, or one that cannot be written: refused, naming it.
    // SAFETY: NULL, then a NUL-terminated path.
    unsafe {
        assert_eq!(ffi::llaisysNvidiaMemorySnapshot(std::ptr::null()), 3);
        assert!(last_error_message().contains("path=NULL"));
        assert_eq!(
            ffi::llaisysNvidiaMemorySnapshot(c"/nonexistent/folder/x.json".as_ptr()),
            3
        );
    }
    assert!(
        last_error_message().contains("path=/nonexistent/folder/x.json"),
        "{}",
        last_error_message()
    );
    // Out of memory writes the snapshot `LLAISYS_NVIDIA_OOM_SNAPSHOT` names, and says so.
    // SAFETY: the fake is on the loader path (the parent's doing); the function has this C type.
    let fail_mallocs = unsafe { fake::<extern "C" fn(libc::c_long)>(c"fake_fail_next_mallocs") };
    fail_mallocs(2);
    let oom = PathBuf::from(std::env::var("LLAISYS_NVIDIA_OOM_SNAPSHOT").expect("set"));
    let mut p = null_mut();
    // SAFETY: `p` is writable.
    assert_eq!(
        unsafe { ffi::llaisysNvidiaMallocDevice(&mut p, 64 << 20) },
        1
    );
    let msg = last_error_message();
    assert!(
        msg.contains(&format!("a memory snapshot is in {}", oom.display())),
        "{msg}"
    );
    let lines = read(&oom);
    assert!(
        lines.iter().any(|l| l == "in_use pool 1048576 0x0 1 site"),
        "{lines:?}"
    );
    ok(ffi::llaisysNvidiaFreeDevice(a));
    ok(ffi::llaisysNvidiaFreeDevice(c));
    ok(ffi::llaisysNvidiaStreamDestroy(s));
    println!("snapshot child: ok");
}

#[test]
fn a_snapshot_lists_every_block_with_its_state() {
    let oom = temp("oom.json");
    let out = support::child::TestChild::new("child_snapshot")
        .loader_path(support::fake_cudart())
        .envs([
            ("LLAISYS_NVIDIA_MEMORY_HISTORY", "1"),
            ("LLAISYS_NVIDIA_OOM_SNAPSHOT", oom.to_str().expect("utf-8")),
            (
                "LLAISYS_NVIDIA_NVML_LIBRARY",
                "/nonexistent/libnvidia-ml.so.1",
            ),
        ])
        .limit(std::time::Duration::from_secs(120))
        .run();
    assert!(
        out.ran_one_test() && out.text().contains("snapshot child: ok"),
        "{}",
        out.report()
    );
}

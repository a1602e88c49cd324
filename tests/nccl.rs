//! Host-only tests of the communicator: NCCL absent, present (the PyPI wheel's libnccl.so.2
//! from .deps/nccl, which the bootstrap installs), too old (a stand-in library with only a few
//! functions), not NCCL at all, or not NCCL 2; every function's status and message, NULL and
//! bad arguments, unique ids without a GPU, no link-time dependency on NCCL, the header against
//! the one list of collectives, and the example program built with -Werror and run. The child
//! processes and the C programs run without a driver on any machine: their loader finds the
//! no-driver stand-in libcuda.so.1 (`support::no_driver`).
//!
//! NCCL is loaded once per process, so each library situation runs in a child process of this
//! test binary: the `child_*` tests are `#[ignore]`d entry points that the parent tests start
//! with the environment of the situation (and they fail if started without it).

mod c_header;
mod support;

use llaisys_nvidia::ffi::*;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::last_error_message;

fn wheel_lib() -> PathBuf {
    support::source_dir().join(".deps/nccl/nvidia/nccl/lib/libnccl.so.2")
}

/// Runs the ignored test `name` in a child without a driver (`support::no_driver::child`: the
/// stand-in is its whole loader path, which holds no NCCL), with no NCCL variables of this
/// process and with `env`; asserts that exactly that one test ran and passed.
fn in_child(name: &str, env: &[(&str, &str)]) -> String {
    support::no_driver::child(name)
        .env_remove("LLAISYS_NVIDIA_NCCL_LIBRARY")
        .env_remove("LLAISYS_NVIDIA_PYTHON")
        .env_remove("NCCL_DEBUG")
        .envs(env.iter().copied())
        .run_passing()
}

/// Asserts `status == want` and that the message holds each of `words`.
#[track_caller]
fn expect(status: c_int, want: c_int, words: &[&str]) -> String {
    let msg = last_error_message();
    assert_eq!(
        status, want,
        "status {status}, wanted {want}; message: {msg}"
    );
    if want != 0 {
        for w in words {
            assert!(msg.contains(w), "message lacks {w:?}: {msg}");
        }
    }
    msg
}

fn nccl_mapped() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .contains("libnccl")
}

fn some_id() -> CommId {
    let mut id = CommId { internal: [0; 128] };
    id.internal[0] = 1;
    id
}

const BOGUS: *mut c_void = 0x1234 as *mut c_void;
const F32: c_int = 13;
const SUM: c_int = 0;

fn buf() -> Vec<f32> {
    vec![0.0; 16]
}

/// Every collective with `comm` (and valid other arguments) answers `want`, naming `word`.
fn every_collective(comm: *mut c_void, want: c_int, word: &str) {
    let mut b = buf();
    let p = b.as_mut_ptr().cast::<c_void>();
    let n = 4;
    let null = std::ptr::null_mut();
    // SAFETY: nothing reaches NCCL (refused before); the buffers are live host memory.
    unsafe {
        expect(
            llaisysNvidiaAllReduce(p, p, n, F32, SUM, comm, null),
            want,
            &[word],
        );
        expect(
            llaisysNvidiaAllGather(p, p, n, F32, comm, null),
            want,
            &[word],
        );
        expect(
            llaisysNvidiaReduceScatter(p, p, n, F32, SUM, comm, null),
            want,
            &[word],
        );
        expect(
            llaisysNvidiaBroadcast(p, p, n, F32, 0, comm, null),
            want,
            &[word],
        );
        expect(
            llaisysNvidiaReduce(p, p, n, F32, SUM, 0, comm, null),
            want,
            &[word],
        );
        expect(llaisysNvidiaSend(p, n, F32, 0, comm, null), want, &[word]);
        expect(llaisysNvidiaRecv(p, n, F32, 0, comm, null), want, &[word]);
        let mut v = 0;
        expect(llaisysNvidiaCommRank(comm, &mut v), want, &[word]);
        expect(llaisysNvidiaCommSize(comm, &mut v), want, &[word]);
        expect(llaisysNvidiaCommDevice(comm, &mut v), want, &[word]);
        expect(llaisysNvidiaCommGetAsyncError(comm, &mut v), want, &[word]);
    }
    expect(llaisysNvidiaCommSynchronize(comm, null, -1), want, &[word]);
}

/// The checks that need no communicator, with a bogus one (they come first).
fn argument_checks() {
    let mut b = buf();
    let p = b.as_mut_ptr().cast::<c_void>();
    let null = std::ptr::null_mut();
    // SAFETY: nothing reaches NCCL (refused before).
    unsafe {
        for dt in [0, 20, -1] {
            expect(
                llaisysNvidiaAllReduce(p, p, 4, dt, SUM, BOGUS, null),
                3,
                &[&format!("dtype={dt}"), "llaisysDataType_t"],
            );
            expect(
                llaisysNvidiaBroadcast(p, p, 4, dt, 0, BOGUS, null),
                3,
                &[&format!("dtype={dt}")],
            );
            expect(
                llaisysNvidiaSend(p, 4, dt, 0, BOGUS, null),
                3,
                &[&format!("dtype={dt}")],
            );
        }
        for op in [5, -1, 99] {
            expect(
                llaisysNvidiaAllReduce(p, p, 4, F32, op, BOGUS, null),
                3,
                &[&format!("op={op}"), "0 SUM"],
            );
            expect(
                llaisysNvidiaReduce(p, p, 4, F32, op, 0, BOGUS, null),
                3,
                &[&format!("op={op}")],
            );
            expect(
                llaisysNvidiaReduceScatter(p, p, 4, F32, op, BOGUS, null),
                3,
                &[&format!("op={op}")],
            );
        }
        // Types NCCL cannot reduce, each with its reason.
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 2, SUM, BOGUS, null),
            3,
            &["BOOL", "MAX (or)"],
        );
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 4, SUM, BOGUS, null),
            3,
            &["I16", "16-bit integer"],
        );
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 8, 2, BOGUS, null),
            3,
            &["U16", "16-bit integer"],
        );
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 11, SUM, BOGUS, null),
            3,
            &["F8", "e4m3"],
        );
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 15, SUM, BOGUS, null),
            3,
            &["C16"],
        );
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 17, 1, BOGUS, null),
            3,
            &["C64", "PROD", "SUM and AVG"],
        );
        // ... which still move: the error is then about the communicator.
        for dt in [2, 4, 8, 11, 15, 16, 17, 18] {
            expect(
                llaisysNvidiaAllGather(p, p, 4, dt, BOGUS, null),
                3,
                &["not a communicator"],
            );
        }
        // Bool with MAX and complex with SUM reduce: the error is about the communicator.
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 2, 2, BOGUS, null),
            3,
            &["not a communicator"],
        );
        expect(
            llaisysNvidiaAllReduce(p, p, 4, 18, 4, BOGUS, null),
            3,
            &["not a communicator"],
        );
        // Counts whose bytes overflow.
        expect(
            llaisysNvidiaAllReduce(p, p, usize::MAX / 2, F32, SUM, BOGUS, null),
            3,
            &["count=", "more bytes"],
        );
        expect(
            llaisysNvidiaSend(p, usize::MAX, 1, 0, BOGUS, null),
            3,
            &["more bytes"],
        );
        expect(
            llaisysNvidiaRecv(p, usize::MAX / 8, 18, 0, BOGUS, null),
            3,
            &["C128", "16 bytes each"],
        );
        // NULL buffers with something to move.
        expect(
            llaisysNvidiaAllReduce(null, p, 4, F32, SUM, BOGUS, null),
            3,
            &["sendbuff=NULL", "16 bytes"],
        );
        expect(
            llaisysNvidiaAllReduce(p, null, 4, F32, SUM, BOGUS, null),
            3,
            &["recvbuff=NULL"],
        );
        expect(
            llaisysNvidiaSend(null, 4, F32, 0, BOGUS, null),
            3,
            &["sendbuff=NULL"],
        );
        expect(
            llaisysNvidiaRecv(null, 4, F32, 0, BOGUS, null),
            3,
            &["recvbuff=NULL"],
        );
        // Count 0 with NULL is fine as far as buffers go: the communicator is then the problem.
        expect(
            llaisysNvidiaAllReduce(null, null, 0, F32, SUM, BOGUS, null),
            3,
            &["not a communicator"],
        );
    }
    // Handles: NULL and foreign ones.
    every_collective(std::ptr::null_mut(), 3, "comm=NULL");
    every_collective(
        BOGUS,
        3,
        "comm=0x1234 is not a communicator of llaisys-nvidia",
    );
    expect(llaisysNvidiaCommDestroy(std::ptr::null_mut()), 0, &[]);
    expect(llaisysNvidiaCommAbort(std::ptr::null_mut()), 0, &[]);
    expect(llaisysNvidiaCommDestroy(BOGUS), 3, &["not a communicator"]);
    expect(llaisysNvidiaCommAbort(BOGUS), 3, &["not a communicator"]);
    expect(
        llaisysNvidiaCommSynchronize(BOGUS, null, -2),
        3,
        &["timeout_ms=-2"],
    );
    // Timeouts.
    expect(llaisysNvidiaCommSetTimeout(-1), 3, &["timeout_ms=-1"]);
    expect(llaisysNvidiaCommSetTimeout(60_000), 0, &[]);
    // Init arguments.
    let id = some_id();
    let zero = CommId { internal: [0; 128] };
    let mut c: *mut c_void = BOGUS;
    // SAFETY: valid pointers or NULL (refused).
    unsafe {
        expect(
            llaisysNvidiaCommInitRank(std::ptr::null_mut(), 1, &id, 0),
            3,
            &["comm=NULL"],
        );
        expect(
            llaisysNvidiaCommInitRank(&mut c, 1, std::ptr::null(), 0),
            3,
            &["id=NULL"],
        );
        assert!(c.is_null(), "the out-pointer is set to NULL first");
        expect(
            llaisysNvidiaCommInitRank(&mut c, 0, &id, 0),
            3,
            &["nranks=0"],
        );
        expect(
            llaisysNvidiaCommInitRank(&mut c, -3, &id, 0),
            3,
            &["nranks=-3"],
        );
        expect(
            llaisysNvidiaCommInitRank(&mut c, 2, &id, 2),
            3,
            &["rank=2", "0..1"],
        );
        expect(
            llaisysNvidiaCommInitRank(&mut c, 2, &id, -1),
            3,
            &["rank=-1"],
        );
        expect(
            llaisysNvidiaCommInitRank(&mut c, 1, &zero, 0),
            3,
            &["all zeros"],
        );
        let mut cs = [BOGUS; 2];
        expect(
            llaisysNvidiaCommInitAll(std::ptr::null_mut(), 1, std::ptr::null()),
            3,
            &["comms=NULL"],
        );
        expect(
            llaisysNvidiaCommInitAll(cs.as_mut_ptr(), 0, std::ptr::null()),
            3,
            &["ndev=0"],
        );
        expect(
            llaisysNvidiaCommInitAll(cs.as_mut_ptr(), 2, [0, 0].as_ptr()),
            3,
            &["devices[1]=0", "twice"],
        );
        expect(
            llaisysNvidiaCommInitAll(cs.as_mut_ptr(), 2, [0, -4].as_ptr()),
            3,
            &["devices[1]=-4"],
        );
        assert_eq!(
            cs,
            [std::ptr::null_mut(); 2],
            "the out-array is set to NULL first"
        );
        expect(
            llaisysNvidiaCommGetUniqueId(std::ptr::null_mut()),
            3,
            &["id=NULL"],
        );
        expect(
            llaisysNvidiaNcclGetVersion(std::ptr::null_mut()),
            3,
            &["version=NULL"],
        );
    }
    expect(
        llaisysNvidiaGroupEnd(),
        3,
        &["without llaisysNvidiaGroupStart"],
    );
}

#[test]
#[ignore = "entry point of a child process: run by nccl_absent"]
fn child_absent() {
    support::no_driver::enter("child_absent");
    let dir = std::env::var("LLAISYS_NVIDIA_NCCL_LIBRARY").unwrap();
    argument_checks();
    assert!(!nccl_mapped());
    let fix = "pip install nvidia-nccl-cu13";
    let mut v = -1;
    // SAFETY: valid out-pointers.
    unsafe {
        let msg = expect(
            llaisysNvidiaNcclGetVersion(&mut v),
            6,
            &[
                &dir,
                "nothing else is searched",
                fix,
                "NCCL is not available",
            ],
        );
        assert!(msg.contains("llaisysNvidiaNcclGetVersion"), "{msg}");
        assert_eq!(v, 0, "the out-value is set first");
        assert_eq!(llaisysNvidiaLastNcclError(), 0);
        assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaLastErrorDevice(), -1);
        assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaLastErrorStatus(), 6);
        let mut len = 0usize;
        expect(
            llaisysNvidiaNcclLibraryPath(std::ptr::null_mut(), 0, &mut len),
            6,
            &[fix],
        );
        let mut id = some_id();
        expect(llaisysNvidiaCommGetUniqueId(&mut id), 6, &[fix]);
        let mut c: *mut c_void = BOGUS;
        expect(
            llaisysNvidiaCommInitRank(&mut c, 1, &some_id(), 0),
            6,
            &[fix],
        );
        assert!(c.is_null());
        let mut cs = [BOGUS; 1];
        expect(
            llaisysNvidiaCommInitAll(cs.as_mut_ptr(), 1, std::ptr::null()),
            6,
            &[fix],
        );
    }
    expect(llaisysNvidiaGroupStart(), 6, &[fix]);
    expect(
        llaisysNvidiaGroupEnd(),
        3,
        &["without llaisysNvidiaGroupStart"],
    );
    // Everything that needs no NCCL still answers the same.
    argument_checks();
    assert!(!nccl_mapped());
}

#[test]
fn nccl_absent() {
    let empty = support::scratch("nccl-empty");
    in_child(
        "child_absent",
        &[("LLAISYS_NVIDIA_NCCL_LIBRARY", empty.to_str().unwrap())],
    );
}

/// Whether the loader's cache (`ldconfig -p`) lists libnccl.so.2; false without ldconfig.
fn system_has_nccl() -> bool {
    support::on_path("ldconfig")
        && support::child::run(
            Command::new("ldconfig").arg("-p"),
            support::child::DEFAULT_LIMIT,
        )
        .stdout
        .contains("libnccl.so.2")
}

#[test]
#[ignore = "entry point of a child process: run by nccl_search_order"]
fn child_search() {
    support::no_driver::enter("child_search");
    let expect_via = std::env::var("LLAISYS_NCCL_TEST_EXPECT").unwrap();
    let mut v = 0;
    // SAFETY: valid out-pointer.
    let s = unsafe { llaisysNvidiaNcclGetVersion(&mut v) };
    let mut path = [0 as c_char; 4096];
    let mut len = 0usize;
    match expect_via.as_str() {
        "nowhere" => {
            expect(
                s,
                6,
                &[
                    "LLAISYS_NVIDIA_NCCL_LIBRARY: not set",
                    "the dynamic loader's path",
                    "libnccl.so.2: cannot open shared object file",
                    "/nonexistent/python3 could not be run",
                    "pip install nvidia-nccl-cu13",
                ],
            );
        }
        "crashed" => {
            expect(
                s,
                6,
                &[
                    "the PyPI wheels holding libnccl.so.2: ",
                    "crashed: killed by signal 6 (SIGABRT)",
                ],
            );
        }
        "wheel" => {
            expect(s, 0, &[]);
            // SAFETY: a buffer of 4096 bytes.
            unsafe {
                expect(
                    llaisysNvidiaNcclLibraryPath(path.as_mut_ptr(), path.len(), &mut len),
                    0,
                    &[],
                );
            }
            // SAFETY: NUL-terminated by the call.
            let got = unsafe { CStr::from_ptr(path.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            assert_eq!(got.len(), len);
            assert_eq!(
                std::fs::canonicalize(&got).unwrap(),
                std::fs::canonicalize(wheel_lib()).unwrap(),
                "found through the fake Python's site folder"
            );
        }
        "system" => {
            expect(s, 0, &[]);
        }
        other => panic!("LLAISYS_NCCL_TEST_EXPECT={other}"),
    }
}

/// Without the variable: the loader's path, then the Python wheels. A stand-in `python3`
/// (a script printing one site folder) points at .deps/nccl; `/nonexistent/python3` at nothing;
/// one that kills itself is reported with its signal. (With NCCL on the loader's path the
/// Python is never asked: then each finds the system's.)
#[test]
fn nccl_search_order() {
    let system = system_has_nccl();
    in_child(
        "child_search",
        &[
            ("LLAISYS_NVIDIA_PYTHON", "/nonexistent/python3"),
            (
                "LLAISYS_NCCL_TEST_EXPECT",
                if system { "system" } else { "nowhere" },
            ),
        ],
    );
    // A Python that crashes is reported as crashed, with its signal.
    let crashing = fake_python("python3-crashes", "kill -ABRT $$");
    let site = support::source_dir().join(".deps/nccl");
    let python = fake_python("python3", &format!("echo {}", site.display()));
    for (python, found) in [(crashing, "crashed"), (python, "wheel")] {
        in_child(
            "child_search",
            &[
                ("LLAISYS_NVIDIA_PYTHON", python.to_str().unwrap()),
                (
                    "LLAISYS_NCCL_TEST_EXPECT",
                    if system { "system" } else { found },
                ),
            ],
        );
    }
}

/// A stand-in `python3`: a shell script running `body`.
fn fake_python(name: &str, body: &str) -> PathBuf {
    let path = support::scratch("nccl-fake-python").join(name);
    support::write_script(&path, &format!("#!/bin/sh\n{body}\n"));
    path
}

#[test]
#[ignore = "entry point of a child process: run by nccl_present"]
fn child_present() {
    support::no_driver::enter("child_present");
    // Nothing loads NCCL before a call needs it.
    assert!(!nccl_mapped(), "NCCL mapped before any communicator call");
    argument_checks();
    assert!(!nccl_mapped(), "checks that need no NCCL loaded it");
    let mut v = 0;
    // SAFETY: valid pointers throughout.
    unsafe {
        expect(llaisysNvidiaNcclGetVersion(&mut v), 0, &[]);
        assert!(nccl_mapped());
        assert_eq!(
            v.to_string(),
            env!("LLAISYS_NVIDIA_BUILD_NCCL_VERSION"),
            "the wheel's library is the header's release"
        );
        let mut path = [0 as c_char; 8];
        let mut len = 0usize;
        expect(
            llaisysNvidiaNcclLibraryPath(path.as_mut_ptr(), path.len(), &mut len),
            0,
            &[],
        );
        assert_eq!(
            CStr::from_ptr(path.as_ptr()).to_bytes().len(),
            7,
            "truncated to the buffer"
        );
        let mut full = vec![0 as c_char; len + 1];
        expect(
            llaisysNvidiaNcclLibraryPath(full.as_mut_ptr(), full.len(), std::ptr::null_mut()),
            0,
            &[],
        );
        let got = CStr::from_ptr(full.as_ptr()).to_string_lossy().into_owned();
        assert_eq!(
            std::fs::canonicalize(got).unwrap(),
            std::fs::canonicalize(wheel_lib()).unwrap()
        );

        // Unique ids without a GPU: NCCL picks a network interface and listens on it; each id
        // is new (a random magic and the socket's address).
        let mut a = CommId { internal: [0; 128] };
        let mut b = CommId { internal: [0; 128] };
        expect(llaisysNvidiaCommGetUniqueId(&mut a), 0, &[]);
        expect(llaisysNvidiaCommGetUniqueId(&mut b), 0, &[]);
        assert!(a.internal.iter().any(|&x| x != 0), "an id of zeros");
        assert_ne!(a.internal, b.internal, "two ids are the same");
        // What NCCL (2.32, the wheel's) puts there: its bootstrap handle, a random 8-byte magic
        // and then the socket address of the root it listens on: an IPv4 or IPv6 family and a
        // port that is not 0, different for each id (a new listening socket each time).
        let bytes = |id: &CommId, r: std::ops::Range<usize>| -> Vec<u8> {
            id.internal[r].iter().map(|&x| x.to_ne_bytes()[0]).collect()
        };
        for id in [&a, &b] {
            let b = bytes(id, 8..10);
            let family = u16::from_ne_bytes([b[0], b[1]]);
            assert!(
                family == libc::AF_INET as u16 || family == libc::AF_INET6 as u16,
                "socket family {family} in {:02x?}",
                bytes(id, 0..32)
            );
            assert_ne!(bytes(id, 10..12), [0, 0], "port 0");
        }
        assert_ne!(bytes(&a, 0..8), bytes(&b, 0..8), "the same magic twice");
        // Through the table too.
        let table = &*llaisysNvidiaGetCommAPI();
        let mut c = CommId { internal: [0; 128] };
        expect((table.get_unique_id)(&mut c), 0, &[]);
        assert_ne!(c.internal, a.internal);

        // Joining needs CUDA: NCCL itself fails (no driver) and says so: status 5, the NCCL
        // code ncclUnhandledCudaError (1), NCCL's own last error text.
        let mut comm: *mut c_void = BOGUS;
        let msg = expect(
            llaisysNvidiaCommInitRank(&mut comm, 1, &a, 0),
            5,
            &[
                "llaisysNvidiaCommInitRank",
                "ncclCommInitRankConfig failed: ncclUnhandledCudaError (1)",
                "unhandled cuda error",
                "NCCL: ",
                "CUDA driver version is insufficient",
                "nranks=1 rank=0",
            ],
        );
        assert!(comm.is_null(), "{msg}");
        assert_eq!(llaisysNvidiaLastNcclError(), 1);
        assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaLastErrorStatus(), 5);
        // All at once needs the device count first: a CUDA error (35, no driver).
        let mut cs = [BOGUS; 1];
        expect(
            llaisysNvidiaCommInitAll(cs.as_mut_ptr(), 1, std::ptr::null()),
            1,
            &["cudaGetDeviceCount", "cudaErrorInsufficientDriver"],
        );
        assert_eq!(llaisys_nvidia::ffi::llaisysNvidiaLastCudaError(), 35);
        assert_eq!(
            llaisysNvidiaLastNcclError(),
            0,
            "a CUDA error carries no NCCL code"
        );
        assert!(cs[0].is_null());
    }
    // Groups work without a GPU (empty groups launch nothing), nest, and are counted.
    expect(llaisysNvidiaGroupStart(), 0, &[]);
    expect(llaisysNvidiaGroupStart(), 0, &[]);
    // SAFETY: valid pointers.
    unsafe {
        let mut c: *mut c_void = BOGUS;
        expect(
            llaisysNvidiaCommInitRank(&mut c, 1, &some_id(), 0),
            3,
            &["inside an open group"],
        );
    }
    expect(llaisysNvidiaGroupEnd(), 0, &[]);
    expect(llaisysNvidiaGroupEnd(), 0, &[]);
    expect(
        llaisysNvidiaGroupEnd(),
        3,
        &["without llaisysNvidiaGroupStart"],
    );
    argument_checks();
    // Status names of the new statuses.
    for (s, name) in [
        (5, "LLAISYS_NVIDIA_ERROR_NCCL"),
        (6, "LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE"),
        (7, "LLAISYS_NVIDIA_ERROR_TIMEOUT"),
    ] {
        let p = llaisys_nvidia::ffi::llaisysNvidiaStatusName(s);
        // SAFETY: a static string.
        assert_eq!(unsafe { CStr::from_ptr(p) }.to_str().unwrap(), name);
    }
}

#[test]
fn nccl_present() {
    assert!(
        wheel_lib().exists(),
        "{} is missing: run bash scripts/bootstrap.sh",
        wheel_lib().display()
    );
    in_child(
        "child_present",
        &[("LLAISYS_NVIDIA_NCCL_LIBRARY", wheel_lib().to_str().unwrap())],
    );
}

/// The table holds the exported functions, in the header's order.
#[test]
fn comm_table_is_the_exported_functions() {
    let t = llaisysNvidiaGetCommAPI();
    assert!(!t.is_null());
    // SAFETY: a static table.
    let t = unsafe { &*t };
    // (field, the table's pointer, the exported function's address), in the header's order.
    macro_rules! fields {
        ($t:ident: $($field:ident => $function:ident),* $(,)?) => {
            [$((stringify!($field), $t.$field as usize, $function as *const () as usize)),*]
        };
    }
    let fields = fields!(t:
        get_unique_id => llaisysNvidiaCommGetUniqueId,
        init_rank => llaisysNvidiaCommInitRank,
        init_all => llaisysNvidiaCommInitAll,
        destroy => llaisysNvidiaCommDestroy,
        abort => llaisysNvidiaCommAbort,
        get_rank => llaisysNvidiaCommRank,
        get_size => llaisysNvidiaCommSize,
        allreduce => llaisysNvidiaAllReduce,
        allgather => llaisysNvidiaAllGather,
        reduce_scatter => llaisysNvidiaReduceScatter,
        broadcast => llaisysNvidiaBroadcast,
        send => llaisysNvidiaSend,
        recv => llaisysNvidiaRecv,
        group_start => llaisysNvidiaGroupStart,
        group_end => llaisysNvidiaGroupEnd,
        synchronize => llaisysNvidiaCommSynchronize,
    );
    for (field, in_table, exported) in fields {
        assert_eq!(in_table, exported, "field {field}");
    }
    assert_eq!(
        std::mem::size_of::<LlaisysNvidiaCommAPI>(),
        fields.len() * std::mem::size_of::<usize>(),
        "a field of the table is not checked"
    );
    assert_eq!(std::mem::size_of::<CommId>(), 128);
}

/// A stand-in shared library made from `source` (C).
fn fake_library(name: &str, source: &str) -> PathBuf {
    let dir = support::scratch("nccl-fakes");
    let src = dir.join(format!("{name}.c"));
    let lib = dir.join(format!("{name}.so"));
    std::fs::write(&src, source).unwrap();
    let mut cmd = Command::new("cc");
    cmd.args(["-shared", "-fPIC", "-o"]).arg(&lib).arg(&src);
    support::compile(cmd);
    lib
}

#[test]
#[ignore = "entry point of a child process: run by nccl_too_old_serves_what_it_has"]
fn child_old() {
    support::no_driver::enter("child_old");
    let mut v = 0;
    // SAFETY: valid pointers.
    unsafe {
        // The timeout variable is read when a communicator is made: a bad value is refused.
        let mut c: *mut c_void = BOGUS;
        expect(
            llaisysNvidiaCommInitRank(&mut c, 1, &some_id(), 0),
            3,
            &[
                "LLAISYS_NVIDIA_NCCL_TIMEOUT_MS=\"soon\"",
                "not a number of milliseconds",
            ],
        );
        expect(llaisysNvidiaCommSetTimeout(5000), 0, &[]);
        expect(llaisysNvidiaNcclGetVersion(&mut v), 0, &[]);
        assert_eq!(v, 21003, "what the stand-in answers (2.10.3)");
        let mut id = CommId { internal: [0; 128] };
        expect(llaisysNvidiaCommGetUniqueId(&mut id), 0, &[]);
        assert_eq!(id.internal[5], 7, "the stand-in's id");
        let mut c: *mut c_void = BOGUS;
        expect(
            llaisysNvidiaCommInitRank(&mut c, 1, &id, 0),
            6,
            &[
                "NCCL 2.10.3",
                "has no ncclCommInitRankConfig",
                "NCCL 2.14 and later",
                "pip install nvidia-nccl-cu13",
            ],
        );
        assert!(c.is_null());
    }
    expect(llaisysNvidiaGroupStart(), 6, &["has no ncclGroupStart"]);
}

#[test]
fn nccl_too_old_serves_what_it_has() {
    let lib = fake_library(
        "old_nccl",
        "int ncclGetVersion(int *v) { *v = 21003; return 0; }\n\
         const char *ncclGetErrorString(int r) { (void)r; return \"stand-in\"; }\n\
         int ncclGetUniqueId(char *id) { for (int i = 0; i < 128; i++) id[i] = (char)(i + 2); return 0; }\n",
    );
    in_child(
        "child_old",
        &[
            ("LLAISYS_NVIDIA_NCCL_LIBRARY", lib.to_str().unwrap()),
            ("LLAISYS_NVIDIA_NCCL_TIMEOUT_MS", "soon"),
        ],
    );
}

#[test]
#[ignore = "entry point of a child process: run by nccl_outside_the_built_major_is_refused"]
fn child_bad_version() {
    support::no_driver::enter("child_bad_version");
    let lib = std::env::var("LLAISYS_NVIDIA_NCCL_LIBRARY").unwrap();
    let reported = std::env::var("LLAISYS_NCCL_TEST_VERSION").unwrap();
    let mut v = 7;
    // SAFETY: valid pointer.
    let s = unsafe { llaisysNvidiaNcclGetVersion(&mut v) };
    expect(
        s,
        6,
        &[
            &lib,
            &format!("ncclGetVersion reports {reported},"),
            "not a version code of NCCL 2",
            "accepted: codes 2000-2899 and 20900-29999, NCCL 2.0.0 to 2.99.99",
            "nothing else is searched",
        ],
    );
    assert_eq!(v, 0, "the out-value of a refused library");
    // Every later call gets the same answer; the file was closed again.
    // SAFETY: valid pointer.
    let s = unsafe { llaisysNvidiaCommGetUniqueId(&mut some_id()) };
    expect(s, 6, &[&format!("reports {reported},")]);
    let name = Path::new(&lib)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(!maps.contains(&name), "{name} is still mapped");
}

/// A library whose ncclGetVersion reports a code that is not an NCCL 2 release (-1, INT_MAX,
/// NCCL 3, a 2.x code in the encoding 2.9 dropped, 0) is refused with status 6 naming the
/// file and the code; codes at both ends of NCCL 2 are accepted.
#[test]
fn nccl_outside_the_built_major_is_refused() {
    for (tag, code, child) in [
        ("minus_one", "-1", "child_bad_version"),
        ("int_max", "2147483647", "child_bad_version"),
        ("three", "30000", "child_bad_version"),
        ("old_encoding_of_2_9", "2900", "child_bad_version"),
        ("new_encoding_of_2_8", "20800", "child_bad_version"),
        ("zero", "0", "child_bad_version"),
        ("first", "2000", "child_good_version"),
        ("last", "29999", "child_good_version"),
    ] {
        let lib = fake_library(
            &format!("version_{tag}"),
            &format!("int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}\n"),
        );
        in_child(
            child,
            &[
                ("LLAISYS_NVIDIA_NCCL_LIBRARY", lib.to_str().unwrap()),
                ("LLAISYS_NCCL_TEST_VERSION", code),
            ],
        );
    }
}

#[test]
#[ignore = "entry point of a child process: run by nccl_outside_the_built_major_is_refused"]
fn child_good_version() {
    support::no_driver::enter("child_good_version");
    let reported: c_int = std::env::var("LLAISYS_NCCL_TEST_VERSION")
        .unwrap()
        .parse()
        .unwrap();
    let mut v = 7;
    // SAFETY: valid pointer.
    let s = unsafe { llaisysNvidiaNcclGetVersion(&mut v) };
    expect(s, 0, &[]);
    assert_eq!(v, reported);
}

#[test]
#[ignore = "entry point of a child process: run by nccl_not_nccl"]
fn child_not_nccl() {
    support::no_driver::enter("child_not_nccl");
    let lib = std::env::var("LLAISYS_NVIDIA_NCCL_LIBRARY").unwrap();
    let mut v = 0;
    // SAFETY: valid pointer.
    let s = unsafe { llaisysNvidiaNcclGetVersion(&mut v) };
    expect(s, 6, &[&lib, "has no ncclGetVersion: it is not NCCL"]);
    // A file that does not load at all.
    // SAFETY: valid pointer.
    let s = unsafe { llaisysNvidiaCommGetUniqueId(&mut some_id()) };
    expect(s, 6, &["not NCCL"]);
}

#[test]
fn nccl_not_nccl() {
    let lib = fake_library("not_nccl", "int something_else(void) { return 1; }\n");
    in_child(
        "child_not_nccl",
        &[("LLAISYS_NVIDIA_NCCL_LIBRARY", lib.to_str().unwrap())],
    );
}

#[test]
#[ignore = "entry point of a child process: run by nccl_unloadable_file"]
fn child_unloadable() {
    support::no_driver::enter("child_unloadable");
    let mut v = 0;
    // SAFETY: valid pointer.
    let s = unsafe { llaisysNvidiaNcclGetVersion(&mut v) };
    expect(s, 6, &["not-a-library", "nothing else is searched"]);
}

#[test]
fn nccl_unloadable_file() {
    let f = support::scratch("nccl-fakes").join("not-a-library.so.2");
    std::fs::write(&f, b"plain text").unwrap();
    in_child(
        "child_unloadable",
        &[("LLAISYS_NVIDIA_NCCL_LIBRARY", f.to_str().unwrap())],
    );
}

/// The library gains no link-time dependency on NCCL: the cdylib needs no libnccl and imports
/// no nccl symbol; neither does the staticlib.
#[test]
fn no_link_time_dependency_on_nccl() {
    let target = support::target_dir();
    let so = target.join("libllaisys_nvidia.so");
    let dynamic = support::child::run(
        Command::new("readelf").arg("-d").arg(&so),
        support::child::DEFAULT_LIMIT,
    )
    .ok();
    assert!(
        dynamic.contains("NEEDED"),
        "readelf -d printed no NEEDED: {dynamic}"
    );
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        !needed.iter().any(|l| l.contains("libnccl")),
        "the cdylib needs NCCL: {needed:?}"
    );
    for lib in [so, target.join("libllaisys_nvidia.a")] {
        let mut nm = Command::new("nm");
        nm.args(["--undefined-only"])
            .args(if lib.extension().is_some_and(|e| e == "so") {
                vec!["-D"]
            } else {
                vec![]
            })
            .arg(&lib);
        let undefined = support::child::run(&mut nm, support::child::DEFAULT_LIMIT).ok();
        // An imported NCCL function (ncclX, or the profiling pncclX), not our own Rust items.
        let nccl: Vec<&str> = undefined
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter(|sym| sym.starts_with("nccl") || sym.starts_with("pnccl"))
            .collect();
        assert!(nccl.is_empty(), "{} imports {nccl:?}", lib.display());
    }
}

/// The example program builds as C99 with warnings as errors against the header and the
/// cdylib, and without a usable driver (the stand-in) it stops at the first CUDA call with a
/// clear message, after making and writing the unique id (which needs no GPU).
#[test]
fn example_builds_and_reports_no_gpu() {
    let target = support::target_dir();
    let exe = support::scratch("nccl-example").join("nccl_allreduce");
    let mut cmd = Command::new("cc");
    cmd.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg(format!("-I{}", support::csrc().display()))
        .arg(support::source_dir().join("examples/nccl_allreduce.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", target.display()))
        .arg("-lllaisys_nvidia")
        .arg(format!("-Wl,-rpath,{}", target.display()));
    support::compile(cmd);
    let out = support::run_with(
        &exe,
        &["1"],
        &[
            ("LLAISYS_NVIDIA_NCCL_LIBRARY", wheel_lib().to_str().unwrap()),
            ("NCCL_NVLS_ENABLE", "0"),
        ],
    );
    assert_eq!(out.code(), Some(1), "{}", out.report());
    assert!(
        out.stderr
            .contains("rank 0: llaisysNvidiaDeviceCount failed")
            && out.stderr.contains("cudaErrorInsufficientDriver"),
        "{}",
        out.report()
    );
    // The usage line for bad arguments.
    let out = support::run(&exe, &[]);
    assert_eq!(out.code(), Some(2), "{}", out.report());
    assert!(out.stderr.contains("usage:"), "{}", out.report());
}

/// The header's communicator block compiles as C99 and C++17 (pedantic, warnings as errors),
/// uses every name it declares, and a client linked to the cdylib gets the table.
#[test]
fn header_block_compiles_in_c_and_cpp() {
    let dir = support::scratch("nccl-header");
    let body = r#"#include "llaisys_runtime.h"
#include <stdio.h>
int main(void) {
    const LlaisysNvidiaCommAPI *t = llaisysNvidiaGetCommAPI();
    llaisysNvidiaCommId id;
    llaisysNvidiaComm_t c = NULL;
    llaisysNvidiaComm_t cs[2];
    int v = 0, devs[2] = {0, 1};
    size_t n = 0;
    char path[64];
    int s = llaisysNvidiaCommSetTimeout(1000);
    s |= (t->get_unique_id != llaisysNvidiaCommGetUniqueId) | (t->init_rank != llaisysNvidiaCommInitRank)
       | (t->init_all != llaisysNvidiaCommInitAll) | (t->destroy != llaisysNvidiaCommDestroy)
       | (t->abort != llaisysNvidiaCommAbort) | (t->get_rank != llaisysNvidiaCommRank)
       | (t->get_size != llaisysNvidiaCommSize) | (t->allreduce != llaisysNvidiaAllReduce)
       | (t->allgather != llaisysNvidiaAllGather) | (t->reduce_scatter != llaisysNvidiaReduceScatter)
       | (t->broadcast != llaisysNvidiaBroadcast) | (t->send != llaisysNvidiaSend)
       | (t->recv != llaisysNvidiaRecv) | (t->group_start != llaisysNvidiaGroupStart)
       | (t->group_end != llaisysNvidiaGroupEnd) | (t->synchronize != llaisysNvidiaCommSynchronize);
    if (s != 0) { printf("table mismatch\n"); return 1; }
    if (sizeof id.internal != LLAISYS_NVIDIA_COMM_ID_BYTES) return 1;
    /* Refused before NCCL: a communicator that is not ours. */
    if (llaisysNvidiaAllReduce(&v, &v, 1, 5, LLAISYS_NVIDIA_REDUCE_SUM, (llaisysNvidiaComm_t)&v, NULL) != LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT) return 1;
    if (llaisysNvidiaLastNcclError() != 0) return 1;
    (void)llaisysNvidiaAllGather; (void)llaisysNvidiaReduceScatter; (void)llaisysNvidiaBroadcast;
    (void)llaisysNvidiaReduce; (void)llaisysNvidiaSend; (void)llaisysNvidiaRecv;
    (void)llaisysNvidiaCommInitRank; (void)llaisysNvidiaCommInitAll; (void)llaisysNvidiaCommDestroy;
    (void)llaisysNvidiaCommAbort; (void)llaisysNvidiaCommRank; (void)llaisysNvidiaCommSize;
    (void)llaisysNvidiaCommDevice; (void)llaisysNvidiaCommGetAsyncError; (void)llaisysNvidiaCommSynchronize;
    (void)c; (void)cs; (void)devs; (void)n; (void)path;
    v = LLAISYS_NVIDIA_ERROR_NCCL + LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE + LLAISYS_NVIDIA_ERROR_TIMEOUT
      + LLAISYS_NVIDIA_REDUCE_PROD + LLAISYS_NVIDIA_REDUCE_MAX + LLAISYS_NVIDIA_REDUCE_MIN + LLAISYS_NVIDIA_REDUCE_AVG;
    if (v != 28) return 1;
    if (llaisysNvidiaNcclGetVersion(&v) != 0 || v < 21400) { printf("version %d\n", v); return 1; }
    if (llaisysNvidiaNcclLibraryPath(path, sizeof path, &n) != 0 || n == 0) return 1;
    if (llaisysNvidiaCommGetUniqueId(&id) != 0) return 1;
    if (llaisysNvidiaGroupStart() != 0 || llaisysNvidiaGroupEnd() != 0) return 1;
    printf("ok\n");
    return 0;
}
"#;
    let target = support::target_dir();
    for (ext, compiler, std) in [("c", "cc", "-std=c99"), ("cpp", "c++", "-std=c++17")] {
        let src = dir.join(format!("client.{ext}"));
        let exe = dir.join(format!("client-{ext}"));
        std::fs::write(&src, body).unwrap();
        let mut cmd = Command::new(compiler);
        cmd.args([std, "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg(format!("-I{}", support::csrc().display()))
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{}", target.display()))
            .arg("-lllaisys_nvidia")
            .arg(format!("-Wl,-rpath,{}", target.display()));
        support::compile(cmd);
        let out = support::run_with(
            &exe,
            &[],
            &[
                ("LLAISYS_NVIDIA_NCCL_LIBRARY", wheel_lib().to_str().unwrap()),
                ("NCCL_NVLS_ENABLE", "0"),
            ],
        );
        assert!(
            out.success() && out.stdout.contains("ok"),
            "{ext}: {}",
            out.report()
        );
    }
}

// ---- the header against the one list of collectives ------------------------------------------

/// A C parameter as (type, name), whitespace normalised: `const void *sendbuff` gives
/// ("const void *", "sendbuff").
fn c_param(p: &str) -> (String, String) {
    let p = p.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = p
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let ty = p[..cut].trim().to_string();
    let ty = if ty.ends_with('*') && !ty.ends_with(" *") {
        format!("{} *", ty.trim_end_matches('*').trim_end())
    } else {
        ty
    };
    (ty, p[cut..].to_string())
}

/// The parameters of a declaration's outermost parameter list.
fn c_params(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter(|p| !p.trim().is_empty() && p.trim() != "void")
        .map(c_param)
        .collect()
}

/// (name, parameters before comm and stream) of each declaration in `decls` ending with
/// `llaisysNvidiaComm_t comm, llaisysStream_t stream`: the collective shape.
fn collective_shaped(
    decls: &[(String, Vec<(String, String)>)],
) -> Vec<(String, Vec<(String, String)>)> {
    let tail = [
        ("llaisysNvidiaComm_t".to_string(), "comm".to_string()),
        ("llaisysStream_t".to_string(), "stream".to_string()),
    ];
    decls
        .iter()
        .filter(|(_, p)| p.len() >= 2 && p[p.len() - 2..] == tail)
        .map(|(n, p)| (n.clone(), p[..p.len() - 2].to_vec()))
        .collect()
}

/// The header's exported functions and the fields of `LlaisysNvidiaCommAPI`, each with its
/// parameters.
#[allow(clippy::type_complexity)]
fn comm_declarations(
    header: &str,
) -> (
    Vec<(String, Vec<(String, String)>)>,
    Vec<(String, Vec<(String, String)>)>,
) {
    let code = c_header::code(header);
    let functions = c_header::exported_functions(header)
        .into_iter()
        .map(|(name, params)| (name, params.iter().map(|p| c_param(p)).collect()))
        .collect();
    let mut fields = Vec::new();
    if let Some(start) = code.find("typedef struct LlaisysNvidiaCommAPI {") {
        let body = &code[start..];
        let body = &body
            [body.find('{').unwrap_or(0) + 1..body.find("} LlaisysNvidiaCommAPI").unwrap_or(0)];
        for field in body.split(';').filter(|f| f.contains("(*")) {
            let name_start = field.find("(*").unwrap_or(0) + 2;
            let name_end = field[name_start..]
                .find(')')
                .map_or(name_start, |i| name_start + i);
            let params_start = field[name_end..].find('(').map_or(0, |i| name_end + i + 1);
            let params_end = field.rfind(')').unwrap_or(params_start);
            fields.push((
                field[name_start..name_end].trim().to_string(),
                c_params(&field[params_start..params_end]),
            ));
        }
    }
    (functions, fields)
}

/// How the header differs from the list (`COLLECTIVES`): each collective's C function and table
/// field with its parameters, and nothing of the collective shape besides.
fn collective_differences(header: &str) -> Vec<String> {
    let (functions, fields) = comm_declarations(header);
    let mut problems = Vec::new();
    let listed: Vec<(String, Vec<(String, String)>)> = COLLECTIVES
        .iter()
        .map(|c| {
            let params = c
                .params
                .iter()
                .map(|(name, ty)| (ty.to_string(), name.to_string()))
                .collect();
            (c.function.to_string(), params)
        })
        .collect();
    let declared = collective_shaped(&functions);
    for (name, params) in &listed {
        match declared.iter().find(|(n, _)| n == name) {
            None => problems.push(format!(
                "{name} is in the list but not declared in the header"
            )),
            Some((_, p)) if p != params => problems.push(format!(
                "{name}: the header declares {p:?}, the list {params:?} (then comm, stream)"
            )),
            Some(_) => {}
        }
    }
    for (name, _) in &declared {
        if !listed.iter().any(|(n, _)| n == name) {
            problems.push(format!(
                "{name} has the shape of a collective in the header but is not in the list"
            ));
        }
    }
    let listed_fields: Vec<(String, Vec<(String, String)>)> = COLLECTIVES
        .iter()
        .zip(&listed)
        .filter_map(|(c, (_, params))| c.table_field.map(|f| (f.to_string(), params.clone())))
        .collect();
    let table = collective_shaped(&fields);
    if table != listed_fields {
        problems.push(format!(
            "LlaisysNvidiaCommAPI's collective fields are {table:?}, the list's {listed_fields:?}"
        ));
    }
    problems
}

/// The hand-written header declares exactly the collectives of the library's one list
/// (`nccl::list`): the same C functions with the same parameters, the same table fields in
/// the same order, and no other function or field of that shape.
#[test]
fn header_declares_exactly_the_collectives_of_the_list() {
    let header = std::fs::read_to_string(support::csrc().join("llaisys_runtime.h")).unwrap();
    assert_eq!(COLLECTIVES.len(), 7, "{COLLECTIVES:#?}");
    let (functions, fields) = comm_declarations(&header);
    assert_eq!(collective_shaped(&functions).len(), 7, "{functions:#?}");
    assert_eq!(collective_shaped(&fields).len(), 6, "{fields:#?}");
    let problems = collective_differences(&header);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A collective in the header that the list lacks, a changed parameter, a missing one and a
/// reordered table are each reported.
#[test]
fn a_header_that_differs_from_the_list_is_caught() {
    let header = std::fs::read_to_string(support::csrc().join("llaisys_runtime.h")).unwrap();
    let extra = header.replace(
        "LLAISYS_NVIDIA_API int llaisysNvidiaGroupStart(void);",
        "LLAISYS_NVIDIA_API int llaisysNvidiaAllToAll(const void *sendbuff, void *recvbuff, \
         size_t count, int dtype, llaisysNvidiaComm_t comm, llaisysStream_t stream);\n\
         LLAISYS_NVIDIA_API int llaisysNvidiaGroupStart(void);",
    );
    let problems = collective_differences(&extra);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("llaisysNvidiaAllToAll"),
        "{problems:#?}"
    );
    let changed = header.replacen(
        "size_t sendcount, int dtype",
        "size_t sendcount, long dtype",
        1,
    );
    let problems = collective_differences(&changed);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("llaisysNvidiaAllGather: the header declares")),
        "{problems:#?}"
    );
    let start = header
        .find("LLAISYS_NVIDIA_API int llaisysNvidiaReduce(")
        .unwrap();
    let end = start + header[start..].find(';').unwrap() + 1;
    let missing = format!("{}{}", &header[..start], &header[end..]);
    let problems = collective_differences(&missing);
    assert_eq!(
        problems,
        ["llaisysNvidiaReduce is in the list but not declared in the header"]
    );
    let swapped = header
        .replace("    int (*send)(", "    int (*SEND)(")
        .replace("    int (*recv)(", "    int (*send)(")
        .replace("    int (*SEND)(", "    int (*recv)(");
    let problems = collective_differences(&swapped);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("LlaisysNvidiaCommAPI's collective fields")),
        "{problems:#?}"
    );
}

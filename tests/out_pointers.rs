//! Host-only test: every out-parameter of every exported function holds its documented failure
//! value after a failure (csrc/llaisys_runtime.h, "Out-parameters"): pointers and handles NULL,
//! numbers 0 (device and rank numbers -1), structs all zero, strings empty, and every element of
//! an output array NULL.
//!
//! The header is parsed for every exported function with an out-parameter (a non-const pointer
//! parameter other than a plain `void *` buffer), and each must have a case in `CASES` naming
//! all its out-parameters, or a reason in `NEVER_FAIL`: a function added to the header without
//! one fails `every_out_parameter_is_swept`. A case calls its function with poisoned outputs and
//! inputs that fail, and checks the failure values. The cases run in two conditions made here,
//! the same on every machine:
//! - without a driver: a child process whose loader finds the no-driver stand-in libcuda.so.1
//!   (`support::no_driver`), with NCCL absent (LLAISYS_NVIDIA_NCCL_LIBRARY an empty
//!   folder); every case fails but those in `SUCCEED_WITHOUT_A_DRIVER` (which must succeed, so
//!   that list stays exact);
//! - in a child forked after the library was used, where every call is refused before its body
//!   runs: every case fails.
//!
//! To add a function: add a case (its header name, its out-parameters' names, and a `fn` that
//! poisons them, calls with failing inputs and checks them with `Check`).

mod c_header;
mod support;

use llaisys_nvidia::ffi::*;
use std::os::raw::{c_char, c_double, c_float, c_int, c_void};
use support::last_error_message;

const POISON_PTR: *mut c_void = 0x5eed as *mut c_void;
const POISON_INT: c_int = 7;
const BAD_HANDLE: *mut c_void = 0x7000 as *mut c_void;

/// What one case found: the status, and each out-parameter that did not hold its failure value.
struct Check {
    function: &'static str,
    status: c_int,
    wrong: Vec<String>,
}

impl Check {
    fn new(function: &'static str, status: c_int) -> Check {
        Check {
            function,
            status,
            wrong: Vec::new(),
        }
    }

    /// Notes `name` unless it holds `want` (checked only after a failure).
    fn value<T: PartialEq + std::fmt::Debug>(mut self, name: &str, got: T, want: T) -> Check {
        if self.status != 0 && got != want {
            self.wrong.push(format!("{name} = {got:?}, not {want:?}"));
        }
        self
    }

    /// Notes `name` unless every byte of it is zero.
    fn zeroed<T>(self, name: &str, v: &T) -> Check {
        // SAFETY: reads the bytes of a live, initialised plain-data value.
        let bytes = unsafe {
            std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>())
        };
        let nonzero = bytes.iter().filter(|&&b| b != 0).count();
        self.value(&format!("{name} (non-zero bytes)"), nonzero, 0)
    }
}

/// A struct filled with 0xAB bytes (every type used here is plain data for which any bytes
/// are a value).
fn poisoned<T>() -> T {
    let mut v = std::mem::MaybeUninit::<T>::uninit();
    // SAFETY: fills every byte; the types used are integers, arrays and raw pointers.
    unsafe {
        std::ptr::write_bytes(v.as_mut_ptr(), 0xAB, 1);
        v.assume_init()
    }
}

fn null() -> *mut c_void {
    std::ptr::null_mut()
}

// ---- the cases ------------------------------------------------------------------------------
// Each calls its function with poisoned outputs and inputs that fail in both conditions.

fn malloc_device() -> Check {
    let mut p = POISON_PTR;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaMallocDevice(&mut p, 4096) };
    Check::new("llaisysNvidiaMallocDevice", s).value("out", p, null())
}

fn malloc_async() -> Check {
    let mut p = POISON_PTR;
    // SAFETY: a valid out-pointer; the stream is not ours (refused).
    let s = unsafe { llaisysNvidiaMallocAsync(&mut p, 4096, BAD_HANDLE) };
    Check::new("llaisysNvidiaMallocAsync", s).value("out", p, null())
}

fn malloc_host() -> Check {
    let mut p = POISON_PTR;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaMallocHost(&mut p, 4096) };
    Check::new("llaisysNvidiaMallocHost", s).value("out", p, null())
}

fn malloc_managed() -> Check {
    let mut p = POISON_PTR;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaMallocManaged(&mut p, 4096) };
    Check::new("llaisysNvidiaMallocManaged", s).value("out", p, null())
}

fn malloc_mapped() -> Check {
    let (mut h, mut d) = (POISON_PTR, POISON_PTR);
    // SAFETY: valid out-pointers.
    let s = unsafe { llaisysNvidiaMallocMapped(&mut h, &mut d, 4096) };
    Check::new("llaisysNvidiaMallocMapped", s)
        .value("host", h, null())
        .value("device", d, null())
}

fn pointer_get_attributes() -> Check {
    let mut a: PointerAttributes = poisoned();
    let x = 5;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaPointerGetAttributes((&x as *const i32).cast(), &mut a) };
    Check::new("llaisysNvidiaPointerGetAttributes", s).zeroed("out", &a)
}

fn stream_create() -> Check {
    let mut p = POISON_PTR;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaStreamCreate(&mut p, 0, 0) };
    Check::new("llaisysNvidiaStreamCreate", s).value("out", p, null())
}

fn stream_query() -> Check {
    let mut done = POISON_INT;
    // SAFETY: a valid out-pointer; the stream is not ours (refused).
    let s = unsafe { llaisysNvidiaStreamQuery(BAD_HANDLE, &mut done) };
    Check::new("llaisysNvidiaStreamQuery", s).value("done", done, 0)
}

fn stream_priority_range() -> Check {
    let (mut least, mut greatest) = (POISON_INT, POISON_INT);
    // SAFETY: valid out-pointers.
    let s = unsafe { llaisysNvidiaStreamPriorityRange(&mut least, &mut greatest) };
    Check::new("llaisysNvidiaStreamPriorityRange", s)
        .value("least", least, 0)
        .value("greatest", greatest, 0)
}

fn event_create() -> Check {
    let mut p = POISON_PTR;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaEventCreate(&mut p, 0) };
    Check::new("llaisysNvidiaEventCreate", s).value("out", p, null())
}

fn event_query() -> Check {
    let mut done = POISON_INT;
    // SAFETY: a valid out-pointer; the event is not ours (refused).
    let s = unsafe { llaisysNvidiaEventQuery(BAD_HANDLE, &mut done) };
    Check::new("llaisysNvidiaEventQuery", s).value("done", done, 0)
}

fn event_elapsed_time() -> Check {
    let mut ms: c_float = 7.0;
    // SAFETY: a valid out-pointer; the events are not ours (refused).
    let s = unsafe { llaisysNvidiaEventElapsedTime(&mut ms, BAD_HANDLE, BAD_HANDLE) };
    Check::new("llaisysNvidiaEventElapsedTime", s).value("ms", ms, 0.0)
}

fn get_versions() -> Check {
    let mut v: Versions = poisoned();
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaGetVersions(&mut v) };
    Check::new("llaisysNvidiaGetVersions", s).zeroed("out", &v)
}

fn device_count() -> Check {
    let mut n = POISON_INT;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaDeviceCount(&mut n) };
    Check::new("llaisysNvidiaDeviceCount", s).value("count", n, 0)
}

fn init_device() -> Check {
    let mut ms: c_double = 7.0;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaInitDevice(0, &mut ms) };
    Check::new("llaisysNvidiaInitDevice", s).value("ms", ms, 0.0)
}

fn get_device() -> Check {
    let mut d = POISON_INT;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaGetDevice(&mut d) };
    Check::new("llaisysNvidiaGetDevice", s).value("device", d, -1)
}

fn get_device_properties() -> Check {
    let mut p: DeviceProperties = poisoned();
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaGetDeviceProperties(0, &mut p) };
    Check::new("llaisysNvidiaGetDeviceProperties", s).zeroed("out", &p)
}

fn mem_get_info() -> Check {
    let (mut free, mut total) = (7usize, 7usize);
    // SAFETY: valid out-pointers.
    let s = unsafe { llaisysNvidiaMemGetInfo(&mut free, &mut total) };
    Check::new("llaisysNvidiaMemGetInfo", s)
        .value("free_bytes", free, 0)
        .value("total_bytes", total, 0)
}

fn device_can_access_peer() -> Check {
    let mut can = POISON_INT;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaDeviceCanAccessPeer(&mut can, 0, 1) };
    Check::new("llaisysNvidiaDeviceCanAccessPeer", s).value("can", can, 0)
}

fn device_memory_stats() -> Check {
    let mut st: AllocatorStats = poisoned();
    // SAFETY: a valid out-pointer; device -2 is neither a device nor -1 (refused).
    let s = unsafe { llaisysNvidiaDeviceMemoryStats(-2, &mut st) };
    Check::new("llaisysNvidiaDeviceMemoryStats", s).zeroed("out", &st)
}

fn get_memory_limit() -> Check {
    let mut b = u64::MAX;
    // SAFETY: a valid out-pointer; device -2 is not a device (refused).
    let s = unsafe { llaisysNvidiaGetMemoryLimit(-2, &mut b) };
    Check::new("llaisysNvidiaGetMemoryLimit", s).value("bytes", b, 0)
}

fn host_memory_stats() -> Check {
    let mut st: AllocatorStats = poisoned();
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaHostMemoryStats(&mut st) };
    Check::new("llaisysNvidiaHostMemoryStats", s).zeroed("out", &st)
}

fn nccl_get_version() -> Check {
    let mut v = POISON_INT;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaNcclGetVersion(&mut v) };
    Check::new("llaisysNvidiaNcclGetVersion", s).value("version", v, 0)
}

fn nccl_library_path() -> Check {
    let mut buf = [b'x' as c_char; 16];
    let mut length = 7usize;
    // SAFETY: a buffer of 16 bytes and a valid out-pointer.
    let s = unsafe { llaisysNvidiaNcclLibraryPath(buf.as_mut_ptr(), buf.len(), &mut length) };
    Check::new("llaisysNvidiaNcclLibraryPath", s)
        .value("buf[0]", buf[0], 0)
        .value("length", length, 0)
}

fn comm_get_unique_id() -> Check {
    let mut id: CommId = poisoned();
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaCommGetUniqueId(&mut id) };
    Check::new("llaisysNvidiaCommGetUniqueId", s).zeroed("id", &id)
}

fn comm_init_rank() -> Check {
    let mut c = POISON_PTR;
    let mut id = CommId { internal: [0; 128] };
    id.internal[0] = 1;
    // SAFETY: valid pointers.
    let s = unsafe { llaisysNvidiaCommInitRank(&mut c, 1, &id, 0) };
    Check::new("llaisysNvidiaCommInitRank", s).value("comm", c, null())
}

fn comm_init_all() -> Check {
    let mut cs = [POISON_PTR; 2];
    // SAFETY: an array of 2 handles.
    let s = unsafe { llaisysNvidiaCommInitAll(cs.as_mut_ptr(), 2, std::ptr::null()) };
    Check::new("llaisysNvidiaCommInitAll", s).value("comms", cs, [null(); 2])
}

fn comm_rank() -> Check {
    let mut r = POISON_INT;
    // SAFETY: a valid out-pointer; the communicator is not ours (refused).
    let s = unsafe { llaisysNvidiaCommRank(BAD_HANDLE, &mut r) };
    Check::new("llaisysNvidiaCommRank", s).value("rank", r, -1)
}

fn comm_size() -> Check {
    let mut n = POISON_INT;
    // SAFETY: a valid out-pointer; the communicator is not ours (refused).
    let s = unsafe { llaisysNvidiaCommSize(BAD_HANDLE, &mut n) };
    Check::new("llaisysNvidiaCommSize", s).value("size", n, 0)
}

fn comm_device() -> Check {
    let mut d = POISON_INT;
    // SAFETY: a valid out-pointer; the communicator is not ours (refused).
    let s = unsafe { llaisysNvidiaCommDevice(BAD_HANDLE, &mut d) };
    Check::new("llaisysNvidiaCommDevice", s).value("device", d, -1)
}

fn comm_get_async_error() -> Check {
    let mut r = POISON_INT;
    // SAFETY: a valid out-pointer; the communicator is not ours (refused).
    let s = unsafe { llaisysNvidiaCommGetAsyncError(BAD_HANDLE, &mut r) };
    Check::new("llaisysNvidiaCommGetAsyncError", s).value("result", r, 0)
}

/// A case: the function, the names of its out-parameters in the header, and the call.
struct Case {
    function: &'static str,
    outputs: &'static [&'static str],
    run: fn() -> Check,
}

fn cudart_library() -> Check {
    let mut version = POISON_INT;
    let mut buf = [b'x' as c_char; 16];
    let mut length = 7usize;
    // SAFETY: valid out-pointers and a buffer of 16 bytes.
    let s = unsafe {
        llaisysNvidiaCudartLibrary(&mut version, buf.as_mut_ptr(), buf.len(), &mut length)
    };
    Check::new("llaisysNvidiaCudartLibrary", s)
        .value("version", version, 0)
        .value("buf[0]", buf[0], 0)
        .value("length", length, 0)
}

fn graph_pool_create() -> Check {
    let mut pool = 0x5eed_u64;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaGraphPoolCreate(&mut pool) };
    Check::new("llaisysNvidiaGraphPoolCreate", s).value("pool", pool, 0)
}

fn stream_end_capture() -> Check {
    let mut g = POISON_PTR;
    // SAFETY: a valid out-pointer; the stream is not ours (refused).
    let s = unsafe { llaisysNvidiaStreamEndCapture(BAD_HANDLE, &mut g) };
    Check::new("llaisysNvidiaStreamEndCapture", s).value("graph", g, null())
}

fn stream_capture_status() -> Check {
    let mut status = POISON_INT;
    // SAFETY: a valid out-pointer; the stream is not ours (refused).
    let s = unsafe { llaisysNvidiaStreamCaptureStatus(BAD_HANDLE, &mut status) };
    Check::new("llaisysNvidiaStreamCaptureStatus", s).value("status", status, CAPTURE_STATUS_NONE)
}

fn graph_instantiate() -> Check {
    let mut exec = POISON_PTR;
    let mut log = [b'x' as c_char; 1024];
    // SAFETY: a valid out-pointer and a buffer of its length; the graph is not ours (refused).
    let s = unsafe {
        llaisysNvidiaGraphInstantiate(&mut exec, BAD_HANDLE, log.as_mut_ptr(), log.len())
    };
    // SAFETY: NUL-terminated by the call (the buffer is not empty).
    let text = unsafe { std::ffi::CStr::from_ptr(log.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    // The log's failure value is the failure's message (the header's exception to "empty").
    Check::new("llaisysNvidiaGraphInstantiate", s)
        .value("exec", exec, null())
        .value("log", text, last_error_message())
}

fn graph_exec_update() -> Check {
    let mut exec = BAD_HANDLE;
    let mut again = POISON_INT;
    // SAFETY: valid pointers; neither handle is ours (refused).
    let s = unsafe { llaisysNvidiaGraphExecUpdate(&mut exec, BAD_HANDLE, &mut again) };
    // `exec` is an in/out parameter: left as it was on failure (the header's exception).
    Check::new("llaisysNvidiaGraphExecUpdate", s)
        .value("exec", exec, BAD_HANDLE)
        .value("reinstantiated", again, 0)
}

macro_rules! cases {
    ($($function:literal [$($out:literal),*] => $run:ident,)*) => {
        const CASES: &[Case] = &[$(Case { function: $function, outputs: &[$($out),*], run: $run },)*];
    };
}

cases! {
    "llaisysNvidiaMallocDevice" ["out"] => malloc_device,
    "llaisysNvidiaMallocAsync" ["out"] => malloc_async,
    "llaisysNvidiaMallocHost" ["out"] => malloc_host,
    "llaisysNvidiaMallocManaged" ["out"] => malloc_managed,
    "llaisysNvidiaMallocMapped" ["host", "device"] => malloc_mapped,
    "llaisysNvidiaPointerGetAttributes" ["out"] => pointer_get_attributes,
    "llaisysNvidiaStreamCreate" ["out"] => stream_create,
    "llaisysNvidiaStreamQuery" ["done"] => stream_query,
    "llaisysNvidiaStreamPriorityRange" ["least", "greatest"] => stream_priority_range,
    "llaisysNvidiaEventCreate" ["out"] => event_create,
    "llaisysNvidiaEventQuery" ["done"] => event_query,
    "llaisysNvidiaEventElapsedTime" ["ms"] => event_elapsed_time,
    "llaisysNvidiaGetVersions" ["out"] => get_versions,
    "llaisysNvidiaDeviceCount" ["count"] => device_count,
    "llaisysNvidiaInitDevice" ["ms"] => init_device,
    "llaisysNvidiaGetDevice" ["device"] => get_device,
    "llaisysNvidiaGetDeviceProperties" ["out"] => get_device_properties,
    "llaisysNvidiaMemGetInfo" ["free_bytes", "total_bytes"] => mem_get_info,
    "llaisysNvidiaDeviceCanAccessPeer" ["can"] => device_can_access_peer,
    "llaisysNvidiaDeviceMemoryStats" ["out"] => device_memory_stats,
    "llaisysNvidiaHostMemoryStats" ["out"] => host_memory_stats,
    "llaisysNvidiaGetMemoryLimit" ["bytes"] => get_memory_limit,
    "llaisysNvidiaNcclGetVersion" ["version"] => nccl_get_version,
    "llaisysNvidiaNcclLibraryPath" ["buf", "length"] => nccl_library_path,
    "llaisysNvidiaCommGetUniqueId" ["id"] => comm_get_unique_id,
    "llaisysNvidiaCommInitRank" ["comm"] => comm_init_rank,
    "llaisysNvidiaCommInitAll" ["comms"] => comm_init_all,
    "llaisysNvidiaCommRank" ["rank"] => comm_rank,
    "llaisysNvidiaCommSize" ["size"] => comm_size,
    "llaisysNvidiaCommDevice" ["device"] => comm_device,
    "llaisysNvidiaCommGetAsyncError" ["result"] => comm_get_async_error,
    "llaisysNvidiaCudartLibrary" ["version", "buf", "length"] => cudart_library,
    "llaisysNvidiaGraphPoolCreate" ["pool"] => graph_pool_create,
    "llaisysNvidiaStreamEndCapture" ["graph"] => stream_end_capture,
    "llaisysNvidiaStreamCaptureStatus" ["status"] => stream_capture_status,
    "llaisysNvidiaGraphInstantiate" ["exec", "log"] => graph_instantiate,
    "llaisysNvidiaGraphExecUpdate" ["exec", "reinstantiated"] => graph_exec_update,
}

/// Functions with out-parameters that cannot fail, and why.
const NEVER_FAIL: &[(&str, &str)] = &[
    (
        "llaisysNvidiaGetErrorHandler",
        "returns void and always writes the handler and its user data (NULL for the default)",
    ),
    (
        "llaisysNvidiaLastErrorMessage",
        "returns a length; with no last error it writes the empty string and returns 0",
    ),
    (
        "llaisysNvidiaLastOutOfMemory",
        "a getter of the last error: the figures and 1, or zeros with device -1 and 0 \
         (tests/oom_fake.rs)",
    ),
];

/// Cases that succeed without a driver (no input makes them fail there but NULL); the forked
/// child covers their failure.
const SUCCEED_WITHOUT_A_DRIVER: &[&str] = &[
    "llaisysNvidiaGetVersions",
    "llaisysNvidiaHostMemoryStats",
    // It reports why no runtime could be loaded, too.
    "llaisysNvidiaCudartLibrary",
];

// ---- the header -----------------------------------------------------------------------------

/// An exported function of the header with its out-parameters' names.
#[derive(Debug)]
struct Declared {
    name: String,
    outputs: Vec<String>,
}

/// Whether a parameter declaration is an out-parameter: a non-const pointer, other than a plain
/// `void *` (a data buffer the caller owns); `T **`, `char *` and struct or typedef pointers are.
fn is_output(param: &str) -> bool {
    let p = param.trim();
    if !p.contains('*') || p.starts_with("const ") {
        return false;
    }
    let stars = p.matches('*').count();
    let base = p.split('*').next().unwrap_or("").trim();
    !(base == "void" && stars == 1)
}

/// Every exported function of `header` with its out-parameters.
fn exported_functions(header: &str) -> Vec<Declared> {
    c_header::exported_functions(header)
        .into_iter()
        .map(|(name, params)| Declared {
            name,
            outputs: params
                .iter()
                .filter(|p| is_output(p))
                .map(|p| c_header::declared_name(p))
                .collect(),
        })
        .collect()
}

fn header() -> String {
    std::fs::read_to_string(support::csrc().join("llaisys_runtime.h")).expect("the header")
}

/// The problems of `declared` against the cases and `NEVER_FAIL`.
fn unswept(declared: &[Declared]) -> Vec<String> {
    let mut problems = Vec::new();
    for d in declared.iter().filter(|d| !d.outputs.is_empty()) {
        if NEVER_FAIL.iter().any(|(n, _)| *n == d.name) {
            continue;
        }
        match CASES.iter().find(|c| c.function == d.name) {
            None => problems.push(format!(
                "{} has out-parameters {:?} but no case in tests/out_pointers.rs CASES (add one \
                 that poisons them, makes it fail and checks the failure values)",
                d.name, d.outputs
            )),
            Some(c) if c.outputs != d.outputs.as_slice() => problems.push(format!(
                "{}: the case checks {:?}, the header's out-parameters are {:?}",
                d.name, c.outputs, d.outputs
            )),
            Some(_) => {}
        }
    }
    for c in CASES {
        if !declared.iter().any(|d| d.name == c.function) {
            problems.push(format!("case {} is not declared in the header", c.function));
        }
    }
    problems
}

#[test]
fn every_out_parameter_is_swept() {
    let declared = exported_functions(&header());
    assert!(
        declared.len() > 60,
        "the parser found only {} functions",
        declared.len()
    );
    let with_outputs = declared.iter().filter(|d| !d.outputs.is_empty()).count();
    assert_eq!(
        with_outputs,
        CASES.len() + NEVER_FAIL.len(),
        "{:#?}",
        unswept(&declared)
    );
    let problems = unswept(&declared);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A function added to the header with an out-parameter and no case is caught, and the parser
/// reads out-parameters as the header writes them.
#[test]
fn a_new_out_parameter_function_without_a_case_is_caught() {
    let mut text = header();
    text.push_str(
        "LLAISYS_NVIDIA_API int llaisysNvidiaGraphCreate(llaisysNvidiaGraph_t *out, unsigned \
         flags);\nLLAISYS_NVIDIA_API int llaisysNvidiaGraphLaunch(void *graph, const void *in);\n",
    );
    let declared = exported_functions(&text);
    let problems = unswept(&declared);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("llaisysNvidiaGraphCreate has out-parameters [\"out\"]"),
        "{problems:#?}"
    );
    let find = |n: &str| declared.iter().find(|d| d.name == n).expect(n);
    assert_eq!(find("llaisysNvidiaMemcpy").outputs, Vec::<String>::new());
    assert_eq!(
        find("llaisysNvidiaMallocMapped").outputs,
        ["host", "device"]
    );
    assert_eq!(find("llaisysNvidiaCommInitRank").outputs, ["comm"]);
    assert_eq!(
        find("llaisysNvidiaGetErrorHandler").outputs,
        ["handler", "user_data"]
    );
}

// ---- the two conditions ---------------------------------------------------------------------

/// Runs every case; returns the problems. `allowed` may succeed (and must).
fn sweep(allowed: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for case in CASES {
        let check = (case.run)();
        assert_eq!(
            check.function, case.function,
            "a case runs another function"
        );
        let may_succeed = allowed.contains(&case.function);
        if check.status == 0 && !may_succeed {
            problems.push(format!("{}: succeeded, no failure to check", case.function));
        } else if check.status != 0 && may_succeed {
            problems.push(format!(
                "{}: failed with {} (listed as succeeding)",
                case.function, check.status
            ));
        }
        for w in &check.wrong {
            problems.push(format!("{} (status {}): {w}", case.function, check.status));
        }
    }
    problems
}

#[test]
#[ignore = "entry point of a child process: run by out_parameters_hold_failure_values_without_a_driver"]
fn child_without_a_driver() {
    support::no_driver::enter("child_without_a_driver");
    let mut n = POISON_INT;
    // SAFETY: a valid out-pointer.
    let s = unsafe { llaisysNvidiaDeviceCount(&mut n) };
    assert_eq!(
        (s, llaisysNvidiaLastCudaError()),
        (1, 35),
        "the stand-in driver is not the one loaded"
    );
    let problems = sweep(SUCCEED_WITHOUT_A_DRIVER);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn out_parameters_hold_failure_values_without_a_driver() {
    let no_nccl = support::scratch("out-pointers-no-nccl");
    support::no_driver::child("child_without_a_driver")
        .env("LLAISYS_NVIDIA_NCCL_LIBRARY", &no_nccl)
        .run_passing();
}

#[test]
#[ignore = "entry point of a child process: run by out_parameters_hold_failure_values_in_a_forked_child"]
fn child_forks() {
    support::child::require_child("child_forks");
    // Uses the library (an H2H copy needs no device), then forks: the child refuses every call.
    let (a, mut b) = ([1u8; 8], [0u8; 8]);
    // SAFETY: two host buffers of 8 bytes.
    let s = unsafe { llaisysNvidiaMemcpy(b.as_mut_ptr().cast(), a.as_ptr().cast(), 8, 0) };
    assert_eq!((s, b), (0, a));
    // SAFETY: the child only calls into the library, writes to stderr and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let problems = std::panic::catch_unwind(|| sweep(&[]))
            .unwrap_or_else(|_| vec!["a case panicked".to_string()]);
        let refused = llaisysNvidiaLastCudaError() == 3;
        for p in &problems {
            eprintln!("forked child: {p}");
        }
        if !refused {
            eprintln!("forked child: the last failure was not the refusal after fork");
        }
        // SAFETY: ends the forked child without running the parent's exit handlers.
        unsafe { libc::_exit(i32::from(!problems.is_empty() || !refused)) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child's sweep failed (status {status:#x}); see its stderr above"
    );
}

#[test]
fn out_parameters_hold_failure_values_in_a_forked_child() {
    support::child::TestChild::new("child_forks")
        .env_remove("LLAISYS_NVIDIA_NCCL_LIBRARY")
        .run_passing();
}

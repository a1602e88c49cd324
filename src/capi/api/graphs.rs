//! CUDA graphs: capture on a stream (with graph pools for the memory malloc_device hands out
//! during it), capture status, instantiation, upload, launch, update, destruction; and the same
//! functions as a llaisys-style table (`llaisysNvidiaGetGraphAPI`).

use super::{reset, status, status_out};
use crate::capi::policy;
use crate::ops::graphs as ops;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;

/// `LLAISYS_NVIDIA_CAPTURE_MODE_GLOBAL` (cudaStreamCaptureModeGlobal).
pub const CAPTURE_MODE_GLOBAL: c_int = crate::safe::capture::MODE_GLOBAL as c_int;
/// `LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL`.
pub const CAPTURE_MODE_THREAD_LOCAL: c_int = crate::safe::capture::MODE_THREAD_LOCAL as c_int;
/// `LLAISYS_NVIDIA_CAPTURE_MODE_RELAXED`.
pub const CAPTURE_MODE_RELAXED: c_int = crate::safe::capture::MODE_RELAXED as c_int;
/// `LLAISYS_NVIDIA_CAPTURE_STATUS_NONE`.
pub const CAPTURE_STATUS_NONE: c_int = crate::safe::capture::STATUS_NONE as c_int;
/// `LLAISYS_NVIDIA_CAPTURE_STATUS_ACTIVE`.
pub const CAPTURE_STATUS_ACTIVE: c_int = crate::safe::capture::STATUS_ACTIVE as c_int;
/// `LLAISYS_NVIDIA_CAPTURE_STATUS_INVALIDATED`.
pub const CAPTURE_STATUS_INVALIDATED: c_int = crate::safe::capture::STATUS_INVALIDATED as c_int;
/// `LLAISYS_NVIDIA_ERROR_CAPTURE`: refused because a stream capture is in progress.
pub const STATUS_CAPTURE: c_int = crate::error::ErrorKind::Capture as c_int;

/// Makes a graph pool on the current device (`*pool` is 0 on failure).
///
/// # Safety
/// `pool` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGraphPoolCreate(pool: *mut u64) -> c_int {
    let create = ops::graph_pool_create;
    // SAFETY: `pool` is NULL or valid for writing (this function's contract).
    unsafe { status_out("llaisysNvidiaGraphPoolCreate", pool, "pool", 0, create) }
}

/// Gives up a graph pool's handle; its memory goes once no graph captured into it exists.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGraphPoolRelease(pool: u64) -> c_int {
    status("llaisysNvidiaGraphPoolRelease", || {
        ops::graph_pool_release(pool)
    })
}

/// Begins capturing `stream` in `mode`; malloc_device on this thread allocates from `pool` (0: a
/// pool of the capture's own) until the capture ends.
#[no_mangle]
pub extern "C" fn llaisysNvidiaStreamBeginCapture(
    stream: *mut c_void,
    mode: c_int,
    pool: u64,
) -> c_int {
    status("llaisysNvidiaStreamBeginCapture", || {
        ops::begin_capture(stream, mode, pool)
    })
}

/// Ends the capture on `stream`: `*graph` is the captured graph (NULL on failure).
///
/// # Safety
/// `graph` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaStreamEndCapture(
    stream: *mut c_void,
    graph: *mut *mut c_void,
) -> c_int {
    // SAFETY: `graph` is NULL or valid for writing (this function's contract).
    unsafe {
        status_out(
            "llaisysNvidiaStreamEndCapture",
            graph,
            "graph",
            null_mut(),
            || Ok(ops::end_capture(stream)?.cast()),
        )
    }
}

/// Writes the capture status of `stream` (NULL: the legacy stream) to `*capture_status`
/// (LLAISYS_NVIDIA_CAPTURE_STATUS_NONE on failure).
///
/// # Safety
/// `capture_status` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaStreamCaptureStatus(
    stream: *mut c_void,
    capture_status: *mut c_int,
) -> c_int {
    let query = || Ok(ops::capture_status(stream)? as c_int);
    // SAFETY: `capture_status` is NULL or valid for writing (this function's contract).
    unsafe {
        status_out(
            "llaisysNvidiaStreamCaptureStatus",
            capture_status,
            "capture_status",
            CAPTURE_STATUS_NONE,
            query,
        )
    }
}

/// Instantiates `graph` into `*exec` (NULL on failure); `log` receives why it failed.
///
/// # Safety
/// `exec` is NULL or valid for writing; `log` is NULL or valid for `log_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGraphInstantiate(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    log: *mut c_char,
    log_size: usize,
) -> c_int {
    // SAFETY: `log` is NULL or valid for `log_size` bytes (this function's contract).
    unsafe { policy::copy_out(c"", log, log_size) };
    // SAFETY: `exec` is NULL or valid for writing (this function's contract).
    let rc = unsafe {
        status_out(
            "llaisysNvidiaGraphInstantiate",
            exec,
            "exec",
            null_mut(),
            || Ok(ops::instantiate(graph)?.cast()),
        )
    };
    if rc != super::SUCCESS {
        if let Some(last) = policy::last() {
            // SAFETY: `log` is NULL or valid for `log_size` bytes (this function's contract).
            unsafe { policy::copy_out(last.message.as_c_str(), log, log_size) };
        }
    }
    rc
}

/// Uploads `exec` to the device on `stream` ahead of its first launch.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGraphUpload(exec: *mut c_void, stream: *mut c_void) -> c_int {
    status("llaisysNvidiaGraphUpload", || ops::upload(exec, stream))
}

/// Launches `exec` on `stream`.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGraphLaunch(exec: *mut c_void, stream: *mut c_void) -> c_int {
    status("llaisysNvidiaGraphLaunch", || ops::launch(exec, stream))
}

/// Updates `*exec` to run `graph`, in place or by re-instantiating (`*reinstantiated` 1).
///
/// # Safety
/// `exec` is NULL or valid for reading and writing; `reinstantiated` NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn llaisysNvidiaGraphExecUpdate(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    reinstantiated: *mut c_int,
) -> c_int {
    // SAFETY: `reinstantiated` is NULL or valid for writing (this function's contract).
    unsafe { reset(reinstantiated, 0) };
    // SAFETY: as this function's `# Safety` section requires.
    status("llaisysNvidiaGraphExecUpdate", || unsafe {
        if exec.is_null() {
            return Err(crate::error::Error::invalid_argument(
                "exec=NULL: no executable graph to update",
            ));
        }
        let (now, again) = ops::exec_update(exec.read(), graph)?;
        exec.write(now.cast());
        if !reinstantiated.is_null() {
            reinstantiated.write(c_int::from(again));
        }
        Ok(())
    })
}

/// Destroys an executable graph; NULL does nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGraphExecDestroy(exec: *mut c_void) -> c_int {
    status("llaisysNvidiaGraphExecDestroy", || ops::exec_destroy(exec))
}

/// Destroys a graph; NULL does nothing. Executable graphs made from it stay valid.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGraphDestroy(graph: *mut c_void) -> c_int {
    status("llaisysNvidiaGraphDestroy", || ops::graph_destroy(graph))
}

/// The graph functions as a table (`LlaisysNvidiaGraphAPI` in the header); the field order is
/// the ABI.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LlaisysNvidiaGraphAPI {
    /// `llaisysNvidiaGraphPoolCreate`.
    pub pool_create: unsafe extern "C" fn(*mut u64) -> c_int,
    /// `llaisysNvidiaGraphPoolRelease`.
    pub pool_release: extern "C" fn(u64) -> c_int,
    /// `llaisysNvidiaStreamBeginCapture`.
    pub begin_capture: extern "C" fn(*mut c_void, c_int, u64) -> c_int,
    /// `llaisysNvidiaStreamEndCapture`.
    pub end_capture: unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int,
    /// `llaisysNvidiaStreamCaptureStatus`.
    pub capture_status: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int,
    /// `llaisysNvidiaGraphInstantiate`.
    pub instantiate:
        unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_char, usize) -> c_int,
    /// `llaisysNvidiaGraphUpload`.
    pub upload: extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    /// `llaisysNvidiaGraphLaunch`.
    pub launch: extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    /// `llaisysNvidiaGraphExecUpdate`.
    pub exec_update: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_int) -> c_int,
    /// `llaisysNvidiaGraphExecDestroy`.
    pub exec_destroy: extern "C" fn(*mut c_void) -> c_int,
    /// `llaisysNvidiaGraphDestroy`.
    pub graph_destroy: extern "C" fn(*mut c_void) -> c_int,
}

static GRAPH_API: LlaisysNvidiaGraphAPI = LlaisysNvidiaGraphAPI {
    pool_create: llaisysNvidiaGraphPoolCreate,
    pool_release: llaisysNvidiaGraphPoolRelease,
    begin_capture: llaisysNvidiaStreamBeginCapture,
    end_capture: llaisysNvidiaStreamEndCapture,
    capture_status: llaisysNvidiaStreamCaptureStatus,
    instantiate: llaisysNvidiaGraphInstantiate,
    upload: llaisysNvidiaGraphUpload,
    launch: llaisysNvidiaGraphLaunch,
    exec_update: llaisysNvidiaGraphExecUpdate,
    exec_destroy: llaisysNvidiaGraphExecDestroy,
    graph_destroy: llaisysNvidiaGraphDestroy,
};

/// The graph table. Never NULL, never fails.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGetGraphAPI() -> *const LlaisysNvidiaGraphAPI {
    &GRAPH_API
}

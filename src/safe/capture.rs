//! Stream capture (CUDA graphs) as plain cudart: beginning and ending a capture, a stream's
//! capture status, whether the legacy stream is unusable because a blocking stream captures,
//! and this thread's capture mode.
//!
//! CUDA's rules that the layers above rely on:
//! - while a blocking stream of a device captures, any work on that device's legacy stream, from
//!   any thread, fails with `cudaErrorStreamCaptureImplicit` and invalidates the capture;
//!   `cudaStreamIsCapturing` on the legacy stream answers that code without invalidating it
//!   ([`legacy_blocked`]);
//! - a capture in global mode forbids "potentially unsafe" calls (`cudaMalloc`, event and
//!   stream queries and waits, `cudaMallocHost`...) on every thread in global mode, and a
//!   thread-local one on its own thread; a refused call invalidates the capture. A thread in
//!   relaxed mode ([`Relaxed`]) may make them: the library does so for its own bookkeeping,
//!   which never touches captured work.

use crate::cudart::calls::{self as cudart, Detail, GraphHandle, StreamHandle};
use crate::error::{CudaError, Error, Result};

/// `cudaStreamCaptureModeGlobal`.
pub const MODE_GLOBAL: u32 = cudart::CAPTURE_MODE_GLOBAL;
/// `cudaStreamCaptureModeThreadLocal`.
pub const MODE_THREAD_LOCAL: u32 = cudart::CAPTURE_MODE_THREAD_LOCAL;
/// `cudaStreamCaptureModeRelaxed`.
pub const MODE_RELAXED: u32 = cudart::CAPTURE_MODE_RELAXED;

/// `cudaStreamCaptureStatusNone`.
pub const STATUS_NONE: u32 = cudart::CAPTURE_STATUS_NONE;
/// `cudaStreamCaptureStatusActive`.
pub const STATUS_ACTIVE: u32 = cudart::CAPTURE_STATUS_ACTIVE;
/// `cudaStreamCaptureStatusInvalidated`.
pub const STATUS_INVALIDATED: u32 = cudart::CAPTURE_STATUS_INVALIDATED;

/// True while a blocking stream of the current device captures, so that the legacy stream must
/// not be used (a query that does not invalidate the capture). Any other answer (no driver, a
/// broken context) is false: the call that follows reports its own error. cudart's last error
/// is left clear either way.
pub(crate) fn legacy_blocked() -> bool {
    // SAFETY: NULL is the legacy stream.
    match unsafe { cudart::stream_is_capturing(std::ptr::null_mut()) } {
        Ok(_) => false,
        Err(f) => {
            cudart::get_last_error();
            f.code == CudaError::STREAM_CAPTURE_IMPLICIT
        }
    }
}

/// The graph being captured on `s`; Err when `s` is not capturing (or its capture was invalidated).
///
/// # Safety
/// `s` is a live stream.
pub(crate) unsafe fn graph_of(s: StreamHandle) -> Result<GraphHandle> {
    // SAFETY: `s` is a live stream (this function's contract).
    let (status, _, graph) =
        unsafe { cudart::stream_get_capture_info(s) }.detail(|| format!("stream={s:p}"))?;
    if status != STATUS_ACTIVE || graph.is_null() {
        return Err(Error::cuda(
            "cudaStreamGetCaptureInfo",
            CudaError::STREAM_CAPTURE_UNSUPPORTED,
            format!("stream={s:p}: no capture in progress (status {status})"),
        ));
    }
    Ok(graph)
}

/// The capture status of `s` (NULL: the legacy stream, which never captures itself; while a
/// blocking stream captures it reports `STATUS_ACTIVE`, as work there would join the capture).
///
/// # Safety
/// `s` is NULL or a live stream.
pub(crate) unsafe fn status(s: StreamHandle) -> Result<u32> {
    if s.is_null() {
        return Ok(if legacy_blocked() {
            STATUS_ACTIVE
        } else {
            STATUS_NONE
        });
    }
    // SAFETY: `s` is a live stream: not NULL (handled above), so live (this function's contract).
    unsafe { cudart::stream_is_capturing(s) }.detail(|| format!("stream={s:p}"))
}

/// True when `s` (NULL: the legacy stream) is capturing, or its capture was invalidated and not
/// yet ended: work queued there would not run now.
///
/// # Safety
/// `s` is NULL or a live stream.
pub(crate) unsafe fn capturing(s: StreamHandle) -> Result<bool> {
    // SAFETY: `s` is NULL or a live stream (this function's contract).
    Ok(unsafe { status(s) }? != STATUS_NONE)
}

/// Begins a capture on `s` in `mode`.
///
/// # Safety
/// `s` is a live stream.
pub(crate) unsafe fn begin(s: StreamHandle, mode: u32) -> Result<()> {
    // SAFETY: `s` is a live stream (this function's contract).
    unsafe { cudart::stream_begin_capture(s, mode) }.detail(|| format!("stream={s:p} mode={mode}"))
}

/// Ends the capture on `s`: the graph, or why there is none (an invalidated capture gives
/// `cudaErrorStreamCaptureInvalidated`; a graph cudart still returned with an error is
/// destroyed here).
///
/// # Safety
/// `s` is a live stream.
pub(crate) unsafe fn end(s: StreamHandle) -> Result<GraphHandle> {
    // SAFETY: `s` is a live stream (this function's contract).
    let (graph, rc) = unsafe { cudart::stream_end_capture(s) };
    match rc {
        Ok(()) if !graph.is_null() => Ok(graph),
        Ok(()) => Err(Error::cuda(
            "cudaStreamEndCapture",
            CudaError::STREAM_CAPTURE_UNSUPPORTED,
            format!("stream={s:p}: no graph was returned"),
        )),
        Err(f) => {
            if !graph.is_null() {
                // SAFETY: a graph cudart handed out that nothing else knows of.
                let _ = unsafe { cudart::graph_destroy(graph) };
            }
            Err(Error::cuda(f.call, f.code, format!("stream={s:p}")))
        }
    }
}

/// This thread in relaxed capture mode while it lives: calls that global and thread-local
/// captures forbid (event and stream queries and waits on streams that do not capture,
/// allocations) are allowed, and never invalidate a capture. The previous mode comes back when
/// it is dropped. Without a driver (or when the mode cannot be read) it does nothing.
pub(crate) struct Relaxed {
    previous: Option<u32>,
}

impl Relaxed {
    /// Switches this thread to relaxed mode.
    pub(crate) fn new() -> Relaxed {
        let previous = cudart::thread_exchange_capture_mode(MODE_RELAXED).ok();
        Relaxed { previous }
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        if let Some(mode) = self.previous {
            let _ = cudart::thread_exchange_capture_mode(mode);
        }
    }
}

//! What the other operations do while a stream captures a graph: the checks they make before a call
//! CUDA forbids during a capture, so that such a call is refused with a capture error
//! (`LLAISYS_NVIDIA_ERROR_CAPTURE`) instead of invalidating the capture. Waits and queries are
//! refused on a thread capturing through the library in global or thread-local mode
//! ([`before_wait`]) and on a capturing stream ([`not_capturing`]); other threads run in relaxed
//! mode while such a capture is in progress ([`relaxed_for_other_threads`]).

use crate::cache::graph_pool;
use crate::cudart::calls::StreamHandle;
use crate::error::{CudaError, Error, Result};
use crate::safe::capture::{self, Relaxed};

/// Relaxed capture mode for the calling thread while a capture through the library is in
/// progress and this thread is not the one capturing (one relaxed load otherwise).
#[inline]
pub(crate) fn relaxed_for_other_threads() -> Option<Relaxed> {
    if !crate::cache::legacy_stream::any_capture() || graph_pool::current().is_some() {
        return None;
    }
    Some(Relaxed::new())
}

/// Refuses a call that waits (`call`, the CUDA call it would make) on a thread capturing through
/// the library in global or thread-local mode: CUDA forbids waits there and would invalidate the
/// capture. `why` says what waits and what to do instead. One relaxed load while no capture
/// through the library is in progress.
#[inline]
pub(crate) fn refuse_waits_while_capturing(call: &'static str, why: &str) -> Result<()> {
    match graph_pool::current() {
        Some(c) if c.mode != capture::MODE_RELAXED => Err(Error::capture(
            call,
            CudaError::STREAM_CAPTURE_UNSUPPORTED,
            format!(
                "this thread is capturing a graph (capture {} on device {}) in {} mode, which \
                 forbids waits on its own thread: {why}",
                c.capture,
                c.device,
                mode_name(c.mode)
            ),
        )),
        _ => Ok(()),
    }
}

/// Before a wait or query named `call`: the refusal on a thread capturing in global or
/// thread-local mode, else relaxed mode while any capture through the library is in progress.
#[inline]
pub(crate) fn before_wait(call: &'static str) -> Result<Option<Relaxed>> {
    if !crate::cache::legacy_stream::any_capture() {
        return Ok(None);
    }
    before_wait_slow(call)
}

#[cold]
#[inline(never)]
fn before_wait_slow(call: &'static str) -> Result<Option<Relaxed>> {
    if let Some(c) = graph_pool::current() {
        if c.mode != capture::MODE_RELAXED {
            return Err(Error::capture(
                call,
                CudaError::STREAM_CAPTURE_UNSUPPORTED,
                format!(
                    "this thread is capturing a graph (capture {} on device {}) in {} mode, which \
                     forbids waits and queries on its own thread; end the capture first, or \
                     capture in relaxed mode",
                    c.capture,
                    c.device,
                    mode_name(c.mode)
                ),
            ));
        }
    }
    Ok(Some(Relaxed::new()))
}

/// Refuses a wait or query of `s` while it captures (work queued there during a capture does not
/// run, so waiting for it cannot end; CUDA would refuse and invalidate the capture). NULL: the
/// legacy stream, refused while a blocking stream of the current device captures.
///
/// # Safety
/// `s` is NULL or a live stream.
#[inline]
pub(crate) unsafe fn not_capturing(s: StreamHandle, call: &'static str) -> Result<()> {
    if !s.is_null() && !crate::cache::legacy_stream::any_capture() {
        // A stream captured by the host itself (cudaStreamBeginCapture) is not known here:
        // CUDA answers for it.
        return Ok(());
    }
    // SAFETY: `s` is NULL or a live stream (this function's contract).
    unsafe { not_capturing_slow(s, call) }
}

/// `not_capturing` for NULL, or while a capture through the library is in progress.
///
/// # Safety
/// `s` is NULL or a live stream.
#[cold]
#[inline(never)]
unsafe fn not_capturing_slow(s: StreamHandle, call: &'static str) -> Result<()> {
    if s.is_null() {
        if crate::cache::legacy_stream::usable_current()?.is_none() {
            return Err(crate::cache::legacy_stream::refused(
                call,
                "waiting for NULL (the legacy stream)",
            ));
        }
        return Ok(());
    }
    // SAFETY: `s` is not NULL (handled above), so a live stream (this function's contract).
    // A failed query is left to the call that follows.
    if unsafe { capture::capturing(s) }.unwrap_or(false) {
        return Err(Error::capture(
            call,
            CudaError::STREAM_CAPTURE_UNSUPPORTED,
            format!(
                "stream={s:p} is capturing a graph: its work runs only when the graph is launched"
            ),
        ));
    }
    Ok(())
}

/// Refuses device_synchronize while a stream of the current device captures.
pub(crate) fn device_not_capturing() -> Result<()> {
    let busy =
        crate::cache::legacy_stream::usable_current()?.is_none() || graph_pool::current().is_some();
    if busy {
        return Err(Error::capture(
            "cudaDeviceSynchronize",
            CudaError::STREAM_CAPTURE_UNSUPPORTED,
            "a stream of the current device is capturing a graph: waiting for the whole device \
             would wait for work that runs only when the graph is launched; synchronize the \
             streams you need instead, or end the capture first",
        ));
    }
    Ok(())
}

/// The name of a capture mode.
pub(crate) fn mode_name(mode: u32) -> &'static str {
    match mode {
        capture::MODE_GLOBAL => "global",
        capture::MODE_THREAD_LOCAL => "thread-local",
        capture::MODE_RELAXED => "relaxed",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// Waits are refused on a thread capturing through the library in global or thread-local mode,
    /// and only there: not in relaxed mode, not once the capture has ended, not on another thread.
    #[test]
    fn waits_are_refused_on_a_thread_capturing_in_global_or_thread_local_mode() {
        let why = "what waits, and what to do instead";
        for mode in [capture::MODE_GLOBAL, capture::MODE_THREAD_LOCAL] {
            let pool = graph_pool::create(0);
            let capture = graph_pool::begin(pool, 0, mode).expect("the capture's books");
            let e = refuse_waits_while_capturing("cudaMemcpyAsync", why)
                .expect_err("refused while capturing");
            assert_eq!(e.kind(), ErrorKind::Capture, "{e}");
            let text = e.to_string();
            assert!(
                text.contains("cudaMemcpyAsync")
                    && text.contains(&format!("capture {capture} on device 0"))
                    && text.contains(mode_name(mode))
                    && text.contains(why),
                "{text}"
            );
            std::thread::scope(|t| {
                t.spawn(|| {
                    assert!(
                        refuse_waits_while_capturing("cudaMemcpyAsync", why).is_ok(),
                        "another thread waits"
                    )
                });
            });
            graph_pool::end(capture);
            assert!(refuse_waits_while_capturing("cudaMemcpyAsync", why).is_ok());
        }
        let pool = graph_pool::create(0);
        let capture = graph_pool::begin(pool, 0, capture::MODE_RELAXED).expect("the books");
        assert!(
            refuse_waits_while_capturing("cudaMemcpyAsync", why).is_ok(),
            "relaxed mode allows waits"
        );
        graph_pool::end(capture);
    }
}

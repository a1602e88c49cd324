//! CUDA streams. `Stream` owns one and destroys it when dropped; the C layer moves ownership to
//! and from raw handles with `into_raw`/`from_raw`.

use crate::error::Result;
use crate::raw;

/// An owned CUDA stream created with `cudaStreamCreate`: an ordinary blocking stream, ordered
/// with the legacy default stream as CUDA defines.
#[derive(Debug)]
pub struct Stream(raw::cudaStream_t);

// SAFETY: CUDA streams may be used from any host thread.
unsafe impl Send for Stream {}
// SAFETY: every operation on a stream handle is thread-safe in cudart.
unsafe impl Sync for Stream {}

impl Stream {
    /// Creates a stream on the calling thread's current device.
    pub fn new() -> Result<Stream> {
        let mut s: raw::cudaStream_t = std::ptr::null_mut();
        cuda!(cudaStreamCreate(&mut s))?;
        Ok(Stream(s))
    }

    /// Creates a stream with `cudaStreamCreateWithPriority`: `non_blocking` streams do not
    /// synchronize with the legacy default stream; lower `priority` numbers run first (see
    /// `priority_range`).
    pub fn with_flags(non_blocking: bool, priority: i32) -> Result<Stream> {
        let mut s: raw::cudaStream_t = std::ptr::null_mut();
        let flags = if non_blocking {
            raw::cudaStreamNonBlocking
        } else {
            raw::cudaStreamDefault
        };
        cuda!(cudaStreamCreateWithPriority(&mut s, flags, priority); "flags={flags} priority={priority}")?;
        Ok(Stream(s))
    }

    /// The raw handle, still owned by `self`.
    pub fn as_raw(&self) -> raw::cudaStream_t {
        self.0
    }

    /// Gives up ownership of the handle.
    pub fn into_raw(self) -> raw::cudaStream_t {
        let s = self.0;
        std::mem::forget(self);
        s
    }

    /// Takes ownership of a handle made by `into_raw`.
    ///
    /// # Safety
    /// `s` came from `Stream::into_raw` and is not owned by anything else.
    pub unsafe fn from_raw(s: raw::cudaStream_t) -> Stream {
        Stream(s)
    }

    /// Waits for the work queued on this stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: we own a live stream.
        unsafe { synchronize(self.0) }
    }

    /// Destroys the stream, reporting a failure (dropping cannot).
    pub fn destroy(self) -> Result<()> {
        let s = self.into_raw();
        cuda!(cudaStreamDestroy(s); "stream={s:p}")
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: we own the handle. A failure here has nowhere to go; `destroy` reports it.
        unsafe { raw::cudaStreamDestroy(self.0) };
    }
}

/// (least, greatest) stream priorities of the current device (`cudaDeviceGetStreamPriorityRange`;
/// greatest is the smaller number).
pub fn priority_range() -> Result<(i32, i32)> {
    let (mut least, mut greatest) = (0, 0);
    cuda!(cudaDeviceGetStreamPriorityRange(&mut least, &mut greatest))?;
    Ok((least, greatest))
}

/// True when all work queued on `s` has completed (`cudaStreamQuery`).
///
/// # Safety
/// `s` is NULL or a live stream.
pub unsafe fn query(s: raw::cudaStream_t) -> Result<bool> {
    let rc = crate::error::CudaError::from_raw(raw::cudaStreamQuery(s));
    if rc == crate::error::CudaError::NOT_READY {
        return Ok(false);
    }
    crate::error::CudaError::check(rc.raw())
        .map(|()| true)
        .map_err(|e| crate::Error::cuda("cudaStreamQuery", e, format!("stream={s:p}")))
}

/// Makes future work on `s` wait until `event` has completed (`cudaStreamWaitEvent`).
///
/// # Safety
/// `s` is NULL or a live stream; `event` is a live event.
pub unsafe fn wait_event(s: raw::cudaStream_t, event: raw::cudaEvent_t) -> Result<()> {
    cuda!(cudaStreamWaitEvent(s, event, 0); "stream={s:p} event={event:p}")
}

/// Waits for the work queued on `s` (NULL: the legacy default stream).
///
/// # Safety
/// `s` is NULL or a live stream.
pub unsafe fn synchronize(s: raw::cudaStream_t) -> Result<()> {
    cuda!(cudaStreamSynchronize(s); "stream={s:p}")
}

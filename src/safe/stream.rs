//! CUDA streams. `Stream` owns one and destroys it when dropped (`into_raw`/`from_raw` move the
//! ownership); the free functions take a raw handle (NULL: the legacy default stream).

use crate::cudart::calls::{self as cudart, Detail, EventHandle, StreamHandle};
use crate::error::Result;

/// An owned CUDA stream created with `cudaStreamCreate`: an ordinary blocking stream, ordered
/// with the legacy default stream as CUDA defines.
#[derive(Debug)]
pub struct Stream(StreamHandle);

/// What an owned CUDA handle's type (`Stream`, `Event`: a tuple struct over the raw handle)
/// has besides its own operations: `Send` and `Sync`, `as_raw`, `into_raw`, `from_raw`,
/// `destroy` (reports a failure) and `Drop` (cannot). `$what` names the handle in `destroy`'s
/// detail (`stream=0x...`) and documentation; `$destroy` is the cudart call.
macro_rules! owned_handle {
    ($t:ident, $handle:ty, $destroy:path, $what:literal) => {
        // SAFETY: CUDA streams and events may be used from any host thread.
        unsafe impl Send for $t {}
        // SAFETY: every operation on a stream or event handle is thread-safe in cudart.
        unsafe impl Sync for $t {}

        impl $t {
            /// The raw handle, still owned by `self`.
            pub fn as_raw(&self) -> $handle {
                self.0
            }

            /// Gives up ownership of the handle.
            pub fn into_raw(self) -> $handle {
                let h = self.0;
                std::mem::forget(self);
                h
            }

            /// Takes ownership of a handle made by `into_raw`.
            ///
            /// # Safety
            #[doc = concat!(
                "`h` came from `", stringify!($t), "::into_raw` and is not owned by anything else."
            )]
            pub unsafe fn from_raw(h: $handle) -> $t {
                $t(h)
            }

            #[doc = concat!("Destroys the ", $what, ", reporting a failure (dropping cannot).")]
            pub fn destroy(self) -> $crate::error::Result<()> {
                let h = self.into_raw();
                // SAFETY: we owned the live handle; ownership ends here.
                unsafe { $destroy(h) }.detail(|| format!(concat!($what, "={:p}"), h))
            }
        }

        impl Drop for $t {
            fn drop(&mut self) {
                // SAFETY: we own the handle (a failure has nowhere to go; `destroy` reports it).
                let _ = unsafe { $destroy(self.0) };
            }
        }
    };
}
pub(crate) use owned_handle;

owned_handle!(Stream, StreamHandle, cudart::stream_destroy, "stream");

impl Stream {
    /// Creates a stream on the calling thread's current device.
    pub fn new() -> Result<Stream> {
        Ok(Stream(cudart::stream_create()?))
    }

    /// Creates a stream with `cudaStreamCreateWithPriority`: `non_blocking` streams do not
    /// synchronize with the legacy default stream; lower `priority` numbers run first (see
    /// `priority_range`).
    pub fn with_flags(non_blocking: bool, priority: i32) -> Result<Stream> {
        let flags = if non_blocking {
            cudart::STREAM_NON_BLOCKING
        } else {
            cudart::STREAM_DEFAULT
        };
        let s = cudart::stream_create_with_priority(flags, priority)
            .detail(|| format!("flags={flags} priority={priority}"))?;
        Ok(Stream(s))
    }

    /// Waits for the work queued on this stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: we own a live stream.
        unsafe { synchronize(self.0) }
    }
}

/// (least, greatest) stream priorities of the current device (`cudaDeviceGetStreamPriorityRange`;
/// greatest is the smaller number).
pub fn priority_range() -> Result<(i32, i32)> {
    Ok(cudart::device_get_stream_priority_range()?)
}

/// True when all work queued on `s` has completed (`cudaStreamQuery`).
///
/// # Safety
/// `s` is NULL or a live stream.
pub unsafe fn query(s: StreamHandle) -> Result<bool> {
    // SAFETY: `s` is NULL or a live stream (this function's contract).
    unsafe { cudart::stream_query(s) }.detail(|| format!("stream={s:p}"))
}

/// Makes future work on `s` wait until `event` has completed (`cudaStreamWaitEvent`).
///
/// # Safety
/// `s` is NULL or a live stream; `event` is a live event.
pub unsafe fn wait_event(s: StreamHandle, event: EventHandle) -> Result<()> {
    // SAFETY: `s` is NULL or a live stream, `event` a live event (this function's contract).
    unsafe { cudart::stream_wait_event(s, event) }
        .detail(|| format!("stream={s:p} event={event:p}"))
}

/// Waits for the work queued on `s` (NULL: the legacy default stream).
///
/// # Safety
/// `s` is NULL or a live stream.
pub unsafe fn synchronize(s: StreamHandle) -> Result<()> {
    // SAFETY: `s` is NULL or a live stream (this function's contract).
    unsafe { cudart::stream_synchronize(s) }.detail(|| format!("stream={s:p}"))
}

/// The device `s` belongs to (`cudaStreamGetDevice`).
///
/// # Safety
/// `s` is a live stream.
pub unsafe fn device_of(s: StreamHandle) -> Result<i32> {
    // SAFETY: `s` is a live stream (this function's contract).
    unsafe { cudart::stream_get_device(s) }.detail(|| format!("stream={s:p}"))
}

/// True for a stream made with `cudaStreamNonBlocking` (not ordered with the legacy stream).
///
/// # Safety
/// `s` is a live stream.
pub unsafe fn is_non_blocking(s: StreamHandle) -> Result<bool> {
    // SAFETY: `s` is a live stream (this function's contract).
    let flags = unsafe { cudart::stream_get_flags(s) }.detail(|| format!("stream={s:p}"))?;
    Ok(flags & cudart::STREAM_NON_BLOCKING != 0)
}

//! The stream a staged copy queues its work on. A copy on the legacy stream asks before each use
//! of it (each chunk's DMA and event, each wait, each query) whether a blocking stream of the
//! device captures now, whoever began the capture; once one does, the rest of the copy moves to
//! the device's side stream, ordered after what the copy already queued on the legacy stream,
//! and the copy is complete when it returns (later work on the legacy stream could not be
//! ordered after the side stream's). A capture the host begins between an answer and the use
//! it allowed still meets that use: the window is one cudart call (docs/graphs.md).

use crate::cache::legacy_stream::{self, Usable};
use crate::cudart::calls::{EventHandle, StreamHandle};
use crate::error::{CudaError, Error, Result};
use crate::safe::capture::Relaxed;
use std::cell::Cell;

/// The stream of one staged copy, as its calling thread queues work.
pub(super) struct Lane {
    stream: Cell<StreamHandle>,
    device: i32,
    moved: Cell<bool>,
    /// The event this copy last recorded on the legacy stream: the side stream waits for it.
    last_on_legacy: Cell<Option<EventHandle>>,
    /// On the legacy stream, the whole copy runs in relaxed capture mode: its event queries and
    /// waits are then allowed while another thread captures in global mode.
    _relaxed: Option<Relaxed>,
}

impl Lane {
    /// The lane of a copy on `stream` (NULL: the legacy stream) of `device`, the current device
    /// when `stream` is NULL.
    pub(super) fn new(stream: StreamHandle, device: i32) -> Lane {
        Lane {
            stream: Cell::new(stream),
            device,
            moved: Cell::new(false),
            last_on_legacy: Cell::new(None),
            _relaxed: stream.is_null().then(Relaxed::new),
        }
    }

    /// The stream for the next use and, on the legacy stream, the permission to hold while
    /// queuing there. Moves the copy to the side stream when the legacy stream may not be used.
    pub(super) fn next(&self) -> Result<(StreamHandle, Option<Usable>)> {
        let stream = self.stream.get();
        if !stream.is_null() {
            return Ok((stream, None));
        }
        if let Some(permission) = legacy_stream::usable(self.device)? {
            return Ok((stream, Some(permission)));
        }
        Ok((self.move_now()?, None))
    }

    /// Moves the copy to the side stream now, ordered after what it queued on the legacy
    /// stream and after the library's work pending there before it; the side stream.
    pub(super) fn move_now(&self) -> Result<StreamHandle> {
        let side = legacy_stream::side_stream_ordered(self.device)?;
        if let Some(event) = self.last_on_legacy.take() {
            // SAFETY: the side stream is live and of `device`, as the event (recorded by this
            // copy on that device's legacy stream, not destroyed while the copy runs).
            unsafe { crate::safe::stream::wait_event(side, event) }?;
        }
        self.stream.set(side);
        self.moved.set(true);
        Ok(side)
    }

    /// True when `e` is the legacy stream refusing work because a capture began after the
    /// lane's answer (a race that a capture the host begins itself can win): the call queued
    /// nothing, and cudart's last error is cleared.
    pub(super) fn lost_race(&self, e: &Error) -> bool {
        let lost =
            self.stream.get().is_null() && e.cuda_error() == CudaError::STREAM_CAPTURE_IMPLICIT;
        if lost {
            crate::safe::runtime::take_last_cuda_error();
        }
        lost
    }

    /// Waits until the legacy stream may be used again (the capture that caught the copy's last
    /// DMA there has ended), at most 30 s.
    pub(super) fn wait_usable(&self) -> Result<()> {
        let device = self.device;
        legacy_stream::wait_usable(device, "cudaEventRecord", |secs| {
            format!(
                "a chunk's DMA was queued on the legacy stream of device {device} just before \
                 another thread began a capture there, which has not ended in {secs} s: its \
                 staging buffer cannot be known free (it stays allocated)"
            )
        })
        .map(drop)
    }

    /// Notes an event just recorded on `stream` (as `next` gave it).
    pub(super) fn recorded(&self, stream: StreamHandle, event: Option<EventHandle>) {
        if stream.is_null() && event.is_some() {
            self.last_on_legacy.set(event);
        }
    }

    /// The event this copy last recorded on the legacy stream, if any.
    pub(super) fn last_on_legacy(&self) -> Option<EventHandle> {
        self.last_on_legacy.get()
    }

    /// True once the copy left the legacy stream: it must be complete on return.
    pub(super) fn moved(&self) -> bool {
        self.moved.get()
    }
}

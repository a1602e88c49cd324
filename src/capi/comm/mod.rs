//! The communicator's C API (`llaisysNvidiaComm*`, the collectives, `llaisysNvidiaGroup*`,
//! declared in the last block of `csrc/llaisys_runtime.h`) and its llaisys-style function table
//! (`LlaisysNvidiaCommAPI`). Same error model as the rest of the status API (`api::status`):
//! every function returns a status (0 success), sets the thread's last error on failure (with
//! the NCCL code in `llaisysNvidiaLastNcclError`) and never calls the error handler. The bodies
//! are in `ops::comm`.

mod collectives;
mod lifecycle;
mod table;

pub use collectives::*;
pub use lifecycle::*;
pub use table::*;

use super::api::Failure;
use super::policy::{self, Record};
use crate::nccl::Error;
use std::os::raw::{c_char, c_int, c_void};

/// `llaisysNvidiaCommId`: NCCL's unique id as 128 opaque bytes, to send to every rank.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CommId {
    /// The bytes.
    pub internal: [c_char; crate::ops::comm::UNIQUE_ID_BYTES],
}

/// `llaisysNvidiaComm_t`: a communicator handle.
pub type Comm = *mut c_void;
/// `llaisysStream_t`.
pub type Stream = *mut c_void;

/// A communicator failure as the thread's last error: the crate's own errors as everywhere,
/// NCCL's with their `ncclResult_t` and the failing call.
impl Failure for Error {
    fn record(&self, function: &str) -> Record {
        if let Error::Base(base) = self {
            return Record::new(function, base);
        }
        let device = if matches!(self, Error::Unavailable { .. }) {
            -1
        } else {
            crate::safe::device::current_or_unknown()
        };
        Record::with_nccl(
            self.status(),
            self.cuda_code(),
            self.nccl_code(),
            device,
            function,
            self.call(),
            self,
        )
    }
}

/// The `ncclResult_t` of the calling thread's last error (0 when none, or when no NCCL call
/// failed; 7 `ncclInProgress` for a timeout).
#[no_mangle]
pub extern "C" fn llaisysNvidiaLastNcclError() -> c_int {
    policy::last().map_or(0, |r| r.nccl_error)
}

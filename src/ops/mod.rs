//! The operations layer: the body of every function of the two C faces, written once. Each
//! takes the C arguments, checks them (`validate`), keeps the caches' books, dispatches to the
//! caches, the pageable fast path or plain cudart, and returns a `Result`; the llaisys table
//! (`capi::table`) and the status API (`capi::api`) differ only in what they do with an error.
//!
//! This is also the crate's Rust API for the table's behaviour (the doctor's smoke test calls it).

pub(crate) mod capturing;
pub mod comm;
pub mod copies;
pub mod device;
pub mod graphs;
pub mod memory;
mod oom;
pub mod runtime_library;
pub mod snapshot;
pub mod streams;
pub(crate) mod validate;

pub use copies::{memcpy_async, memcpy_peer, memcpy_sync, KIND_CHECK_MIN_BYTES};
pub use device::{device_count, device_count_checked, device_synchronize, init_device, set_device};
pub use memory::{free_device, free_host, malloc_device, malloc_host, release_cached};
pub use streams::{create_stream, destroy_stream, stream_synchronize};

use crate::error::{Error, Result};

/// A failed CUDA call's error with its detail rewritten (its call and code kept).
trait Redetail<T> {
    fn redetail(self, detail: impl FnOnce(&Error) -> String) -> Result<T>;
}

impl<T> Redetail<T> for Result<T> {
    // The error records the caller's line, as an error made at the call site would.
    #[track_caller]
    fn redetail(self, detail: impl FnOnce(&Error) -> String) -> Result<T> {
        match self {
            Ok(v) => Ok(v),
            Err(e) => Err(Error::cuda(e.call(), e.cuda_error(), detail(&e))),
        }
    }
}

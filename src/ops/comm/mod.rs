//! The communicator's operations: the body of every C function of `capi::comm`, once; the
//! collectives and point-to-point calls share one body, driven by each call's shape from the
//! one list (`nccl::list`). Each checks its input before NCCL is called (`collective` lists the
//! checks), keeps the caches correct, and polls what NCCL answers with `ncclInProgress`.
//!
//! # The caches (the contract: the header's communicator block)
//! - A device block freed (`cudaFreeAsync` on the legacy stream) behind a collective queued on the
//!   legacy stream or a blocking stream is reused only after the collective ran: NCCL queues its
//!   kernels on the caller's stream, or makes that stream wait for its own. On a NON-blocking
//!   stream of ours, when a buffer is one of our device blocks, the call records an event there
//!   and makes the device's legacy stream wait for it (two CUDA calls, only in that case).
//! - Pinned blocks given to a collective are noted as used on its stream, as `memcpy_async` does.
//! - With several devices in use, buffers of another device than the stream's are ordered as
//!   copies are (`cache::cross`).
//!
//! # Timeouts
//! Every wait on NCCL is bounded by the communicator's timeout (the header says which); past it,
//! or on an asynchronous NCCL error, the communicator is aborted: its handle answers every call
//! with an error until it is destroyed.

mod collectives;
mod elements;
mod group;
mod lifecycle;
mod registry;
mod timeout;

pub use collectives::{collective, Args};
pub use elements::{dtype, op};
pub use group::{group_end, group_start};
pub use lifecycle::{
    abort, async_error, destroy, init_all, init_rank, shape, synchronize, unique_id, version,
    UNIQUE_ID_BYTES,
};
pub use timeout::{set_timeout, timeout, DEFAULT_TIMEOUT_MS, TIMEOUT_VAR};

//! The communicator's operations: the body of every C function of `capi::comm`, once; the
//! collectives and point-to-point calls share one body, driven by each call's shape from the
//! one list (`nccl::list`). Each checks its input before NCCL is called (`collective` lists the
//! checks), keeps the caches correct (the contract: the header's communicator block and
//! docs/multi-gpu.md, "With our caches"; on a non-blocking stream of ours the legacy stream waits
//! for an event only when a buffer is one of our device blocks), and polls what NCCL answers
//! with `ncclInProgress`. Every wait on NCCL is bounded by the communicator's timeout; past it,
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

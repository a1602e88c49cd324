//! The communicator's operations: the body of every C function of `capi::comm`, once; the
//! collectives and point-to-point calls share one body, driven by each call's shape from the
//! one list (`nccl::list`). Each checks its input before NCCL is called (NULL, a count whose
//! bytes overflow, an unknown type or operation, a root/peer/rank out of range, a destroyed or
//! foreign communicator, a stream of another device than the communicator's, more bytes than
//! one of our device blocks holds), maps llaisys's element types to NCCL's, keeps the caches
//! correct, and polls what NCCL answers with `ncclInProgress` up to the communicator's timeout.
//!
//! One file per job: `elements` (types and reductions), `registry` (handles and what a call
//! needs to use one), `lifecycle` (version, ids, joining, shape, state, synchronize, destroy,
//! abort), `collectives` (every collective by its shape), `group` (groups per thread),
//! `timeout` (the timeout of new communicators).
//!
//! # Handles
//! A communicator handle is a token of our registry (never reused in a process), not a pointer:
//! one that was destroyed, or any other value (a raw `ncclComm_t` of another library, garbage) is
//! refused with a clear error. NCCL's own object stays inside.
//!
//! # The caches
//! - Device memory (`malloc_device`) is freed with `cudaFreeAsync` on the legacy default stream.
//!   A collective queued on the legacy stream, or on a blocking stream (every stream of
//!   `create_stream`, and of `llaisysNvidiaStreamCreate` without the non-blocking flag), is
//!   ordered before any later operation on the legacy stream, so a block freed behind it returns
//!   to the pool (and is handed out again) only after the collective has run. NCCL queues its
//!   kernels on the caller's stream (or makes that stream wait for its own), so this holds for
//!   everything NCCL does for the call. On a NON-blocking stream of ours, the legacy stream is
//!   not ordered after it: there, when a buffer of the call is one of our device blocks, the
//!   call records an event on the stream and makes the legacy stream of the communicator's
//!   device wait for it (two CUDA calls, only in that case).
//! - Pinned host memory (`malloc_host`) given to a collective (NCCL reads and writes it through
//!   its device mapping) is noted as used on the call's stream, as `memcpy_async` does: free_host
//!   then records an event there and the block is reused only once it has completed.
//! - With several devices in use, buffers of another device than the stream's are ordered as
//!   copies are (`cache::cross`).
//!
//! # Timeouts
//! Every wait on NCCL (initialisation, a call answered with `ncclInProgress`, a group's end,
//! finalize, `llaisysNvidiaCommSynchronize`) is bounded by the communicator's timeout: the value
//! of `llaisysNvidiaCommSetTimeout`, else `LLAISYS_NVIDIA_NCCL_TIMEOUT_MS`, else 300000 ms (0: no
//! limit), taken when the communicator is made. Past it, or on an asynchronous NCCL error, the
//! communicator is aborted: its handle stays known but answers every call with an error until
//! it is destroyed.

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

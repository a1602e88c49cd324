//! The operations layer: the body of every function of the two C faces, written once. Each
//! takes the C arguments, checks them (`validate`), keeps the caches' books, dispatches to the
//! caches, the pageable fast path or plain cudart, and returns a `Result`; the llaisys table
//! (`capi::table`) and the status API (`capi::api`) differ only in what they do with an error.
//!
//! One file per area: `device`, `streams` (streams and events), `memory`, `copies`, `comm` (the
//! communicator over NCCL), `graphs` (capture and CUDA graphs), `runtime_library` (which CUDA
//! runtime is in use and why); the checks and handle
//! registries in `validate`; what every operation does while a stream captures in `capturing`. This is also the crate's Rust API for the table's
//! behaviour (the doctor's smoke test calls it).

pub(crate) mod capturing;
pub mod comm;
pub mod copies;
pub mod device;
pub mod graphs;
pub mod memory;
pub mod runtime_library;
pub mod streams;
pub(crate) mod validate;

pub use copies::{memcpy_async, memcpy_peer, memcpy_sync, KIND_CHECK_MIN_BYTES};
pub use device::{device_count, device_count_checked, device_synchronize, init_device, set_device};
pub use memory::{free_device, free_host, malloc_device, malloc_host, release_cached};
pub use streams::{create_stream, destroy_stream, stream_synchronize};

//! NCCL, loaded at run time: the communicator's lowest layers.
//!
//! - [`sys`]: bindgen over NCCL's own `nccl.h` (build/nccl.rs): types, constants and function
//!   *types* only; nothing links NCCL (`readelf -d` of the library names no libnccl).
//! - [`error`]: [`NcclResult`] (a newtype over `ncclResult_t`, so a code of a newer NCCL is just a
//!   value) and the communicator's [`Error`]: a crate error (CUDA, bad input), a failed NCCL call
//!   (with `ncclGetLastError`'s text), NCCL unavailable, or a timeout.
//! - [`loader`]: finds (through `libsearch`) and `dlopen`s `libnccl.so.2` on first use (a
//!   process that never uses the communicator never loads it) and resolves every function one
//!   by one: an older NCCL serves what it has, and a missing function is a status naming it,
//!   never a panic.
//! - [`api`]: one thin `unsafe fn` per NCCL call, with its `# Safety` section.
//! - [`communicator`]: the safe layer: [`communicator::Communicator`] (RAII: dropped means
//!   aborted), non-blocking initialisation polled up to a timeout, then aborted.
//!
//! `ops::comm` (checks, registry, caches) and `capi::comm` (the C exports) sit above.

pub mod api;
pub mod collectives;
pub mod communicator;
pub mod error;
pub mod list;
pub mod loader;
pub mod sys;

pub use error::{Error, NcclResult, Result};

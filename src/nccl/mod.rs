//! NCCL, loaded at run time: the communicator's lowest layers.
//!
//! - [`sys`]: bindgen over NCCL's `nccl.h`: types, constants and function *types* only; nothing
//!   links NCCL (`readelf -d` of the library names no libnccl).
//! - [`error`]: [`NcclResult`] and the communicator's [`Error`].
//! - [`loader`]: `dlopen`s `libnccl.so.2` on first use and resolves every function one by one (an
//!   older NCCL serves what it has; a missing function is a status naming it).
//! - [`list`], [`collectives`], [`api`]: the calls, one thin `unsafe fn` each.
//! - [`communicator`]: the safe layer, [`communicator::Communicator`] (dropped means aborted).
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

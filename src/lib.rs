//! llaisys-nvidia: the NVIDIA CUDA backend of llaisys-style C/C++ AI frameworks.
//!
//! The folders are the layers, each using only the ones before it (`tests/layers.rs` checks
//! every `crate::`, `super::` and `self::` path of src/ against this order, for loops, and that
//! no module names an item of this crate root):
//! 0. `util` (the lock helper, switches from the environment, the caches' address hasher) and
//!    `libsearch` (finding and opening a shared library at run time: a variable, the loader's
//!    path, a build-time folder, the Python wheels, each place recorded).
//! 1. `cudart`: CUDA's runtime. `cudart::loaded` (with the `loaded` feature: which libcudart to
//!    open, and each function's symbol on first use), `cudart::sys` (the bindgen output over
//!    `wrapper.h`), `cudart::calls` (one thin function per cudart call, each with its safety
//!    argument; with [`error`] the only user of `sys`). [`error`]: [`CudaError`], [`Error`].
//! 2. `safe`: plain cudart with RAII types, no cache and no fast path ([`runtime`], [`device`],
//!    [`stream`], [`event`], [`memory`], [`pointer`](mod@pointer), [`copy`], and the crate's own
//!    memory kinds, pools, captures and graphs); `nccl`: NCCL loaded at run time, one thin
//!    function per NCCL call, the RAII communicator.
//! 3. Caches and fast paths: `cache` (the device pool cache, the pinned host cache, graph pools,
//!    cross-device ordering, and `cache::legacy_stream`: when the legacy stream may be used
//!    during captures), `pageable` (staged copies of pageable memory, with its pinned pages).
//! 4. [`ops`]: the body of every C function, once: checks and handle registries, cache
//!    bookkeeping, dispatch. `ops::memory::malloc_device` is what malloc_device does; the
//!    communicator's are `ops::comm`.
//! 5. `capi`: the two C faces, which differ only in error policy: the llaisys table
//!    (`capi::table`) and the status API (`capi::api`), the communicator's (`capi::comm`), the
//!    error getters (`capi::exports`), the policy (`capi::policy`); declared by hand in
//!    `csrc/llaisys_runtime.h`, every type and constant of which `tests/header_abi.rs` checks
//!    against [`ffi`].
//!
//! The public Rust API is small on purpose: the error types, the safe layer's types and
//! functions a tool needs ([`runtime`], [`device`], [`Stream`], [`Event`], [`DeviceBuffer`],
//! [`PinnedBuffer`], [`copy`]), re-exported here; the table's behaviour as Rust functions
//! ([`ops`]); and the C ABI's items ([`ffi`]).
//!
//! `llaisys-nvidia doctor`, the command-line program, is its own crate (`doctor/` of the
//! workspace) above this library's public Rust API.
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

// The link-mode features are additive: `loaded` wins over `dynamic`, which wins over `static`
// (build.rs).
#[cfg(not(any(feature = "static", feature = "dynamic", feature = "loaded")))]
compile_error!("enable one of the features `static` (libcudart_static.a, the default), `dynamic` (shared libcudart) or `loaded` (libcudart loaded at run time)");

// Layers 0 and 1: the helpers, finding libraries, CUDA's runtime (the loaded runtime, the
// bindings, one function per call), the errors.
pub(crate) mod cudart;
pub mod error;
pub(crate) mod libsearch;
pub(crate) mod util;

/// The raw cudart bindings (bindgen output over `cuda_runtime.h`), for tests and tools that want
/// CUDA itself as an independent witness. The crate's own code above `cudart` never uses them.
#[doc(hidden)]
pub mod sys {
    pub use crate::cudart::sys::*;
}

// Layer 2: the safe layer, NCCL's (the communicator's lowest layers), and NVML.
pub(crate) mod nccl;
pub mod nvml;
pub(crate) mod safe;

// Layer 3: caches and fast paths.
pub(crate) mod cache;
pub(crate) mod pageable;

// Layer 4: the operations.
pub mod ops;

// Layer 5: the C faces.
pub(crate) mod capi;

pub use error::{CudaError, Error, ErrorKind, OutOfMemory, Result};
pub use safe::copy::{self, MemcpyKind};
pub use safe::event::{self, Event};
pub use safe::memory::{self, DeviceBuffer, PinnedBuffer};
pub use safe::stream::{self, Stream};
pub use safe::{device, pointer, runtime};

/// The C ABI's items, as declared in `csrc/llaisys_runtime.h`: every `repr(C)` type, the table,
/// and every exported `llaisysNvidia*` function (callable from Rust too).
pub mod ffi {
    pub use crate::cache::AllocatorStats;
    pub use crate::capi::api::copies::*;
    pub use crate::capi::api::device::*;
    pub use crate::capi::api::graphs::*;
    pub use crate::capi::api::memory::*;
    pub use crate::capi::api::streams::*;
    pub use crate::capi::api::versions::*;
    pub use crate::capi::api::SUCCESS;
    pub use crate::capi::comm::*;
    pub use crate::capi::exports::*;
    pub use crate::capi::policy::{ErrorHandler, LlaisysNvidiaError};
    pub use crate::capi::table::{
        LlaisysRuntimeAPI, LlaisysStream, LLAISYS_DEVICE_CPU, LLAISYS_DEVICE_NVIDIA,
        LLAISYS_DEVICE_TYPE_COUNT, TABLE,
    };
    pub use crate::error::OutOfMemory;
    pub use crate::nccl::error::{STATUS_NCCL, STATUS_NCCL_UNAVAILABLE, STATUS_TIMEOUT};
    pub use crate::ops::comm::{dtype, op, UNIQUE_ID_BYTES};
    /// `LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC`.
    pub const EVENT_BLOCKING_SYNC: u32 = crate::ops::streams::EVENT_BLOCKING_SYNC;
    /// `LLAISYS_NVIDIA_EVENT_DISABLE_TIMING`.
    pub const EVENT_DISABLE_TIMING: u32 = crate::ops::streams::EVENT_DISABLE_TIMING;
}

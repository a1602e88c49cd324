//! llaisys-nvidia: the NVIDIA CUDA backend of llaisys-style C/C++ AI frameworks.
//!
//! Layers, each using only the layers before it (a test, `tests/layers.rs`, checks every
//! `crate::` path of src/ against this order and for loops):
//! 0. What loads libraries at run time, below the bindings: `libsearch` (finding and opening a
//!    shared library: a variable, the loader's path, a build-time folder, the Python wheels, each
//!    place recorded) and, with the `loaded` feature, `cudart_lib` (which CUDA runtime to load,
//!    and each function's symbol on first use). Then `raw`: the bindgen output over `wrapper.h`
//!    (`cuda_runtime.h`), and with `loaded` the dispatch build.rs writes over it.
//! 1. [`error`] ([`CudaError`], [`Error`]), `cudart` (one thin function per cudart call, each
//!    with its safety argument: the only user of `raw` besides `error`), `sync` (the lock
//!    helper), `env` (switches), `hash` (the address hasher of the caches' maps).
//! 2. The safe layer, plain cudart with RAII types: [`runtime`] (versions, device count, build
//!    facts), [`device`], [`stream`], [`event`], [`memory`] (device and pinned), `memory_kinds`
//!    (managed, mapped, registered, memset), `pointer` (attributes), `pool` (stream-ordered
//!    memory pools), [`copy`] (plain copies).
//! 3. Caches and fast paths: `cache` (the device pool cache, the pinned host cache, the
//!    cross-device ordering, the devices in use), `pageable` (staged copies of pageable memory).
//! 4. [`ops`]: the body of every C function, once: checks and handle registries
//!    (`ops::validate`), cache bookkeeping, dispatch. `ops::memory::malloc_device` is what
//!    malloc_device does.
//!    The communicator over NCCL has its own modules in these layers: `nccl` (layers 0-2:
//!    bindings from nccl.h, the run-time loader, the RAII communicator), `ops::comm`, and
//!    `capi::comm`.
//! 5. `capi`: the two C faces, which differ only in error policy: the llaisys table
//!    (`capi::table`) and the status API (`capi::api`), the error getters (`capi::exports`), the
//!    policy (`capi::policy`); declared by hand in `csrc/llaisys_runtime.h`, every type and
//!    constant of which `tests/header_abi.rs` checks against [`ffi`].
//!
//! The public Rust API is small on purpose: the error types, the safe layer's types and
//! functions a tool needs ([`runtime`], [`device`], [`Stream`], [`Event`], [`DeviceBuffer`],
//! [`PinnedBuffer`], [`copy`]), the table's behaviour as Rust functions ([`ops`]), and the C
//! ABI's items ([`ffi`]).
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

// Layer 0 and 1: CUDA's runtime (the loaded runtime, the bindings, one function per call),
// the errors, the helpers.
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

// Layer 2: the safe layer, and NCCL's (the communicator's lowest layers).
pub(crate) mod nccl;
pub(crate) mod safe;

// Layer 3: caches and fast paths.
pub(crate) mod cache;
pub(crate) mod pageable;

// Layer 4: the operations.
pub mod ops;

// Layer 5: the C faces.
pub(crate) mod capi;

pub use error::{CudaError, Error, ErrorKind, Result};
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
    pub use crate::nccl::error::{STATUS_NCCL, STATUS_NCCL_UNAVAILABLE, STATUS_TIMEOUT};
    pub use crate::ops::comm::{dtype, op, UNIQUE_ID_BYTES};
    /// `LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC`.
    pub const EVENT_BLOCKING_SYNC: u32 = crate::ops::streams::EVENT_BLOCKING_SYNC;
    /// `LLAISYS_NVIDIA_EVENT_DISABLE_TIMING`.
    pub const EVENT_DISABLE_TIMING: u32 = crate::ops::streams::EVENT_DISABLE_TIMING;
}

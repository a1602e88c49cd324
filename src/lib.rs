//! llaisys-nvidia: the NVIDIA CUDA backend of llaisys-style C/C++ AI frameworks.
//!
//! Module map, one direction of dependency (each layer calls only the one below):
//! - [`raw`]: the bindgen output over `wrapper.h` (`cuda_runtime.h`), nothing else.
//! - [`error`]: [`CudaError`] (newtype over `cudaError_t`) and [`Error`] (which call, which
//!   arguments, where).
//! - safe layer: [`runtime`] (versions, device count, build facts), [`device`], [`stream`],
//!   [`event`], [`memory`] (device and pinned), [`memory_kinds`] (managed, mapped, registered,
//!   memset, pointer attributes), [`copy`].
//! - [`cache`]: the caching allocators behind malloc/free of the table (device pool, pinned
//!   host blocks reused after event completion), with statistics; [`pageable`]: fast staged
//!   copies between pageable host memory and the device.
//! - [`capi`]: the llaisys runtime table, its error policy, the checks of hostile input, the
//!   status-returning API, and the exported C symbols declared in `csrc/llaisys_runtime.h`.
//! - the communicator over NCCL: `nccl` (bindings from nccl.h, the run-time loader, the RAII
//!   communicator), [`ops::comm`] (checks, registry, caches), `capi::comm` (the C exports).
//! - [`doctor`]: `llaisys-nvidia doctor`, above the C ABI.
//! - `src/bin/llaisys-nvidia.rs`: the command-line program.
#![warn(missing_docs)]

#[cfg(all(feature = "static", feature = "dynamic"))]
compile_error!("features `static` and `dynamic` are both on: pick one (`--no-default-features --features dynamic` for the shared libcudart)");
#[cfg(not(any(feature = "static", feature = "dynamic")))]
compile_error!("enable one of the features `static` (libcudart_static.a, the default) or `dynamic` (shared libcudart)");

#[macro_use]
pub mod error;
pub mod cache;
pub mod capi;
pub mod copy;
pub mod device;
pub mod doctor;
pub mod event;
pub mod memory;
pub mod memory_kinds;
pub(crate) mod nccl;
pub mod ops;
pub mod pageable;
pub mod raw;
pub mod runtime;
pub mod stream;

pub use error::{CudaError, Error, ErrorKind, Result};

//! The operations layer: one body per C function, with the checks of bad input, the cache
//! bookkeeping and the dispatch; the C faces (`capi`) only convert.
//!
//! - [`comm`]: the communicator over NCCL.

pub mod comm;

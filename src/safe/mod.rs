//! The safe layer: plain cudart with RAII types, no cache and no fast path.

pub(crate) mod capture;
pub mod copy;
pub mod device;
pub mod event;
pub(crate) mod graph;
pub mod memory;
pub(crate) mod memory_kinds;
pub mod pointer;
pub(crate) mod pool;
pub mod runtime;
pub mod stream;

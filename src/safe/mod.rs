//! The safe layer: plain cudart with RAII types, no cache and no fast path.
//! [`runtime`] (versions, device count, build facts), [`device`], [`stream`], [`event`],
//! [`memory`] (device and pinned), `memory_kinds` (managed, mapped, registered, memset),
//! [`pointer`](mod@pointer) (attributes), `pool` (stream-ordered memory pools), [`copy`]
//! (plain copies), `capture` (stream capture), `graph` (instantiation, launch, update, user
//! objects).

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

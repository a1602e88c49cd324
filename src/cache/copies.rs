//! What a copy (memcpy_sync, memcpy_async, a peer copy) does with the caches' memory: the one
//! door of `ops::copies` into this layer, under the names a copy needs.
//!
//! Before a copy:
//! - where a pointer of ours lives, known without asking the driver: [`pinned_block`] (inside a
//!   live block of malloc_host), [`device_block`] (the size and device of the live block of
//!   malloc_device starting there), and [`device_memory`] (all of a device's memory, the bound
//!   of a copy outside our blocks);
//! - with [`several_devices`] in use, a stream's first use of another device's memory is ordered
//!   after that device's work, and the pair noted for frees ([`order_before_use`]);
//! - whether the legacy stream may be used now ([`usable_current`], [`permit`], [`refused`]),
//!   and the device's [`side_stream`] when it may not.
//!
//! After an asynchronous copy: a pinned block of ours it reads or writes is noted with its
//! stream, so that it is reused only after the copy has run ([`note_pinned_use`]).
//!
//! Re-exports, not wrappers: each is the cache's own function, with no call in between.

pub(crate) use super::cross::{active as several_devices, before_use as order_before_use};
pub(crate) use super::device::{owner as device_block, total_memory as device_memory};
pub(crate) use super::host::{is_ours as pinned_block, record_use as note_pinned_use};
pub(crate) use super::legacy_stream::{permit, refused, side_stream, usable_current};

//! What a copy (memcpy_sync, memcpy_async, a peer copy) does with the caches' memory: the one
//! door of `ops::copies` into this layer, under the names a copy needs.
//!
//! Before a copy: where a pointer of ours lives ([`pinned_block`], [`device_block`],
//! [`device_memory`]); with [`several_devices`], ordering a stream's first use of another
//! device's memory ([`order_before_use`]); whether the legacy stream may be used
//! ([`usable_current`], [`permit`], [`refused`], else [`side_stream_ordered`]); after a copy
//! that leaves work pending on the legacy stream, [`fence_after`]. After an asynchronous
//! copy: [`note_pinned_use`], so a pinned block is reused only after the copy has run.

pub(crate) use super::cross::{active as several_devices, before_use as order_before_use};
pub(crate) use super::device::{owner as device_block, total_memory as device_memory};
pub(crate) use super::host::{is_ours as pinned_block, record_use as note_pinned_use};
pub(crate) use super::legacy_stream::{
    fence_after, permit, refused, side_stream_ordered, usable_current,
};

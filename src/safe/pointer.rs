//! What a pointer is: one `cudaPointerGetAttributes` query, as a Rust value.

use crate::cudart::calls::{self as cudart, Detail};
use crate::error::Result;
use std::os::raw::c_void;

/// What kind of memory a pointer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum MemoryKind {
    /// Host memory CUDA does not know (pageable).
    Unregistered = 0,
    /// Pinned or registered host memory.
    Host = 1,
    /// Device memory.
    Device = 2,
    /// Managed memory.
    Managed = 3,
}

/// A pointer's attributes (`cudaPointerGetAttributes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// The kind of memory.
    pub kind: MemoryKind,
    /// The device it belongs to (-1 for unregistered host memory).
    pub device: i32,
    /// Its address for device code (NULL when none).
    pub device_pointer: *mut c_void,
    /// Its address for host code (NULL when none).
    pub host_pointer: *mut c_void,
}

/// Reads the attributes of any address (the address is looked up, never accessed).
pub fn attributes(p: *const c_void) -> Result<Attributes> {
    let a = cudart::pointer_get_attributes(p).detail(|| format!("ptr={p:p}"))?;
    let kind = match a.memory_type {
        cudart::MEMORY_TYPE_HOST => MemoryKind::Host,
        cudart::MEMORY_TYPE_DEVICE => MemoryKind::Device,
        cudart::MEMORY_TYPE_MANAGED => MemoryKind::Managed,
        _ => MemoryKind::Unregistered,
    };
    Ok(Attributes {
        kind,
        device: if kind == MemoryKind::Unregistered {
            -1
        } else {
            a.device
        },
        device_pointer: a.device_pointer,
        host_pointer: a.host_pointer,
    })
}

//! Checks of C-ABI input that CUDA would not catch, or would catch only by crashing: streams we
//! never made (or already destroyed), sizes beyond the address space, and copies whose kind does
//! not match the memory its pointers point to.

use crate::copy::MemcpyKind;
use crate::error::{Error, Result};
use crate::raw;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Live streams of ours and the device each belongs to.
static STREAMS: Mutex<Option<HashMap<usize, i32>>> = Mutex::new(None);
/// Bumped whenever a stream is destroyed: a thread's remembered "this stream is live" is valid
/// only within one epoch.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last (stream, epoch, device) this thread found live.
    static LAST_LIVE: Cell<(usize, u64, i32)> = const { Cell::new((0, u64::MAX, -1)) };
}

/// Takes a stream just made on the current device into the registry (the device counts as in
/// use) and gives up its ownership to the caller of the C API.
pub fn adopt_stream(made: crate::stream::Stream) -> Result<raw::cudaStream_t> {
    let device = crate::device::current()?;
    crate::cache::cross::device_seen(device)?;
    let s = made.into_raw();
    stream_created(s, device);
    Ok(s)
}

/// Records a stream made by create_stream on `device`.
fn stream_created(s: raw::cudaStream_t, device: i32) {
    STREAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(s as usize, device);
}

/// Forgets a stream about to be destroyed and returns its device; `Err` when it is not one of
/// ours (never made by create_stream, or destroyed already).
pub fn stream_destroying(s: raw::cudaStream_t) -> Result<i32> {
    let removed = STREAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(|map| map.remove(&(s as usize)));
    EPOCH.fetch_add(1, Relaxed);
    removed.ok_or_else(|| unknown_stream(s))
}

/// Puts a stream back after its destruction failed.
pub fn stream_restored(s: raw::cudaStream_t, device: i32) {
    stream_created(s, device);
}

/// `Ok` for NULL (the legacy default stream: `None`) and for live streams of create_stream
/// (`Some` of the device the stream belongs to).
pub fn check_stream(s: raw::cudaStream_t) -> Result<Option<i32>> {
    if s.is_null() {
        return Ok(None);
    }
    let epoch = EPOCH.load(Relaxed);
    let (last, at, device) = LAST_LIVE.with(Cell::get);
    if (last, at) == (s as usize, epoch) {
        return Ok(Some(device));
    }
    let device = STREAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|map| map.get(&(s as usize)).copied())
        .ok_or_else(|| unknown_stream(s))?;
    LAST_LIVE.with(|c| c.set((s as usize, epoch, device)));
    Ok(Some(device))
}

fn unknown_stream(s: raw::cudaStream_t) -> Error {
    Error::invalid_argument(format!(
        "stream={s:p} was not made by create_stream or was already destroyed (streams of other \
         libraries are not accepted; NULL means the legacy default stream)"
    ))
}

static EVENTS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// Records an event made by llaisysNvidiaEventCreate.
pub fn event_created(e: raw::cudaEvent_t) {
    EVENTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(e as usize);
}

/// `Ok` for a live event of ours; with `remove` it is forgotten (about to be destroyed).
pub fn check_event(e: raw::cudaEvent_t, remove: bool) -> Result<()> {
    let mut set = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
    let known = match set.as_mut() {
        Some(set) if remove => set.remove(&(e as usize)),
        Some(set) => set.contains(&(e as usize)),
        None => false,
    };
    if known {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "event={e:p} was not made by llaisysNvidiaEventCreate or was already destroyed"
        )))
    }
}

/// Sizes beyond `isize::MAX` cannot describe memory in this process.
pub fn check_size(size: usize) -> Result<()> {
    if size > isize::MAX as usize {
        return Err(Error::invalid_argument(format!(
            "size={size} is larger than any buffer in this process (at most {})",
            isize::MAX
        )));
    }
    Ok(())
}

/// From this size up, copies check that their kind matches the pointers (two attribute
/// queries, under 1% of the copy's time). Smaller ones leave it to CUDA's own checks.
pub const KIND_CHECK_MIN_BYTES: usize = 64 << 10;

/// Where a pointer lives, as far as its kind of copy is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Host,
    Device,
    /// Managed memory: valid on both sides.
    Both,
}

fn side(p: *const c_void) -> Result<Side> {
    // Our own allocations are known without asking the driver.
    if crate::cache::host::is_ours(p) {
        return Ok(Side::Host);
    }
    if crate::cache::device::size_of(p).is_some() {
        return Ok(Side::Device);
    }
    // SAFETY: plain data.
    let mut a: raw::cudaPointerAttributes = unsafe { std::mem::zeroed() };
    match cuda!(cudaPointerGetAttributes(&mut a, p); "ptr={p:p}") {
        Ok(()) => {}
        // No driver or no GPU: there is no device memory at all.
        Err(e)
            if e.cuda_error() == crate::CudaError::INSUFFICIENT_DRIVER
                || e.cuda_error() == crate::CudaError::NO_DEVICE =>
        {
            return Ok(Side::Host)
        }
        Err(e) => return Err(e),
    }
    Ok(match a.type_ {
        raw::cudaMemoryType::cudaMemoryTypeDevice => Side::Device,
        raw::cudaMemoryType::cudaMemoryTypeManaged => Side::Both,
        _ => Side::Host,
    })
}

/// The checks every copy gets before CUDA sees it: its size, and (from
/// `KIND_CHECK_MIN_BYTES` up) that its kind matches its pointers.
pub fn check_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: MemcpyKind,
) -> Result<()> {
    check_size(size)?;
    if size == 0 || dst.is_null() || src.is_null() {
        return Ok(());
    }
    check_kind(dst, src, size, kind)
}

/// Refuses a copy whose kind says host where the pointer is device memory, or the reverse.
fn check_kind(dst: *mut c_void, src: *const c_void, size: usize, kind: MemcpyKind) -> Result<()> {
    if size < KIND_CHECK_MIN_BYTES {
        return Ok(());
    }
    let (want_dst, want_src) = match kind {
        MemcpyKind::H2H => (Side::Host, Side::Host),
        MemcpyKind::H2D => (Side::Device, Side::Host),
        MemcpyKind::D2H => (Side::Host, Side::Device),
        MemcpyKind::D2D => (Side::Device, Side::Device),
    };
    for (name, p, want) in [
        ("dst", dst as *const c_void, want_dst),
        ("src", src, want_src),
    ] {
        let got = side(p)?;
        if got != want && got != Side::Both {
            return Err(Error::invalid_argument(format!(
                "kind={kind:?} but {name}={p:p} is {} memory; nothing was copied",
                if got == Side::Device {
                    "device"
                } else {
                    "host"
                }
            )));
        }
    }
    Ok(())
}

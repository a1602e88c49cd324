//! The communicator's operations: one body per C function of `capi::comm`. Each checks its input
//! before NCCL is called (NULL, a count whose bytes overflow, an unknown type or operation, a
//! root/peer/rank out of range, a destroyed or foreign communicator, a stream of another device
//! than the communicator's, more bytes than one of our device blocks holds), maps llaisys's
//! element types to NCCL's, keeps the caches correct, and polls what NCCL answers with
//! `ncclInProgress` up to the communicator's timeout.
//!
//! # Handles
//! A communicator handle is a token of our registry (never reused in a process), not a pointer:
//! one that was destroyed, or any other value (a raw `ncclComm_t` of another library, garbage) is
//! refused with a clear error. NCCL's own object stays inside.
//!
//! # The caches
//! - Device memory (`malloc_device`) is freed with `cudaFreeAsync` on the legacy default stream.
//!   A collective queued on the legacy stream, or on a blocking stream (every stream of
//!   `create_stream`, and of `llaisysNvidiaStreamCreate` without the non-blocking flag), is
//!   ordered before any later operation on the legacy stream, so a block freed behind it returns
//!   to the pool (and is handed out again) only after the collective has run. NCCL queues its
//!   kernels on the caller's stream (or makes that stream wait for its own), so this holds for
//!   everything NCCL does for the call. On a NON-blocking stream of ours, the legacy stream is
//!   not ordered after it: there, when a buffer of the call is one of our device blocks, the
//!   call records an event on the stream and makes the legacy stream of the communicator's
//!   device wait for it (two CUDA calls, only in that case).
//! - Pinned host memory (`malloc_host`) given to a collective (NCCL reads and writes it through
//!   its device mapping) is noted as used on the call's stream, as `memcpy_async` does: free_host
//!   then records an event there and the block is reused only once it has completed.
//! - With several devices in use, buffers of another device than the stream's are ordered as
//!   copies are (`cache::cross`).
//!
//! # Timeouts
//! Every wait on NCCL (initialisation, a call answered with `ncclInProgress`, a group's end,
//! finalize, `llaisysNvidiaCommSynchronize`) is bounded by the communicator's timeout: the value
//! of `llaisysNvidiaCommSetTimeout`, else `LLAISYS_NVIDIA_NCCL_TIMEOUT_MS`, else 300000 ms (0: no
//! limit), taken when the communicator is made. Past it, or on an asynchronous NCCL error, the
//! communicator is aborted: its handle stays known but answers every call with an error until
//! it is destroyed.

use super::copies::{locate, Place};
use super::validate;
use crate::cudart::StreamHandle;
use crate::event::Event;
use crate::nccl::api::{self, Progress};
use crate::nccl::communicator::{self, Communicator, Stop};
use crate::nccl::loader::{self, version_code, version_text, Library};
use crate::nccl::{sys, Error, NcclResult, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

/// Bytes of a unique id (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = sys::NCCL_UNIQUE_ID_BYTES as usize;

/// llaisys's `llaisysDataType_t` values (include/llaisys.h), restated.
pub mod dtype {
    #![allow(missing_docs)]
    use std::os::raw::c_int;
    pub const INVALID: c_int = 0;
    pub const BYTE: c_int = 1;
    pub const BOOL: c_int = 2;
    pub const I8: c_int = 3;
    pub const I16: c_int = 4;
    pub const I32: c_int = 5;
    pub const I64: c_int = 6;
    pub const U8: c_int = 7;
    pub const U16: c_int = 8;
    pub const U32: c_int = 9;
    pub const U64: c_int = 10;
    pub const F8: c_int = 11;
    pub const F16: c_int = 12;
    pub const F32: c_int = 13;
    pub const F64: c_int = 14;
    pub const C16: c_int = 15;
    pub const C32: c_int = 16;
    pub const C64: c_int = 17;
    pub const C128: c_int = 18;
    pub const BF16: c_int = 19;
}

/// The reductions (`LLAISYS_NVIDIA_REDUCE_*`, equal to NCCL's values).
pub mod op {
    #![allow(missing_docs)]
    use std::os::raw::c_int;
    pub const SUM: c_int = 0;
    pub const PROD: c_int = 1;
    pub const MAX: c_int = 2;
    pub const MIN: c_int = 3;
    pub const AVG: c_int = 4;
}

/// ncclBfloat16 and ncclAvg came with NCCL 2.10.
const V2_10: c_int = version_code(2, 10, 0);

/// (name, bytes) of a llaisys type.
fn describe(dt: c_int) -> Option<(&'static str, usize)> {
    use dtype::*;
    Some(match dt {
        BYTE => ("BYTE", 1),
        BOOL => ("BOOL", 1),
        I8 => ("I8", 1),
        I16 => ("I16", 2),
        I32 => ("I32", 4),
        I64 => ("I64", 8),
        U8 => ("U8", 1),
        U16 => ("U16", 2),
        U32 => ("U32", 4),
        U64 => ("U64", 8),
        F8 => ("F8", 1),
        F16 => ("F16", 2),
        F32 => ("F32", 4),
        F64 => ("F64", 8),
        C16 => ("C16", 2),
        C32 => ("C32", 4),
        C64 => ("C64", 8),
        C128 => ("C128", 16),
        BF16 => ("BF16", 2),
        _ => return None,
    })
}

/// NCCL's own type of the same meaning, where it has one.
fn native(dt: c_int) -> Option<sys::ncclDataType_t> {
    use dtype::*;
    use sys::ncclDataType_t as N;
    Some(match dt {
        BYTE | U8 => N::ncclUint8,
        I8 => N::ncclInt8,
        I32 => N::ncclInt32,
        U32 => N::ncclUint32,
        I64 => N::ncclInt64,
        U64 => N::ncclUint64,
        F16 => N::ncclFloat16,
        F32 => N::ncclFloat32,
        F64 => N::ncclFloat64,
        BF16 => N::ncclBfloat16,
        _ => return None,
    })
}

/// How a llaisys type goes to NCCL: as `per` elements of `nccl` each, `size` bytes in all.
#[derive(Clone, Copy, Debug)]
struct Element {
    nccl: sys::ncclDataType_t,
    per: usize,
    size: usize,
    name: &'static str,
}

fn unknown_dtype(dt: c_int) -> Error {
    Error::invalid(format!(
        "dtype={dt} is not a llaisysDataType_t (1 BYTE .. 19 BF16; 0 is LLAISYS_DTYPE_INVALID)"
    ))
}

/// For operations that move data unchanged (all-gather, broadcast, send, recv): every type with
/// a size; those NCCL lacks (I16, U16, F8, BOOL, complex) move as bytes.
fn moving(dt: c_int) -> Result<Element> {
    let (name, size) = describe(dt).ok_or_else(|| unknown_dtype(dt))?;
    Ok(match native(dt) {
        Some(nccl) => Element {
            nccl,
            per: 1,
            size,
            name,
        },
        None => Element {
            nccl: sys::ncclDataType_t::ncclUint8,
            per: size,
            size,
            name,
        },
    })
}

fn op_name(o: c_int) -> Option<&'static str> {
    Some(match o {
        op::SUM => "SUM",
        op::PROD => "PROD",
        op::MAX => "MAX",
        op::MIN => "MIN",
        op::AVG => "AVG",
        _ => return None,
    })
}

/// For reductions: the types NCCL reduces; BOOL with MAX (or) and MIN (and) as bytes; complex
/// C32/C64/C128 with SUM and AVG as pairs of F16/F32/F64. The rest is refused, saying why.
fn reducing(dt: c_int, o: c_int) -> Result<(Element, sys::ncclRedOp_t)> {
    let (name, size) = describe(dt).ok_or_else(|| unknown_dtype(dt))?;
    let oname = op_name(o).ok_or_else(|| {
        Error::invalid(format!(
            "op={o} is not a reduction (0 SUM, 1 PROD, 2 MAX, 3 MIN, 4 AVG)"
        ))
    })?;
    let red = sys::ncclRedOp_t(o as _);
    use dtype::*;
    use sys::ncclDataType_t as N;
    let refuse = |why: &str| {
        Err(Error::invalid(format!(
            "dtype={dt} ({name}) cannot be reduced with {oname}: {why}"
        )))
    };
    let elem = |nccl, per| Element {
        nccl,
        per,
        size,
        name,
    };
    match dt {
        BOOL if o == op::MAX || o == op::MIN => Ok((elem(N::ncclUint8, 1), red)),
        BOOL => refuse("booleans reduce only with MAX (or) and MIN (and)"),
        C32 | C64 | C128 if o == op::SUM || o == op::AVG => {
            let part = match dt {
                C32 => N::ncclFloat16,
                C64 => N::ncclFloat32,
                _ => N::ncclFloat64,
            };
            Ok((elem(part, 2), red))
        }
        C32 | C64 | C128 => refuse("complex numbers reduce only with SUM and AVG"),
        C16 => refuse("NCCL has no type for the parts of a 2-byte complex"),
        I16 | U16 => refuse("NCCL has no 16-bit integer type"),
        F8 => refuse(
            "llaisys's F8 does not say which 8-bit float it is (NCCL reduces e4m3 and e5m2 \
             differently)",
        ),
        _ => Ok((elem(native(dt).ok_or_else(|| unknown_dtype(dt))?, 1), red)),
    }
}

/// Refuses what the loaded NCCL cannot do (bf16 and avg came with 2.10).
fn check_features(lib: &Library, e: &Element, red: Option<sys::ncclRedOp_t>) -> Result<()> {
    if lib.version >= V2_10 {
        return Ok(());
    }
    let bf16 = e.nccl == sys::ncclDataType_t::ncclBfloat16;
    let avg = red == Some(sys::ncclRedOp_t::ncclAvg);
    if bf16 || avg {
        return Err(Error::Unavailable {
            detail: format!(
                "{} is NCCL {}, which has no {}; NCCL 2.10 and later have it",
                lib.path,
                version_text(lib.version),
                if bf16 { "ncclBfloat16" } else { "ncclAvg" }
            ),
        });
    }
    Ok(())
}

/// `count` elements (times `ranks`) in bytes, refused when it overflows what a buffer can hold;
/// and the count NCCL gets.
fn sizes(count: usize, e: &Element, ranks: usize, what: &str) -> Result<(usize, usize)> {
    let bytes = count
        .checked_mul(e.size)
        .and_then(|b| b.checked_mul(ranks))
        .filter(|&b| b <= isize::MAX as usize);
    let nccl_count = count.checked_mul(e.per);
    match (bytes, nccl_count) {
        (Some(b), Some(n)) => Ok((b, n)),
        _ => Err(Error::invalid(format!(
            "{what}={count} of {} ({} bytes each){} is more bytes than any buffer in this \
             process can hold",
            e.name,
            e.size,
            if ranks > 1 {
                format!(" times {ranks} ranks")
            } else {
                String::new()
            }
        ))),
    }
}

fn non_null(p: *const c_void, bytes: usize, name: &str) -> Result<()> {
    if p.is_null() && bytes > 0 {
        return Err(Error::invalid(format!(
            "{name}=NULL with {bytes} bytes to move"
        )));
    }
    Ok(())
}

/// One of our device blocks must hold what the call touches.
fn check_extent(p: *const c_void, bytes: usize, name: &str) -> Result<()> {
    if bytes == 0 || p.is_null() {
        return Ok(());
    }
    if let Some(block) = crate::cache::device::size_of(p) {
        if bytes > block {
            return Err(Error::invalid(format!(
                "{name}={p:p} is a malloc_device block of {block} bytes, but the call touches \
                 {bytes} bytes of it"
            )));
        }
    }
    Ok(())
}

// ---- the registry --------------------------------------------------------------------------

/// A communicator of ours.
pub(crate) struct Entry {
    handle: usize,
    raw: sys::ncclComm_t,
    lib: &'static Library,
    /// The owner; `None` once aborted by a timeout or an error of ours.
    owner: Mutex<Option<Communicator>>,
    rank: c_int,
    size: c_int,
    device: c_int,
    timeout: Duration,
    /// Read: a call is using `raw`. Write: it is being aborted or destroyed.
    busy: RwLock<()>,
    /// Set before the write lock is taken: waits holding the read lock end early.
    cancel: AtomicBool,
    /// Why it was aborted, when it was.
    aborted: Mutex<Option<String>>,
    /// Open groups that queued work of it (it may not be destroyed before they end).
    group_pending: AtomicUsize,
    /// Event for ordering the legacy stream after work on non-blocking streams.
    event: Mutex<Option<Event>>,
}

// SAFETY: `raw` is used only under `busy`, as NCCL allows (one call at a time per communicator,
// abort from another thread once no call is in NCCL).
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

static COMMS: Mutex<Option<HashMap<usize, Arc<Entry>>>> = Mutex::new(None);
static NEXT: AtomicUsize = AtomicUsize::new(1);

fn registry<T>(f: impl FnOnce(&mut HashMap<usize, Arc<Entry>>) -> T) -> T {
    let mut g = COMMS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

fn adopt(comm: Communicator, timeout: Duration) -> Result<usize> {
    let (size, rank, device) = comm.shape()?;
    crate::cache::device::device_seen(device)?;
    let handle = NEXT.fetch_add(1, Relaxed) << 4;
    let entry = Arc::new(Entry {
        handle,
        raw: comm.raw(),
        lib: comm.library(),
        owner: Mutex::new(Some(comm)),
        rank,
        size,
        device,
        timeout,
        busy: RwLock::new(()),
        cancel: AtomicBool::new(false),
        aborted: Mutex::new(None),
        group_pending: AtomicUsize::new(0),
        event: Mutex::new(None),
    });
    registry(|m| m.insert(handle, entry));
    Ok(handle)
}

fn lookup(h: *mut c_void) -> Result<Arc<Entry>> {
    if h.is_null() {
        return Err(Error::invalid("comm=NULL: no communicator"));
    }
    registry(|m| m.get(&(h as usize)).cloned()).ok_or_else(|| {
        Error::invalid(format!(
            "comm={h:p} is not a communicator of llaisys-nvidia, or was already destroyed or \
             aborted (a raw ncclComm_t of another library is not accepted)"
        ))
    })
}

impl Entry {
    fn name(&self) -> String {
        format!(
            "comm={:#x} (rank {} of {}, device {})",
            self.handle, self.rank, self.size, self.device
        )
    }

    /// The right to use `raw` for one call; refused once it is aborted or being aborted.
    fn live(&self) -> Result<RwLockReadGuard<'_, ()>> {
        let refuse = |why: String| {
            Err(Error::invalid(format!(
                "{} {why}; destroy it (llaisysNvidiaCommDestroy) and make a new one",
                self.name()
            )))
        };
        if self.cancel.load(Relaxed) {
            return refuse("is being aborted".into());
        }
        let guard = self.busy.read().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = self
            .aborted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            return refuse(format!("was aborted ({why})"));
        }
        Ok(guard)
    }

    /// Aborts the NCCL communicator after a timeout or an asynchronous error of ours; the handle
    /// stays (answering with the reason) until destroyed.
    fn abort_for(&self, reason: &Error) {
        self.cancel.store(true, Relaxed);
        let _excl = self.busy.write().unwrap_or_else(|e| e.into_inner());
        let owner = self.owner.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut why = reason.to_string();
        if let Some(c) = owner {
            if let Err(e) = c.abort() {
                why.push_str(&format!("; ncclCommAbort then failed: {e}"));
            }
        }
        *self.aborted.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        self.cancel.store(false, Relaxed);
    }

    /// The outcome of a wait, aborting on timeout or asynchronous error. Call without holding
    /// `busy`.
    fn settle(&self, waited: Result<()>) -> Result<()> {
        match waited {
            Ok(()) => Ok(()),
            Err(e @ (Error::Timeout { .. } | Error::Nccl { .. })) => {
                let e = e.context(&format!("{} aborted", self.name()));
                self.abort_for(&e);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn wait(&self, call: &'static str) -> Result<()> {
        let waited = {
            let _use = self.live()?;
            self.owner_wait(call)
        };
        self.settle(waited)
    }

    fn owner_wait(&self, call: &'static str) -> Result<()> {
        match self
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(c) => c.wait(call, self.timeout, Some(&self.cancel)),
            None => Err(Error::invalid(format!("{} was aborted", self.name()))),
        }
    }

    /// The stream's device must be the communicator's (NULL: its legacy stream).
    fn check_stream(&self, s: *mut c_void) -> Result<()> {
        if let Some(d) = validate::check_stream(s.cast())? {
            if d != self.device {
                return Err(Error::invalid(format!(
                    "stream={s:p} belongs to device {d}, {} to device {}: NCCL runs on the \
                     communicator's device",
                    self.name(),
                    self.device
                )));
            }
        }
        Ok(())
    }

    fn check_rank(&self, r: c_int, what: &str) -> Result<()> {
        if r < 0 || r >= self.size {
            return Err(Error::invalid(format!(
                "{what}={r} is not a rank of {} (0..{})",
                self.name(),
                self.size - 1
            )));
        }
        Ok(())
    }

    /// Makes the legacy stream of the communicator's device wait for the work queued so far
    /// on `s`, through the entry's event (made on first use).
    fn legacy_waits_for(&self, s: StreamHandle) -> Result<()> {
        let mut e = crate::sync::lock(&self.event);
        if e.is_none() {
            *e = Some(Event::on_device(self.device)?);
        }
        let ev = e
            .as_ref()
            .map(Event::as_raw)
            .unwrap_or(std::ptr::null_mut());
        // SAFETY: `s` is a live stream of ours on the communicator's device (checked by the
        // caller); the event is ours, of that device.
        unsafe { crate::event::record(ev, s) }?;
        crate::device::with(self.device, || {
            // SAFETY: NULL is the legacy stream; the event is live.
            unsafe { crate::stream::wait_event(std::ptr::null_mut(), ev) }
        })?;
        Ok(())
    }
}

// ---- groups --------------------------------------------------------------------------------

#[derive(Default)]
struct Group {
    depth: u32,
    comms: Vec<Arc<Entry>>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

fn group_depth() -> u32 {
    GROUP.try_with(|g| g.borrow().depth).unwrap_or(0)
}

/// In an open group, notes that `entry` queued work in it; true when in a group.
fn join_group(entry: &Arc<Entry>) -> bool {
    GROUP
        .try_with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return false;
            }
            if !g.comms.iter().any(|c| Arc::ptr_eq(c, entry)) {
                entry.group_pending.fetch_add(1, Relaxed);
                g.comms.push(entry.clone());
            }
            true
        })
        .unwrap_or(false)
}

// ---- timeouts ------------------------------------------------------------------------------

/// The variable setting the default timeout.
pub const TIMEOUT_VAR: &str = "LLAISYS_NVIDIA_NCCL_TIMEOUT_MS";
/// The default without the variable: 5 minutes.
pub const DEFAULT_TIMEOUT_MS: i64 = 300_000;
static TIMEOUT_MS: AtomicI64 = AtomicI64::new(-1);

/// Sets the timeout of communicators made from now on (0: no limit).
pub fn set_timeout(ms: i64) -> Result<()> {
    if ms < 0 {
        return Err(Error::invalid(format!(
            "timeout_ms={ms}: milliseconds, 0 for no limit"
        )));
    }
    TIMEOUT_MS.store(ms, Relaxed);
    Ok(())
}

/// The timeout for a communicator made now.
pub fn timeout() -> Result<Duration> {
    let ms = TIMEOUT_MS.load(Relaxed);
    if ms >= 0 {
        return Ok(Duration::from_millis(ms as u64));
    }
    match std::env::var(TIMEOUT_VAR) {
        Err(_) => Ok(Duration::from_millis(DEFAULT_TIMEOUT_MS as u64)),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| {
                Error::invalid(format!(
                    "{TIMEOUT_VAR}={v:?} is not a number of milliseconds (0: no limit)"
                ))
            }),
    }
}

// ---- the operations ------------------------------------------------------------------------

/// The loaded NCCL: (version code, path).
pub fn version() -> Result<(c_int, String)> {
    let lib = loader::get()?;
    Ok((lib.version, lib.path.clone()))
}

/// A new unique id (128 opaque bytes to hand to every rank).
pub fn unique_id() -> Result<[u8; UNIQUE_ID_BYTES]> {
    let lib = loader::get()?;
    // SAFETY: no precondition.
    let id = unsafe { api::get_unique_id(lib) }?;
    Ok(id.internal.map(|b| b as u8))
}

fn refuse_in_group(what: &str) -> Result<()> {
    if group_depth() > 0 {
        return Err(Error::invalid(format!(
            "{what} inside an open group (llaisysNvidiaGroupStart without GroupEnd on this \
             thread): end the group first; llaisysNvidiaCommInitAll makes several communicators \
             of one thread together"
        )));
    }
    Ok(())
}

/// Joins rank `rank` of `nranks` on the current device; returns the handle.
pub fn init_rank(nranks: c_int, id: &[u8; UNIQUE_ID_BYTES], rank: c_int) -> Result<usize> {
    if nranks < 1 {
        return Err(Error::invalid(format!("nranks={nranks}: at least 1")));
    }
    if rank < 0 || rank >= nranks {
        return Err(Error::invalid(format!(
            "rank={rank} is not in 0..{} (nranks={nranks})",
            nranks - 1
        )));
    }
    if id.iter().all(|&b| b == 0) {
        return Err(Error::invalid(
            "id is all zeros: not one made by llaisysNvidiaCommGetUniqueId",
        ));
    }
    refuse_in_group("llaisysNvidiaCommInitRank")?;
    let timeout = timeout()?;
    let mut raw_id = sys::ncclUniqueId::default();
    for (d, s) in raw_id.internal.iter_mut().zip(id) {
        *d = *s as _;
    }
    let comm = Communicator::init_rank(nranks, raw_id, rank, timeout)?;
    adopt(comm, timeout)
}

/// One communicator per device (`devices`, or 0..n-1 when None); returns the handles.
pub fn init_all(n: c_int, devices: Option<&[c_int]>) -> Result<Vec<usize>> {
    if n < 1 {
        return Err(Error::invalid(format!("ndev={n}: at least 1")));
    }
    let list: Vec<c_int> = match devices {
        Some(d) => d.to_vec(),
        None => (0..n).collect(),
    };
    for (i, d) in list.iter().enumerate() {
        if *d < 0 {
            return Err(Error::invalid(format!("devices[{i}]={d} is not a device")));
        }
        if list[..i].contains(d) {
            return Err(Error::invalid(format!(
                "devices[{i}]={d} is listed twice (NCCL allows one rank per device)"
            )));
        }
    }
    refuse_in_group("llaisysNvidiaCommInitAll")?;
    let timeout = timeout()?;
    loader::get()?;
    let count = crate::runtime::device_count()?;
    if let Some((i, d)) = list.iter().enumerate().find(|(_, &d)| d >= count) {
        return Err(Error::invalid(format!(
            "devices[{i}]={d}: this machine has {count} CUDA device(s)"
        )));
    }
    let comms = Communicator::init_all(&list, timeout)?;
    let mut handles = Vec::with_capacity(comms.len());
    for c in comms {
        match adopt(c, timeout) {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in handles {
                    let _ = abort(h as *mut c_void);
                }
                return Err(e);
            }
        }
    }
    Ok(handles)
}

/// Takes `h` out of the registry for good, once nothing else may use it.
fn retire(h: *mut c_void) -> Result<Option<Arc<Entry>>> {
    if h.is_null() {
        return Ok(None);
    }
    let entry = lookup(h)?;
    if entry.group_pending.load(Relaxed) > 0 {
        return Err(Error::invalid(format!(
            "{} has work queued in an open group (llaisysNvidiaGroupStart without GroupEnd): \
             end the group first",
            entry.name()
        )));
    }
    registry(|m| m.remove(&(h as usize)));
    entry.cancel.store(true, Relaxed);
    Ok(Some(entry))
}

/// Destroys (finalize, polled up to the timeout, then destroy; aborted instead on failure).
/// NULL does nothing.
pub fn destroy(h: *mut c_void) -> Result<()> {
    let Some(entry) = retire(h)? else {
        return Ok(());
    };
    let _excl = entry.busy.write().unwrap_or_else(|e| e.into_inner());
    let owner = entry.owner.lock().unwrap_or_else(|e| e.into_inner()).take();
    match owner {
        Some(c) => c
            .destroy(entry.timeout)
            .map_err(|e| e.context(&format!("{} (aborted instead)", entry.name()))),
        None => Ok(()), // aborted already
    }
}

/// Aborts and forgets. NULL does nothing.
pub fn abort(h: *mut c_void) -> Result<()> {
    let Some(entry) = retire(h)? else {
        return Ok(());
    };
    let _excl = entry.busy.write().unwrap_or_else(|e| e.into_inner());
    let owner = entry.owner.lock().unwrap_or_else(|e| e.into_inner()).take();
    match owner {
        Some(c) => c.abort().map_err(|e| e.context(&entry.name())),
        None => Ok(()),
    }
}

/// (rank, ranks, device).
pub fn shape(h: *mut c_void) -> Result<(c_int, c_int, c_int)> {
    let e = lookup(h)?;
    Ok((e.rank, e.size, e.device))
}

/// `ncclCommGetAsyncError` of a live communicator.
pub fn async_error(h: *mut c_void) -> Result<NcclResult> {
    let e = lookup(h)?;
    let _use = e.live()?;
    // SAFETY: live (checked, held).
    unsafe { api::comm_get_async_error(e.lib, e.raw) }
}

/// Waits for `stream` (NULL: the legacy stream of the communicator's device) while watching
/// the communicator: on an asynchronous NCCL error, or after `timeout_ms` (-1: the
/// communicator's timeout; 0: no limit), the communicator is aborted (its kernels return, so
/// the stream drains) and the error returned.
pub fn synchronize(h: *mut c_void, s: *mut c_void, timeout_ms: i64) -> Result<()> {
    if timeout_ms < -1 {
        return Err(Error::invalid(format!(
            "timeout_ms={timeout_ms}: -1 (the communicator's), 0 (no limit) or milliseconds"
        )));
    }
    let e = lookup(h)?;
    e.check_stream(s)?;
    let limit = if timeout_ms == -1 {
        e.timeout
    } else {
        Duration::from_millis(timeout_ms as u64)
    };
    let stream: StreamHandle = s.cast();
    let waited = {
        let _use = e.live()?;
        let outcome = communicator::poll(limit, Some(&e.cancel), || {
            // SAFETY: live (held).
            let state = unsafe { api::comm_get_async_error(e.lib, e.raw) }?;
            if state != NcclResult::SUCCESS && state != NcclResult::IN_PROGRESS {
                return Err(api::nccl_error(
                    e.lib,
                    "ncclCommGetAsyncError",
                    state,
                    e.raw,
                ));
            }
            // SAFETY: NULL or a live stream of ours (checked).
            let done = crate::device::for_stream(stream, e.device, || unsafe {
                crate::stream::query(stream)
            })?;
            Ok(done.then_some(()))
        });
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Stop::Timeout)) => Err(Error::Timeout {
                call: "llaisysNvidiaCommSynchronize",
                waited: limit,
                detail: format!("stream={s:p}"),
            }),
            Ok(Err(Stop::Cancelled)) => Err(Error::invalid(format!(
                "{}: being aborted by another thread",
                e.name()
            ))),
            Err(err) => Err(err),
        }
    };
    e.settle(waited)
}

/// The buffers of one call, for the checks and the caches.
struct Buffers<'a> {
    list: &'a [(*const c_void, usize, &'static str)],
}

impl Buffers<'_> {
    fn check(&self) -> Result<()> {
        for &(p, bytes, name) in self.list {
            check_extent(p, bytes, name)?;
        }
        Ok(())
    }

    /// Before the call is queued: cross-device ordering.
    fn before(&self, e: &Entry, s: StreamHandle) -> Result<()> {
        if crate::cache::cross::active() {
            for &(p, bytes, _) in self.list {
                if bytes > 0 && !p.is_null() {
                    if let Place::Device(d) = locate(p)? {
                        crate::cache::cross::before_use(d, s, Some(e.device))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// After the call is queued: pinned blocks noted as used on the stream; on a non-blocking
    /// stream, the legacy stream ordered after it when one of our device blocks is involved.
    fn after(&self, e: &Entry, s: StreamHandle) -> Result<()> {
        let mut ours = false;
        for &(p, bytes, _) in self.list {
            if bytes == 0 || p.is_null() {
                continue;
            }
            crate::cache::host::record_use(p, s, Some(e.device));
            ours |= crate::cache::device::size_of(p).is_some();
        }
        // SAFETY: `s` is NULL or a live stream of ours (checked by the caller).
        if ours && !s.is_null() && unsafe { crate::stream::is_non_blocking(s) }? {
            e.legacy_waits_for(s)?;
        }
        Ok(())
    }
}

/// The common path of every collective and point-to-point call: the communicator and stream
/// checks, the cache bookkeeping, the call, and the wait when NCCL answers `ncclInProgress`
/// outside a group.
fn enqueue(
    h: *mut c_void,
    s: *mut c_void,
    buffers: &[(*const c_void, usize, &'static str)],
    extra: impl FnOnce(&Entry) -> Result<()>,
    call: &'static str,
    go: impl FnOnce(&Entry, StreamHandle) -> Result<Progress>,
) -> Result<()> {
    let e = lookup(h)?;
    e.check_stream(s)?;
    extra(&e)?;
    let bufs = Buffers { list: buffers };
    bufs.check()?;
    let stream: StreamHandle = s.cast();
    let progress = {
        let _use = e.live()?;
        bufs.before(&e, stream)?;
        let grouped = join_group(&e);
        let p = go(&e, stream).map_err(|err| err.context(&e.name()))?;
        bufs.after(&e, stream)?;
        (p, grouped)
    };
    match progress {
        (Progress::InProgress, false) => e.wait(call),
        _ => Ok(()),
    }
}

/// All-reduce of `count` elements.
#[allow(clippy::too_many_arguments)]
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (the caller's contract; our own blocks are checked).
pub unsafe fn all_reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    o: c_int,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let (el, red) = reducing(dt, o)?;
    let (bytes, n) = sizes(count, &el, 1, "count")?;
    non_null(send, bytes, "sendbuff")?;
    non_null(recv, bytes, "recvbuff")?;
    let bufs = [
        (send, bytes, "sendbuff"),
        (recv as *const c_void, bytes, "recvbuff"),
    ];
    enqueue(
        h,
        s,
        &bufs,
        |e| check_features(e.lib, &el, Some(red)),
        "ncclAllReduce",
        |e, st| {
            // SAFETY: checked: the pointers cover `bytes` (caller contract for foreign memory), the
            // communicator is live, the stream is NULL or ours on its device.
            unsafe { api::all_reduce(e.lib, send, recv, n, el.nccl, red, e.raw, st) }
        },
    )
}

/// All-gather: `recv` gets `send_count` elements from every rank, in rank order.
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (the caller's contract; our own blocks are checked).
pub unsafe fn all_gather(
    send: *const c_void,
    recv: *mut c_void,
    send_count: usize,
    dt: c_int,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let el = moving(dt)?;
    let (bytes, n) = sizes(send_count, &el, 1, "sendcount")?;
    let ranks = lookup(h)?.size as usize;
    let (recv_bytes, _) = sizes(send_count, &el, ranks, "sendcount")?;
    non_null(send, bytes, "sendbuff")?;
    non_null(recv, recv_bytes, "recvbuff")?;
    let bufs = [
        (send, bytes, "sendbuff"),
        (recv as *const c_void, recv_bytes, "recvbuff"),
    ];
    enqueue(
        h,
        s,
        &bufs,
        |e| check_features(e.lib, &el, None),
        "ncclAllGather",
        |e, st| {
            // SAFETY: as all_reduce.
            unsafe { api::all_gather(e.lib, send, recv, n, el.nccl, e.raw, st) }
        },
    )
}

/// Reduce-scatter: rank r gets block r (of `recv_count` elements) of the reduction.
#[allow(clippy::too_many_arguments)]
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (the caller's contract; our own blocks are checked).
pub unsafe fn reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    recv_count: usize,
    dt: c_int,
    o: c_int,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let (el, red) = reducing(dt, o)?;
    let (bytes, n) = sizes(recv_count, &el, 1, "recvcount")?;
    let ranks = lookup(h)?.size as usize;
    let (send_bytes, _) = sizes(recv_count, &el, ranks, "recvcount")?;
    non_null(send, send_bytes, "sendbuff")?;
    non_null(recv, bytes, "recvbuff")?;
    let bufs = [
        (send, send_bytes, "sendbuff"),
        (recv as *const c_void, bytes, "recvbuff"),
    ];
    enqueue(
        h,
        s,
        &bufs,
        |e| check_features(e.lib, &el, Some(red)),
        "ncclReduceScatter",
        |e, st| {
            // SAFETY: as all_reduce.
            unsafe { api::reduce_scatter(e.lib, send, recv, n, el.nccl, red, e.raw, st) }
        },
    )
}

/// Broadcast from `root` (`send` is read on the root only and may be NULL elsewhere).
#[allow(clippy::too_many_arguments)]
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (the caller's contract; our own blocks are checked).
pub unsafe fn broadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let el = moving(dt)?;
    let (bytes, n) = sizes(count, &el, 1, "count")?;
    non_null(recv, bytes, "recvbuff")?;
    let entry = lookup(h)?;
    entry.check_rank(root, "root")?;
    if root == entry.rank {
        non_null(send, bytes, "sendbuff (on the root)")?;
    }
    let send_bytes = if root == entry.rank { bytes } else { 0 };
    let bufs = [
        (send, send_bytes, "sendbuff"),
        (recv as *const c_void, bytes, "recvbuff"),
    ];
    enqueue(
        h,
        s,
        &bufs,
        |e| check_features(e.lib, &el, None),
        "ncclBroadcast",
        |e, st| {
            // SAFETY: as all_reduce.
            unsafe { api::broadcast(e.lib, send, recv, n, el.nccl, root, e.raw, st) }
        },
    )
}

/// Reduce to `root` (`recv` is written on the root only and may be NULL elsewhere).
#[allow(clippy::too_many_arguments)]
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (the caller's contract; our own blocks are checked).
pub unsafe fn reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    o: c_int,
    root: c_int,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let (el, red) = reducing(dt, o)?;
    let (bytes, n) = sizes(count, &el, 1, "count")?;
    non_null(send, bytes, "sendbuff")?;
    let entry = lookup(h)?;
    entry.check_rank(root, "root")?;
    if root == entry.rank {
        non_null(recv, bytes, "recvbuff (on the root)")?;
    }
    let recv_bytes = if root == entry.rank { bytes } else { 0 };
    let bufs = [
        (send, bytes, "sendbuff"),
        (recv as *const c_void, recv_bytes, "recvbuff"),
    ];
    enqueue(
        h,
        s,
        &bufs,
        |e| check_features(e.lib, &el, Some(red)),
        "ncclReduce",
        |e, st| {
            // SAFETY: as all_reduce.
            unsafe { api::reduce(e.lib, send, recv, n, el.nccl, red, root, e.raw, st) }
        },
    )
}

/// Sends `count` elements to `peer` (its matching recv must be queued too; to oneself only
/// inside a group with the recv).
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (the caller's contract; our own blocks are checked).
pub unsafe fn send(
    buf: *const c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let el = moving(dt)?;
    let (bytes, n) = sizes(count, &el, 1, "count")?;
    non_null(buf, bytes, "sendbuff")?;
    let bufs = [(buf, bytes, "sendbuff")];
    enqueue(
        h,
        s,
        &bufs,
        |e| {
            e.check_rank(peer, "peer")?;
            check_features(e.lib, &el, None)
        },
        "ncclSend",
        |e, st| {
            // SAFETY: as all_reduce.
            unsafe { api::send(e.lib, buf, n, el.nccl, peer, e.raw, st) }
        },
    )
}

/// Receives `count` elements from `peer`.
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (the caller's contract; our own blocks are checked).
pub unsafe fn recv(
    buf: *mut c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let el = moving(dt)?;
    let (bytes, n) = sizes(count, &el, 1, "count")?;
    non_null(buf, bytes, "recvbuff")?;
    let bufs = [(buf as *const c_void, bytes, "recvbuff")];
    enqueue(
        h,
        s,
        &bufs,
        |e| {
            e.check_rank(peer, "peer")?;
            check_features(e.lib, &el, None)
        },
        "ncclRecv",
        |e, st| {
            // SAFETY: as all_reduce.
            unsafe { api::recv(e.lib, buf, n, el.nccl, peer, e.raw, st) }
        },
    )
}

/// Opens a group (nestable) on this thread.
pub fn group_start() -> Result<()> {
    let lib = loader::get()?;
    // SAFETY: matched by group_end (the depth is counted).
    unsafe { api::group_start(lib) }?;
    GROUP
        .try_with(|g| g.borrow_mut().depth += 1)
        .map_err(|_| Error::invalid("group_start during thread exit"))?;
    Ok(())
}

/// Closes the innermost group; the outermost one launches what the group queued and, for each
/// communicator that NCCL is still working on, polls it up to its timeout.
pub fn group_end() -> Result<()> {
    let (depth, comms) = GROUP
        .try_with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return (0, Vec::new());
            }
            g.depth -= 1;
            let comms = if g.depth == 0 {
                std::mem::take(&mut g.comms)
            } else {
                Vec::new()
            };
            (g.depth + 1, comms)
        })
        .unwrap_or((0, Vec::new()));
    if depth == 0 {
        return Err(Error::invalid(
            "llaisysNvidiaGroupEnd without llaisysNvidiaGroupStart on this thread",
        ));
    }
    let ended = loader::get().and_then(|lib| {
        // SAFETY: the group's communicators cannot be destroyed or aborted while it is open.
        unsafe { api::group_end(lib) }
    });
    for c in &comms {
        c.group_pending.fetch_sub(1, Relaxed);
    }
    match ended? {
        Progress::Done => Ok(()),
        Progress::InProgress => {
            let mut first = None;
            for c in &comms {
                if let Err(e) = c.wait("ncclGroupEnd") {
                    first.get_or_insert(e);
                }
            }
            first.map_or(Ok(()), Err)
        }
    }
}

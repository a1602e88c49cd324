//! Every collective and point-to-point call, by its shape (`nccl::collectives`): the checks, the
//! cache bookkeeping, the call, and the wait when NCCL answers `ncclInProgress` outside a group.

use super::elements::{check_features, moving, reducing, Element};
use super::group::join_group;
use super::registry::{lookup, Entry};
use crate::cudart::calls::StreamHandle;
use crate::nccl::api::Progress;
use crate::nccl::collectives::{Call as NcclCall, Collective, Extent, Rank};
use crate::nccl::{self, sys, Error, Result};
use crate::ops::copies::{locate, Place};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

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

/// The buffers of one call (pointer, bytes, name), for the checks and the caches.
struct Buffers<'a>(&'a [(*const c_void, usize, &'static str)]);

impl Buffers<'_> {
    /// Before the call is queued: cross-device ordering.
    fn before(&self, e: &Entry, s: StreamHandle) -> Result<()> {
        if crate::cache::cross::active() {
            for &(p, bytes, _) in self.0 {
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
        for &(p, bytes, _) in self.0 {
            if bytes == 0 || p.is_null() {
                continue;
            }
            crate::cache::host::record_use(p, s, Some(e.device));
            ours |= crate::cache::device::size_of(p).is_some();
        }
        // SAFETY: `s` is NULL or a live stream of ours (checked by the caller).
        if ours && !s.is_null() && unsafe { crate::safe::stream::is_non_blocking(s) }? {
            e.legacy_waits_for(s)?;
        }
        Ok(())
    }
}

/// The common path of every call once its buffers are known: the stream check, `extra`, the
/// extents of our blocks, the cache bookkeeping, the call, and the wait when NCCL answers
/// `ncclInProgress` outside a group.
fn enqueue(
    e: &Arc<Entry>,
    s: *mut c_void,
    buffers: &[(*const c_void, usize, &'static str)],
    extra: impl FnOnce(&Entry) -> Result<()>,
    call: &'static str,
    go: impl FnOnce(&Entry, StreamHandle) -> Result<Progress>,
) -> Result<()> {
    e.check_stream(s)?;
    extra(e)?;
    for &(p, bytes, name) in buffers {
        check_extent(p, bytes, name)?;
    }
    let bufs = Buffers(buffers);
    let stream: StreamHandle = s.cast();
    let progress = {
        let _use = e.live()?;
        bufs.before(e, stream)?;
        let one = crate::util::sync::lock(&e.one_call);
        let grouped = join_group(e)?;
        let p = go(e, stream).map_err(|err| err.context(&e.name()))?;
        drop(one);
        bufs.after(e, stream)?;
        (p, grouped)
    };
    match progress {
        (Progress::InProgress, false) => e.wait(call),
        _ => Ok(()),
    }
}

/// The C arguments of a call before `comm` and `stream`; those its shape has no role for are
/// not read.
#[derive(Clone, Copy, Debug)]
pub struct Args {
    /// `sendbuff`.
    pub send: *const c_void,
    /// `recvbuff`.
    pub recv: *mut c_void,
    /// `count`, `sendcount` or `recvcount`, in elements of `dtype`.
    pub count: usize,
    /// A `llaisysDataType_t`.
    pub dtype: c_int,
    /// A reduction (`op::SUM`, ...).
    pub op: c_int,
    /// The root or the peer.
    pub rank: c_int,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            count: 0,
            dtype: 0,
            op: 0,
            rank: 0,
        }
    }
}

/// How many bytes a buffer of `extent` covers for this rank (`count_bytes` per count; the
/// root's buffer is touched on the root only), checked against NULL.
fn buffer_bytes(
    p: *const c_void,
    extent: Extent,
    name: &'static str,
    count_bytes: usize,
    ranks_bytes: impl FnOnce() -> Result<usize>,
    on_root: impl FnOnce() -> Result<bool>,
) -> Result<usize> {
    let bytes = match extent {
        Extent::Absent => 0,
        Extent::Count => count_bytes,
        Extent::Ranks => ranks_bytes()?,
        Extent::OnRoot if on_root()? => count_bytes,
        Extent::OnRoot => 0,
    };
    if extent == Extent::OnRoot {
        non_null(p, bytes, &format!("{name} (on the root)"))?;
    } else {
        non_null(p, bytes, name)?;
    }
    Ok(bytes)
}

/// Checks and queues `which` (any collective or point-to-point call) with `args` on `stream`
/// of communicator `h`. In order: the element type (and reduction), the count's bytes, NULL
/// buffers that hold `count` elements, the communicator, buffers whose size depends on it (the
/// ranks, the root), the root; then the stream, the peer, what the loaded NCCL can do, and the
/// extents of our own blocks.
///
/// # Safety
/// The buffers are device-accessible for the sizes the call names until the work has run on
/// the stream (our own blocks are checked; other memory cannot be).
pub unsafe fn collective(
    which: Collective,
    args: Args,
    h: *mut c_void,
    s: *mut c_void,
) -> Result<()> {
    let shape = which.shape();
    let (el, red) = if shape.reduces {
        let (el, red) = reducing(args.dtype, args.op)?;
        (el, Some(red))
    } else {
        (moving(args.dtype)?, None)
    };
    let (bytes, n) = sizes(args.count, &el, 1, shape.count)?;
    // What is known before the communicator: buffers of `count` elements.
    let (send_extent, send_name) = shape.send;
    let (recv_extent, recv_name) = shape.recv;
    if send_extent == Extent::Count {
        non_null(args.send, bytes, send_name)?;
    }
    if recv_extent == Extent::Count {
        non_null(args.recv, bytes, recv_name)?;
    }
    let e = lookup(h)?;
    if shape.rank == Rank::Root {
        e.check_rank(args.rank, "root")?;
    }
    let ranks_bytes = || sizes(args.count, &el, e.size as usize, shape.count).map(|(b, _)| b);
    let on_root = || Ok(args.rank == e.rank);
    let bytes_of = |p, (extent, name)| buffer_bytes(p, extent, name, bytes, ranks_bytes, on_root);
    let send_bytes = bytes_of(args.send, shape.send)?;
    let recv_bytes = bytes_of(args.recv.cast_const(), shape.recv)?;
    let both = [
        (args.send, send_bytes, send_name),
        (args.recv.cast_const(), recv_bytes, recv_name),
    ];
    let buffers = match (send_extent, recv_extent) {
        (Extent::Absent, _) => &both[1..],
        (_, Extent::Absent) => &both[..1],
        _ => &both[..],
    };
    let call = NcclCall {
        send: args.send,
        recv: args.recv,
        count: n,
        datatype: el.nccl,
        op: red.unwrap_or(sys::ncclRedOp_t::ncclSum),
        rank: args.rank,
    };
    enqueue(
        &e,
        s,
        buffers,
        |e| {
            if shape.rank == Rank::Peer {
                e.check_rank(args.rank, "peer")?;
            }
            check_features(e.lib, &el, red)
        },
        shape.nccl,
        |e, st| {
            // SAFETY: the buffers are device-accessible for the sizes of the call's shape until
            // the work has run (this function's contract; our own blocks checked by
            // `enqueue`), the communicator is live (its `live()` guard held by `enqueue`), and
            // the stream is NULL or ours on its device (`check_stream`).
            unsafe { nccl::collectives::call(e.lib, which, &call, e.raw, st) }
        },
    )
}

//! CUDA graphs through the status API: capture on a stream of ours (with a graph pool for the
//! memory malloc_device hands out meanwhile), instantiation, update, launch. Graphs and executable
//! graphs handed out are registered: handles not made here are refused, as for streams and events.

use super::capturing::before_wait;
use super::validate::{self, Handles};
use super::Redetail;
use crate::cache::{self, graph_pool};
use crate::cudart::calls::{GraphExecHandle, GraphHandle, StreamHandle};
use crate::error::{Error, Result};
use crate::safe::capture;
use crate::util::sync::lock;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::Mutex;

static GRAPHS: Handles = Handles::new("graph", "llaisysNvidiaStreamEndCapture");
static EXECS: Handles = Handles::new("exec", "llaisysNvidiaGraphInstantiate");

/// A capture begun here: the library's capture number and the stream's device.
#[derive(Clone, Copy)]
struct Begun {
    capture: u64,
    device: i32,
}

/// Captures begun here, by stream.
static BEGUN: Mutex<Option<HashMap<usize, Begun>>> = Mutex::new(None);

fn begun<T>(f: impl FnOnce(&mut HashMap<usize, Begun>) -> T) -> T {
    f(lock(&BEGUN).get_or_insert_with(HashMap::default))
}

/// A capture mode of the C API (0 global, 1 thread-local, 2 relaxed: CUDA's values).
fn capture_mode(mode: i32) -> Result<u32> {
    match u32::try_from(mode) {
        Ok(m @ (capture::MODE_GLOBAL | capture::MODE_THREAD_LOCAL | capture::MODE_RELAXED)) => {
            Ok(m)
        }
        _ => Err(Error::invalid_argument(format!(
            "mode={mode}: not a capture mode (0 global, 1 thread-local, 2 relaxed)"
        ))),
    }
}

/// A stream of ours that may capture: not NULL (the legacy stream never captures), live.
fn capture_stream(stream: *mut c_void) -> Result<(StreamHandle, i32)> {
    let s: StreamHandle = stream.cast();
    if s.is_null() {
        return Err(Error::invalid_argument(
            "stream=NULL: the legacy default stream cannot capture; capture on a stream of \
             create_stream",
        ));
    }
    let device = validate::check_stream(s)?.unwrap_or(-1);
    Ok((s, device))
}

/// A new graph pool on the current device, for several captures replayed in order.
pub fn graph_pool_create() -> Result<u64> {
    let device = crate::safe::device::current()?;
    Ok(graph_pool::create(device))
}

/// Gives up a graph pool's handle: its memory goes once no graph captured into it exists.
pub fn graph_pool_release(pool: u64) -> Result<()> {
    graph_pool::release_handle(pool)?;
    cache::device::set_aside(cache::device::flush_kept());
    Ok(())
}

/// Begins capturing `stream` (of ours) in `mode`. Until the capture ends, malloc_device on this
/// thread allocates from `pool` (0: a pool of the capture's own), memory that stays valid for
/// every replay of the graph and goes when the graph and its executable graphs are destroyed.
pub fn begin_capture(stream: *mut c_void, mode: i32, pool: u64) -> Result<()> {
    let (s, device) = capture_stream(stream)?;
    let mode = capture_mode(mode)?;
    if graph_pool::current().is_some() {
        return Err(Error::invalid_argument(
            "this thread is already capturing through the library: end that capture first",
        ));
    }
    if pool != 0 {
        let owner = graph_pool::device_of(pool)?;
        if owner != device {
            return Err(Error::invalid_argument(format!(
                "pool={pool} belongs to device {owner}, stream={s:p} to device {device}"
            )));
        }
    }
    if begun(|b| b.contains_key(&(s as usize))) {
        return Err(Error::invalid_argument(format!(
            "stream={s:p} is already capturing"
        )));
    }
    let ran = crate::safe::device::run_on(device, || {
        let made_here = pool == 0;
        let pool = if made_here {
            graph_pool::create(device)
        } else {
            pool
        };
        let number = graph_pool::begin(pool, device, mode);
        if made_here {
            // The capture's own hold keeps a pool made for it; its handle is nobody's.
            let _ = graph_pool::release_handle(pool);
        }
        let number = number?;
        let begun_now = crate::cache::legacy_stream::begin_counted(device, || {
            // SAFETY: a live stream of ours (checked).
            unsafe { capture::begin(s, mode) }
        });
        if let Err(e) = begun_now {
            graph_pool::end(number);
            return Err(e);
        }
        if let Err(e) = hold_pool_for_graph(s, pool) {
            abort(s, device, number);
            return Err(e);
        }
        begun(|b| {
            b.insert(
                s as usize,
                Begun {
                    capture: number,
                    device,
                },
            )
        });
        Ok(())
    });
    ran.undone_unless_restored(|()| {
        // Begun, but the device current before could not be made current again: the caller
        // hears of a failure, so no capture goes on behind its back.
        if let Some(b) = begun(|m| m.remove(&(s as usize))) {
            abort(s, b.device, b.capture);
        }
    })
}

/// Makes the graph being captured on `s` hold `pool` until it and every executable graph made
/// from it are destroyed.
fn hold_pool_for_graph(s: StreamHandle, pool: u64) -> Result<()> {
    // SAFETY: `s` is a live stream of ours, capturing (checked and begun by `begin_capture`,
    // the one caller).
    let graph = unsafe { capture::graph_of(s) }?;
    graph_pool::hold_for_graph(pool);
    let (token, released) = (graph_pool::graph_token(pool), graph_pool::graph_released);
    // SAFETY: the graph being captured is live; `graph_released` takes back the token once
    // (on failure too, which balances the hold above).
    unsafe { crate::safe::graph::hold_until_released(graph, token, released) }
}

/// Ends a capture that cannot go on (its graph is destroyed) and uncounts it.
fn abort(s: StreamHandle, device: i32, number: u64) {
    // SAFETY: `s` is a live stream of ours, capturing (as in `hold_pool_for_graph`).
    if let Ok(g) = unsafe { capture::end(s) } {
        // SAFETY: a live graph just returned, nobody else knows of, destroyed once.
        let _ = unsafe { crate::safe::graph::destroy(g) };
    }
    crate::cache::legacy_stream::ended(device);
    graph_pool::end(number);
}

/// Ends the capture on `stream` and returns the graph (registered). A capture begun by the host
/// with cudaStreamBeginCapture on a stream of ours may be ended here too. A capture that was
/// invalidated gives its error and no graph.
pub fn end_capture(stream: *mut c_void) -> Result<GraphHandle> {
    let (s, device) = capture_stream(stream)?;
    let ours = begun(|b| b.remove(&(s as usize)));
    let ran = crate::safe::device::run_on(device, || {
        // SAFETY: `s` is a live stream of ours (checked by `capture_stream`).
        unsafe { capture::end(s) }
    });
    let ended = ran.undone_unless_restored(|graph| {
        // Ended, but the device current before could not be made current again: the caller
        // gets the error and no graph, so the graph goes.
        // SAFETY: a live graph just returned, nobody else knows of, destroyed once.
        let _ = unsafe { crate::safe::graph::destroy(graph) };
    });
    // SAFETY: as above.
    let still = ended.is_err() && unsafe { capture::capturing(s) }.unwrap_or(false);
    if let Some(b) = ours {
        if still {
            // Not ended (another thread's capture in global or thread-local mode): it goes on.
            begun(|m| m.insert(s as usize, b));
        } else {
            crate::cache::legacy_stream::ended(b.device);
            graph_pool::end(b.capture);
        }
    }
    let graph = ended?;
    GRAPHS.add(graph.cast(), device);
    // Frees kept while the capture forbade the legacy stream.
    cache::device::set_aside(cache::device::flush_kept());
    Ok(graph)
}

/// The capture status of `stream` (NULL: the legacy stream, `ACTIVE` while a blocking stream
/// of the device captures): `capture::STATUS_*`, 2 for a capture invalidated and not yet ended.
pub fn capture_status(stream: *mut c_void) -> Result<u32> {
    let s: StreamHandle = stream.cast();
    match validate::check_stream(s)? {
        // SAFETY: a live stream of ours (checked).
        Some(device) => crate::safe::device::with(device, || unsafe { capture::status(s) }),
        // SAFETY: NULL is the legacy stream.
        None => unsafe { capture::status(s) },
    }
}

/// Instantiates a graph of ours. Err: the detail says why, in words.
pub fn instantiate(graph: *mut c_void) -> Result<GraphExecHandle> {
    let device = GRAPHS.check(graph, false)?;
    let _relaxed = before_wait("cudaGraphInstantiateWithParams")?;
    let ran = crate::safe::device::run_on(device, || {
        // SAFETY: a live graph of ours (checked).
        unsafe { crate::safe::graph::instantiate(graph.cast()) }
    });
    let exec = ran.undone_unless_restored(|exec| {
        // The caller gets the error and no executable graph, so it goes.
        // SAFETY: just made, nobody else knows of it, destroyed once.
        let _ = unsafe { crate::safe::graph::exec_destroy(exec) };
    })?;
    EXECS.add(exec.cast(), device);
    Ok(exec)
}

/// Uploads an executable graph of ours on `stream` ahead of its first launch.
pub fn upload(exec: *mut c_void, stream: *mut c_void) -> Result<()> {
    EXECS.check(exec, false)?;
    let s: StreamHandle = stream.cast();
    validate::check_stream(s)?;
    let _legacy =
        crate::cache::legacy_stream::permit(s.is_null(), "cudaGraphUpload", "a graph on NULL")?;
    // SAFETY: a live executable graph and stream of ours (checked).
    unsafe { crate::safe::graph::upload(exec.cast(), s) }
}

/// Launches an executable graph of ours on `stream` (on a capturing stream: as a child graph of
/// that capture).
pub fn launch(exec: *mut c_void, stream: *mut c_void) -> Result<()> {
    EXECS.check(exec, false)?;
    let s: StreamHandle = stream.cast();
    validate::check_stream(s)?;
    let _legacy =
        crate::cache::legacy_stream::permit(s.is_null(), "cudaGraphLaunch", "a graph on NULL")?;
    // SAFETY: a live executable graph and stream of ours (checked).
    unsafe { crate::safe::graph::launch(exec.cast(), s) }
}

/// Updates `*exec` to run `graph`: in place when CUDA can (same topology, kernels and kinds of
/// node), else by instantiating `graph` and destroying the old executable graph, whose handle
/// `*exec` then replaces. Returns whether it re-instantiated. On failure `*exec` is unchanged
/// and still usable.
pub fn exec_update(exec: *mut c_void, graph: *mut c_void) -> Result<(GraphExecHandle, bool)> {
    let device = EXECS.check(exec, false)?;
    GRAPHS.check(graph, false)?;
    let _relaxed = before_wait("cudaGraphExecUpdate")?;
    let ran = crate::safe::device::run_on(device, || {
        // SAFETY: live handles of ours (checked).
        if unsafe { crate::safe::graph::exec_update(exec.cast(), graph.cast()) }.is_ok() {
            return Ok(None);
        }
        // SAFETY: a live graph of ours (checked).
        unsafe { crate::safe::graph::instantiate(graph.cast()) }.map(Some)
    });
    match (ran.result?, ran.restored) {
        (None, restored) => restored
            .redetail(|e| {
                format!(
                    "{} (exec={exec:p} was updated in place before this failure)",
                    e.detail()
                )
            })
            .map(|()| (exec.cast(), false)),
        (Some(fresh), Err(e)) => {
            // `*exec` stays as it was; the new executable graph goes.
            // SAFETY: just made, nobody else knows of it, destroyed once.
            let _ = unsafe { crate::safe::graph::exec_destroy(fresh) };
            Err(e)
        }
        (Some(fresh), Ok(())) => {
            EXECS.add(fresh.cast(), device);
            EXECS.check(exec, true)?;
            // SAFETY: ours, forgotten above, destroyed once; a launch already queued keeps
            // running (cudaGraphExecDestroy waits for nothing and frees after its launches).
            let _ = unsafe { crate::safe::graph::exec_destroy(exec.cast()) };
            Ok((fresh, true))
        }
    }
}

/// Destroys an executable graph of ours; NULL does nothing.
pub fn exec_destroy(exec: *mut c_void) -> Result<()> {
    EXECS.destroy(exec, || {
        // SAFETY: ours, forgotten by `destroy`, destroyed once.
        unsafe { crate::safe::graph::exec_destroy(exec.cast()) }
    })
}

/// Destroys a graph of ours; NULL does nothing. Executable graphs made from it stay valid.
pub fn graph_destroy(graph: *mut c_void) -> Result<()> {
    GRAPHS.destroy(graph, || {
        // SAFETY: ours, forgotten by `destroy`, destroyed once.
        unsafe { crate::safe::graph::destroy(graph.cast()) }
    })
}

//! CUDA graphs as plain cudart: instantiation (with cudart's reason in words when it fails),
//! upload, launch, in-place update of an executable graph, destruction, and user objects (what
//! a graph holds on to until it and every executable graph made from it are destroyed).

use crate::cudart::calls::{
    self as cudart, Detail, GraphExecHandle, GraphHandle, HostFn, StreamHandle,
};
use crate::error::{Error, Result};
use std::os::raw::c_void;

/// cudart's reason for a failed instantiation (`cudaGraphInstantiateResult`), in words.
fn instantiate_reason(result: u32) -> &'static str {
    match result {
        1 => "instantiation failed for an unexpected reason (cudaGraphInstantiateError)",
        2 => {
            "the graph's structure is invalid, e.g. it has a cycle \
              (cudaGraphInstantiateInvalidStructure)"
        }
        3 => {
            "a node's operation cannot be part of an executable graph \
              (cudaGraphInstantiateNodeOperationNotSupported)"
        }
        4 => {
            "the graph has work on several devices, which this instantiation does not support \
              (cudaGraphInstantiateMultipleDevicesNotSupported)"
        }
        5 => {
            "the graph holds conditional nodes whose handles were not set up \
              (cudaGraphInstantiateConditionalHandleUnused)"
        }
        _ => "no further reason given",
    }
}

/// The name of a `cudaGraphNodeType`.
fn node_type_name(t: i32) -> &'static str {
    match t {
        0 => "kernel",
        1 => "memcpy",
        2 => "memset",
        3 => "host function",
        4 => "child graph",
        5 => "empty",
        6 => "event wait",
        7 => "event record",
        8 => "external semaphore signal",
        9 => "external semaphore wait",
        10 => "memory allocation",
        11 => "memory free",
        12 => "conditional",
        _ => "unknown",
    }
}

/// Instantiates `graph`. On failure the error's detail is cudart's reason and the kind of node
/// it named, in words (CUDA 12 and later give no text log of their own).
///
/// # Safety
/// `graph` is a live graph.
pub(crate) unsafe fn instantiate(graph: GraphHandle) -> Result<GraphExecHandle> {
    // SAFETY: `graph` is a live graph (this function's contract).
    unsafe { cudart::graph_instantiate(graph) }.map_err(|(f, result, node)| {
        let at = if node >= 0 {
            format!("; the failing node is a {} node", node_type_name(node))
        } else {
            String::new()
        };
        Error::cuda(
            f.call,
            f.code,
            format!("graph={graph:p}: {}{at}", instantiate_reason(result)),
        )
    })
}

/// Uploads `exec` to the device on `s` ahead of its first launch.
///
/// # Safety
/// `exec` is a live executable graph; `s` NULL or a live stream.
pub(crate) unsafe fn upload(exec: GraphExecHandle, s: StreamHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::graph_upload(exec, s) }.detail(|| format!("exec={exec:p} stream={s:p}"))
}

/// Launches `exec` on `s`.
///
/// # Safety
/// `exec` is a live executable graph; `s` NULL or a live stream.
pub(crate) unsafe fn launch(exec: GraphExecHandle, s: StreamHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::graph_launch(exec, s) }.detail(|| format!("exec={exec:p} stream={s:p}"))
}

/// Why `cudaGraphExecUpdate` refused (`cudaGraphExecUpdateResult`), in words.
fn update_reason(result: u32) -> &'static str {
    match result {
        1 => "the update failed for an unexpected reason",
        2 => "the graph's topology changed",
        3 => "a node's type changed",
        4 => "a kernel node's function changed",
        5 => "a node's parameters changed in a way an update cannot apply",
        6 => "something in the graph cannot be updated",
        7 => "a kernel's function changed in an unsupported way",
        8 => "a node's attributes changed in a way an update cannot apply",
        _ => "no further reason given",
    }
}

/// Updates `exec` in place to run `graph`'s parameters. Err: the update does not apply (the
/// executable graph is left as it was); the detail says why.
///
/// # Safety
/// `exec` is a live executable graph, `graph` a live graph.
pub(crate) unsafe fn exec_update(exec: GraphExecHandle, graph: GraphHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::graph_exec_update(exec, graph) }.map_err(|(f, result)| {
        // cudart keeps a refused update as the thread's last error.
        cudart::get_last_error();
        Error::cuda(
            f.call,
            f.code,
            format!("exec={exec:p} graph={graph:p}: {}", update_reason(result)),
        )
    })
}

/// Destroys an executable graph.
///
/// # Safety
/// `exec` is a live executable graph, destroyed once, not used afterwards.
pub(crate) unsafe fn exec_destroy(exec: GraphExecHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::graph_exec_destroy(exec) }.detail(|| format!("exec={exec:p}"))
}

/// Destroys a graph.
///
/// # Safety
/// `graph` is a live graph, destroyed once, not used afterwards.
pub(crate) unsafe fn destroy(graph: GraphHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::graph_destroy(graph) }.detail(|| format!("graph={graph:p}"))
}

/// Makes `graph` (one being captured included) call `on_release(data)` once it and every
/// executable graph made from it have been destroyed, on a thread of CUDA's (`on_release`
/// must not call CUDA). On Err nothing is attached, and `on_release(data)` is still called once
/// (at once, or soon from CUDA's thread), so the caller's books balance either way.
///
/// # Safety
/// `graph` is a live graph; `on_release(data)` is sound to call once, from any thread, at any
/// later time.
pub(crate) unsafe fn hold_until_released(
    graph: GraphHandle,
    data: *mut c_void,
    on_release: HostFn,
) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    let obj = match unsafe { cudart::user_object_create(data, on_release) } {
        Ok(obj) => obj,
        Err(f) => {
            // SAFETY: `on_release(data)` is sound to call once, now (this function's contract);
            // CUDA made no user object, so nothing else calls it.
            unsafe { on_release(data) };
            return Err(Error::cuda(f.call, f.code, format!("graph={graph:p}")));
        }
    };
    // SAFETY: `graph` is a live graph (contract); our one reference of `obj` moves into it.
    if let Err(f) = unsafe { cudart::graph_retain_user_object_move(graph, obj) } {
        // Still ours: giving it up runs `on_release(data)`.
        // SAFETY: we own the one reference of `obj`.
        let _ = unsafe { cudart::user_object_release(obj) };
        return Err(Error::cuda(f.call, f.code, format!("graph={graph:p}")));
    }
    Ok(())
}

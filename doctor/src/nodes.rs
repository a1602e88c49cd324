//! What the kernel shows of the NVIDIA driver: the `/dev/nvidia*` device nodes (and whether this
//! process may open them), the GPUs it sees, and the kernel module's version.

use crate::report::{DeviceNode, GpusOnHost};
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The control and unified-memory nodes every CUDA process opens.
pub const CONTROL_NODES: [&str; 2] = ["/dev/nvidiactl", "/dev/nvidia-uvm"];

/// `/dev/nvidiactl`, `/dev/nvidia-uvm` (present or not) and every `/dev/nvidiaN` that exists,
/// in numeric order.
pub fn device_nodes() -> Vec<DeviceNode> {
    let mut nodes: Vec<DeviceNode> = CONTROL_NODES.iter().map(|p| node(p)).collect();
    let mut numbered: Vec<u32> = numbered_nodes(Path::new("/dev"));
    numbered.sort_unstable();
    nodes.extend(numbered.iter().map(|n| node(&format!("/dev/nvidia{n}"))));
    nodes
}

/// The N of every `nvidiaN` entry in `dir`.
fn numbered_nodes(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("nvidia"))
                .and_then(|n| n.parse::<u32>().ok())
        })
        .collect()
}

fn node(path: &str) -> DeviceNode {
    match std::fs::metadata(path) {
        Ok(m) => DeviceNode {
            path: path.to_string(),
            exists: true,
            accessible: accessible(path),
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
        },
        Err(_) => DeviceNode {
            path: path.to_string(),
            exists: false,
            accessible: false,
            mode: 0,
            uid: 0,
            gid: 0,
        },
    }
}

/// `access(path, R_OK | W_OK) == 0`: what opening the node for CUDA needs.
fn accessible(path: &str) -> bool {
    let Ok(c) = CString::new(path) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

/// NVIDIA GPUs the kernel sees: the entries of `/proc/driver/nvidia/gpus` (one per PCI device
/// the module drives), else the `/dev/nvidiaN` nodes; None when neither exists.
pub fn gpus_on_host() -> Option<GpusOnHost> {
    if let Ok(entries) = std::fs::read_dir("/proc/driver/nvidia/gpus") {
        return Some(GpusOnHost {
            count: entries.filter_map(|e| e.ok()).count(),
            source: "/proc/driver/nvidia/gpus".into(),
        });
    }
    let n = numbered_nodes(Path::new("/dev")).len();
    (n > 0).then(|| GpusOnHost {
        count: n,
        source: "/dev/nvidia[0-9]* nodes".into(),
    })
}

/// The loaded kernel module's version (`580.95.05`) from `/proc/driver/nvidia/version`.
pub fn kernel_module() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_module_version(&text)
}

/// Reads the version out of `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue ...`
/// (or the "Open Kernel Module" variant); the whole first line when the shape is unknown.
pub fn parse_module_version(text: &str) -> Option<String> {
    let line = text.lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    let after = line
        .split_once("Kernel Module")
        .map_or(line, |(_, rest)| rest);
    let version = after
        .split_whitespace()
        .find(|t| t.contains('.') && t.chars().all(|c| c.is_ascii_digit() || c == '.'));
    Some(version.unwrap_or(line).to_string())
}

//! The out-of-memory report of a device allocation that still fails after the caches were
//! released: what was asked for, what the device has and has free, what this library holds
//! there (in use, cached, graph pools), the largest allocation that succeeds now, what other
//! processes use (NVML, when it can say), and what to do. The figures travel with the error
//! (`Error::out_of_memory`, `llaisysNvidiaLastOutOfMemory`), the words in its message.

use crate::cache;
use crate::error::{Error, OutOfMemory};
use crate::safe::capture::Relaxed;
use crate::safe::memory;

/// The variable naming the file an out-of-memory failure writes a memory snapshot to.
pub const SNAPSHOT_VAR: &str = "LLAISYS_NVIDIA_OOM_SNAPSHOT";

/// The probe's step: allocations are tried in multiples of 2 MiB (the driver's own granularity
/// for large blocks).
const STEP: u64 = 2 << 20;

/// `failed`, the error of a device allocation of `requested` bytes out of memory, with the
/// report: its figures attached and its words added to the detail.
pub(crate) fn report(failed: Error, requested: usize) -> Error {
    let device = crate::safe::device::current_or_unknown();
    let (figures, mut words) = gather(device, requested as u64);
    if let Some(path) = std::env::var_os(SNAPSHOT_VAR).filter(|p| !p.is_empty()) {
        let path = std::path::PathBuf::from(path);
        match super::snapshot::write(&path) {
            Ok(()) => words.push_str(&format!("; a memory snapshot is in {}", path.display())),
            Err(e) => words.push_str(&format!("; no memory snapshot: {}", e.detail())),
        }
    }
    Error::cuda(
        failed.call(),
        failed.cuda_error(),
        format!("{}; {words}", failed.detail()),
    )
    .with_out_of_memory(figures)
}

/// The figures and their words for `device`, the current device.
fn gather(device: i32, requested: u64) -> (OutOfMemory, String) {
    let (free, total) = crate::safe::device::mem_info()
        .map(|(f, t)| (f as u64, t as u64))
        .unwrap_or_else(|_| {
            crate::safe::runtime::take_last_cuda_error();
            (0, 0)
        });
    let stats = cache::device::stats(device).unwrap_or_default();
    let graph_pool_bytes = cache::graph_pool::held(device);
    let largest = largest_allocation(device, free);
    let others = other_processes(device);
    let figures = OutOfMemory {
        device,
        other_processes: others.as_ref().map_or(-1, |o| o.len() as i32),
        requested_bytes: requested,
        total_bytes: total,
        free_bytes: free,
        in_use_bytes: stats.in_use_bytes,
        cached_bytes: stats.cached_bytes.saturating_sub(graph_pool_bytes),
        graph_pool_bytes,
        largest_allocation_bytes: largest.unwrap_or(u64::MAX),
        other_processes_bytes: others
            .as_ref()
            .map_or(0, |o| o.iter().filter_map(|p| p.used_bytes).sum()),
        limit_bytes: cache::limit::bytes(device, total).unwrap_or(0),
    };
    (figures, words(&figures, largest, &others))
}

/// The report in words.
fn words(
    r: &OutOfMemory,
    largest: Option<u64>,
    others: &Result<Vec<crate::nvml::ProcessUsage>, String>,
) -> String {
    let largest = match largest {
        Some(b) => format!("the largest allocation that succeeds now is {}", bytes(b)),
        None => "the largest allocation that succeeds now was not probed (a stream of the device \
                 is capturing a graph)"
            .to_string(),
    };
    let others = match others {
        Ok(list) if list.is_empty() => "NVML lists no other process on the device".to_string(),
        Ok(list) => {
            let each: Vec<String> = list
                .iter()
                .map(|p| match p.used_bytes {
                    Some(b) => format!("pid {} {}", p.pid, bytes(b)),
                    None => format!("pid {} (its use unknown to NVML)", p.pid),
                })
                .collect();
            format!(
                "{} other process(es) on the device use {} ({})",
                list.len(),
                bytes(r.other_processes_bytes),
                each.join(", ")
            )
        }
        Err(why) => format!("what other processes use is unknown: {why}"),
    };
    let limit = match r.limit_bytes {
        0 => String::new(),
        b => format!(
            "; it may hold at most {} there (its memory limit: raise it with \
             llaisysNvidiaSetMemoryLimit or LLAISYS_NVIDIA_MEMORY_LIMIT)",
            bytes(b)
        ),
    };
    format!(
        "out of memory: {} asked for on device {}, which has {} with {} free after this \
         library released its cached memory; this library holds {} in use, {} cached and {} \
         in graph pools there{limit}; {largest}; {others}. To make room: free blocks you no \
         longer need (free_device), destroy graphs you no longer replay (their pools keep \
         their memory), or give the other processes less of the device",
        bytes(r.requested_bytes),
        r.device,
        bytes(r.total_bytes),
        bytes(r.free_bytes),
        bytes(r.in_use_bytes),
        bytes(r.cached_bytes),
        bytes(r.graph_pool_bytes),
    )
}

/// The largest allocation that succeeds on `device` now, to `STEP`, at most `free` bytes; None
/// while a stream of the device captures (cudaFree waits for the device, which a capture
/// forbids).
fn largest_allocation(device: i32, free: u64) -> Option<u64> {
    let _legacy = cache::legacy_stream::usable(device).ok()??;
    // Allocations touch no captured work: allowed through any capture of another device.
    let _relaxed = Relaxed::new();
    let fits = |n: u64| -> bool {
        if n == 0 {
            return true;
        }
        match memory::alloc_device(n as usize) {
            Ok(p) => {
                // SAFETY: just allocated here, never handed out, freed once. A failure is the
                // device's, cleared from cudart's last error like any set aside.
                cache::device::set_aside(unsafe { memory::free_device(p) });
                true
            }
            Err(_) => {
                crate::safe::runtime::take_last_cuda_error();
                false
            }
        }
    };
    // Fragmentation aside, all of the free memory fits: one try; else halve the range.
    let (mut lo, mut hi) = (0, free / STEP);
    if fits(hi * STEP) {
        return Some(hi * STEP);
    }
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid * STEP) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo * STEP)
}

/// The processes other than this one that NVML lists on `device`, or why it cannot say.
fn other_processes(device: i32) -> Result<Vec<crate::nvml::ProcessUsage>, String> {
    let bus = crate::safe::device::pci_bus_id(device).map_err(|e| {
        crate::safe::runtime::take_last_cuda_error();
        format!("the device's PCI bus id is unknown ({e})")
    })?;
    let me = std::process::id();
    let usage = crate::nvml::device_usage(&bus)?;
    Ok(usage
        .processes
        .into_iter()
        .filter(|p| p.pid != me)
        .collect())
}

/// `n` bytes in words: "80.0 GiB (85899345920 bytes)".
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {} ({n} bytes)", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_given_in_binary_units_with_the_exact_count() {
        assert_eq!(bytes(0), "0 bytes");
        assert_eq!(bytes(1023), "1023 bytes");
        assert_eq!(bytes(2 << 20), "2.0 MiB (2097152 bytes)");
        assert_eq!(bytes(80 << 30), "80.0 GiB (85899345920 bytes)");
    }

    #[test]
    fn the_words_name_every_figure_and_what_to_do() {
        let r = OutOfMemory {
            device: 1,
            other_processes: 2,
            requested_bytes: 3 << 30,
            total_bytes: 80 << 30,
            free_bytes: 1 << 30,
            in_use_bytes: 70 << 30,
            cached_bytes: 2 << 20,
            graph_pool_bytes: 4 << 20,
            largest_allocation_bytes: 1 << 30,
            other_processes_bytes: 8 << 30,
            limit_bytes: 0,
        };
        let others = Ok(vec![
            crate::nvml::ProcessUsage {
                pid: 7,
                used_bytes: Some(8 << 30),
            },
            crate::nvml::ProcessUsage {
                pid: 9,
                used_bytes: None,
            },
        ]);
        let text = words(&r, Some(1 << 30), &others);
        for want in [
            "3.0 GiB (3221225472 bytes) asked for on device 1",
            "80.0 GiB (85899345920 bytes) with 1.0 GiB (1073741824 bytes) free",
            "70.0 GiB (75161927680 bytes) in use, 2.0 MiB (2097152 bytes) cached and 4.0 MiB \
             (4194304 bytes) in graph pools",
            "the largest allocation that succeeds now is 1.0 GiB",
            "2 other process(es) on the device use 8.0 GiB",
            "pid 7 8.0 GiB",
            "pid 9 (its use unknown to NVML)",
            "free_device",
            "destroy graphs",
        ] {
            assert!(text.contains(want), "{want:?} not in {text}");
        }
        assert!(!text.contains("memory limit"), "{text}");
        let limited = OutOfMemory {
            limit_bytes: 72 << 30,
            ..r
        };
        let text = words(&limited, Some(1 << 30), &Ok(Vec::new()));
        assert!(
            text.contains(
                "it may hold at most 72.0 GiB (77309411328 bytes) there (its memory limit"
            ) && text.contains("NVML lists no other process on the device"),
            "{text}"
        );
        let text = words(&r, None, &Err("libnvidia-ml.so.1 not found".into()));
        assert!(
            text.contains("was not probed (a stream of the device is capturing"),
            "{text}"
        );
        assert!(
            text.contains("what other processes use is unknown: libnvidia-ml.so.1 not found"),
            "{text}"
        );
    }
}

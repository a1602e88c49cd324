//! The report as text for a person: one section per part, the diagnosis last, long sentences
//! wrapped at 100 columns.

use crate::backend::version_string;
use crate::bench::size_text;
use crate::diagnose::{Diagnosis, Severity};
use crate::report::{
    AllocKind, Bench, CopyKind, DeviceReport, Libcuda, LoaderAnswer, Machine, Report, Smoke,
    SmokeStatus,
};
use std::fmt::Write;

/// The section titles, in order (`== Build` ...); `Bench` only with `--bench`.
pub const SECTIONS: [&str; 8] = [
    "Build",
    "Machine",
    "Environment",
    "Devices",
    "Peer access",
    "Smoke test",
    "Bench",
    "Diagnosis",
];

const WIDTH: usize = 100;
/// What a value whose probe did not finish shows.
const NOT_FINISHED: &str = "unknown: its probe did not finish (see Diagnosis)";
const KEY: usize = 22;

/// The whole report `r`, its diagnosis `d` last.
pub fn render(r: &Report, d: &Diagnosis) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "llaisys-nvidia doctor {}", r.build.crate_version);
    build(r, &mut o);
    machine(&r.machine, &mut o);
    environment(&r.machine, &mut o);
    devices(r, &mut o);
    peers(r, &mut o);
    smoke(&r.smoke, &mut o);
    if let Some(b) = &r.bench {
        bench(b, &mut o);
    }
    diagnosis(d, &mut o);
    o
}

fn section(o: &mut String, title: &str) {
    let _ = writeln!(o, "\n== {title}");
}

/// `  key                 value`, the value wrapped under itself.
fn kv(o: &mut String, key: &str, value: &str) {
    let lead = format!("  {key:<KEY$}");
    wrap(o, &lead, &" ".repeat(lead.len()), value);
}

/// Writes `text` wrapped at WIDTH: the first line after `first`, the others after `rest`.
fn wrap(o: &mut String, first: &str, rest: &str, text: &str) {
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            let _ = writeln!(o, "{line}");
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    let _ = writeln!(o, "{}", line.trim_end());
}

fn gib(bytes: usize) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn build(r: &Report, o: &mut String) {
    let b = &r.build;
    section(o, "Build");
    kv(o, "crate version", &b.crate_version);
    let mode = match b.link_mode.as_str() {
        "static" => "static (libcudart_static.a linked into this program)",
        "loaded" => {
            "loaded (no link-time libcudart: the first CUDA call opens libcudart.so.13 or .12, \
             the newest the driver supports)"
        }
        _ => "dynamic (shared libcudart, found by the loader at start)",
    };
    kv(o, "link mode", mode);
    kv(
        o,
        "built against",
        &format!(
            "CUDA {} (CUDART_VERSION {})",
            version_string(b.cudart_version),
            b.cudart_version
        ),
    );
    kv(
        o,
        "CUDA root",
        &format!("{} ({})", b.cuda_root, b.cuda_origin),
    );
    if b.link_mode == "loaded" {
        let beside = if b.lib_name.is_empty() {
            "none beside these headers".to_string()
        } else {
            format!("{}/{} (searched at run time too)", b.lib_dir, b.lib_name)
        };
        kv(o, "libcudart linked", &format!("none; {beside}"));
        let own = if b.own_runtimes.is_empty() {
            "none made (no libcudart_static.a, binutils or supported target at build time: the build's \
             warnings say which)".to_string()
        } else {
            let made: Vec<&str> = b.own_runtimes.iter().map(|(_, f)| f.as_str()).collect();
            format!(
                "{}; loaded first when beside the library (install.sh and plug-llaisys.sh put \
                 them there)",
                made.join(", ")
            )
        };
        kv(o, "own runtimes", &own);
    } else {
        kv(
            o,
            "libcudart linked",
            &format!("{}/{}", b.lib_dir, b.lib_name),
        );
    }
}

/// The `loaded` mode's choice of runtime: the file, why, what the driver said, every place.
fn loaded_runtime(l: &crate::report::Libcudart, o: &mut String) {
    let Some(c) = &l.loaded else {
        kv(
            o,
            "libcudart",
            "not loaded: its probe did not run (see Diagnosis)",
        );
        return;
    };
    let file = match (&c.path, c.version) {
        (Some(p), Some(v)) => format!("{p} (CUDA {}), opened at run time", version_string(v)),
        _ => "none could be loaded".to_string(),
    };
    kv(o, "libcudart", &file);
    kv(o, "  why", &c.why);
    kv(o, "  driver (loader)", &c.driver);
    for (i, (place, outcome)) in c.tried.iter().enumerate() {
        kv(
            o,
            if i == 0 { "  places tried" } else { "" },
            &format!("{place}: {outcome}"),
        );
    }
}

fn machine(m: &Machine, o: &mut String) {
    section(o, "Machine");
    let runtime = match &m.runtime_version {
        Some(Ok(v)) => format!("CUDA {} (cudaRuntimeGetVersion {v})", version_string(*v)),
        Some(Err(e)) => format!("unknown: cudaRuntimeGetVersion failed: {e}"),
        None => NOT_FINISHED.to_string(),
    };
    kv(o, "CUDA runtime", &runtime);
    let driver = match &m.driver_version {
        Some(Ok(0)) => "none (cudaDriverGetVersion 0)".to_string(),
        Some(Ok(v)) => format!(
            "supports CUDA {} (cudaDriverGetVersion {v})",
            version_string(*v)
        ),
        Some(Err(e)) => format!("unknown: cudaDriverGetVersion failed: {e}"),
        None => NOT_FINISHED.to_string(),
    };
    kv(o, "NVIDIA driver", &driver);
    let module = m
        .kernel_module
        .clone()
        .unwrap_or_else(|| "not loaded (no /proc/driver/nvidia/version)".to_string());
    kv(o, "kernel module", &module);
    let l = &m.libcudart;
    if l.link_mode == "loaded" {
        loaded_runtime(l, o);
    }
    let cudart = if l.link_mode == "static" {
        format!(
            "linked in ({})",
            l.loaded_from.as_deref().unwrap_or("this program")
        )
    } else {
        format!(
            "{}, found through {}",
            l.loaded_from.as_deref().unwrap_or("unknown path"),
            l.found_via.as_deref().unwrap_or("unknown")
        )
    };
    if l.link_mode != "loaded" {
        kv(o, "libcudart", &cudart);
    }
    if l.link_mode == "dynamic" {
        let answer = match &l.without_ld_library_path {
            LoaderAnswer::Found(p) => p.clone(),
            LoaderAnswer::NotFound => "not found".into(),
            LoaderAnswer::NotChecked(why) => format!("not asked: {why}"),
        };
        kv(
            o,
            "",
            &format!("without LD_LIBRARY_PATH, the loader would load: {answer}"),
        );
    }
    // The maps name files with links resolved; the loader's path may go through a link.
    let same_file = |a: &str, b: &str| {
        a == b
            || std::fs::canonicalize(a)
                .ok()
                .is_some_and(|x| std::fs::canonicalize(b).ok() == Some(x))
    };
    for other in &l.shared_mapped {
        if !l
            .loaded_from
            .as_deref()
            .is_some_and(|f| same_file(f, other))
        {
            kv(o, "  also mapped", other);
        }
    }
    let cuda = match &m.libcuda {
        Libcuda::Loaded { path, resolved } => match resolved {
            Some(r) => format!("{path} -> {r}"),
            None => path.clone(),
        },
        Libcuda::NotLoadable { error } => format!("cannot be loaded: {error}"),
    };
    kv(o, "libcuda.so.1", &cuda);
    let nodes: Vec<String> = m
        .device_nodes
        .iter()
        .map(|n| {
            if !n.exists {
                format!("{} missing", n.path)
            } else if n.accessible {
                format!("{} ok ({:04o})", n.path, n.mode)
            } else {
                format!(
                    "{} NOT accessible ({:04o} {}:{})",
                    n.path, n.mode, n.uid, n.gid
                )
            }
        })
        .collect();
    kv(o, "device nodes", &nodes.join(", "));
    let gpus = match &m.gpus_on_host {
        Some(g) => format!("{} ({})", g.count, g.source),
        None => "none seen (no /proc/driver/nvidia/gpus, no /dev/nvidiaN)".into(),
    };
    kv(o, "GPUs on the host", &gpus);
}

fn environment(m: &Machine, o: &mut String) {
    section(o, "Environment");
    if m.env.is_empty() {
        let _ = writeln!(o, "  (no CUDA-related variable is set)");
    }
    for (k, v) in &m.env {
        wrap(o, "  ", "      ", &format!("{k}={v}"));
    }
}

fn devices(r: &Report, o: &mut String) {
    section(o, "Devices");
    let c = &r.device_count;
    let count = match &c.result {
        Some(Ok(n)) => format!("{n} ({:.2} ms)", c.ms),
        Some(Err(e)) => match &e.cuda_error {
            Some(cuda) => format!("0: {cuda} ({:.2} ms)", c.ms),
            None => format!("0: {e} ({:.2} ms)", c.ms),
        },
        None => NOT_FINISHED.to_string(),
    };
    kv(o, "cudaGetDeviceCount", &count);
    for d in &r.devices {
        device(d, o);
    }
}

fn device(d: &DeviceReport, o: &mut String) {
    match &d.properties {
        Ok(p) => {
            let _ = writeln!(o, "  device {}: {}", d.id, p.name);
            let (major, minor) = p.compute_capability;
            kv(o, "  compute capability", &format!("{major}.{minor}"));
            let memory = match d.memory {
                Ok((free, total)) => format!("{} total, {} free", gib(total), gib(free)),
                Err(ref e) => format!("{} total, free unknown: {e}", gib(p.total_memory)),
            };
            kv(o, "  memory", &memory);
            nvml(d, o);
            kv(o, "  multiprocessors", &p.multiprocessors.to_string());
            kv(o, "  PCI bus id", &p.pci_bus_id);
            kv(o, "  async copy engines", &p.async_engines.to_string());
            kv(o, "  unified addressing", yes(p.unified_addressing));
            kv(o, "  memory pools", yes(p.memory_pools));
        }
        Err(e) => {
            let _ = writeln!(o, "  device {}: properties unreadable: {e}", d.id);
        }
    }
}

/// NVML's view of the device: the other processes and what they use (the figures of the
/// library's out-of-memory report), then one line per process, the probe process marked.
fn nvml(d: &DeviceReport, o: &mut String) {
    let u = match &d.nvml {
        None => return kv(o, "  processes (NVML)", NOT_FINISHED),
        Some(Err(why)) => return kv(o, "  processes (NVML)", &format!("unknown: {why}")),
        Some(Ok(u)) => u,
    };
    let others = u.others().count();
    let unmeasured = u.others().filter(|p| p.used_bytes.is_none()).count();
    let mut summary = match others {
        0 => "no other process".to_string(),
        1 => format!("1 other process uses {}", gib(u.others_bytes() as usize)),
        n => format!("{n} other processes use {}", gib(u.others_bytes() as usize)),
    };
    if unmeasured > 0 {
        let _ = write!(
            summary,
            " (NVML cannot measure {unmeasured} of them: no permission, or MIG)"
        );
    }
    let _ = write!(
        summary,
        "; {} in use in all, of {}",
        gib(u.used_bytes as usize),
        gib(u.total_bytes as usize)
    );
    kv(o, "  processes (NVML)", &summary);
    for p in &u.processes {
        let mut use_ = match p.used_bytes {
            Some(b) => gib(b as usize),
            None => "its use unknown to NVML".to_string(),
        };
        if p.pid == u.probe_pid {
            use_.push_str(" (this doctor's probe process)");
        }
        kv(o, &format!("    pid {}", p.pid), &use_);
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn peers(r: &Report, o: &mut String) {
    section(o, "Peer access");
    let n = r.devices.len();
    if n < 2 {
        let _ = writeln!(o, "  (needs two devices; {n} shown)");
        return;
    }
    let _ = writeln!(o, "  row device can access column device's memory");
    let mut head = String::from("      ");
    for j in 0..n {
        let _ = write!(head, "{j:>5}");
    }
    let _ = writeln!(o, "{head}");
    for i in 0..n {
        let mut row = format!("  {i:>4}");
        for j in 0..n {
            let cell = if i == j {
                "-"
            } else {
                match r
                    .peer_access
                    .iter()
                    .find(|p| p.from as usize == i && p.to as usize == j)
                    .map(|p| &p.result)
                {
                    Some(Ok(true)) => "yes",
                    Some(Ok(false)) => "no",
                    _ => "?",
                }
            };
            let _ = write!(row, "{cell:>5}");
        }
        let _ = writeln!(o, "{row}");
    }
}

fn smoke(s: &Smoke, o: &mut String) {
    section(o, "Smoke test");
    let calls: Vec<String> = s
        .first_calls
        .iter()
        .map(|c| format!("{} {:.2} ms", c.call, c.ms))
        .collect();
    let calls = if calls.is_empty() {
        "none finished (see Diagnosis)".to_string()
    } else {
        calls.join(", ")
    };
    kv(o, "first CUDA calls", &calls);
    match &s.context_ms {
        Some(Ok(ms)) => kv(
            o,
            "context creation",
            &format!(
                "{ms:.1} ms on device {} (cudaInitDevice + cudaSetDevice + cudaFree(0))",
                s.device
            ),
        ),
        Some(Err(e)) => kv(o, "context creation", &format!("failed: {e}")),
        None => {}
    }
    for st in &s.steps {
        match &st.error {
            None => {
                let _ = writeln!(o, "  ok    {:>9.3} ms  {}", st.ms, st.name);
            }
            Some(e) => wrap(
                o,
                &format!("  FAIL  {:>9.3} ms  ", st.ms),
                "                      ",
                &format!("{}: {e}", st.name),
            ),
        }
    }
    let verdict = match &s.status {
        SmokeStatus::Passed => format!(
            "passed: {} bytes H2D -> D2D -> D2H through the llaisys table on device {}, \
             verified byte for byte",
            s.bytes, s.device
        ),
        SmokeStatus::Failed => format!("FAILED on device {}", s.device),
        SmokeStatus::Skipped(why) => format!("skipped: {why}"),
    };
    wrap(o, "  ", "  ", &verdict);
}

fn bench(b: &Bench, o: &mut String) {
    section(o, "Bench");
    if let Some(why) = &b.skipped {
        wrap(o, "  ", "  ", &format!("skipped: {why}"));
        return;
    }
    wrap(
        o,
        "  ",
        "  ",
        &format!(
            "device {}: GB/s = 10^9 bytes copied per second (D2D reads and writes each byte, so \
             its memory traffic is twice the figure); median of event-timed cudaMemcpyAsync \
             after a warm-up",
            b.device
        ),
    );
    let mut head = format!("  {:<10}", "size");
    for k in CopyKind::ALL {
        let _ = write!(head, "{:>14}", k.title());
    }
    let _ = writeln!(o, "{head}");
    for &size in &b.sizes {
        let mut row = format!("  {:<10}", size_text(size));
        for k in CopyKind::ALL {
            let cell = b
                .copy(k, size)
                .map_or("-".to_string(), |c| format!("{:.2}", c.gbps));
            let _ = write!(row, "{cell:>14}");
        }
        let _ = writeln!(o, "{row}");
    }
    let mut sizes: Vec<usize> = b.allocations.iter().map(|a| a.size).collect();
    sizes.dedup();
    if !sizes.is_empty() {
        let mut head = format!("  {:<16}", "allocation (us)");
        for &s in &sizes {
            let _ = write!(head, "{:>12}", size_text(s));
        }
        let _ = writeln!(o, "{head}");
        for k in AllocKind::ALL {
            let mut row = format!("  {:<16}", k.call());
            for &s in &sizes {
                let cell = b
                    .allocations
                    .iter()
                    .find(|a| a.kind == k && a.size == s)
                    .map_or("-".to_string(), |a| format!("{:.1}", a.median_us));
                let _ = write!(row, "{cell:>12}");
            }
            let _ = writeln!(o, "{row}");
        }
    }
    if let Some(e) = &b.error {
        wrap(o, "  FAILED: ", "          ", e);
    }
}

fn diagnosis(d: &Diagnosis, o: &mut String) {
    section(o, "Diagnosis");
    if d.findings.is_empty() {
        let _ = writeln!(o, "  nothing wrong found");
    }
    for f in &d.findings {
        let tag = match f.severity {
            Severity::Error => "error: ",
            Severity::Warning => "warning: ",
            Severity::Note => "note: ",
        };
        wrap(o, &format!("  {tag}"), "    ", &f.summary);
        wrap(o, "    fix: ", "         ", &f.fix);
    }
    let _ = writeln!(
        o,
        "  verdict: {} (exit {})",
        d.status.words(),
        d.status.exit_code()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Failure, NvmlUsage, ProcessMemory};

    const GIB: u64 = 1 << 30;

    /// Device 0 with 80 GiB, 78 GiB free, and `nvml`.
    fn device_with(nvml: Option<Result<NvmlUsage, String>>) -> DeviceReport {
        crate::report::sample_device(0, "NVIDIA H100 80GB HBM3", "0000:00:06.0", (78, 80), nvml)
    }

    /// Two other processes, one NVML cannot measure, and the probe process.
    fn usage() -> NvmlUsage {
        NvmlUsage {
            total_bytes: 80 * GIB,
            used_bytes: 2 * GIB,
            processes: vec![
                ProcessMemory {
                    pid: 4242,
                    used_bytes: Some(3 * GIB / 2),
                },
                ProcessMemory {
                    pid: 4343,
                    used_bytes: None,
                },
                ProcessMemory {
                    pid: 777,
                    used_bytes: Some(GIB / 2),
                },
            ],
            probe_pid: 777,
        }
    }

    fn shown(d: &DeviceReport) -> String {
        let mut o = String::new();
        device(d, &mut o);
        o
    }

    /// `text` with every run of spaces and line breaks made one space (undoes the wrapping).
    fn flat(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_device_shows_its_memory_and_every_process_on_it_the_probe_process_marked() {
        let o = shown(&device_with(Some(Ok(usage()))));
        let lines: Vec<&str> = o.lines().collect();
        assert!(
            lines.contains(&"    memory              80.0 GiB total, 78.0 GiB free"),
            "{o}"
        );
        assert!(
            flat(&o).contains(
                "processes (NVML) 2 other processes use 1.5 GiB (NVML cannot measure 1 of them: \
                 no permission, or MIG); 2.0 GiB in use in all, of 80.0 GiB"
            ),
            "{o}"
        );
        for want in [
            "      pid 4242          1.5 GiB",
            "      pid 4343          its use unknown to NVML",
            "      pid 777           0.5 GiB (this doctor's probe process)",
        ] {
            assert!(lines.contains(&want), "{want:?} not a line of:\n{o}");
        }
        // One line per process, in NVML's order, right after the summary.
        let at = |p: &str| {
            lines
                .iter()
                .position(|l| l.contains(p))
                .unwrap_or(usize::MAX)
        };
        assert!(at("pid 4242") < at("pid 4343") && at("pid 4343") < at("pid 777"));
        assert!(at("processes (NVML)") < at("pid 4242"));
        assert_eq!(o.matches("probe process").count(), 1, "{o}");
        // No line runs past the width.
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{o}");
    }

    #[test]
    fn one_other_process_and_none() {
        let mut u = usage();
        u.processes.remove(1);
        let o = flat(&shown(&device_with(Some(Ok(u.clone())))));
        assert!(o.contains("processes (NVML) 1 other process uses 1.5 GiB; 2.0 GiB in use"));
        assert!(!o.contains("cannot measure"), "{o}");
        u.processes.retain(|p| p.pid == 777);
        let o = flat(&shown(&device_with(Some(Ok(u)))));
        assert!(
            o.contains("processes (NVML) no other process; 2.0 GiB in use in all, of 80.0 GiB"),
            "{o}"
        );
        assert!(
            o.contains("pid 777 0.5 GiB (this doctor's probe process)"),
            "{o}"
        );
    }

    #[test]
    fn nvml_unavailable_shows_its_reason_and_an_unfinished_probe_says_so() {
        let why = "libnvidia-ml.so.1 not found (searched the loader's path); install the NVIDIA \
                   driver's NVML or name it with LLAISYS_NVIDIA_NVML_LIBRARY";
        let o = shown(&device_with(Some(Err(why.into()))));
        assert!(
            flat(&o).contains(&format!("processes (NVML) unknown: {why}")),
            "{o}"
        );
        assert!(!o.contains("pid "), "{o}");
        // The free memory from CUDA is still shown.
        assert!(o.contains("80.0 GiB total, 78.0 GiB free"), "{o}");
        let o = shown(&device_with(None));
        assert!(
            flat(&o).contains(&format!("processes (NVML) {NOT_FINISHED}")),
            "{o}"
        );
    }

    #[test]
    fn a_device_whose_properties_are_unreadable_shows_no_nvml_line() {
        let mut d = device_with(Some(Err("not asked".into())));
        d.properties = Err(Failure {
            message: "cudaGetDeviceProperties failed".into(),
            call: "cudaGetDeviceProperties".into(),
            cuda_error: None,
        });
        let o = shown(&d);
        assert!(o.contains("properties unreadable"), "{o}");
        assert!(!o.contains("NVML"), "{o}");
    }
}

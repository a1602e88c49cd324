//! `llaisys-nvidia memory`: the figures of a memory snapshot per device (blocks by state, by
//! size class, blocks in use by stream, the call sites holding the most bytes in use) and the
//! text that prints them.

use crate::snapshot::{Device, Snapshot, State};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The size classes: a block is in the first whose bound (bytes) it does not pass; blocks
/// larger than the last bound are in the class "> 128 MiB".
pub const CLASSES: [(u64, &str); 4] = [
    (64 << 10, "<= 64 KiB"),
    (1 << 20, "<= 1 MiB"),
    (16 << 20, "<= 16 MiB"),
    (128 << 20, "<= 128 MiB"),
];
/// The name of the class of blocks larger than every bound of [`CLASSES`].
pub const LARGER: &str = "> 128 MiB";
/// How many call sites the summary lists.
pub const TOP_SITES: usize = 5;

/// A number of blocks and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Blocks.
    pub blocks: usize,
    /// Their bytes.
    pub bytes: u64,
}

impl Count {
    fn add(&mut self, size: u64) {
        self.blocks += 1;
        self.bytes += size;
    }
}

/// The figures of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Blocks by state, in the order of [`State::ALL`].
    pub states: Vec<(State, Count)>,
    /// All blocks by size class, in the order of [`CLASSES`] then [`LARGER`].
    pub classes: Vec<(&'static str, Count)>,
    /// Blocks in use by stream (`(none)` where a block names none), by stream.
    pub streams: Vec<(String, Count)>,
    /// Call sites of blocks in use, most bytes first (ties: by site), at most [`TOP_SITES`].
    pub sites: Vec<(String, Count)>,
}

impl Summary {
    /// The figures of `d`.
    pub fn of(d: &Device) -> Summary {
        let mut states = State::ALL.map(|s| (s, Count::default()));
        let mut classes: Vec<(&'static str, Count)> = CLASSES
            .iter()
            .map(|&(_, name)| (name, Count::default()))
            .chain([(LARGER, Count::default())])
            .collect();
        let mut streams: BTreeMap<String, Count> = BTreeMap::new();
        let mut sites: BTreeMap<String, Count> = BTreeMap::new();
        for b in &d.blocks {
            // `State::ALL` lists the states in their declaration order.
            states[b.state as usize].1.add(b.size);
            classes[class_of(b.size)].1.add(b.size);
            if b.state == State::InUse {
                let stream = b.stream.clone().unwrap_or_else(|| "(none)".to_string());
                streams.entry(stream).or_default().add(b.size);
                if let Some(site) = &b.site {
                    sites.entry(site.clone()).or_default().add(b.size);
                }
            }
        }
        let mut sites: Vec<(String, Count)> = sites.into_iter().collect();
        sites.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then_with(|| a.0.cmp(&b.0)));
        sites.truncate(TOP_SITES);
        Summary {
            states: states.to_vec(),
            classes,
            streams: streams.into_iter().collect(),
            sites,
        }
    }
}

/// The index of the size class of a block of `size` bytes: into [`CLASSES`], or its length
/// for [`LARGER`].
pub fn class_of(size: u64) -> usize {
    CLASSES
        .iter()
        .position(|&(bound, _)| size <= bound)
        .unwrap_or(CLASSES.len())
}

/// Bytes in the largest binary unit they reach, one decimal: `512 B`, `1.5 MiB`, `80.0 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `3 blocks, 1.5 MiB (1572864 bytes)`.
pub fn count(c: Count) -> String {
    let noun = if c.blocks == 1 { "block" } else { "blocks" };
    format!("{} {noun}, {}", c.blocks, bytes(c.bytes))
}

/// `1.5 MiB (1572864 bytes)`.
pub fn bytes(b: u64) -> String {
    format!("{} ({b} bytes)", size(b))
}

/// A device's memory limit, in words.
pub fn limit(d: &Device) -> String {
    match d.limit_bytes {
        0 => "none".to_string(),
        l => bytes(l),
    }
}

/// A device's release threshold, in words.
pub fn threshold(d: &Device) -> String {
    d.release_threshold_bytes
        .map_or("none (all freed memory stays cached)".to_string(), bytes)
}

/// The first line of a call site (its innermost frame), trimmed.
pub fn first_frame(site: &str) -> &str {
    site.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// The column where values start, after the indent and the key.
const VALUE_AT: usize = 22;

/// `key` after `indent` spaces, the value at [`VALUE_AT`] (or one space after a longer key).
fn line(o: &mut String, indent: usize, key: &str, value: &str) {
    let width = VALUE_AT.saturating_sub(indent + 1);
    let _ = writeln!(o, "{:indent$}{key:<width$} {value}", "");
}

/// The text summary of `s`, read from `source` (the file's name as given).
pub fn render(s: &Snapshot, source: &str) -> String {
    let mut o = String::new();
    let devices = match s.devices.len() {
        1 => "1 device".to_string(),
        n => format!("{n} devices"),
    };
    let history = if s.history {
        "call sites recorded"
    } else {
        "no call sites (LLAISYS_NVIDIA_MEMORY_HISTORY=1 records them)"
    };
    let _ = writeln!(
        o,
        "memory snapshot {source}: pid {}, {devices}, {history}",
        s.pid
    );
    for d in &s.devices {
        device(&mut o, d, s.history);
    }
    o
}

fn device(o: &mut String, d: &Device, history: bool) {
    let sum = Summary::of(d);
    let _ = writeln!(o, "\n== device {}", d.device);
    let memory = match (d.total_bytes, d.free_bytes) {
        (Some(t), Some(f)) => format!("{} total, {} free", bytes(t), bytes(f)),
        (Some(t), None) => format!("{} total, free unknown", bytes(t)),
        (None, Some(f)) => format!("total unknown, {} free", bytes(f)),
        (None, None) => "unknown (cudaMemGetInfo failed)".to_string(),
    };
    line(o, 2, "memory", &memory);
    line(o, 2, "pool reserved", &bytes(d.pool_reserved_bytes));
    line(o, 2, "limit", &limit(d));
    line(o, 2, "release threshold", &threshold(d));
    line(o, 2, "blocks", &count(sum_of(&sum.states)));
    let _ = writeln!(o, "  by state");
    for (state, c) in &sum.states {
        line(o, 4, state.name(), &count(*c));
    }
    let _ = writeln!(o, "  by size class");
    for (class, c) in &sum.classes {
        line(o, 4, class, &count(*c));
    }
    let _ = writeln!(o, "  in use by stream");
    if sum.streams.is_empty() {
        let _ = writeln!(o, "    none in use");
    }
    for (stream, c) in &sum.streams {
        line(o, 4, stream, &count(*c));
    }
    if history {
        let _ = writeln!(
            o,
            "  call sites holding the most bytes in use (top {TOP_SITES})"
        );
        if sum.sites.is_empty() {
            let _ = writeln!(o, "    none recorded");
        }
        for (site, c) in &sum.sites {
            let _ = writeln!(o, "    {}: {}", count(*c), first_frame(site));
        }
    }
}

fn sum_of(states: &[(State, Count)]) -> Count {
    states.iter().fold(Count::default(), |a, (_, c)| Count {
        blocks: a.blocks + c.blocks,
        bytes: a.bytes + c.bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_the_largest_unit_they_reach() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.0 KiB");
        assert_eq!(size(3 << 19), "1.5 MiB");
        assert_eq!(size(80 << 30), "80.0 GiB");
    }

    #[test]
    fn class_bounds_are_inclusive() {
        let at = class_of;
        assert_eq!(at(64 << 10), 0);
        assert_eq!(at((64 << 10) + 1), 1);
        assert_eq!(at((128 << 20) + 1), 4);
    }

    #[test]
    fn the_first_frame_skips_blank_lines() {
        assert_eq!(first_frame("\n  a at x.rs:1\n  b\n"), "a at x.rs:1");
        assert_eq!(first_frame(""), "");
    }
}

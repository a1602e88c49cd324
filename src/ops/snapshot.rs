//! The memory snapshot (`llaisysNvidiaMemorySnapshot`; the document: docs/memory-snapshot.md):
//! every device the library used and every device block it knows there (in use, cached, graph
//! pools), as one JSON document, written by hand (the library depends on no JSON crate).

use crate::cache;
use crate::error::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;

/// One block as the document lists it.
struct Entry {
    address: usize,
    size: usize,
    state: &'static str,
    origin: &'static str,
    stream: Option<usize>,
    seq: Option<u64>,
    site: Option<String>,
}

/// The snapshot as JSON text.
pub fn json() -> String {
    // Its queries (free memory, pool sizes) touch no captured work: allowed beside any capture,
    // this thread's own included.
    let _relaxed = crate::safe::capture::Relaxed::new();
    let in_use = cache::device::in_use_blocks();
    let seen = cache::in_use::seen();
    let mut doc = format!(
        "{{\"format\":\"llaisys-nvidia memory snapshot\",\"version\":1,\"pid\":{},\"history\":{},\"devices\":[",
        std::process::id(),
        cache::history::on()
    );
    let mut first = true;
    for device in (0..cache::MAX_DEVICES as i32).filter(|&d| seen & (1u64 << d) != 0) {
        if !first {
            doc.push(',');
        }
        first = false;
        device_json(&mut doc, device, &in_use);
    }
    doc.push_str("]}\n");
    doc
}

/// Writes the snapshot to `path` (replacing the file).
pub fn write(path: &Path) -> Result<()> {
    std::fs::write(path, json()).map_err(|e| {
        Error::invalid_argument(format!(
            "path={}: the memory snapshot could not be written: {e}",
            path.display()
        ))
    })
}

/// `device`'s object: its figures and its blocks by address.
fn device_json(doc: &mut String, device: i32, in_use: &[cache::device::InUse]) {
    let memory = crate::safe::device::with(device, crate::safe::device::mem_info);
    if memory.is_err() {
        crate::safe::runtime::take_last_cuda_error();
    }
    let (free, total) = match memory {
        Ok((f, t)) => (f.to_string(), t.to_string()),
        Err(_) => ("null".to_string(), "null".to_string()),
    };
    let total_bytes = memory.map_or(0, |(_, t)| t as u64);
    let limit = cache::limit::bytes(device, total_bytes).unwrap_or(0);
    let threshold = cache::threshold::of(device).map_or("null".to_string(), |t| t.to_string());
    let _ = write!(
        doc,
        "{{\"device\":{device},\"total_bytes\":{total},\"free_bytes\":{free},\
         \"pool_reserved_bytes\":{},\"limit_bytes\":{limit},\"release_threshold_bytes\":{threshold},\
         \"blocks\":[",
        cache::device::pool_reserved(device)
    );
    let mut entries = blocks(device, in_use);
    entries.sort_by_key(|e| e.address);
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            doc.push(',');
        }
        let _ = write!(
            doc,
            "{{\"address\":\"{:#x}\",\"size\":{},\"state\":\"{}\",\"origin\":\"{}\",\"stream\":{},\
             \"seq\":{},\"site\":{}}}",
            e.address,
            e.size,
            e.state,
            e.origin,
            e.stream
                .map_or("null".to_string(), |s| format!("\"{s:#x}\"")),
            e.seq.map_or("null".to_string(), |s| s.to_string()),
            e.site.as_deref().map_or("null".to_string(), string),
        );
    }
    doc.push_str("]}");
}

/// Every block of `device`: in use (graph-pool blocks handed out included), kept by the
/// recycling lists, parked large blocks, and graph pools' kept blocks.
fn blocks(device: i32, in_use: &[cache::device::InUse]) -> Vec<Entry> {
    let mut all: Vec<Entry> = in_use
        .iter()
        .filter(|b| b.device == device)
        .map(|b| Entry {
            address: b.ptr,
            size: b.size,
            state: if b.graph { "graph_pool" } else { "in_use" },
            origin: origin(b.graph, b.raw),
            stream: (!b.graph).then_some(b.stream),
            seq: Some(b.seq),
            site: cache::history::site(b.ptr),
        })
        .collect();
    let cached = |b: cache::recycle::Block| Entry {
        address: b.ptr,
        size: b.size,
        state: "cached",
        origin: origin(false, b.raw),
        stream: None,
        seq: None,
        site: None,
    };
    all.extend(cache::recycle::kept(device).into_iter().map(cached));
    all.extend(cache::large::parked(device).into_iter().map(cached));
    all.extend(
        cache::graph_pool::kept_blocks(device)
            .into_iter()
            .map(|(address, size)| Entry {
                address,
                size,
                state: "graph_pool",
                origin: "graph",
                stream: None,
                seq: None,
                site: None,
            }),
    );
    all
}

fn origin(graph: bool, raw: bool) -> &'static str {
    match (graph, raw) {
        (true, _) => "graph",
        (false, true) => "cudaMalloc",
        (false, false) => "pool",
    }
}

/// `text` as a JSON string.
fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_json_wants() {
        assert_eq!(string("a\"b\\c\nd\u{1}é"), "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    #[test]
    fn the_document_names_its_format_and_process() {
        let doc = json();
        let head = format!(
            "{{\"format\":\"llaisys-nvidia memory snapshot\",\"version\":1,\"pid\":{},",
            std::process::id()
        );
        assert!(doc.starts_with(&head), "{doc}");
        assert!(doc.ends_with("]}\n"), "{doc}");
    }
}

//! A memory snapshot (docs/memory-snapshot.md) read from its file: the document as plain data,
//! checked member by member, with errors that name the file and the member that is wrong.

use serde_json::{Map, Value};
use std::path::Path;

/// The `format` member of every memory snapshot.
pub const FORMAT: &str = "llaisys-nvidia memory snapshot";
/// The version this program reads.
pub const VERSION: u64 = 1;

/// A memory snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The process that wrote it.
    pub pid: u64,
    /// Whether allocations kept their call sites.
    pub history: bool,
    /// Each device, in the document's order.
    pub devices: Vec<Device>,
    /// The whole document as read (members this program does not know included).
    pub document: Value,
}

/// One device of a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Device {
    /// The CUDA device id.
    pub device: i64,
    /// `cudaMemGetInfo`'s total; None when it failed.
    pub total_bytes: Option<u64>,
    /// `cudaMemGetInfo`'s free; None when it failed.
    pub free_bytes: Option<u64>,
    /// What the device's memory pool holds from the device.
    pub pool_reserved_bytes: u64,
    /// The library's memory limit on the device, 0 when none.
    pub limit_bytes: u64,
    /// The most freed memory kept cached; None when all of it is kept.
    pub release_threshold_bytes: Option<u64>,
    /// Its blocks, in the document's order.
    pub blocks: Vec<Block>,
}

/// One block of a device.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Its address as written (`0x` and hexadecimal).
    pub address: String,
    /// Its address as a number.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// In use, cached, or a graph pool's.
    pub state: State,
    /// Where its memory comes from.
    pub origin: Origin,
    /// The stream it was allocated in the order of (blocks in use).
    pub stream: Option<String>,
    /// Its allocation's number on its device (blocks in use).
    pub seq: Option<u64>,
    /// Its call site, one frame per line (with history).
    pub site: Option<String>,
}

/// A block's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    /// Handed out, not freed.
    InUse,
    /// Freed, kept for reuse.
    Cached,
    /// Memory of a graph pool, kept for its graphs' replays.
    GraphPool,
}

impl State {
    /// Every state, in the order summaries list them.
    pub const ALL: [State; 3] = [State::InUse, State::Cached, State::GraphPool];

    /// Its name in the document.
    pub fn name(self) -> &'static str {
        match self {
            State::InUse => "in_use",
            State::Cached => "cached",
            State::GraphPool => "graph_pool",
        }
    }
}

/// Where a block's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// The device's stream-ordered pool.
    Pool,
    /// `cudaMalloc`.
    CudaMalloc,
    /// A graph pool.
    Graph,
}

impl Origin {
    /// Its name in the document.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Pool => "pool",
            Origin::CudaMalloc => "cudaMalloc",
            Origin::Graph => "graph",
        }
    }
}

/// Reads the snapshot at `path`; Err names the file and what is wrong with it.
pub fn read(path: &Path) -> Result<Snapshot, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the memory snapshot {shown}: {e}"))?;
    parse(&text).map_err(|e| format!("{shown}: {e}"))
}

/// Parses a snapshot's text; Err says what is wrong.
pub fn parse(text: &str) -> Result<Snapshot, String> {
    let document: Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON document ({e})"))?;
    let top = object(&document, "the document")?;
    match top.get("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(other) => {
            return Err(format!(
                "not a memory snapshot: format is {other}, not \"{FORMAT}\""
            ))
        }
        None => return Err(format!("not a memory snapshot: no format \"{FORMAT}\"")),
    }
    match top.get("version") {
        Some(v) if v.as_u64() == Some(VERSION) => {}
        Some(v) => {
            return Err(format!(
                "memory snapshot version {v}: this llaisys-nvidia reads version {VERSION}"
            ))
        }
        None => return Err("the memory snapshot has no version".to_string()),
    }
    let pid = uint(top, "pid", "")?;
    let history = match member(top, "history", "")? {
        Value::Bool(b) => *b,
        v => return Err(format!("history is {v}, not true or false")),
    };
    let devices = array(top, "devices", "")?
        .iter()
        .enumerate()
        .map(|(i, d)| device(d, &format!("devices[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Snapshot {
        pid,
        history,
        devices,
        document,
    })
}

fn device(v: &Value, at: &str) -> Result<Device, String> {
    let o = object(v, at)?;
    let device = member(o, "device", at)?
        .as_i64()
        .ok_or_else(|| format!("{at}.device is not an integer"))?;
    let blocks = array(o, "blocks", at)?
        .iter()
        .enumerate()
        .map(|(i, b)| block(b, &format!("{at}.blocks[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Device {
        device,
        total_bytes: opt_uint(o, "total_bytes", at)?,
        free_bytes: opt_uint(o, "free_bytes", at)?,
        pool_reserved_bytes: uint(o, "pool_reserved_bytes", at)?,
        limit_bytes: uint(o, "limit_bytes", at)?,
        release_threshold_bytes: opt_uint(o, "release_threshold_bytes", at)?,
        blocks,
    })
}

fn block(v: &Value, at: &str) -> Result<Block, String> {
    let o = object(v, at)?;
    let address = string(o, "address", at)?;
    let addr = address
        .strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or_else(|| format!("{at}.address is \"{address}\", not 0x and hexadecimal"))?;
    let state = match string(o, "state", at)?.as_str() {
        "in_use" => State::InUse,
        "cached" => State::Cached,
        "graph_pool" => State::GraphPool,
        s => {
            return Err(format!(
                "{at}.state is \"{s}\", not in_use, cached or graph_pool"
            ))
        }
    };
    let origin = match string(o, "origin", at)?.as_str() {
        "pool" => Origin::Pool,
        "cudaMalloc" => Origin::CudaMalloc,
        "graph" => Origin::Graph,
        s => {
            return Err(format!(
                "{at}.origin is \"{s}\", not pool, cudaMalloc or graph"
            ))
        }
    };
    Ok(Block {
        address,
        addr,
        size: uint(o, "size", at)?,
        state,
        origin,
        stream: opt_string(o, "stream", at)?,
        seq: opt_uint(o, "seq", at)?,
        site: opt_string(o, "site", at)?,
    })
}

/// `at.name`, or `name` at the top.
fn path(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{at} is not a JSON object"))
}

fn member<'a>(o: &'a Map<String, Value>, name: &str, at: &str) -> Result<&'a Value, String> {
    o.get(name)
        .ok_or_else(|| format!("{} is missing", path(at, name)))
}

fn array<'a>(o: &'a Map<String, Value>, name: &str, at: &str) -> Result<&'a Vec<Value>, String> {
    member(o, name, at)?
        .as_array()
        .ok_or_else(|| format!("{} is not an array", path(at, name)))
}

fn uint(o: &Map<String, Value>, name: &str, at: &str) -> Result<u64, String> {
    opt_uint(o, name, at)?.ok_or_else(|| format!("{} is null, not a byte count", path(at, name)))
}

fn opt_uint(o: &Map<String, Value>, name: &str, at: &str) -> Result<Option<u64>, String> {
    match member(o, name, at)? {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{} is {v}, not a non-negative integer", path(at, name))),
    }
}

fn string(o: &Map<String, Value>, name: &str, at: &str) -> Result<String, String> {
    opt_string(o, name, at)?.ok_or_else(|| format!("{} is null, not a string", path(at, name)))
}

fn opt_string(o: &Map<String, Value>, name: &str, at: &str) -> Result<Option<String>, String> {
    match member(o, name, at)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        v => Err(format!("{} is {v}, not a string", path(at, name))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(version: &str, block: &str) -> String {
        format!(
            r#"{{"format": "{FORMAT}", "version": {version}, "pid": 7, "history": false,
                "devices": [{{"device": 0, "total_bytes": null, "free_bytes": null,
                  "pool_reserved_bytes": 0, "limit_bytes": 0, "release_threshold_bytes": null,
                  "blocks": [{block}]}}]}}"#
        )
    }

    const BLOCK: &str = r#"{"address": "0x10", "size": 8, "state": "in_use", "origin": "pool",
        "stream": "0x0", "seq": 1, "site": null, "later": 1}"#;

    #[test]
    fn a_good_document_reads_with_members_of_later_versions_ignored() {
        let s = parse(&doc("1", BLOCK)).expect("parses");
        assert_eq!(s.pid, 7);
        let b = &s.devices[0].blocks[0];
        assert_eq!((b.addr, b.size, b.state), (0x10, 8, State::InUse));
        assert_eq!(b.stream.as_deref(), Some("0x0"));
    }

    #[test]
    fn a_wrong_member_is_named_by_its_path() {
        let bad = BLOCK.replace("\"in_use\"", "\"lost\"");
        let e = parse(&doc("1", &bad)).unwrap_err();
        assert!(e.contains("devices[0].blocks[0].state is \"lost\""), "{e}");
        let bad = BLOCK.replace("\"0x10\"", "\"16\"");
        let e = parse(&doc("1", &bad)).unwrap_err();
        assert!(e.contains("devices[0].blocks[0].address"), "{e}");
        let bad = BLOCK.replace("\"size\": 8", "\"size\": -8");
        let e = parse(&doc("1", &bad)).unwrap_err();
        assert!(e.contains("devices[0].blocks[0].size is -8"), "{e}");
        let e = parse(&doc("2", BLOCK)).unwrap_err();
        assert!(e.contains("version 2"), "{e}");
    }
}

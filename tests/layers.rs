//! Host-only test of the crate's architecture (issue 11): every `crate::`, `super::` and `self::`
//! path in src/ is resolved to the module it names, and
//! - no module uses a module of a higher layer (the order in `LAYERS`, as in lib.rs's map);
//! - no modules use each other in a loop, directly or through others (a parent's re-exports of
//!   its own children do not count as use);
//! - only `error` and `cudart` touch the raw bindings;
//! - every module of src/ has a layer (a new one must be placed on purpose).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first.
const LAYERS: &[&[&str]] = &[
    &["raw"],
    &["error", "cudart", "sync", "env", "hash"],
    &[
        "runtime",
        "device",
        "stream",
        "event",
        "memory",
        "memory_kinds",
        "pointer",
        "pool",
        "copy",
        "nccl",
        "capture",
        "graph",
    ],
    &["cache", "pageable", "legacy"],
    &["ops"],
    &["capi"],
];

/// Modules outside the layering: the crate root (module map and re-exports).
const OUTSIDE: &[&str] = &[""];

fn layer_of(module: &str) -> Option<usize> {
    let top = module.split("::").next().unwrap_or("");
    LAYERS.iter().position(|l| l.contains(&top))
}

/// The module path of a source file (`src/cache/device.rs` -> `cache::device`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments and string literals (paths in docs or messages are not
/// uses).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// The paths written after `crate::`, `super::` or `self::`, expanded over `{a, b::c}` groups,
/// each as the list of its segments (with `super`/`self` resolved against `module`).
fn paths(code: &str, module: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            if at > 1 && &code[at - 2..at] == "::" {
                continue; // `super::super::` is handled from the first one.
            }
            let mut base: Vec<String> = match start {
                "crate::" => Vec::new(),
                _ => {
                    let mut m: Vec<String> = module
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect();
                    // A file's `super` is its parent module; `self` is itself.
                    if start == "super::" {
                        m.pop();
                    }
                    m
                }
            };
            let mut rest = &code[at + start.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            expand(rest, base, &mut found);
        }
    }
    found
}

/// Expands `a::b::{c, d::e}` into its paths, pushing them onto `out`.
fn expand(text: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = base;
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut end = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let inner = &group[..end];
            let mut depth = 0;
            let mut last = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&inner[last..i], path.clone(), out);
                        last = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&inner[last..], path.clone(), out);
            return;
        }
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            break;
        }
        if ident != "self" {
            path.push(ident.clone());
        }
        rest = &rest[ident.len()..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// The longest known module a path starts with.
fn target(path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

struct Graph {
    modules: BTreeSet<String>,
    /// module -> (used module, how it was written) for every use.
    uses: BTreeMap<String, Vec<(String, String)>>,
    raw_users: BTreeSet<String>,
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut uses = BTreeMap::new();
    let mut raw_users = BTreeSet::new();
    for f in &files {
        let module = module_of(&src, f);
        let text = std::fs::read_to_string(f).expect("read");
        let code = code_only(&text);
        let mut mine = Vec::new();
        for p in paths(&code, &module) {
            if let Some(t) = target(&p, &modules) {
                if t == "raw" {
                    raw_users.insert(module.clone());
                }
                if t != module {
                    mine.push((t, p.join("::")));
                }
            }
        }
        uses.insert(module, mine);
    }
    Graph {
        modules,
        uses,
        raw_users,
    }
}

fn outside(module: &str) -> bool {
    OUTSIDE.contains(&module.split("::").next().unwrap_or(""))
}

#[test]
fn every_module_has_a_layer() {
    let g = graph();
    let unplaced: Vec<&String> = g
        .modules
        .iter()
        .filter(|m| !outside(m) && layer_of(m).is_none())
        .collect();
    assert!(unplaced.is_empty(), "modules without a layer: {unplaced:?}");
    assert!(g.modules.contains("ops::copies") && g.modules.contains("cache::device"));
}

#[test]
fn no_module_uses_a_higher_layer() {
    let g = graph();
    let mut wrong = Vec::new();
    for (m, used) in &g.uses {
        let (Some(mine), false) = (layer_of(m), outside(m)) else {
            continue;
        };
        for (t, how) in used {
            if outside(t) {
                wrong.push(format!("{m} uses {t} ({how})"));
            } else if layer_of(t).is_some_and(|l| l > mine) {
                wrong.push(format!("{m} (layer {mine}) uses {t} ({how})"));
            }
        }
    }
    assert!(wrong.is_empty(), "uses that go up:\n{}", wrong.join("\n"));
}

#[test]
fn no_modules_use_each_other_in_a_loop() {
    let g = graph();
    // Edges between distinct modules, without a parent's uses of its own children (its
    // `pub use child::x` re-exports) and without the modules outside the layering.
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (m, used) in &g.uses {
        if outside(m) {
            continue;
        }
        for (t, _) in used {
            let child_of_m = t.starts_with(&format!("{m}::"));
            if !child_of_m && !outside(t) {
                edges.entry(m).or_default().insert(t);
            }
        }
    }
    // Depth-first search for a back edge, reporting the loop.
    fn visit<'a>(
        m: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
        loops: &mut Vec<String>,
    ) {
        state.insert(m, 1);
        stack.push(m);
        for &t in edges.get(m).into_iter().flatten() {
            match state.get(t).copied().unwrap_or(0) {
                0 => visit(t, edges, state, stack, loops),
                1 => {
                    let from = stack.iter().position(|&s| s == t).unwrap_or(0);
                    let mut cycle: Vec<&str> = stack[from..].to_vec();
                    cycle.push(t);
                    loops.push(cycle.join(" -> "));
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m, 2);
    }
    let mut state = BTreeMap::new();
    let mut loops = Vec::new();
    let nodes: Vec<&str> = edges.keys().copied().collect();
    for m in nodes {
        if state.get(m).copied().unwrap_or(0) == 0 {
            visit(m, &edges, &mut state, &mut Vec::new(), &mut loops);
        }
    }
    assert!(loops.is_empty(), "import loops:\n{}", loops.join("\n"));
}

#[test]
fn only_the_thin_layer_touches_the_raw_bindings() {
    let g = graph();
    let allowed: BTreeSet<String> = ["error", "cudart", ""].map(String::from).into();
    let extra: Vec<&String> = g
        .raw_users
        .iter()
        .filter(|m| !allowed.contains(*m) && !outside(m))
        .collect();
    assert!(extra.is_empty(), "raw bindings used by {extra:?}");
    assert!(
        g.raw_users.contains("cudart"),
        "the check sees the thin layer's use"
    );
}

#[test]
fn the_path_reader_resolves_groups_and_super() {
    let code = "use super::{cross, in_use::bit, AllocatorStats};\nuse crate::sync::lock;\n";
    let got = paths(code, "cache::device");
    let want: Vec<Vec<String>> = [
        vec!["cache", "cross"],
        vec!["cache", "in_use", "bit"],
        vec!["cache", "AllocatorStats"],
        vec!["sync", "lock"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    for w in &want {
        assert!(got.contains(w), "{w:?} not in {got:?}");
    }
    assert_eq!(code_only("a // crate::x\n\"crate::y\" b"), "a \n\"\" b");
}

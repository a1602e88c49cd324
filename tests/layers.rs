//! Host-only test of the architecture of the workspace's two crates, the library (src/) and the
//! doctor (doctor/src/). Every `crate::`, `super::` and `self::` path is resolved to the module
//! it names (`super` and `self` inside inline `mod x { }` blocks included), and for each crate
//! - no module uses a module of a higher layer (the order of its `Layout`, as in its lib.rs's
//!   module map);
//! - no modules use each other in a loop, directly or through others (a parent's re-exports of
//!   its own children do not count as use);
//! - every module has a layer (a new one must be placed on purpose).
//!
//! Besides: in the library only `error` and `cudart::calls` touch the raw bindings
//! (`cudart::sys`); in the doctor only `backend` names the library. In both crates no module names
//! an item of the crate root (a re-export there is for users, so a module names the module it
//! uses and the check sees it).
//!
//! The checks are functions of a set of files, so that tests below run them on small made-up
//! crates too and show that each one fails where it should.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where a crate's modules are and how they are layered.
struct Layout {
    /// The folder of its sources, from the workspace root.
    src: &'static str,
    /// Top-level modules by layer, lowest first.
    layers: &'static [&'static [&'static str]],
    /// Files under `src` that are not modules of the library target (a binary's main.rs).
    not_modules: &'static [&'static str],
    /// Whether a module may name an item of the crate root (a re-export there). Where not, a
    /// path that names no module is a use of the crate root, which is outside every layer.
    root_items: bool,
}

/// The library: helpers -> what loads libraries at run time -> raw bindings -> errors and one
/// function per cudart call -> the safe layer -> caches and the pageable path -> operations ->
/// the C faces. A layer names top-level modules or, inside `cudart/`, its files.
const LIBRARY: Layout = Layout {
    src: "src",
    layers: &[
        &["util"],
        &["libsearch"],
        &["cudart::loaded"],
        &["cudart::sys"],
        &["error", "cudart", "cudart::calls"],
        &["safe", "nccl", "nvml"],
        &["cache", "pageable"],
        &["ops"],
        &["capi"],
    ],
    not_modules: &[],
    root_items: false,
};

/// The doctor: data and names -> the door into the library -> gathering -> the probe process
/// and its watchdog -> the report put together -> evidence -> diagnosis -> printing -> the
/// command line (doctor/src/lib.rs's module map).
const DOCTOR: Layout = Layout {
    src: "doctor/src",
    layers: &[
        &["exit", "names", "options", "report", "snapshot"],
        &["backend"],
        &[
            "child", "env", "facts", "loader", "nodes", "smoke", "bench", "protocol",
        ],
        &["probes", "watchdog"],
        &["gather"],
        &["evidence"],
        &["diagnose"],
        &["text", "json", "display", "memory", "memory_html"],
        &["cli"],
    ],
    not_modules: &["main.rs"],
    root_items: false,
};

/// Modules outside the layering: the crate root (module map and re-exports).
const OUTSIDE: &[&str] = &[""];

/// The layer of `module`: that of the longest entry of the layout it is or lies inside.
fn layer_of(layout: &Layout, module: &str) -> Option<usize> {
    let inside = |entry: &str| module == entry || module.starts_with(&format!("{entry}::"));
    layout
        .layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().filter(|e| inside(e)).map(move |e| (e.len(), i)))
        .max()
        .map(|(_, i)| i)
}

fn outside(module: &str) -> bool {
    OUTSIDE.contains(&module.split("::").next().unwrap_or(""))
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

fn rust_files(dir: &Path, skip: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let p = entry.expect("entry").path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        if p.is_dir() {
            if name.as_deref() == Some("bin") {
                continue;
            }
            rust_files(&p, &[], out);
        } else if p.extension().is_some_and(|e| e == "rs")
            && !name.as_deref().is_some_and(|n| skip.contains(&n))
        {
            out.push(p);
        }
    }
}

/// The crate's files as (module, text).
fn files_of(layout: &Layout) -> Vec<(String, String)> {
    let src = support::source_dir().join(layout.src);
    let mut files = Vec::new();
    rust_files(&src, layout.not_modules, &mut files);
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("read");
            (module_of(&src, f), text)
        })
        .collect()
}

/// The code of a file without comments, string literals and character literals (paths in
/// docs or messages are not uses; a brace in a literal does not open a block).
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
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    if c == '\n' {
                        out.push('\n');
                    }
                    last = c;
                }
            }
            '"' => {
                skip_literal(&mut chars, '"');
                out.push_str("\"\"");
            }
            '\'' => {
                // A character literal ('x', '\n', '\u{7f}'), or a lifetime ('a), kept.
                let mut ahead = chars.clone();
                let literal = match ahead.next() {
                    Some('\\') => true,
                    Some(_) => ahead.next() == Some('\''),
                    None => false,
                };
                if literal {
                    skip_literal(&mut chars, '\'');
                    out.push_str("' '");
                } else {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Skips the rest of a literal opened by `quote`, through its closing `quote`.
fn skip_literal(chars: &mut std::iter::Peekable<std::str::Chars>, quote: char) {
    let mut escaped = false;
    for c in chars.by_ref() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == quote {
            break;
        }
    }
}

/// The inline modules of `code` (`mod name { ... }`) as (start, end, name) byte spans.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let bytes = code.as_bytes();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("mod ") {
        let at = from + i;
        from = at + 4;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let rest = code[at + 4..].trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || !rest[name.len()..].trim_start().starts_with('{') {
            continue; // `mod name;`: a module of its own file.
        }
        let open = at + 4 + (code[at + 4..].len() - rest.len()) + name.len();
        let open = open + code[open..].find('{').expect("the brace seen above");
        let mut depth = 0;
        let mut end = code.len();
        for (j, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j;
                        break;
                    }
                }
                _ => {}
            }
        }
        spans.push((open, end, name));
    }
    spans
}

/// The paths written after `crate::`, `super::` or `self::`, expanded over `{a, b::c}` groups,
/// each as the list of its segments (with `super`/`self` resolved against `module`, the file's
/// module, and the inline modules around them).
fn paths(code: &str, module: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let inline = inline_modules(code);
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
                    // The inline modules this path is written in, outermost first.
                    m.extend(
                        inline
                            .iter()
                            .filter(|(s, e, _)| *s < at && at < *e)
                            .map(|(_, _, n)| n.clone()),
                    );
                    // `super` is the parent module; `self` the module itself.
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
    /// module -> (used module, how it was written) for every use; `""` is the crate root.
    uses: BTreeMap<String, Vec<(String, String)>>,
    /// module -> its code, without comments and literals.
    code: BTreeMap<String, String>,
}

/// The use graph of `files` (module, text) laid out as `layout` says.
fn graph(layout: &Layout, files: &[(String, String)]) -> Graph {
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut uses = BTreeMap::new();
    let mut code = BTreeMap::new();
    for (module, text) in files {
        let only = code_only(text);
        let mut mine = Vec::new();
        for p in paths(&only, module) {
            match target(&p, &modules) {
                Some(t) if t != *module => mine.push((t, p.join("::"))),
                Some(_) => {}
                None if !layout.root_items => mine.push((String::new(), p.join("::"))),
                None => {}
            }
        }
        uses.insert(module.clone(), mine);
        code.insert(module.clone(), only);
    }
    Graph {
        modules,
        uses,
        code,
    }
}

/// Modules without a layer.
fn unplaced(layout: &Layout, g: &Graph) -> Vec<String> {
    g.modules
        .iter()
        .filter(|m| !outside(m) && layer_of(layout, m).is_none())
        .cloned()
        .collect()
}

/// Uses of a higher layer, or of the crate root.
fn uses_going_up(layout: &Layout, g: &Graph) -> Vec<String> {
    let mut wrong = Vec::new();
    for (m, used) in &g.uses {
        let (Some(mine), false) = (layer_of(layout, m), outside(m)) else {
            continue;
        };
        for (t, how) in used {
            if outside(t) {
                wrong.push(format!("{m} uses the crate root ({how})"));
            } else if layer_of(layout, t).is_some_and(|l| l > mine) {
                wrong.push(format!("{m} (layer {mine}) uses {t} ({how})"));
            }
        }
    }
    wrong
}

/// Modules that use each other in a loop, each loop as `a -> b -> a`.
fn loops(g: &Graph) -> Vec<String> {
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
    let mut found = Vec::new();
    let nodes: Vec<&str> = edges.keys().copied().collect();
    for m in nodes {
        if state.get(m).copied().unwrap_or(0) == 0 {
            visit(m, &edges, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

/// The modules whose code names the crate `name` (`name::` or `use name as`).
fn users_of_crate(g: &Graph, name: &str) -> BTreeSet<String> {
    g.code
        .iter()
        .filter(|(_, code)| {
            [format!("{name}::"), format!("{name} as ")]
                .iter()
                .any(|needle| {
                    code.match_indices(needle.as_str()).any(|(at, _)| {
                        let before = code[..at].chars().next_back();
                        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    })
                })
        })
        .map(|(m, _)| m.clone())
        .collect()
}

fn library() -> Graph {
    graph(&LIBRARY, &files_of(&LIBRARY))
}

fn doctor() -> Graph {
    graph(&DOCTOR, &files_of(&DOCTOR))
}

#[test]
fn every_module_has_a_layer() {
    let g = library();
    let unplaced = unplaced(&LIBRARY, &g);
    assert!(unplaced.is_empty(), "modules without a layer: {unplaced:?}");
    assert!(g.modules.contains("ops::copies") && g.modules.contains("cache::device"));
}

#[test]
fn no_module_uses_a_higher_layer() {
    let wrong = uses_going_up(&LIBRARY, &library());
    assert!(wrong.is_empty(), "uses that go up:\n{}", wrong.join("\n"));
}

#[test]
fn no_modules_use_each_other_in_a_loop() {
    let found = loops(&library());
    assert!(found.is_empty(), "import loops:\n{}", found.join("\n"));
}

#[test]
fn only_the_thin_layer_touches_the_raw_bindings() {
    let g = library();
    let raw_users: BTreeSet<&String> = g
        .uses
        .iter()
        .filter(|(_, used)| used.iter().any(|(t, _)| t == "cudart::sys"))
        .map(|(m, _)| m)
        .collect();
    let allowed: BTreeSet<String> = ["error", "cudart::calls", ""].map(String::from).into();
    let extra: Vec<&&String> = raw_users
        .iter()
        .filter(|m| !allowed.contains(**m) && !outside(m))
        .collect();
    assert!(extra.is_empty(), "raw bindings used by {extra:?}");
    assert!(
        raw_users.contains(&"cudart::calls".to_string()),
        "the check sees the thin layer's use"
    );
}

#[test]
fn every_doctor_module_has_a_layer() {
    let g = doctor();
    let unplaced = unplaced(&DOCTOR, &g);
    assert!(unplaced.is_empty(), "modules without a layer: {unplaced:?}");
    // The check sees the doctor's modules, and not its binary.
    assert!(g.modules.contains("report") && g.modules.contains("cli"));
    assert!(!g.modules.contains("main"));
}

#[test]
fn no_doctor_module_uses_a_higher_layer_or_the_crate_root() {
    let g = doctor();
    let wrong = uses_going_up(&DOCTOR, &g);
    assert!(wrong.is_empty(), "uses that go up:\n{}", wrong.join("\n"));
    // The check sees uses: the command line uses most of the crate.
    let cli: BTreeSet<&str> = g.uses["cli"].iter().map(|(t, _)| t.as_str()).collect();
    for m in ["gather", "diagnose", "text", "json", "names"] {
        assert!(cli.contains(m), "cli uses {m}: {cli:?}");
    }
}

#[test]
fn no_doctor_modules_use_each_other_in_a_loop() {
    let found = loops(&doctor());
    assert!(found.is_empty(), "import loops:\n{}", found.join("\n"));
}

#[test]
fn only_the_doctors_backend_names_the_library() {
    let g = doctor();
    let users = users_of_crate(&g, "llaisys_nvidia");
    assert_eq!(
        users.iter().map(String::as_str).collect::<Vec<_>>(),
        ["backend"],
        "modules that name the library"
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
    assert_eq!(
        code_only("a /* crate::x */ b '{' c 'l d"),
        "a  b ' ' c 'l d"
    );
    // Inside an inline module, `super` is the file's module.
    let code = "mod inner {\n    use super::Thing;\n    use super::super::low::X;\n}\n";
    let want: Vec<Vec<String>> = [&["high", "part", "Thing"][..], &["high", "low", "X"]]
        .iter()
        .map(|p| p.iter().map(|s| s.to_string()).collect())
        .collect();
    assert_eq!(paths(code, "high::part"), want);
}

/// A made-up crate of two layers: `low` below `high`.
const MADE_UP: Layout = Layout {
    src: "",
    layers: &[&["low", "other"], &["high"]],
    not_modules: &[],
    root_items: false,
};

fn made_up(files: &[(&str, &str)]) -> Graph {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect();
    graph(&MADE_UP, &files)
}

#[test]
fn the_checks_fail_on_a_crate_that_breaks_them() {
    let root = (
        "",
        "pub mod low;\npub mod other;\npub mod high;\npub use low::Y;\n",
    );
    // Sound: the high layer uses the low one.
    let g = made_up(&[
        root,
        ("low", "pub struct Y;\n"),
        ("other", "use crate::low::Y;\n"),
        ("high", "use crate::low::Y;\nuse crate::other;\n"),
    ]);
    assert!(uses_going_up(&MADE_UP, &g).is_empty());
    assert!(loops(&g).is_empty());
    // A low module that uses a higher one: a use going up, and a loop through it.
    let g = made_up(&[
        root,
        ("low", "use crate::high::X;\npub struct Y;\n"),
        ("other", ""),
        ("high", "use crate::low::Y;\npub struct X;\n"),
    ]);
    assert_eq!(
        uses_going_up(&MADE_UP, &g),
        ["low (layer 0) uses high (high::X)"]
    );
    assert_eq!(loops(&g), ["high -> low -> high"]);
    // A loop within one layer, written with `super` in an inline module.
    let g = made_up(&[
        root,
        ("low", "mod inner { use super::super::other::Z; }\n"),
        (
            "other",
            "pub struct Z;\nfn f() -> crate::low::W { todo!() }\n",
        ),
        ("high", ""),
    ]);
    assert!(uses_going_up(&MADE_UP, &g).is_empty());
    assert_eq!(loops(&g), ["low -> other -> low"]);
    // An item of the crate root, where a module must name the module it uses.
    let g = made_up(&[
        root,
        ("low", ""),
        ("other", "use crate::Y;\n"),
        ("high", ""),
    ]);
    assert_eq!(
        uses_going_up(&MADE_UP, &g),
        ["other uses the crate root (Y)"]
    );
    // A module without a layer.
    let g = made_up(&[root, ("stray", "")]);
    // A layer entry inside a folder wins over its folder's (the longest entry a module lies in).
    const NESTED: Layout = Layout {
        src: "",
        layers: &[&["low::sys"], &["low", "low::calls"]],
        not_modules: &[],
        root_items: false,
    };
    assert_eq!(layer_of(&NESTED, "low::sys"), Some(0));
    assert_eq!(layer_of(&NESTED, "low::sys::inner"), Some(0));
    assert_eq!(layer_of(&NESTED, "low::calls"), Some(1));
    assert_eq!(layer_of(&NESTED, "low"), Some(1));
    assert_eq!(layer_of(&NESTED, "lower"), None);
    assert_eq!(unplaced(&MADE_UP, &g), ["stray"]);
    // Naming a crate: `name::` or `use name as`, not a longer name that starts with it.
    let g = made_up(&[
        root,
        ("low", "use llaisys_nvidia as lib;\n"),
        ("other", "use llaisys_nvidia_doctor::x;\n"),
        ("high", "fn f() { llaisys_nvidia::ops::x(); }\n"),
    ]);
    assert_eq!(
        users_of_crate(&g, "llaisys_nvidia"),
        ["high", "low"].map(String::from).into()
    );
}

//! csrc/llaisys_runtime.h read as C declares it: the text without comments and preprocessor
//! lines, and its exported (`LLAISYS_NVIDIA_API`) functions with their parameters, for the tests
//! that hold the hand-written header to the library.
// Each test crate that includes this module uses part of it.
#![allow(dead_code)]

/// `text` without C comments.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
            out.push(' ');
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The declarations of `header`: no comments, no preprocessor lines.
pub fn code(header: &str) -> String {
    strip_comments(header)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last identifier of a declarator (`const void *sendbuff` gives `sendbuff`).
pub fn declared_name(decl: &str) -> String {
    decl.trim()
        .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("")
        .to_string()
}

/// Every `LLAISYS_NVIDIA_API` function of `header`: its name and its parameter declarations
/// (none for `(void)`), whitespace as written.
pub fn exported_functions(header: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for decl in code(header).split("LLAISYS_NVIDIA_API").skip(1) {
        let decl = decl.split(';').next().unwrap_or("");
        let (Some(open), Some(close)) = (decl.find('('), decl.rfind(')')) else {
            continue;
        };
        let params = decl[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty() && *p != "void")
            .map(str::to_string)
            .collect();
        found.push((declared_name(&decl[..open]), params));
    }
    found
}

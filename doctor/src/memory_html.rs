//! `llaisys-nvidia memory --html`: a memory snapshot drawn as one self-contained HTML page
//! (inline CSS, JavaScript and SVG; nothing loaded from elsewhere). Per device: one SVG rect per
//! block in address order along rows, coloured by state, with a tooltip; a summary table. The
//! snapshot is embedded as JSON, and the page's script counts each device's bytes in use from
//! it on load.

use crate::memory::{self, Summary};
use crate::snapshot::{Block, Device, Snapshot, State};
use std::fmt::Write;

/// A row's width in pixels.
const ROW_W: f64 = 960.0;
/// A row's height and the gap under it, in pixels.
const ROW_H: f64 = 18.0;
const ROW_GAP: f64 = 4.0;
/// The narrowest rect, so that small blocks stay visible.
const MIN_W: f64 = 3.0;
/// The gap between rects of one row.
const GAP: f64 = 1.0;
/// The rows a device's blocks would fill if none were widened to the minimum.
const ROWS: f64 = 8.0;

/// A state's fill colour.
fn colour(s: State) -> &'static str {
    match s {
        State::InUse => "#d62728",
        State::Cached => "#1f77b4",
        State::GraphPool => "#9467bd",
    }
}

/// `text` with the characters HTML gives a meaning escaped, for text and attribute values.
pub fn escape(text: &str) -> String {
    let mut o = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The document as JSON text that is safe inside a `<script>` element: `<`, `>` and `&` (in
/// strings, the only place they occur) written as `\u` escapes, so that no `</script>` or
/// `<!--` appears.
pub fn embedded_json(document: &serde_json::Value) -> String {
    let text = serde_json::to_string(document).unwrap_or_else(|_| "null".to_string());
    text.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The page of `s`, read from the file `name`.
pub fn render(s: &Snapshot, name: &str) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>llaisys-nvidia memory snapshot {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(name)
    );
    let history = if s.history {
        "call sites recorded"
    } else {
        "no call sites recorded"
    };
    let _ = writeln!(
        o,
        "<h1>Memory snapshot {}</h1>\n<p>pid {}, {} device(s), {history}.</p>",
        escape(name),
        s.pid,
        s.devices.len()
    );
    legend(&mut o);
    for d in &s.devices {
        device(&mut o, d, s.history);
    }
    let _ = write!(
        o,
        "<script type=\"application/json\" id=\"snapshot\">{}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        embedded_json(&s.document)
    );
    o
}

fn legend(o: &mut String) {
    o.push_str("<p class=\"legend\">");
    for state in State::ALL {
        let _ = write!(
            o,
            "<span class=\"swatch\" style=\"background:{}\"></span>{} ",
            colour(state),
            state.name()
        );
    }
    let _ = writeln!(
        o,
        "&mdash; one box per block in address order, its width by its size (at least {MIN_W} px, \
         at most a row); hover for its details.</p>"
    );
}

fn device(o: &mut String, d: &Device, history: bool) {
    let sum = Summary::of(d);
    let id = d.device;
    let _ = writeln!(
        o,
        "<section class=\"device\" id=\"device-{id}\">\n<h2>Device {id}</h2>"
    );
    let _ = writeln!(
        o,
        "<p>In use, counted by this page's script from the embedded snapshot: \
         <span class=\"in-use-bytes\" data-device=\"{id}\">(the script did not run)</span> bytes in \
         <span class=\"in-use-blocks\" data-device=\"{id}\">?</span> blocks.</p>"
    );
    picture(o, d);
    table(o, d, &sum, history);
    o.push_str("</section>\n");
}

/// One rect per block in address order, left to right along rows.
fn picture(o: &mut String, d: &Device) {
    let mut blocks: Vec<&Block> = d.blocks.iter().collect();
    blocks.sort_by_key(|b| b.addr);
    let total: u64 = blocks.iter().map(|b| b.size).sum();
    let per_byte = if total == 0 {
        0.0
    } else {
        ROW_W * ROWS / total as f64
    };
    let mut rects = String::new();
    let (mut x, mut y) = (0.0f64, 0.0f64);
    for b in &blocks {
        let w = (b.size as f64 * per_byte).clamp(MIN_W, ROW_W);
        if x > 0.0 && x + w > ROW_W {
            x = 0.0;
            y += ROW_H + ROW_GAP;
        }
        let _ = writeln!(
            rects,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{ROW_H}\" fill=\"{}\" \
             data-state=\"{}\"><title>{}</title></rect>",
            colour(b.state),
            b.state.name(),
            escape(&tooltip(b))
        );
        x += w + GAP;
    }
    let height = if blocks.is_empty() { 0.0 } else { y + ROW_H };
    let _ = writeln!(
        o,
        "<svg class=\"blocks\" width=\"{ROW_W}\" height=\"{height}\" viewBox=\"0 0 {ROW_W} {height}\" \
         role=\"img\" aria-label=\"the blocks of device {}\">\n{rects}</svg>",
        d.device
    );
}

fn tooltip(b: &Block) -> String {
    let mut t = format!(
        "address {}\nsize {}\nstate {}\norigin {}\nstream {}\nseq {}",
        b.address,
        memory::bytes(b.size),
        b.state.name(),
        b.origin.name(),
        b.stream.as_deref().unwrap_or("none"),
        b.seq.map_or("none".to_string(), |s| s.to_string()),
    );
    match &b.site {
        Some(site) => {
            let _ = write!(t, "\nsite\n{site}");
        }
        None => t.push_str("\nsite none"),
    }
    t
}

fn row(o: &mut String, key: &str, c: memory::Count) {
    let _ = writeln!(
        o,
        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        escape(key),
        c.blocks,
        c.bytes,
        memory::size(c.bytes)
    );
}

fn heading(o: &mut String, title: &str) {
    let _ = writeln!(o, "<tr><th colspan=\"4\">{}</th></tr>", escape(title));
}

fn table(o: &mut String, d: &Device, sum: &Summary, history: bool) {
    o.push_str("<table class=\"summary\">\n");
    let opt = |b: Option<u64>| b.map_or("unknown".to_string(), memory::bytes);
    let _ = writeln!(
        o,
        "<tr><td>memory</td><td colspan=\"3\">{} total, {} free</td></tr>\n\
         <tr><td>pool reserved</td><td colspan=\"3\">{}</td></tr>\n\
         <tr><td>limit</td><td colspan=\"3\">{}</td></tr>\n\
         <tr><td>release threshold</td><td colspan=\"3\">{}</td></tr>",
        opt(d.total_bytes),
        opt(d.free_bytes),
        memory::bytes(d.pool_reserved_bytes),
        memory::limit(d),
        memory::threshold(d)
    );
    o.push_str("<tr><th></th><th>blocks</th><th>bytes</th><th></th></tr>\n");
    heading(o, "by state");
    for (s, c) in &sum.states {
        row(o, s.name(), *c);
    }
    heading(o, "by size class");
    for (class, c) in &sum.classes {
        row(o, class, *c);
    }
    heading(o, "in use by stream");
    for (stream, c) in &sum.streams {
        row(o, stream, *c);
    }
    if history {
        heading(o, "call sites holding the most bytes in use");
        for (site, c) in &sum.sites {
            row(o, memory::first_frame(site), *c);
        }
    }
    o.push_str("</table>\n");
}

const STYLE: &str = "
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h2 { margin-top: 1.5em; }
.swatch { display: inline-block; width: 1em; height: 1em; margin: 0 .3em 0 .8em; vertical-align: middle; }
svg.blocks { display: block; margin: .5em 0; background: #f4f4f4; }
svg.blocks rect:hover { stroke: #000; stroke-width: 1; }
table.summary { border-collapse: collapse; margin-top: .5em; }
table.summary td, table.summary th { padding: .15em .8em; border-bottom: 1px solid #ddd; text-align: left; }
table.summary td.n { text-align: right; font-variant-numeric: tabular-nums; }
.in-use-bytes, .in-use-blocks { font-weight: bold; }
";

/// Fills each device's in-use figures from the embedded snapshot.
const SCRIPT: &str = r#"
(function () {
  var doc = JSON.parse(document.getElementById("snapshot").textContent);
  doc.devices.forEach(function (d) {
    var bytes = 0, blocks = 0;
    d.blocks.forEach(function (b) {
      if (b.state === "in_use") { bytes += b.size; blocks += 1; }
    });
    var sel = '[data-device="' + d.device + '"]';
    document.querySelectorAll(".in-use-bytes" + sel).forEach(function (e) { e.textContent = String(bytes); });
    document.querySelectorAll(".in-use-blocks" + sel).forEach(function (e) { e.textContent = String(blocks); });
  });
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script_and_reads_back_the_same() {
        let v = serde_json::json!({"site": "</script><b>&"});
        let text = embedded_json(&v);
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("still JSON");
        assert_eq!(back, v);
    }

    #[test]
    fn escape_covers_text_and_attributes() {
        assert_eq!(
            escape("<b>\"a\" & 'b'"),
            "&lt;b&gt;&quot;a&quot; &amp; &#39;b&#39;"
        );
    }
}

//! Host-only tests of `llaisys-nvidia memory`: the real binary on a hand-written snapshot
//! (fixtures/memory-snapshot.json: two devices, blocks of every state and origin, two streams,
//! call sites, one holding `</script>` and `<b>`). The text summary's figures exactly, the errors
//! for a bad file, the HTML page's text, and the page in a headless Chromium: its script runs and
//! fills in each device's bytes in use.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

use support::bin;

/// The fixture.
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/memory-snapshot.json")
}

/// A fresh folder of this test binary for `name`.
fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("llaisys-memory-cli-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

fn memory(args: &[&std::ffi::OsStr]) -> Output {
    support::output(Command::new(bin()).arg("memory").args(args))
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8 output")
}

/// The blocks of the fixture: (device, size, state).
fn fixture_blocks() -> Vec<(i64, u64, String)> {
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture()).expect("the fixture"))
            .expect("the fixture is JSON");
    let mut out = Vec::new();
    for d in doc["devices"].as_array().expect("devices") {
        for b in d["blocks"].as_array().expect("blocks") {
            out.push((
                d["device"].as_i64().expect("device"),
                b["size"].as_u64().expect("size"),
                b["state"].as_str().expect("state").to_string(),
            ));
        }
    }
    out
}

/// The blocks in use on `device` among `blocks` (`fixture_blocks`) and their bytes.
fn in_use(blocks: &[(i64, u64, String)], device: i64) -> (usize, u64) {
    blocks
        .iter()
        .filter(|(d, _, s)| *d == device && s == "in_use")
        .fold((0, 0), |(n, bytes), (_, size, _)| (n + 1, bytes + size))
}

/// Writes the page of the fixture and returns its path and the run's output.
fn page(name: &str) -> (PathBuf, Output) {
    let out = temp(name).join("memory.html");
    let o = memory(&[fixture().as_os_str(), "--html".as_ref(), out.as_os_str()]);
    assert!(
        o.status.success(),
        "memory --html failed: {}",
        text(&o.stderr)
    );
    (out, o)
}

#[test]
fn the_summary_shows_every_figure_of_the_fixture() {
    let o = memory(&[fixture().as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", text(&o.stderr));
    let out = text(&o.stdout);
    let expected = "\
== device 0
  memory              79.6 GiB (85520809984 bytes) total, 74.5 GiB (80013295616 bytes) free
  pool reserved       3.1 MiB (3215360 bytes)
  limit               none
  release threshold   none (all freed memory stays cached)
  blocks              7 blocks, 291.1 MiB (305205760 bytes)
  by state
    in_use            4 blocks, 3.1 MiB (3215360 bytes)
    cached            2 blocks, 32.0 MiB (33554944 bytes)
    graph_pool        1 block, 256.0 MiB (268435456 bytes)
  by size class
    <= 64 KiB         3 blocks, 68.5 KiB (70144 bytes)
    <= 1 MiB          1 block, 1.0 MiB (1048576 bytes)
    <= 16 MiB         1 block, 2.0 MiB (2097152 bytes)
    <= 128 MiB        1 block, 32.0 MiB (33554432 bytes)
    > 128 MiB         1 block, 256.0 MiB (268435456 bytes)
  in use by stream
    0x0               2 blocks, 3.0 MiB (3145728 bytes)
    0x5600000010      2 blocks, 68.0 KiB (69632 bytes)
  call sites holding the most bytes in use (top 5)
    2 blocks, 3.0 MiB (3145728 bytes): alloc_weights at src/model.rs:10
    1 block, 4.0 KiB (4096 bytes): <b>bold</b></script><script>document.title='broken out'</script> at x.rs:1

== device 1
  memory              unknown (cudaMemGetInfo failed)
  pool reserved       1.5 KiB (1500 bytes)
  limit               8.0 GiB (8589934592 bytes)
  release threshold   64.0 MiB (67108864 bytes)
  blocks              8 blocks, 145.0 MiB (152045021 bytes)
  by state
    in_use            6 blocks, 16.0 MiB (16778716 bytes)
    cached            1 block, 128.0 MiB (134217728 bytes)
    graph_pool        1 block, 1.0 MiB (1048577 bytes)
  by size class
    <= 64 KiB         5 blocks, 1.5 KiB (1500 bytes)
    <= 1 MiB          0 blocks, 0 B (0 bytes)
    <= 16 MiB         2 blocks, 17.0 MiB (17825793 bytes)
    <= 128 MiB        1 block, 128.0 MiB (134217728 bytes)
    > 128 MiB         0 blocks, 0 B (0 bytes)
  in use by stream
    0x0               3 blocks, 16.0 MiB (16777916 bytes)
    0x5600000020      3 blocks, 800 B (800 bytes)
  call sites holding the most bytes in use (top 5)
    1 block, 16.0 MiB (16777216 bytes): alloc_cache at src/kv.rs:42
    1 block, 500 B (500 bytes): s500 at e.rs:5
    1 block, 400 B (400 bytes): s400 at d.rs:4
    1 block, 300 B (300 bytes): s300 at c.rs:3
    1 block, 200 B (200 bytes): s200 at b.rs:2
";
    let (head, body) = out.split_once("\n\n").expect("a heading, then the devices");
    assert_eq!(
        head,
        format!(
            "memory snapshot {}: pid 4242, 2 devices, call sites recorded",
            fixture().display()
        )
    );
    assert_eq!(body, expected);
    // The figures agree with the fixture summed here.
    let blocks = fixture_blocks();
    assert!(body.contains(&format!(
        "4 blocks, 3.1 MiB ({} bytes)",
        in_use(&blocks, 0).1
    )));
    assert!(body.contains(&format!(
        "6 blocks, 16.0 MiB ({} bytes)",
        in_use(&blocks, 1).1
    )));
    // The sixth site, the smallest, is left out.
    assert!(!body.contains("s100"), "{body}");
}

#[test]
fn without_history_no_call_sites_are_listed() {
    let dir = temp("no-history");
    let file = dir.join("snapshot.json");
    let doc = std::fs::read_to_string(fixture())
        .expect("the fixture")
        .replace("\"history\": true", "\"history\": false");
    std::fs::write(&file, doc).expect("write the snapshot");
    let o = memory(&[file.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("2 devices, no call sites"), "{out}");
    assert!(!out.contains("call sites holding"), "{out}");
}

/// Runs `memory` on a file with `content` (None: no file) and returns (status, stderr, path).
fn bad(name: &str, content: Option<&str>) -> (Option<i32>, String, PathBuf) {
    let file = temp(name).join("snapshot.json");
    if let Some(c) = content {
        std::fs::write(&file, c).expect("write the snapshot");
    }
    let o = memory(&[file.as_os_str()]);
    assert!(o.stdout.is_empty(), "no summary: {}", text(&o.stdout));
    (o.status.code(), text(&o.stderr), file)
}

/// The doctor's usage-error status (exit.rs: USAGE).
const USAGE: Option<i32> = Some(64);

#[test]
fn no_snapshot_is_a_usage_error_naming_what_is_missing() {
    let o = memory(&[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), USAGE, "{err}");
    assert!(err.contains("<SNAPSHOT.json>"), "{err}");
    assert!(
        err.contains("memory SNAPSHOT.json [--html OUT.html]"),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_a_usage_error_naming_it() {
    let (code, err, file) = bad("missing", None);
    assert_eq!(code, USAGE, "{err}");
    assert!(
        err.contains(&format!(
            "cannot read the memory snapshot {}",
            file.display()
        )),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_json_is_a_usage_error_naming_it() {
    let (code, err, file) = bad("not-json", Some("snapshot: yes\n"));
    assert_eq!(code, USAGE, "{err}");
    assert!(
        err.contains(&format!("{}: not a JSON document", file.display())),
        "{err}"
    );
}

#[test]
fn a_wrong_format_or_version_is_a_usage_error_naming_it() {
    let doc = std::fs::read_to_string(fixture()).expect("the fixture");
    let (code, err, file) = bad(
        "format",
        Some(&doc.replace("\"llaisys-nvidia memory snapshot\"", "\"something else\"")),
    );
    assert_eq!(code, USAGE, "{err}");
    assert!(
        err.contains(&format!(
            "{}: not a memory snapshot: format is \"something else\"",
            file.display()
        )),
        "{err}"
    );
    let (code, err, file) = bad(
        "version",
        Some(&doc.replace("\"version\": 1", "\"version\": 2")),
    );
    assert_eq!(code, USAGE, "{err}");
    assert!(
        err.contains(&format!(
            "{}: memory snapshot version 2: this llaisys-nvidia reads version 1",
            file.display()
        )),
        "{err}"
    );
    let (code, err, file) = bad(
        "state",
        Some(&doc.replacen("\"graph_pool\"", "\"lost\"", 1)),
    );
    assert_eq!(code, USAGE, "{err}");
    assert!(
        err.contains(&format!(
            "{}: devices[0].blocks[6].state is \"lost\"",
            file.display()
        )),
        "{err}"
    );
}

#[test]
fn the_page_is_self_contained_with_one_rect_per_block_and_the_site_escaped() {
    let (path, o) = page("page");
    assert!(!text(&o.stdout).is_empty(), "the summary is printed too");
    let html = std::fs::read_to_string(&path).expect("the page");
    for outside in ["http://", "https://", "src=", "<link", "@import", "url("] {
        assert!(!html.contains(outside), "the page names {outside}");
    }
    assert_eq!(html.matches("<rect").count(), fixture_blocks().len());
    assert_eq!(html.matches("<svg").count(), 2, "one picture per device");
    // The site's `</script>` neither ends the embedded JSON nor the page's script: only those
    // two elements close, and the site appears escaped in the JSON and in the tooltip.
    assert_eq!(html.matches("</script>").count(), 2);
    assert!(!html.contains("<b>bold"), "the site's markup is not markup");
    assert!(html.contains(r"\u003cb\u003ebold\u003c/b\u003e\u003c/script\u003e"));
    assert!(html.contains("&lt;b&gt;bold&lt;/b&gt;&lt;/script&gt;&lt;script&gt;"));
    assert!(html.contains("<script type=\"application/json\" id=\"snapshot\">{"));
    for state in ["in_use", "cached", "graph_pool"] {
        assert!(html.contains(&format!("data-state=\"{state}\"")), "{state}");
    }
}

/// A headless Chromium on PATH: `chromium`, `chromium-browser` or `google-chrome`.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
}

/// The text of the element `<span class="{class}" data-device="{device}">` in `dom`.
fn span<'a>(dom: &'a str, class: &str, device: i64) -> &'a str {
    let open = format!("<span class=\"{class}\" data-device=\"{device}\">");
    let at = dom
        .find(&open)
        .unwrap_or_else(|| panic!("no {open} in the DOM:\n{dom}"));
    let rest = &dom[at + open.len()..];
    &rest[..rest.find('<').expect("the span closes")]
}

#[test]
fn in_a_headless_browser_the_script_fills_in_the_bytes_in_use() {
    let Some(browser) = chromium() else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !ci,
            "no headless Chromium (chromium, chromium-browser, google-chrome) on PATH; \
             scripts/test.sh installs it"
        );
        println!(
            "skipped: no headless Chromium found (chromium, chromium-browser, google-chrome); \
             `bash scripts/test.sh` installs it"
        );
        return;
    };
    let (path, _) = page("browser");
    let profile = temp("browser-profile");
    let mut url = String::from("file://");
    url.push_str(
        &path
            .canonicalize()
            .expect("the page's path")
            .to_string_lossy(),
    );
    let o = support::output(
        Command::new(&browser)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(&url),
    );
    let dom = text(&o.stdout);
    assert!(
        o.status.success(),
        "{} failed: {}",
        browser.display(),
        text(&o.stderr)
    );
    let blocks = fixture_blocks();
    for device in [0, 1] {
        let (count, bytes) = in_use(&blocks, device);
        assert_eq!(
            span(&dom, "in-use-bytes", device),
            bytes.to_string(),
            "device {device}"
        );
        assert_eq!(
            span(&dom, "in-use-blocks", device),
            count.to_string(),
            "device {device}"
        );
    }
    assert_eq!(
        (in_use(&blocks, 0).1, in_use(&blocks, 1).1),
        (3215360, 16778716)
    );
    assert_eq!(dom.matches("<rect").count(), blocks.len(), "{dom}");
    // The site's script did not run: the page's title is its own.
    assert!(
        dom.contains("<title>llaisys-nvidia memory snapshot memory-snapshot.json</title>"),
        "{dom}"
    );
    assert!(!dom.contains("broken out</title>"), "{dom}");
}

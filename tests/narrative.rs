//! Host-only test: no development narrative in the tracked tree. Code, comments, docs, scripts
//! and test names say what the code does now; the history of releases is CHANGELOG.md's. A
//! reader cannot know what "the ninth session", "device call 3", an issue number, a dated diary
//! heading or one machine's temporary folder refer to, so none of them may come back.
//!
//! The files are `git ls-files` of the crate's sources (`support::source_dir()`; without git:
//! every file there but `.git`, `target`, `.deps`, `gpu-stage` and `host-stage`), minus binary
//! files, `Cargo.lock` and this file (its patterns and examples would match themselves). Every finding is printed as `path:line: [rule] text`.

mod support;

use std::path::Path;
use std::process::Command;

/// Files never scanned: generated, or this test's own patterns and examples.
const SKIPPED: &[&str] = &["Cargo.lock", "tests/narrative.rs"];

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Byte offsets of `needle` in `hay` (both lowercase ASCII where it matters) that start and end
/// on a word boundary.
fn words(hay: &str, needle: &str) -> Vec<usize> {
    let h = hay.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = hay[from..].find(needle).map(|i| i + from) {
        let end = i + needle.len();
        let before_ok = i == 0 || !is_word(h[i - 1]);
        let after_ok = end == h.len() || !is_word(h[end]);
        if before_ok && after_ok {
            out.push(i);
        }
        from = i + 1;
    }
    out
}

/// The word before byte `i` of `s` (lowercase), skipping spaces.
fn word_before(s: &str, i: usize) -> &str {
    let head = s[..i].trim_end();
    let start = head.bytes().rposition(|b| !is_word(b)).map_or(0, |p| p + 1);
    &head[start..]
}

/// The word after byte `end` of `s` (lowercase), skipping spaces.
fn word_after(s: &str, end: usize) -> &str {
    let tail = s[end..].trim_start();
    let len = tail.bytes().take_while(|&b| is_word(b)).count();
    &tail[..len]
}

/// "session(s)" meaning a working session; a login or terminal session, a session leader or
/// id are the operating system's words and stay.
fn session(l: &str) -> bool {
    ["session", "sessions"].iter().any(|w| {
        words(l, w).into_iter().any(|i| {
            let before = word_before(l, i);
            let after = word_after(l, i + w.len());
            !matches!(before, "login" | "terminal" | "ssh" | "dbus")
                && !matches!(after, "leader" | "id" | "bus" | "keyring")
        })
    })
}

/// "device call(s)" (also "`device` call"): one run on a borrowed GPU machine.
fn device_call(l: &str) -> bool {
    words(l, "device").into_iter().any(|i| {
        let end = i + "device".len();
        let end = if l[end..].starts_with('`') {
            end + 1
        } else {
            end
        };
        matches!(word_after(l, end), "call" | "calls")
    })
}

/// "issue 13", "issues 5 and 13", "issue #7", "Issue 13's".
fn issue_number(l: &str) -> bool {
    ["issue", "issues"].iter().any(|w| {
        words(l, w).into_iter().any(|i| {
            let rest = l[i + w.len()..].trim_start();
            let rest = rest.strip_prefix('#').unwrap_or(rest);
            rest.starts_with(|c: char| c.is_ascii_digit())
        })
    })
}

/// "call 2 of ...", "(call 4)": the numbered runs of a diary.
fn numbered_call(l: &str) -> bool {
    words(l, "call").into_iter().any(|i| {
        let rest = &l[i + 4..];
        let digits = rest
            .strip_prefix(' ')
            .map_or(0, |r| r.bytes().take_while(u8::is_ascii_digit).count());
        if digits == 0 {
            return false;
        }
        let after = &rest[1 + digits..];
        (i > 0 && l.as_bytes()[i - 1] == b'(') || word_after(after, 0) == "of"
    })
}

/// One machine's folders: mktemp's `/tmp/tmp.XXXXXX`, a workspace under `/work/`, a home folder.
fn machine_path(l: &str) -> bool {
    let rooted = |needle: &str, rest_ok: &dyn Fn(&str) -> bool| {
        l.match_indices(needle).any(|(i, _)| {
            let b = l.as_bytes();
            let free = i == 0 || !(is_word(b[i - 1]) || matches!(b[i - 1], b'.' | b'-' | b'/'));
            free && rest_ok(&l[i + needle.len()..])
        })
    };
    let name = |r: &str| r.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    rooted("/tmp/tmp.", &|r| {
        r.bytes().take_while(u8::is_ascii_alphanumeric).count() >= 4
    }) || rooted("/work/", &|_| true)
        || rooted("/home/", &name)
        || rooted("/root/", &name)
}

/// A calendar date of this era (`20YY-MM-DD`): diary headings and run logs carry them.
fn date(l: &str) -> bool {
    let b = l.as_bytes();
    (0..b.len().saturating_sub(9)).any(|i| {
        let d = |k: usize| b[i + k].is_ascii_digit();
        let n = |k: usize| (b[i + k] - b'0') as u32 * 10 + (b[i + k + 1] - b'0') as u32;
        (i == 0 || !b[i - 1].is_ascii_digit())
            && (i + 10 == b.len() || !b[i + 10].is_ascii_digit())
            && &b[i..i + 2] == b"20"
            && d(2)
            && d(3)
            && b[i + 4] == b'-'
            && d(5)
            && d(6)
            && b[i + 7] == b'-'
            && d(8)
            && d(9)
            && n(2) >= 20
            && (1..=12).contains(&n(5))
            && (1..=31).contains(&n(8))
    })
}

/// "went from X to Y": a change told as a story.
fn went_from(l: &str) -> bool {
    words(l, "went")
        .into_iter()
        .any(|i| word_after(l, i + 4) == "from")
}

type Rule = (&'static str, fn(&str) -> bool);

const RULES: &[Rule] = &[
    ("session", session),
    ("device call", device_call),
    ("issue number", issue_number),
    ("numbered call", numbered_call),
    ("machine path", machine_path),
    ("date", date),
    ("went from", went_from),
];

/// The rules a line breaks. CHANGELOG.md may date its release headings.
fn findings(path: &str, line: &str) -> Vec<&'static str> {
    let l = line.to_ascii_lowercase();
    RULES
        .iter()
        .filter(|(name, rule)| {
            let release_heading = path == "CHANGELOG.md" && *name == "date" && l.starts_with("## ");
            !release_heading && rule(&l)
        })
        .map(|(name, _)| *name)
        .collect()
}

/// The tracked files, relative to the crate; every file but build outputs without git.
fn tracked_files(root: &Path) -> Vec<String> {
    if support::on_path("git") {
        let mut git = Command::new("git");
        git.args(["ls-files", "-z"]).current_dir(root);
        let out = support::child::run(&mut git, support::child::DEFAULT_LIMIT);
        if out.success() && !out.stdout.is_empty() {
            return out
                .stdout
                .split('\0')
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect();
        }
    }
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the crate's folders") {
            let path = entry.expect("a folder entry").path();
            let rel = path.strip_prefix(root).expect("under the crate");
            let top = rel.components().next().map(|c| c.as_os_str().to_owned());
            if top.is_some_and(|t| {
                [".git", "target", ".deps", "gpu-stage", "host-stage"]
                    .contains(&t.to_str().unwrap_or(""))
            }) {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    files
}

#[test]
fn no_development_narrative_in_the_tracked_tree() {
    let root = support::source_dir();
    let files = tracked_files(&root);
    assert!(
        files.iter().any(|f| f == "README.md") && files.iter().any(|f| f.starts_with("src/")),
        "the file list of {} lacks README.md or src/: {} files",
        root.display(),
        files.len()
    );
    let mut failing = Vec::new();
    let mut scanned = 0;
    for rel in &files {
        if SKIPPED.contains(&rel.as_str()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(root.join(rel)) else {
            continue; // listed by git, deleted in the work tree
        };
        if bytes.contains(&0) {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        scanned += 1;
        for (n, line) in text.lines().enumerate() {
            let hits = findings(rel, line);
            if hits.is_empty() {
                continue;
            }
            let shown: String = line.trim().chars().take(160).collect();
            failing.push(format!("{rel}:{}: [{}] {shown}", n + 1, hits.join(", ")));
        }
    }
    assert!(scanned > 50, "only {scanned} text files scanned");
    assert!(
        failing.is_empty(),
        "development narrative ({} lines; say what the code does now, history goes to \
         CHANGELOG.md):\n{}",
        failing.len(),
        failing.join("\n")
    );
}

#[test]
fn each_rule_catches_narrative() {
    let caught = [
        ("session", "README/docs: the thirteenth session's tables"),
        ("session", "the tables of this session"),
        ("session", "3862 and 3954 against 4000 in one session"),
        ("session", "the sessions' figures"),
        ("device call", "Last runs (device call 9, 07:58 UTC)"),
        ("device call", "run it with one Device Call"),
        ("device call", "stage it for one `device` call"),
        ("issue number", "Host-only test (issue 16, point 10)"),
        ("issue number", "Issue 13's targets for copy rows"),
        ("issue number", "the targets of issues 5 and 13"),
        ("issue number", "see issue #7"),
        ("numbered call", "device call 2 of the thirteenth"),
        (
            "numbered call",
            "the probe after its refactor, on the GPU (call 4)",
        ),
        (
            "machine path",
            "reference `/tmp/tmp.kmJBlSgyIM/libseed_runtime.so`",
        ),
        (
            "machine path",
            "ours static `/work/main/gpu-stage/static/libllaisys_nvidia.so`",
        ),
        ("machine path", "built in /home/alice/llaisys"),
        ("machine path", "cp x /root/build/"),
        ("date", "### Tenth session (2026-12-02, one H200)"),
        ("date", "one run, 2026-11-30, at commit e4287e6"),
        ("went from", "the 1 MiB rows went from 17.8 to 21.2 GB/s"),
    ];
    for (rule, line) in caught {
        assert!(
            findings("docs/x.md", line).contains(&rule),
            "[{rule}] missed: {line}"
        );
    }
}

#[test]
fn legitimate_words_are_not_narrative() {
    let fine = [
        "cudaStreamCaptureStatus status; cudaStreamIsCapturing(stream, &status);",
        "setsid() makes the child a session leader",
        "a login session's environment",
        "a device, call it d, is current",
        "a call to free_device on the device",
        "cudarc's dynamic loading panics (its users filed issues)",
        "this was issued 5 times",
        "call 3 functions in turn",
        "for r in 0 1; do ./nccl_allreduce $r 2 /tmp/id & done",
        "char idfile[] = \"/tmp/llaisys-nccl-id-XXXXXX\";",
        "(\"HOME\", \"/root\"),",
        "framework/work/x and gpu-stage/work/ and ~/.local",
        "let real_home = std::env::var(\"HOME\").unwrap_or_else(|_| \"/root\".into());",
        "fsspec==2026.9.0 packaging==26.4",
        "- 1999-12-31 23:59 UTC, host `vm`",
        "10.0.2026-12 is not a date",
        "it went to the pool from the cache",
    ];
    for line in fine {
        let hits = findings("src/x.rs", line);
        assert!(hits.is_empty(), "{hits:?} on a legitimate line: {line}");
    }
    assert!(findings("CHANGELOG.md", "## 0.2.0 - 2027-01-15").is_empty());
    assert!(!findings("CHANGELOG.md", "Measured on 2027-01-15").is_empty());
}

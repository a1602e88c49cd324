//! Host-only test: no development narrative in the tracked tree. Code, comments, docs, scripts
//! and test names say what the code does now; the history of releases is CHANGELOG.md's. A
//! reader cannot know what "the ninth session", "device call 3", an issue number, a dated diary
//! heading or one machine's temporary folder refer to, so none of them may come back. Nor may a
//! lab notebook's account of experiments: "the earlier build", "build B", "round 2", a variant
//! that "is not kept". A decision stays, said as what the code does, with its measured reason.
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

/// The word after byte `end` of `s`, past a possessive `'s` ("the build's output": "output").
fn noun_after(s: &str, end: usize) -> &str {
    let rest = s[end..].strip_prefix("'s").map_or(end, |_| end + 2);
    word_after(s, rest)
}

/// Whether the line speaks of builds of the library ("build", "builds"): the context that makes
/// "not kept" or "round 2" a lab notebook's.
fn about_builds(l: &str) -> bool {
    !words(l, "build").is_empty() || !words(l, "builds").is_empty()
}

/// "the earlier build", "a previous build's figures", "older builds": builds compared with the
/// one that ships. A build step's own things ("the previous build's output") stay.
fn earlier_build(l: &str) -> bool {
    ["build", "builds"].iter().any(|w| {
        words(l, w).into_iter().any(|i| {
            matches!(
                word_before(l, i),
                "earlier" | "previous" | "older" | "former" | "prior"
            ) && !matches!(
                noun_after(l, i + w.len()),
                "step"
                    | "steps"
                    | "output"
                    | "outputs"
                    | "folder"
                    | "dir"
                    | "directory"
                    | "tree"
                    | "cache"
                    | "artifacts"
                    | "script"
            )
        })
    })
}

/// "build A", "Build B's default", "builds A and B": a single capital letter naming one of the
/// builds an experiment compared (case-sensitive, on the line as written). "build C and C++
/// clients" is the language; "build A.so" a file.
fn build_letter(line: &str) -> bool {
    ["build", "Build", "builds", "Builds"].iter().any(|w| {
        words(line, w).into_iter().any(|i| {
            let end = i + w.len();
            let t = line[end..].trim_start();
            if t.len() == line.len() - end {
                return false; // no space between: "build-A", "build("
            }
            let b = t.as_bytes();
            let letter = b
                .first()
                .is_some_and(|&c| c.is_ascii_uppercase() && c != b'C');
            let alone = match b.get(1) {
                None => true,
                Some(&c) if is_word(c) || c == b'+' => false,
                Some(b'.') => !b.get(2).is_some_and(u8::is_ascii_alphanumeric),
                Some(_) => true,
            };
            letter && alone
        })
    })
}

/// "against the build before the large-copy work": the build before some change. Building
/// before something else ("run the build before the tests", "the build before installing")
/// stays.
fn build_before(l: &str) -> bool {
    words(l, "build").into_iter().any(|i| {
        let end = i + "build".len();
        if word_after(l, end) != "before" {
            return false;
        }
        let at = l[end..]
            .find("before")
            .map_or(end, |k| end + k + "before".len());
        let next = word_after(l, at);
        if next != "the" {
            return false;
        }
        let at = l[at..].find("the").map_or(at, |k| at + k + "the".len());
        !matches!(
            word_after(l, at),
            "test" | "tests" | "install" | "run" | "runs" | "benchmark" | "benchmarks"
        )
    })
}

/// "round 1", "| round 2 |", "(round 1 / round 2)": the numbered rounds of an experiment, in a
/// table, a list or a line that speaks of builds or GB/s. The rounds of key destructors ("in
/// round 3 for keys made before", "(round 3 of 4)", "rounds 1 and 2") stay.
fn round_number(l: &str) -> bool {
    let context = about_builds(l) || l.contains("gb/s");
    words(l, "round").into_iter().any(|i| {
        let end = i + "round".len();
        let rest = &l[end..];
        let digits = rest
            .strip_prefix(' ')
            .map_or(0, |r| r.bytes().take_while(u8::is_ascii_digit).count());
        if digits == 0 || word_after(l, end + 1 + digits) == "of" {
            return false;
        }
        let prev = l[..i].trim_end().bytes().last();
        context || matches!(prev, Some(b'|' | b',' | b'/' | b'('))
    })
}

/// "is not kept", "was not kept" about builds or what was tried: a variant's fate. A block the
/// cache does not keep stays; "It was not kept for the memory it held" is a variant's.
fn not_kept(l: &str) -> bool {
    if !l.contains("not kept") {
        return false;
    }
    let tried = ["variant", "variants", "tried", "experiment", "experiments"]
        .iter()
        .any(|w| !words(l, w).is_empty());
    about_builds(l)
        || tried
        || ["was not kept for", "were not kept for"]
            .iter()
            .any(|p| l.contains(p))
}

type Rule = (&'static str, fn(&str) -> bool);

/// Rules on the lowercased line.
const RULES: &[Rule] = &[
    ("session", session),
    ("device call", device_call),
    ("issue number", issue_number),
    ("numbered call", numbered_call),
    ("machine path", machine_path),
    ("date", date),
    ("went from", went_from),
    ("earlier build", earlier_build),
    ("build before", build_before),
    ("round number", round_number),
    ("not kept", not_kept),
];

/// Rules on the line as written (case matters).
const CASED_RULES: &[Rule] = &[("build letter", build_letter)];

/// The rules a line breaks. CHANGELOG.md may date its release headings.
fn findings(path: &str, line: &str) -> Vec<&'static str> {
    let l = line.to_ascii_lowercase();
    let lower = RULES.iter().filter(|(name, rule)| {
        let release_heading = path == "CHANGELOG.md" && *name == "date" && l.starts_with("## ");
        !release_heading && rule(&l)
    });
    let cased = CASED_RULES.iter().filter(|(_, rule)| rule(line));
    lower.chain(cased).map(|(name, _)| *name).collect()
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

/// Asserts that `rule` fires on every line of `caught` and that no rule fires on `fine`.
fn check_rule(rule: &str, caught: &[&str], fine: &[&str]) {
    for line in caught {
        assert!(
            findings("docs/x.md", line).contains(&rule),
            "[{rule}] missed: {line}"
        );
    }
    for line in fine {
        let hits = findings("docs/x.md", line);
        assert!(hits.is_empty(), "{hits:?} on a legitimate line: {line}");
    }
}

#[test]
fn earlier_build_rule() {
    check_rule(
        "earlier build",
        &[
            "the library against the earlier build, all 45 rows",
            "at 0.98x-1.01x of the earlier build's speed",
            "a previous build ran it at 35.8 GB/s",
            "Older builds staged every copy",
        ],
        &[
            "cargo reuses the previous build's output",
            "an earlier step builds the stand-in library",
            "the build of the earlier release is in CHANGELOG.md",
        ],
    );
}

#[test]
fn build_letter_rule() {
    check_rule(
        "build letter",
        &[
            "Build A (the library with a copy's pieces listed before the copy starts)",
            "on the fifth, build B's default",
            "builds A and B in alternating processes",
            "the library as it is, against build B.",
        ],
        &[
            "build C and C++ clients against every library",
            "build a C program against the prefix",
            "link build A.so and B.so, then run both",
            "cargo build --release, then build-A the stage",
        ],
    );
}

#[test]
fn build_before_rule() {
    check_rule(
        "build before",
        &[
            "table_bench with the build before the large-copy and weights changes",
            "against the build before the slabs of large blocks",
        ],
        &[
            "scripts/test.sh runs the build before the tests",
            "finish the build before installing",
            "the build runs before the tests",
        ],
    );
}

#[test]
fn round_number_rule() {
    check_rule(
        "round number",
        &[
            "| setting | round 1 | round 2 | round 3 |",
            "| H2D | earlier run, round 1 | ramp down, round 2 |",
            "GB/s, ours (round 1 / round 2) and ours / the reference:",
            "in round 2 the library ran at 50.6 GB/s",
            "each build once per round 1 to 3",
        ],
        &[
            "PTHREAD_DESTRUCTOR_ITERATIONS (4) rounds of them (and in round 3 for keys made before this",
            "one (round 3 of 4), counting its runs in a `thread_local!`",
            "printf(\"ok: key destructors, rounds 1 and 2\\n\");",
            "/* Round 1 reads the body's error and sets another; round 2 reads that one. */",
            "a record first stored in round 2 or later by a thread",
        ],
    );
}

#[test]
fn not_kept_rule() {
    check_rule(
        "not kept",
        &[
            "a build that took a run of blocks from a few calls is not kept",
            "It was not kept for the memory it held (caches.md).",
            "tried in a variant of its own, so it is not kept",
        ],
        &[
            "Takes `block` back out of the pending list (it is not kept after all).",
            "the barrier could not be recorded; the block is not kept",
            "cached memory (not kept for replays): allocate inside captures begun here.",
        ],
    );
}

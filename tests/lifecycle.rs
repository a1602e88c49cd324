//! Host-only tests of the lifecycle and process rules (README "Lifecycle and process rules"), run
//! without a driver (`support::run`, on any machine): C and C++ programs from tests/c/lifecycle_* linked
//! against the staticlib and the cdylib, calling into the library at thread and process exit,
//! swapping the error handler under load (also under AddressSanitizer), forking while threads
//! are inside the library, and using per-thread exception scopes.
//!
//! The compilers are `$CC` / `$CXX` (default `cc` / `c++`), with `$CFLAGS` / `$CXXFLAGS` added.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::child::Finished;
use support::Linkage;

const BOTH: [Linkage; 2] = [Linkage::Static, Linkage::Dynamic];

/// Compiles `tests/c/<src>` (C99 or C++17, pedantic, warnings as errors, `-pthread`) with the
/// `extra` flags and links it against the staticlib (with the README's flags) or the cdylib.
fn build(src: &str, linkage: Linkage, extra: &[&str]) -> PathBuf {
    build_with(src, Some(linkage), extra)
}

/// As `build`; `None` links neither library (for a program that dlopens the cdylib).
fn build_with(src: &str, linkage: Option<Linkage>, extra: &[&str]) -> PathBuf {
    let cpp = src.ends_with(".cpp");
    let (compiler, flags_var, std) = if cpp {
        ("CXX", "CXXFLAGS", "-std=c++17")
    } else {
        ("CC", "CFLAGS", "-std=c99")
    };
    let compiler =
        std::env::var(compiler).unwrap_or_else(|_| if cpp { "c++" } else { "cc" }.into());
    let tag = extra
        .iter()
        .map(|f| f.trim_start_matches('-').replace(['=', '/', ','], "_"))
        .collect::<Vec<_>>()
        .join("-");
    // One file per build: two tests building the same program at once must not exec a file the
    // other's linker is still writing (ETXTBSY).
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = support::scratch("lifecycle").join(format!(
        "{n}-{}-{}{}{}",
        src.replace('.', "_"),
        match linkage {
            Some(Linkage::Static) => "static",
            Some(Linkage::Dynamic) => "cdylib",
            None => "unlinked",
        },
        if tag.is_empty() { "" } else { "-" },
        tag
    ));
    let mut cmd = Command::new(compiler);
    cmd.args([
        std,
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-pthread",
        "-g",
    ])
    .arg(format!("-I{}", support::csrc().display()));
    if let Ok(flags) = std::env::var(flags_var) {
        cmd.args(flags.split_whitespace());
    }
    cmd.args(extra)
        .arg(support::tests_dir().join("c").join(src))
        .arg("-o")
        .arg(&out);
    let target = support::target_dir();
    match linkage {
        None => {
            cmd.arg("-ldl");
        }
        Some(Linkage::Static) => {
            cmd.arg(target.join("libllaisys_nvidia.a"));
            cmd.args(
                support::documented_static_flags()
                    .iter()
                    .filter(|f| *f != "-lllaisys_nvidia"),
            );
        }
        Some(Linkage::Dynamic) => {
            cmd.arg(format!("-L{}", target.display()))
                .arg("-lllaisys_nvidia")
                .arg(format!("-Wl,-rpath,{}", target.display()));
        }
    }
    support::compile(cmd);
    out
}

/// Runs `exe args` without a driver (`support::run_with`) with the given environment.
fn run(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Finished {
    support::run_with(exe, args, env)
}

/// docs/lifecycle.md: the lifecycle and process rules, one row per rule.
fn lifecycle_page() -> String {
    std::fs::read_to_string(support::source_dir().join("docs/lifecycle.md"))
        .expect("docs/lifecycle.md")
}

fn text(out: &Finished) -> String {
    out.report()
}

/// Runs and asserts exit status 0 and that stdout has every line of `expect`.
fn run_expect(exe: &Path, args: &[&str], env: &[(&str, &str)], expect: &[&str]) -> Finished {
    let out = run(exe, args, env);
    assert!(out.success(), "{} {args:?}: {}", exe.display(), text(&out));
    let stdout = out.stdout.as_str();
    for line in expect {
        assert!(
            stdout.lines().any(|l| l == *line),
            "{} {args:?}: no line {line:?}: {}",
            exe.display(),
            text(&out)
        );
    }
    out
}

// ---- 1. calls at thread and process exit ----------------------------------------------------

#[test]
fn every_call_works_in_a_pthread_key_destructor_and_an_atexit_handler() {
    for linkage in BOTH {
        let exe = build("lifecycle_exit.c", linkage, &[]);
        run_expect(&exe, &["key"], &[], &["ok: pthread key destructor"]);
        run_expect(&exe, &["atexit"], &[], &["ok: atexit handler"]);
    }
}

#[test]
fn every_call_works_in_cpp_static_and_thread_local_destructors() {
    for linkage in BOTH {
        let exe = build("lifecycle_exit.cpp", linkage, &[]);
        run_expect(&exe, &["static"], &[], &["ok: C++ static destructor"]);
        run_expect(
            &exe,
            &["thread_local"],
            &[],
            &["ok: C++ thread_local destructor"],
        );
    }
}

#[test]
fn calls_at_exit_leak_nothing_under_valgrind() {
    if !support::tool_or_skip("calls_at_exit_leak_nothing_under_valgrind", "valgrind") {
        return;
    }
    for (src, mode) in [
        ("lifecycle_exit.c", "key"),
        ("lifecycle_exit.c", "atexit"),
        ("lifecycle_exit.cpp", "thread_local"),
    ] {
        let exe = build(src, Linkage::Dynamic, &[]);
        let out = run(
            Path::new("valgrind"),
            &[
                "-q",
                "--leak-check=full",
                "--errors-for-leak-kinds=definite,possible",
                "--error-exitcode=97",
                exe.to_str().unwrap_or_default(),
                mode,
            ],
            &[],
        );
        assert!(out.success(), "{src} {mode}: {}", text(&out));
    }
}

// ---- 3. the handler contract ----------------------------------------------------------------

#[test]
fn set_error_handler_returns_only_when_no_thread_runs_the_old_handler() {
    for linkage in BOTH {
        let exe = build("lifecycle_handler.c", linkage, &[]);
        run_expect(&exe, &["wait"], &[], &["ok: wait"]);
    }
}

#[test]
fn handlers_that_replace_themselves_or_call_in_do_not_deadlock() {
    for linkage in BOTH {
        let exe = build("lifecycle_handler.c", linkage, &[]);
        run_expect(&exe, &["reentrant"], &[], &["ok: reentrant"]);
    }
}

#[test]
fn old_user_data_may_be_freed_once_set_error_handler_returns_asan() {
    let asan = ["-fsanitize=address", "-fno-omit-frame-pointer"];
    // LeakSanitizer is off: this test is about use after free; leaks have the valgrind tests.
    let env = [("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1")];
    for linkage in BOTH {
        let exe = build("lifecycle_handler.c", linkage, &asan);
        run_expect(&exe, &["hammer"], &env, &["ok: hammer"]);
    }
    // And without the sanitizer: the handler sees the magic of live user_data only.
    let exe = build("lifecycle_handler.c", Linkage::Dynamic, &[]);
    run_expect(&exe, &["hammer"], &[], &["ok: hammer"]);
}

// ---- 6. fork --------------------------------------------------------------------------------

#[test]
fn fork_while_threads_are_inside_never_deadlocks_the_child() {
    for (linkage, exit) in [
        (Linkage::Dynamic, "_exit"),
        (Linkage::Static, "_exit"),
        (Linkage::Dynamic, "exit"),
        (Linkage::Static, "exit"),
    ] {
        let exe = build("lifecycle_fork.c", linkage, &[]);
        let out = run_expect(&exe, &["200", exit], &[], &["ok: 200 children"]);
        let stdout = out.stdout.as_str();
        assert!(stdout.contains("hung: 0\n"), "{linkage:?} {exit}: {stdout}");
    }
}

// ---- 7. longjmp out of a handler ------------------------------------------------------------

#[test]
fn longjmp_out_of_a_handler_is_documented_as_unsupported() {
    let header = std::fs::read_to_string(support::csrc().join("llaisys_runtime.h")).unwrap();
    let header = header.split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "longjmp out of a handler is not supported",
        "pthread_exit",
        "return or throw",
    ] {
        assert!(header.contains(needle), "header lacks {needle:?}");
    }
    let section = lifecycle_page();
    let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        section.contains("`longjmp` out of a handler is not supported"),
        "docs/lifecycle.md does not say longjmp is unsupported"
    );
}

#[test]
fn a_handler_call_that_never_ends_is_named_by_set_error_handler_not_silent() {
    // What a handler left by longjmp would look like: its call never ends. SetErrorHandler
    // keeps waiting for it (the old user_data may still be in use) and says so after 10 s.
    let exe = build("lifecycle_handler.c", Linkage::Dynamic, &[]);
    let out = run_expect(&exe, &["slow"], &[], &["ok: slow"]);
    let stderr = out.stderr.as_str();
    assert!(
        stderr.contains("llaisysNvidiaSetErrorHandler has waited 10 s")
            && stderr.contains("longjmp, which is not supported"),
        "{}",
        text(&out)
    );
}

// ---- unload ---------------------------------------------------------------------------------

#[test]
fn last_error_key_and_fork_handlers_go_with_the_cdylib_at_dlclose() {
    // Two threads keep a last error across dlclose and exit afterwards, then the process forks:
    // neither the key's destructor nor the fork handlers may run from the unloaded library.
    let exe = build_with("lifecycle_dlclose.c", None, &[]);
    let lib = support::target_dir().join("libllaisys_nvidia.so");
    let out = run_expect(
        &exe,
        &[lib.to_str().unwrap_or_default()],
        &[],
        &["ok: 3 cycles"],
    );
    // The check means something only if dlclose really unmapped the library.
    let stdout = out.stdout.as_str();
    assert!(stdout.contains("unloaded: yes"), "{}", text(&out));
}

// ---- 11. exception scopes are per thread ----------------------------------------------------

#[test]
fn exception_scope_is_per_thread_c_threads_keep_their_handler() {
    for linkage in BOTH {
        let exe = build("lifecycle_scope.cpp", linkage, &[]);
        let out = run(&exe, &["handler"], &[]);
        assert!(out.success(), "{linkage:?}: {}", text(&out));
        assert!(
            out.stdout.as_str().starts_with("ok: handler"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn exception_scope_leaves_other_threads_the_default_handler() {
    for linkage in BOTH {
        let exe = build("lifecycle_scope.cpp", linkage, &[]);
        let out = run(&exe, &["default"], &[]);
        assert_eq!(out.signal(), Some(6), "{linkage:?}: {}", text(&out));
        let stderr = out.stderr.as_str();
        assert!(!stderr.contains("terminate called"), "{}", text(&out));
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}", text(&out));
        for needle in [
            "llaisys-nvidia: create_stream",
            "cudaErrorInsufficientDriver (35)",
            "aborting",
        ] {
            assert!(lines[0].contains(needle), "{needle}: {}", text(&out));
        }
    }
}

// ---- the README section ---------------------------------------------------------------------

#[test]
fn readme_lifecycle_rules_name_tests_that_exist() {
    let section = lifecycle_page();
    let this = std::fs::read_to_string(support::tests_dir().join("lifecycle.rs")).unwrap();
    let mut named = 0;
    for row in section.lines().filter(|l| l.starts_with("| **")) {
        let tests = row.rsplit('|').nth(1).unwrap_or_default();
        for name in tests.split('`').skip(1).step_by(2) {
            assert!(
                this.contains(&format!("fn {name}()")),
                "docs/lifecycle.md names {name}, not a test in tests/lifecycle.rs"
            );
            named += 1;
        }
    }
    assert!(named >= 10, "only {named} tests named in docs/lifecycle.md");
}

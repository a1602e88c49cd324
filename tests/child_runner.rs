//! Host-only tests of the tests' own process runner (tests/support/child.rs): how a process
//! ended (exit status, crash by a signal, timeout) and a bounded read of its output, also when
//! it prints more than a pipe holds or leaves a grandchild holding its pipe.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::child::{self, End, TestChild};

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    cmd
}

#[test]
fn exit_status_and_output_are_reported() {
    let out = child::run(
        &mut sh("echo out; echo err >&2; exit 3"),
        child::DEFAULT_LIMIT,
    );
    assert_eq!(out.end, End::Exited(3), "{}", out.report());
    assert!(!out.success() && out.code() == Some(3));
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );
    assert!(
        out.report().contains("exited with status 3"),
        "{}",
        out.report()
    );
}

#[test]
fn a_crash_is_reported_with_its_signal() {
    let out = child::run(&mut sh("kill -SEGV $$"), child::DEFAULT_LIMIT);
    assert_eq!(out.end, End::Signal(libc::SIGSEGV), "{}", out.report());
    assert_eq!(out.signal(), Some(libc::SIGSEGV));
    assert!(
        out.report().contains("crashed: signal 11 (SIGSEGV)"),
        "{}",
        out.report()
    );
}

#[test]
fn a_process_past_its_limit_is_killed_and_reported_as_timed_out() {
    let t = Instant::now();
    let out = child::run(
        &mut sh("echo started; exec sleep 60"),
        Duration::from_secs(2),
    );
    assert!(matches!(out.end, End::TimedOut(_)), "{}", out.report());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(out.stdout, "started\n", "what it printed before is kept");
    assert!(out.report().contains("timed out"), "{}", out.report());
}

#[test]
fn a_grandchild_holding_the_pipe_does_not_hang_the_read() {
    // The shell exits at once; the sleep it left behind keeps its stdout open for 20 s.
    let t = Instant::now();
    let out = child::run(&mut sh("sleep 20 & echo parent done"), child::DEFAULT_LIMIT);
    let took = t.elapsed();
    assert!(out.success(), "{}", out.report());
    assert_eq!(out.stdout, "parent done\n");
    assert!(out.pipe_left_open, "{}", out.report());
    assert!(
        took < child::PIPE_GRACE + Duration::from_secs(5),
        "the read waited {took:?}"
    );
}

#[test]
fn more_output_than_a_pipe_holds_never_blocks_the_process() {
    let out = child::run(
        &mut sh("head -c 1000000 /dev/zero; head -c 300000 /dev/zero >&2"),
        Duration::from_secs(60),
    );
    assert!(out.success(), "{}", out.report());
    assert_eq!((out.stdout.len(), out.stderr.len()), (1_000_000, 300_000));
    assert!(!out.pipe_left_open);
}

#[test]
fn wait_all_gives_every_process_one_deadline() {
    let t = Instant::now();
    let running = vec![
        child::spawn(&mut sh("exit 0")),
        child::spawn(&mut sh("exec sleep 60")),
        child::spawn(&mut sh("exit 7")),
    ];
    let ends: Vec<End> = child::wait_all(running, Duration::from_secs(3))
        .into_iter()
        .map(|f| f.end)
        .collect();
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert_eq!(ends[0], End::Exited(0));
    assert!(matches!(ends[1], End::TimedOut(_)), "{ends:?}");
    assert_eq!(ends[2], End::Exited(7));
}

/// Started by `a_test_child_runs_exactly_its_test`.
#[test]
#[ignore = "entry point of a child process: run by a_test_child_runs_exactly_its_test"]
fn child_prints_its_variable() {
    child::require_child("child_prints_its_variable");
    println!(
        "child sees {}",
        std::env::var("RUNNER_TEST_VALUE").unwrap_or_default()
    );
}

#[test]
fn a_test_child_runs_exactly_its_test() {
    let text = TestChild::new("child_prints_its_variable")
        .env("RUNNER_TEST_VALUE", "42")
        .run_passing();
    assert!(text.contains("child sees 42"), "{text}");
    // A name that matches no test runs nothing, which is not a pass.
    let out = TestChild::new("child_prints_its_variabl").run();
    assert!(out.success() && !out.ran_one_test(), "{}", out.report());
}

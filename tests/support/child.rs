//! The one way the tests start a process and collect what it printed: a bounded wait (a process
//! still running at its limit is killed and reported as timed out) and a bounded read (its
//! output is read while it runs, and once it has ended, a pipe that stays open because a
//! grandchild inherited it is given up after `PIPE_GRACE` instead of hanging the test). An end
//! by a signal is reported as a crash, with the signal's name.
//!
//! Also the entry points of a test binary started again as its own child (`TestChild`): the
//! child runs exactly one test of the same binary, with `CHILD_VAR` set to that test's name.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long the output of a process that has ended may still be read: longer only when a
/// grandchild holds the pipe open, which must not hang the test.
pub const PIPE_GRACE: Duration = Duration::from_secs(2);

/// At most this much of each stream is kept (the rest is read and dropped, so that the process
/// never blocks on a full pipe).
pub const KEEP_BYTES: usize = 16 << 20;

/// The limit of a process started without one of its own.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(600);

/// The variable a test binary's child finds its test's name in.
pub const CHILD_VAR: &str = "LLAISYS_TEST_CHILD";

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// It exited with this status.
    Exited(i32),
    /// A signal ended it (a crash, or an abort).
    Signal(i32),
    /// It was still running at its limit and was killed.
    TimedOut(Duration),
}

impl End {
    fn of(status: ExitStatus) -> End {
        match (status.code(), status.signal()) {
            (Some(code), _) => End::Exited(code),
            (None, Some(sig)) => End::Signal(sig),
            (None, None) => End::Exited(-1),
        }
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            End::Exited(code) => write!(f, "exited with status {code}"),
            End::Signal(sig) => write!(f, "crashed: signal {sig} ({})", signal_name(sig)),
            End::TimedOut(limit) => write!(f, "timed out: still running after {limit:?}, killed"),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        _ => "another signal",
    }
}

/// What a finished process did and printed.
#[derive(Debug)]
pub struct Finished {
    /// What the process was (its program, or the test it ran), for messages.
    pub what: String,
    pub end: End,
    pub stdout: String,
    pub stderr: String,
    /// From its start to its end (or to the kill).
    pub took: Duration,
    /// A pipe was still open `PIPE_GRACE` after the end (a grandchild holds it): what it wrote
    /// later is not here.
    pub pipe_left_open: bool,
}

impl Finished {
    /// Exit status 0.
    pub fn success(&self) -> bool {
        self.end == End::Exited(0)
    }

    /// The exit code, if it exited.
    pub fn code(&self) -> Option<i32> {
        match self.end {
            End::Exited(c) => Some(c),
            _ => None,
        }
    }

    /// The signal that ended it, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.end {
            End::Signal(s) => Some(s),
            _ => None,
        }
    }

    /// Its stdout then its stderr.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// How it ended and everything it printed, for an assertion message.
    pub fn report(&self) -> String {
        format!(
            "{}: {} after {:.1} s{}\n--- stdout\n{}--- stderr\n{}",
            self.what,
            self.end,
            self.took.as_secs_f64(),
            if self.pipe_left_open {
                " (a pipe stayed open: a grandchild holds it)"
            } else {
                ""
            },
            self.stdout,
            self.stderr
        )
    }

    /// Asserts exit status 0; returns stdout.
    #[track_caller]
    pub fn ok(self) -> String {
        assert!(self.success(), "{}", self.report());
        self.stdout
    }

    /// A test binary's run passed with exactly one test run (`TestChild`).
    pub fn ran_one_test(&self) -> bool {
        self.success() && self.stdout.contains("test result: ok. 1 passed;")
    }
}

/// One pipe, read on its own thread into a buffer the waiting side can take at any time.
struct Reader {
    buf: Arc<Mutex<Vec<u8>>>,
    done: mpsc::Receiver<()>,
}

impl Reader {
    fn start(mut pipe: impl Read + Send + 'static) -> Reader {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let shared = Arc::clone(&buf);
        thread::spawn(move || {
            let mut chunk = [0u8; 64 << 10];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut b = shared.lock().unwrap_or_else(|e| e.into_inner());
                        let room = KEEP_BYTES.saturating_sub(b.len());
                        b.extend_from_slice(&chunk[..n.min(room)]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        });
        Reader { buf, done }
    }

    /// What was read, waiting until `deadline` at most for the end of the stream; and whether
    /// the stream was still open then.
    fn take(self, deadline: Instant) -> (String, bool) {
        let wait = deadline.saturating_duration_since(Instant::now());
        let open = self.done.recv_timeout(wait).is_err();
        let b = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        (String::from_utf8_lossy(&b).into_owned(), open)
    }
}

/// A started process whose output is being read.
pub struct Running {
    what: String,
    child: Child,
    stdout: Reader,
    stderr: Reader,
    start: Instant,
    ended: Option<(End, Instant)>,
}

/// Starts `cmd` with stdin from /dev/null and its stdout and stderr read as it runs.
pub fn spawn(cmd: &mut Command) -> Running {
    spawn_named(cmd, format!("{cmd:?}"))
}

fn spawn_named(cmd: &mut Command, what: String) -> Running {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let stdout = Reader::start(child.stdout.take().expect("piped stdout"));
    let stderr = Reader::start(child.stderr.take().expect("piped stderr"));
    Running {
        what,
        child,
        stdout,
        stderr,
        start,
        ended: None,
    }
}

impl Running {
    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has ended (without waiting).
    pub fn has_ended(&mut self) -> bool {
        if self.ended.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.ended = Some((End::of(status), Instant::now()));
            }
        }
        self.ended.is_some()
    }

    /// Waits until it ends or until `deadline`, then kills it if it is still running.
    fn end_by(&mut self, deadline: Instant) {
        while !self.has_ended() {
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.ended = Some((End::TimedOut(deadline - self.start), Instant::now()));
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Collects its output once it has ended (`end_by`).
    fn collect(self) -> Finished {
        let (end, at) = self.ended.expect("ended");
        let deadline = at + PIPE_GRACE;
        let (stdout, out_open) = self.stdout.take(deadline);
        let (stderr, err_open) = self.stderr.take(deadline);
        Finished {
            what: self.what,
            end,
            stdout,
            stderr,
            took: at - self.start,
            pipe_left_open: out_open || err_open,
        }
    }

    /// Waits for the end, at most `limit` from its start (then it is killed).
    pub fn wait(mut self, limit: Duration) -> Finished {
        self.end_by(self.start + limit);
        self.collect()
    }
}

/// Waits for every process, with one limit for all counted from now; those still running then
/// are killed.
pub fn wait_all(mut all: Vec<Running>, limit: Duration) -> Vec<Finished> {
    let deadline = Instant::now() + limit;
    for r in &mut all {
        r.end_by(deadline);
    }
    all.into_iter().map(Running::collect).collect()
}

/// Runs `cmd` to its end, at most `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Finished {
    spawn(cmd).wait(limit)
}

/// Runs `exe args` with `loader_path` as the only LD_LIBRARY_PATH (or none), at most
/// `DEFAULT_LIMIT`.
pub fn run_program(exe: &Path, args: &[&str], loader_path: Option<&Path>) -> Finished {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    match loader_path {
        Some(dir) => cmd.env("LD_LIBRARY_PATH", dir),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    run(&mut cmd, DEFAULT_LIMIT)
}

/// Whether this process is the child started for the test `name` (`TestChild`).
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_VAR).as_deref() == Ok(name)
}

/// Fails unless this process is the child started for the test `name`: an entry point that
/// only means something with the environment its parent test gives it.
#[track_caller]
pub fn require_child(name: &str) {
    assert!(
        is_child(name),
        "{name} is started by its parent test, in a child process with its own environment"
    );
}

/// One test of this test binary, run again in a child process: `--exact NAME` with ignored
/// tests included (entry points of children are `#[ignore]`d), output not captured, one
/// thread, `CHILD_VAR=NAME`, NCCL_NVLS_ENABLE=0, and the environment the parent adds.
pub struct TestChild {
    name: String,
    cmd: Command,
    limit: Duration,
}

impl TestChild {
    pub fn new(name: &str) -> TestChild {
        TestChild::of_program(&std::env::current_exe().expect("current_exe"), name)
    }

    /// The test `name` of `program`: a copy of this test binary placed elsewhere.
    pub fn of_program(program: &Path, name: &str) -> TestChild {
        let mut cmd = Command::new(program);
        cmd.args([
            "--exact",
            name,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, name)
        .env("NCCL_NVLS_ENABLE", "0");
        TestChild {
            name: name.to_string(),
            cmd,
            limit: DEFAULT_LIMIT,
        }
    }

    pub fn env(
        mut self,
        key: impl AsRef<std::ffi::OsStr>,
        value: impl AsRef<std::ffi::OsStr>,
    ) -> Self {
        self.cmd.env(key, value);
        self
    }

    pub fn envs<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.cmd.envs(vars);
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// `dir` as the child's only LD_LIBRARY_PATH: the stand-in libraries there load first.
    pub fn loader_path(self, dir: &Path) -> Self {
        self.env("LD_LIBRARY_PATH", dir)
    }

    /// The child is killed and reported as timed out after `limit`.
    pub fn limit(mut self, limit: Duration) -> Self {
        self.limit = limit;
        self
    }

    pub fn spawn(mut self) -> Running {
        let what = format!("the child test {}", self.name);
        spawn_named(&mut self.cmd, what)
    }

    pub fn run(self) -> Finished {
        let limit = self.limit;
        self.spawn().wait(limit)
    }

    /// Runs it and asserts that the one test ran and passed; returns everything it printed.
    #[track_caller]
    pub fn run_passing(self) -> String {
        let out = self.run();
        assert!(out.ran_one_test(), "{}", out.report());
        out.text()
    }
}

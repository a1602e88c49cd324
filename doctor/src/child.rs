//! Child processes the doctor starts (the probe processes, the loader's trace), with every wait
//! bounded: the wait for the child's exit, and the read of its output too. A child's output
//! pipe can outlive the child: a grandchild (a helper a driver library starts, a background
//! process of a shell) inherits it and keeps it open, so the end of the output does not come
//! when the child exits. Here the child's exit is watched on its own (`waitpid`, polled), and
//! once the child has exited its output is read for [`EXIT_GRACE`] more at most: what it wrote
//! before exiting is in the pipe already. The threads that read a pipe a grandchild holds stay
//! blocked until the grandchild closes it or this process ends; nothing waits for them.
//!
//! How a child ended is told apart: killed by the doctor past its limit (it did not answer),
//! killed by a signal of its own (it crashed), or exited with a status.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the output of a child that has exited is still read: what it wrote is in the pipe
/// already; anything later comes from a grandchild that inherited the pipe.
pub const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How often a child's exit is looked for while its output is read.
pub const POLL: Duration = Duration::from_millis(25);
/// How long a killed process may take to go before the doctor stops waiting for it (a process
/// stuck inside the kernel, state D, cannot die until the driver lets go).
pub const REAP_LIMIT: Duration = Duration::from_secs(2);

/// One line of a child's output, or its end.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line, without its line end.
    Text(String),
    /// The pipe closed: every process holding it (the child, any grandchild) closed it.
    Eof,
}

/// Reads `out` line by line on a thread of its own; the lines come on the channel, then `Eof`.
pub fn lines(out: Option<impl Read + Send + 'static>) -> Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    let Some(out) = out else {
        let _ = tx.send(Line::Eof);
        return rx;
    };
    std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&buf).trim_end().to_string();
                    if tx.send(Line::Text(text)).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Line::Eof);
    });
    rx
}

/// Bytes of a child's output gathered on a thread of its own: the last `keep` bytes, and a
/// channel that says when the pipe closed.
pub struct Gathered {
    kept: Arc<Mutex<Vec<u8>>>,
    closed: Receiver<()>,
}

impl Gathered {
    /// Starts gathering `out`.
    pub fn start(out: Option<impl Read + Send + 'static>, keep: usize) -> Gathered {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let (done, closed) = mpsc::channel();
        match out {
            Some(mut out) => {
                let into = kept.clone();
                std::thread::spawn(move || {
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = out.read(&mut chunk) {
                        if n == 0 {
                            break;
                        }
                        let mut k = into.lock().unwrap_or_else(|p| p.into_inner());
                        k.extend_from_slice(&chunk[..n]);
                        if k.len() > keep {
                            let cut = k.len() - keep;
                            k.drain(..cut);
                        }
                    }
                    let _ = done.send(());
                });
            }
            None => {
                let _ = done.send(());
            }
        }
        Gathered { kept, closed }
    }

    /// What was gathered once the pipe closed, or after `limit` if it stays open (a grandchild
    /// holds it).
    pub fn take_within(self, limit: Duration) -> Vec<u8> {
        let _ = self.closed.recv_timeout(limit);
        let k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        k.clone()
    }
}

/// Waits for the child to exit, at most `limit` (None: as long as it takes).
pub fn wait_within(child: &mut Child, limit: Option<Duration>) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if limit.is_none_or(|l| start.elapsed() < l) => std::thread::sleep(POLL),
            _ => return None,
        }
    }
}

/// Kills the child and reaps it within [`REAP_LIMIT`]; false when it did not go (stuck inside
/// the kernel).
pub fn kill(child: &mut Child) -> bool {
    let _ = child.kill();
    wait_within(child, Some(REAP_LIMIT)).is_some()
}

/// How a bounded run of a child ended.
#[derive(Debug)]
pub enum Outcome {
    /// It exited, or died of a signal, within the limit.
    Ended {
        /// Its exit status.
        status: ExitStatus,
        /// Its stdout: to the end, or as far as it came within [`EXIT_GRACE`] of the exit when
        /// a grandchild keeps the pipe open.
        stdout: Vec<u8>,
    },
    /// It had not exited at the limit: it was killed.
    TimedOut {
        /// Its stdout up to then.
        stdout: Vec<u8>,
    },
}

/// Reads the child's stdout (piped) and waits for its exit, the whole within `limit`; kills it
/// past that. The child's stdin and stderr are the caller's business (null them).
pub fn output_within(mut child: Child, limit: Duration) -> Outcome {
    let chunks = chunks(child.stdout.take());
    let start = Instant::now();
    let mut stdout = Vec::new();
    let mut eof = false;
    let mut exit = ExitWatch::default();
    loop {
        if let Some(status) = exit.done(&mut child, eof) {
            return Outcome::Ended { status, stdout };
        }
        if !exit.seen() && start.elapsed() >= limit {
            kill(&mut child);
            return Outcome::TimedOut { stdout };
        }
        if eof {
            std::thread::sleep(POLL);
            continue;
        }
        match chunks.recv_timeout(POLL) {
            Ok(Some(bytes)) => stdout.extend_from_slice(&bytes),
            Ok(None) | Err(RecvTimeoutError::Disconnected) => eof = true,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// A child's exit, looked for while its output is read.
#[derive(Debug, Default)]
pub struct ExitWatch {
    /// Its status and when it was seen.
    seen: Option<(ExitStatus, Instant)>,
}

impl ExitWatch {
    /// Looks for the child's exit (without waiting); once it has exited, its status when the
    /// output needs no more reading: the output ended (`eof`), or [`EXIT_GRACE`] has passed
    /// since the exit (a grandchild holds the pipe).
    pub fn done(&mut self, child: &mut Child, eof: bool) -> Option<ExitStatus> {
        if self.seen.is_none() {
            if let Ok(Some(s)) = child.try_wait() {
                self.seen = Some((s, Instant::now()));
            }
        }
        let (status, at) = self.seen?;
        (eof || at.elapsed() >= EXIT_GRACE).then_some(status)
    }

    /// Whether the child has exited.
    pub fn seen(&self) -> bool {
        self.seen.is_some()
    }
}

/// Reads `out` in chunks on a thread of its own; `None` at the end.
fn chunks(out: Option<impl Read + Send + 'static>) -> Receiver<Option<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    let Some(mut out) = out else {
        let _ = tx.send(None);
        return rx;
    };
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = out.read(&mut chunk) {
            if n == 0 || tx.send(Some(chunk[..n].to_vec())).is_err() {
                break;
            }
        }
        let _ = tx.send(None);
    });
    rx
}

/// How an exit status reads: `exited with status 3`, `died of SIGSEGV (segmentation fault: an
/// invalid memory access)`.
pub fn ended_words(status: ExitStatus) -> String {
    match status.signal() {
        Some(sig) => format!("died of {} ({})", signal_name(sig), signal_words(sig)),
        None => format!("exited with status {}", status.code().unwrap_or(-1)),
    }
}

/// `SIGSEGV` for 11; `signal N` for one without a name here.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// What a signal usually means for a process that got it.
pub fn signal_words(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "segmentation fault: an invalid memory access",
        libc::SIGBUS => "bus error: an access to memory that is not there (a mapping gone)",
        libc::SIGABRT => "aborted (an assertion or abort() in a library)",
        libc::SIGILL => "illegal instruction (code built for another CPU, or corrupted)",
        libc::SIGFPE => "arithmetic exception",
        libc::SIGKILL => "killed from outside (the out-of-memory killer, or a person)",
        libc::SIGTERM | libc::SIGINT | libc::SIGHUP | libc::SIGQUIT => "stopped from outside",
        libc::SIGPIPE => "wrote to a closed pipe",
        libc::SIGSYS => "a system call refused (seccomp)",
        _ => "killed by a signal",
    }
}

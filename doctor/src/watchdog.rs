//! The watchdog: a diagnostic tool runs when the driver is broken, and a broken driver hangs or
//! crashes the process that calls it. So the doctor makes no call into the driver or the CUDA
//! runtime itself: it starts this program again as a probe process (`probes`) and reads what
//! each probe reports (`protocol`). Every probe gets the time limit anew when it starts; a
//! probe past the limit gets the process killed, a process that dies is reported with its
//! signal, and either way the doctor still prints its whole report, naming the probe.

use crate::probes::Group;
use crate::protocol::{parse, Msg, Part};
use crate::report::{How, Probe, ProbeFailure, ProbeStatus};
use crate::Options;
use anyhow::Context;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The name of the moment before the first probe announced itself (the process starting: the
/// dynamic loader, libraries' initialisers).
pub const STARTING: &str = "start of the probe process";
/// The name of the moment after the last probe (exit handlers: cudart's and the driver's
/// teardown).
pub const EXITING: &str = "exit of the probe process";

/// How long a killed process may take to go before the doctor stops waiting for it (a process
/// stuck inside the kernel, state D, cannot die until the driver lets go).
const REAP_LIMIT: Duration = Duration::from_secs(2);
/// The most of the probe processes' stderr kept.
const STDERR_KEEP: usize = 4096;

/// What one probe process produced.
#[derive(Debug, Default)]
pub struct Run {
    /// Its results, in order.
    pub parts: Vec<Part>,
    /// Every probe it started.
    pub probes: Vec<Probe>,
    /// The probe that hung or crashed.
    pub failure: Option<ProbeFailure>,
    /// Its stderr, and any stdout line that was not a message.
    pub stderr: String,
}

enum Line {
    Text(String),
    Eof,
}

/// Starts the probe process for `group` and watches it; `progress` hears the bench's lines.
pub fn run(group: Group, opts: &Options, progress: &mut dyn FnMut(&str)) -> Run {
    let mut run = Run::default();
    let child = spawn(group, opts);
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            run.failure = Some(ProbeFailure {
                probe: STARTING.into(),
                how: How::NotStarted {
                    error: format!("{e:#}"),
                },
            });
            return run;
        }
    };
    let lines = read_lines(&mut child);
    let (stderr, stderr_done) = collect_stderr(&mut child);
    let limit = opts.timeout;
    let mut current = (STARTING.to_string(), Instant::now());
    let mut ended = false;
    let mut stray = String::new();
    let hung = loop {
        let got = match limit {
            Some(l) => lines.recv_timeout(l.saturating_sub(current.1.elapsed())),
            None => lines.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(Line::Text(text)) => match parse(&text) {
                Some(Msg::Start { probe }) => {
                    close(&mut run, &current, ProbeStatus::Ok);
                    current = (probe, Instant::now());
                }
                Some(Msg::Progress { line }) => progress(&line),
                Some(Msg::Part(p)) => run.parts.push(p),
                Some(Msg::End) => {
                    close(&mut run, &current, ProbeStatus::Ok);
                    ended = true;
                    current = (EXITING.to_string(), Instant::now());
                }
                None => {
                    stray.push_str(&text);
                    stray.push('\n');
                }
            },
            Ok(Line::Eof) | Err(RecvTimeoutError::Disconnected) => break false,
            Err(RecvTimeoutError::Timeout) => break true,
        }
    };
    // Stdout is closed: the process is exiting (or has closed it and hangs on).
    let status = if hung {
        None
    } else {
        wait_within(
            &mut child,
            limit.map(|l| l.saturating_sub(current.1.elapsed())),
        )
    };
    progress("");
    let failure = match status {
        None => {
            let _ = child.kill();
            let gone = wait_within(&mut child, Some(REAP_LIMIT)).is_some();
            let after_s = limit.map_or(0.0, |l| l.as_secs_f64());
            close(&mut run, &current, ProbeStatus::Hung);
            if !gone {
                stray.push_str(&format!(
                    "(the probe process did not go within {} s of SIGKILL: it is stuck inside \
                     the kernel, in the driver)\n",
                    REAP_LIMIT.as_secs()
                ));
            }
            Some(How::Hung { after_s })
        }
        Some(s) => match died(s, ended) {
            Some(how) => {
                close(&mut run, &current, ProbeStatus::Crashed);
                Some(how)
            }
            None => None,
        },
    };
    run.failure = failure.map(|how| ProbeFailure {
        probe: current.0.clone(),
        how,
    });
    // What the process wrote last; a process that did not go keeps its pipe open: not waited for.
    let _ = stderr_done.recv_timeout(Duration::from_millis(200));
    let mut text =
        String::from_utf8_lossy(&stderr.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    text.push_str(&stray);
    run.stderr = tail(&text, STDERR_KEEP);
    run
}

/// Records the probe that just ended (the start and exit phases only when they failed).
fn close(run: &mut Run, current: &(String, Instant), status: ProbeStatus) {
    if status == ProbeStatus::Ok && (current.0 == STARTING || current.0 == EXITING) {
        return;
    }
    run.probes.push(Probe {
        name: current.0.clone(),
        ms: current.1.elapsed().as_secs_f64() * 1e3,
        status,
    });
}

/// How an exit status says the process failed: a signal, or an exit before `End` or with a
/// non-zero status. None: it finished.
fn died(status: ExitStatus, ended: bool) -> Option<How> {
    if let Some(sig) = status.signal() {
        return Some(How::Signal {
            number: sig,
            name: signal_name(sig),
            words: signal_words(sig).into(),
        });
    }
    let code = status.code().unwrap_or(-1);
    (!ended || code != 0).then_some(How::Exited { code })
}

fn spawn(group: Group, opts: &Options) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("cannot name this program to start it again")?;
    let mut c = Command::new(&exe);
    c.arg("doctor")
        .arg("--probe-process")
        .arg(group.arg())
        .arg("--device")
        .arg(opts.device.to_string());
    if opts.bench {
        c.arg("--bench");
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start the probe process {}", exe.display()))
}

/// The child's stdout, line by line, on a channel; `Eof` when it closes.
fn read_lines(child: &mut Child) -> mpsc::Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
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
    } else {
        let _ = tx.send(Line::Eof);
    }
    rx
}

/// The child's stderr, gathered in the background (the last 64 KiB), and a channel that says
/// when it closed.
fn collect_stderr(child: &mut Child) -> (Arc<Mutex<Vec<u8>>>, mpsc::Receiver<()>) {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let (done, closed) = mpsc::channel();
    if let Some(mut err) = child.stderr.take() {
        let into = kept.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = err.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                let mut k = into.lock().unwrap_or_else(|p| p.into_inner());
                k.extend_from_slice(&chunk[..n]);
                if k.len() > 65536 {
                    let cut = k.len() - 65536;
                    k.drain(..cut);
                }
            }
            let _ = done.send(());
        });
    } else {
        let _ = done.send(());
    }
    (kept, closed)
}

/// Waits for the child to exit, at most `limit` (None: as long as it takes).
fn wait_within(child: &mut Child, limit: Option<Duration>) -> Option<ExitStatus> {
    let Some(limit) = limit else {
        return child.wait().ok();
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            _ => return None,
        }
    }
}

/// The last `keep` bytes of `text`, at a character boundary, trimmed.
fn tail(text: &str, keep: usize) -> String {
    let text = text.trim();
    if text.len() <= keep {
        return text.to_string();
    }
    let mut start = text.len() - keep;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
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

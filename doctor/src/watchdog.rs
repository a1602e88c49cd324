//! The watchdog: a diagnostic tool runs when the driver is broken, and a broken driver hangs or
//! crashes the process that calls it. So the doctor makes no call into the driver or the CUDA
//! runtime itself: it starts this program again as a probe process (`probes`) and reads what
//! each probe reports (`protocol`). Every probe gets the time limit anew when it starts; a
//! probe past the limit gets the process killed, a process that dies is reported with its
//! signal, and either way the doctor still prints its whole report, naming the probe.
//!
//! The process's exit is watched on its own, apart from its stdout (`child`): a probe process
//! that crashed is reported as crashed even when a process it started keeps its stdout open.
//! While a probe runs past [`WAITING_AFTER`], the watchdog says so once a second
//! ([`Notice::Waiting`]); the command line shows that on a terminal.

use crate::child::{self, ExitWatch, Gathered, Line, POLL};
use crate::names::{self, Group, EXITING, STARTING};
use crate::options::Options;
use crate::protocol::{parse, Msg, Part};
use crate::report::{How, Probe, ProbeFailure, ProbeStatus};
use anyhow::Context;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// How long a probe runs before the watchdog says it is waiting for it ([`Notice::Waiting`],
/// then once a second).
pub const WAITING_AFTER: Duration = Duration::from_secs(1);
/// The most of the probe processes' stderr kept.
const STDERR_KEEP: usize = 4096;
/// The most of a probe process's stderr gathered while it runs.
const STDERR_GATHER: usize = 65536;
/// How long the stderr of a probe process that has gone is still read (a grandchild may hold
/// the pipe).
const STDERR_GRACE: Duration = Duration::from_millis(200);

/// What the watchdog tells the one who runs it while it watches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Notice<'a> {
    /// A line of the bench's progress.
    Progress(&'a str),
    /// The probe (or phase) `probe` has not answered for `waited` (whole seconds, from
    /// [`WAITING_AFTER`] on, once a second); `limit` is the time it has, None: no limit.
    Waiting {
        /// The probe's name (or the phase's: [`STARTING`], [`EXITING`]).
        probe: &'a str,
        /// How long it has run.
        waited: Duration,
        /// Its time limit.
        limit: Option<Duration>,
    },
    /// What was shown for the last `Progress` or `Waiting` is over (the probe answered, the
    /// bench or the probe process ended).
    Clear,
}

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

/// Starts the probe process for `group` and watches it; `notices` hears the bench's progress
/// and which probe it is waiting for.
pub fn run(group: Group, opts: &Options, notices: &mut dyn FnMut(Notice)) -> Run {
    let mut run = Run::default();
    let mut child = match spawn(group, opts) {
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
    let stderr = Gathered::start(child.stderr.take(), STDERR_GATHER);
    let mut stray = String::new();
    let mut watch = Watch {
        run: &mut run,
        current: (STARTING.to_string(), Instant::now()),
        ended: false,
        shown: None,
        notices,
        stray: &mut stray,
    };
    let exited = watch.watch(&mut child, opts.timeout);
    let (current, ended) = (watch.current, watch.ended);
    notices(Notice::Clear);
    let failure = match exited {
        None => {
            let gone = child::kill(&mut child);
            close(&mut run, &current, ProbeStatus::Hung);
            if !gone {
                stray.push_str(&format!(
                    "(the probe process did not go within {} s of SIGKILL: it is stuck inside \
                     the kernel, in the driver)\n",
                    child::REAP_LIMIT.as_secs()
                ));
            }
            let after_s = opts.timeout.map_or(0.0, |l| l.as_secs_f64());
            Some(How::Hung { after_s })
        }
        Some(status) => {
            let how = died(status, ended);
            if how.is_some() {
                close(&mut run, &current, ProbeStatus::Crashed);
            }
            how
        }
    };
    run.failure = failure.map(|how| ProbeFailure {
        probe: current.0.clone(),
        how,
    });
    // What the process wrote last; a pipe a grandchild holds open is not waited for.
    let mut text = String::from_utf8_lossy(&stderr.take_within(STDERR_GRACE)).into_owned();
    text.push_str(&stray);
    run.stderr = tail(&text, STDERR_KEEP);
    run
}

/// The watch over one probe process: its messages, its probes' clocks, its exit.
struct Watch<'r, 'e> {
    run: &'r mut Run,
    /// The probe (or phase) running, and since when.
    current: (String, Instant),
    /// `End` came: every probe asked for has run.
    ended: bool,
    /// The whole seconds of the last `Waiting` told for the current probe.
    shown: Option<u64>,
    notices: &'e mut dyn FnMut(Notice),
    /// Stdout lines that were not messages.
    stray: &'r mut String,
}

impl Watch<'_, '_> {
    /// Reads the messages until the process has exited and its stdout is read (to its end,
    /// or for [`child::EXIT_GRACE`] when a grandchild keeps it open): its exit status. None:
    /// the current probe passed `limit` (the process still runs).
    fn watch(&mut self, child: &mut Child, limit: Option<Duration>) -> Option<ExitStatus> {
        let lines = child::lines(child.stdout.take());
        let mut eof = false;
        let mut exit = ExitWatch::default();
        loop {
            if let Some(status) = exit.done(child, eof) {
                return Some(status);
            }
            if !exit.seen() {
                let waited = self.current.1.elapsed();
                if limit.is_some_and(|l| waited >= l) {
                    return None;
                }
                self.tell_waiting(waited, limit);
            }
            if eof {
                std::thread::sleep(POLL);
                continue;
            }
            let wait = limit.map_or(POLL, |l| {
                l.saturating_sub(self.current.1.elapsed()).min(POLL)
            });
            match lines.recv_timeout(wait) {
                Ok(Line::Text(text)) => self.message(text),
                Ok(Line::Eof) | Err(RecvTimeoutError::Disconnected) => eof = true,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Tells that the current probe has not answered, from [`WAITING_AFTER`] on, once a second.
    fn tell_waiting(&mut self, waited: Duration, limit: Option<Duration>) {
        let secs = waited.as_secs();
        if waited < WAITING_AFTER || self.shown == Some(secs) {
            return;
        }
        self.shown = Some(secs);
        (self.notices)(Notice::Waiting {
            probe: &self.current.0,
            waited: Duration::from_secs(secs),
            limit,
        });
    }

    /// The current probe is over: the next begins (`next`).
    fn next(&mut self, next: String) {
        self.current = (next, Instant::now());
        if self.shown.take().is_some() {
            (self.notices)(Notice::Clear);
        }
    }

    fn message(&mut self, text: String) {
        match parse(&text) {
            Some(Msg::Start { probe }) => {
                close(self.run, &self.current, ProbeStatus::Ok);
                self.next(probe);
            }
            Some(Msg::Progress { line }) if line.is_empty() => (self.notices)(Notice::Clear),
            Some(Msg::Progress { line }) => (self.notices)(Notice::Progress(&line)),
            Some(Msg::Part(p)) => self.run.parts.push(p),
            Some(Msg::End) => {
                close(self.run, &self.current, ProbeStatus::Ok);
                self.ended = true;
                self.next(EXITING.to_string());
            }
            None => {
                self.stray.push_str(&text);
                self.stray.push('\n');
            }
        }
    }
}

/// Records the probe that just ended (the start and exit phases only when they failed).
fn close(run: &mut Run, current: &(String, Instant), status: ProbeStatus) {
    if status == ProbeStatus::Ok && names::is_phase(&current.0) {
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
            name: child::signal_name(sig),
            words: child::signal_words(sig).into(),
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

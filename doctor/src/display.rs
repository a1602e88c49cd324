//! What stderr shows while the doctor runs: the bench's progress, and on a terminal which probe
//! the watchdog is waiting for. The report itself goes to stdout (`text`, `json`).

use crate::names;
use crate::options::{self, Options};
use crate::watchdog::Notice;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// What stderr shows while the doctor runs. The bench's progress: on a terminal one line
/// rewritten in place (cleared at the end), elsewhere one line per step, so that a log shows
/// what ran. On a terminal, for the text report, which probe the watchdog is waiting for
/// ([`waiting_line`]), so that a hanging driver does not look like a hanging doctor; nothing of
/// that with `--json` or on a pipe.
pub struct StderrDisplay {
    tty: bool,
    waiting: bool,
    shown: bool,
}

impl StderrDisplay {
    /// The display for a run with `opts`, on this process's stderr.
    pub fn new(opts: &Options) -> StderrDisplay {
        let tty = std::io::stderr().is_terminal();
        StderrDisplay {
            tty,
            waiting: tty && !opts.json,
            shown: false,
        }
    }

    /// Shows `notice`.
    pub fn show(&mut self, notice: Notice) {
        let line = match notice {
            Notice::Progress(line) => line.to_string(),
            Notice::Waiting {
                probe,
                waited,
                limit,
            } if self.waiting => waiting_line(probe, waited, limit),
            Notice::Waiting { .. } => return,
            Notice::Clear if self.shown => String::new(),
            Notice::Clear => return,
        };
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
            self.shown = !line.is_empty();
        } else if !line.is_empty() {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }
}

/// The line that says which probe the watchdog is waiting for:
/// ``llaisys-nvidia: waiting for `cudaDriverGetVersion` (3 s of 20 s)...``.
pub fn waiting_line(probe: &str, waited: Duration, limit: Option<Duration>) -> String {
    let what = if names::is_phase(probe) {
        format!("the {probe}")
    } else {
        format!("`{probe}`")
    };
    let of = match limit {
        Some(l) => format!(" of {} s", options::seconds(l.as_secs_f64())),
        None => ", no time limit".into(),
    };
    format!(
        "llaisys-nvidia: waiting for {what} ({} s{of})...",
        waited.as_secs()
    )
}

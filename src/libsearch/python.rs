//! Asking a Python for its site folders (the search's last step: the PyPI wheels), with a bound
//! that holds whatever the Python does.
//!
//! The child's whole life is bounded, output included (`poll(2)` against the same deadline): a
//! process the Python starts in the background inherits the pipe and can hold it open long
//! after the Python exits, so once it has exited, what is in the pipe is read without waiting
//! for its end. Past the deadline the Python's process group (it leads its own) is killed and
//! the answer says so; an exit status or a signal is reported as such, not as a timeout.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long the Python may take by default, from its start to its exit with all its output
/// read ([`super::Search::python_limit`]).
pub const LIMIT: Duration = Duration::from_secs(10);

/// More output than any list of site folders: the rest is read and dropped.
const MAX_OUTPUT: usize = 1 << 20;

const SCRIPT: &str =
    "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)";

/// The site folders `python` reports (those that exist), or why there are none: it could not
/// be run, did not answer within `limit`, exited with a status, or died of a signal. `Err`
/// starts with `python`.
pub fn site_packages(python: &str, limit: Duration) -> Result<Vec<PathBuf>, String> {
    let mut cmd = Command::new(python);
    cmd.arg("-c").arg(SCRIPT);
    let text = output_within(cmd, limit).map_err(|why| format!("{python} {why}"))?;
    Ok(text
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect())
}

/// Runs `cmd` (stdin and stderr closed, stdout read) and returns its output once it has exited
/// successfully, all within `limit`. `Err` completes a sentence that starts with the program.
fn output_within(mut cmd: Command, limit: Duration) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("could not be run ({e})"))?;
    let Some(stdout) = child.stdout.take() else {
        stop(&mut child);
        return Err("could not be run (no output pipe)".into());
    };
    let mut output = Output::new(stdout);
    let status = loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            // Exited: what it wrote is in the pipe; a process it left behind may hold the pipe
            // open, so read what is there without waiting for its end.
            output.drain();
            break status;
        }
        let now = Instant::now();
        if now >= deadline {
            stop(&mut child);
            return Err(format!(
                "did not answer within {} s (stopped)",
                limit.as_secs_f64()
            ));
        }
        if output.closed {
            // The pipe is closed but the process still runs: wait for its exit.
            std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
        } else {
            output.read_for((deadline - now).min(Duration::from_millis(50)));
        }
    };
    ended(status)?;
    Ok(String::from_utf8_lossy(&output.bytes).into_owned())
}

/// Kills the child's process group (what it started in the background too) and reaps it. The
/// child is not reaped yet, so its id still names its group.
fn stop(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) with a negative id signals that process group; the child leads it and
        // is not reaped, so the id cannot name another group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `Ok` for a successful exit; otherwise how it ended.
fn ended(status: ExitStatus) -> Result<(), String> {
    if status.success() {
        return Ok(());
    }
    if let Some(signal) = status.signal() {
        return Err(format!(
            "crashed: killed by signal {signal} ({})",
            signal_name(signal)
        ));
    }
    Err(match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("ended without success ({status})"),
    })
}

/// The name of a signal a crash is likely to come from, else "a signal".
fn signal_name(signal: i32) -> &'static str {
    macro_rules! names {
        ($($name:ident)*) => { match signal { $(libc::$name => stringify!($name),)* _ => "a signal" } };
    }
    names!(SIGSEGV SIGABRT SIGBUS SIGILL SIGFPE SIGKILL SIGTERM SIGINT SIGPIPE)
}

/// The child's output pipe, read without blocking.
struct Output {
    pipe: ChildStdout,
    bytes: Vec<u8>,
    closed: bool,
}

impl Output {
    fn new(pipe: ChildStdout) -> Output {
        let fd = pipe.as_raw_fd();
        // SAFETY: `fd` is the open pipe `pipe` owns; F_GETFL/F_SETFL only change its flags.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        Output {
            pipe,
            bytes: Vec::new(),
            closed: false,
        }
    }

    /// Waits up to `wait` for output, then reads what is there.
    fn read_for(&mut self, wait: Duration) {
        let mut fds = libc::pollfd {
            fd: self.pipe.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut fds, 1, ms) } > 0 {
            self.drain();
        }
    }

    /// Reads until the pipe is empty (or closed), without blocking.
    fn drain(&mut self) {
        let mut chunk = [0u8; 8192];
        while !self.closed {
            match self.pipe.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => {
                    let room = MAX_OUTPUT.saturating_sub(self.bytes.len());
                    self.bytes
                        .extend_from_slice(chunk.get(..n.min(room)).unwrap_or_default());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return, // WouldBlock: empty for now
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Stand-in "pythons": shell scripts that behave as a broken interpreter might.
    use super::*;
    use std::path::Path;

    fn script(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("llaisys-python-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        super::super::write_test_script(&path, body);
        path
    }

    fn pid(pid_file: &Path) -> libc::pid_t {
        let text = std::fs::read_to_string(pid_file).unwrap();
        text.trim().parse().unwrap()
    }

    fn alive(pid_file: &Path) -> bool {
        // SAFETY: signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid(pid_file), 0) == 0 }
    }

    fn kill_from(pid_file: &Path) {
        // SAFETY: the background process this test's script started.
        unsafe { libc::kill(pid(pid_file), libc::SIGKILL) };
    }

    #[test]
    fn a_python_that_leaves_a_process_holding_its_output_answers_at_once() {
        let site = std::env::temp_dir();
        let pid_file = std::env::temp_dir().join(format!("llaisys-bg-{}", std::process::id()));
        let python = script(
            "background",
            &format!(
                "echo {}\nsleep 60 &\necho $! > {}\nexit 0",
                site.display(),
                pid_file.display()
            ),
        );
        let start = Instant::now();
        let got = site_packages(python.to_str().unwrap(), LIMIT);
        let took = start.elapsed();
        assert!(alive(&pid_file), "the background process was left alone");
        kill_from(&pid_file);
        assert_eq!(got, Ok(vec![site]));
        assert!(
            took < Duration::from_secs(5),
            "took {took:?}: the read waited for the background process"
        );
    }

    #[test]
    fn a_python_that_never_finishes_is_stopped_at_the_limit() {
        let pid_file = std::env::temp_dir().join(format!("llaisys-hang-{}", std::process::id()));
        let python = script(
            "hangs",
            &format!(
                "echo partial\nsleep 60 &\necho $! > {}\nwait",
                pid_file.display()
            ),
        );
        let start = Instant::now();
        let got = site_packages(python.to_str().unwrap(), Duration::from_millis(500));
        let took = start.elapsed();
        let want = format!("{} did not answer within 0.5 s (stopped)", python.display());
        assert_eq!(got, Err(want));
        assert!(took < Duration::from_secs(3), "took {took:?}");
        // Its process group went with it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(&pid_file) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = alive(&pid_file);
        kill_from(&pid_file);
        assert!(!left, "the Python's background process survived it");
    }

    #[test]
    fn a_python_that_crashes_is_reported_as_crashed() {
        let python = script("crashes", "echo /tmp\nkill -SEGV $$");
        let got = site_packages(python.to_str().unwrap(), LIMIT);
        let want = format!(
            "{} crashed: killed by signal 11 (SIGSEGV)",
            python.display()
        );
        assert_eq!(got, Err(want));
    }

    #[test]
    fn a_python_that_fails_is_reported_with_its_status() {
        let python = script("fails", "echo /tmp\nexit 3");
        let got = site_packages(python.to_str().unwrap(), LIMIT);
        let want = format!("{} exited with status 3", python.display());
        assert_eq!(got, Err(want));
    }

    #[test]
    fn output_larger_than_a_pipe_is_read_whole() {
        let python = script(
            "verbose",
            "i=0; while [ $i -lt 20000 ]; do echo /nonexistent/site-$i; i=$((i+1)); done; echo /tmp",
        );
        let mut cmd = Command::new(&python);
        cmd.arg("-c").arg(SCRIPT);
        let text = output_within(cmd, LIMIT).unwrap();
        assert_eq!(text.lines().count(), 20001);
        assert_eq!(text.lines().last(), Some("/tmp"));
        assert_eq!(
            site_packages(python.to_str().unwrap(), LIMIT),
            Ok(vec![PathBuf::from("/tmp")])
        );
    }

    #[test]
    fn a_missing_python_could_not_be_run() {
        let got = site_packages("/nonexistent/python3", LIMIT);
        assert!(
            got.as_ref()
                .is_err_and(|e| e.starts_with("/nonexistent/python3 could not be run")),
            "{got:?}"
        );
    }
}

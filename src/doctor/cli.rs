//! The command line of `llaisys-nvidia`: parsing, `--help`, and the run that prints the report
//! and returns the exit status.

use super::{exit, json, run, text, Options};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};

/// `--help`.
pub const HELP: &str = "\
llaisys-nvidia: explains this machine's CUDA setup for the llaisys NVIDIA backend, and measures it.

usage: llaisys-nvidia [doctor] [--json] [--bench] [--device N]

  doctor        run the doctor (also what no command does)
  --json        print the report as JSON (schema llaisys-nvidia-doctor/1, docs/doctor-json.md)
  --bench       also measure H2D/D2H (pinned and pageable) and D2D bandwidth from 4 KiB to
                256 MiB, and allocation latencies; progress goes to stderr
  --device N    the device for the smoke test and the bench (default 0)
  -V, --version print the version and exit
  -h, --help    print this help and exit

The report: this build (link mode, CUDA it was built against), this machine (runtime and
driver versions, where libcudart and libcuda.so.1 come from, /dev/nvidia*, CUDA environment
variables), every device and the peer-access matrix, a smoke test through the llaisys runtime
table, and a diagnosis with the cause and the fix of what is wrong.

exit status:
  0   healthy
  2   no usable NVIDIA driver (none, the toolkit's stub, too old for this runtime, broken)
  3   no usable CUDA device (none, hidden by CUDA_VISIBLE_DEVICES, device nodes missing/locked)
  4   a check failed (a device query, the smoke test, the bench)
  64  usage error
  1   the report could not be written
";

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Run the doctor.
    Doctor(Options),
    /// Print the help.
    Help,
    /// Print the version.
    Version,
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut opts = Options::default();
    let mut args = args.into_iter().peekable();
    let mut first = true;
    while let Some(arg) = args.next() {
        let Some(a) = arg.to_str() else {
            return Err(format!("argument {arg:?} is not UTF-8"));
        };
        match a {
            "doctor" if first => {}
            "--json" => opts.json = true,
            "--bench" => opts.bench = true,
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--device" => {
                let v = args
                    .next()
                    .ok_or_else(|| "--device needs a device number".to_string())?;
                opts.device = device_number(&v.to_string_lossy())?;
            }
            _ if a.starts_with("--device=") => {
                opts.device = device_number(&a["--device=".len()..])?;
            }
            _ => return Err(format!("unknown argument '{a}'")),
        }
        first = false;
    }
    Ok(Command::Doctor(opts))
}

fn device_number(v: &str) -> Result<i32, String> {
    v.parse::<i32>()
        .ok()
        .filter(|&d| d >= 0)
        .ok_or_else(|| format!("--device takes a device number (0, 1, ...), not '{v}'"))
}

/// Runs the program: parses `args` (after the program name), prints, returns the exit status.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cmd = match parse(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "llaisys-nvidia: {e}\nusage: llaisys-nvidia [doctor] [--json] [--bench] \
                 [--device N]; see --help"
            );
            return exit::USAGE;
        }
    };
    let out = match cmd {
        Command::Help => (HELP.to_string(), exit::HEALTHY),
        Command::Version => (
            format!(
                "llaisys-nvidia {} ({} cudart, built against CUDA {})\n",
                crate::runtime::build::CRATE_VERSION,
                crate::runtime::build::LINK_MODE,
                crate::runtime::version_string(crate::runtime::build::cudart_version())
            ),
            exit::HEALTHY,
        ),
        Command::Doctor(opts) => {
            let report = run(&opts, &mut stderr_progress());
            let body = if opts.json {
                json::render(&report)
            } else {
                text::render(&report)
            };
            (body, report.diagnosis.status.exit_code())
        }
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.0.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => out.1,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "llaisys-nvidia: cannot write the report: {e}"
            );
            exit::DOCTOR_FAILED
        }
    }
}

/// The bench's progress on stderr: one line rewritten in place on a terminal (an empty line
/// clears it), one line per step otherwise, so that a log shows what ran.
pub fn stderr_progress() -> impl FnMut(&str) {
    let tty = std::io::stderr().is_terminal();
    move |line: &str| {
        let mut err = std::io::stderr().lock();
        if tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else if !line.is_empty() {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }
}

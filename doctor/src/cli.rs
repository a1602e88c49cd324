//! The command line of `llaisys-nvidia` (clap): parsing, `--help`, and the run that prints the
//! report and returns the exit status.

use crate::backend::{build, version_string};
use crate::diagnose::{diagnose, Diagnosis};
use crate::display::StderrDisplay;
use crate::evidence::Evidence;
use crate::names::Group;
use crate::options::{Options, DEFAULT_TIMEOUT_S, TIMEOUT_ENV};
use crate::report::Report;
use crate::watchdog::Notice;
use crate::{exit, gather, json, probes, text};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

/// What `--help` says after the options.
const AFTER_HELP: &str = "\
The report: this build (link mode, CUDA it was built against), this machine (runtime and
driver versions, where libcudart and libcuda.so.1 come from, /dev/nvidia*, CUDA environment
variables), every device and the peer-access matrix, a smoke test through the llaisys runtime
table, and a diagnosis with the cause and the fix of what is wrong.

Every call into the driver or the CUDA runtime runs in a probe process (this program, started
again) under a watchdog: a probe that does not return within the time limit (--timeout,
default 20 s) is stopped, a probe that crashes is named with its signal, and the report is
printed all the same. On a terminal, stderr says which probe the doctor is waiting for once one
has run for a second; nothing of that on a pipe or with --json.

exit status:
  0   healthy
  2   no usable NVIDIA driver (none, the toolkit's stub, too old for this runtime, broken)
  3   no usable CUDA device (none, hidden by CUDA_VISIBLE_DEVICES, device nodes missing/locked)
  4   a check failed (a device query, the smoke test, the bench)
  5   a probe hung or crashed (the driver or the runtime did not answer)
  64  usage error
  1   the report could not be written";

/// The one-line usage shown with a usage error.
pub const USAGE_LINE: &str =
    "usage: llaisys-nvidia [doctor] [--json] [--bench] [--device N] [--timeout SECONDS]; see --help";

/// `llaisys-nvidia`: explains this machine's CUDA setup for the llaisys NVIDIA backend, and
/// measures it.
#[derive(Parser, Debug)]
#[command(
    name = "llaisys-nvidia",
    about = "llaisys-nvidia: explains this machine's CUDA setup for the llaisys NVIDIA backend, and measures it.",
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true,
    disable_version_flag = true
)]
struct Cli {
    #[command(flatten)]
    args: DoctorArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the doctor (also what no command does).
    #[command(after_help = AFTER_HELP, disable_version_flag = true)]
    Doctor(DoctorArgs),
}

/// The doctor's options (also accepted without the `doctor` command).
#[derive(Args, Debug, Clone)]
struct DoctorArgs {
    /// Print the report as JSON (schema llaisys-nvidia-doctor/1, docs/doctor-json.md).
    #[arg(long)]
    json: bool,
    /// Also measure H2D/D2H (pinned and pageable) and D2D bandwidth from 4 KiB to 256 MiB, and
    /// allocation latencies; progress goes to stderr.
    #[arg(long)]
    bench: bool,
    /// The device for the smoke test and the bench.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..))]
    device: i32,
    /// The watchdog's time limit for each probe that calls into the driver or the runtime, in
    /// seconds (0: no limit).
    #[arg(long, value_name = "SECONDS", env = TIMEOUT_ENV, default_value_t = DEFAULT_TIMEOUT_S, value_parser = seconds)]
    timeout: f64,
    /// Print the version and exit.
    #[arg(short = 'V', long)]
    version: bool,
    /// The probe process's group (the watchdog starts this program again with it).
    #[arg(long, value_name = "GROUP", hide = true)]
    probe_process: Option<Group>,
}

fn seconds(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if (0.0..=1e6).contains(&s) => Ok(s),
        _ => Err(format!(
            "takes seconds, a number from 0 (no limit) to 1000000, not '{v}'"
        )),
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Run the doctor.
    Doctor(Options),
    /// Be the probe process of `Group` (internal).
    Probes(Group, Options),
    /// Print this text (help, version) and exit 0.
    Print(String),
}

/// Parses the arguments after the program name; Err is the usage error's message.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Request, String> {
    let argv = std::iter::once(OsString::from("llaisys-nvidia")).chain(args);
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let mut text = e.render().to_string();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            return Ok(Request::Print(text));
        }
        Err(e) => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("bad command line");
            return Err(first.trim_start_matches("error: ").to_string());
        }
    };
    let a = match cli.command {
        Some(Command::Doctor(a)) => a,
        None => cli.args,
    };
    if a.version {
        return Ok(Request::Print(format!(
            "llaisys-nvidia {} ({} cudart, built against CUDA {})\n",
            build::CRATE_VERSION,
            build::LINK_MODE,
            version_string(build::cudart_version())
        )));
    }
    let opts = Options {
        json: a.json,
        bench: a.bench,
        device: a.device,
        timeout: (a.timeout > 0.0).then(|| Duration::from_secs_f64(a.timeout)),
    };
    Ok(match a.probe_process {
        Some(g) => Request::Probes(g, opts),
        None => Request::Doctor(opts),
    })
}

/// Runs the program: parses `args` (after the program name), prints, returns the exit status.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let request = match parse(args) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "llaisys-nvidia: {e}\n{USAGE_LINE}");
            return exit::USAGE;
        }
    };
    let (body, status) = match request {
        Request::Print(text) => (text, exit::HEALTHY),
        Request::Probes(group, opts) => {
            probes::run(
                group,
                opts.device,
                opts.bench,
                &mut std::io::stdout().lock(),
            );
            return exit::HEALTHY;
        }
        Request::Doctor(opts) => {
            let mut display = StderrDisplay::new(&opts);
            let (report, diagnosis) = doctor(&opts, &mut |e| display.show(e));
            let body = if opts.json {
                json::render(&report, &diagnosis)
            } else {
                text::render(&report, &diagnosis)
            };
            (body, diagnosis.status.exit_code())
        }
    };
    match write_out(&body) {
        Ok(()) => status,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "llaisys-nvidia: {e:#}");
            exit::DOCTOR_FAILED
        }
    }
}

fn write_out(body: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(body.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the report")
}

/// Runs the doctor: gathers the report (`notices` hears the bench's progress and which probe
/// the watchdog waits for) and diagnoses it.
pub fn doctor(opts: &Options, notices: &mut dyn FnMut(Notice)) -> (Report, Diagnosis) {
    let report = gather::report(opts, notices);
    let diagnosis = diagnose(&Evidence::from_report(&report));
    (report, diagnosis)
}

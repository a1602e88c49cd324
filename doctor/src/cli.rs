//! The command line of `llaisys-nvidia` (clap): parsing, `--help`, and the run that prints the
//! report (or a memory snapshot's summary) and returns the exit status.

use crate::backend::{build, version_string};
use crate::diagnose::{diagnose, Diagnosis};
use crate::display::StderrDisplay;
use crate::evidence::Evidence;
use crate::names::Group;
use crate::options::{MemoryOptions, Options, DEFAULT_TIMEOUT_S, TIMEOUT_ENV};
use crate::report::Report;
use crate::watchdog::Notice;
use crate::{exit, gather, json, memory, memory_html, probes, snapshot, text};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
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

/// What `memory --help` says after the options.
const MEMORY_AFTER_HELP: &str = "\
The summary, per device: total, free and pool-reserved memory, the limit, and the blocks by
state (in_use, cached, graph_pool), by size class (<= 64 KiB, <= 1 MiB, <= 16 MiB, <= 128 MiB,
> 128 MiB) and in use by stream; with call sites recorded, the 5 holding the most bytes in use.
The snapshot's format: docs/memory-snapshot.md.

exit status:
  0   the summary was printed (and the page written)
  64  usage error, or the snapshot cannot be read or is not a memory snapshot of version 1
  1   the summary or the page could not be written";

/// The one-line usage shown with a usage error.
pub const USAGE_LINE: &str =
    "usage: llaisys-nvidia [doctor] [--json] [--bench] [--device N] [--timeout SECONDS], \
     or llaisys-nvidia memory SNAPSHOT.json [--html OUT.html]; see --help";

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
    /// Sum up a memory snapshot (llaisysNvidiaMemorySnapshot's JSON), and draw it as a page.
    #[command(after_help = MEMORY_AFTER_HELP, disable_version_flag = true)]
    Memory(MemoryArgs),
}

/// The options of `memory`.
#[derive(Args, Debug, Clone)]
struct MemoryArgs {
    /// The memory snapshot (JSON, docs/memory-snapshot.md).
    #[arg(value_name = "SNAPSHOT.json")]
    snapshot: PathBuf,
    /// Also write the snapshot as a self-contained HTML page: each device's blocks drawn in
    /// address order, coloured by state, and a summary table.
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,
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
    /// Sum up a memory snapshot.
    Memory(MemoryOptions),
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
            let mut lines = text.lines();
            let mut first = lines
                .next()
                .unwrap_or("bad command line")
                .trim_start_matches("error: ")
                .to_string();
            // "the following required arguments were not provided:" names them on the next line.
            if first.ends_with(':') {
                if let Some(next) = lines.next() {
                    first.push(' ');
                    first.push_str(next.trim());
                }
            }
            return Err(first);
        }
    };
    let a = match cli.command {
        Some(Command::Doctor(a)) => a,
        Some(Command::Memory(m)) => {
            return Ok(Request::Memory(MemoryOptions {
                snapshot: m.snapshot,
                html: m.html,
            }))
        }
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
        Request::Memory(opts) => return memory_run(&opts),
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

/// `llaisys-nvidia memory`: reads the snapshot, writes the page if asked, prints the summary.
fn memory_run(opts: &MemoryOptions) -> i32 {
    let snap = match snapshot::read(&opts.snapshot) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "llaisys-nvidia: {e}");
            return exit::USAGE;
        }
    };
    if let Some(out) = &opts.html {
        let name = opts
            .snapshot
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| opts.snapshot.display().to_string());
        if let Err(e) = std::fs::write(out, memory_html::render(&snap, &name)) {
            let _ = writeln!(
                std::io::stderr(),
                "llaisys-nvidia: cannot write the page {}: {e}",
                out.display()
            );
            return exit::DOCTOR_FAILED;
        }
    }
    let body = memory::render(&snap, &opts.snapshot.display().to_string());
    match write_out(&body) {
        Ok(()) => exit::HEALTHY,
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

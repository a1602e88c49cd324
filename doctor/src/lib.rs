//! `llaisys-nvidia doctor`: explains a CUDA setup for the llaisys NVIDIA backend and measures
//! it. A crate of its own above the library's public Rust API; every use of the library is in
//! [`backend`].
//!
//! # Module map
//!
//! One file per job, in layers: a module uses only modules of its own layer or lower ones, and
//! no modules use each other in a loop (tests/layers.rs at the workspace root checks both).
//! This file only declares the modules and re-exports [`Options`]; no module uses it.
//!
//! 1. Data and names, which use nothing else here: [`report`] (the report as plain data),
//!    [`names`] (the probes' and the probe process's phases' names), [`options`] (what a run
//!    is asked to do, the time limit), [`exit`] (the exit statuses), [`snapshot`] (a memory
//!    snapshot read from its file).
//! 2. The door into the library: [`backend`].
//! 3. Gathering the evidence, piece by piece. In the doctor's process, with no call into the
//!    driver or the CUDA runtime: [`facts`] (build facts), [`loader`] (where libcudart comes
//!    from, the loader's answer), [`nodes`] (`/dev/nvidia*`, GPUs the kernel sees),
//!    [`env`](mod@env) (CUDA environment variables), [`child`] (child processes with bounded
//!    waits and reads). In the probe process: [`smoke`] (the llaisys table end to end),
//!    [`bench`](mod@bench) (copy bandwidth and allocation latency); [`protocol`] carries their
//!    results back.
//! 4. The probe process and its watchdog: [`probes`] (every call into the driver and the
//!    runtime, one probe at a time), [`watchdog`] (starts the probe process, times each probe,
//!    tells hung from crashed).
//! 5. The report put together: [`gather`].
//! 6. The evidence the diagnosis reads off a report: [`evidence`].
//! 7. The diagnosis: [`diagnose`] (causes in plain words, fixes, the verdict).
//! 8. Printing: [`text`], [`json`] (the report on stdout), [`display`] (what stderr shows while
//!    the doctor runs: the bench's progress, the probe it waits for); for `llaisys-nvidia
//!    memory`: [`memory`] (a snapshot's figures and their text), [`memory_html`] (its page).
//! 9. The command line: [`cli`] (parsing, the run, the exit status).
//!
//! Exit status ([`exit`]): 0 healthy, 2 no usable NVIDIA driver, 3 no usable CUDA device, 4 a
//! check failed, 5 a probe hung or crashed, 64 usage error, 1 the doctor itself failed (its
//! output could not be written).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod backend;
pub mod bench;
pub mod child;
pub mod cli;
pub mod diagnose;
pub mod display;
pub mod env;
pub mod evidence;
pub mod exit;
pub mod facts;
pub mod gather;
pub mod json;
pub mod loader;
pub mod memory;
pub mod memory_html;
pub mod names;
pub mod nodes;
pub mod options;
pub mod probes;
pub mod protocol;
pub mod report;
pub mod smoke;
pub mod snapshot;
pub mod text;
pub mod watchdog;

pub use options::{Options, DEFAULT_TIMEOUT_S, TIMEOUT_ENV};

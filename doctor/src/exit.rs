//! The exit statuses of `llaisys-nvidia doctor`. Values are never reused for another meaning.

/// Everything works.
pub const HEALTHY: i32 = 0;
/// The doctor itself failed (its output could not be written).
pub const DOCTOR_FAILED: i32 = 1;
/// No usable NVIDIA driver: libcuda.so.1 cannot be loaded, is the toolkit's stub, is too old
/// for this runtime, or does not work.
pub const NO_DRIVER: i32 = 2;
/// A driver but no usable CUDA device: none, all hidden by CUDA_VISIBLE_DEVICES, or the
/// device nodes missing or locked.
pub const NO_DEVICE: i32 = 3;
/// A check failed: a device query, the smoke test, or the bench.
pub const CHECK_FAILED: i32 = 4;
/// A probe hung (past the watchdog's time limit) or crashed: the driver or the runtime did
/// not answer.
pub const PROBE_FAILED: i32 = 5;
/// Bad command line (`EX_USAGE` of sysexits.h).
pub const USAGE: i32 = 64;

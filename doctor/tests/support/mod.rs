//! What the doctor's test binaries share.

use std::path::PathBuf;

/// The `llaisys-nvidia` binary under test: the file `LLAISYS_NVIDIA_DOCTOR_BIN` names (staged
/// tests, run on another machine, carry the binary with them: scripts/stage-gpu.sh,
/// scripts/stage-host-tests.sh), else the one cargo built beside these tests.
pub fn bin() -> PathBuf {
    let bin = std::env::var_os("LLAISYS_NVIDIA_DOCTOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_llaisys-nvidia")));
    assert!(bin.is_file(), "no doctor binary at {}", bin.display());
    bin
}

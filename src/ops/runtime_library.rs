//! Which CUDA runtime the library uses, as the status API reports it
//! (`llaisysNvidiaCudartLibrary`): the version and a text a user can read.

use crate::safe::runtime::{self, CudartLibrary};

/// The runtime in use: its `cudaRuntimeGetVersion` (0 when none could be loaded) and the report,
/// one fact per line: the link mode, the file, why, and in the `loaded` mode the driver and every
/// place tried. Never fails; in the `loaded` mode the first call loads the runtime.
pub fn cudart_library() -> (i32, String) {
    let lib = runtime::cudart_library();
    (lib.version.unwrap_or(0), report(&lib))
}

/// The report's text.
pub fn report(lib: &CudartLibrary) -> String {
    let mut lines = vec![format!("link mode: {}", lib.link_mode)];
    let runtime = match (&lib.path, lib.version) {
        (Some(p), Some(v)) => format!("{p} (CUDA {})", runtime::version_string(v)),
        (None, Some(v)) => format!("CUDA {} (file unknown)", runtime::version_string(v)),
        (_, None) => "none".to_string(),
    };
    lines.push(format!("runtime: {runtime}"));
    lines.push(format!("why: {}", lib.why));
    if !lib.driver.is_empty() {
        lines.push(format!("driver: {}", lib.driver));
    }
    if !lib.tried.is_empty() {
        lines.push("tried:".to_string());
        lines.extend(
            lib.tried
                .iter()
                .map(|(place, outcome)| format!("  - {place}: {outcome}")),
        );
    }
    lines.join("\n")
}

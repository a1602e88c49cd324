//! The environment variables that change what CUDA does or where libraries come from: exactly
//! those set, with their values.

use std::ffi::OsString;

/// The variables the doctor knows by name, in the order it shows them. Any other variable whose
/// name starts with `CUDA_` is shown too, after these, sorted. Other `NVIDIA_*` variables are
/// not: container images set many (`NVIDIA_REQUIRE_CUDA`, `NVIDIA_PRODUCT_NAME`) that the CUDA
/// runtime never reads; the two the container toolkit acts on are in this list.
pub const KNOWN: [&str; 20] = [
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING",
    "CUDA_CACHE_MAXSIZE",
    "CUDA_CACHE_DISABLE",
    "CUDA_CACHE_PATH",
    "CUDA_FORCE_PTX_JIT",
    "CUDA_DISABLE_PTX_JIT",
    "CUDA_AUTO_BOOST",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
];

/// The CUDA-related variables of this process.
pub fn cuda_env() -> Vec<(String, String)> {
    select(std::env::vars_os())
}

/// Picks the CUDA-related variables out of `vars` (non-UTF-8 text shown lossily): the `KNOWN`
/// ones in that order, then other `CUDA_*` ones sorted by name.
pub fn select(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<(String, String)> {
    let all: Vec<(String, String)> = vars
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let mut shown: Vec<(String, String)> = KNOWN
        .iter()
        .filter_map(|name| all.iter().find(|(k, _)| k == name).cloned())
        .collect();
    let mut others: Vec<(String, String)> = all
        .into_iter()
        .filter(|(k, _)| k.starts_with("CUDA_") && !KNOWN.contains(&k.as_str()))
        .collect();
    others.sort();
    shown.extend(others);
    shown
}

/// The value of `name` among `env`, if set.
pub fn value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

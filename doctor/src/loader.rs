//! What the dynamic loader says: whether `libcuda.so.1` loads and from where, where the
//! libcudart in use lives, which shared libcudarts are mapped, and what the loader would find for
//! libcudart if this program started without `LD_LIBRARY_PATH`.
//!
//! The dynamic feature's "shared libcudart not found" is detected from the loader itself: a
//! dynamically linked program whose libcudart cannot be found never reaches `main`, so the doctor
//! asks the loader what it WOULD do, the way `ldd` does: it starts this very executable again with
//! `LD_TRACE_LOADED_OBJECTS=1` (the loader then prints each needed library and where it resolves,
//! and exits before `main`) and `LD_LIBRARY_PATH` removed. `not found` there means the build's
//! rpath (`$ORIGIN`, the lib folder it was built against) and the system's library path hold no
//! libcudart: this run only starts because of `LD_LIBRARY_PATH`, and every other program of this
//! build (tests, `libllaisys_nvidia.so` users) fails to start where it is not set.

use crate::backend::{self, build};
use crate::child::{self, Outcome};
use crate::report::{Libcuda, Libcudart, LoaderAnswer};
use std::ffi::CStr;
use std::os::raw::c_void;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set in the child the loader question starts, so that a loader that ignores
/// `LD_TRACE_LOADED_OBJECTS` cannot make the doctor start itself over and over.
pub const PROBE_ENV: &str = "LLAISYS_NVIDIA_DOCTOR_LOADER_PROBE";

/// The time the loader's answer may take, output included.
const LOADER_LIMIT: Duration = Duration::from_secs(10);

/// Loads `libcuda.so.1` as cudart does and says from where. The handle is kept: cudart loads
/// the same library, and unloading a driver library is never worth the risk. Loading runs the
/// library's initialisers: the doctor calls this in its probe process only (`probes`).
pub fn probe_libcuda() -> Libcuda {
    let name = c"libcuda.so.1";
    // SAFETY: a NUL-terminated name; dlopen has no other precondition.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Libcuda::NotLoadable {
            error: dlerror_text().unwrap_or_else(|| "dlopen failed without a message".into()),
        };
    }
    // SAFETY: a live handle and a NUL-terminated symbol name.
    let sym = unsafe { libc::dlsym(handle, c"cuInit".as_ptr()) };
    let path = if sym.is_null() { None } else { object_of(sym) };
    let path = path.unwrap_or_else(|| "libcuda.so.1 (path unknown: no cuInit symbol)".into());
    let resolved = std::fs::canonicalize(&path)
        .ok()
        .map(|p| p.display().to_string())
        .filter(|r| *r != path);
    Libcuda::Loaded { path, resolved }
}

/// The text of the last `dlerror()`, if any.
fn dlerror_text() -> Option<String> {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, NUL-terminated (above); copied out at once.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The file of the loaded object that holds `addr` (`dladdr`).
fn object_of(addr: *const c_void) -> Option<String> {
    // SAFETY: Dl_info is plain data; all-zero is valid to be overwritten.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr accepts any address and writes `info` on success.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    Some(name.into_owned())
}

/// Where the libcudart in use comes from.
pub fn libcudart() -> Libcudart {
    let built = Path::new(build::LIB_DIR).join(build::LIB_NAME);
    if build::LINK_MODE == "loaded" {
        // The library opens libcudart at its first CUDA call, after asking the driver: that
        // happens in the probe process (`probes`), which reports the choice.
        return Libcudart {
            link_mode: build::LINK_MODE.to_string(),
            loaded_from: None,
            found_via: None,
            built_path: built.display().to_string(),
            built_path_exists: built.exists(),
            without_ld_library_path: LoaderAnswer::NotChecked(
                "the loaded mode has no link-time libcudart: the library finds one at run time"
                    .into(),
            ),
            shared_mapped: Vec::new(),
            loaded: None,
        };
    }
    let dynamic = build::LINK_MODE == "dynamic";
    let shared_mapped = mapped_objects("libcudart");
    let code = backend::cudart_code_address();
    let loaded_from = object_of(code)
        .map(|p| absolute(&p))
        .or_else(|| dynamic.then(|| shared_mapped.first().cloned()).flatten());
    let found_via = if dynamic {
        loaded_from.as_deref().map(found_via)
    } else {
        None
    };
    let without_ld_library_path = if dynamic {
        loader_answer_without_ld_library_path()
    } else {
        LoaderAnswer::NotChecked("the static feature links libcudart in".into())
    };
    Libcudart {
        link_mode: build::LINK_MODE.to_string(),
        loaded_from,
        found_via,
        built_path: built.display().to_string(),
        built_path_exists: built.exists(),
        without_ld_library_path,
        shared_mapped,
        loaded: None,
    }
}

/// dladdr names the main program as it was started (`./llaisys-nvidia`): make such a path
/// absolute. An absolute path is kept as the loader found it (links not resolved), so that it
/// reads like the loader's own answer.
fn absolute(p: &str) -> String {
    if Path::new(p).is_absolute() {
        return p.to_string();
    }
    std::fs::canonicalize(p).map_or_else(|_| p.to_string(), |c| c.display().to_string())
}

/// Which search found the shared libcudart at `path`, in the loader's order for a RUNPATH
/// binary: `LD_LIBRARY_PATH`, then the rpath (`$ORIGIN`, then the build's lib folder), then the
/// system (`ld.so.cache`, `/lib`, `/usr/lib`).
fn found_via(path: &str) -> String {
    let dir = Path::new(path).parent().map(canonical);
    let Some(dir) = dir else {
        return "unknown".into();
    };
    let in_ld_path = std::env::var_os("LD_LIBRARY_PATH").is_some_and(|v| {
        std::env::split_paths(&v)
            .filter(|d| !d.as_os_str().is_empty())
            .any(|d| canonical(&d) == dir)
    });
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(canonical));
    if in_ld_path {
        "LD_LIBRARY_PATH".into()
    } else if exe_dir.as_ref() == Some(&dir) {
        "the rpath's $ORIGIN (next to the program)".into()
    } else if canonical(Path::new(build::LIB_DIR)) == dir {
        "the rpath: the lib folder the build linked".into()
    } else {
        "the system library path: ld.so.cache or a default folder".into()
    }
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The distinct files mapped into this process whose name contains `needle`
/// (`/proc/self/maps`), in first-mapped order.
pub fn mapped_objects(needle: &str) -> Vec<String> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut found: Vec<String> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path: the path is the sixth field and may hold spaces.
        let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim) else {
            continue;
        };
        let file = Path::new(path).file_name().and_then(|f| f.to_str());
        if path.starts_with('/')
            && file.is_some_and(|f| f.contains(needle))
            && !found.iter().any(|p| p == path)
        {
            found.push(path.to_string());
        }
    }
    found
}

/// Asks the loader where it would find libcudart for this executable without
/// `LD_LIBRARY_PATH` (see the module documentation).
pub fn loader_answer_without_ld_library_path() -> LoaderAnswer {
    if std::env::var_os(PROBE_ENV).is_some() {
        return LoaderAnswer::NotChecked("already inside the loader probe".into());
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return LoaderAnswer::NotChecked(format!("cannot name this executable: {e}")),
    };
    let child = Command::new(&exe)
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .env(PROBE_ENV, "1")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return LoaderAnswer::NotChecked(format!("cannot start {}: {e}", exe.display())),
    };
    match child::output_within(child, LOADER_LIMIT) {
        Outcome::Ended { status, stdout } if status.signal().is_none() => {
            parse_trace(&String::from_utf8_lossy(&stdout), "libcudart")
        }
        Outcome::Ended { status, .. } => LoaderAnswer::NotChecked(format!(
            "the loader, asked about this program, {}",
            child::ended_words(status)
        )),
        Outcome::TimedOut { .. } => LoaderAnswer::NotChecked(format!(
            "the loader did not answer within {} s",
            LOADER_LIMIT.as_secs()
        )),
    }
}

/// Reads the loader's trace (`\tlibcudart.so.13 => /x/libcudart.so.13 (0x...)` or
/// `\tlibcudart.so.13 => not found`) for the first library whose name starts with `prefix`.
pub fn parse_trace(trace: &str, prefix: &str) -> LoaderAnswer {
    for line in trace.lines() {
        let line = line.trim();
        if !line.starts_with(prefix) {
            continue;
        }
        let Some((_, target)) = line.split_once("=>") else {
            continue;
        };
        let target = target.trim();
        if target.starts_with("not found") {
            return LoaderAnswer::NotFound;
        }
        let path = target.rsplit_once(" (").map_or(target, |(p, _)| p).trim();
        return LoaderAnswer::Found(path.to_string());
    }
    LoaderAnswer::NotChecked(format!(
        "the loader's trace names no {prefix} (is this executable linked dynamically?)"
    ))
}

//! Finds and loads `libnvidia-ml.so.1` on first use, once per process, resolves the functions
//! this module calls (`dlsym`) and starts NVML (`nvmlInit_v2`). The library is never unloaded
//! and NVML is never shut down: other users in the process may share its state.
//!
//! The search is [`crate::libsearch`]'s: [`LIBRARY_VAR`] alone when set (a file, or a folder
//! holding `libnvidia-ml.so.1`), else the dynamic loader's search for `libnvidia-ml.so.1`. NVML
//! ships with the driver, so no build folder or Python wheel is looked at.

use super::sys;
use crate::libsearch::{self, Handle, Search};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_uint, c_void};
use std::sync::OnceLock;

/// The variable naming NVML's library (or its folder); when set, the only place tried.
pub const LIBRARY_VAR: &str = "LLAISYS_NVIDIA_NVML_LIBRARY";
/// The file name the driver installs.
pub const SONAME: &str = "libnvidia-ml.so.1";
const FIX: &str = "fix: NVML comes with the NVIDIA driver: install the driver's user-space \
                   libraries (libnvidia-ml.so.1; in a container, run it with the NVIDIA \
                   Container Toolkit and NVIDIA_DRIVER_CAPABILITIES including `utility`), or set \
                   LLAISYS_NVIDIA_NVML_LIBRARY=/path/to/libnvidia-ml.so.1";

/// The NVML functions this module calls; the optional ones are `None` where the library lacks
/// them.
pub struct Functions {
    /// `nvmlInit_v2`.
    pub init_v2: sys::InitV2,
    /// `nvmlErrorString`.
    pub error_string: Option<sys::ErrorString>,
    /// `nvmlSystemGetDriverVersion`.
    pub driver_version: Option<sys::SystemGetDriverVersion>,
    /// `nvmlDeviceGetHandleByPciBusId_v2`.
    pub handle_by_bus_id: sys::DeviceGetHandleByPciBusIdV2,
    /// `nvmlDeviceGetMemoryInfo`.
    pub memory_info: sys::DeviceGetMemoryInfo,
    /// `nvmlDeviceGetComputeRunningProcesses_v3`.
    pub processes_v3: Option<sys::DeviceGetComputeRunningProcessesV2>,
    /// `nvmlDeviceGetComputeRunningProcesses_v2`.
    pub processes_v2: Option<sys::DeviceGetComputeRunningProcessesV2>,
    /// `nvmlDeviceGetComputeRunningProcesses` (the v1 layout).
    pub processes_v1: Option<sys::DeviceGetComputeRunningProcessesV1>,
}

/// `dlsym(handle, name)` as an `Option` of the function type `$ty`.
macro_rules! symbol {
    ($handle:expr, $name:literal, $ty:ty) => {{
        let name: &CStr = $name;
        // SAFETY: `$handle` is a live dlopen handle (the caller's contract) and the name is
        // NUL-terminated.
        let p: *mut c_void = unsafe { libc::dlsym($handle, name.as_ptr()) };
        // SAFETY: a function of this name in NVML has the type nvml.h declares, which `$ty`
        // spells (sys.rs); a NULL address becomes None.
        unsafe { std::mem::transmute::<*mut c_void, Option<$ty>>(p) }
    }};
}

impl Functions {
    /// Resolves the functions of `handle`; `Err` names the first required one it lacks.
    ///
    /// # Safety
    /// `handle` is a live `dlopen` handle.
    unsafe fn resolve(handle: *mut c_void) -> Result<Functions, &'static str> {
        let init_v2 = symbol!(handle, c"nvmlInit_v2", sys::InitV2).ok_or("nvmlInit_v2")?;
        let handle_by_bus_id = symbol!(
            handle,
            c"nvmlDeviceGetHandleByPciBusId_v2",
            sys::DeviceGetHandleByPciBusIdV2
        )
        .ok_or("nvmlDeviceGetHandleByPciBusId_v2")?;
        let memory_info = symbol!(handle, c"nvmlDeviceGetMemoryInfo", sys::DeviceGetMemoryInfo)
            .ok_or("nvmlDeviceGetMemoryInfo")?;
        Ok(Functions {
            init_v2,
            error_string: symbol!(handle, c"nvmlErrorString", sys::ErrorString),
            driver_version: symbol!(
                handle,
                c"nvmlSystemGetDriverVersion",
                sys::SystemGetDriverVersion
            ),
            handle_by_bus_id,
            memory_info,
            processes_v3: symbol!(
                handle,
                c"nvmlDeviceGetComputeRunningProcesses_v3",
                sys::DeviceGetComputeRunningProcessesV2
            ),
            processes_v2: symbol!(
                handle,
                c"nvmlDeviceGetComputeRunningProcesses_v2",
                sys::DeviceGetComputeRunningProcessesV2
            ),
            processes_v1: symbol!(
                handle,
                c"nvmlDeviceGetComputeRunningProcesses",
                sys::DeviceGetComputeRunningProcessesV1
            ),
        })
    }
}

/// NVML, loaded and started.
pub struct Library {
    /// The file it was loaded from (as the loader reports it).
    pub path: String,
    /// Which search step found it, in words (`the file LLAISYS_NVIDIA_NVML_LIBRARY names`).
    pub found_via: String,
    /// `nvmlSystemGetDriverVersion` ("580.82.07"), when the library has it and answers.
    pub driver_version: Option<String>,
    /// The functions.
    pub fns: Functions,
}

impl Library {
    /// `nvmlErrorString(code)` ("" when the library lacks it or returns NULL).
    pub fn error_string(&self, code: sys::Return) -> String {
        match self.fns.error_string {
            // SAFETY: takes any value; returns a static string or NULL.
            Some(f) => unsafe { libsearch::c_text(f(code)) },
            None => String::new(),
        }
    }

    /// A failed call in words: "`what` failed: Not Found (NVML error 6, NVML_ERROR_NOT_FOUND)".
    pub fn failure(&self, what: &str, code: sys::Return) -> String {
        let text = self.error_string(code);
        let text = if text.is_empty() { "no message" } else { &text };
        format!(
            "{what} failed: {text} (NVML error {code}, {})",
            sys::return_name(code)
        )
    }
}

static LIBRARY: OnceLock<Result<Library, String>> = OnceLock::new();

/// NVML, loaded and started by the first call in the process, or why it is unavailable.
pub fn get() -> Result<&'static Library, String> {
    LIBRARY.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Library, String> {
    let search = Search::from_env(
        LIBRARY_VAR,
        vec![libsearch::Library {
            file_name: SONAME.into(),
            build_dir: None,
            wheel_dirs: Vec::new(),
            beside: None,
        }],
    );
    let (found, tried) = libsearch::search(&search, &mut |file, _| open(file));
    let Some(found) = found else {
        let places = libsearch::places_text(&tried);
        return Err(format!(
            "{SONAME} (NVML, the NVIDIA driver's management library) could not be loaded; \
             looked at: {places}; {FIX}"
        ));
    };
    let lib = Library {
        found_via: found.via,
        ..found.value
    };
    start(lib)
}

/// dlopen + the function table; `Err` says why the file does not serve. A file without the
/// required functions is closed again (nothing of it has run but its initialisers).
fn open(file: &str) -> Result<Library, String> {
    let handle = Handle::open(file)?;
    // SAFETY: `handle` is the live handle just opened; it stays open while `fns` is used.
    match unsafe { Functions::resolve(handle.as_raw()) } {
        Ok(fns) => {
            let path = libsearch::object_of(fns.init_v2 as *const c_void)
                .unwrap_or_else(|| file.to_string());
            Ok(Library {
                path,
                found_via: String::new(),
                driver_version: None,
                fns,
            })
        }
        Err(missing) => {
            // SAFETY: nothing of the file is in use: no function of it was called, no pointer
            // into it is kept, and `handle` is not used again.
            unsafe { handle.close() };
            Err(format!("{file} loads but has no {missing}: it is not NVML"))
        }
    }
}

/// `nvmlInit_v2`, then the driver's version. `Err` names the file, the call and NVML's error.
fn start(mut lib: Library) -> Result<Library, String> {
    // SAFETY: nvmlInit_v2 takes no arguments; NVML allows it from any thread, any number of
    // times (it counts references).
    let rc = unsafe { (lib.fns.init_v2)() };
    if rc != sys::SUCCESS {
        return Err(format!(
            "{} (found via {}): {}; {}",
            lib.path,
            lib.found_via,
            lib.failure("nvmlInit_v2", rc),
            init_hint(rc)
        ));
    }
    lib.driver_version = driver_version(&lib);
    Ok(lib)
}

/// What to do about a failed `nvmlInit_v2`.
fn init_hint(code: sys::Return) -> &'static str {
    match code {
        9 => "the NVIDIA kernel driver is not loaded: check `nvidia-smi` and `lsmod | grep nvidia`",
        18 => {
            "libnvidia-ml.so.1 and the kernel driver are of different versions: reboot, or \
               reload the kernel driver, after a driver update"
        }
        4 => "this user may not open the NVIDIA devices: check the permissions of /dev/nvidia*",
        _ => "check `nvidia-smi`, which reports the same NVML error",
    }
}

/// `nvmlSystemGetDriverVersion`, when the library has it and it answers.
fn driver_version(lib: &Library) -> Option<String> {
    let f = lib.fns.driver_version?;
    let mut buf = [0 as c_char; sys::DRIVER_VERSION_BUFFER_SIZE];
    // SAFETY: the buffer holds `buf.len()` bytes and NVML writes at most `length` of them, NUL
    // included.
    let rc = unsafe { f(buf.as_mut_ptr(), buf.len() as c_uint) };
    if rc != sys::SUCCESS {
        return None;
    }
    // Bounded by the buffer even if NVML left no NUL.
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        // `c_char` is i8 on x86-64 and u8 on aarch64: its one byte either way.
        .map(|&c| c.to_ne_bytes()[0])
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The bus id as a C string; `Err` when it holds a NUL byte.
pub fn bus_id(pci_bus_id: &str) -> Result<CString, String> {
    CString::new(pci_bus_id).map_err(|_| format!("the PCI bus id {pci_bus_id:?} holds a NUL byte"))
}

//! Finds and loads `libnccl.so.2` on first use, once per process, and resolves each function we
//! call one by one (`dlsym`): a missing one is `None`, reported as a status naming it when it is
//! called, so an older NCCL still serves what it has. The library is never unloaded (NCCL keeps
//! threads).
//!
//! Search order (the first that loads wins):
//! 1. `LLAISYS_NVIDIA_NCCL_LIBRARY`: a file, or a folder holding `libnccl.so.2`. When it is set,
//!    nothing else is searched (mixing roots silently is how wrong libraries get loaded).
//! 2. The dynamic loader's own search for `libnccl.so.2`: `LD_LIBRARY_PATH`, this library's
//!    RUNPATH, `ld.so.cache`, the default folders.
//! 3. The PyPI wheels of the active Python (`LLAISYS_NVIDIA_PYTHON`, else `python3` on `PATH`):
//!    `<site-packages>/nvidia/nccl/lib/libnccl.so.2` (wheels `nvidia-nccl-cu13`, `-cu12`). The
//!    Python is asked for its site folders with a 10 s limit, only when step 2 found nothing.
//!
//! The failure message lists every place and why it was rejected, and how to fix it.

use super::error::{Error, Result};
use super::sys;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The variable naming the library (or its folder).
pub const LIBRARY_VAR: &str = "LLAISYS_NVIDIA_NCCL_LIBRARY";
/// The file name NCCL's packages ship (no unversioned `libnccl.so` in the wheels).
pub const SONAME: &str = "libnccl.so.2";
const FIX: &str = "fix: `python3 -m pip install nvidia-nccl-cu13` (for the Python on PATH, or \
                   LLAISYS_NVIDIA_PYTHON), or install the system NCCL (libnccl2), or set \
                   LLAISYS_NVIDIA_NCCL_LIBRARY=/path/to/libnccl.so.2";

macro_rules! functions {
    ($($field:ident: $pfn:ident = $name:literal,)*) => {
        /// The NCCL functions, each `None` when the loaded library lacks it.
        #[derive(Default)]
        pub struct Functions {
            $(#[doc = concat!("`", $name, "`")] pub $field: sys::$pfn,)*
        }

        impl Functions {
            /// Resolves every function of `handle` one by one.
            ///
            /// # Safety
            /// `handle` is a live `dlopen` handle.
            unsafe fn resolve(handle: *mut c_void) -> Functions {
                Functions {
                    $($field: {
                        // SAFETY: caller contract; a NUL-terminated name.
                        let p = unsafe { libc::dlsym(handle, concat!($name, "\0").as_ptr().cast()) };
                        // SAFETY: a function of this name in NCCL has the header's type (the
                        // PFN_ type is `typeof` of its declaration); NULL becomes None.
                        unsafe { std::mem::transmute::<*mut c_void, sys::$pfn>(p) }
                    },)*
                }
            }
        }
    };
}

functions! {
    get_version: PFN_ncclGetVersion = "ncclGetVersion",
    get_unique_id: PFN_ncclGetUniqueId = "ncclGetUniqueId",
    get_error_string: PFN_ncclGetErrorString = "ncclGetErrorString",
    get_last_error: PFN_ncclGetLastError = "ncclGetLastError",
    comm_init_rank_config: PFN_ncclCommInitRankConfig = "ncclCommInitRankConfig",
    comm_finalize: PFN_ncclCommFinalize = "ncclCommFinalize",
    comm_destroy: PFN_ncclCommDestroy = "ncclCommDestroy",
    comm_abort: PFN_ncclCommAbort = "ncclCommAbort",
    comm_get_async_error: PFN_ncclCommGetAsyncError = "ncclCommGetAsyncError",
    comm_count: PFN_ncclCommCount = "ncclCommCount",
    comm_cu_device: PFN_ncclCommCuDevice = "ncclCommCuDevice",
    comm_user_rank: PFN_ncclCommUserRank = "ncclCommUserRank",
    all_reduce: PFN_ncclAllReduce = "ncclAllReduce",
    all_gather: PFN_ncclAllGather = "ncclAllGather",
    reduce_scatter: PFN_ncclReduceScatter = "ncclReduceScatter",
    broadcast: PFN_ncclBroadcast = "ncclBroadcast",
    reduce: PFN_ncclReduce = "ncclReduce",
    send: PFN_ncclSend = "ncclSend",
    recv: PFN_ncclRecv = "ncclRecv",
    group_start: PFN_ncclGroupStart = "ncclGroupStart",
    group_end: PFN_ncclGroupEnd = "ncclGroupEnd",
}

/// The loaded NCCL.
pub struct Library {
    /// The file it was loaded from (as the loader reports it).
    pub path: String,
    /// Which search step found it.
    pub found_via: &'static str,
    /// `ncclGetVersion` (23203 = 2.32.3).
    pub version: c_int,
    /// The functions.
    pub fns: Functions,
}

/// `NCCL_VERSION(X,Y,Z)` as the header defines it, for the versions we compare with.
pub const fn version_code(major: c_int, minor: c_int, patch: c_int) -> c_int {
    if major <= 2 && minor <= 8 {
        major * 1000 + minor * 100 + patch
    } else {
        major * 10000 + minor * 100 + patch
    }
}

/// "2.32.3" for 23203.
pub fn version_text(code: c_int) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, code / 100 % 10, code % 100)
    }
}

impl Library {
    /// The error for a function this NCCL lacks.
    pub fn missing(&self, function: &str, since: &str) -> Error {
        Error::Unavailable {
            detail: format!(
                "{} (NCCL {}, found via {}) has no {function} (NCCL {since} and later have it); \
                 use a newer NCCL: {FIX}",
                self.path,
                version_text(self.version),
                self.found_via
            ),
        }
    }

    /// `ncclGetErrorString(code)`, or the header's name when the library lacks the function.
    pub fn error_string(&self, code: super::NcclResult) -> String {
        match self.fns.get_error_string {
            // SAFETY: takes any value; returns a static string or NULL.
            Some(f) => unsafe { text(f(code.raw())) },
            None => code.name().to_string(),
        }
    }

    /// `ncclGetLastError(comm)` ("" when NCCL has none or lacks the function).
    pub fn last_error(&self, comm: sys::ncclComm_t) -> String {
        match self.fns.get_last_error {
            // SAFETY: NCCL documents the comm argument as unused; NULL is accepted.
            Some(f) => unsafe { text(f(comm)) },
            None => String::new(),
        }
    }
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: caller contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

static LIBRARY: OnceLock<std::result::Result<Library, String>> = OnceLock::new();

/// The loaded NCCL (loaded by the first call in the process), or why it is unavailable.
pub fn get() -> Result<&'static Library> {
    match LIBRARY.get_or_init(load) {
        Ok(lib) => Ok(lib),
        Err(detail) => Err(Error::Unavailable {
            detail: detail.clone(),
        }),
    }
}

fn load() -> std::result::Result<Library, String> {
    let mut looked = Vec::new();
    if let Some(v) = std::env::var_os(LIBRARY_VAR).filter(|v| !v.is_empty()) {
        let given = PathBuf::from(&v);
        let file = if given.is_dir() {
            given.join(SONAME)
        } else {
            given.clone()
        };
        return open(&file.display().to_string(), "LLAISYS_NVIDIA_NCCL_LIBRARY").map_err(|why| {
            format!(
                "{LIBRARY_VAR}={} : {why} (when {LIBRARY_VAR} is set nothing else is searched); {FIX}",
                given.display()
            )
        });
    }
    looked.push(format!("{LIBRARY_VAR}: not set"));
    match open(SONAME, "the dynamic loader's path") {
        Ok(lib) => return Ok(lib),
        Err(why) => looked.push(format!(
            "the dynamic loader's path (LD_LIBRARY_PATH, RUNPATH, ld.so.cache, /lib, /usr/lib): {why}"
        )),
    }
    match python_site_packages() {
        Ok((python, sites)) => {
            let mut any = false;
            for site in &sites {
                let file = site.join("nvidia/nccl/lib").join(SONAME);
                if !file.exists() {
                    continue;
                }
                any = true;
                match open(
                    &file.display().to_string(),
                    "the PyPI wheel of the active Python",
                ) {
                    Ok(lib) => return Ok(lib),
                    Err(why) => looked.push(format!("{}: {why}", file.display())),
                }
            }
            if !any {
                looked.push(format!(
                    "the PyPI wheels of {python}: no nvidia/nccl/lib/{SONAME} in {}",
                    if sites.is_empty() {
                        "(no site-packages reported)".to_string()
                    } else {
                        sites
                            .iter()
                            .map(|s| s.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ));
            }
        }
        Err(why) => looked.push(format!("the PyPI wheels of the active Python: {why}")),
    }
    Err(format!(
        "{SONAME} was not found; looked at: {}; {FIX}",
        looked.join("; ")
    ))
}

/// dlopen + the function table; `Err` says why the file does not serve.
fn open(file: &str, found_via: &'static str) -> std::result::Result<Library, String> {
    let name = CString::new(file).map_err(|_| "the path holds a NUL byte".to_string())?;
    // SAFETY: a NUL-terminated name. RTLD_LOCAL: NCCL's symbols do not interpose on anyone's.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(dlerror().unwrap_or_else(|| "dlopen failed without a message".into()));
    }
    // SAFETY: a live handle (never closed).
    let fns = unsafe { Functions::resolve(handle) };
    let Some(get_version) = fns.get_version else {
        return Err(format!(
            "{file} loads but has no ncclGetVersion: it is not NCCL"
        ));
    };
    let mut version: c_int = 0;
    // SAFETY: writes one int.
    let rc = unsafe { get_version(&mut version) };
    if rc.0 != 0 {
        return Err(format!("{file}: ncclGetVersion returned {}", rc.0));
    }
    let path = fns
        .get_version
        .and_then(|f| object_of(f as *const c_void))
        .unwrap_or_else(|| file.to_string());
    Ok(Library {
        path,
        found_via,
        version,
        fns,
    })
}

fn dlerror() -> Option<String> {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        return None;
    }
    // SAFETY: as above; copied at once.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The file of the loaded object holding `addr`.
fn object_of(addr: *const c_void) -> Option<String> {
    // SAFETY: plain data, overwritten by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string owned by the loader.
    Some(unsafe { text(info.dli_fname) })
}

/// The site folders of the active Python: (which Python, folders).
fn python_site_packages() -> std::result::Result<(String, Vec<PathBuf>), String> {
    let python = std::env::var("LLAISYS_NVIDIA_PYTHON").unwrap_or_else(|_| "python3".into());
    let script =
        "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)";
    let child = Command::new(&python)
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{python} could not be run ({e})"))?;
    let out = wait_output(child, Duration::from_secs(10))
        .ok_or_else(|| format!("{python} did not answer within 10 s"))?;
    let sites = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .filter(|p: &PathBuf| Path::new(p).is_dir())
        .collect();
    Ok((python, sites))
}

fn wait_output(mut child: std::process::Child, limit: Duration) -> Option<String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) => return None,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut text = String::new();
    use std::io::Read;
    child.stdout.take()?.read_to_string(&mut text).ok()?;
    Some(text)
}

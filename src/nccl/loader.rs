//! Finds and loads `libnccl.so.2` on first use, once per process, and resolves each function we
//! call one by one (`dlsym`): a missing one is `None`, reported as a status naming it when it is
//! called, so an older NCCL still serves what it has. The library is never unloaded (NCCL keeps
//! threads).
//!
//! The search is [`crate::libsearch`]'s (`LLAISYS_NVIDIA_NCCL_LIBRARY`, alone when set; the
//! dynamic loader; the PyPI wheels' `nvidia/nccl/lib`). A file that loads is accepted only when
//! `ncclGetVersion` reports a version of the NCCL major the bindings were built for (2); anything
//! else (-1, `INT_MAX`, NCCL 3) is refused naming the file and the version, and closed again.

use super::error::{Error, Result};
use super::sys;
use crate::libsearch::{self, Handle, Search};
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

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
                        // SAFETY: `handle` is a live dlopen handle (this function's contract);
                        // the name is NUL-terminated.
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

/// The loader's functions: those of the communicator's life, then every collective of the list.
macro_rules! with_collectives {
    (table: [$($t:tt)*] other: [$($o:tt)*]) => {
        with_collectives! { @each $($t)* $($o)* }
    };
    (@each $($kind:ident($c:ident, $field:tt, $nfield:ident = $nname:literal $pfn:ident $($rest:tt)*) $params:tt,)*) => {
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
            group_start: PFN_ncclGroupStart = "ncclGroupStart",
            group_end: PFN_ncclGroupEnd = "ncclGroupEnd",
            $($nfield: $pfn = $nname,)*
        }
    };
}

super::list::list!(with_collectives);

/// The loaded NCCL.
pub struct Library {
    /// The file it was loaded from (as the loader reports it).
    pub path: String,
    /// Which search step found it, in words (`the PyPI wheels of python3`).
    pub found_via: String,
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

/// (major, minor, patch) of a version code, as `NCCL_VERSION` encodes them (before 2.9:
/// `major * 1000 + minor * 100 + patch`; from 2.9: `major * 10000 + minor * 100 + patch`).
fn decode(code: c_int) -> (c_int, c_int, c_int) {
    if code >= 10000 {
        (code / 10000, code / 100 % 100, code % 100)
    } else {
        (code / 1000, code / 100 % 10, code % 100)
    }
}

/// True for the version codes of the NCCL major release the bindings were built for
/// (`NCCL_MAJOR` of nccl.h): codes that `NCCL_VERSION` makes from that major, a minor and a
/// patch below 100. Anything else (-1, `INT_MAX`, another major) is not an NCCL this library
/// can call.
pub fn accepted_version(code: c_int) -> bool {
    let (major, minor, patch) = decode(code);
    code > 0
        && major == sys::NCCL_MAJOR as c_int
        && (0..100).contains(&minor)
        && version_code(major, minor, patch) == code
}

/// The accepted codes, in words ("2000-2899 and 20900-29999" for NCCL 2).
fn accepted_codes() -> String {
    let major = sys::NCCL_MAJOR as c_int;
    let old = (version_code(major, 0, 0), version_code(major, 8, 99));
    let new = (version_code(major, 9, 0), version_code(major, 99, 99));
    if old.0 < 10000 {
        format!("codes {}-{} and {}-{}", old.0, old.1, new.0, new.1)
    } else {
        format!("codes {}-{}", old.0, new.1)
    }
}

/// "2.32.3" for 23203.
pub fn version_text(code: c_int) -> String {
    let (major, minor, patch) = decode(code);
    format!("{major}.{minor}.{patch}")
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
            Some(f) => unsafe { libsearch::c_text(f(code.raw())) },
            None => code.name().to_string(),
        }
    }

    /// `ncclGetLastError(comm)` ("" when NCCL has none or lacks the function).
    pub fn last_error(&self, comm: sys::ncclComm_t) -> String {
        match self.fns.get_last_error {
            // SAFETY: NCCL documents the comm argument as unused; NULL is accepted.
            Some(f) => unsafe { libsearch::c_text(f(comm)) },
            None => String::new(),
        }
    }
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
    let search = Search::from_env(
        LIBRARY_VAR,
        vec![libsearch::Library {
            file_name: SONAME.into(),
            build_dir: None,
            wheel_dirs: vec!["nvidia/nccl/lib".into()],
            beside: None,
        }],
    );
    let (found, tried) = libsearch::search(&search, &mut |file, _| open(file));
    if let Some(found) = found {
        return Ok(Library {
            found_via: found.via,
            ..found.value
        });
    }
    let places = libsearch::places_text(&tried);
    Err(format!(
        "{SONAME} could not be loaded; looked at: {places}; {FIX}"
    ))
}

/// dlopen + the function table + the version check; `Err` says why the file does not serve.
/// `found_via` is left empty for the search to fill in.
fn open(file: &str) -> std::result::Result<Library, String> {
    let handle = Handle::open(file)?;
    // SAFETY: `handle` is the live handle just opened; it stays open while `fns` is used.
    let fns = unsafe { Functions::resolve(handle.as_raw()) };
    match version_of(file, &fns) {
        Ok(version) => {
            let path = fns
                .get_version
                .and_then(|f| libsearch::object_of(f as *const c_void))
                .unwrap_or_else(|| file.to_string());
            // The handle is never closed: NCCL keeps threads running.
            Ok(Library {
                path,
                found_via: String::new(),
                version,
                fns,
            })
        }
        Err(why) => {
            // SAFETY: nothing of the file is in use: `fns` is not returned, no pointer into the
            // file is kept, the only function called, ncclGetVersion, starts no thread and
            // registers no handler, and `handle` is not used again.
            unsafe { handle.close() };
            Err(why)
        }
    }
}

/// The file's `ncclGetVersion`, refused unless it is a version of the NCCL release the
/// bindings were built for.
fn version_of(file: &str, fns: &Functions) -> std::result::Result<c_int, String> {
    let Some(get_version) = fns.get_version else {
        return Err(format!(
            "{file} loads but has no ncclGetVersion: it is not NCCL"
        ));
    };
    let mut version: c_int = 0;
    // SAFETY: ncclGetVersion writes one int through its pointer, valid here.
    let rc = unsafe { get_version(&mut version) };
    if rc.0 != 0 {
        return Err(format!("{file}: ncclGetVersion returned {}", rc.0));
    }
    if !accepted_version(version) {
        return Err(format!(
            "{file}: ncclGetVersion reports {version}, which is not a version code of NCCL {major} \
             (accepted: {}, NCCL {major}.0.0 to {major}.99.99, the major release of the nccl.h \
             this library was built with, {}): it is not an NCCL this library can call",
            accepted_codes(),
            version_text(sys::NCCL_VERSION_CODE as c_int),
            major = sys::NCCL_MAJOR,
        ));
    }
    Ok(version)
}

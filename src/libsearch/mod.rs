//! Finding a shared library at run time and opening it, with a record of every place looked at
//! and why each was not used. One search for every library this crate loads itself (the CUDA
//! runtime of the `loaded` mode, NCCL); the order is [`search`]'s, as docs/building.md ("The
//! loaded mode") tells it. When the variable ([`Search::var`]) is set nothing else is searched:
//! mixing roots silently is how wrong libraries get loaded. The Python whose wheels are searched
//! is asked once, only when a search gets that far, within [`Search::python_limit`] for its whole
//! run, output included ([`python`]).
//!
//! What "opening" means is the caller's: a closure that loads the file and checks it, or says
//! why it does not serve. This module only finds and records; [`Handle`] is the `dlopen` the
//! callers share, [`object_of`] names the file a loaded address belongs to.

pub mod python;

use std::ffi::{CStr, CString};
use std::os::raw::c_void;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The variable naming the Python whose site-packages may hold the wheels.
pub const PYTHON_VAR: &str = "LLAISYS_NVIDIA_PYTHON";

/// One library to look for.
#[derive(Clone, Debug)]
pub struct Library {
    /// The file name its packages ship (`libcudart.so.13`; the wheels have no unversioned name).
    pub file_name: String,
    /// A folder recorded at build time that may hold it.
    pub build_dir: Option<PathBuf>,
    /// Folders under a site-packages folder that may hold it (`nvidia/cu13/lib`).
    pub wheel_dirs: Vec<String>,
    /// A file name looked for first, in the folder of the object holding this code (the
    /// library, or the program it is linked into): a copy of its own shipped beside it.
    pub beside: Option<String>,
}

/// What to look for and where.
#[derive(Clone, Debug)]
pub struct Search {
    /// The variable naming a file or a folder (`LLAISYS_NVIDIA_CUDART_LIBRARY`).
    pub var: &'static str,
    /// Its value (None when unset or empty).
    pub var_value: Option<PathBuf>,
    /// The Python to ask for its site-packages (`LLAISYS_NVIDIA_PYTHON`, else `python3`).
    pub python: String,
    /// How long the Python may take, from its start to its exit with all its output read
    /// ([`python::LIMIT`] in [`Search::from_env`]).
    pub python_limit: Duration,
    /// The libraries, in order of preference.
    pub libraries: Vec<Library>,
}

impl Search {
    /// A search for `libraries` with the variable `var` and the Python as the environment has
    /// them.
    pub fn from_env(var: &'static str, libraries: Vec<Library>) -> Search {
        Search {
            var,
            var_value: std::env::var_os(var)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            python: std::env::var(PYTHON_VAR)
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "python3".into()),
            python_limit: python::LIMIT,
            libraries,
        }
    }
}

/// One place looked at and what came of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tried {
    /// The place, in words (`libcudart.so.13 on the dynamic loader's path`).
    pub place: String,
    /// What happened (`loaded`, or why not).
    pub outcome: String,
}

impl Tried {
    /// A record.
    pub fn new(place: impl Into<String>, outcome: impl Into<String>) -> Tried {
        Tried {
            place: place.into(),
            outcome: outcome.into(),
        }
    }
}

/// Every place of `tried` with what came of it, for a message ("place: outcome; ...").
pub fn places_text(tried: &[Tried]) -> String {
    let places: Vec<String> = tried
        .iter()
        .map(|t| format!("{}: {}", t.place, t.outcome))
        .collect();
    places.join("; ")
}

/// What the search found.
#[derive(Debug)]
pub struct Found<T> {
    /// What the caller's `open` made of it.
    pub value: T,
    /// Which step found it, in words (`the dynamic loader's path`).
    pub via: String,
}

/// Which library of the list a file is expected to be: `None` for the file the variable names
/// (the caller finds out by opening it).
pub type Which = Option<usize>;

/// What `open` is given: a path (or a bare file name) and which library it should be.
type Open<'a, T> = dyn FnMut(&str, Which) -> Result<T, String> + 'a;

/// Where the dynamic loader looks, for `Found::via`.
const LOADER_PATH: &str = "the dynamic loader's path (LD_LIBRARY_PATH, RUNPATH, ld.so.cache, \
                           /lib, /usr/lib)";

/// Runs the search. `open(file, which)` gets a path, or a bare file name for the dynamic
/// loader's own search, and returns what it made of the library or why it does not serve.
/// Returns the first library that served (if any) and every place looked at, in order.
///
/// The order: the variable's file, or each library in its folder; else, for each library in
/// turn, its own file beside this code ([`Library::beside`]), the dynamic loader's search for its
/// file name, the folder recorded at build time, then `<site-packages>/<wheel folder>/<file>` of
/// the active Python (`LLAISYS_NVIDIA_PYTHON`, else `python3` on `PATH`).
pub fn search<T>(s: &Search, open: &mut Open<'_, T>) -> (Option<Found<T>>, Vec<Tried>) {
    let tried = Vec::new();
    let mut at = Attempts { tried, open };
    let found = match &s.var_value {
        Some(given) => at.the_variable(s, given),
        None => at.each_library(s),
    };
    (found, at.tried)
}

/// The places looked at so far, and the caller's `open`.
struct Attempts<'a, 'b, T> {
    tried: Vec<Tried>,
    open: &'a mut Open<'b, T>,
}

impl<T> Attempts<'_, '_, T> {
    /// The variable's file, or each library in its folder; nothing else.
    fn the_variable(&mut self, s: &Search, given: &Path) -> Option<Found<T>> {
        let found = if given.is_dir() {
            let via = format!("the folder {} names", s.var);
            s.libraries.iter().enumerate().find_map(|(i, lib)| {
                let (dir, name, var) = (given.display(), &lib.file_name, s.var);
                let place = format!("{dir}/{name} ({var} names the folder)");
                self.file(place, &given.join(name), Some(i), &via)
            })
        } else {
            let place = format!("{}={}", s.var, given.display());
            let via = format!("the file {} names", s.var);
            self.open(place, &given.display().to_string(), None, &via)
        };
        if let (None, Some(last)) = (&found, self.tried.last_mut()) {
            let note = format!(" (when {} is set nothing else is searched)", s.var);
            last.outcome.push_str(&note);
        }
        found
    }

    /// Each library in turn, at each place of [`search`]'s order.
    fn each_library(&mut self, s: &Search) -> Option<Found<T>> {
        self.tried.push(Tried::new(s.var, "not set"));
        let mut python = None;
        for (i, lib) in s.libraries.iter().enumerate() {
            let which = Some(i);
            if let Some(f) = lib.beside.as_ref().and_then(|n| self.beside_this(n, which)) {
                return Some(f);
            }
            let place = format!("{} on the dynamic loader's path", lib.file_name);
            if let Some(f) = self.open(place, &lib.file_name, which, LOADER_PATH) {
                return Some(f);
            }
            if let Some(dir) = &lib.build_dir {
                let file = dir.join(&lib.file_name);
                let place = format!("{} (the folder recorded at build time)", file.display());
                let via = "the folder recorded at build time";
                if let Some(f) = self.file(place, &file, which, via) {
                    return Some(f);
                }
            }
            if !lib.wheel_dirs.is_empty() {
                let sites =
                    python.get_or_insert_with(|| python::site_packages(&s.python, s.python_limit));
                if let Some(f) = self.in_wheels(lib, which, &s.python, sites) {
                    return Some(f);
                }
            }
        }
        None
    }

    /// `name` in the folder of the object holding this code.
    fn beside_this(&mut self, name: &str, which: Which) -> Option<Found<T>> {
        let via = "the folder of this library (the runtime built with it)";
        let Some(dir) = this_object().and_then(|f| f.parent().map(Path::to_path_buf)) else {
            let place = format!("{name} beside this library");
            self.tried
                .push(Tried::new(place, "the folder of this library is unknown"));
            return None;
        };
        let file = dir.join(name);
        let place = format!("{} (beside this library)", file.display());
        self.file(place, &file, which, via)
    }

    /// `lib` in the wheel folders of each site folder the Python `py` named.
    fn in_wheels(
        &mut self,
        lib: &Library,
        which: Which,
        py: &str,
        sites: &Result<Vec<PathBuf>, String>,
    ) -> Option<Found<T>> {
        let sites = match sites {
            Ok(found) => found,
            Err(why) => {
                let place = format!("the PyPI wheels holding {}", lib.file_name);
                self.tried.push(Tried::new(place, why.clone()));
                return None;
            }
        };
        let via = format!("the PyPI wheels of {py}");
        let name = &lib.file_name;
        let files: Vec<PathBuf> = sites
            .iter()
            .flat_map(|site| lib.wheel_dirs.iter().map(move |d| site.join(d).join(name)))
            .filter(|f| f.exists())
            .collect();
        if files.is_empty() {
            let subs: Vec<String> = lib
                .wheel_dirs
                .iter()
                .map(|d| format!("{d}/{name}"))
                .collect();
            let shown: Vec<String> = sites.iter().map(|s| s.display().to_string()).collect();
            let within = if shown.is_empty() {
                "(no site-packages reported)".to_string()
            } else {
                shown.join(", ")
            };
            let outcome = format!("no {} in {within}", subs.join(" or "));
            self.tried.push(Tried::new(via, outcome));
            return None;
        }
        files.iter().find_map(|file| {
            let place = format!("{} (a PyPI wheel of {py})", file.display());
            self.open(place, &file.display().to_string(), which, &via)
        })
    }

    /// `file` if it exists (else "no such file" is recorded).
    fn file(&mut self, place: String, file: &Path, which: Which, via: &str) -> Option<Found<T>> {
        if !file.exists() {
            self.tried.push(Tried::new(place, "no such file"));
            return None;
        }
        self.open(place, &file.display().to_string(), which, via)
    }

    /// Opens `file` as library `which`, recording `place` and what came of it.
    fn open(&mut self, place: String, file: &str, which: Which, via: &str) -> Option<Found<T>> {
        let (outcome, value) = match (self.open)(file, which) {
            Ok(value) => ("loaded".to_string(), Some(value)),
            Err(why) => (why, None),
        };
        self.tried.push(Tried::new(place, outcome));
        let via = via.to_string();
        value.map(|value| Found { value, via })
    }
}

/// The file of the object holding this code (the library, or the program it is linked into), as
/// `/proc/self/maps` names it: absolute, links resolved. Not `dladdr`'s name, which is `argv[0]`
/// for a program and stays relative for a library opened by a relative path. Read once.
pub fn this_object() -> Option<PathBuf> {
    static FILE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        mapping_file(&maps, this_object as *const c_void as usize)
    })
    .clone()
}

/// The file of the mapping of `/proc/self/maps` text `maps` that holds `addr`, if it is one.
fn mapping_file(maps: &str, addr: usize) -> Option<PathBuf> {
    maps.lines().find_map(|line| {
        // "start-end perms offset dev inode   path"; the path may hold spaces.
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        if addr < start || addr >= end {
            return None;
        }
        let path = fields.nth(4)?.trim_start();
        path.starts_with('/').then(|| PathBuf::from(path))
    })
}

/// A library opened with `dlopen`. Never closed by this type: a library may keep threads or
/// handlers that outlive any one user. Only [`Handle::close`] closes it, for a library opened to
/// be checked and rejected.
#[derive(Clone, Copy, Debug)]
pub struct Handle(*mut c_void);

// SAFETY: a dlopen handle is an opaque token the loader accepts from any thread.
unsafe impl Send for Handle {}
// SAFETY: as above; the handle is never written through.
unsafe impl Sync for Handle {}

impl Handle {
    /// `dlopen(file, RTLD_NOW | RTLD_LOCAL)`: its symbols do not interpose on anyone's. `Err`
    /// is the loader's message.
    pub fn open(file: &str) -> Result<Handle, String> {
        let name = CString::new(file).map_err(|_| "the path holds a NUL byte".to_string())?;
        // SAFETY: a NUL-terminated name; dlopen has no other precondition (it runs the
        // library's initialisers, which is what loading it means).
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(dlerror().unwrap_or_else(|| "dlopen failed without a message".into()));
        }
        Ok(Handle(h))
    }

    /// The `dlopen` handle, for code that resolves many symbols with `dlsym` itself.
    pub fn as_raw(self) -> *mut c_void {
        self.0
    }

    /// `dlsym`: the address of `name`, NULL when the library has none (the `loaded` mode's
    /// runtime resolves its functions with it).
    #[cfg(llaisys_loaded)]
    pub fn symbol(self, name: &CStr) -> *mut c_void {
        // SAFETY: a live handle (it is closed only through `close`, after which no copy of it
        // is used) and a NUL-terminated name.
        unsafe { libc::dlsym(self.0, name.as_ptr()) }
    }

    /// `dlclose`, for a library opened only to be checked and rejected.
    ///
    /// # Safety
    /// Nothing of the library is in use: no pointer into it is kept, none of its functions
    /// has been called that starts threads or registers handlers, and no copy of this handle
    /// is used again.
    pub unsafe fn close(self) {
        // SAFETY: `self.0` came from dlopen (`open` is the only way to make a Handle), and
        // nothing of the library is in use nor is the handle used again (this function's
        // contract), so unmapping it leaves nothing dangling.
        unsafe { libc::dlclose(self.0) };
    }
}

/// The text of the last `dlerror()`, if any.
pub fn dlerror() -> Option<String> {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call.
    let p = unsafe { libc::dlerror() };
    // SAFETY: as above; copied at once.
    (!p.is_null()).then(|| unsafe { c_text(p) })
}

/// A C string as text ("" for NULL), copied.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub unsafe fn c_text(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is not NULL (checked), so a NUL-terminated string (this function's contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A CUDA version number as text: "12.9" for 12090 (cudaRuntimeGetVersion's and
/// cuDriverGetVersion's encoding).
pub(crate) fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The file of the loaded object holding `addr` (`dladdr`).
pub fn object_of(addr: *const c_void) -> Option<String> {
    // SAFETY: plain data, overwritten by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(name.to_string_lossy().into_owned())
}

/// Writes an executable shell script running `body` at `path` (tests). `install(1)` copies it
/// into place so this process never holds it open for writing: a child forked meanwhile by
/// another test's thread would inherit that descriptor and running the script would fail with
/// ETXTBSY.
#[cfg(test)]
fn write_test_script(path: &std::path::Path, body: &str) {
    let side = path.with_extension("text");
    std::fs::write(&side, format!("#!/bin/sh\n{body}\n")).unwrap();
    let status = std::process::Command::new("install")
        .args(["-m", "755"])
        .arg(&side)
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "install {}: {status}", path.display());
    std::fs::remove_file(&side).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_object_is_the_file_the_kernel_maps_this_code_from() {
        // The unit tests link the crate into their program.
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(this_object(), Some(exe));
        let maps = "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 42    /opt/x y/prog\n\
                    7f0000000000-7f0000002000 r-xp 00001000 fd:01 43    /opt/lib/libz.so\n\
                    7f0000002000-7f0000003000 rw-p 00000000 00:00 0 \n\
                    7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0    [vdso]\n";
        let file = |addr| mapping_file(maps, addr).map(|p| p.display().to_string());
        assert_eq!(file(0x55d0c0000800).as_deref(), Some("/opt/x y/prog"));
        assert_eq!(file(0x7f0000001fff).as_deref(), Some("/opt/lib/libz.so"));
        assert_eq!(file(0x7f0000002000), None);
        assert_eq!(file(0x7ffd00000010), None);
        assert_eq!(file(0x10), None);
    }

    /// A fresh folder, removed at the end.
    struct Temp(PathBuf);
    impl Temp {
        fn new(name: &str) -> Temp {
            let p = std::env::temp_dir()
                .join(format!("llaisys-libsearch-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Temp(p)
        }
    }
    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "stand-in").unwrap();
    }

    /// A "python" that prints `body`'s output (a shell script).
    fn python(dir: &Path, body: &str) -> String {
        let p = dir.join("python");
        super::write_test_script(&p, body);
        p.display().to_string()
    }

    fn two_libraries(build_dir: &Path) -> Vec<Library> {
        let lib = |m: u32, wheel: &str| Library {
            file_name: format!("libx.so.{m}"),
            build_dir: Some(build_dir.join(format!("b{m}"))),
            wheel_dirs: vec![wheel.into()],
            beside: None,
        };
        vec![
            lib(13, "nvidia/cu13/lib"),
            lib(12, "nvidia/cuda_runtime/lib"),
        ]
    }

    fn search_for(var: Option<PathBuf>, python: String, libraries: Vec<Library>) -> Search {
        Search {
            var: "LIBX",
            var_value: var,
            python,
            python_limit: Duration::from_secs(5),
            libraries,
        }
    }

    /// Runs the search with an `open` that accepts the files in `good` and records every call.
    fn run(s: &Search, good: &[&str]) -> (Option<String>, Vec<Tried>, Vec<(String, Which)>) {
        let mut calls = Vec::new();
        let (found, tried) = search(s, &mut |file, which| {
            calls.push((file.to_string(), which));
            if good.iter().any(|g| file.ends_with(g)) {
                Ok(file.to_string())
            } else {
                Err(format!("{file}: not it"))
            }
        });
        (
            found.map(|f| format!("{} via {}", f.value, f.via)),
            tried,
            calls,
        )
    }

    #[test]
    fn the_variable_naming_a_file_is_the_only_place() {
        let t = Temp::new("var-file");
        let file = t.0.join("custom.so");
        touch(&file);
        let s = search_for(Some(file.clone()), "python3".into(), two_libraries(&t.0));
        let (found, tried, calls) = run(&s, &["custom.so"]);
        assert_eq!(
            found,
            Some(format!("{} via the file LIBX names", file.display()))
        );
        assert_eq!(calls, vec![(file.display().to_string(), None)]);
        assert_eq!(
            tried,
            vec![Tried::new(format!("LIBX={}", file.display()), "loaded")]
        );

        let (found, tried, calls) = run(&s, &[]);
        assert_eq!(found, None);
        assert_eq!(calls.len(), 1, "nothing else is searched");
        assert_eq!(
            tried[0].outcome,
            format!(
                "{}: not it (when LIBX is set nothing else is searched)",
                file.display()
            )
        );
    }

    #[test]
    fn the_variable_naming_a_folder_is_searched_for_each_library_in_order() {
        let t = Temp::new("var-folder");
        touch(&t.0.join("libx.so.12"));
        let s = search_for(Some(t.0.clone()), "python3".into(), two_libraries(&t.0));
        let (found, tried, calls) = run(&s, &["libx.so.12"]);
        let twelve = t.0.join("libx.so.12").display().to_string();
        assert_eq!(found, Some(format!("{twelve} via the folder LIBX names")));
        assert_eq!(calls, vec![(twelve, Some(1))]);
        assert_eq!(tried[0].outcome, "no such file");
        assert!(tried[0].place.contains("libx.so.13"), "{tried:?}");
        assert_eq!(tried[1].outcome, "loaded");

        let empty = Temp::new("var-empty");
        let s = search_for(Some(empty.0.clone()), "python3".into(), two_libraries(&t.0));
        let (found, tried, calls) = run(&s, &[]);
        assert_eq!((found, calls.len()), (None, 0));
        assert_eq!(tried.len(), 2);
        assert_eq!(
            tried[1].outcome,
            "no such file (when LIBX is set nothing else is searched)"
        );
    }

    #[test]
    fn unset_it_tries_the_loader_the_build_folder_then_the_wheels_per_library() {
        let t = Temp::new("order");
        let site = t.0.join("site");
        touch(&site.join("nvidia/cuda_runtime/lib/libx.so.12"));
        touch(&t.0.join("b13/libx.so.13"));
        let py = python(&t.0, &format!("echo {}", site.display()));
        let s = search_for(None, py.clone(), two_libraries(&t.0));
        let wheel = site.join("nvidia/cuda_runtime/lib/libx.so.12");
        let (found, tried, calls) = run(&s, &[&wheel.display().to_string()]);
        assert_eq!(
            found,
            Some(format!("{} via the PyPI wheels of {py}", wheel.display()))
        );
        let b13 = t.0.join("b13/libx.so.13").display().to_string();
        assert_eq!(
            calls,
            vec![
                ("libx.so.13".to_string(), Some(0)),
                (b13.clone(), Some(0)),
                ("libx.so.12".to_string(), Some(1)),
                (wheel.display().to_string(), Some(1)),
            ]
        );
        let places: Vec<&str> = tried.iter().map(|t| t.place.as_str()).collect();
        assert_eq!(places[0], "LIBX");
        assert_eq!(tried[0].outcome, "not set");
        assert_eq!(places[1], "libx.so.13 on the dynamic loader's path");
        assert_eq!(
            places[2],
            format!("{b13} (the folder recorded at build time)")
        );
        assert_eq!(places[3], format!("the PyPI wheels of {py}"));
        assert!(
            tried[3]
                .outcome
                .starts_with("no nvidia/cu13/lib/libx.so.13 in "),
            "{tried:?}"
        );
        assert_eq!(tried[5].outcome, "no such file", "no b12: {tried:?}");
        assert_eq!(tried.last().map(|t| t.outcome.as_str()), Some("loaded"));
    }

    #[test]
    fn nothing_found_lists_every_place_with_its_reason() {
        let t = Temp::new("nothing");
        let py = python(&t.0, "exit 1");
        let s = search_for(None, py.clone(), two_libraries(&t.0));
        let (found, tried, _) = run(&s, &[]);
        assert_eq!(found, None);
        let b = |m: u32| {
            let file = t.0.join(format!("b{m}/libx.so.{m}"));
            let file = file.display();
            format!("{file} (the folder recorded at build time): no such file")
        };
        let want = [
            "LIBX: not set".to_string(),
            "libx.so.13 on the dynamic loader's path: libx.so.13: not it".to_string(),
            b(13),
            format!("the PyPI wheels holding libx.so.13: {py} exited with status 1"),
            "libx.so.12 on the dynamic loader's path: libx.so.12: not it".to_string(),
            b(12),
            format!("the PyPI wheels holding libx.so.12: {py} exited with status 1"),
        ];
        assert_eq!(places_text(&tried), want.join("; "));
    }
}

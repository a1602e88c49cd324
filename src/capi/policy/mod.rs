//! The error policy of the C ABI. Every exported body runs inside `run` (the table) or the
//! status API's `status`, both through `catch_panic`; a failure becomes one record, stored as the
//! thread's last error, then (table only) handed to the error handler, which is called outside
//! the panic boundary and through `extern "C-unwind"`, so a C++ handler may throw.
//!
//! What the policy keeps (`last`, `handlers`, `fork`, `load`) works at any point of a thread's
//! or the process's life, and in a forked child (README "Lifecycle and process rules").

mod fork;
mod handlers;
mod last;
mod load;

use crate::error::{Error, ErrorKind, Result};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// The load-time set-up (`load::init`), for the first call when the constructor did not run: the
/// submodules ask for it here, so that `load`, which sets them up, is the only one that names them.
#[inline]
fn ensure_loaded() {
    load::init();
}

pub use handlers::{handler, set_handler};
pub use last::{last, set_last};
pub use load::release_at_unload;

/// What the handler receives (`llaisysNvidiaError` in the header). The strings live until the
/// handler returns; copy them to keep them.
#[repr(C)]
pub struct LlaisysNvidiaError {
    /// `llaisysNvidiaStatus_t`: 1 CUDA, 2 deferred CUDA, 3 invalid argument, 4 internal.
    pub status: c_int,
    /// The `cudaError_t` value, 0 when no CUDA call failed.
    pub cuda_error: c_int,
    /// The calling thread's current device, -1 when unknown.
    pub device: c_int,
    /// Our function (`malloc_device`).
    pub function: *const c_char,
    /// The CUDA call that failed (`cudaMalloc`), `""` when none.
    pub cuda_call: *const c_char,
    /// The whole one-line message.
    pub message: *const c_char,
}

/// A host's error handler (`llaisysNvidiaErrorHandler` in the header).
pub type ErrorHandler = Option<unsafe extern "C-unwind" fn(*const LlaisysNvidiaError, *mut c_void)>;

/// One failure, owned.
#[derive(Debug)]
pub struct Record {
    pub(crate) status: c_int,
    pub(crate) cuda_error: c_int,
    pub(crate) device: c_int,
    /// The `ncclResult_t` of a failed NCCL call (0 when none): see `capi::comm`.
    pub(crate) nccl_error: c_int,
    function: CString,
    cuda_call: CString,
    pub(crate) message: CString,
    /// The figures of a device allocation out of memory (`llaisysNvidiaLastOutOfMemory`).
    pub(crate) out_of_memory: Option<crate::error::OutOfMemory>,
}

impl Record {
    /// Builds the record and its message for `error` raised in our `function`.
    pub fn new(function: &str, error: &Error) -> Record {
        if fork::forked_child() {
            // The only failure a forked child has: the refusal. No CUDA call for the device.
            return Record::refused_after_fork(function);
        }
        let device = if error.kind() == ErrorKind::InvalidArgument {
            -1
        } else {
            crate::safe::device::current_or_unknown()
        };
        Record {
            out_of_memory: error.out_of_memory().copied(),
            ..Record::with_nccl(
                error.kind() as c_int,
                error.cuda_error().code(),
                0,
                device,
                function,
                error.call(),
                error,
            )
        }
    }

    /// The refusal of a call in a child forked after the library was used: status CUDA with
    /// cudaErrorInitializationError, what CUDA answers for CUDA used after fork. The text is
    /// fixed here: no cudart call in such a child.
    fn refused_after_fork(function: &str) -> Record {
        let message = format!(
            "llaisys-nvidia: {function}: refused: this process is a child forked after its parent \
             used llaisys-nvidia, and neither CUDA nor the library's state can be used after fork \
             (cudaErrorInitializationError (3)); only the error-handler and last-error functions \
             work here: exec a new program, or use the library before fork only in children"
        );
        Record {
            status: ErrorKind::Cuda as c_int,
            cuda_error: fork::CUDA_ERROR_AFTER_FORK,
            device: -1,
            nccl_error: 0,
            function: cstring(function),
            cuda_call: CString::default(),
            message: cstring(&message),
            out_of_memory: None,
        }
    }

    /// A record with every field given (an NCCL failure: its `ncclResult_t` too); the message
    /// is "llaisys-nvidia: FUNCTION[ on device N]: ERROR".
    pub(crate) fn with_nccl(
        status: c_int,
        cuda_error: c_int,
        nccl_error: c_int,
        device: c_int,
        function: &str,
        call: &str,
        error: &dyn std::fmt::Display,
    ) -> Record {
        let on = if device >= 0 {
            format!(" on device {device}")
        } else {
            String::new()
        };
        Record {
            status,
            cuda_error,
            device,
            nccl_error,
            function: cstring(function),
            cuda_call: cstring(call),
            message: cstring(&format!("llaisys-nvidia: {function}{on}: {error}")),
            out_of_memory: None,
        }
    }

    fn view(&self) -> LlaisysNvidiaError {
        LlaisysNvidiaError {
            status: self.status,
            cuda_error: self.cuda_error,
            device: self.device,
            function: self.function.as_ptr(),
            cuda_call: self.cuda_call.as_ptr(),
            message: self.message.as_ptr(),
        }
    }

    /// The message as text.
    pub fn message(&self) -> &str {
        self.message.to_str().unwrap_or("")
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

/// Runs `body` inside the panic boundary; on failure reports and returns `fallback`.
#[inline]
pub fn run<T>(function: &'static str, fallback: T, body: impl FnOnce() -> Result<T>) -> T {
    match catch_panic(function, body) {
        Ok(v) => v,
        Err(e) => {
            report(function, &e);
            fallback
        }
    }
}

/// The first step of every entry point that may reach CUDA or the library's state: notes the
/// calling thread (`last::touch`) and the library as used, and refuses in a child forked after
/// that (see `fork`).
#[inline]
fn enter() -> Result<()> {
    last::touch();
    fork::enter()
}

/// For entry points outside `catch_panic` (get_device_count): `enter`; in a forked child records
/// the refusal as the thread's last error (no handler call) and returns true.
pub fn refused_in_forked_child(function: &'static str) -> bool {
    match enter() {
        Ok(()) => false,
        Err(e) => {
            set_last(Some(Arc::new(Record::new(function, &e))));
            true
        }
    }
}

/// Runs `body`, turning a panic into an internal error. In a child forked after the library was
/// used, refuses without running `body` (see `fork`).
#[inline]
pub fn catch_panic<T>(function: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    enter()?;
    // During a capture through the library, another thread's call runs in relaxed capture mode:
    // nothing it does touches the capture (`ops::capturing`).
    let _relaxed = crate::ops::capturing::relaxed_for_other_threads();
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-text panic payload".into());
        Err(Error::internal(format!("panic in {function}: {what}")))
    })
}

/// Records the error as the thread's last error and hands it to the handler. Returns only if a
/// host handler returns; the default handler aborts the process.
pub fn report(function: &str, error: &Error) {
    let record = Arc::new(Record::new(function, error));
    set_last(Some(record.clone()));
    if !handlers::call(&record) {
        abort_with(record.message.as_bytes());
    }
}

/// The default handler (`llaisysNvidiaDefaultErrorHandler`): `message` and a hint as one line
/// on stderr, then abort. Writes with write(2), no lock: it works at exit and in a forked child.
pub fn abort_with(message: &[u8]) -> ! {
    let mut line = Vec::with_capacity(message.len() + 128);
    line.extend_from_slice(message);
    line.extend_from_slice(
        b" (aborting: install an error handler with llaisysNvidiaSetErrorHandler to handle errors instead)\n",
    );
    write_stderr(&line);
    std::process::abort()
}

/// Writes `bytes` to file descriptor 2 with write(2): no lock that another thread (or a thread
/// that did not survive a fork) could hold.
pub(crate) fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reading `bytes.len()` bytes.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast::<c_void>(), bytes.len()) };
        if n > 0 {
            bytes = bytes.get(n.unsigned_abs()..).unwrap_or_default();
        } else if n == 0
            || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            return;
        }
    }
}

/// Copies `text` into a caller's buffer, NUL-terminated and truncated to fit; returns the length
/// of the whole text (without NUL), so a caller can size a buffer.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
pub unsafe fn copy_out(text: &CStr, buf: *mut c_char, len: usize) -> usize {
    let bytes = text.to_bytes();
    if !buf.is_null() && len > 0 {
        let n = bytes.len().min(len - 1);
        // SAFETY: `buf` is not NULL (checked), so valid for `len` > `n` bytes (this function's
        // contract); `bytes` has at least `n` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n) = 0;
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<(c_int, String)>> = Mutex::new(Vec::new());

    unsafe extern "C-unwind" fn record(e: *const LlaisysNvidiaError, _user: *mut c_void) {
        // SAFETY: the policy passes a valid error whose strings live until we return.
        let e = unsafe { &*e };
        // SAFETY: the message of that error is a NUL-terminated string alive until we return.
        let msg = unsafe { CStr::from_ptr(e.message) }
            .to_string_lossy()
            .into_owned();
        crate::util::sync::lock(&SEEN).push((e.status, msg));
    }

    #[test]
    fn a_panic_inside_becomes_an_internal_error_not_an_unwind() {
        set_handler(Some(record), std::ptr::null_mut());
        let got: *mut c_void = run("malloc_device", std::ptr::null_mut(), || {
            panic!("injected failure")
        });
        set_handler(None, std::ptr::null_mut());
        assert!(got.is_null(), "the failure value comes back");
        let seen = crate::util::sync::lock(&SEEN).clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].0, ErrorKind::Internal as i32);
        assert!(
            seen[0]
                .1
                .contains("panic in malloc_device: injected failure"),
            "{seen:?}"
        );
        assert_eq!(last().map(|r| r.status), Some(4));
    }
}

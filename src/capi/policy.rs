//! The error policy of the C ABI. Every exported body runs inside `run`, which catches panics;
//! a failure becomes one record, stored as the thread's last error, then handed to the error
//! handler. The default handler prints one line and aborts; a host may install its own. If the
//! handler returns, the function returns its failure value. The handler is called outside the
//! panic boundary and through `extern "C-unwind"`, so a C++ handler may throw.

use crate::error::{Error, ErrorKind};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, RwLock};

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
}

impl Record {
    /// Builds the record and its message for `error` raised in our `function`.
    pub fn new(function: &str, error: &Error) -> Record {
        let device = if error.kind() == ErrorKind::InvalidArgument {
            -1
        } else {
            crate::runtime::current_device_or_unknown()
        };
        let on = if device >= 0 {
            format!(" on device {device}")
        } else {
            String::new()
        };
        let message = format!("llaisys-nvidia: {function}{on}: {error}");
        Record {
            status: error.kind() as c_int,
            cuda_error: error.cuda_error().code(),
            device,
            nccl_error: 0,
            function: cstring(function),
            cuda_call: cstring(error.call()),
            message: cstring(&message),
        }
    }

    /// A record of a communicator failure that `Error` does not describe (an NCCL call).
    pub(crate) fn with_nccl(
        status: c_int,
        cuda_error: c_int,
        nccl_error: c_int,
        device: c_int,
        function: &str,
        call: &str,
        message: &str,
    ) -> Record {
        Record {
            status,
            cuda_error,
            device,
            nccl_error,
            function: cstring(function),
            cuda_call: cstring(call),
            message: cstring(message),
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

struct HandlerSlot {
    handler: ErrorHandler,
    user_data: usize,
}

static HANDLER: RwLock<HandlerSlot> = RwLock::new(HandlerSlot {
    handler: None,
    user_data: 0,
});

thread_local! {
    static LAST: RefCell<Option<Arc<Record>>> = const { RefCell::new(None) };
}

/// Installs `handler` for the whole process; None restores the default (print and abort).
pub fn set_handler(handler: ErrorHandler, user_data: *mut c_void) {
    let mut slot = HANDLER.write().unwrap_or_else(|p| p.into_inner());
    slot.handler = handler;
    slot.user_data = user_data as usize;
}

/// The installed handler and its user data.
pub fn handler() -> (ErrorHandler, *mut c_void) {
    let slot = HANDLER.read().unwrap_or_else(|p| p.into_inner());
    (slot.handler, slot.user_data as *mut c_void)
}

/// Sets the calling thread's last error without calling the handler.
pub fn set_last(record: Option<Arc<Record>>) {
    LAST.with(|l| *l.borrow_mut() = record);
}

/// The calling thread's last error.
pub fn last() -> Option<Arc<Record>> {
    LAST.with(|l| l.borrow().clone())
}

/// Runs `body` inside the panic boundary; on failure reports and returns `fallback`.
pub fn run<T>(function: &'static str, fallback: T, body: impl FnOnce() -> crate::Result<T>) -> T {
    match catch_panic(function, body) {
        Ok(v) => v,
        Err(e) => {
            report(function, &e);
            fallback
        }
    }
}

/// Runs `body`, turning a panic into an internal error.
pub fn catch_panic<T>(
    function: &'static str,
    body: impl FnOnce() -> crate::Result<T>,
) -> crate::Result<T> {
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
    let (handler, user_data) = handler();
    match handler {
        None => {
            let _ = writeln!(std::io::stderr(), "{} (aborting: install an error handler with llaisysNvidiaSetErrorHandler to handle errors instead)", record.message());
            std::process::abort();
        }
        Some(h) => {
            let view = record.view();
            // SAFETY: `view` points into `record`, alive until the handler returns or unwinds.
            unsafe { h(&view, user_data) };
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
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, n);
        *buf.add(n) = 0;
    }
    bytes.len()
}

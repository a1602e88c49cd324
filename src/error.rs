//! Errors: `CudaError`, a newtype over `cudaError_t` (any integer is a valid value, so a code the
//! headers did not know is never undefined behaviour), and `Error`, which adds which CUDA call
//! failed, where, and why.

use crate::cudart::sys as raw;
use std::ffi::CStr;
use std::fmt;
use std::panic::Location;

/// A `cudaError_t` value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CudaError(raw::cudaError_t);

impl CudaError {
    /// `cudaSuccess`.
    pub const SUCCESS: CudaError = CudaError(raw::cudaError::cudaSuccess);
    /// `cudaErrorInsufficientDriver` (35): no driver, or one older than the runtime.
    pub const INSUFFICIENT_DRIVER: CudaError =
        CudaError(raw::cudaError::cudaErrorInsufficientDriver);
    /// `cudaErrorMemoryAllocation` (2): out of memory.
    pub const MEMORY_ALLOCATION: CudaError = CudaError(raw::cudaError::cudaErrorMemoryAllocation);
    /// `cudaErrorNotReady` (600): queried work has not completed yet (not a failure).
    pub const NOT_READY: CudaError = CudaError(raw::cudaError::cudaErrorNotReady);
    /// `cudaErrorPeerAccessAlreadyEnabled` (704).
    pub const PEER_ACCESS_ALREADY_ENABLED: CudaError =
        CudaError(raw::cudaError::cudaErrorPeerAccessAlreadyEnabled);
    /// `cudaErrorNoDevice` (100): a driver but no device.
    pub const NO_DEVICE: CudaError = CudaError(raw::cudaError::cudaErrorNoDevice);
    /// `cudaErrorStreamCaptureUnsupported` (900): not permitted while a stream captures.
    pub const STREAM_CAPTURE_UNSUPPORTED: CudaError =
        CudaError(raw::cudaError::cudaErrorStreamCaptureUnsupported);
    /// `cudaErrorStreamCaptureImplicit` (906): the legacy stream would depend on a capture.
    pub const STREAM_CAPTURE_IMPLICIT: CudaError =
        CudaError(raw::cudaError::cudaErrorStreamCaptureImplicit);

    /// Wraps a raw code, known to the headers or not.
    pub const fn from_code(code: i32) -> CudaError {
        CudaError(raw::cudaError(code as u32))
    }

    /// Wraps a value returned by cudart.
    pub const fn from_raw(raw: raw::cudaError_t) -> CudaError {
        CudaError(raw)
    }

    /// The integer code (`cudaErrorInsufficientDriver` is 35).
    pub const fn code(self) -> i32 {
        self.0 .0 as i32
    }

    /// The raw value.
    pub const fn raw(self) -> raw::cudaError_t {
        self.0
    }

    /// True for `cudaSuccess`.
    pub const fn is_success(self) -> bool {
        self.0 .0 == 0
    }

    /// The enumerator's name from `cudaGetErrorName` (`cudaErrorInsufficientDriver`). For a code
    /// cudart does not know it answers "unrecognized error code".
    pub fn name(self) -> &'static str {
        // SAFETY: cudaGetErrorName accepts any value and returns a static NUL-terminated string
        // (or NULL on some versions for unknown codes, handled).
        unsafe { static_str(raw::cudaGetErrorName(self.0)) }
    }

    /// The human description from `cudaGetErrorString`.
    pub fn description(self) -> &'static str {
        // SAFETY: as for `name`.
        unsafe { static_str(raw::cudaGetErrorString(self.0)) }
    }

    /// True when the machine has no usable GPU at all: no driver (or one older than the
    /// runtime, 35) or a driver with no device (100). The one "no GPU" rule of the crate.
    pub fn is_no_gpu(self) -> bool {
        self == CudaError::INSUFFICIENT_DRIVER || self == CudaError::NO_DEVICE
    }

    /// True for the errors that come from earlier asynchronous work (a kernel or copy that
    /// faulted) and then stick to the context: any later call may report them.
    pub fn is_sticky(self) -> bool {
        // ECC uncorrectable, illegal address, launch timeout, device assert, hardware stack
        // error .. launch failure: the documentation's "the context cannot be used" family.
        matches!(self.code(), 214 | 700 | 702 | 710 | 714..=719)
    }

    /// Turns a raw return value into a `Result`.
    pub fn check(raw: raw::cudaError_t) -> std::result::Result<(), CudaError> {
        let e = CudaError(raw);
        if e.is_success() {
            Ok(())
        } else {
            Err(e)
        }
    }
}

/// # Safety
/// `p` is NULL or a static NUL-terminated string.
unsafe fn static_str(p: *const std::os::raw::c_char) -> &'static str {
    if p.is_null() {
        return "unrecognized error code";
    }
    // SAFETY: `p` is not NULL (handled above), so a static NUL-terminated string (this
    // function's contract).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .unwrap_or("(non-UTF-8 error text)")
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, code, text) = (self.name(), self.code(), self.description());
        write!(f, "{name} ({code}): {text}")
    }
}

impl fmt::Debug for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaError({}, {})", self.code(), self.name())
    }
}

impl std::error::Error for CudaError {}

/// What kind of failure an `Error` is. The values are the C ABI's status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorKind {
    /// A CUDA call failed because of this call.
    Cuda = 1,
    /// A CUDA call reported an error caused by earlier asynchronous work (sticky/deferred).
    DeferredCuda = 2,
    /// Bad input, caught before any CUDA call.
    InvalidArgument = 3,
    /// A bug inside this crate (a caught panic).
    Internal = 4,
    /// Refused because a stream capture is in progress: the call would have joined or
    /// invalidated it (the capture is left as it was).
    Capture = 8,
}

/// The figures of a device allocation that failed for want of memory, after the caches were
/// released and the allocation tried again (`llaisysNvidiaOutOfMemory` in the header).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The device.
    pub device: i32,
    /// Other processes NVML lists on the device (-1: NVML could not say).
    pub other_processes: i32,
    /// The size asked for.
    pub requested_bytes: u64,
    /// The device's memory (`cudaMemGetInfo`).
    pub total_bytes: u64,
    /// Its free memory after the caches were released.
    pub free_bytes: u64,
    /// Handed out by this library on the device and not freed.
    pub in_use_bytes: u64,
    /// Held by this library's caches on the device (graph pools apart).
    pub cached_bytes: u64,
    /// Held by graph pools of captures through this library on the device.
    pub graph_pool_bytes: u64,
    /// The largest allocation that succeeded just after (probed with cudaMalloc, to 2 MiB;
    /// `u64::MAX` when a capture forbade the probe).
    pub largest_allocation_bytes: u64,
    /// What the other processes use, summed over those NVML can measure.
    pub other_processes_bytes: u64,
    /// The device's memory limit for this library, 0 when none.
    pub limit_bytes: u64,
}

/// A failure with its context: which CUDA call, from where, with which arguments. One pointer
/// wide: every `Result` of the hot paths (allocation, free, copy) stays small, the context is
/// allocated only when something fails.
#[derive(Clone)]
pub struct Error(Box<Repr>);

#[derive(Clone)]
struct Repr {
    kind: ErrorKind,
    cuda: CudaError,
    call: &'static str,
    detail: String,
    location: &'static Location<'static>,
    /// For a device allocation out of memory: the figures (`with_out_of_memory`).
    out_of_memory: Option<Box<OutOfMemory>>,
    /// Answered by CUDA (not refused by the library before the call).
    from_cuda: bool,
}

/// `Result` with this crate's `Error`.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    #[track_caller]
    fn new(kind: ErrorKind, cuda: CudaError, call: &'static str, detail: String) -> Error {
        let location = Location::caller();
        Error(Box::new(Repr {
            kind,
            cuda,
            call,
            detail,
            location,
            out_of_memory: None,
            from_cuda: false,
        }))
    }

    /// The error with the figures of an out-of-memory failure attached.
    pub fn with_out_of_memory(mut self, figures: OutOfMemory) -> Error {
        self.0.out_of_memory = Some(Box::new(figures));
        self
    }

    /// The figures of an out-of-memory failure of a device allocation, when this is one.
    pub fn out_of_memory(&self) -> Option<&OutOfMemory> {
        self.0.out_of_memory.as_deref()
    }

    /// A failed CUDA call. `detail` names the arguments that matter (`size=1048576`).
    #[track_caller]
    pub fn cuda(call: &'static str, cuda: CudaError, detail: impl Into<String>) -> Error {
        let kind = if cuda.is_sticky() {
            ErrorKind::DeferredCuda
        } else if cuda == CudaError::STREAM_CAPTURE_UNSUPPORTED
            || cuda == CudaError::STREAM_CAPTURE_IMPLICIT
        {
            // CUDA itself refused the call because of a capture (one the host began after the
            // library last looked): a capture error like the library's own refusals.
            ErrorKind::Capture
        } else {
            ErrorKind::Cuda
        };
        let mut error = Error::new(kind, cuda, call, detail.into());
        error.0.from_cuda = true;
        error
    }

    /// Bad input, refused before CUDA saw it.
    #[track_caller]
    pub fn invalid_argument(detail: impl Into<String>) -> Error {
        let kind = ErrorKind::InvalidArgument;
        Error::new(kind, CudaError::SUCCESS, "", detail.into())
    }

    /// A call refused because a stream capture is in progress; `cuda` is the code CUDA would
    /// have answered (900 or 906), `detail` says which capture and what to do instead.
    #[track_caller]
    pub fn capture(call: &'static str, cuda: CudaError, detail: impl Into<String>) -> Error {
        Error::new(ErrorKind::Capture, cuda, call, detail.into())
    }

    /// An internal failure (a caught panic).
    #[track_caller]
    pub fn internal(detail: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, CudaError::SUCCESS, "", detail.into())
    }

    /// Marks the error as surfaced now but caused by earlier asynchronous work.
    pub fn deferred(mut self) -> Error {
        if self.0.kind == ErrorKind::Cuda {
            self.0.kind = ErrorKind::DeferredCuda;
        }
        self
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// True when CUDA answered this error (a failed call), false when the library refused or
    /// failed before any CUDA call.
    pub fn from_cuda(&self) -> bool {
        self.0.from_cuda
    }

    /// The CUDA error (`cudaSuccess` when none was involved).
    pub fn cuda_error(&self) -> CudaError {
        self.0.cuda
    }

    /// The CUDA call that failed (`""` when none).
    pub fn call(&self) -> &'static str {
        self.0.call
    }

    /// The arguments that matter, in words.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }

    /// Where in this crate the error was raised.
    pub fn location(&self) -> &'static Location<'static> {
        self.0.location
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.kind {
            ErrorKind::Cuda => {
                write!(f, "{} failed: {}", self.0.call, self.0.cuda)?;
                // The `loaded` mode: a function the loaded runtime lacks, named with the library.
                #[cfg(llaisys_loaded)]
                if let Some(note) = raw::loaded_note(self.0.call) {
                    write!(f, " ({note})")?;
                }
            }
            ErrorKind::DeferredCuda => write!(
                f,
                "{} reported {}, an error left by earlier asynchronous work (a kernel or copy \
                 queued before), not caused by this call; the CUDA context is unusable",
                self.0.call, self.0.cuda
            )?,
            ErrorKind::InvalidArgument => write!(f, "invalid argument")?,
            ErrorKind::Internal => write!(f, "internal error")?,
            ErrorKind::Capture if self.0.from_cuda => write!(
                f,
                "{} failed: {}, a stream capture began after the library last checked (one the \
                 host began itself); CUDA may have invalidated that capture",
                self.0.call, self.0.cuda
            )?,
            ErrorKind::Capture => write!(
                f,
                "{} refused: a stream capture is in progress and the call would have joined or \
                 invalidated it ({}); the capture is unchanged",
                self.0.call, self.0.cuda
            )?,
        }
        if !self.0.detail.is_empty() {
            write!(f, " [{}]", self.0.detail)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} (at {})", self.0.location)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        (!self.0.cuda.is_success()).then_some(&self.0.cuda as _)
    }
}

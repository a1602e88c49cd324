//! The communicator's errors. [`NcclResult`] wraps `ncclResult_t` as an integer (a code this
//! build's header did not know is a value, never undefined behaviour). [`Error`] is what every
//! communicator function returns: the crate's own error for CUDA failures and bad input, or one of
//! the three NCCL failures, each with its C status (`llaisysNvidiaStatus_t`).

use super::sys;
use std::fmt;
use std::os::raw::c_int;
use std::time::Duration;

/// `LLAISYS_NVIDIA_ERROR_NCCL`: an NCCL call failed; the record carries its `ncclResult_t`.
pub const STATUS_NCCL: c_int = 5;
/// `LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE`: libnccl.so.2 not found, not NCCL, or lacking a
/// function or feature (too old).
pub const STATUS_NCCL_UNAVAILABLE: c_int = 6;
/// `LLAISYS_NVIDIA_ERROR_TIMEOUT`: NCCL work did not complete in time; the communicator was
/// aborted.
pub const STATUS_TIMEOUT: c_int = 7;

/// An `ncclResult_t` value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NcclResult(pub c_int);

impl NcclResult {
    /// `ncclSuccess`.
    pub const SUCCESS: NcclResult = NcclResult(sys::ncclResult_t::ncclSuccess.0 as c_int);
    /// `ncclInProgress`: a non-blocking communicator is still working on it.
    pub const IN_PROGRESS: NcclResult = NcclResult(sys::ncclResult_t::ncclInProgress.0 as c_int);

    /// From the raw value.
    pub fn from_raw(r: sys::ncclResult_t) -> NcclResult {
        NcclResult(r.0 as c_int)
    }

    /// The raw value.
    pub fn raw(self) -> sys::ncclResult_t {
        sys::ncclResult_t(self.0 as _)
    }

    /// The enumerator's name (`ncclUnhandledCudaError`), from this build's header.
    pub fn name(self) -> &'static str {
        use sys::ncclResult_t as R;
        match self.raw() {
            R::ncclSuccess => "ncclSuccess",
            R::ncclUnhandledCudaError => "ncclUnhandledCudaError",
            R::ncclSystemError => "ncclSystemError",
            R::ncclInternalError => "ncclInternalError",
            R::ncclInvalidArgument => "ncclInvalidArgument",
            R::ncclInvalidUsage => "ncclInvalidUsage",
            R::ncclRemoteError => "ncclRemoteError",
            R::ncclInProgress => "ncclInProgress",
            R::ncclTimeout => "ncclTimeout",
            _ => "unknown ncclResult_t",
        }
    }
}

impl fmt::Debug for NcclResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// A communicator failure.
#[derive(Clone)]
pub enum Error {
    /// A CUDA failure or bad input: the crate's own error (its status 1 to 4).
    Base(crate::error::Error),
    /// An NCCL call failed.
    Nccl {
        /// The NCCL function (`ncclCommInitRankConfig`).
        call: &'static str,
        /// What it returned (or what `ncclCommGetAsyncError` reported for it).
        code: NcclResult,
        /// `ncclGetErrorString(code)`.
        description: String,
        /// `ncclGetLastError`, right after the failure ("" when NCCL has none).
        last: String,
        /// The arguments that matter.
        detail: String,
    },
    /// NCCL cannot serve the call: not found, not NCCL, or lacking the function or feature.
    Unavailable {
        /// Where we looked and how to fix it, or which function is missing.
        detail: String,
    },
    /// Polled work did not complete in time; the communicator was aborted.
    Timeout {
        /// The NCCL call (or our wait) that did not complete.
        call: &'static str,
        /// How long we waited.
        waited: Duration,
        /// The arguments that matter.
        detail: String,
    },
}

/// `Result` with the communicator's `Error`.
pub type Result<T> = std::result::Result<T, Error>;

impl From<crate::error::Error> for Error {
    fn from(e: crate::error::Error) -> Error {
        Error::Base(e)
    }
}

impl Error {
    /// Bad input, refused before NCCL or CUDA saw it.
    #[track_caller]
    pub fn invalid(detail: impl Into<String>) -> Error {
        Error::Base(crate::error::Error::invalid_argument(detail))
    }

    /// The C status (`llaisysNvidiaStatus_t`).
    pub fn status(&self) -> c_int {
        match self {
            Error::Base(e) => e.kind() as c_int,
            Error::Nccl { .. } => STATUS_NCCL,
            Error::Unavailable { .. } => STATUS_NCCL_UNAVAILABLE,
            Error::Timeout { .. } => STATUS_TIMEOUT,
        }
    }

    /// The `ncclResult_t` involved: the failed call's code; for a timeout `ncclInProgress`, the
    /// state the work was still in; 0 otherwise.
    pub fn nccl_code(&self) -> c_int {
        match self {
            Error::Nccl { code, .. } => code.0,
            Error::Timeout { .. } => NcclResult::IN_PROGRESS.0,
            _ => 0,
        }
    }

    /// The `cudaError_t` involved (0 when none).
    pub fn cuda_code(&self) -> c_int {
        match self {
            Error::Base(e) => e.cuda_error().code(),
            _ => 0,
        }
    }

    /// The failing call (CUDA or NCCL), "" when none.
    pub fn call(&self) -> &'static str {
        match self {
            Error::Base(e) => e.call(),
            Error::Nccl { call, .. } | Error::Timeout { call, .. } => call,
            Error::Unavailable { .. } => "",
        }
    }

    /// The same error with `more` added to its detail.
    pub fn context(mut self, more: &str) -> Error {
        if let Error::Nccl { detail, .. } | Error::Timeout { detail, .. } = &mut self {
            *detail = if detail.is_empty() {
                more.to_string()
            } else {
                format!("{detail}, {more}")
            };
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let detail = match self {
            Error::Base(e) => return write!(f, "{e}"),
            Error::Unavailable { detail } => return write!(f, "NCCL is not available: {detail}"),
            Error::Nccl {
                call,
                code,
                description,
                last,
                detail,
            } => {
                let (name, raw) = (code.name(), code.0);
                write!(f, "{call} failed: {name} ({raw}): {description}")?;
                if !last.is_empty() {
                    write!(f, "; NCCL: {last}")?;
                }
                detail
            }
            Error::Timeout {
                call,
                waited,
                detail,
            } => {
                write!(
                    f,
                    "{call} did not complete within {} ms (LLAISYS_NVIDIA_NCCL_TIMEOUT_MS or \
                     llaisysNvidiaCommSetTimeout); the communicator was aborted",
                    waited.as_millis()
                )?;
                detail
            }
        };
        if !detail.is_empty() {
            write!(f, " [{detail}]")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Base(e) => write!(f, "{e:?}"),
            other => write!(f, "{other} (status {})", other.status()),
        }
    }
}

impl std::error::Error for Error {}

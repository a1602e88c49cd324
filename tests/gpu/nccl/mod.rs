//! GPU tests of the communicator (`gpu nccl` runs only these): one device (one-rank
//! communicators, every collective and type with data checks on our streams and the legacy
//! stream, groups, the asynchronous error query, abort with work queued, the caches' reuse
//! ordering, a rank that never joins), and two devices (two processes, one per GPU; one process
//! with a communicator per device), which skip visibly on one GPU and fail under
//! LLAISYS_TEST_REQUIRE_GPUS=2. Every process here runs with NCCL_NVLS_ENABLE=0.

mod data;
mod one_gpu;
mod procs;
mod two_gpu;

use crate::support::last_error_message;
use llaisys_nvidia::ffi::*;
use std::os::raw::{c_int, c_void};

/// NVLink multicast stays off in this process (and the children it starts, which inherit it).
/// Called by every test before anything can start NCCL; single-threaded at that point in each
/// test binary run by gpu-run.sh (--test-threads=1) and harmless otherwise (same value).
pub fn nvls_off() {
    if std::env::var("NCCL_NVLS_ENABLE").as_deref() != Ok("0") {
        // SAFETY: set before NCCL is loaded; the value never changes afterwards.
        unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    }
}

/// Panics with the last error unless `status` is 0.
#[track_caller]
pub fn ok(status: c_int, what: &str) {
    assert_eq!(
        status,
        0,
        "{what}: status {status}: {}",
        last_error_message()
    );
}

/// Asserts a failure `want` whose message holds `word`.
#[track_caller]
pub fn fails(status: c_int, want: c_int, word: &str) -> String {
    let msg = last_error_message();
    assert_eq!(status, want, "wanted status {want}, got {status}: {msg}");
    assert!(msg.contains(word), "message lacks {word:?}: {msg}");
    msg
}

/// A stream of ours: 0 blocking, 1 non-blocking.
pub fn stream(flags: u32) -> *mut c_void {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    ok(
        unsafe { llaisysNvidiaStreamCreate(&mut s, flags, 0) },
        "stream create",
    );
    s
}

pub fn destroy_stream(s: *mut c_void) {
    if !s.is_null() {
        ok(llaisysNvidiaStreamDestroy(s), "stream destroy");
    }
}

/// Device memory from our cache (`malloc_device`).
pub struct DevBuf {
    pub ptr: *mut c_void,
    pub len: usize,
}

impl DevBuf {
    pub fn new(len: usize) -> DevBuf {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        ok(
            unsafe { llaisysNvidiaMallocDevice(&mut ptr, len.max(1)) },
            "malloc device",
        );
        DevBuf { ptr, len }
    }
    pub fn upload(&self, bytes: &[u8]) {
        assert!(bytes.len() <= self.len);
        // SAFETY: both cover bytes.len().
        ok(
            unsafe { llaisysNvidiaMemcpy(self.ptr, bytes.as_ptr().cast(), bytes.len(), 1) },
            "H2D",
        );
    }
    pub fn download(&self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        // SAFETY: both cover len.
        ok(
            unsafe { llaisysNvidiaMemcpy(v.as_mut_ptr().cast(), self.ptr, len, 2) },
            "D2H",
        );
        v
    }
    pub fn fill(&self, byte: u8) {
        // SAFETY: ours, covers len.
        ok(
            unsafe { llaisysNvidiaMemset(self.ptr, byte as c_int, self.len) },
            "memset",
        );
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: ours.
        let _ = llaisysNvidiaFreeDevice(self.ptr);
    }
}

/// A unique id.
pub fn unique_id() -> CommId {
    let mut id = CommId { internal: [0; 128] };
    // SAFETY: valid out-pointer.
    ok(
        unsafe { llaisysNvidiaCommGetUniqueId(&mut id) },
        "unique id",
    );
    id
}

pub fn id_to_hex(id: &CommId) -> String {
    id.internal
        .iter()
        .map(|&b| format!("{:02x}", b.to_ne_bytes()[0]))
        .collect()
}

pub fn id_from_hex(s: &str) -> CommId {
    let mut id = CommId { internal: [0; 128] };
    for (i, b) in id.internal.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex id") as _;
    }
    id
}

/// A one-rank communicator on the current device.
pub fn one_rank() -> Comm {
    let id = unique_id();
    let mut c = std::ptr::null_mut();
    // SAFETY: valid pointers.
    ok(
        unsafe { llaisysNvidiaCommInitRank(&mut c, 1, &id, 0) },
        "init rank 0 of 1",
    );
    c
}

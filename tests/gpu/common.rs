//! Shared helpers of the GPU tests.
#![allow(dead_code)]

/// The device count, or None after printing a visible "skipped: no CUDA device" line. Panics
/// (fails the test) when LLAISYS_TEST_REQUIRE_GPU=1 and there is no device.
pub fn gpu_or_skip(test: &str) -> Option<i32> {
    let n = llaisys_nvidia::runtime::device_count();
    match n {
        Ok(n) if n > 0 => Some(n),
        other => {
            if std::env::var("LLAISYS_TEST_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("{test}: LLAISYS_TEST_REQUIRE_GPU=1 but no CUDA device: {other:?}");
            }
            eprintln!("skipped: no CUDA device ({test}: {other:?})");
            None
        }
    }
}

/// Skips the rest of the test (visibly) without a GPU; see `gpu_or_skip`.
#[macro_export]
macro_rules! require_gpu {
    () => {
        match $crate::common::gpu_or_skip(module_path!()) {
            Some(n) => n,
            None => return,
        }
    };
}

/// The device count when there are at least `need` devices, or None after printing a visible
/// skip line. Fails (panics) when LLAISYS_TEST_REQUIRE_GPUS asks for at least `need` devices
/// (gpu-run.sh sets it to the machine's GPU count), or when LLAISYS_TEST_REQUIRE_GPU=1 and there
/// is no device at all.
pub fn gpus_or_skip(test: &str, need: i32) -> Option<i32> {
    let n = gpu_or_skip(test)?;
    if n >= need {
        return Some(n);
    }
    let required: i32 = std::env::var("LLAISYS_TEST_REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    if required >= need {
        panic!("{test}: LLAISYS_TEST_REQUIRE_GPUS={required} but CUDA sees {n} device(s)");
    }
    eprintln!("skipped: needs {need} CUDA devices, this machine has {n} ({test})");
    None
}

/// Skips the rest of the test (visibly) with fewer than `$n` devices; see `gpus_or_skip`.
#[macro_export]
macro_rules! require_gpus {
    ($n:expr) => {
        match $crate::common::gpus_or_skip(module_path!(), $n) {
            Some(n) => n,
            None => return,
        }
    };
}

/// A deterministic byte pattern (xorshift) for data checks.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

use llaisys_nvidia::ffi::LlaisysNvidiaError;
use llaisys_nvidia::ffi::{LlaisysRuntimeAPI, TABLE};
use std::cell::RefCell;
use std::ffi::CStr;
use std::os::raw::c_void;

thread_local! {
    /// When Some, errors on this thread are recorded here instead of failing the test.
    static EXPECTING: RefCell<Option<Vec<(i32, i32, String)>>> = const { RefCell::new(None) };
}

/// The handler the GPU tests install: an unexpected error panics (failing that test with the
/// message, through the table's C-unwind functions); inside `expect_errors` it is recorded.
unsafe extern "C-unwind" fn test_handler(e: *const LlaisysNvidiaError, _: *mut c_void) {
    let e = unsafe { &*e };
    let msg = unsafe { CStr::from_ptr(e.message) }
        .to_string_lossy()
        .into_owned();
    let recorded = EXPECTING.with(|x| {
        x.borrow_mut()
            .as_mut()
            .map(|v| v.push((e.status, e.cuda_error, msg.clone())))
            .is_some()
    });
    if !recorded {
        panic!("unexpected llaisys-nvidia error: {msg}");
    }
}

/// The llaisys table, with the test handler installed.
pub fn api() -> &'static LlaisysRuntimeAPI {
    llaisys_nvidia::ffi::llaisysNvidiaSetErrorHandler(Some(test_handler), std::ptr::null_mut());
    &TABLE
}

/// Runs `f` and returns the errors it reported as (status, cudaError, message).
pub fn expect_errors(f: impl FnOnce()) -> Vec<(i32, i32, String)> {
    EXPECTING.with(|x| *x.borrow_mut() = Some(Vec::new()));
    f();
    EXPECTING.with(|x| x.borrow_mut().take().unwrap_or_default())
}

/// Fast deterministic pattern (8 bytes at a time) for large buffers.
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    for b in chunks.into_remainder() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// A page-locked host buffer from the table's malloc_host.
pub struct Pinned {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Pinned {
    pub fn new(len: usize) -> Pinned {
        let ptr = unsafe { (api().malloc_host)(len) } as *mut u8;
        assert!(!ptr.is_null() || len == 0);
        Pinned { ptr, len }
    }
    pub fn as_mut(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    pub fn as_ref(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        unsafe { (api().free_host)(self.ptr.cast()) };
    }
}

/// Device memory from the table's malloc_device.
pub struct Dev {
    pub ptr: *mut c_void,
}

impl Dev {
    pub fn new(len: usize) -> Dev {
        let ptr = unsafe { (api().malloc_device)(len) };
        assert!(!ptr.is_null() || len == 0);
        Dev { ptr }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        unsafe { (api().free_device)(self.ptr) };
    }
}

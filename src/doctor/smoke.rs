//! The smoke test: the first context creation, timed, then the llaisys runtime table end to end
//! exactly as a llaisys core calls it (`capi::table::TABLE`): set_device, create_stream, two
//! malloc_device, malloc_host, memcpy_sync H2D -> D2D -> D2H, memcpy_async D2H on the stream,
//! stream_synchronize, device_synchronize, and every free. The data comes back byte for byte or
//! the test fails.
//!
//! The table reports errors through the process-wide error handler, whose default aborts. While
//! the smoke test runs, a handler that returns is installed (failures then come back as the
//! thread's last error, `capi::policy::last`), and the previous one is restored afterwards.

use super::report::{Smoke, SmokeStatus, Step};
use crate::capi::policy::{self, ErrorHandler, LlaisysNvidiaError};
use crate::capi::table::TABLE;
use crate::copy::MemcpyKind;
use crate::error::{Error, Result};
use std::os::raw::{c_int, c_void};
use std::time::Instant;

const H2D: c_int = MemcpyKind::H2D as c_int;
const D2H: c_int = MemcpyKind::D2H as c_int;
const D2D: c_int = MemcpyKind::D2D as c_int;

/// Bytes copied: 1 MiB and an odd tail, so that a copy cut to a round size shows.
pub const SMOKE_BYTES: usize = (1 << 20) + 13;

/// Makes `device` current and creates its primary context (`cudaSetDevice` then `cudaFree(0)`),
/// timed in milliseconds: the cost every process pays once per device.
pub fn create_context(device: i32) -> Result<f64> {
    let t = Instant::now();
    crate::device::create_context(device)?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// A deterministic byte pattern (xorshift64), never all one value.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The first offset where `got` differs from `want`, None when equal.
pub fn first_difference(want: &[u8], got: &[u8]) -> Option<usize> {
    if want.len() != got.len() {
        return Some(want.len().min(got.len()));
    }
    want.iter().zip(got).position(|(a, b)| a != b)
}

/// A handler that returns: the table then returns its failure value and the error stays as the
/// thread's last error.
unsafe extern "C-unwind" fn keep_going(_error: *const LlaisysNvidiaError, _user: *mut c_void) {}

/// Installs `keep_going` and restores the previous handler when dropped.
struct HandlerGuard {
    previous: (ErrorHandler, *mut c_void),
}

impl HandlerGuard {
    fn install() -> HandlerGuard {
        let previous = policy::handler();
        policy::set_handler(Some(keep_going), std::ptr::null_mut());
        HandlerGuard { previous }
    }
}

impl Drop for HandlerGuard {
    fn drop(&mut self) {
        policy::set_handler(self.previous.0, self.previous.1);
    }
}

/// Runs the smoke steps, recording each.
struct Steps(Vec<Step>);

impl Steps {
    /// Calls one table function; a failure is what the table left as the thread's last error.
    fn call<T>(&mut self, name: &str, f: impl FnOnce() -> T) -> Option<T> {
        policy::set_last(None);
        let t = Instant::now();
        let v = f();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let error = policy::last().map(|r| r.message().to_string());
        let ok = error.is_none();
        self.0.push(Step {
            name: name.to_string(),
            ms,
            error,
        });
        ok.then_some(v)
    }

    /// Records a check made here (not a table call).
    fn check(&mut self, name: &str, error: Option<String>) -> bool {
        let ok = error.is_none();
        self.0.push(Step {
            name: name.to_string(),
            ms: 0.0,
            error,
        });
        ok
    }

    fn failed(&self) -> bool {
        self.0.iter().any(|s| s.error.is_some())
    }
}

/// Runs the smoke test on `device` of `count`, given the context creation's outcome. The caller
/// fills in `first_calls`, which it timed.
pub fn run(device: i32, count: i32, context: Option<std::result::Result<f64, Error>>) -> Smoke {
    let skipped = |why: String| Smoke {
        device,
        status: SmokeStatus::Skipped(why),
        first_calls: Vec::new(),
        context_ms: context.clone(),
        bytes: 0,
        steps: Vec::new(),
    };
    if count <= 0 {
        return skipped("no CUDA device".into());
    }
    let mut steps = Steps(Vec::new());
    if device < 0 || device >= count {
        steps.check(
            "choose the device",
            Some(format!(
                "device {device} does not exist: CUDA shows {count} device(s), 0..{}",
                count - 1
            )),
        );
    } else if let Some(Err(e)) = &context {
        steps.check("create the context", Some(e.to_string()));
    } else {
        let _guard = HandlerGuard::install();
        table_round_trip(device, &mut steps);
    }
    let status = if steps.failed() {
        SmokeStatus::Failed
    } else {
        SmokeStatus::Passed
    };
    Smoke {
        device,
        status,
        first_calls: Vec::new(),
        context_ms: context,
        bytes: SMOKE_BYTES,
        steps: steps.0,
    }
}

/// Owned table resources, freed through the table in reverse order whatever happened.
#[derive(Default)]
struct Held {
    stream: Option<*mut c_void>,
    device: Vec<*mut c_void>,
    host: Option<*mut c_void>,
}

fn table_round_trip(device: i32, steps: &mut Steps) {
    let n = SMOKE_BYTES;
    let want = pattern(n, 0x11a1_5e55);
    let mut held = Held::default();
    // SAFETY (every table call below): the arguments follow the table's contract: pointers come
    // from the table's own malloc functions for `n` bytes, or from Vecs of `n` bytes alive
    // across the synchronous calls and the stream synchronize that ends the async one.
    let ok = (|| {
        let seen = steps.call("get_device_count", || unsafe { (TABLE.get_device_count)() })?;
        let count = crate::runtime::device_count().unwrap_or(-1);
        steps.check(
            "get_device_count equals cudaGetDeviceCount",
            (seen != count).then(|| format!("the table says {seen}, cudaGetDeviceCount {count}")),
        );
        steps.call("set_device", || unsafe {
            (TABLE.set_device)(device as c_int)
        })?;
        let stream = steps.call("create_stream", || unsafe { (TABLE.create_stream)() })?;
        held.stream = Some(stream);
        let a = steps.call("malloc_device a", || unsafe { (TABLE.malloc_device)(n) })?;
        held.device.push(a);
        let b = steps.call("malloc_device b", || unsafe { (TABLE.malloc_device)(n) })?;
        held.device.push(b);
        let h = steps.call("malloc_host", || unsafe { (TABLE.malloc_host)(n) })?;
        held.host = Some(h);
        steps.call("memcpy_sync H2D (pageable -> a)", || unsafe {
            (TABLE.memcpy_sync)(a, want.as_ptr().cast(), n, H2D)
        })?;
        steps.call("memcpy_sync D2D (a -> b)", || unsafe {
            (TABLE.memcpy_sync)(b, a, n, D2D)
        })?;
        let mut back = vec![0u8; n];
        steps.call("memcpy_sync D2H (b -> pageable)", || unsafe {
            (TABLE.memcpy_sync)(back.as_mut_ptr().cast(), b, n, D2H)
        })?;
        let diff =
            first_difference(&want, &back).map(|at| mismatch("memcpy_sync", at, &want, &back));
        steps.check("verify the sync round trip byte for byte", diff);
        steps.call("memcpy_async D2H (b -> pinned) on the stream", || unsafe {
            (TABLE.memcpy_async)(h, b, n, D2H, stream)
        })?;
        steps.call("stream_synchronize", || unsafe {
            (TABLE.stream_synchronize)(stream)
        })?;
        // SAFETY: malloc_host returned `n` bytes at `h`; the copy into it has completed.
        let pinned = unsafe { std::slice::from_raw_parts(h.cast::<u8>(), n) };
        let diff =
            first_difference(&want, pinned).map(|at| mismatch("memcpy_async", at, &want, pinned));
        steps.check("verify the async copy byte for byte", diff);
        steps.call("device_synchronize", || unsafe {
            (TABLE.device_synchronize)()
        })
    })();
    let _ = ok;
    // SAFETY: each pointer came from the matching table function and is freed once.
    if let Some(h) = held.host.take() {
        steps.call("free_host", || unsafe { (TABLE.free_host)(h) });
    }
    for p in held.device.drain(..).rev() {
        steps.call("free_device", || unsafe { (TABLE.free_device)(p) });
    }
    if let Some(s) = held.stream.take() {
        steps.call("destroy_stream", || unsafe { (TABLE.destroy_stream)(s) });
    }
}

fn mismatch(how: &str, at: usize, want: &[u8], got: &[u8]) -> String {
    format!(
        "{how}: data differs at byte {at} of {}: wrote {:#04x}, read back {:#04x}",
        want.len(),
        want.get(at).copied().unwrap_or(0),
        got.get(at).copied().unwrap_or(0)
    )
}

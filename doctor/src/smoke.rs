//! The smoke test: the llaisys runtime table's functions end to end, as a llaisys core calls
//! them: get_device_count, set_device, create_stream, two malloc_device, malloc_host,
//! memcpy_sync H2D -> D2D -> D2H, memcpy_async D2H on the stream, stream_synchronize,
//! device_synchronize, and every free. The data comes back byte for byte or the test fails.
//!
//! The calls go through `backend::ops`: the table's bodies as Rust calls that return a
//! `Result`. They never call the library's process-wide error handler (whose default aborts),
//! so nothing here installs or swaps one.

use crate::backend::{self, ops, MemcpyKind};
use crate::report::{Failure, Smoke, SmokeStatus, Step};
use std::os::raw::c_void;
use std::time::Instant;

/// Bytes copied: 1 MiB and an odd tail, so that a copy cut to a round size shows.
pub const SMOKE_BYTES: usize = (1 << 20) + 13;

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

/// Runs the smoke steps, recording each; `announce` hears each step's name before it runs
/// (the watchdog's probe name).
struct Steps<'a> {
    steps: Vec<Step>,
    announce: &'a mut dyn FnMut(&str),
}

impl Steps<'_> {
    /// Calls one table body.
    fn call<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T, Failure>) -> Option<T> {
        (self.announce)(name);
        let t = Instant::now();
        let r = f();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let (v, error) = match r {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e.message)),
        };
        self.steps.push(Step {
            name: name.to_string(),
            ms,
            error,
        });
        v
    }

    /// Records a check made here (not a table call).
    fn check(&mut self, name: &str, error: Option<String>) -> bool {
        let ok = error.is_none();
        self.steps.push(Step {
            name: name.to_string(),
            ms: 0.0,
            error,
        });
        ok
    }

    fn failed(&self) -> bool {
        self.steps.iter().any(|s| s.error.is_some())
    }
}

/// Runs the smoke test on `device` of `count`, given the context creation's outcome (None:
/// not tried). `announce` hears the name of each table call before it is made. The caller
/// fills in `first_calls`, which it timed.
pub fn run(
    device: i32,
    count: i32,
    context: Option<Result<f64, Failure>>,
    announce: &mut dyn FnMut(&str),
) -> Smoke {
    if count <= 0 {
        return Smoke::skipped(device, "no CUDA device", context);
    }
    let mut steps = Steps {
        steps: Vec::new(),
        announce,
    };
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
        steps: steps.steps,
    }
}

/// Table resources held, freed through the table in reverse order whatever happened.
#[derive(Default)]
struct Held {
    stream: Option<ops::TableStream>,
    device: Vec<*mut c_void>,
    host: Option<*mut c_void>,
}

fn table_round_trip(device: i32, steps: &mut Steps) {
    let n = SMOKE_BYTES;
    let want = pattern(n, 0x11a1_5e55);
    let mut held = Held::default();
    (|| {
        let seen = steps.call("get_device_count", || Ok(ops::get_device_count()))?;
        let count = backend::device_count().map_or(-1, |c| c);
        steps.check(
            "get_device_count equals cudaGetDeviceCount",
            (seen != count).then(|| format!("the table says {seen}, cudaGetDeviceCount {count}")),
        );
        steps.call("set_device", || ops::set_device(device))?;
        let stream = steps.call("create_stream", ops::create_stream)?;
        held.stream = Some(stream);
        let a = steps.call("malloc_device a", || ops::malloc_device(n))?;
        held.device.push(a);
        let b = steps.call("malloc_device b", || ops::malloc_device(n))?;
        held.device.push(b);
        let h = steps.call("malloc_host", || ops::malloc_host(n))?;
        held.host = Some(h);
        // The copies: `a` and `b` are device blocks and `h` a pinned block of `n` bytes from
        // the table's own malloc functions; `want` and `back` are Vecs of `n` bytes alive
        // across the synchronous copies and until the stream synchronize that ends the
        // asynchronous one.
        // SAFETY: as just said.
        steps.call("memcpy_sync H2D (pageable -> a)", || unsafe {
            ops::memcpy_sync(a, want.as_ptr().cast(), n, MemcpyKind::H2D)
        })?;
        // SAFETY: as above.
        steps.call("memcpy_sync D2D (a -> b)", || unsafe {
            ops::memcpy_sync(b, a, n, MemcpyKind::D2D)
        })?;
        let mut back = vec![0u8; n];
        // SAFETY: as above.
        steps.call("memcpy_sync D2H (b -> pageable)", || unsafe {
            ops::memcpy_sync(back.as_mut_ptr().cast(), b, n, MemcpyKind::D2H)
        })?;
        let diff =
            first_difference(&want, &back).map(|at| mismatch("memcpy_sync", at, &want, &back));
        steps.check("verify the sync round trip byte for byte", diff);
        // SAFETY: as above; the copy has run once stream_synchronize returns.
        steps.call("memcpy_async D2H (b -> pinned) on the stream", || unsafe {
            ops::memcpy_async(h, b, n, MemcpyKind::D2H, stream)
        })?;
        steps.call("stream_synchronize", || ops::stream_synchronize(stream))?;
        // SAFETY: malloc_host returned `n` bytes at `h`; the copy into it has completed.
        let pinned = unsafe { std::slice::from_raw_parts(h.cast::<u8>(), n) };
        let diff =
            first_difference(&want, pinned).map(|at| mismatch("memcpy_async", at, &want, pinned));
        steps.check("verify the async copy byte for byte", diff);
        steps.call("device_synchronize", ops::device_synchronize)
    })();
    if let Some(h) = held.host.take() {
        // SAFETY: `h` came from malloc_host and is freed once.
        steps.call("free_host", || unsafe { ops::free_host(h) });
    }
    for p in held.device.drain(..).rev() {
        // SAFETY: `p` came from malloc_device and is freed once.
        steps.call("free_device", || unsafe { ops::free_device(p) });
    }
    if let Some(s) = held.stream.take() {
        steps.call("destroy_stream", || ops::destroy_stream(s));
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

//! A seeded random driver of the C ABI: random call sequences with random and hostile
//! arguments (bad kinds, NULL, SIZE_MAX, pointers and streams never handed out, double frees,
//! destroyed streams, copies whose kind does not match their memory). Used by tests/fuzz.rs (no
//! GPU: every CUDA call fails with "no driver") and by the GPU suite (real memory, data checked).
//!
//! What it never does, because the C contract makes it undefined: copy through a pointer that
//! is not valid for the size (freed or too short), or copy small (< 256 KiB, `KIND_CHECK_MIN_BYTES`) buffers with a kind
//! that does not match them (those are left to CUDA).
#![allow(dead_code)]

use llaisys_nvidia::ffi::LlaisysNvidiaError;
use llaisys_nvidia::ffi::TABLE;
use std::cell::RefCell;
use std::os::raw::c_void;
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

thread_local! {
    static ERRORS: RefCell<Vec<(i32, i32)>> = const { RefCell::new(Vec::new()) };
    static COUNTS: RefCell<[u64; 5]> = const { RefCell::new([0; 5]) };
}

unsafe extern "C-unwind" fn record(e: *const LlaisysNvidiaError, _: *mut c_void) {
    let e = unsafe { &*e };
    ERRORS.with(|v| v.borrow_mut().push((e.status, e.cuda_error)));
    COUNTS.with(|c| c.borrow_mut()[e.status.clamp(0, 4) as usize] += 1);
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seed: u64,
    pub ops: u64,
    pub errors_by_status: [u64; 5],
    pub data_checks: u64,
}

struct Buf {
    ptr: *mut c_void,
    len: usize,
    /// The bytes it should hold (device and pinned buffers, when a GPU is there).
    shadow: Option<Vec<u8>>,
}

/// Runs random calls for `time` or `max_ops`, whichever ends first. Panics on a broken
/// invariant (wrong status, data mismatch, leaked statistics).
pub fn run(seed: u64, time: Duration, max_ops: u64, gpu: bool) -> Outcome {
    // One run at a time: the handler and the statistics are process-wide.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    llaisys_nvidia::ffi::llaisysNvidiaSetErrorHandler(Some(record), std::ptr::null_mut());
    let api = &TABLE;
    let mut rng = Rng::new(seed);
    let mut out = Outcome {
        seed,
        ..Outcome::default()
    };
    let mut dev: Vec<Buf> = Vec::new();
    let mut host: Vec<Buf> = Vec::new();
    let mut streams: Vec<*mut c_void> = Vec::new();
    let mut dead_ptrs: Vec<*mut c_void> = Vec::new();
    let mut dead_streams: Vec<*mut c_void> = Vec::new();
    let mut local = vec![0u8; 1 << 20];
    let count = unsafe { (api.get_device_count)() };
    let start = Instant::now();
    let d0 = llaisys_nvidia::ops::memory::device_memory_stats(-1).expect("stats");
    let h0 = llaisys_nvidia::ops::memory::host_memory_stats();
    let sizes = [0usize, 1, 7, 4096, 65536, 100_000, 1 << 20, 3 << 20];
    while start.elapsed() < time && out.ops < max_ops {
        out.ops += 1;
        let op = rng.below(16);
        let _ = take();
        match op {
            0 => {
                let n = unsafe { (api.get_device_count)() };
                assert_eq!(n, count, "device count changed");
            }
            1 => {
                let id = [-2, -1, 0, count, count + 1, 1000][rng.below(6) as usize];
                unsafe { (api.set_device)(id) };
                let errs = take();
                if gpu && (0..count).contains(&id) {
                    assert!(errs.is_empty(), "set_device({id}) failed: {errs:?}");
                } else {
                    assert_eq!(errs.len(), 1, "set_device({id}) not reported: {errs:?}");
                }
                if gpu {
                    unsafe { (api.set_device)(0) };
                }
            }
            2 => {
                let s = unsafe { (api.create_stream)() };
                let errs = take();
                if gpu {
                    assert!(!s.is_null() && errs.is_empty(), "{errs:?}");
                    dead_streams.retain(|&d| d != s);
                    streams.push(s);
                } else {
                    assert!(s.is_null() && errs.len() == 1);
                }
            }
            3 => {
                // destroy: live, already destroyed, foreign, or NULL
                let pick = rng.below(4);
                let (s, ok) = match pick {
                    0 if !streams.is_empty() => {
                        let i = rng.below(streams.len() as u64) as usize;
                        (streams.swap_remove(i), true)
                    }
                    1 if !dead_streams.is_empty() => (
                        dead_streams[rng.below(dead_streams.len() as u64) as usize],
                        false,
                    ),
                    2 => ((0x1000 + rng.below(1 << 20) * 16) as *mut c_void, false),
                    _ => (std::ptr::null_mut(), true),
                };
                unsafe { (api.destroy_stream)(s) };
                let errs = take();
                if ok {
                    assert!(errs.is_empty(), "destroy_stream({s:p}): {errs:?}");
                    if !s.is_null() {
                        dead_streams.push(s);
                    }
                } else {
                    assert_eq!(errs.len(), 1, "bad stream {s:p} accepted");
                    assert_eq!(errs[0].0, 3);
                }
            }
            4 => {
                let s = pick_stream(&mut rng, &streams, &dead_streams);
                unsafe { (api.stream_synchronize)(s.0) };
                check_stream_errors(take(), s.1, gpu);
            }
            5 | 6 => {
                let on_device = op == 5;
                let size = match rng.below(10) {
                    0 => usize::MAX,
                    1 => isize::MAX as usize + 1,
                    _ => sizes[rng.below(sizes.len() as u64) as usize],
                };
                let p = unsafe {
                    if on_device {
                        (api.malloc_device)(size)
                    } else {
                        (api.malloc_host)(size)
                    }
                };
                let errs = take();
                if size > isize::MAX as usize {
                    assert!(p.is_null() && errs.len() == 1 && errs[0].0 == 3, "{errs:?}");
                } else if size == 0 {
                    assert!(p.is_null() && errs.is_empty(), "{errs:?}");
                } else if gpu {
                    assert!(!p.is_null() && errs.is_empty(), "{errs:?}");
                    // A freed address handed out again is live, not dead.
                    dead_ptrs.retain(|&d| d != p);
                    let shadow = if size <= (1 << 20) {
                        let mut v = vec![0u8; size];
                        fill(&mut v, rng.next());
                        unsafe {
                            if on_device {
                                (api.memcpy_sync)(p, v.as_ptr().cast(), size, 1);
                            } else {
                                std::ptr::copy_nonoverlapping(v.as_ptr(), p.cast::<u8>(), size);
                            }
                        }
                        Some(v)
                    } else {
                        None
                    };
                    let b = Buf {
                        ptr: p,
                        len: size,
                        shadow,
                    };
                    if on_device {
                        dev.push(b)
                    } else {
                        host.push(b)
                    }
                } else {
                    assert!(p.is_null() && errs.len() == 1, "{errs:?}");
                }
            }
            7 | 8 => {
                let on_device = op == 7;
                let list = if on_device { &mut dev } else { &mut host };
                // free: live, freed, never handed out, the other kind's pointer, NULL
                let (p, ok) = match rng.below(5) {
                    0 | 1 if !list.is_empty() => {
                        let i = rng.below(list.len() as u64) as usize;
                        let b = list.swap_remove(i);
                        if let Some(shadow) = &b.shadow {
                            if gpu {
                                check_buf(&b, shadow, on_device);
                                out.data_checks += 1;
                            }
                        }
                        (b.ptr, true)
                    }
                    2 if !dead_ptrs.is_empty() => {
                        (dead_ptrs[rng.below(dead_ptrs.len() as u64) as usize], false)
                    }
                    3 => (
                        local
                            .as_mut_ptr()
                            .wrapping_add(rng.below(64) as usize)
                            .cast(),
                        false,
                    ),
                    _ => (std::ptr::null_mut(), true),
                };
                unsafe {
                    if on_device {
                        (api.free_device)(p)
                    } else {
                        (api.free_host)(p)
                    }
                };
                let errs = take();
                if ok {
                    assert!(errs.is_empty(), "free of a live pointer: {errs:?}");
                    if !p.is_null() {
                        dead_ptrs.push(p);
                    }
                } else {
                    assert_eq!(errs.len(), 1, "bad free of {p:p} accepted");
                    assert_eq!(errs[0].0, 3);
                }
            }
            9..=12 => {
                // A valid copy between buffers we hold (data checked on a GPU).
                if !gpu {
                    // Host-only: H2H between local buffers, sync and async on NULL.
                    let n = rng.below(1 << 19) as usize;
                    let mut dst = vec![0u8; n];
                    let mut src = vec![0u8; n];
                    fill(&mut src, rng.next());
                    unsafe {
                        if rng.chance(50) {
                            (api.memcpy_sync)(dst.as_mut_ptr().cast(), src.as_ptr().cast(), n, 0)
                        } else {
                            (api.memcpy_async)(
                                dst.as_mut_ptr().cast(),
                                src.as_ptr().cast(),
                                n,
                                0,
                                std::ptr::null_mut(),
                            )
                        }
                    };
                    assert!(take().is_empty());
                    assert!(dst == src, "H2H data");
                    out.data_checks += 1;
                } else {
                    valid_gpu_copy(&mut rng, &mut dev, &mut host, &streams, &mut out);
                }
            }
            13 => {
                // Bad kinds, NULL with a size, SIZE_MAX.
                let mut a = [0u8; 64];
                let b = [1u8; 64];
                let (dst, src, size, kind) = match rng.below(4) {
                    0 => (
                        a.as_mut_ptr().cast(),
                        b.as_ptr().cast(),
                        64,
                        [4, 7, -1, 1000][rng.below(4) as usize],
                    ),
                    1 => (std::ptr::null_mut(), b.as_ptr().cast(), 64, 0),
                    2 => (a.as_mut_ptr().cast(), std::ptr::null(), 64, 0),
                    _ => (a.as_mut_ptr().cast(), b.as_ptr().cast(), usize::MAX, 0),
                };
                unsafe {
                    if rng.chance(50) {
                        (api.memcpy_sync)(dst, src, size, kind)
                    } else {
                        (api.memcpy_async)(dst, src, size, kind, std::ptr::null_mut())
                    }
                };
                let errs = take();
                assert!(errs.len() == 1 && errs[0].0 == 3, "{errs:?}");
                assert!(a == [0u8; 64], "a refused copy wrote data");
            }
            14 => {
                // A copy on a bad stream.
                let mut a = vec![0u8; 4096];
                let b = vec![1u8; 4096];
                let s = if !dead_streams.is_empty() && rng.chance(50) {
                    dead_streams[rng.below(dead_streams.len() as u64) as usize]
                } else {
                    (0x2000 + rng.below(1 << 20) * 16) as *mut c_void
                };
                unsafe { (api.memcpy_async)(a.as_mut_ptr().cast(), b.as_ptr().cast(), 4096, 0, s) };
                let errs = take();
                assert!(
                    errs.len() == 1 && errs[0].0 == 3,
                    "bad stream accepted: {errs:?}"
                );
                assert!(a.iter().all(|&x| x == 0));
            }
            _ => {
                // Kind mismatch on a large copy: refused before CUDA, nothing written. Without
                // a GPU there is no device memory to mismatch: cudaMemcpy says why (35/100).
                let n = llaisys_nvidia::ops::copies::KIND_CHECK_MIN_BYTES;
                let mut a = vec![0u8; n];
                let b = vec![1u8; n];
                let kind = [1, 2, 3][rng.below(3) as usize];
                unsafe { (api.memcpy_sync)(a.as_mut_ptr().cast(), b.as_ptr().cast(), n, kind) };
                let errs = take();
                let refused = if gpu {
                    errs.len() == 1 && errs[0].0 == 3
                } else {
                    errs.len() == 1 && errs[0].0 == 1 && [35, 100].contains(&errs[0].1)
                };
                assert!(refused, "kind {kind} on host memory accepted: {errs:?}");
                assert!(a.iter().all(|&x| x == 0));
            }
        }
    }
    out.errors_by_status = COUNTS.with(|c| std::mem::take(&mut *c.borrow_mut()));
    // Free everything; the statistics must come back to zero in use.
    unsafe {
        for b in dev.drain(..) {
            (api.free_device)(b.ptr);
        }
        for b in host.drain(..) {
            (api.free_host)(b.ptr);
        }
        for s in streams.drain(..) {
            (api.destroy_stream)(s);
        }
        (api.device_synchronize)();
    }
    let leftover = take();
    assert!(
        leftover.iter().all(|&(s, _)| !gpu || s == 0),
        "cleanup errors: {leftover:?}"
    );
    let d = llaisys_nvidia::ops::memory::device_memory_stats(-1).expect("stats");
    let h = llaisys_nvidia::ops::memory::host_memory_stats();
    assert_eq!(
        d.in_use_bytes, d0.in_use_bytes,
        "device bytes still in use after freeing all: {d:?}"
    );
    assert_eq!(
        h.in_use_bytes, h0.in_use_bytes,
        "pinned bytes still in use after freeing all: {h:?}"
    );
    assert_eq!(d.alloc_count - d0.alloc_count, d.free_count - d0.free_count);
    assert_eq!(h.alloc_count - h0.alloc_count, h.free_count - h0.free_count);
    llaisys_nvidia::ffi::llaisysNvidiaSetErrorHandler(None, std::ptr::null_mut());
    out
}

fn take() -> Vec<(i32, i32)> {
    ERRORS.with(|v| std::mem::take(&mut *v.borrow_mut()))
}

fn fill(v: &mut [u8], seed: u64) {
    let mut r = Rng::new(seed);
    for c in v.chunks_mut(8) {
        let x = r.next().to_le_bytes();
        c.copy_from_slice(&x[..c.len()]);
    }
}

/// (stream, whether it is acceptable)
fn pick_stream(rng: &mut Rng, live: &[*mut c_void], dead: &[*mut c_void]) -> (*mut c_void, bool) {
    match rng.below(4) {
        0 if !live.is_empty() => (live[rng.below(live.len() as u64) as usize], true),
        1 if !dead.is_empty() => (dead[rng.below(dead.len() as u64) as usize], false),
        2 => ((0x3000 + rng.below(1 << 20) * 16) as *mut c_void, false),
        _ => (std::ptr::null_mut(), true),
    }
}

fn check_stream_errors(errs: Vec<(i32, i32)>, acceptable: bool, gpu: bool) {
    if acceptable {
        // Without a driver, synchronizing the legacy stream still fails (status 1).
        assert!(errs.iter().all(|&(s, _)| s == 1 && !gpu), "{errs:?}");
    } else {
        assert!(
            errs.len() == 1 && errs[0].0 == 3,
            "bad stream accepted: {errs:?}"
        );
    }
}

fn check_buf(b: &Buf, shadow: &[u8], on_device: bool) {
    let mut back = vec![0u8; b.len];
    unsafe {
        if on_device {
            (TABLE.memcpy_sync)(back.as_mut_ptr().cast(), b.ptr, b.len, 2);
        } else {
            std::ptr::copy_nonoverlapping(b.ptr.cast::<u8>(), back.as_mut_ptr(), b.len);
        }
    }
    assert!(
        back == shadow,
        "buffer {:p} ({} bytes) lost its data",
        b.ptr,
        b.len
    );
}

fn valid_gpu_copy(
    rng: &mut Rng,
    dev: &mut [Buf],
    host: &mut [Buf],
    streams: &[*mut c_void],
    out: &mut Outcome,
) {
    let api = &TABLE;
    let with_shadow = |v: &[Buf]| -> Vec<usize> {
        v.iter()
            .enumerate()
            .filter(|(_, b)| b.shadow.is_some())
            .map(|(i, _)| i)
            .collect()
    };
    let (d, h) = (with_shadow(dev), with_shadow(host));
    if d.is_empty() {
        return;
    }
    let di = d[rng.below(d.len() as u64) as usize];
    let stream = if !streams.is_empty() && rng.chance(50) {
        streams[rng.below(streams.len() as u64) as usize]
    } else {
        std::ptr::null_mut()
    };
    let sync = |s: *mut c_void| unsafe { (api.stream_synchronize)(s) };
    match rng.below(3) {
        0 if !h.is_empty() => {
            // pinned -> device, async, then check
            let hi = h[rng.below(h.len() as u64) as usize];
            let n = dev[di].len.min(host[hi].len);
            let src = host[hi].shadow.clone().unwrap_or_default();
            unsafe { (api.memcpy_async)(dev[di].ptr, host[hi].ptr, n, 1, stream) };
            sync(stream);
            if let Some(s) = dev[di].shadow.as_mut() {
                s[..n].copy_from_slice(&src[..n]);
            }
        }
        1 => {
            // pageable -> device, sync
            let n = dev[di].len;
            let mut v = vec![0u8; n];
            fill(&mut v, rng.next());
            unsafe { (api.memcpy_sync)(dev[di].ptr, v.as_ptr().cast(), n, 1) };
            dev[di].shadow = Some(v);
        }
        _ => {
            // device -> device
            let dj = d[rng.below(d.len() as u64) as usize];
            if dj == di {
                return;
            }
            let n = dev[di].len.min(dev[dj].len);
            let src = dev[dj].shadow.clone().unwrap_or_default();
            unsafe { (api.memcpy_async)(dev[di].ptr, dev[dj].ptr, n, 3, stream) };
            sync(stream);
            if let Some(s) = dev[di].shadow.as_mut() {
                s[..n].copy_from_slice(&src[..n]);
            }
        }
    }
    let errs = ERRORS.with(|v| std::mem::take(&mut *v.borrow_mut()));
    assert!(errs.is_empty(), "a valid copy failed: {errs:?}");
    check_buf(
        &dev[di],
        dev[di].shadow.as_deref().unwrap_or_default(),
        true,
    );
    out.data_checks += 1;
}

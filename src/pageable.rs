//! Fast copies between pageable host memory and the device.
//!
//! cudaMemcpy from pageable memory goes through the driver's own small staging buffers with one
//! host thread (8-16 GB/s on a 55 GB/s link). Here large copies are cut into chunks that go
//! through our own pinned staging buffers: several host threads copy a chunk between the
//! caller's memory and a staging buffer while the copy engine moves the previous chunk, all in
//! the caller's stream order.
//!
//! - H2D: chunk -> staging (threads), then cudaMemcpyAsync staging -> device on the stream.
//!   Returns once the caller's buffer has been read (as CUDA does); the staging buffers go back
//!   to the pool when their events complete.
//! - D2H: cudaMemcpyAsync device -> staging on the stream, wait for it, staging -> caller
//!   (threads). Returns with the data in the caller's buffer (as CUDA does).
//!
//! Switches: `LLAISYS_NVIDIA_PAGEABLE_FAST=0` turns it off; it applies from
//! `LLAISYS_NVIDIA_PAGEABLE_MIN_BYTES` (default 1 MiB) up; smaller copies use cudaMemcpy.
//! `LLAISYS_NVIDIA_PAGEABLE_THREADS` sets the host threads (default: 3/4 of the cores, at most
//! 12).

use crate::copy::{self, MemcpyKind};
use crate::cudart::StreamHandle;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::sync::lock;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The largest chunk (one staging buffer).
const CHUNK: usize = 8 << 20;
/// Staging buffers per set: chunks in flight at once.
const SLOTS: usize = 4;
/// Sets kept for reuse.
const MAX_SETS: usize = 4;

/// Which way a staged copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Pageable host memory to device memory.
    HostToDevice,
    /// Device memory to pageable host memory.
    DeviceToHost,
}

/// The settings, read once per process.
pub struct Config {
    /// Whether the fast path is on.
    pub enabled: bool,
    /// The smallest copy that takes it.
    pub min_bytes: usize,
    /// Host threads that copy (the caller included).
    pub threads: usize,
}

/// The process's settings.
pub(crate) fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let threads = crate::env::number("LLAISYS_NVIDIA_PAGEABLE_THREADS")
            .unwrap_or_else(|| {
                // Three quarters of the cores, at most 12: on the H200 machine (16 cores) 12
                // threads moved 41-47 GB/s, 8 threads 28-38 GB/s (benchmark, docs/benchmark.md).
                let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
                (cores * 3 / 4).clamp(1, 12)
            })
            .clamp(1, 64);
        Config {
            enabled: crate::env::switch_on("LLAISYS_NVIDIA_PAGEABLE_FAST"),
            min_bytes: crate::env::number("LLAISYS_NVIDIA_PAGEABLE_MIN_BYTES").unwrap_or(1 << 20),
            threads,
        }
    })
}

/// True when a copy of `size` bytes between pageable memory and the device should be staged.
pub(crate) fn wanted(size: usize) -> bool {
    let c = config();
    c.enabled && size >= c.min_bytes
}

// ---- staging buffers ------------------------------------------------------------------------

struct Slot {
    buf: *mut u8,
    /// The event of the slot's last use, made on `device` (events are per device); None before
    /// the first use.
    event: Option<Event>,
    device: i32,
    busy: bool,
}

struct Set {
    slots: Vec<Slot>,
}

// SAFETY: the raw pointers are pinned buffers owned by the set, used by one copy at a time (the
// set is taken out of the pool while in use).
unsafe impl Send for Set {}

static SETS: Mutex<Vec<Set>> = Mutex::new(Vec::new());

impl Set {
    fn new() -> Result<Set> {
        let mut slots: Vec<Slot> = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            let p = match crate::memory::alloc_host_portable(CHUNK) {
                Ok(p) => p,
                Err(e) => {
                    // The buffers made so far were never used; the allocation failure is the
                    // error.
                    let _ = Set { slots }.free();
                    return Err(e);
                }
            };
            slots.push(Slot {
                buf: p.cast(),
                event: None,
                device: -1,
                busy: false,
            });
        }
        Ok(Set { slots })
    }

    /// True when no slot waits on work that has not completed.
    fn idle(&mut self) -> bool {
        self.slots.iter_mut().all(|s| {
            if s.busy && matches!(s.event.as_ref().map(Event::query), Some(Ok(true))) {
                s.busy = false;
            }
            !s.busy
        })
    }

    /// Makes slot `i` ready for a copy on `device`: waits for its last use, makes its event.
    fn prepare(&mut self, i: usize, device: i32) -> Result<()> {
        let s = &mut self.slots[i];
        s.wait()?;
        if s.event.is_none() || s.device != device {
            s.event = None;
            s.event = Some(Event::on_device(device)?);
            s.device = device;
        }
        Ok(())
    }

    /// Frees an idle set's buffers and events; the first failure is returned.
    fn free(self) -> Result<()> {
        let mut first_err = None;
        for slot in self.slots {
            // SAFETY: our staging buffer, idle (no copy in flight reads or writes it).
            if let Err(e) = unsafe { crate::memory::free_host(slot.buf.cast()) } {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Records slot `i`'s event on `stream` (of the slot's device, see `prepare`).
    ///
    /// # Safety
    /// `stream` is NULL or a live stream of the device the slot was prepared for.
    unsafe fn record(&mut self, i: usize, stream: StreamHandle) -> Result<()> {
        let s = &mut self.slots[i];
        if let Some(e) = &s.event {
            // SAFETY: the caller's contract.
            unsafe { e.record_raw(stream) }?;
            s.busy = true;
        }
        Ok(())
    }
}

impl Slot {
    /// Waits for the slot's last use.
    fn wait(&mut self) -> Result<()> {
        if self.busy {
            if let Some(e) = &self.event {
                e.synchronize()?;
            }
            self.busy = false;
        }
        Ok(())
    }
}

/// Takes an idle staging set (or makes one).
fn take_set() -> Result<Set> {
    {
        let mut sets = lock(&SETS);
        if let Some(i) = sets.iter_mut().position(Set::idle) {
            return Ok(sets.swap_remove(i));
        }
        // All busy with earlier asynchronous copies: reuse the oldest (its slots are waited for
        // one by one) once enough sets exist.
        if sets.len() >= MAX_SETS {
            return Ok(sets.remove(0));
        }
    }
    Set::new()
}

/// Returns a set to the pool; idle sets beyond `MAX_SETS` (left by many copies at once) are
/// freed.
fn give_back(set: Set) {
    let extra = {
        let mut sets = lock(&SETS);
        sets.push(set);
        let mut extra = Vec::new();
        while sets.len() > MAX_SETS {
            match sets.iter_mut().position(Set::idle) {
                Some(i) => extra.push(sets.swap_remove(i)),
                None => break,
            }
        }
        extra
    };
    for set in extra {
        // Nobody to tell from here; release_staging reports such failures.
        let _ = set.free();
    }
}

/// Frees the staging buffers no copy is using (waiting for copies still in flight on them).
pub(crate) fn release_staging() -> Result<()> {
    let sets = std::mem::take(&mut *lock(&SETS));
    let mut first_err = None;
    for mut set in sets {
        for slot in &mut set.slots {
            if let Err(e) = slot.wait() {
                first_err.get_or_insert(e);
            }
        }
        if let Err(e) = set.free() {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

// ---- parallel host copies -------------------------------------------------------------------

/// One parallel copy, cut into pieces that the caller and the workers claim.
struct Job {
    dst: usize,
    src: usize,
    len: usize,
    piece: usize,
    pieces: usize,
    next: AtomicUsize,
    done: AtomicUsize,
}

impl Job {
    /// Claims and copies pieces until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.pieces {
                return;
            }
            let off = i * self.piece;
            let n = self.piece.min(self.len - off);
            // SAFETY: the submitter keeps both ranges alive and disjoint until `done` counts
            // every piece; pieces do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (self.src + off) as *const u8,
                    (self.dst + off) as *mut u8,
                    n,
                )
            };
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// Workers wait for a new job by spinning a short while (copies come in bursts of chunks),
/// then park.
struct Workers {
    generation: AtomicU64,
    current: Mutex<Option<Arc<Job>>>,
    /// One job at a time.
    submit: Mutex<()>,
}

static WORKERS: Workers = Workers {
    generation: AtomicU64::new(0),
    current: Mutex::new(None),
    submit: Mutex::new(()),
};

/// The worker threads, started on first use.
fn handles() -> &'static [std::thread::Thread] {
    static HANDLES: OnceLock<Vec<std::thread::Thread>> = OnceLock::new();
    HANDLES.get_or_init(|| {
        (0..config().threads.saturating_sub(1))
            .filter_map(|i| {
                std::thread::Builder::new()
                    .name(format!("llaisys-nvidia-copy-{i}"))
                    .spawn(|| worker_loop(&WORKERS))
                    .ok()
                    .map(|h| h.thread().clone())
            })
            .collect()
    })
}

fn worker_loop(w: &'static Workers) {
    // Spin this long after a job before parking: the next chunk of a copy usually comes sooner,
    // and a short spin steals little from other work.
    const SPIN: std::time::Duration = std::time::Duration::from_micros(250);
    let mut seen = 0u64;
    loop {
        let idle_since = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            let g = w.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            spins = spins.wrapping_add(1);
            if spins % 64 != 0 || idle_since.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::park_timeout(std::time::Duration::from_millis(50));
            }
        }
        let job = lock(&w.current).clone();
        if let Some(job) = job {
            job.work();
        }
    }
}

/// Copies `len` bytes with the caller and the workers together.
///
/// # Safety
/// `dst` and `src` are valid for `len` bytes and do not overlap.
unsafe fn par_copy(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller's contract, for every copy below.
    unsafe { par_copy_inner(dst, src, len) }
}

/// # Safety
/// As `par_copy`.
unsafe fn par_copy_inner(dst: *mut u8, src: *const u8, len: usize) {
    const MIN_PIECE: usize = 128 << 10;
    let w = &WORKERS;
    let threads = handles();
    let parts = (len / MIN_PIECE).clamp(1, config().threads * 2);
    if parts == 1 || threads.is_empty() {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let piece = len.div_ceil(parts).next_multiple_of(64);
    let job = Arc::new(Job {
        dst: dst as usize,
        src: src as usize,
        len,
        piece,
        pieces: len.div_ceil(piece),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    let _one_at_a_time = lock(&w.submit);
    *lock(&w.current) = Some(job.clone());
    w.generation.fetch_add(1, Ordering::Release);
    for t in threads {
        t.unpark();
    }
    job.work();
    while job.done.load(Ordering::Acquire) < job.pieces {
        std::hint::spin_loop();
    }
    *lock(&w.current) = None;
}

// ---- the staged copy ------------------------------------------------------------------------

/// Copies `size` bytes between pageable `host` memory and `device` memory through pinned
/// staging, on `stream` (NULL: the legacy default stream) of `stream_device` (None: NULL, the
/// current device). With `wait` the copy is complete on return; without it an H2D copy may still
/// be in flight (the caller's buffer is already read).
///
/// # Safety
/// `host` and `device` are valid for `size` bytes; `device` is device memory; `stream` is NULL
/// or a live stream.
pub(crate) unsafe fn copy(
    direction: Direction,
    device: *mut c_void,
    host: *mut c_void,
    size: usize,
    stream: StreamHandle,
    stream_device: Option<i32>,
    wait: bool,
) -> Result<()> {
    // Events are recorded on `stream`, so they are made on its device.
    let stream_device = match stream_device {
        Some(d) => d,
        None if stream.is_null() => crate::device::current()?,
        // SAFETY: the caller's contract: a live stream.
        None => unsafe { crate::stream::device_of(stream) }?,
    };
    let mut set = take_set()?;
    // SAFETY: the caller's contract; the set's slots are prepared for `stream_device`.
    let result = unsafe {
        match direction {
            Direction::HostToDevice => h2d(
                &mut set,
                stream_device,
                device.cast(),
                host.cast(),
                size,
                stream,
            ),
            Direction::DeviceToHost => d2h(
                &mut set,
                stream_device,
                host.cast(),
                device.cast(),
                size,
                stream,
            ),
        }
    };
    let result = result.and_then(|()| {
        if wait && direction == Direction::HostToDevice {
            set.slots.iter_mut().try_for_each(Slot::wait)?;
        }
        Ok(())
    });
    if result.is_err() {
        // A chunk may be queued without its event: reuse the set only once the stream is idle;
        // if even that fails, the set is dropped (its buffers leak rather than be overwritten
        // while a copy may still read them).
        // SAFETY: `stream` is NULL or a live stream (the caller's contract).
        if unsafe { crate::stream::synchronize(stream) }.is_ok() {
            for slot in &mut set.slots {
                slot.busy = false;
            }
            give_back(set);
        } else {
            crate::runtime::take_last_cuda_error();
        }
    } else {
        give_back(set);
    }
    result.map_err(|e| {
        Error::cuda(
            e.call(),
            e.cuda_error(),
            format!(
                "{} [staged pageable copy {direction:?} size={size} stream={stream:p}]",
                e.detail()
            ),
        )
    })
}

/// The chunk size for a copy of `size` bytes: about a quarter of it, so that even a 4 MiB copy
/// overlaps host copying with the copy engine, at most one staging buffer.
fn chunk_for(size: usize) -> usize {
    (size / 4)
        .next_multiple_of(64 << 10)
        .clamp(512 << 10, CHUNK)
}

/// Queues one chunk's cudaMemcpyAsync between a staging buffer and the device.
///
/// # Safety
/// `dst`/`src` are valid for `n` bytes (staging buffer one side, device memory the other) until
/// the copy has run; `stream` is NULL or a live stream.
unsafe fn chunk_copy(
    dst: *mut u8,
    src: *const u8,
    n: usize,
    direction: Direction,
    stream: StreamHandle,
    off: usize,
) -> Result<()> {
    let kind = match direction {
        Direction::HostToDevice => MemcpyKind::H2D,
        Direction::DeviceToHost => MemcpyKind::D2H,
    };
    // SAFETY: the caller's contract.
    unsafe { copy::memcpy_async(dst.cast(), src.cast(), n, kind, stream) }
        .map_err(|e| Error::cuda(e.call(), e.cuda_error(), format!("chunk at {off}")))
}

/// # Safety
/// `dst` is device memory and `src` pageable memory, both valid for `size` bytes; `stream` is
/// NULL or a live stream of `device_id`.
unsafe fn h2d(
    set: &mut Set,
    device_id: i32,
    dst: *mut u8,
    src: *const u8,
    size: usize,
    stream: StreamHandle,
) -> Result<()> {
    let chunk = chunk_for(size);
    let mut off = 0;
    let mut i = 0;
    while off < size {
        let n = chunk.min(size - off);
        let slot = i % SLOTS;
        set.prepare(slot, device_id)?;
        let buf = set.slots[slot].buf;
        // SAFETY: the caller's contract for `src`; `buf` is an idle staging buffer (prepared)
        // of CHUNK >= n bytes.
        unsafe {
            par_copy(buf, src.add(off), n);
            chunk_copy(dst.add(off), buf, n, Direction::HostToDevice, stream, off)?;
            set.record(slot, stream)?;
        }
        off += n;
        i += 1;
    }
    Ok(())
}

/// # Safety
/// `dst` is pageable memory and `src` device memory, both valid for `size` bytes; `stream` is
/// NULL or a live stream of `device_id`.
unsafe fn d2h(
    set: &mut Set,
    device_id: i32,
    dst: *mut u8,
    src: *const u8,
    size: usize,
    stream: StreamHandle,
) -> Result<()> {
    let chunk = chunk_for(size);
    let chunks = size.div_ceil(chunk);
    let enqueue = |set: &mut Set, k: usize| -> Result<()> {
        let slot = k % SLOTS;
        let off = k * chunk;
        let n = chunk.min(size - off);
        set.prepare(slot, device_id)?;
        let buf = set.slots[slot].buf;
        // SAFETY: the caller's contract for `src`; `buf` is an idle staging buffer of CHUNK
        // >= n bytes.
        unsafe {
            chunk_copy(buf, src.add(off), n, Direction::DeviceToHost, stream, off)?;
            set.record(slot, stream)
        }
    };
    // Keep SLOTS - 1 chunks queued ahead of the one being copied out.
    for k in 0..chunks.min(SLOTS - 1) {
        enqueue(set, k)?;
    }
    for k in 0..chunks {
        if k + SLOTS - 1 < chunks {
            enqueue(set, k + SLOTS - 1)?;
        }
        let slot = k % SLOTS;
        set.slots[slot].wait()?;
        let off = k * chunk;
        // SAFETY: the chunk has landed in the staging buffer (waited); the caller's contract
        // for `dst`.
        unsafe { par_copy(dst.add(off), set.slots[slot].buf, chunk.min(size - off)) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn chunks_are_bounded_and_aligned() {
        assert_eq!(chunk_for(4 << 20), 1 << 20);
        assert_eq!(chunk_for(1 << 20), 512 << 10);
        assert_eq!(chunk_for(1 << 30), CHUNK);
        assert_eq!(chunk_for((64 << 20) + 3) % (64 << 10), 0);
    }

    #[test]
    fn par_copy_copies_every_byte_of_every_size() {
        for (i, len) in [
            1usize,
            63,
            4096,
            (128 << 10) + 1,
            1 << 20,
            (3 << 20) + 17,
            9 << 20,
        ]
        .into_iter()
        .enumerate()
        {
            let src = pattern(len, i as u8);
            let mut dst = vec![0u8; len];
            // SAFETY: both vectors hold `len` bytes and are distinct.
            unsafe { par_copy(dst.as_mut_ptr(), src.as_ptr(), len) };
            assert!(dst == src, "len {len}");
        }
    }

    #[test]
    fn par_copy_many_jobs_from_many_threads() {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for k in 0..200 {
                        let len = (256 << 10) + k * 4099 + t;
                        let src = pattern(len, (k + t) as u8);
                        let mut dst = vec![0u8; len];
                        // SAFETY: as above.
                        unsafe { par_copy(dst.as_mut_ptr(), src.as_ptr(), len) };
                        assert!(dst == src, "thread {t} job {k}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("copy thread");
        }
    }
}

//! A developer tool, `LLAISYS_NVIDIA_PAGEABLE_TRACE=N`: every N-th staged copy writes one line
//! to stderr with the time spent in each phase (waiting for a staging slot, host copying,
//! queuing DMAs, recording events) and the moments of its steps, to find where a copy's time
//! goes (docs/variables.md). Off (no clock read) when unset or 0.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// The phases of a staged copy.
#[derive(Clone, Copy)]
pub(super) enum Phase {
    /// Waiting until a slot's last use has completed (its event), or ordering a DMA after it
    /// on the stream (`cudaStreamWaitEvent`).
    Wait = 0,
    /// Copying host memory (all threads together).
    HostCopy = 1,
    /// cudaMemcpyAsync of a chunk.
    Enqueue = 2,
    /// cudaEventRecord after a chunk.
    Record = 3,
}

const NAMES: [&str; 4] = ["slot wait", "host copy", "enqueue", "record"];

fn every() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| crate::util::env::number("LLAISYS_NVIDIA_PAGEABLE_TRACE").unwrap_or(0))
}

/// When the process's first traced copy started (the `from` of each line counts from it).
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// One copy's clock: inactive unless this copy is traced.
pub(super) struct Trace {
    start: Option<Instant>,
    spent: Cell<[u64; 4]>,
    counts: Cell<[u32; 4]>,
    /// Moments of a copy's steps (`mark`): what, which chunk, ns since the start; and totals
    /// (`total`): what, of how many, ns in all (the last field true).
    marks: RefCell<Vec<(&'static str, usize, u64, bool)>>,
}

impl Trace {
    /// Starts a copy's trace (active for every N-th copy).
    pub(super) fn start() -> Trace {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let n = every();
        let on = n > 0 && SEQ.fetch_add(1, Ordering::Relaxed) % n == 0;
        let start = on.then(Instant::now);
        if let Some(at) = start {
            EPOCH.get_or_init(|| at);
        }
        Trace {
            start,
            spent: Cell::new([0; 4]),
            counts: Cell::new([0; 4]),
            marks: RefCell::new(Vec::new()),
        }
    }

    /// True when this copy is traced.
    pub(super) fn active(&self) -> bool {
        self.start.is_some()
    }

    /// Runs `f`, counting its time to `phase` when active.
    pub(super) fn time<T>(&self, phase: Phase, f: impl FnOnce() -> T) -> T {
        if self.start.is_none() {
            return f();
        }
        let t = Instant::now();
        let v = f();
        let ns = t.elapsed().as_nanos() as u64;
        let (mut s, mut c) = (self.spent.get(), self.counts.get());
        s[phase as usize] += ns;
        c[phase as usize] += 1;
        self.spent.set(s);
        self.counts.set(c);
        v
    }

    /// Notes the moment step `what` of chunk `k` happened, when active.
    pub(super) fn mark(&self, what: &'static str, k: usize) {
        if let Some(start) = self.start {
            let ns = start.elapsed().as_nanos() as u64;
            self.marks.borrow_mut().push((what, k, ns, false));
        }
    }

    /// The moment an active trace started (for times taken on other threads, `mark_at`).
    pub(super) fn clock(&self) -> Option<Instant> {
        self.start
    }

    /// Notes step `what` of `k` at `ns` since the start (measured elsewhere), when active.
    pub(super) fn mark_at(&self, what: &'static str, k: usize, ns: u64) {
        if self.start.is_some() {
            self.marks.borrow_mut().push((what, k, ns, false));
        }
    }

    /// Notes a total of `what` over `k` things, `ns` in all (times summed over threads), when
    /// active: written `{what}{k} ={us} us`.
    pub(super) fn total(&self, what: &'static str, k: usize, ns: u64) {
        if self.start.is_some() {
            self.marks.borrow_mut().push((what, k, ns, true));
        }
    }

    /// Writes the line of an active trace.
    pub(super) fn finish(&self, what: std::fmt::Arguments<'_>) {
        let Some(start) = self.start else {
            return;
        };
        let total = start.elapsed().as_nanos() as u64;
        let (s, c) = (self.spent.get(), self.counts.get());
        let epoch = *EPOCH.get_or_init(|| start);
        let at = start.saturating_duration_since(epoch).as_nanos() as f64 / 1e3;
        let mut line = format!(
            "llaisys-nvidia pageable trace: {what}: {:.1} us, from {at:.1} us",
            total as f64 / 1e3
        );
        for i in 0..4 {
            line += &format!("; {} {:.1} us x{}", NAMES[i], s[i] as f64 / 1e3, c[i]);
        }
        let rest = total.saturating_sub(s.iter().sum());
        line += &format!("; other {:.1} us", rest as f64 / 1e3);
        for &(what, k, ns, total) in self.marks.borrow().iter() {
            let us = ns as f64 / 1e3;
            line += &if total {
                format!("; {what}{k} ={us:.1} us")
            } else {
                format!("; {what}{k} @{us:.1}")
            };
        }
        line.push('\n');
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
}

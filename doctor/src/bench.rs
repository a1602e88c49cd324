//! `--bench`: copy bandwidth over a ladder of sizes (H2D and D2H from pinned and pageable host
//! memory, D2D) and allocation latencies (`cudaMalloc`/`cudaFree`, `cudaMallocHost`/
//! `cudaFreeHost`).
//!
//! Copies are CUDA's own `cudaMemcpyAsync` (`backend::plain`, not the library's copy layer,
//! whose pageable fast path is its own business: these figures describe the machine), timed
//! with CUDA events recorded around each on one stream (the device's clock, as NVIDIA's
//! bandwidthTest does), one untimed warm-up then the median of several repetitions. For
//! pageable memory CUDA stages the copy through its own pinned buffer and the call returns only
//! when staging is done; the events still bracket the whole transfer. Allocation calls are
//! timed on the host clock (they are host calls), median of several.

use crate::backend::{self, plain, DeviceBuffer, Event, MemcpyKind, PinnedBuffer, Stream};
use crate::names::BENCH_PREFIX;
use crate::report::{AllocFigure, AllocKind, Bench, CopyFigure, CopyKind, Failure};
use std::os::raw::c_void;

type Result<T> = std::result::Result<T, Failure>;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// The size ladder: 4 KiB to 256 MiB in powers of 4.
pub const SIZES: [usize; 9] = [
    4 * KIB,
    16 * KIB,
    64 * KIB,
    256 * KIB,
    MIB,
    4 * MIB,
    16 * MIB,
    64 * MIB,
    256 * MIB,
];

/// Sizes whose allocation latency is measured.
pub const ALLOC_SIZES: [usize; 3] = [4 * KIB, MIB, 64 * MIB];

/// Timed repetitions for a copy of `size` bytes: more for small copies, whose times are noisy.
pub fn copy_reps(size: usize) -> usize {
    match size {
        s if s <= MIB => 25,
        s if s <= 16 * MIB => 11,
        _ => 7,
    }
}

/// Timed repetitions for an allocation of `size` bytes.
pub fn alloc_reps(size: usize) -> usize {
    if size <= MIB {
        21
    } else {
        7
    }
}

/// The median (the mean of the middle two for an even count); NaN for no values.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Human size: `4 KiB`, `256 MiB`.
pub fn size_text(bytes: usize) -> String {
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes % KIB == 0 {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// Why the bench cannot run on `device` of `count`.
pub fn skip_reason(device: i32, count: i32) -> String {
    if count <= 0 {
        "no CUDA device".into()
    } else {
        format!("device {device} does not exist (CUDA shows {count})")
    }
}

/// The whole bench on `device` over `SIZES`; `progress` receives one line per measurement, then
/// an empty line at the end.
pub fn run(device: i32, progress: &mut dyn FnMut(&str)) -> Bench {
    run_with(device, &SIZES, progress)
}

/// The bench over the given sizes (the largest sizes are dropped when the device has less than
/// four times that much memory free).
pub fn run_with(device: i32, sizes: &[usize], progress: &mut dyn FnMut(&str)) -> Bench {
    let mut bench = Bench {
        device,
        sizes: Vec::new(),
        copies: Vec::new(),
        allocations: Vec::new(),
        error: None,
        skipped: None,
    };
    if let Err(e) = measure(device, sizes, &mut bench, progress) {
        bench.error = Some(e.message);
    }
    // The end: a terminal's progress line is cleared.
    progress("");
    bench
}

fn measure(
    device: i32,
    sizes: &[usize],
    bench: &mut Bench,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    backend::device::set(device)?;
    let (free, _) = backend::device::mem_info()?;
    bench.sizes = sizes.iter().copied().filter(|&s| s <= free / 4).collect();
    let max = bench.sizes.iter().copied().max().unwrap_or(0);
    if max > 0 {
        let mut bufs = Buffers::new(max)?;
        let total = bench.sizes.len() * CopyKind::ALL.len();
        let mut done = 0;
        for &size in &bench.sizes.clone() {
            for kind in CopyKind::ALL {
                done += 1;
                progress(&format!(
                    "{BENCH_PREFIX}{} {} ({done}/{total})",
                    kind.title(),
                    size_text(size)
                ));
                let reps = copy_reps(size);
                let median_ms = bufs.time_copy(kind, size, reps)?;
                bench.copies.push(CopyFigure {
                    kind,
                    size,
                    reps,
                    median_ms,
                    gbps: size as f64 / (median_ms * 1e-3) / 1e9,
                });
            }
        }
    }
    for &size in ALLOC_SIZES.iter().filter(|&&s| s <= free / 4) {
        progress(&format!("{BENCH_PREFIX}allocations of {}", size_text(size)));
        allocations(size, &mut bench.allocations)?;
    }
    Ok(())
}

/// The buffers and timing objects of the copy bench.
struct Buffers {
    a: DeviceBuffer,
    b: DeviceBuffer,
    pinned: PinnedBuffer,
    pageable: Vec<u8>,
    stream: Stream,
    start: Event,
    stop: Event,
}

impl Buffers {
    fn new(max: usize) -> Result<Buffers> {
        let mut pinned = PinnedBuffer::new(max)?;
        pinned.as_mut_slice().fill(0x5a);
        Ok(Buffers {
            a: DeviceBuffer::new(max)?,
            b: DeviceBuffer::new(max)?,
            pinned,
            // Non-zero so every page is really there before the first copy.
            pageable: vec![0xa5; max],
            stream: Stream::new()?,
            start: Event::new()?,
            stop: Event::new()?,
        })
    }

    /// The median milliseconds of `reps` copies of `size` bytes of `kind`.
    fn time_copy(&mut self, kind: CopyKind, size: usize, reps: usize) -> Result<f64> {
        let (dst, src, how): (*mut c_void, *const c_void, MemcpyKind) = match kind {
            CopyKind::H2dPinned => (self.a.as_ptr(), self.pinned.as_ptr(), MemcpyKind::H2D),
            CopyKind::H2dPageable => (
                self.a.as_ptr(),
                self.pageable.as_ptr().cast(),
                MemcpyKind::H2D,
            ),
            CopyKind::D2hPinned => (self.pinned.as_ptr(), self.a.as_ptr(), MemcpyKind::D2H),
            CopyKind::D2hPageable => (
                self.pageable.as_mut_ptr().cast(),
                self.a.as_ptr(),
                MemcpyKind::D2H,
            ),
            CopyKind::D2d => (self.b.as_ptr(), self.a.as_ptr(), MemcpyKind::D2D),
        };
        let mut times = Vec::with_capacity(reps);
        for rep in 0..=reps {
            self.start.record(Some(&self.stream))?;
            // SAFETY: every buffer holds at least `size` bytes (size <= max) of the memory
            // `how` says and outlives the copy, which completes before `stop.synchronize`.
            unsafe { plain::memcpy_async(dst, src, size, how, &self.stream)? };
            self.stop.record(Some(&self.stream))?;
            self.stop.synchronize()?;
            if rep > 0 {
                times.push(f64::from(self.stop.elapsed_ms(&self.start)?));
            }
        }
        Ok(median(&mut times))
    }
}

/// Times allocation and free of `size` bytes, device and pinned host.
fn allocations(size: usize, out: &mut Vec<AllocFigure>) -> Result<()> {
    let reps = alloc_reps(size);
    let mut times: [Vec<f64>; 4] = Default::default();
    for _ in 0..reps {
        let (alloc, free) = plain::device_alloc_free_us(size)?;
        times[0].push(alloc);
        times[1].push(free);
        let (alloc, free) = plain::host_alloc_free_us(size)?;
        times[2].push(alloc);
        times[3].push(free);
    }
    for (kind, values) in AllocKind::ALL.into_iter().zip(times.iter_mut()) {
        out.push(AllocFigure {
            kind,
            size,
            reps,
            median_us: median(values),
        });
    }
    Ok(())
}

//! `--bench`: copy bandwidth over a ladder of sizes (H2D and D2H from pinned and pageable host
//! memory, D2D) and allocation latencies (`cudaMalloc`/`cudaFree`, `cudaMallocHost`/
//! `cudaFreeHost`).
//!
//! Copies are CUDA's own `cudaMemcpyAsync` (not the crate's copy layer, whose pageable fast path
//! is its own business: these figures describe the machine), timed with CUDA events recorded
//! around each on one stream (the device's clock, as NVIDIA's bandwidthTest does), one untimed
//! warm-up then the median of several repetitions. For pageable memory CUDA stages the copy through its own pinned buffer
//! and the call returns only when staging is done; the events still bracket the whole transfer.
//! Allocation calls are timed on the host clock (they are host calls), median of several.

use super::report::{AllocFigure, AllocKind, Bench, CopyFigure, CopyKind};
use crate::copy::MemcpyKind;
use crate::error::Result;
use crate::event::Event;
use crate::memory::{self, DeviceBuffer, PinnedBuffer};
use crate::stream::Stream;
use std::os::raw::c_void;
use std::time::Instant;

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
        bench.error = Some(e.to_string());
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
    crate::device::set(device)?;
    let (free, _) = crate::device::mem_info()?;
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
                    "bench: {} {} ({done}/{total})",
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
        progress(&format!("bench: allocations of {}", size_text(size)));
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
            // CUDA's own copy, not the crate's copy layer (which has its own pageable path):
            // the figures are the machine's. Every buffer holds at least `size` bytes
            // (size <= max) and outlives the copy, which completes before `stop.synchronize`.
            // SAFETY: as said above.
            unsafe { crate::copy::memcpy_async(dst, src, size, how, self.stream.as_raw()) }?;
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
        let t = Instant::now();
        let p = memory::alloc_device(size)?;
        times[0].push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        // SAFETY: `p` came from alloc_device just above and is freed once.
        unsafe { memory::free_device(p)? };
        times[1].push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let h = memory::alloc_host(size)?;
        times[2].push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        // SAFETY: `h` came from alloc_host just above and is freed once.
        unsafe { memory::free_host(h)? };
        times[3].push(t.elapsed().as_secs_f64() * 1e6);
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

//! The host side of a staged copy: one host copy shared by the calling thread and the pool's
//! threads (`workers`), in pieces claimed one after another. Writes into a staging buffer can
//! bypass the CPU caches (non-temporal stores, `LLAISYS_NVIDIA_PAGEABLE_STREAMING`: by default
//! into the staging buffers, H2D): the copy engine then reads memory, not lines dirty in a
//! cache, and the copy does not first read the lines it overwrites (on one H200, H2D pageable
//! 16 MiB runs at 41-44 GB/s this way against 31 GB/s with ordinary stores; docs/benchmark.md).

use super::workers;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How the bytes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stores {
    /// Ordinary stores (`memcpy`).
    Cached,
    /// Non-temporal stores where the processor has them (x86-64), else ordinary ones.
    Streaming,
}

struct HostCopy {
    dst: usize,
    src: usize,
    len: usize,
    piece: usize,
    pieces: usize,
    stores: Stores,
    next: AtomicUsize,
    done: AtomicUsize,
}

impl workers::Task for HostCopy {
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.pieces {
                return;
            }
            let off = i * self.piece;
            let n = self.piece.min(self.len - off);
            // SAFETY: `par_copy`'s caller keeps both ranges valid and disjoint until every piece
            // is done (it waits for that); pieces do not overlap.
            unsafe {
                copy(
                    (self.dst + off) as *mut u8,
                    (self.src + off) as *const u8,
                    n,
                    self.stores,
                )
            };
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.pieces
    }
}

/// Copies `len` bytes with the caller and up to `threads - 1` of the pool's threads, in pieces of
/// at least `min_piece` bytes (at most two per thread), every thread on the same range so that
/// the chunk's DMA can start as early as possible.
///
/// # Safety
/// `dst` and `src` are valid for `len` bytes and do not overlap.
pub(super) unsafe fn par_copy(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    threads: usize,
    min_piece: usize,
    stores: Stores,
) {
    let parts = (len / min_piece.max(4096)).clamp(1, threads * 2);
    if parts == 1 || threads == 1 {
        // SAFETY: the caller's contract.
        unsafe { copy(dst, src, len, stores) };
        return;
    }
    let piece = len.div_ceil(parts).next_multiple_of(4096);
    let job = Arc::new(HostCopy {
        dst: dst as usize,
        src: src as usize,
        len,
        piece,
        pieces: len.div_ceil(piece),
        stores,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    let pieces = job.pieces;
    workers::run(job, (threads - 1).min(pieces - 1));
}

/// Copies `n` bytes.
///
/// # Safety
/// `dst` and `src` are valid for `n` bytes and do not overlap.
pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize, stores: Stores) {
    #[cfg(target_arch = "x86_64")]
    if stores == Stores::Streaming && n >= 4096 {
        // SAFETY: the caller's contract.
        unsafe { streaming_copy(dst, src, n) };
        return;
    }
    let _ = stores;
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
}

/// Copies with 16-byte non-temporal stores (SSE2, part of x86-64), then `sfence`, so that the
/// stores are visible before the caller publishes the piece as done.
///
/// # Safety
/// `dst` and `src` are valid for `n` bytes and do not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn streaming_copy(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = dst.align_offset(16).min(n);
    // SAFETY: the caller's contract; `head` <= n.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let mut i = head;
    while i + 64 <= n {
        // SAFETY: `i + 64 <= n`: in bounds of both ranges; `dst + i` is 16-byte aligned (head),
        // loads are unaligned ones.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        i += 64;
    }
    // SAFETY: the rest, `n - i` < 64 bytes, in bounds.
    unsafe {
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), n - i);
        _mm_sfence();
    }
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
    fn par_copy_copies_every_byte_of_every_size_from_many_threads() {
        let _pool = crate::sync::lock(&workers::TEST_POOL);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for stores in [Stores::Cached, Stores::Streaming] {
                        for (k, len) in [1usize, 63, 4096, (128 << 10) + 1, 1 << 20, (3 << 20) + 17]
                            .into_iter()
                            .enumerate()
                        {
                            let src = pattern(len, (k + t) as u8);
                            // Misaligned destinations too (the streaming copy's head and tail).
                            for shift in [0usize, 1, 15] {
                                let mut dst = vec![0u8; len + shift];
                                // SAFETY: both vectors hold `len` bytes from there, distinct.
                                unsafe {
                                    par_copy(
                                        dst.as_mut_ptr().add(shift),
                                        src.as_ptr(),
                                        len,
                                        4,
                                        32 << 10,
                                        stores,
                                    )
                                };
                                assert!(
                                    dst[shift..] == src[..],
                                    "thread {t} len {len} {stores:?} +{shift}"
                                );
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("copy thread");
        }
    }
}

//! The host side of a staged copy: how a piece's bytes are written, with ordinary or
//! non-temporal stores (`super::policy::stores` says when; docs/caches.md). The non-temporal copy
//! prefetches the source a page ahead: the processor's prefetchers stop at a 4 KiB page's end.

/// How far ahead of its loads the non-temporal copy asks for the source: one page.
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 4096;

/// How the bytes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stores {
    /// Ordinary stores (`memcpy`).
    Cached,
    /// Non-temporal stores where the processor has them (x86-64), else ordinary ones.
    Streaming,
}

/// Copies `n` bytes.
///
/// # Safety
/// `dst` and `src` are valid for `n` bytes and do not overlap.
pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize, stores: Stores) {
    #[cfg(target_arch = "x86_64")]
    if stores == Stores::Streaming && n >= 4096 {
        // SAFETY: `dst` and `src` are valid for `n` bytes and do not overlap (this function's
        // contract).
        unsafe { streaming_copy(dst, src, n) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = stores;
    // SAFETY: `dst` and `src` are valid for `n` bytes and do not overlap (this function's
    // contract).
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
}

/// Asks for the line `PREFETCH_AHEAD` bytes past `at` in the source. A prefetch never faults,
/// so an address past the end of the source (or of any mapping) is harmless.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ahead(at: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch is a hint: it reads nothing into the program and raises no fault,
    // whatever the address (`wrapping_add` makes no claim that it is in bounds either).
    unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_AHEAD).cast()) };
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
    // SAFETY: `dst` and `src` are valid for `n` bytes and do not overlap (this function's
    // contract), and `head` <= n.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let mut i = head;
    while i + 64 <= n {
        prefetch_ahead(src.wrapping_add(i));
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
    // SAFETY: `i <= n`, so the last `n - i` (< 64) bytes lie in both ranges.
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

    /// Runs `copy` on every size and alignment that matters to the copies above: the head
    /// before an aligned store, the 64-byte loop, the tail, a prefetch past the source's end.
    fn writes_every_byte_and_nothing_else(what: &str, copy: impl Fn(*mut u8, *const u8, usize)) {
        for (k, len) in [1usize, 63, 4095, 4096, 4096 + 63, (128 << 10) + 1, 1 << 20]
            .into_iter()
            .enumerate()
        {
            // Misaligned sources and destinations too (the streaming copy's head and tail).
            for (src_shift, dst_shift) in [(0usize, 0usize), (0, 1), (3, 15), (7, 0), (0, 33)] {
                let src = pattern(len + src_shift, k as u8);
                let mut dst = vec![0xA5u8; len + dst_shift + 64];
                // `src` holds `len` bytes from `src_shift`, `dst` `len` bytes from `dst_shift`;
                // two vectors, so they do not overlap.
                copy(
                    dst.as_mut_ptr().wrapping_add(dst_shift),
                    src.as_ptr().wrapping_add(src_shift),
                    len,
                );
                let what = format!("{what}: len {len} src+{src_shift} dst+{dst_shift}");
                assert!(
                    dst[dst_shift..dst_shift + len] == src[src_shift..],
                    "{what}"
                );
                assert!(
                    dst[..dst_shift]
                        .iter()
                        .chain(&dst[dst_shift + len..])
                        .all(|&b| b == 0xA5),
                    "{what}: wrote outside the range"
                );
            }
        }
    }

    #[test]
    fn copy_writes_every_byte_of_every_size_and_alignment_and_nothing_else() {
        for stores in [Stores::Cached, Stores::Streaming] {
            writes_every_byte_and_nothing_else(&format!("{stores:?}"), |d, s, n| {
                // SAFETY: the helper passes buffers valid for `n` bytes that do not overlap.
                unsafe { copy(d, s, n, stores) }
            });
        }
    }
}

//! How a staged copy is cut into chunks: their sizes, the first chunk of an H2D copy behind DMAs
//! still in flight, and the largest copy written behind a pending DMA (docs/caches.md).

use super::Direction;

/// The largest chunk (one staging slot's buffer).
pub(super) const CHUNK_MAX: usize = 8 << 20;
/// The smallest chunk: below it the cost of queuing a DMA is no longer small beside it.
const CHUNK_MIN: usize = 256 << 10;
/// An H2D copy's first chunk on an idle link (later ones double up to the chunk size), so the
/// copy engine starts early. D2H copies use equal chunks, faster for them (docs/caches.md).
const H2D_FIRST_CHUNK: usize = 256 << 10;

/// The smallest H2D copy that ramps down on an idle link: its last chunks halve down to
/// `H2D_FIRST_CHUNK`, so a synchronize after it waits for a short DMA (at 64 MiB the ramp was
/// not faster: docs/benchmark.md).
const RAMP_DOWN_FROM: usize = 128 << 20;

/// The chunk size for a copy of `size` bytes: about a quarter of it, so that even a 1 MiB copy
/// overlaps host copying with the copy engine, within [CHUNK_MIN, CHUNK_MAX] (docs/caches.md).
fn chunk_for(size: usize) -> usize {
    (size / 4)
        .next_multiple_of(64 << 10)
        .clamp(CHUNK_MIN, CHUNK_MAX)
}

/// The chunks (offset, length) of a copy of `size` bytes: the first `first` bytes long (when
/// set), each next one twice the last, up to `largest`. With `down` the last chunks ramp down
/// the same way. The bytes the ramps leave go in the middle, in chunks of `largest`.
fn plan(size: usize, largest: usize, first: usize, down: bool) -> Vec<(usize, usize)> {
    let start = if first > 0 {
        first.min(largest)
    } else {
        largest
    };
    let mut front = Vec::with_capacity(size.div_ceil(largest) + 16);
    let mut back = Vec::new();
    let (mut next_front, mut next_back) = (start, if down { start } else { largest });
    let mut left = size;
    // The ramps take their chunks in turn, until both have reached the largest chunk.
    while left > 0 && (next_front < largest || next_back < largest) {
        let n = next_front.min(left);
        front.push(n);
        left -= n;
        next_front = (next_front * 2).min(largest);
        if left > 0 && next_back < largest {
            let n = next_back.min(left);
            back.push(n);
            left -= n;
            next_back = (next_back * 2).min(largest);
        }
    }
    while left > 0 {
        let n = largest.min(left);
        front.push(n);
        left -= n;
    }
    front.extend(back.into_iter().rev());
    let mut off = 0;
    front
        .into_iter()
        .map(|n| {
            off += n;
            (off - n, n)
        })
        .collect()
}

/// The first chunk of an H2D copy whose chunks are at most `largest` bytes, queued behind
/// `pending` bytes of DMAs from the set's staging buffers, `oldest` of them from the slot the
/// copy starts at: the copy engine is busy with the others while the host copies the first
/// chunk, so it may be as long as they are.
fn first_chunk(pending: usize, oldest: usize, largest: usize) -> usize {
    let behind = pending.saturating_sub(oldest) / (64 << 10) * (64 << 10);
    behind.clamp(H2D_FIRST_CHUNK, largest.max(H2D_FIRST_CHUNK))
}

/// The largest H2D copy written behind a staging slot's last use (`staging::Set::room_behind`)
/// as one chunk instead of taking slots of its own (a model's projections, norms and biases
/// between its large matrices).
pub(super) const BEHIND_MAX: usize = 1 << 20;

/// The chunks of a copy of `size` bytes going `direction`; an H2D copy's first chunk as
/// `first_chunk` says behind `pending` bytes in flight, `oldest` of them in its first slot.
pub(super) fn chunks(
    size: usize,
    direction: Direction,
    pending: usize,
    oldest: usize,
) -> Vec<(usize, usize)> {
    match direction {
        Direction::HostToDevice => {
            // Behind DMAs in flight the chunks may be as long as the first; a large copy on
            // an idle link ramps down as well as up (`RAMP_DOWN_FROM`).
            let first = first_chunk(pending, oldest, CHUNK_MAX);
            let down = first == H2D_FIRST_CHUNK && size >= RAMP_DOWN_FROM;
            plan(size, chunk_for(size).max(first), first, down)
        }
        Direction::DeviceToHost => plan(size, chunk_for(size), 0, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_bounded_and_aligned() {
        assert_eq!(chunk_for(1 << 20), CHUNK_MIN);
        assert_eq!(chunk_for(4 << 20), 1 << 20);
        assert_eq!(chunk_for(1 << 30), CHUNK_MAX);
        assert_eq!(chunk_for((64 << 20) + 3) % (64 << 10), 0);
    }

    #[test]
    fn plans_cover_every_byte_once_and_ramp_up() {
        for size in [1usize, (1 << 20) - 1, 1 << 20, (64 << 20) + 3, 300 << 20] {
            for (largest, first, down) in [
                (256 << 10, 0, false),
                (256 << 10, 0, true),
                (1 << 20, 256 << 10, false),
                (1 << 20, 256 << 10, true),
                (8 << 20, 64 << 10, false),
                (8 << 20, 64 << 10, true),
            ] {
                let p = plan(size, largest, first, down);
                let mut off = 0;
                for &(o, n) in &p {
                    assert_eq!(o, off, "size {size}: contiguous");
                    assert!(n > 0 && n <= largest);
                    off += n;
                }
                assert_eq!(off, size);
                if first > 0 && size > first {
                    assert_eq!(p[0].1, first);
                    if down {
                        // The second chunk is the last one, or the ramps left it less.
                        let last = p.last().map_or(0, |c| c.1);
                        assert!(last <= first, "size {size}: ends with {last}");
                        assert!(p.len() == 2 || p[1].1 <= (2 * first).min(largest));
                    } else {
                        assert_eq!(p[1].1, (2 * first).min(largest).min(size - first));
                    }
                }
            }
        }
    }

    #[test]
    fn h2d_starts_with_a_short_chunk_d2h_uses_equal_ones() {
        let h2d = chunks(16 << 20, Direction::HostToDevice, 0, 0);
        assert_eq!(
            h2d.iter().map(|c| c.1).take(5).collect::<Vec<_>>(),
            [256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20]
        );
        let d2h = chunks(16 << 20, Direction::DeviceToHost, 24 << 20, 8 << 20);
        assert_eq!(
            d2h,
            [
                (0, 4 << 20),
                (4 << 20, 4 << 20),
                (8 << 20, 4 << 20),
                (12 << 20, 4 << 20)
            ]
        );
    }

    #[test]
    fn behind_dmas_in_flight_an_h2d_copy_starts_with_as_much_as_the_others_hold() {
        let mib = 1 << 20;
        // Idle (or only the first slot's DMA pending): the short first chunk.
        assert_eq!(first_chunk(0, 0, 8 * mib), H2D_FIRST_CHUNK);
        assert_eq!(first_chunk(8 * mib, 8 * mib, 8 * mib), H2D_FIRST_CHUNK);
        // Behind 6 MiB + 100 KiB in the other slots: 6 MiB + 64 KiB (a multiple of 64 KiB).
        assert_eq!(
            first_chunk(8 * mib + 6 * mib + (100 << 10), 8 * mib, 8 * mib),
            6 * mib + (64 << 10)
        );
        // Never beyond the copy's largest chunk, never below the short one.
        assert_eq!(first_chunk(30 * mib, 2 * mib, 4 * mib), 4 * mib);
        assert_eq!(first_chunk(30 * mib, 2 * mib, 64 << 10), H2D_FIRST_CHUNK);
        assert_eq!(first_chunk(100 << 10, 0, 8 * mib), H2D_FIRST_CHUNK);
        // Behind 12 MiB in flight a 27 MiB copy takes whole slots (its chunk size would be a
        // quarter of it); a 768 KiB one behind 3 MiB is one chunk (not three of 256 KiB).
        let h2d = chunks(27 * mib, Direction::HostToDevice, 20 * mib, 8 * mib);
        assert_eq!(
            h2d.iter().map(|c| c.1).collect::<Vec<_>>(),
            [8 * mib, 8 * mib, 8 * mib, 3 * mib]
        );
        let kv = chunks(768 << 10, Direction::HostToDevice, 4 * mib, mib);
        assert_eq!(kv, [(0, 768 << 10)]);
        // With less in flight the chunks double from the first up to the usual size.
        let h2d = chunks(27 * mib, Direction::HostToDevice, 3 * mib, 2 * mib);
        assert_eq!(h2d[0].1, mib);
        assert_eq!(h2d[1].1, 2 * mib);
        assert!(h2d.iter().all(|c| c.1 <= chunk_for(27 * mib)));
        assert_eq!(h2d.iter().map(|c| c.1).sum::<usize>(), 27 * mib);
    }

    #[test]
    fn a_large_h2d_copy_on_an_idle_link_ramps_down_to_a_short_last_chunk() {
        let mib = 1 << 20;
        let sizes = |p: &[(usize, usize)]| p.iter().map(|c| c.1 >> 10).collect::<Vec<_>>();
        // 256 MiB on an idle link: up to 8 MiB, then whole chunks and what the ramps leave,
        // then down.
        let idle = chunks(256 * mib, Direction::HostToDevice, 0, 0);
        assert_eq!(sizes(&idle[..6]), [256, 512, 1024, 2048, 4096, 8192]);
        assert_eq!(
            sizes(&idle[idle.len() - 7..]),
            [8192, 512, 4096, 2048, 1024, 512, 256]
        );
        assert_eq!(idle.iter().filter(|c| c.1 == CHUNK_MAX).count(), 30);
        // Only the first slot's DMA pending is as good as idle.
        assert_eq!(
            chunks(256 * mib, Direction::HostToDevice, 8 * mib, 8 * mib),
            idle
        );
        // Below `RAMP_DOWN_FROM` an idle copy ends with whole chunks and what is left.
        let mid = chunks(64 * mib, Direction::HostToDevice, 0, 0);
        assert_eq!(
            sizes(&mid),
            [256, 512, 1024, 2048, 4096, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 256]
        );
        assert_eq!(
            sizes(&chunks(2 * mib, Direction::HostToDevice, 0, 0)),
            [256, 512, 512, 512, 256]
        );
        // Behind DMAs in flight the copy does not ramp down: it ends with a whole chunk and
        // what is left, as the copy engine has the other slots' DMAs to run.
        let behind = chunks(256 * mib, Direction::HostToDevice, 24 * mib, 8 * mib);
        assert_eq!(sizes(&behind), [8192; 32]);
        // The largest copies ramp down to the short chunk too, after whole slots.
        let big = chunks(1 << 30, Direction::HostToDevice, 0, 0);
        assert_eq!(big.last().map(|c| c.1), Some(H2D_FIRST_CHUNK));
        assert_eq!(big.iter().filter(|c| c.1 == CHUNK_MAX).count(), 126);
        assert_eq!(big.iter().map(|c| c.1).sum::<usize>(), 1 << 30);
    }
}

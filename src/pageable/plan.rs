//! How a staged copy is cut into chunks: their sizes, the first chunk of an H2D copy behind DMAs
//! still in flight, and the largest copy written behind a pending DMA (docs/caches.md).

use super::Direction;

/// The largest chunk (one staging slot's buffer).
pub(super) const CHUNK_MAX: usize = 8 << 20;
/// The smallest chunk: below it the cost of queuing a DMA is no longer small beside it.
const CHUNK_MIN: usize = 256 << 10;
/// An H2D copy's first chunk on an idle link (later ones double up to the chunk size): the copy
/// engine starts after a short host copy instead of a quarter of the copy. Behind earlier DMAs
/// still in flight the first chunk is longer (`first_chunk`). D2H copies use equal chunks,
/// which were faster for them (docs/caches.md).
const H2D_FIRST_CHUNK: usize = 256 << 10;

/// The chunk size for a copy of `size` bytes: about a quarter of it, so that even a 1 MiB copy
/// overlaps host copying with the copy engine, within [CHUNK_MIN, CHUNK_MAX] (docs/caches.md).
fn chunk_for(size: usize) -> usize {
    (size / 4)
        .next_multiple_of(64 << 10)
        .clamp(CHUNK_MIN, CHUNK_MAX)
}

/// The chunks (offset, length) of a copy of `size` bytes: the first `first` bytes long (when
/// set and smaller than the largest chunk), each next one twice the last, up to `largest`.
fn plan(size: usize, largest: usize, first: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(size.div_ceil(largest) + 8);
    let mut next = if first > 0 {
        first.min(largest)
    } else {
        largest
    };
    let mut off = 0;
    while off < size {
        let n = next.min(size - off);
        out.push((off, n));
        off += n;
        next = (next * 2).min(largest);
    }
    out
}

/// The first chunk of an H2D copy whose chunks are at most `largest` bytes, queued behind
/// `pending` bytes of DMAs from the set's staging buffers, `oldest` of them from the slot the
/// copy starts at: the copy engine stays busy with the others (`pending - oldest`) while the
/// host copies the first chunk, so it may be as long as they are. A ramp from
/// `H2D_FIRST_CHUNK` behind DMAs in flight would hold small chunks in buffers that could each
/// hold the largest, and the copy engine could run dry between them.
fn first_chunk(pending: usize, oldest: usize, largest: usize) -> usize {
    let behind = pending.saturating_sub(oldest) / (64 << 10) * (64 << 10);
    behind.clamp(H2D_FIRST_CHUNK, largest.max(H2D_FIRST_CHUNK))
}

/// The largest H2D copy written behind a staging slot's last use (`staging::Set::room_behind`)
/// as one chunk, instead of taking slots of its own: a model's key and value projections
/// between its large matrices, each of which would otherwise hold a slot that could hold a
/// whole chunk while the copy engine runs through the slots' DMAs; and its norms and biases
/// (below `H2D_MIN_BYTES`, staged only so: `copy_behind`), which would otherwise go to
/// cudaMemcpy and wait for the stream.
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
            // Behind DMAs in flight a copy needs no short chunks to start the copy engine: its
            // chunks may be as long as its first (up to a slot's buffer).
            let first = first_chunk(pending, oldest, CHUNK_MAX);
            plan(size, chunk_for(size).max(first), first)
        }
        Direction::DeviceToHost => plan(size, chunk_for(size), 0),
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
        for size in [1usize, (1 << 20) - 1, 1 << 20, (64 << 20) + 3] {
            for (largest, first) in [(256 << 10, 0), (1 << 20, 256 << 10), (8 << 20, 64 << 10)] {
                let p = plan(size, largest, first);
                let mut off = 0;
                for &(o, n) in &p {
                    assert_eq!(o, off, "size {size}: contiguous");
                    assert!(n > 0 && n <= largest);
                    off += n;
                }
                assert_eq!(off, size);
                if first > 0 && size > first {
                    assert_eq!(p[0].1, first);
                    assert_eq!(p[1].1, (2 * first).min(largest).min(size - first));
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
}

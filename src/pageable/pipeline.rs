//! The pipeline of a staged copy: the host threads work through the whole copy's pieces in
//! order, so that no thread waits for the others at a chunk's end. Only the calling thread talks
//! to CUDA: it queues each chunk's DMA and event and polls the events to publish how far the
//! threads may go; the pool's threads claim pieces one after another and copy each one as soon
//! as its chunk is ready, so that copying out one chunk overlaps the DMA of the next and a chunk
//! that lands is copied by every thread that is free.
//!
//! - D2H: chunk k is ready once its DMA into slot k mod K has landed (the slot's event); the DMA
//!   of chunk k+K is queued once every piece of chunk k has been copied out.
//! - H2D: chunk k is ready once slot k mod K is free (the event after the DMA of chunk k-K); its
//!   DMA is queued once every piece of it has been copied in.
//!
//! The helpers start once there is work for them (D2H: the first chunk has landed; H2D: the
//! first staging buffer is free), but a D2H on an idle stream whose helpers sleep wakes them as
//! soon as its first DMAs are queued (waking takes longer than a chunk takes to land); until
//! then the calling thread waits as the application's device flags say. A pool thread claims a
//! piece only once its chunk is ready; until then it spins on the published count (250 us, then
//! naps of 20 us), holding no piece.

use super::adapt::InFlight;
use super::hostcopy::{copy, Stores};
use super::staging::{Set, Slot};
use super::workers::{self, Task};
use super::Direction;
use crate::cudart::calls::StreamHandle;
use crate::error::{Error, Result};
use crate::safe::copy::{self as cuda_copy, MemcpyKind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a thread spins for its chunk before it naps.
const SPIN: Duration = Duration::from_micros(250);
/// One nap while a chunk is not ready.
const NAP: Duration = Duration::from_micros(20);

/// The smallest piece: below it a piece's claim and fence are no longer small beside its copy.
const MIN_PIECE: usize = 16 << 10;
/// The largest piece: small enough that a chunk that lands is shared by many threads, large
/// enough that fewer threads are woken per chunk than with smaller ones (docs/caches.md).
const MAX_PIECE: usize = 64 << 10;

/// The pieces of a chunk of `len` bytes copied by `threads`: about one per thread, 4 KiB
/// aligned, from `MIN_PIECE` up to `MAX_PIECE`. A small chunk (an H2D copy's first, 256 KiB) is
/// thus split among every thread instead of a few `MAX_PIECE` ones: one thread beside the copy
/// engine copies far slower than the link, and the chunk's DMA waits for its last piece.
fn piece_for(len: usize, threads: usize) -> usize {
    (len / threads.max(1))
        .next_multiple_of(4096)
        .clamp(MIN_PIECE, MAX_PIECE)
}

/// A piece: `len` bytes at `off` of the copy, in chunk `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    chunk: usize,
    off: usize,
    len: usize,
}

/// One copy's pieces and progress, shared with the pool's threads.
struct Job {
    direction: Direction,
    /// The caller's pageable buffer.
    host: usize,
    /// The staging buffer of each slot.
    bufs: Vec<usize>,
    /// (offset, length) of each chunk in the copy.
    chunks: Vec<(usize, usize)>,
    /// The index of each chunk's first piece, and after the last chunk's the number of pieces
    /// (piece i's chunk, offset and length follow from these: `piece`; a copy of 256 MiB has
    /// about 4000 pieces, and making a list of them would take longer than the first chunk's
    /// copy).
    first_piece: Vec<usize>,
    /// Each chunk's piece length (its last piece may be shorter).
    piece_len: Vec<usize>,
    stores: Stores,
    /// Chunks below this may be copied.
    ready: AtomicUsize,
    /// Pieces done per chunk.
    copied: Vec<AtomicUsize>,
    next: AtomicUsize,
    done: AtomicUsize,
    /// Set after an error: pieces not yet copied are skipped.
    failed: AtomicBool,
    /// Set when a piece's copy panicked (a bug): the copy fails (`drive`).
    panicked: AtomicBool,
    /// Set once a pool thread has claimed a piece: until then the calling thread copies too
    /// (`drive`), when the threads were asleep.
    helped: AtomicBool,
}

impl Job {
    fn new(
        direction: Direction,
        host: *mut u8,
        bufs: Vec<usize>,
        chunks: Vec<(usize, usize)>,
        threads: usize,
        stores: Stores,
    ) -> Job {
        let mut first_piece = Vec::with_capacity(chunks.len() + 1);
        let mut piece_len = Vec::with_capacity(chunks.len());
        let mut pieces = 0;
        for &(_, len) in &chunks {
            let piece = piece_for(len, threads);
            first_piece.push(pieces);
            piece_len.push(piece);
            pieces += len.div_ceil(piece);
        }
        first_piece.push(pieces);
        Job {
            direction,
            host: host as usize,
            bufs,
            copied: chunks.iter().map(|_| AtomicUsize::new(0)).collect(),
            chunks,
            first_piece,
            piece_len,
            stores,
            ready: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            helped: AtomicBool::new(false),
        }
    }

    /// The number of pieces.
    fn pieces(&self) -> usize {
        self.first_piece.last().copied().unwrap_or(0)
    }

    /// The chunk of piece `i` (below `pieces()`).
    fn chunk_of(&self, i: usize) -> usize {
        // The last chunk whose first piece is at most i (the first chunk's is 0).
        self.first_piece.partition_point(|&f| f <= i) - 1
    }

    /// Piece `i` (below `pieces()`).
    fn piece(&self, i: usize) -> Piece {
        let chunk = self.chunk_of(i);
        let (start, len) = self.chunks[chunk];
        let at = (i - self.first_piece[chunk]) * self.piece_len[chunk];
        Piece {
            chunk,
            off: start + at,
            len: self.piece_len[chunk].min(len - at),
        }
    }

    /// The number of pieces of chunk `c`.
    fn pieces_of(&self, c: usize) -> usize {
        self.first_piece[c + 1] - self.first_piece[c]
    }

    /// Claims the next piece once its chunk is ready (or the copy failed); None once every piece
    /// is claimed. A thread waiting for a chunk holds no piece: the chunk's pieces go to the
    /// threads awake when it is ready, the caller's among them, and its DMA never waits for a
    /// thread that napped while holding one of them and wakes late. The wait reads `ready`
    /// alone: no piece of a chunk is claimed before the chunk is ready (but in a failed copy).
    fn claim_ready(&self) -> Option<usize> {
        let ready = |chunk: usize| {
            self.ready.load(Ordering::Acquire) > chunk || self.failed.load(Ordering::Relaxed)
        };
        let mut since = None;
        loop {
            let next = self.next.load(Ordering::Relaxed);
            if next >= self.pieces() {
                return None;
            }
            let chunk = self.chunk_of(next);
            while !ready(chunk) {
                if since.get_or_insert_with(Instant::now).elapsed() < SPIN {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(NAP);
                }
            }
            // None: another thread took the chunk's last piece; wait for the next one's.
            if let Some(i) = self.claim_if(ready) {
                return Some(i);
            }
        }
    }

    /// Claims the next piece if its chunk passes `ok`.
    fn claim_if(&self, ok: impl Fn(usize) -> bool) -> Option<usize> {
        let mut i = self.next.load(Ordering::Relaxed);
        loop {
            if i >= self.pieces() || !ok(self.chunk_of(i)) {
                return None;
            }
            match self
                .next
                .compare_exchange_weak(i, i + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(i),
                Err(now) => i = now,
            }
        }
    }

    /// True once every piece of chunk `c` is done.
    fn chunk_done(&self, c: usize) -> bool {
        self.copied[c].load(Ordering::Acquire) >= self.pieces_of(c)
    }

    /// Copies piece `i`, claimed once its chunk was ready (`claim_ready`, `claim_if`), unless the
    /// copy failed, and counts it done, also when the copy panics (the job then fails).
    fn do_piece(&self, i: usize) {
        let p = self.piece(i);
        let _counted = Counted {
            job: self,
            chunk: p.chunk,
        };
        debug_assert!(
            self.failed.load(Ordering::Relaxed) || self.ready.load(Ordering::Acquire) > p.chunk,
            "piece {i} claimed before its chunk was ready"
        );
        if !self.failed.load(Ordering::Relaxed) {
            let (start, _) = self.chunks[p.chunk];
            let staged = self.bufs[p.chunk % self.bufs.len()] + (p.off - start);
            let host = self.host + p.off;
            let (dst, src) = match self.direction {
                Direction::HostToDevice => (staged, host),
                Direction::DeviceToHost => (host, staged),
            };
            // SAFETY: `run`'s caller keeps the pageable buffer valid for every chunk's bytes
            // until the copy has run, and the staging buffers hold every chunk's bytes
            // (CHUNK_MAX >= a chunk, or, behind a pending DMA, the room `Set::room_behind`
            // found); the chunk is ready (D2H: its DMA has landed; H2D: no DMA reads these bytes
            // of its slot any more, or, behind a DMA, no pending one reads them), and no other
            // piece covers these bytes.
            unsafe { copy(dst as *mut u8, src as *const u8, p.len, self.stores) };
            #[cfg(test)]
            if PANIC_IN_PIECE.get() == i + 1 {
                panic!("piece {i}: a bug (this test's own panic)");
            }
        }
    }

    /// The error of a copy whose piece panicked, once seen.
    fn panic_seen(&self) -> Result<()> {
        if self.panicked.load(Ordering::Acquire) {
            return Err(crate::error::Error::internal(
                "a host thread of the staged copy panicked while copying (a bug of this \
                 library); the copy did not complete",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
thread_local! {
    /// In this crate's unit tests: piece `n - 1` panics after its copy on this thread (0: none).
    static PANIC_IN_PIECE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts a piece done when dropped, after its copy or its panic.
struct Counted<'a> {
    job: &'a Job,
    chunk: usize,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The copy fails, and its other pieces are skipped.
            self.job.panicked.store(true, Ordering::Release);
            self.job.failed.store(true, Ordering::Relaxed);
        }
        // `done` first: once a chunk counts as copied (H2D: the caller may return after the
        // last one) the job counts as finished too.
        self.job.done.fetch_add(1, Ordering::Release);
        self.job.copied[self.chunk].fetch_add(1, Ordering::Release);
    }
}

impl Task for Job {
    fn work(&self) {
        let mut first = true;
        while let Some(i) = self.claim_ready() {
            // A pool thread's first piece (the caller claims through `claim_if`, or here only
            // on the way out after an error): a helper has joined.
            if first && !self.failed.load(Ordering::Relaxed) {
                self.helped.store(true, Ordering::Relaxed);
            }
            first = false;
            self.do_piece(i);
        }
    }

    fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.pieces()
    }
}

/// On the way out (an error, or a panic), lets every piece left be skipped and done, so that the
/// pool's threads finish and `Running` can take the job back.
struct Finish<'a>(&'a Job);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        if !self.0.finished() {
            self.0.failed.store(true, Ordering::Relaxed);
            self.0.work();
        }
    }
}

/// What `run` needs of a copy.
pub(super) struct Request<'a> {
    pub(super) set: &'a Set,
    /// The device of `stream` (events are made there).
    pub(super) device: i32,
    pub(super) direction: Direction,
    /// Device memory of the copy.
    pub(super) dev: *mut u8,
    /// Pageable host memory of the copy.
    pub(super) host: *mut u8,
    pub(super) stream: StreamHandle,
    /// Host threads, the caller included.
    pub(super) threads: usize,
    pub(super) stores: Stores,
    /// Whether an H2D copy counts its chunks still in flight at the end (`run`).
    pub(super) count_in_flight: bool,
    /// The set's slot of the first chunk (`Set::first_slot`); chunk k takes the k-th after it.
    pub(super) first_slot: usize,
    /// Set for a one-chunk H2D copy written behind the first slot's pending use, at this offset
    /// of its buffer (`Set::room_behind`): the slot is not waited for.
    pub(super) behind_at: Option<usize>,
}

impl Request<'_> {
    /// The slot of chunk `k`.
    fn slot(&self, k: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.set.slot(self.first_slot + k)
    }
}

/// Runs a staged copy of `chunks` ((offset, length) each) with the pipelined engine. D2H returns
/// with the data in `host`; H2D once every chunk's DMA is queued (the caller's buffer has been
/// read). With `count_in_flight`, an H2D copy that the pool's threads helped with also says how
/// many of its last chunks that can be in flight at once (the staging buffers, or every chunk of
/// a shorter copy) still waited for their DMA then (`adapt`'s measure); otherwise None.
///
/// # Safety
/// `dev` is device memory and `host` pageable memory, both valid for the chunks' bytes until the
/// copy has run; `stream` is NULL or a live stream of `device`; the set is this copy's alone
/// (with `behind_at`, its first slot's buffer is shared with a DMA still pending on `stream`
/// that reads only bytes before that offset).
pub(super) unsafe fn run(c: Request<'_>, chunks: Vec<(usize, usize)>) -> Result<Option<InFlight>> {
    let slots = c.set.slots.len().min(chunks.len());
    c.set.make_buffers();
    let mut bufs = (0..slots)
        .map(|k| c.slot(k).buffer().map(|b| b as usize))
        .collect::<Result<Vec<_>>>()?;
    if let Some(at) = c.behind_at {
        bufs[0] += at;
    }
    let job = Arc::new(Job::new(
        c.direction,
        c.host,
        bufs,
        chunks,
        c.threads,
        c.stores,
    ));
    let mut helpers = Helpers {
        job: job.clone(),
        threads: c.threads,
        running: None,
        started: false,
    };
    let finish = Finish(&job);
    // SAFETY: `dev` and `host` are valid for the chunks' bytes until the copy has run and
    // `stream` is NULL or a live stream of `device` (this function's contract); `bufs` are the
    // set's staging buffers, this copy's alone (with `behind_at`, past the bytes a pending DMA
    // on `stream` reads).
    let result = unsafe { drive(&c, &job, &mut helpers) };
    let helped = helpers.running.is_some();
    drop(finish);
    drop(helpers);
    result?;
    Ok(
        (c.count_in_flight && c.direction == Direction::HostToDevice && helped)
            .then(|| in_flight(&c, &job)),
    )
}

/// The pool's threads of one copy, started when there is work for them: D2H once the first chunk
/// has landed (or, asleep and on an idle stream, once the first DMAs are queued), H2D once the
/// first staging buffer is free (so that they do not spin while a DMA waits behind earlier work
/// on a stream).
struct Helpers {
    job: Arc<Job>,
    threads: usize,
    running: Option<workers::Running>,
    started: bool,
}

impl Helpers {
    fn start(&mut self) {
        if !self.started {
            self.started = true;
            self.running = workers::start(self.job.clone(), self.helpers());
        }
    }

    /// True when the calling thread copies alone (no helpers, or another copy holds them).
    fn alone(&self) -> bool {
        self.started && self.running.is_none()
    }

    /// True while the helpers were woken for this copy (asleep when it was handed to them)
    /// and none of them has claimed a piece yet: the calling thread copies meanwhile.
    fn waking(&self) -> bool {
        self.running.as_ref().is_some_and(|r| r.asleep > 0)
            && !self.job.helped.load(Ordering::Relaxed)
    }

    /// Whether the helpers this copy would start sleep now.
    fn asleep(&self) -> bool {
        workers::asleep(self.helpers()) > 0
    }

    fn helpers(&self) -> usize {
        (self.threads.saturating_sub(1)).min(self.job.pieces().saturating_sub(1))
    }
}

/// The calling thread's part: queues DMAs and events, publishes ready chunks, and copies pieces
/// (D2H: once every chunk has landed, or when the next DMA waits for a chunk to be copied out;
/// H2D: pieces of the next chunk to queue; alone: any ready piece), so that it never waits for
/// the helpers alone.
///
/// # Safety
/// As `run`.
unsafe fn drive(c: &Request<'_>, job: &Job, helpers: &mut Helpers) -> Result<()> {
    let n = job.chunks.len();
    let k = job.bufs.len();
    let (mut queued, mut ready) = (0, 0);
    let publish = |ready: usize| job.ready.store(ready, Ordering::Release);
    // A D2H copy whose helpers sleep, on an idle stream: they are woken as soon as its first
    // DMAs are queued, not once the first chunk has landed. Waking takes longer than a chunk
    // takes to land on an idle stream (docs/caches.md), so they join about when it lands,
    // and the calling thread copies out until they do. Behind work on the stream they would
    // only spin for it: they are woken when the first chunk lands. A failed query counts as
    // busy (the copy's own calls report any error).
    let mut wake_early = c.direction == Direction::DeviceToHost
        && helpers.asleep()
        // SAFETY: `stream` is NULL or a live stream (`run`'s contract).
        && unsafe { crate::safe::stream::query(c.stream) }.unwrap_or_else(|_| {
            crate::safe::runtime::take_last_cuda_error();
            false
        });
    loop {
        let mut progressed = false;
        match c.direction {
            Direction::DeviceToHost => {
                // A slot takes the next chunk's DMA once its last chunk has been copied out (and,
                // first, ordered after an earlier copy's use of it on the stream).
                while queued < n && (queued < k || job.chunk_done(queued - k)) {
                    let mut slot = c.slot(queued);
                    // An earlier copy's use of the slot (an H2D DMA reading it, say) is waited
                    // for by the stream, not here: the DMA is queued at once and starts as soon
                    // as the GPU is done with the buffer. (A slot whose chunk of this copy was
                    // copied out has no pending use.)
                    // SAFETY: `stream` is NULL or a live stream of `device` (`run`'s contract).
                    unsafe { slot.order_before_dma(c.stream, c.device) }?;
                    slot.prepare(c.device)?;
                    // SAFETY: `dev` is device memory valid for the chunk's bytes (`run`'s
                    // contract); the slot's last use is complete (its chunk of this copy was
                    // copied out) or ordered before this DMA on the stream
                    // (`order_before_dma`).
                    unsafe { queue(c, job, queued, &mut slot) }?;
                    queued += 1;
                    progressed = true;
                }
                if wake_early {
                    wake_early = false;
                    helpers.start();
                }
                if ready == 0 && queued == n.min(k) && !progressed {
                    // Nothing to do until the first chunk lands, which may be behind long work
                    // on the stream: wait as the application's device flags say (spin, yield
                    // or block), not in a loop of queries.
                    c.slot(0).wait()?;
                }
                while ready < queued && c.slot(ready).poll()? {
                    ready += 1;
                    publish(ready);
                    helpers.start();
                    progressed = true;
                }
                if job.finished() {
                    job.panic_seen()?;
                    return Ok(());
                }
                // Copy out too when alone, while the helpers wake, when every chunk has landed,
                // and when the next DMA waits for a chunk to be copied out: the copy never
                // depends on the helpers alone.
                if helpers.alone() || helpers.waking() || ready == n || (queued < n && queued >= k)
                {
                    if let Some(i) = job.claim_if(|ch| ch < ready) {
                        job.do_piece(i);
                        progressed = true;
                    }
                }
            }
            Direction::HostToDevice => {
                // Chunk `ready` may be copied in once its slot is free: the DMA of the chunk
                // before it in that slot is queued and has completed. The first slot is waited
                // for (an earlier copy's last chunks may be behind long work on a stream) as
                // the application's device flags say; the helpers start once it is free.
                while ready < n && (ready < k || queued > ready - k) {
                    let mut slot = c.slot(ready);
                    if ready > 0 && !slot.poll()? {
                        break;
                    }
                    // Written behind the slot's pending use: nothing to wait for.
                    if c.behind_at.is_none() {
                        slot.prepare(c.device)?;
                    }
                    ready += 1;
                    publish(ready);
                    helpers.start();
                    progressed = true;
                }
                while queued < ready && job.chunk_done(queued) {
                    // Every piece of the chunk counted, one that panicked included.
                    job.panic_seen()?;
                    let mut slot = c.slot(queued);
                    // SAFETY: `dev` is device memory valid for the chunk's bytes (`run`'s
                    // contract); every piece of the chunk is in the slot's buffer.
                    unsafe { queue(c, job, queued, &mut slot) }?;
                    queued += 1;
                    progressed = true;
                }
                if queued == n {
                    return Ok(());
                }
                let (next, alone) = (queued, helpers.alone());
                if let Some(i) = job.claim_if(|ch| ch < ready && (alone || ch == next)) {
                    job.do_piece(i);
                    progressed = true;
                }
            }
        }
        if !progressed {
            std::hint::spin_loop();
        }
    }
}

/// How many of the job's last chunks, one per staging buffer and all queued, still wait for
/// their DMA (their slots' events). A query that fails counts as waiting: the copy is queued,
/// and the slot's next use (`prepare`, `wait_all`) reports the error (`Slot::idle`).
fn in_flight(c: &Request<'_>, job: &Job) -> InFlight {
    let n = job.chunks.len();
    let last = n.saturating_sub(job.bufs.len())..n;
    InFlight {
        of: last.len(),
        pending: last.filter(|&k| !c.slot(k).idle()).count(),
    }
}

/// Queues chunk `k`'s DMA between its staging buffer and the device on the copy's stream, then
/// the slot's event.
///
/// # Safety
/// As `run`; the slot's buffer is ready for the DMA (D2H: every earlier use of it has completed
/// or is ordered before it on `c.stream`; H2D: it holds the chunk's bytes).
unsafe fn queue(c: &Request<'_>, job: &Job, k: usize, slot: &mut Slot) -> Result<()> {
    let (off, len) = job.chunks[k];
    let staged = job.bufs[k % job.bufs.len()] as *mut u8;
    // SAFETY: `dev` is valid for every chunk's bytes (this function's contract, as `run`'s), so
    // `off` lies in it.
    let dev = unsafe { c.dev.add(off) };
    let (dst, src, kind) = match c.direction {
        Direction::HostToDevice => (dev, staged.cast_const(), MemcpyKind::H2D),
        Direction::DeviceToHost => (staged, dev.cast_const(), MemcpyKind::D2H),
    };
    // SAFETY: both sides hold `len` bytes (a staging buffer holds CHUNK_MAX >= len, or the room
    // behind its pending use that `Set::room_behind` found) and stay valid until the DMA has
    // run (the slot's event, recorded next, says when); `stream` is NULL or a live stream (this
    // function's contract, as `run`'s).
    let queued = unsafe { cuda_copy::memcpy_async(dst.cast(), src.cast(), len, kind, c.stream) };
    queued.map_err(|e| {
        Error::cuda(
            e.call(),
            e.cuda_error(),
            format!("{} (chunk at {off})", e.detail()),
        )
    })?;
    let end = c.behind_at.unwrap_or(0) + len;
    // SAFETY: `stream` is NULL or a live stream of the device the slot's event was made on
    // (`c.device`: prepared for it, or found on it by `Set::room_behind`; this function's
    // contract, as `run`'s).
    unsafe { slot.record(c.stream, end) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_every_chunk_in_order() {
        let chunks = vec![(0, 256 << 10), (256 << 10, 100_000), (362_144, 1)];
        let job = Job::new(
            Direction::DeviceToHost,
            std::ptr::null_mut(),
            vec![0, 0],
            chunks.clone(),
            1,
            Stores::Cached,
        );
        assert_eq!(per_chunk(&job), vec![4, 2, 1]);
        let mut off = 0;
        for p in all_pieces(&job) {
            assert_eq!(p.off, off);
            let (s, l) = chunks[p.chunk];
            assert!(p.off >= s && p.off + p.len <= s + l && p.len <= 64 << 10);
            off += p.len;
        }
        assert_eq!(off, 362_145);
    }

    #[test]
    fn a_small_chunk_is_split_among_every_thread_a_large_one_in_pieces_of_at_most_the_max() {
        assert_eq!(piece_for(256 << 10, 12), 24 << 10);
        assert_eq!(piece_for(8 << 20, 12), MAX_PIECE);
        assert_eq!(piece_for(1 << 20, 12), MAX_PIECE);
        assert_eq!(piece_for(4096, 12), MIN_PIECE);
        assert_eq!(piece_for(256 << 10, 0), MAX_PIECE);
        // Each chunk gets its own pieces: the first (256 KiB) in 11 for 12 threads, the next
        // (1 MiB) in 16 of the most, 64 KiB.
        let job = Job::new(
            Direction::HostToDevice,
            std::ptr::null_mut(),
            vec![0, 0],
            vec![(0, 256 << 10), (256 << 10, 1 << 20)],
            12,
            Stores::Cached,
        );
        assert_eq!(per_chunk(&job), vec![11, 16]);
        let pieces = all_pieces(&job);
        assert!(pieces[..11]
            .iter()
            .all(|p| p.chunk == 0 && p.len <= 24 << 10));
        assert_eq!(pieces.iter().map(|p| p.len).sum::<usize>(), 1280 << 10);
    }

    /// Every piece of `job`, in order.
    fn all_pieces(job: &Job) -> Vec<Piece> {
        (0..job.pieces()).map(|i| job.piece(i)).collect()
    }

    /// The number of pieces of each chunk of `job`.
    fn per_chunk(job: &Job) -> Vec<usize> {
        (0..job.chunks.len()).map(|c| job.pieces_of(c)).collect()
    }

    #[test]
    fn each_piece_follows_from_its_index_as_if_the_chunks_were_cut_one_by_one() {
        let mib = 1 << 20;
        let plans = [
            super::super::plan::chunks(256 * mib, Direction::HostToDevice, 0, 0),
            super::super::plan::chunks(64 * mib + 12_345, Direction::HostToDevice, 0, 0),
            super::super::plan::chunks(3 * mib + 1, Direction::DeviceToHost, 0, 0),
            vec![(0, 1)],
            vec![(0, 100_000), (100_000, 4096), (104_096, 65_537)],
        ];
        for chunks in plans {
            for threads in [1, 3, 12, 16] {
                // The chunks cut one by one: each into pieces of `piece_for`, the last shorter.
                let mut want = Vec::new();
                for (c, &(off, len)) in chunks.iter().enumerate() {
                    let piece = piece_for(len, threads);
                    let mut at = 0;
                    while at < len {
                        let n = piece.min(len - at);
                        want.push(Piece {
                            chunk: c,
                            off: off + at,
                            len: n,
                        });
                        at += n;
                    }
                }
                let job = Job::new(
                    Direction::HostToDevice,
                    std::ptr::null_mut(),
                    vec![0; 4],
                    chunks.clone(),
                    threads,
                    Stores::Cached,
                );
                assert_eq!(
                    all_pieces(&job),
                    want,
                    "{} chunks, {threads} threads",
                    chunks.len()
                );
                for (c, n) in per_chunk(&job).into_iter().enumerate() {
                    assert_eq!(n, want.iter().filter(|p| p.chunk == c).count());
                }
            }
        }
    }

    /// A D2H job of two 32 KiB chunks from `staging` (one slot) into `host`, two threads.
    fn two_chunk_d2h(host: &mut [u8], staging: &[u8]) -> Job {
        Job::new(
            Direction::DeviceToHost,
            host.as_mut_ptr(),
            vec![staging.as_ptr() as usize],
            vec![(0, 1 << 15), (1 << 15, 1 << 15)],
            2,
            Stores::Cached,
        )
    }

    #[test]
    fn a_thread_waits_for_a_chunk_without_holding_its_pieces() {
        let mut host = vec![7u8; 1 << 16];
        let staging = vec![1u8; 1 << 16];
        let job = two_chunk_d2h(&mut host, &staging);
        assert!(job.pieces() >= 2 && job.piece(0).chunk == 0);
        std::thread::scope(|s| {
            // No chunk ready: a thread waits, past its spin, and claims nothing meanwhile.
            let waiting = s.spawn(|| job.claim_ready());
            std::thread::sleep(SPIN * 8);
            assert!(!waiting.is_finished(), "still waiting past its spin");
            assert_eq!(job.next.load(Ordering::Relaxed), 0, "nothing claimed");
            job.ready.store(1, Ordering::Release);
            assert_eq!(waiting.join().expect("no panic"), Some(0));
            // The caller takes chunk 0's other pieces; chunk 1 is not ready: a thread waits
            // for it, holding nothing, until the copy fails, then takes the next piece (to
            // skip it).
            let mut taken = 1;
            while job.claim_if(|ch| ch < 1).is_some() {
                taken += 1;
            }
            assert_eq!(job.piece(taken).chunk, 1);
            let waiting = s.spawn(|| job.claim_ready());
            std::thread::sleep(SPIN * 8);
            assert!(!waiting.is_finished(), "still waiting past its spin");
            assert_eq!(job.next.load(Ordering::Relaxed), taken, "nothing claimed");
            job.failed.store(true, Ordering::Relaxed);
            assert_eq!(waiting.join().expect("no panic"), Some(taken));
        });
    }

    #[test]
    fn a_failed_job_skips_what_is_left_and_finishes() {
        let mut host = vec![7u8; 1 << 16];
        let staging = vec![1u8; 1 << 16];
        let job = two_chunk_d2h(&mut host, &staging);
        // Chunk 0 ready: its two pieces are copied; then the copy fails before chunk 1.
        job.ready.store(1, Ordering::Release);
        let a = job.claim_ready().expect("piece 0");
        let b = job.claim_ready().expect("piece 1");
        job.do_piece(a);
        job.do_piece(b);
        assert!(job.chunk_done(0) && !job.chunk_done(1));
        drop(Finish(&job));
        assert!(job.finished());
        assert!(host[..1 << 15].iter().all(|&v| v == 1));
        assert!(
            host[1 << 15..].iter().all(|&v| v == 7),
            "skipped, not copied"
        );
    }

    #[test]
    fn a_piece_that_panics_counts_as_done_and_fails_the_copy() {
        let mut host = vec![7u8; 1 << 16];
        let staging = vec![1u8; 1 << 16];
        let job = two_chunk_d2h(&mut host, &staging);
        job.ready.store(2, Ordering::Release);
        assert!(job.panic_seen().is_ok());
        let a = job.claim_ready().expect("piece 0");
        PANIC_IN_PIECE.set(a + 1);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.do_piece(a)));
        PANIC_IN_PIECE.set(0);
        assert!(caught.is_err(), "the piece panicked");
        assert_eq!(job.done.load(Ordering::Acquire), 1, "counted done");
        let e = job.panic_seen().expect_err("the copy fails");
        assert_eq!(e.kind(), crate::error::ErrorKind::Internal);
        // The other pieces are skipped and counted: the job finishes.
        job.work();
        assert!(job.finished());
        assert!(
            host[1 << 15..].iter().all(|&v| v == 7),
            "skipped, not copied"
        );
    }
}

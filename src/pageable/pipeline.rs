//! The pipeline of a staged copy. Only the calling thread talks to CUDA: it queues each chunk's
//! DMA and event and publishes how many chunks are ready; the pool's threads claim pieces in
//! order and copy each once its chunk is ready, holding no piece while they wait.
//!
//! - D2H: chunk k is ready once its DMA into slot k mod K has landed; the DMA of chunk k+K is
//!   queued once every piece of chunk k has been copied out.
//! - H2D: chunk k is ready once slot k mod K is free; its DMA is queued once every piece of it
//!   has been copied in.

use super::adapt::InFlight;
use super::hostcopy::{copy, Stores};
use super::lane::Lane;
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
/// The largest piece: a chunk is shared by many threads, but few are woken (docs/caches.md).
const MAX_PIECE: usize = 64 << 10;

/// The piece length for a chunk of `len` bytes copied by `threads`: about one per thread, 4 KiB
/// aligned, clamped to `MIN_PIECE..=MAX_PIECE` (a small chunk's DMA waits for its last piece).
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
    /// Each chunk's first piece, then the number of pieces (a list of 4000 pieces would take
    /// longer to make than the first chunk's copy).
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
    /// Set once a pool thread has claimed a piece (`Helpers::waking`).
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

    /// Claims the next piece once its chunk is ready (or the copy failed); None once all are
    /// claimed. A waiting thread holds no piece, so no DMA waits for a thread that napped.
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

    /// Copies piece `i` (claimed once its chunk was ready) unless the copy failed, and counts it
    /// done, also when the copy panics (the job then fails).
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
        // `done` first: once a chunk counts as copied (the caller may return) the job is done.
        self.job.done.fetch_add(1, Ordering::Release);
        self.job.copied[self.chunk].fetch_add(1, Ordering::Release);
    }
}

impl Task for Job {
    fn work(&self) {
        let mut first = true;
        while let Some(i) = self.claim_ready() {
            // A pool thread's first piece: a helper has joined.
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

/// On the way out (an error, a panic): every piece left is skipped, so the pool's threads finish.
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
    /// The copy's stream, asked before each use (`Lane`).
    pub(super) lane: &'a Lane,
    /// Host threads, the caller included.
    pub(super) threads: usize,
    pub(super) stores: Stores,
    /// Whether an H2D copy counts its chunks still in flight at the end (`run`).
    pub(super) count_in_flight: bool,
    /// The set's slot of the first chunk (`Set::first_slot`); chunk k takes the k-th after it.
    pub(super) first_slot: usize,
    /// For a one-chunk H2D copy behind the first slot's pending use: the offset in its buffer.
    pub(super) behind_at: Option<usize>,
}

impl Request<'_> {
    /// The slot of chunk `k`.
    fn slot(&self, k: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.set.slot(self.first_slot + k)
    }
}

/// Runs a staged copy of `chunks` ((offset, length) each). D2H returns with the data in `host`;
/// H2D once every chunk's DMA is queued. With `count_in_flight`, a helped H2D copy also returns
/// how many of its last chunks still waited for their DMA (`adapt`'s measure).
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

/// The pool's threads of one copy, started once there is work for them.
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

    /// True while the helpers woken for this copy have not yet claimed a piece.
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

/// The calling thread's part: queues DMAs and events, publishes ready chunks, copies pieces.
///
/// # Safety
/// As `run`.
unsafe fn drive(c: &Request<'_>, job: &Job, helpers: &mut Helpers) -> Result<()> {
    let n = job.chunks.len();
    let k = job.bufs.len();
    let (mut queued, mut ready) = (0, 0);
    let publish = |ready: usize| job.ready.store(ready, Ordering::Release);
    // Sleeping helpers of a D2H on an idle stream are woken once its first DMAs are queued:
    // waking takes longer than a chunk takes to land (docs/caches.md). A failed query counts
    // as busy (the copy's own calls report any error).
    let mut wake_early = c.direction == Direction::DeviceToHost && helpers.asleep() && {
        let (stream, _legacy) = c.lane.next()?;
        // SAFETY: the lane's stream is NULL or a live stream (`run`'s contract).
        unsafe { crate::safe::stream::query(stream) }.unwrap_or_else(|_| {
            crate::safe::runtime::take_last_cuda_error();
            false
        })
    };
    loop {
        let mut progressed = false;
        match c.direction {
            Direction::DeviceToHost => {
                // A slot takes the next chunk's DMA once its last chunk has been copied out; an
                // earlier copy's use of it is ordered on the stream, not waited for here.
                while queued < n && (queued < k || job.chunk_done(queued - k)) {
                    let mut slot = c.slot(queued);
                    let (mut stream, _legacy) = c.lane.next()?;
                    // SAFETY: the lane's stream is NULL or a live stream of `device` (`run`'s
                    // contract).
                    if let Err(e) = unsafe { slot.order_before_dma(stream, c.device) } {
                        if !c.lane.lost_race(&e) {
                            return Err(e);
                        }
                        stream = c.lane.move_now()?;
                        // SAFETY: the side stream is live, of `device`.
                        unsafe { slot.order_before_dma(stream, c.device) }?;
                    }
                    slot.prepare(c.device)?;
                    // SAFETY: `dev` is device memory valid for the chunk's bytes (`run`'s
                    // contract); the slot's last use is complete (its chunk of this copy was
                    // copied out) or ordered before this DMA on the stream
                    // (`order_before_dma`).
                    unsafe { queue(c, job, queued, &mut slot, stream) }?;
                    queued += 1;
                    progressed = true;
                }
                if wake_early {
                    wake_early = false;
                    helpers.start();
                }
                if ready == 0 && queued == n.min(k) && !progressed {
                    // Until the first chunk lands: wait as the device flags say.
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
                // and when the next DMA waits for a chunk to be copied out.
                if helpers.alone() || helpers.waking() || ready == n || (queued < n && queued >= k)
                {
                    if let Some(i) = job.claim_if(|ch| ch < ready) {
                        job.do_piece(i);
                        progressed = true;
                    }
                }
            }
            Direction::HostToDevice => {
                // Chunk `ready` may be copied in once its slot's previous DMA has completed.
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
                    let (stream, _legacy) = c.lane.next()?;
                    if c.lane.moved() {
                        // A chunk written behind a DMA pending on the legacy stream: the slot's
                        // next user waits for this chunk's event alone (nothing else is busy).
                        // SAFETY: the side stream is live, of `device` (`run`'s contract).
                        unsafe { slot.order_before_dma(stream, c.device) }?;
                    }
                    // SAFETY: `dev` is device memory valid for the chunk's bytes (`run`'s
                    // contract); every piece of the chunk is in the slot's buffer.
                    unsafe { queue(c, job, queued, &mut slot, stream) }?;
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

/// How many of the job's last chunks (one per staging buffer) still wait for their DMA. A failed
/// query counts as waiting; the slot's next use reports the error (`Slot::idle`).
fn in_flight(c: &Request<'_>, job: &Job) -> InFlight {
    let n = job.chunks.len();
    let last = n.saturating_sub(job.bufs.len())..n;
    InFlight {
        of: last.len(),
        pending: last.filter(|&k| !c.slot(k).idle()).count(),
    }
}

/// Queues chunk `k`'s DMA on `stream` (the lane's, as `Lane::next` gave it), then the slot's
/// event.
///
/// # Safety
/// As `run`; the slot's buffer is ready for the DMA (D2H: every earlier use of it has completed
/// or is ordered before it on `stream`; H2D: it holds the chunk's bytes).
unsafe fn queue(
    c: &Request<'_>,
    job: &Job,
    k: usize,
    slot: &mut Slot,
    stream: StreamHandle,
) -> Result<()> {
    let (off, len) = job.chunks[k];
    let staged = job.bufs[k % job.bufs.len()] as *mut u8;
    // SAFETY: `dev` is valid for every chunk's bytes (this function's contract, as `run`'s), so
    // `off` lies in it.
    let dev = unsafe { c.dev.add(off) };
    let (dst, src, kind) = match c.direction {
        Direction::HostToDevice => (dev, staged.cast_const(), MemcpyKind::H2D),
        Direction::DeviceToHost => (staged, dev.cast_const(), MemcpyKind::D2H),
    };
    let chunk = |e: Error| {
        Error::cuda(
            e.call(),
            e.cuda_error(),
            format!("{} (chunk at {off})", e.detail()),
        )
    };
    let mut stream = stream;
    // SAFETY: both sides hold `len` bytes (a staging buffer holds CHUNK_MAX >= len, or the room
    // behind its pending use that `Set::room_behind` found) and stay valid until the DMA has
    // run (the slot's event, recorded next, says when); `stream` is NULL or a live stream (this
    // function's contract, as `run`'s).
    if let Err(e) = unsafe { cuda_copy::memcpy_async(dst.cast(), src.cast(), len, kind, stream) } {
        if !c.lane.lost_race(&e) {
            return Err(chunk(e));
        }
        // Nothing was queued: the rest of the copy goes to the side stream, this DMA first.
        stream = c.lane.move_now()?;
        // SAFETY: as above; the side stream is live, of `c.device`, and waits for the slot's
        // last use (a DMA behind which this chunk was written).
        unsafe { slot.order_before_dma(stream, c.device) }?;
        // SAFETY: as the first try.
        unsafe { cuda_copy::memcpy_async(dst.cast(), src.cast(), len, kind, stream) }
            .map_err(chunk)?;
    }
    let end = c.behind_at.unwrap_or(0) + len;
    // SAFETY: `stream` is NULL or a live stream of the device the slot's event was made on
    // (`c.device`: prepared for it, or found on it by `Set::room_behind`; this function's
    // contract, as `run`'s).
    if let Err(e) = unsafe { slot.record(stream, end) } {
        if !c.lane.lost_race(&e) {
            return Err(e);
        }
        // The DMA is queued on the legacy stream, which a capture begun since forbids: its
        // event is recorded there once the capture has ended.
        c.lane.wait_usable()?;
        // SAFETY: as above.
        unsafe { slot.record(stream, end) }?;
    }
    c.lane.recorded(stream, slot.event_raw());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job over no memory, to cut pieces.
    fn cut(chunks: &[(usize, usize)], threads: usize) -> Job {
        let (host, bufs) = (std::ptr::null_mut(), vec![0; 2]);
        Job::new(
            Direction::HostToDevice,
            host,
            bufs,
            chunks.to_vec(),
            threads,
            Stores::Cached,
        )
    }

    #[test]
    fn pieces_cover_every_chunk_in_order() {
        let chunks = vec![(0, 256 << 10), (256 << 10, 100_000), (362_144, 1)];
        let job = cut(&chunks, 1);
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
        let job = cut(&[(0, 256 << 10), (256 << 10, 1 << 20)], 12);
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
                let job = cut(&chunks, threads);
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
            // Chunk 1 is not ready: a thread waits for it, holding nothing, until the copy fails.
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

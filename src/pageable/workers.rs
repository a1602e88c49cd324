//! The fast path's host threads. Started on first use; after a job they spin a short while,
//! then sleep until the next job. One job at a time: a caller that finds the threads busy does
//! its job alone. A job names how many of the threads may help with it; the others leave it.

use crate::util::sync::{read, write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, TryLockError};
use std::time::{Duration, Instant};

/// Work that any number of threads can take part in: `work` claims pieces until none is left
/// and returns; `finished` is true once every piece is done (or abandoned after an error).
pub(crate) trait Task: Send + Sync {
    /// Claims and does pieces until none is left. A piece that panics still counts as done (the
    /// task tells its caller), so `Running` is not left waiting for it.
    fn work(&self);
    /// True once no piece is left to do or in progress.
    fn finished(&self) -> bool;
}

/// The most threads the pool holds.
const MAX_HELPERS: usize = 63;

struct Pool {
    generation: AtomicU64,
    /// The job, and how many threads may take part in it (those of index below). A read-write
    /// lock: the woken threads all read it at once.
    current: RwLock<Option<(Arc<dyn Task>, usize)>>,
    submit: Mutex<()>,
    /// Threads started so far (written by `grow`, under `submit`).
    started: AtomicUsize,
}

static POOL: Pool = Pool {
    generation: AtomicU64::new(0),
    current: RwLock::new(None),
    submit: Mutex::new(()),
    started: AtomicUsize::new(0),
};

/// The pool's threads, in the order they were started.
static THREADS: [OnceLock<std::thread::Thread>; MAX_HELPERS] =
    [const { OnceLock::new() }; MAX_HELPERS];

/// Whether each thread of the pool sleeps (has spun its while without a job).
static SLEEPING: [AtomicBool; MAX_HELPERS] = [const { AtomicBool::new(false) }; MAX_HELPERS];

/// How long a thread spins for the next job before it sleeps: waking takes far longer than a
/// handoff to a spinning thread (docs/caches.md).
const SPIN: Duration = Duration::from_micros(250);

/// The spin in use: `SPIN`, or in unit tests a spin they set (0: `SPIN`).
#[inline]
fn spin() -> Duration {
    #[cfg(test)]
    {
        let ns = TEST_SPIN_NS.load(Ordering::Relaxed);
        if ns > 0 {
            return Duration::from_nanos(ns);
        }
    }
    SPIN
}

#[cfg(test)]
static TEST_SPIN_NS: AtomicU64 = AtomicU64::new(0);

/// Keeps the object holding this code mapped for the rest of the process: the threads run its
/// code, so a `dlclose` of the cdylib must not unmap it.
fn pin_this_library() {
    // SAFETY: `Dl_info` is plain data (pointers and integers), for which all zeros is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = pin_this_library as *const libc::c_void;
    // SAFETY: `info` is a writable `Dl_info`; dladdr only reads the loader's tables about
    // `here`, an address of our own code.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: `dli_fname` is the NUL-terminated path of the loaded object holding us; with
    // RTLD_NOLOAD nothing new is loaded, the object's reference is kept for good.
    unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
}

/// Starts threads until the pool holds `helpers` (at most MAX_HELPERS) and returns how many it
/// holds, at most `helpers`. Called only by `start`, with `submit` held.
fn grow(helpers: usize) -> usize {
    let want = helpers.min(MAX_HELPERS);
    let have = POOL.started.load(Ordering::Acquire);
    if have >= want {
        return want;
    }
    if have == 0 {
        pin_this_library();
    }
    // Read here, before `start` publishes the job: read in the thread, it could already be the
    // new generation, and the thread would sleep through its first job.
    let seen = POOL.generation.load(Ordering::Acquire);
    for (i, slot) in THREADS.iter().enumerate().take(want).skip(have) {
        let spawned = std::thread::Builder::new()
            .name(format!("llaisys-nvidia-copy-{i}"))
            .spawn(move || worker_loop(i, seen));
        let Ok(handle) = spawned else { break };
        // Only this loop, one caller at a time, sets slot i, once.
        let _ = slot.set(handle.thread().clone());
        POOL.started.store(i + 1, Ordering::Release);
    }
    POOL.started.load(Ordering::Acquire).min(want)
}

fn worker_loop(index: usize, mut seen: u64) {
    loop {
        let idle_since = Instant::now();
        loop {
            let g = POOL.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if idle_since.elapsed() < spin() {
                std::hint::spin_loop();
            } else {
                // A job published after the check above unparks us: park returns at once.
                SLEEPING[index].store(true, Ordering::Relaxed);
                std::thread::park();
                SLEEPING[index].store(false, Ordering::Relaxed);
            }
        }
        let current = read(&POOL.current).clone();
        if let Some((task, helpers)) = current {
            if index < helpers {
                // A panic (a bug) is the task's to report; the thread stays in the pool.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.work()));
            }
        }
    }
}

/// How many of the first `helpers` threads of the pool sleep now.
pub(crate) fn asleep(helpers: usize) -> usize {
    SLEEPING[..helpers.min(MAX_HELPERS)]
        .iter()
        .filter(|s| s.load(Ordering::Relaxed))
        .count()
}

/// A job handed to the pool's threads by `start`; dropping it waits until the job has finished
/// and takes it back from the pool.
pub(crate) struct Running {
    task: Arc<dyn Task>,
    /// How many of the job's helpers slept when it was handed to them (threads it started
    /// count as awake).
    pub(crate) asleep: usize,
    _one_job: MutexGuard<'static, ()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        while !self.task.finished() {
            std::hint::spin_loop();
        }
        *write(&POOL.current) = None;
    }
}

/// Hands `task` to `helpers` of the pool's threads and returns at once; None when there are no
/// helpers or another job holds them (the caller then does the job alone). The caller takes part
/// before dropping the guard.
pub(crate) fn start(task: Arc<dyn Task>, helpers: usize) -> Option<Running> {
    if helpers == 0 {
        return None;
    }
    // A panic once unwound through a job (its guard poisoned the lock): the pool stays usable.
    let one_job = match POOL.submit.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    let helpers = grow(helpers);
    if helpers == 0 {
        return None;
    }
    let asleep = asleep(helpers);
    *write(&POOL.current) = Some((task.clone(), helpers));
    POOL.generation.fetch_add(1, Ordering::Release);
    for t in THREADS.iter().take(helpers).filter_map(OnceLock::get) {
        t.unpark();
    }
    Some(Running {
        task,
        asleep,
        _one_job: one_job,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::sync::lock;

    /// Serializes the tests that use the pool.
    static TEST_POOL: Mutex<()> = Mutex::new(());

    /// Runs `task` on the calling thread and `helpers` of the pool's threads (as `start`), and
    /// returns once it has finished.
    fn run(task: Arc<dyn Task>, helpers: usize) {
        let running = start(task.clone(), helpers);
        task.work();
        drop(running);
        while !task.finished() {
            std::thread::yield_now();
        }
    }

    /// Copies `src` into `dst` in pieces of `piece` bytes.
    struct Copy {
        src: Vec<u8>,
        dst: Mutex<Vec<u8>>,
        piece: usize,
        next: AtomicUsize,
        done: AtomicUsize,
        pieces: usize,
    }

    impl Task for Copy {
        fn work(&self) {
            loop {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                if i >= self.pieces {
                    return;
                }
                let off = i * self.piece;
                let end = (off + self.piece).min(self.src.len());
                lock(&self.dst)[off..end].copy_from_slice(&self.src[off..end]);
                self.done.fetch_add(1, Ordering::Release);
            }
        }
        fn finished(&self) -> bool {
            self.done.load(Ordering::Acquire) >= self.pieces
        }
    }

    fn job(len: usize, piece: usize, seed: u8) -> Arc<Copy> {
        Arc::new(Copy {
            src: (0..len)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                .collect(),
            dst: Mutex::new(vec![0; len]),
            piece,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            pieces: len.div_ceil(piece),
        })
    }

    #[test]
    fn every_piece_of_every_job_is_done_from_many_threads() {
        let _pool = lock(&TEST_POOL);
        let callers: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for k in 0..100 {
                        let j = job(4096 + k * 97 + t, 64, (k + t) as u8);
                        run(j.clone(), 3);
                        assert!(*lock(&j.dst) == j.src, "caller {t} job {k}");
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().expect("caller");
        }
    }

    /// Notes every thread that works on it; each piece takes a while, so that every thread
    /// still spinning from an earlier job would have time to join.
    struct Crowd {
        seen: Mutex<Vec<std::thread::ThreadId>>,
        next: AtomicUsize,
        done: AtomicUsize,
        pieces: usize,
    }

    fn crowd(pieces: usize) -> Arc<Crowd> {
        Arc::new(Crowd {
            seen: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            pieces,
        })
    }

    /// Runs `j` with `helpers`, every pool thread awake and given time to look at it first.
    fn crowd_run(j: &Arc<Crowd>, helpers: usize) {
        let running = start(j.clone(), helpers).expect("the pool is free (TEST_POOL)");
        for t in THREADS.iter().filter_map(OnceLock::get) {
            t.unpark();
        }
        std::thread::sleep(Duration::from_millis(10));
        j.work();
        drop(running);
    }

    impl Task for Crowd {
        fn work(&self) {
            {
                let mut seen = lock(&self.seen);
                let me = std::thread::current().id();
                if !seen.contains(&me) {
                    seen.push(me);
                }
            }
            while self.next.fetch_add(1, Ordering::Relaxed) < self.pieces {
                std::thread::sleep(Duration::from_micros(200));
                self.done.fetch_add(1, Ordering::Release);
            }
        }
        fn finished(&self) -> bool {
            self.done.load(Ordering::Acquire) >= self.pieces
        }
    }

    #[test]
    fn a_job_gets_no_more_helpers_than_it_names_and_the_pool_grows_to_them() {
        let _pool = lock(&TEST_POOL);
        // A job for four helpers grows the pool to four threads (at least).
        let j = crowd(8);
        run(j.clone(), 4);
        assert!(j.finished());
        assert!(POOL.started.load(Ordering::Acquire) >= 4);
        for helpers in [1, 2, 3] {
            // One helper alone needs 40 ms for it.
            let j = crowd(200);
            crowd_run(&j, helpers);
            assert!(j.finished(), "helpers {helpers}");
            let threads = lock(&j.seen).len();
            assert!(
                threads <= helpers + 1,
                "{threads} threads took part in a job for the caller and {helpers} helpers"
            );
        }
    }

    #[test]
    fn threads_sleep_after_their_spin_and_a_job_counts_those_it_wakes() {
        let _pool = lock(&TEST_POOL);
        // A job for 3 helpers, a pause of `gap`, then the next job: how many of its 3 helpers
        // slept (retried until it is `want`, for at most 10 s: a loaded machine may deschedule).
        let asleep = |want: usize, gap: Duration| {
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                run(crowd(40), 3);
                std::thread::sleep(gap);
                let j = crowd(40);
                let running = start(j.clone(), 3).expect("the pool is free (TEST_POOL)");
                let n = running.asleep;
                j.work();
                drop(running);
                if n == want || Instant::now() > until {
                    return n;
                }
            }
        };
        // With a spin of 1 ms, 50 ms after a job the 3 helpers sleep; with a spin of 2 s, right
        // after one, they still spin. The spin goes back to SPIN even when an assertion fails.
        struct Restore;
        impl Drop for Restore {
            fn drop(&mut self) {
                TEST_SPIN_NS.store(0, Ordering::Relaxed);
            }
        }
        let _restore = Restore;
        TEST_SPIN_NS.store(1_000_000, Ordering::Relaxed);
        let slept = asleep(3, Duration::from_millis(50));
        TEST_SPIN_NS.store(2_000_000_000, Ordering::Relaxed);
        // Threads asleep from the phase before wake for the first job and then spin 2 s.
        let awake = asleep(0, Duration::ZERO);
        assert_eq!(
            slept, 3,
            "50 ms after a job (spin 1 ms), the 3 helpers slept before the next job"
        );
        assert_eq!(
            awake, 0,
            "right after a job (spin 2 s), a helper slept before the next job"
        );
    }

    /// Panics in every piece a pool thread does (a bug in a task); each piece counts as done
    /// all the same, as `Task::work` asks.
    struct Bomb {
        caller: std::thread::ThreadId,
        panicked: Mutex<Vec<std::thread::ThreadId>>,
        next: AtomicUsize,
        done: AtomicUsize,
        pieces: usize,
    }

    impl Task for Bomb {
        fn work(&self) {
            struct Counted<'a>(&'a AtomicUsize);
            impl Drop for Counted<'_> {
                fn drop(&mut self) {
                    self.0.fetch_add(1, Ordering::Release);
                }
            }
            while self.next.fetch_add(1, Ordering::Relaxed) < self.pieces {
                let _counted = Counted(&self.done);
                let me = std::thread::current().id();
                if me != self.caller {
                    lock(&self.panicked).push(me);
                    panic!("a piece's bug (this test's own panic)");
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        fn finished(&self) -> bool {
            self.done.load(Ordering::Acquire) >= self.pieces
        }
    }

    #[test]
    fn a_panic_in_a_pool_thread_ends_neither_the_job_nor_the_thread() {
        let _pool = lock(&TEST_POOL);
        let bomb = Arc::new(Bomb {
            caller: std::thread::current().id(),
            panicked: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            pieces: 40,
        });
        // Until the pool's thread has taken a piece (it may be asleep when the job comes).
        let until = Instant::now() + Duration::from_secs(10);
        while lock(&bomb.panicked).is_empty() && Instant::now() < until {
            bomb.next.store(0, Ordering::Relaxed);
            bomb.done.store(0, Ordering::Relaxed);
            let running = start(bomb.clone(), 1).expect("the pool is free (TEST_POOL)");
            std::thread::sleep(Duration::from_millis(5));
            bomb.work();
            // Returns once every piece counts as done, the one that panicked included.
            drop(running);
            assert!(bomb.finished());
        }
        let panicked = lock(&bomb.panicked)[0];
        // The thread that panicked takes part in the next job.
        let crowd = crowd(200);
        crowd_run(&crowd, 1);
        assert!(
            lock(&crowd.seen).contains(&panicked),
            "the pool's thread that panicked in a job took no part in the next"
        );
    }
}

//! The fast path's host threads. Started on first use; after a job they spin a short while
//! (the chunks of a copy, and copies, come in bursts), then sleep until the next job, so an idle
//! process uses no CPU. One job at a time: a caller that finds the threads busy does its job
//! alone.

use crate::sync::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Work that any number of threads can take part in: `work` claims pieces until none is left
/// and returns; `finished` is true once every piece is done (or abandoned after an error).
pub(crate) trait Task: Send + Sync {
    /// Claims and does pieces until none is left.
    fn work(&self);
    /// True once no piece is left to do or in progress.
    fn finished(&self) -> bool;
}

struct Pool {
    generation: AtomicU64,
    current: Mutex<Option<Arc<dyn Task>>>,
    submit: Mutex<()>,
}

static POOL: Pool = Pool {
    generation: AtomicU64::new(0),
    current: Mutex::new(None),
    submit: Mutex::new(()),
};

/// How long a thread spins for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(250);

/// Keeps the object holding this code mapped for the rest of the process: the threads run its
/// code, so a `dlclose` of the cdylib (or of a library it is linked into) must not unmap it.
/// `RTLD_NOLOAD | RTLD_NODELETE` on ourselves only marks the loaded object; for the staticlib in
/// an executable it names the program itself, which is never unloaded.
fn pin_this_library() {
    // SAFETY: plain data, filled by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = pin_this_library as *const libc::c_void;
    // SAFETY: dladdr only reads the loader's tables about an address of our own code.
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

/// The threads (`helpers` of them), started on first use, after the library is pinned.
fn threads(helpers: usize) -> &'static [std::thread::Thread] {
    static THREADS: OnceLock<Vec<std::thread::Thread>> = OnceLock::new();
    THREADS.get_or_init(|| {
        if helpers > 0 {
            pin_this_library();
        }
        // The threads start from the generation before the job that starts them is published
        // (`start` publishes after this returns): read in the thread, it could already be the
        // new one, and the thread would sleep through its first job.
        let seen = POOL.generation.load(Ordering::Acquire);
        (0..helpers)
            .filter_map(|i| {
                std::thread::Builder::new()
                    .name(format!("llaisys-nvidia-copy-{i}"))
                    .spawn(move || worker_loop(seen))
                    .ok()
                    .map(|h| h.thread().clone())
            })
            .collect()
    })
}

fn worker_loop(mut seen: u64) {
    loop {
        let idle_since = Instant::now();
        loop {
            let g = POOL.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if idle_since.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                // A job published after the check above unparks us: park returns at once.
                std::thread::park();
            }
        }
        let task = lock(&POOL.current).clone();
        if let Some(task) = task {
            task.work();
        }
    }
}

/// A job handed to the pool's threads by `start`; dropping it waits until the job has finished
/// and takes it back from the pool.
pub(crate) struct Running {
    task: Arc<dyn Task>,
    _one_job: MutexGuard<'static, ()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        while !self.task.finished() {
            std::hint::spin_loop();
        }
        *lock(&POOL.current) = None;
    }
}

/// Hands `task` to the pool's threads (`pool` of them, started on first use; `wake` of them
/// are woken, the others join only if they are still spinning) and returns at once; None when
/// there are no helpers or another job holds them: the caller then does the job alone. The
/// caller takes part by calling `task.work()` (or its own loop) before dropping the guard.
pub(crate) fn start(task: Arc<dyn Task>, pool: usize, wake: usize) -> Option<Running> {
    if pool == 0 || wake == 0 || threads(pool).is_empty() {
        return None;
    }
    let one_job = POOL.submit.try_lock().ok()?;
    *lock(&POOL.current) = Some(task.clone());
    POOL.generation.fetch_add(1, Ordering::Release);
    for t in threads(pool).iter().take(wake) {
        t.unpark();
    }
    Some(Running {
        task,
        _one_job: one_job,
    })
}

/// Runs `task` on the calling thread and the pool's threads (as `start`), and returns once it
/// has finished.
pub(crate) fn run(task: Arc<dyn Task>, pool: usize, wake: usize) {
    let running = start(task.clone(), pool, wake);
    task.work();
    if running.is_none() {
        while !task.finished() {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

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
        let callers: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for k in 0..100 {
                        let j = job(4096 + k * 97 + t, 64, (k + t) as u8);
                        run(j.clone(), 3, 3);
                        assert!(*lock(&j.dst) == j.src, "caller {t} job {k}");
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().expect("caller");
        }
    }
}

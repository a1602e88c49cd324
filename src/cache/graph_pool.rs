//! Device memory of graphs captured through the library (`llaisysNvidiaStreamBeginCapture`):
//! graph pools, in the manner of torch's `graph_pool_handle`.
//!
//! While a thread captures through the library, its malloc_device is served from the capture's
//! pool, never the eager cache: a replay writes that memory long after the capture. The rules:
//! - A pool holds blocks from `cudaMalloc` (relaxed mode). A block freed during the capture that
//!   made it rejoins the pool when that capture ends, for later captures into the pool, never
//!   the same capture. Several graphs may share a pool when replayed in order (as with torch).
//! - A block freed outside a capture into its pool is retired: freed with the pool.
//! - A pool lives while its handle is held and while any graph captured into it exists (a CUDA
//!   user object on each graph reports its release here). Then its blocks go to `cudaFree`
//!   (which waits for every replay) at the next call that may use the legacy stream.

use super::MAX_DEVICES;
use crate::error::{Error, Result};
use crate::util::sync::lock;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Blocks are cut in multiples of this (cudaMalloc's own granularity is coarser).
const GRAIN: usize = 512;

/// The size a request takes in a pool.
fn class(size: usize) -> usize {
    size.div_ceil(GRAIN).saturating_mul(GRAIN)
}

#[derive(Default)]
struct Pool {
    device: i32,
    /// Holders: the handle (or the capture that made it) and every graph captured into it.
    refs: usize,
    /// The handle was released: no new capture may use the pool.
    handle_released: bool,
    /// Blocks to hand out to later captures, by class.
    free: BTreeMap<usize, Vec<usize>>,
    /// Blocks freed during a capture still in progress: (capture, class, address).
    freed_during: Vec<(u64, usize, usize)>,
    /// Blocks freed outside a capture into this pool: freed with the pool.
    retired: Vec<(usize, usize)>,
}

/// A capture through the library: its pool, device and capture mode.
#[derive(Clone, Copy)]
struct Capture {
    pool: u64,
    device: i32,
    mode: u32,
}

/// This thread's capture through the library.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Current {
    /// The library's number of the capture.
    pub(crate) capture: u64,
    pub(crate) pool: u64,
    pub(crate) device: i32,
    /// Its capture mode (`crate::safe::capture::MODE_*`).
    pub(crate) mode: u32,
}

#[derive(Default)]
struct State {
    pools: HashMap<u64, Pool>,
    /// Captures in progress, by the library's capture number.
    captures: HashMap<u64, Capture>,
    /// Blocks of pools whose holders are all gone, still to free: (device, address, class).
    to_free: Vec<(i32, usize, usize)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Pool and capture numbers (0 is never used: "no pool" in the C API).
static NEXT: AtomicU64 = AtomicU64::new(1);
/// References given up by graphs (user-object releases, on CUDA's threads), not yet counted.
static RELEASED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Set when `RELEASED` or `to_free` may hold something: the eager paths look at nothing else.
static WORK: AtomicBool = AtomicBool::new(false);
/// Bytes of pool blocks (handed out or kept) not yet freed, per device.
static HELD: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

fn held_slot(device: i32) -> Option<&'static AtomicU64> {
    super::entry(&HELD, device)
}

/// Captures through the library in progress, on all threads: while none is, `current` reads no
/// thread-local.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The capture this thread began through the library and has not ended (0: none).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    f(lock(&STATE).get_or_insert_with(State::default))
}

/// A new pool of `device`, with one holder (the handle).
pub(crate) fn create(device: i32) -> u64 {
    let id = NEXT.fetch_add(1, Relaxed);
    with_state(|s| {
        s.pools.insert(
            id,
            Pool {
                device,
                refs: 1,
                ..Pool::default()
            },
        )
    });
    id
}

/// Gives up the handle of `pool`; its memory goes once no graph holds it.
pub(crate) fn release_handle(pool: u64) -> Result<()> {
    let done = with_state(|s| {
        let p = s.pools.get_mut(&pool).filter(|p| !p.handle_released)?;
        p.handle_released = true;
        s.unref(pool);
        Some(())
    });
    done.ok_or_else(|| unknown_pool(pool))
}

fn unknown_pool(pool: u64) -> Error {
    Error::invalid_argument(format!(
        "pool={pool} was not made by llaisysNvidiaGraphPoolCreate or was already released"
    ))
}

/// The device of a live pool whose handle is held.
pub(crate) fn device_of(pool: u64) -> Result<i32> {
    with_state(|s| {
        s.pools
            .get(&pool)
            .filter(|p| !p.handle_released)
            .map(|p| p.device)
    })
    .ok_or_else(|| unknown_pool(pool))
}

impl State {
    /// A block of a pool that is gone, to free.
    fn free_later(&mut self, device: i32, b: usize, class: usize) {
        self.to_free.push((device, b, class));
        WORK.store(true, Relaxed);
    }

    /// One holder of `pool` less; the last one sends its blocks to `to_free`.
    fn unref(&mut self, pool: u64) {
        let Some(p) = self.pools.get_mut(&pool) else {
            return;
        };
        p.refs = p.refs.saturating_sub(1);
        if p.refs > 0 {
            return;
        }
        let Some(p) = self.pools.remove(&pool) else {
            return;
        };
        let device = p.device;
        let kept = p
            .free
            .into_iter()
            .flat_map(|(class, list)| list.into_iter().map(move |b| (device, b, class)));
        let during = p
            .freed_during
            .into_iter()
            .map(|(_, class, b)| (device, b, class));
        let retired = p.retired.into_iter().map(|(b, class)| (device, b, class));
        self.to_free.extend(kept.chain(during).chain(retired));
        if !self.to_free.is_empty() {
            WORK.store(true, Relaxed);
        }
    }
}

/// A capture of the library's begins on this thread into `pool`: returns its number. `pool`
/// gains a holder for the capture itself (given up by `end`).
pub(crate) fn begin(pool: u64, device: i32, mode: u32) -> Result<u64> {
    let id = NEXT.fetch_add(1, Relaxed);
    with_state(|s| {
        let p = s
            .pools
            .get_mut(&pool)
            .filter(|p| !p.handle_released)
            .ok_or_else(|| unknown_pool(pool))?;
        p.refs += 1;
        s.captures.insert(id, Capture { pool, device, mode });
        ACTIVE.fetch_add(1, Relaxed);
        Ok::<(), Error>(())
    })?;
    CURRENT.with(|c| c.set(id));
    Ok(id)
}

/// One more holder of `pool`: a graph captured into it (released by `graph_released`).
pub(crate) fn hold_for_graph(pool: u64) {
    with_state(|s| {
        if let Some(p) = s.pools.get_mut(&pool) {
            p.refs += 1;
        }
    });
}

/// What a graph's user object calls once the graph and its executable graphs are gone (on a
/// CUDA thread: no CUDA call, only a note).
///
/// # Safety
/// `data` came from `graph_token(pool)` and is released once.
pub(crate) unsafe extern "C" fn graph_released(data: *mut c_void) {
    // SAFETY: `data` is the Box<u64> made by `graph_token`, given back once (this function's
    // contract).
    let pool = *unsafe { Box::from_raw(data.cast::<u64>()) };
    lock(&RELEASED).push(pool);
    WORK.store(true, Relaxed);
}

/// The data of a graph's user object for `pool` (given back to `graph_released`).
pub(crate) fn graph_token(pool: u64) -> *mut c_void {
    Box::into_raw(Box::new(pool)).cast()
}

/// The capture `capture` ended (or failed): blocks freed during it join the pool's free lists
/// and the capture's hold on the pool goes.
pub(crate) fn end(capture: u64) {
    with_state(|s| {
        if let Some(c) = s.captures.remove(&capture) {
            ACTIVE.fetch_sub(1, Relaxed);
            if let Some(p) = s.pools.get_mut(&c.pool) {
                let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut p.freed_during)
                    .into_iter()
                    .partition(|&(k, _, _)| k == capture);
                p.freed_during = others;
                for (_, class, b) in mine {
                    p.free.entry(class).or_default().push(b);
                }
            }
            s.unref(c.pool);
        }
    });
    CURRENT.with(|c| {
        if c.get() == capture {
            c.set(0);
        }
    });
}

/// The capture of the library this thread is in. A capture ended by another thread is
/// forgotten here.
#[inline]
pub(crate) fn current() -> Option<Current> {
    if ACTIVE.load(Relaxed) == 0 {
        return None;
    }
    current_slow()
}

#[cold]
#[inline(never)]
fn current_slow() -> Option<Current> {
    let id = CURRENT.with(Cell::get);
    if id == 0 {
        return None;
    }
    let found = with_state(|s| s.captures.get(&id).copied());
    match found {
        Some(c) => Some(Current {
            capture: id,
            pool: c.pool,
            device: c.device,
            mode: c.mode,
        }),
        None => {
            CURRENT.with(|c| c.set(0));
            None
        }
    }
}

/// A block of `size` bytes for capture `capture` into `pool` on `device`: (address, whether the
/// pool had it). The caller registers it (cache::device).
pub(crate) fn alloc(capture: u64, pool: u64, device: i32, size: usize) -> Result<(usize, bool)> {
    let class = class(size);
    let reused = with_state(|s| {
        let p = s.pools.get_mut(&pool)?;
        let list = p.free.get_mut(&class)?;
        let b = list.pop();
        if list.is_empty() {
            p.free.remove(&class);
        }
        b
    });
    if let Some(b) = reused {
        return Ok((b, true));
    }
    let ran = crate::safe::device::run_on(device, || {
        // cudaMalloc touches no captured work: relaxed mode allows it.
        let _relaxed = crate::safe::capture::Relaxed::new();
        crate::safe::memory::alloc_device(class)
    });
    if ran.result.is_ok() {
        // A block made: the pool holds it, handed out or not.
        if let Some(h) = held_slot(device) {
            h.fetch_add(class as u64, Relaxed);
        }
    }
    let made = ran.undone_unless_restored(|p| {
        // The previous device could not be restored: the block joins the pool's free ones.
        keep_free(pool, device, class, p as usize);
    });
    let p = made.map_err(|e| {
        Error::cuda(
            e.call(),
            e.cuda_error(),
            format!(
                "{} (for capture {capture} into graph pool {pool})",
                e.detail()
            ),
        )
    })?;
    Ok((p as usize, false))
}

/// A block of class `class` never handed out: free in `pool`, or freed if the pool is gone.
fn keep_free(pool: u64, device: i32, class: usize, b: usize) {
    with_state(|s| match s.pools.get_mut(&pool) {
        Some(p) => p.free.entry(class).or_default().push(b),
        None => s.free_later(device, b, class),
    });
}

/// A block of `pool` freed by free_device: kept for later captures when freed by the capture
/// into the pool on this thread, else retired; freed if the pool is gone.
pub(crate) fn free(pool: u64, device: i32, ptr: usize, size: usize) {
    let class = class(size);
    let current = current();
    with_state(|s| match s.pools.get_mut(&pool) {
        Some(p) => match current {
            Some(c) if c.pool == pool => p.freed_during.push((c.capture, class, ptr)),
            _ => p.retired.push((ptr, class)),
        },
        None => s.free_later(device, ptr, class),
    });
}

/// Counts the holds graphs gave up, and takes the blocks of pools nobody holds any more:
/// (device, address, size), for the caller to free, then report with [`note_freed`].
pub(crate) fn take_unheld() -> Vec<(i32, usize, usize)> {
    if !WORK.load(Relaxed) {
        return Vec::new();
    }
    with_state(|s| {
        // Cleared before `RELEASED` is emptied: a release pushed after that (on CUDA's thread)
        // sets it again; `to_free` grows only under the state's lock, held here.
        WORK.store(false, Relaxed);
        #[cfg(test)]
        tests::between_steps();
        let released = std::mem::take(&mut *lock(&RELEASED));
        for pool in released {
            s.unref(pool);
        }
        std::mem::take(&mut s.to_free)
    })
}

/// True when `take_unheld` may have something to take (one relaxed load).
#[inline]
pub(crate) fn has_work() -> bool {
    WORK.load(Relaxed)
}

/// A block of `size` bytes (its class) of a pool of `device` was freed to CUDA.
pub(crate) fn note_freed(device: i32, size: usize) {
    if let Some(h) = held_slot(device) {
        h.fetch_sub(size as u64, Relaxed);
    }
}

/// The blocks of `device`'s graph pools not handed out now: kept for later captures, freed
/// during a capture, freed outside one, or waiting to be freed; (address, size) each.
pub(crate) fn kept_blocks(device: i32) -> Vec<(usize, usize)> {
    with_state(|s| {
        let mut all = Vec::new();
        for p in s.pools.values().filter(|p| p.device == device) {
            for (&class, blocks) in &p.free {
                all.extend(blocks.iter().map(|&b| (b, class)));
            }
            all.extend(p.freed_during.iter().map(|&(_, class, b)| (b, class)));
            all.extend(p.retired.iter().copied());
        }
        all.extend(
            s.to_free
                .iter()
                .filter(|t| t.0 == device)
                .map(|&(_, b, c)| (b, c)),
        );
        all
    })
}

/// Bytes of graph-pool blocks of `device` not yet freed (handed out or kept).
pub(crate) fn held(device: i32) -> u64 {
    held_slot(device).map_or(0, |h| h.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// A pool whose graph `take_unheld` releases between its two steps on this thread, as
        /// CUDA's thread may at any moment.
        static RELEASE_BETWEEN: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn between_steps() {
        let pool = RELEASE_BETWEEN.take();
        if pool != 0 {
            // SAFETY: a token of `graph_token`, given back once.
            unsafe { graph_released(graph_token(pool)) };
        }
    }

    #[test]
    fn a_release_while_releases_are_taken_is_counted_by_the_next_take() {
        let (a, b) = (create(0), create(0));
        // SAFETY: a token of `graph_token`, given back once.
        unsafe { graph_released(graph_token(a)) };
        RELEASE_BETWEEN.set(b);
        let _ = take_unheld();
        assert_eq!(RELEASE_BETWEEN.get(), 0, "released between the steps");
        assert!(has_work(), "a release left behind with WORK clear");
        let _ = take_unheld();
        assert!(!lock(&RELEASED).contains(&b), "counted by the next take");
        assert!(!with_state(|s| s.pools.contains_key(&b)), "its pool gone");
    }
}

//! CUDA stream-ordered memory pools (`cudaMemPool_t`): one device's pool with its release
//! threshold at the maximum (freed memory stays cached), allocation and free in stream order.

use crate::cudart::calls::{self as cudart, Detail, PoolHandle, StreamHandle};
use crate::error::Result;
use std::os::raw::c_void;

/// A memory pool of one device. Pools live for the process (the caches never destroy one that
/// was handed out); `destroy` is for a pool that was never used.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pool(PoolHandle);

// SAFETY: a memory pool handle may be used from any thread.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    /// Makes a pool of `device`'s memory.
    pub(crate) fn new(device: i32) -> Result<Pool> {
        Ok(Pool(
            cudart::mem_pool_create(device).detail(|| format!("device={device}"))?,
        ))
    }

    /// Destroys a pool nothing was allocated from.
    pub(crate) fn destroy(self) {
        // SAFETY: a live pool nothing was allocated from, destroyed once and not used
        // afterwards: what callers of `destroy` promise (see its doc).
        let _ = unsafe { cudart::mem_pool_destroy(self.0) };
    }

    /// Bytes the pool holds from the device (0 when it cannot be read).
    pub(crate) fn reserved(self) -> u64 {
        // SAFETY: a live pool (a pool in use is never destroyed).
        unsafe { cudart::mem_pool_reserved(self.0) }.unwrap_or(0)
    }

    /// Lets device `peer` read and write the pool's memory.
    pub(crate) fn grant(self, owner: i32, peer: i32) -> Result<()> {
        // SAFETY: a live pool (as in `reserved`).
        unsafe { cudart::mem_pool_grant(self.0, peer) }
            .detail(|| format!("pool of device {owner}, access for device {peer}"))
    }

    /// Returns the pool's unused memory beyond `keep` bytes to the device.
    pub(crate) fn trim(self, device: i32, keep: usize) -> Result<()> {
        // SAFETY: a live pool (as in `reserved`).
        unsafe { cudart::mem_pool_trim(self.0, keep) }
            .detail(|| format!("device={device} keep={keep}"))
    }

    /// Allocates `size` bytes in the order of `stream`.
    ///
    /// # Safety
    /// `stream` is NULL or a live stream.
    pub(crate) unsafe fn alloc(self, size: usize, stream: StreamHandle) -> Result<*mut c_void> {
        // SAFETY: a live pool (as in `reserved`); `stream` is NULL or a live stream (contract).
        unsafe { cudart::malloc_from_pool_async(size, self.0, stream) }
            .detail(|| format!("size={size} stream={stream:p}"))
    }
}

/// Frees pool memory in the order of `stream`.
///
/// # Safety
/// `p` is pool memory not yet freed, which work queued on `stream` after this does not use;
/// `stream` is NULL or a live stream.
pub(crate) unsafe fn free_async(p: *mut c_void, size: usize, stream: StreamHandle) -> Result<()> {
    // SAFETY: as this function's `# Safety` section requires.
    unsafe { cudart::free_async(p, stream) }
        .detail(|| format!("ptr={p:p} size={size} stream={stream:p}"))
}

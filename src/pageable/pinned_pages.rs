//! Pinned host buffers made of transparent huge pages: an anonymous mapping aligned to 2 MiB,
//! asked for huge pages and touched (`Mapping`, host work alone), then page-locked with
//! `cudaHostRegister` (`Pinned`), a fraction of `cudaHostAlloc`'s cost (docs/caches.md). Where
//! the kernel gives no huge pages (`available`), the caller uses `cudaHostAlloc`.

use crate::error::Result;
use std::mem::ManuallyDrop;
use std::os::raw::c_void;
use std::sync::OnceLock;

/// A transparent huge page's size (x86-64 and aarch64 with 4 KiB base pages).
const HUGE: usize = 2 << 20;
/// The base page: one write per page faults every page in.
const PAGE: usize = 4096;
/// Where the kernel says whether anonymous mappings may get huge pages.
const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// True when the kernel gives an anonymous mapping huge pages on `MADV_HUGEPAGE`; read once.
pub(crate) fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::fs::read_to_string(THP_ENABLED)
            .map(|s| enabled(&s))
            .unwrap_or(false)
    })
}

/// Whether the contents of `THP_ENABLED` let `MADV_HUGEPAGE` give huge pages.
fn enabled(setting: &str) -> bool {
    setting.contains("[always]") || setting.contains("[madvise]")
}

/// An anonymous mapping of at least `len` bytes, its usable part aligned to `HUGE`, every page
/// touched; unmapped on drop.
pub(crate) struct Mapping {
    base: *mut c_void,
    mapped: usize,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value, usable from any thread.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes (rounded up to `HUGE`) aligned to `HUGE`, asks for huge pages, keeps the
    /// range out of a forked child, then touches every page. No CUDA call.
    pub(crate) fn new(len: usize) -> std::io::Result<Mapping> {
        let len = len.div_ceil(HUGE) * HUGE;
        let mapped = len + HUGE;
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let skip = (HUGE - base as usize % HUGE) % HUGE;
        // SAFETY: `skip` < HUGE, so `skip + len` <= `mapped`: inside the mapping.
        let ptr = unsafe { base.cast::<u8>().add(skip) };
        let m = Mapping {
            base,
            mapped,
            ptr,
            len,
        };
        // SAFETY: `ptr..ptr + len` lies in the mapping made above, which this value owns. Both
        // are advice: where the kernel declines, the pages are 4 KiB ones, still valid.
        unsafe {
            libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
            libc::madvise(ptr.cast(), len, libc::MADV_DONTFORK);
        }
        for at in (0..len).step_by(PAGE) {
            // SAFETY: `at` < `len`: a byte of the mapping, writable, owned by this value.
            unsafe { ptr.add(at).write_volatile(0) };
        }
        Ok(m)
    }

    /// The usable part: `len()` bytes aligned to 2 MiB.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The usable part's length (the length asked for, rounded up to 2 MiB).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Page-locks the usable part (`cudaHostRegister`, portable and mapped).
    pub(crate) fn register(self) -> Result<Pinned> {
        // SAFETY: the range is this mapping's, valid until `Pinned::free` unmaps it after
        // unregistering it.
        unsafe { crate::safe::memory_kinds::register(self.ptr.cast(), self.len) }?;
        Ok(Pinned {
            mapping: ManuallyDrop::new(self),
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; nothing registered with CUDA points
        // into it (a `Pinned` drops its mapping only once unregistered).
        unsafe { libc::munmap(self.base, self.mapped) };
    }
}

/// A page-locked `Mapping`; dropped without `free` it is leaked (a DMA may still use it).
pub(crate) struct Pinned {
    mapping: ManuallyDrop<Mapping>,
}

impl Pinned {
    /// The buffer: `Mapping::len` bytes, page-locked.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.mapping.as_ptr()
    }

    /// Unregisters the buffer, then unmaps it. When CUDA refuses to unregister it, the mapping
    /// is leaked and the error returned.
    ///
    /// # Safety
    /// No queued work reads or writes the buffer any more.
    pub(crate) unsafe fn free(self) -> Result<()> {
        // SAFETY: registered by `Mapping::register`, unused by queued work (this function's
        // contract).
        unsafe { crate::safe::memory_kinds::unregister(self.mapping.as_ptr().cast()) }?;
        drop(ManuallyDrop::into_inner(self.mapping));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_count_as_available_where_the_kernel_gives_them() {
        assert!(enabled("always [madvise] never\n"));
        assert!(enabled("[always] madvise never\n"));
        assert!(!enabled("always madvise [never]\n"));
        assert!(!enabled(""));
    }

    #[test]
    fn a_mapping_is_aligned_rounded_up_and_writable() {
        let m = Mapping::new(3 << 20).expect("mmap");
        assert_eq!(m.as_ptr() as usize % HUGE, 0);
        assert_eq!(m.len(), 4 << 20);
        // SAFETY: the mapping's usable part, `len()` bytes, owned by `m`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), m.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes.fill(0xA5);
        assert!(bytes.iter().all(|&b| b == 0xA5));
    }
}

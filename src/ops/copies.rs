//! Copies: what memcpy_sync and memcpy_async do, and the status API's peer copies. Where each
//! pointer lives is looked up once, only when something needs it; the caches are asked through
//! `cache::copies`.

use super::validate;
use super::Redetail;
use crate::cache::copies as caches;
use crate::cudart::calls::StreamHandle;
use crate::error::{Error, Result};
use crate::pageable::{self, Direction};
use crate::safe::copy::{self, MemcpyKind};
use crate::safe::pointer::{self, MemoryKind};
use std::os::raw::c_void;

/// From this size up, copies check that their kind matches the pointers (our tables, else an
/// attribute query: up to ~0.5 us on the H200 machine, about 1% of a 256 KiB pageable copy's
/// time, 3% at 64 KiB). Smaller ones leave it to CUDA's own checks.
pub const KIND_CHECK_MIN_BYTES: usize = 256 << 10;

/// Where a pointer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Host memory CUDA does not know.
    Pageable,
    /// Pinned or registered host memory (ours or not).
    Pinned,
    /// Device memory of that device.
    Device(i32),
    /// Managed memory: valid on both sides.
    Managed,
    /// No driver or no GPU: no device memory exists, and every CUDA call will say why.
    NoGpu,
}

/// The one rule for a machine without a usable GPU: no driver or no device (35, 100), or any
/// failure at all once get_device_count has answered 0 because of an error (a broken driver:
/// cuInit failing with 999 or 2, say). Then no device memory exists.
fn no_usable_gpu(failed: &Error) -> bool {
    failed.cuda_error().is_no_gpu() || super::device::device_count().1.is_some()
}

/// Where `p` lives: our own allocations are known without asking the driver.
pub(crate) fn locate(p: *const c_void) -> Result<Place> {
    if caches::pinned_block(p) {
        return Ok(Place::Pinned);
    }
    if let Some((_, device)) = caches::device_block(p) {
        return Ok(Place::Device(device));
    }
    match pointer::attributes(p) {
        Ok(a) => Ok(match a.kind {
            MemoryKind::Unregistered => Place::Pageable,
            MemoryKind::Host => Place::Pinned,
            MemoryKind::Device => Place::Device(a.device),
            MemoryKind::Managed => Place::Managed,
        }),
        Err(e) if no_usable_gpu(&e) => {
            // cudart keeps the error as its last error; the copy's own call will report it.
            crate::safe::runtime::take_last_cuda_error();
            Ok(Place::NoGpu)
        }
        Err(e) => Err(e),
    }
}

/// A pointer of a copy and, once asked for, where it lives.
struct Ptr {
    p: *const c_void,
    place: Option<Place>,
}

impl Ptr {
    fn new(p: *const c_void) -> Ptr {
        Ptr { p, place: None }
    }

    fn place(&mut self) -> Result<Place> {
        match self.place {
            Some(place) => Ok(place),
            None => {
                let place = locate(self.p)?;
                self.place = Some(place);
                Ok(place)
            }
        }
    }
}

#[cold]
#[inline(never)]
fn null_pointer(dst: *const c_void, src: *const c_void, size: usize) -> Error {
    Error::invalid_argument(format!(
        "dst={dst:p} src={src:p} size={size}: NULL pointer with a non-zero size"
    ))
}

/// One copy's arguments, checked.
struct Copy {
    dst: Ptr,
    src: Ptr,
    size: usize,
    kind: MemcpyKind,
}

impl Copy {
    /// The copy's arguments, not yet checked. Built once in the caller's frame and checked in
    /// place (`check`): the hot path of a small copy moves no `Copy` or `Result` around.
    #[inline(always)]
    fn new(dst: *mut c_void, src: *const c_void, size: usize, kind: MemcpyKind) -> Copy {
        Copy {
            dst: Ptr::new(dst),
            src: Ptr::new(src),
            size,
            kind,
        }
    }

    /// The checks every copy gets before CUDA sees it: size, NULL with a size, and (from
    /// `KIND_CHECK_MIN_BYTES` up) that its kind matches its pointers. `Ok(false)` for size 0:
    /// nothing to do.
    #[inline(always)]
    fn check(&mut self) -> Result<bool> {
        validate::check_size(self.size)?;
        if self.size == 0 {
            return Ok(false);
        }
        if self.dst.p.is_null() || self.src.p.is_null() {
            return Err(null_pointer(self.dst.p, self.src.p, self.size));
        }
        if self.size >= KIND_CHECK_MIN_BYTES {
            self.check_kind()?;
        }
        Ok(true)
    }

    /// Refuses a copy whose kind says host where the pointer is device memory, or the reverse.
    fn check_kind(&mut self) -> Result<()> {
        let (dst_device, src_device) = match self.kind {
            MemcpyKind::H2H => (false, false),
            MemcpyKind::H2D => (true, false),
            MemcpyKind::D2H => (false, true),
            MemcpyKind::D2D => (true, true),
        };
        let kind = self.kind;
        for (name, ptr, want_device) in [
            ("dst", &mut self.dst, dst_device),
            ("src", &mut self.src, src_device),
        ] {
            let on_device = match ptr.place()? {
                Place::Managed | Place::NoGpu => continue,
                Place::Device(_) => true,
                Place::Pageable | Place::Pinned => false,
            };
            if on_device != want_device {
                return Err(Error::invalid_argument(format!(
                    "kind={kind:?} but {name}={:p} is {} memory; nothing was copied",
                    ptr.p,
                    if on_device { "device" } else { "host" }
                )));
            }
        }
        Ok(())
    }

    fn dst(&self) -> *mut c_void {
        self.dst.p.cast_mut()
    }

    fn src(&self) -> *const c_void {
        self.src.p
    }

    /// With several devices in use: a stream's first use of another device's memory is ordered
    /// after that device's work, and the pair is noted for frees (see `cache::cross`).
    #[inline]
    fn order_across_devices(&mut self, s: StreamHandle, stream_device: Option<i32>) -> Result<()> {
        if !caches::several_devices() {
            return Ok(());
        }
        self.order_across_devices_slow(s, stream_device)
    }

    #[inline(never)]
    fn order_across_devices_slow(
        &mut self,
        s: StreamHandle,
        stream_device: Option<i32>,
    ) -> Result<()> {
        if matches!(self.kind, MemcpyKind::H2D | MemcpyKind::D2D) {
            if let Place::Device(d) = self.dst.place()? {
                caches::order_before_use(d, s, stream_device)?;
            }
        }
        if matches!(self.kind, MemcpyKind::D2H | MemcpyKind::D2D) {
            if let Place::Device(d) = self.src.place()? {
                caches::order_before_use(d, s, stream_device)?;
            }
        }
        Ok(())
    }

    /// The staged direction when the copy takes the pageable fast path.
    #[inline]
    fn staged(&mut self) -> Result<Option<Direction>> {
        let direction = match self.kind {
            MemcpyKind::H2D => Direction::HostToDevice,
            MemcpyKind::D2H => Direction::DeviceToHost,
            _ => return Ok(None),
        };
        if !pageable::wanted(self.size, direction) {
            return Ok(None);
        }
        let host = match direction {
            Direction::HostToDevice => &mut self.src,
            Direction::DeviceToHost => &mut self.dst,
        };
        Ok((host.place()? == Place::Pageable).then_some(direction))
    }

    /// memcpy_sync of an H2D copy from pageable memory that `staged` leaves to cudaMemcpy (too
    /// small): staged behind a staged copy's DMA still pending on the legacy stream, when there
    /// is one with room (`pageable::copy_behind`). False when the copy is left to the caller.
    ///
    /// # Safety
    /// The copy's pointers are valid for its size, of the memory its kind says.
    unsafe fn stage_behind(&mut self) -> Result<bool> {
        if self.kind != MemcpyKind::H2D
            || !pageable::copy_behind_possible()
            || self.src.place()? != Place::Pageable
        {
            return Ok(false);
        }
        // SAFETY: H2D, so the destination is device memory and the source (pageable, checked)
        // host memory, both valid for the size (this function's contract).
        unsafe { pageable::copy_behind(self.dst(), self.src().cast_mut(), self.size) }
    }

    /// Refuses a staged copy larger than the device memory on its device side, before the staged
    /// path plans its chunks and copies its host side: the block of ours it starts at, else all of
    /// the device's memory. (CUDA refuses such a copy too, but only as each chunk's DMA is queued.)
    fn check_device_side(&mut self, direction: Direction) -> Result<()> {
        let side = match direction {
            Direction::HostToDevice => &mut self.dst,
            Direction::DeviceToHost => &mut self.src,
        };
        let (limit, device) = match caches::device_block(side.p) {
            Some((block, _)) => (block, None),
            None => match side.place()? {
                Place::Device(d) => (caches::device_memory(d)?, Some(d)),
                _ => return Ok(()),
            },
        };
        if self.size > limit {
            let what = match device {
                None => "the malloc_device block it starts at".to_string(),
                Some(d) => format!("all of device {d}'s memory"),
            };
            return Err(Error::invalid_argument(format!(
                "size={} is more than {what} ({limit} bytes) at {:p}; nothing was copied",
                self.size, side.p
            )));
        }
        Ok(())
    }

    /// Runs the staged copy in `direction` on `stream`.
    ///
    /// # Safety
    /// The copy's pointers are valid for its size, of the memory its kind says (the device side
    /// device memory); `stream` is NULL or a live stream.
    unsafe fn stage(
        &mut self,
        direction: Direction,
        stream: StreamHandle,
        stream_device: Option<i32>,
        wait: bool,
    ) -> Result<()> {
        self.check_device_side(direction)?;
        let (device, host) = match direction {
            Direction::HostToDevice => (self.dst(), self.src().cast_mut()),
            Direction::DeviceToHost => (self.src().cast_mut(), self.dst()),
        };
        let size = self.size;
        // SAFETY: `host` and `device` are valid for the size, `device` device memory; `stream` is
        // NULL or a live stream (this function's contract).
        unsafe { pageable::copy(direction, device, host, size, stream, stream_device, wait) }
    }

    /// H2H without a GPU is a host copy: llaisys keeps CPU tensors on such machines, and with
    /// no device no asynchronous work can touch the buffers.
    ///
    /// # Safety
    /// When the copy's kind is H2H, its pointers are valid host memory for its size.
    unsafe fn host_copy_without_gpu(&self, failed: &Error) -> bool {
        if self.kind == MemcpyKind::H2H && no_usable_gpu(failed) {
            crate::safe::runtime::take_last_cuda_error();
            // SAFETY: H2H, so both are host memory valid for the size (this function's
            // contract); `std::ptr::copy` allows overlap, as cudaMemcpy.
            unsafe { std::ptr::copy(self.src().cast::<u8>(), self.dst().cast::<u8>(), self.size) };
            return true;
        }
        false
    }
}

/// `LLAISYS_NVIDIA_MEMCPY_SYNC_COMPLETE=1`: memcpy_sync returns with every copy complete on
/// the device too (H2D and D2D wait for the legacy stream), for debugging. Read once.
pub fn complete_on_return() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::util::env::flag_on("LLAISYS_NVIDIA_MEMCPY_SYNC_COMPLETE"))
}

/// memcpy_sync: `cudaMemcpy`'s host-visible guarantees (the header's table), waiting no more
/// than it does. Large pageable copies take the staged fast path; a smaller pageable H2D copy
/// is staged behind a staged DMA still pending on the legacy stream (`pageable::copy_behind`).
/// Unlike cudaMemcpy, a staged copy is queued behind earlier work instead of waiting for it.
/// While a stream of the device captures, the copy runs on the side stream (`side_copy`).
///
/// # Safety
/// `dst` and `src` are valid for `size` bytes of the memory `kind` says.
#[inline]
pub unsafe fn memcpy_sync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: i32,
) -> Result<()> {
    let mut c = Copy::new(dst, src, size, MemcpyKind::from_raw(kind)?);
    if !c.check()? {
        return Ok(());
    }
    super::capturing::refuse_waits_while_capturing(
        "cudaMemcpy",
        "memcpy_sync returns once its copy is done; use memcpy_async on the capturing stream to \
         make the copy part of the graph",
    )?;
    // Asked as late as possible: a capture another thread begins between this answer and the
    // copy's first use of the legacy stream invalidates that capture (a staged copy asks again
    // before each of its uses: `pageable`).
    let staged = c.staged()?;
    let Some(_legacy) = caches::usable_current()? else {
        // SAFETY: as this function's `# Safety` section requires.
        return unsafe { side_copy(&mut c) };
    };
    // Queued on the legacy stream of the current device: with several devices, frees of the
    // memory on another device must wait for it as for memcpy_async.
    c.order_across_devices(std::ptr::null_mut(), None)?;
    let complete = complete_on_return();
    if let Some(direction) = staged {
        // SAFETY: the pointers as above (this function's contract); NULL is the legacy stream.
        return unsafe { c.stage(direction, std::ptr::null_mut(), None, complete) };
    }
    // SAFETY: the pointers as above (this function's contract).
    if !complete && unsafe { c.stage_behind() }? {
        return Ok(());
    }
    // SAFETY: the pointers as above (this function's contract).
    if let Err(e) = unsafe { copy::memcpy(c.dst(), c.src(), c.size, c.kind) } {
        // SAFETY: as this function's `# Safety` section requires.
        if unsafe { c.host_copy_without_gpu(&e) } {
            return Ok(());
        }
        if e.cuda_error() == crate::error::CudaError::STREAM_CAPTURE_IMPLICIT {
            // A capture another thread began since the answer above: nothing was copied, and
            // the copy goes where a capture sends it.
            crate::safe::runtime::take_last_cuda_error();
            drop(_legacy);
            // SAFETY: as this function's `# Safety` section requires.
            return unsafe { side_copy(&mut c) };
        }
        return Err(e);
    }
    if matches!(c.kind, MemcpyKind::H2D | MemcpyKind::D2D) {
        if complete {
            // SAFETY: NULL is the legacy stream.
            unsafe { crate::safe::stream::synchronize(std::ptr::null_mut()) }
                .redetail(|_| format!("dst={dst:p} src={src:p} size={size} kind={:?}", c.kind))?;
        } else {
            // The copy may still be in flight: a copy that a capture sends to the side stream
            // later waits for it.
            // SAFETY: no event is given.
            unsafe { caches::fence_after(crate::safe::device::current()?, None) }?;
        }
    }
    Ok(())
}

/// memcpy_sync while a capture forbids the legacy stream: queued on the device's private side
/// stream, after the library's own work still pending on the legacy stream (earlier copies'
/// fence, the caches' barrier), and waited for in relaxed mode. Nothing orders it after other
/// streams' work (the caller synchronizes that). Refused with several devices in use (their
/// ordering needs the legacy stream); `memcpy_sync` has already refused a thread that itself
/// captures.
///
/// # Safety
/// As `memcpy_sync`.
#[cold]
#[inline(never)]
unsafe fn side_copy(c: &mut Copy) -> Result<()> {
    if caches::several_devices() {
        let why = "memcpy_sync with several devices in use";
        return Err(caches::refused("cudaMemcpy", why));
    }
    let device = crate::safe::device::current()?;
    let side = caches::side_stream_ordered(device)?;
    let _relaxed = crate::safe::capture::Relaxed::new();
    if let Some(direction) = c.staged()? {
        // SAFETY: the pointers as this function's contract says; the side stream is live.
        return unsafe { c.stage(direction, side, Some(device), true) };
    }
    // SAFETY: the pointers as above (this function's contract); the side stream is live.
    unsafe { copy::memcpy_async(c.dst(), c.src(), c.size, c.kind, side) }?;
    // SAFETY: as above.
    unsafe { crate::safe::stream::synchronize(side) }.redetail(|_| {
        let (dst, src, size, kind) = (c.dst(), c.src(), c.size, c.kind);
        format!("dst={dst:p} src={src:p} size={size} kind={kind:?} (side stream, during a capture)")
    })
}

/// memcpy_async: queues the copy on `stream` (NULL: the legacy stream), ordered across devices
/// as memcpy_sync; pinned blocks of ours it uses are noted so that they are not reused before it
/// has run. Size 0 does nothing.
///
/// # Safety
/// The pointers are valid for `size` bytes of the memory `kind` says until the copy has run.
#[inline]
pub unsafe fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: i32,
    stream: *mut c_void,
) -> Result<()> {
    let kind = MemcpyKind::from_raw(kind)?;
    let s: StreamHandle = stream.cast();
    let stream_device = validate::check_stream(s)?;
    let mut c = Copy::new(dst, src, size, kind);
    if !c.check()? {
        return Ok(());
    }
    let _legacy = caches::permit(
        s.is_null(),
        "cudaMemcpyAsync",
        "memcpy_async on NULL (the legacy stream)",
    )?;
    c.order_across_devices(s, stream_device)?;
    if let Some(direction) = c.staged()? {
        // A staged copy reuses its pinned buffers as soon as its DMAs have run: captured, the
        // graph would read them long after.
        // SAFETY: `s` is a live stream of ours (checked) or NULL.
        if !s.is_null() && unsafe { crate::safe::capture::capturing(s) }.unwrap_or(false) {
            return Err(Error::capture(
                "cudaMemcpyAsync",
                crate::error::CudaError::STREAM_CAPTURE_UNSUPPORTED,
                format!(
                    "stream={s:p} is capturing a graph and {direction:?} of {size} bytes copies \
                     pageable host memory, which a graph cannot replay; copy from or to \
                     malloc_host memory inside a capture"
                ),
            ));
        }
        // Its staging waits for and queries the events of its pinned buffers.
        super::capturing::refuse_waits_while_capturing(
            "cudaMemcpyAsync",
            "a copy of pageable host memory waits for its pinned staging buffers; copy from or \
             to malloc_host memory, or capture in relaxed mode",
        )?;
        // SAFETY: the pointers as the contract says; `s` is NULL or a live stream (checked).
        unsafe { c.stage(direction, s, stream_device, false) }?;
    } else {
        // SAFETY: as above.
        if let Err(e) = unsafe { copy::memcpy_async(c.dst(), c.src(), c.size, c.kind, s) } {
            // SAFETY: for H2H both pointers are host memory valid for `size` bytes (this function's
            // contract). Only on the legacy stream: a stream of ours cannot exist without a GPU.
            if !(s.is_null() && unsafe { c.host_copy_without_gpu(&e) }) {
                return Err(e);
            }
        }
    }
    if matches!(c.kind, MemcpyKind::H2D | MemcpyKind::H2H) {
        caches::note_pinned_use(c.src(), s, stream_device);
    }
    if matches!(c.kind, MemcpyKind::D2H | MemcpyKind::H2H) {
        caches::note_pinned_use(c.dst(), s, stream_device);
    }
    Ok(())
}

/// A peer copy of `size` bytes from `src` on `src_device` to `dst` on `dst_device`: complete on
/// return (`stream` None) or queued on it.
///
/// # Safety
/// The pointers are device memory of those devices, valid for `size` bytes until the copy has run.
pub unsafe fn memcpy_peer(
    dst: *mut c_void,
    dst_device: i32,
    src: *const c_void,
    src_device: i32,
    size: usize,
    stream: Option<*mut c_void>,
) -> Result<()> {
    validate::check_size(size)?;
    let s: StreamHandle = stream.unwrap_or(std::ptr::null_mut()).cast();
    let stream_device = match stream {
        Some(_) => validate::check_stream(s)?,
        None => None,
    };
    if size == 0 {
        return Ok(());
    }
    if stream.is_none() {
        super::capturing::refuse_waits_while_capturing(
            "cudaMemcpyPeer",
            "a peer copy without a stream returns once it is done; give it the capturing stream \
             to make it part of the graph",
        )?;
    }
    let _legacy = caches::permit(
        s.is_null(),
        "cudaMemcpyPeerAsync",
        "a peer copy on the legacy stream",
    )?;
    if dst.is_null() || src.is_null() {
        return Err(null_pointer(dst, src, size));
    }
    if stream.is_some() && caches::several_devices() {
        for p in [dst as *const c_void, src] {
            if let Place::Device(d) = locate(p)? {
                caches::order_before_use(d, s, stream_device)?;
            }
        }
    }
    // SAFETY: the pointers as the contract says; `s` is NULL or a live stream of ours (checked).
    unsafe { copy::memcpy_peer_async(dst, dst_device, src, src_device, size, s) }?;
    if stream.is_none() {
        // SAFETY: NULL is the legacy stream.
        unsafe { crate::safe::stream::synchronize(s) }
            .redetail(|_| format!("after cudaMemcpyPeerAsync stream={s:p}"))?;
    }
    Ok(())
}

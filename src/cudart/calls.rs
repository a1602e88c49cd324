//! The thin per-call layer over cudart (in the manner of cudarc's `runtime/result.rs`): one
//! function per call, its safety argument next to the call. A call with no precondition beyond
//! "any value" is a safe `fn`, one whose pointers must be valid an `unsafe fn` with a `# Safety`
//! section. Each returns what the call wrote, or a [`Failed`] naming the call and its code; the
//! safe layer adds the arguments that matter ([`Detail::detail`]). With `error`, the only user
//! of [`crate::cudart::sys`] (whose functions, in the `loaded` mode, resolve in the runtime
//! `cudart::loaded` loaded).

use crate::cudart::sys as raw;
use crate::error::{CudaError, Error};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;

pub(crate) use raw::{cudaEvent_t as EventHandle, cudaStream_t as StreamHandle};

/// A failed cudart call: which one and what it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    pub(crate) call: &'static str,
    pub(crate) code: CudaError,
}

/// What a call of this layer returns.
pub(crate) type CallResult<T> = std::result::Result<T, Failed>;

fn check(call: &'static str, rc: raw::cudaError_t) -> CallResult<()> {
    CudaError::check(rc).map_err(|code| Failed { call, code })
}

/// The one not-ready rule: `cudaErrorNotReady` from a query means "not yet" (false), success
/// means "done" (true), anything else is a failure.
fn ready(call: &'static str, rc: raw::cudaError_t) -> CallResult<bool> {
    match CudaError::from_raw(rc) {
        e if e.is_success() => Ok(true),
        e if e == CudaError::NOT_READY => Ok(false),
        code => Err(Failed { call, code }),
    }
}

/// Wrappers of the common shape: arguments passed through, at most one output
/// (`-> v: T = init,`) written to a local, the code checked under the call's name. `safe:` makes
/// safe `fn`s (every pointer passed is to a local), `unsafe:` makes `unsafe fn`s whose `# Safety`
/// is the argument.
macro_rules! calls {
    (@ty) => { () };
    (@ty $t:ty) => { $t };
    (safe: $($(#[$m:meta])* fn $name:ident($($a:ident: $ty:ty),*)
        $(-> $v:ident: $t:ty = $init:expr,)? => raw::$call:ident($($e:expr),*);)*) => {$(
        $(#[$m])*
        pub(crate) fn $name($($a: $ty),*) -> CallResult<calls!(@ty $($t)?)> {
            $(let mut $v: $t = $init;)?
            // SAFETY: any pointer passed is to this function's local output; cudart checks
            // every other value.
            check(stringify!($call), unsafe { raw::$call($($e),*) })$(.map(|()| $v))?
        }
    )*};
    (unsafe: $($(#[$m:meta])* fn $name:ident($($a:ident: $ty:ty),*)
        $(-> $v:ident: $t:ty = $init:expr,)? => raw::$call:ident($($e:expr),*);)*) => {$(
        $(#[$m])*
        pub(crate) unsafe fn $name($($a: $ty),*) -> CallResult<calls!(@ty $($t)?)> {
            $(let mut $v: $t = $init;)?
            // SAFETY: the caller keeps this function's `# Safety` contract, which is the call's;
            // an output is written to a local.
            check(stringify!($call), unsafe { raw::$call($($e),*) })$(.map(|()| $v))?
        }
    )*};
}

impl From<Failed> for Error {
    #[track_caller]
    fn from(f: Failed) -> Error {
        Error::cuda(f.call, f.code, String::new())
    }
}

/// Adds the arguments that matter to a failed call.
pub(crate) trait Detail<T> {
    /// The failure as an [`Error`] whose detail is `f()`.
    fn detail(self, f: impl FnOnce() -> String) -> crate::error::Result<T>;
}

impl<T> Detail<T> for CallResult<T> {
    #[track_caller]
    fn detail(self, f: impl FnOnce() -> String) -> crate::error::Result<T> {
        match self {
            Ok(v) => Ok(v),
            Err(e) => Err(Error::cuda(e.call, e.code, f())),
        }
    }
}

// ---- process and versions -------------------------------------------------------------------

calls! { safe:
    /// `cudaRuntimeGetVersion`.
    fn runtime_get_version() -> v: c_int = 0, => raw::cudaRuntimeGetVersion(&mut v);

    /// `cudaDriverGetVersion` (0 without a driver).
    fn driver_get_version() -> v: c_int = 0, => raw::cudaDriverGetVersion(&mut v);

    /// `cudaGetDeviceCount`.
    fn get_device_count() -> n: c_int = 0, => raw::cudaGetDeviceCount(&mut n);
}

/// `cudaGetLastError`: reads and clears the runtime's last error of this thread.
pub(crate) fn get_last_error() -> CudaError {
    // SAFETY: no arguments.
    CudaError::from_raw(unsafe { raw::cudaGetLastError() })
}

/// The address of cudart's `cudaRuntimeGetVersion` in this process (which library provides
/// cudart, for `dladdr`).
#[cfg(not(llaisys_loaded))]
pub(crate) fn runtime_symbol_address() -> *const c_void {
    raw::cudaRuntimeGetVersion as *const c_void
}

/// The address of `cudaRuntimeGetVersion` in the runtime the `loaded` mode loaded (NULL when
/// none could be loaded); loads it on the first call.
#[cfg(llaisys_loaded)]
pub(crate) fn runtime_symbol_address() -> *const c_void {
    crate::cudart::loaded::runtime_address(&raw::SPEC)
}

/// The `loaded` mode's choice of runtime: which, why, every place tried; loads it on the first
/// call.
#[cfg(llaisys_loaded)]
pub(crate) fn loaded_runtime() -> &'static crate::cudart::loaded::Choice {
    crate::cudart::loaded::choice(&raw::SPEC)
}

// ---- devices --------------------------------------------------------------------------------

calls! { safe:
    /// `cudaSetDevice`.
    fn set_device(device: i32) => raw::cudaSetDevice(device);

    /// `cudaGetDevice`.
    fn get_device() -> d: c_int = 0, => raw::cudaGetDevice(&mut d);

    /// `cudaInitDevice(device, 0, 0)`.
    fn init_device(device: i32) => raw::cudaInitDevice(device, 0, 0);

    /// `cudaDeviceSynchronize`.
    fn device_synchronize() => raw::cudaDeviceSynchronize();

    /// `cudaDeviceGetAttribute`.
    fn device_get_attribute(attr: raw::cudaDeviceAttr, device: i32) -> v: c_int = 0,
        => raw::cudaDeviceGetAttribute(&mut v, attr, device);

    /// `cudaDeviceEnablePeerAccess(peer, 0)` for the current device.
    fn device_enable_peer_access(peer: i32) => raw::cudaDeviceEnablePeerAccess(peer, 0);
}

/// `cudaFree(NULL)`: creates the current device's primary context if it has none.
pub(crate) fn create_context() -> CallResult<()> {
    // SAFETY: cudaFree(NULL) frees nothing.
    check("cudaFree", unsafe { raw::cudaFree(null_mut()) })
}

/// `cudaMemGetInfo`: (free, total) of the current device.
pub(crate) fn mem_get_info() -> CallResult<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: writes two sizes to locals.
    check("cudaMemGetInfo", unsafe {
        raw::cudaMemGetInfo(&mut free, &mut total)
    })?;
    Ok((free, total))
}

/// `cudaGetDeviceProperties`.
pub(crate) fn get_device_properties(device: i32) -> CallResult<raw::cudaDeviceProp> {
    // SAFETY: cudaDeviceProp is plain data; all-zero is a valid value to be overwritten.
    let mut p: raw::cudaDeviceProp = unsafe { std::mem::zeroed() };
    // SAFETY: writes one cudaDeviceProp to a local; cudart checks `device`.
    check("cudaGetDeviceProperties", unsafe {
        raw::cudaGetDeviceProperties(&mut p, device)
    })?;
    Ok(p)
}

/// Whether `device` supports stream-ordered memory pools.
pub(crate) fn memory_pools_supported(device: i32) -> CallResult<bool> {
    device_get_attribute(raw::cudaDeviceAttr::cudaDevAttrMemoryPoolsSupported, device)
        .map(|v| v != 0)
}

/// `cudaDeviceGetPCIBusId`.
pub(crate) fn device_get_pci_bus_id(device: i32) -> CallResult<String> {
    let mut bus = [0 as c_char; 32];
    // SAFETY: cudart writes at most `len` bytes, NUL-terminated, into the local array.
    check("cudaDeviceGetPCIBusId", unsafe {
        raw::cudaDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, device)
    })?;
    // SAFETY: NUL-terminated by cudart (the array is zeroed, so also when it wrote nothing).
    Ok(unsafe { CStr::from_ptr(bus.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// `cudaDeviceCanAccessPeer`.
pub(crate) fn device_can_access_peer(from: i32, to: i32) -> CallResult<bool> {
    let mut v: c_int = 0;
    // SAFETY: writes one int to a local; cudart checks both ids.
    check("cudaDeviceCanAccessPeer", unsafe {
        raw::cudaDeviceCanAccessPeer(&mut v, from, to)
    })?;
    Ok(v != 0)
}

/// `cudaDeviceGetStreamPriorityRange`: (least, greatest).
pub(crate) fn device_get_stream_priority_range() -> CallResult<(i32, i32)> {
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: writes two ints to locals.
    check("cudaDeviceGetStreamPriorityRange", unsafe {
        raw::cudaDeviceGetStreamPriorityRange(&mut least, &mut greatest)
    })?;
    Ok((least, greatest))
}

// ---- memory ---------------------------------------------------------------------------------

calls! { safe:
    /// `cudaMalloc`.
    fn malloc(size: usize) -> p: *mut c_void = null_mut(), => raw::cudaMalloc(&mut p, size);

    /// `cudaMallocHost`.
    fn malloc_host(size: usize) -> p: *mut c_void = null_mut(),
        => raw::cudaMallocHost(&mut p, size);

    /// `cudaHostAlloc`.
    fn host_alloc(size: usize, flags: u32) -> p: *mut c_void = null_mut(),
        => raw::cudaHostAlloc(&mut p, size, flags);

    /// `cudaMallocManaged(size, cudaMemAttachGlobal)`.
    fn malloc_managed(size: usize) -> p: *mut c_void = null_mut(),
        => raw::cudaMallocManaged(&mut p, size, raw::cudaMemAttachGlobal);
}

calls! { unsafe:
    /// `cudaFree`.
    ///
    /// # Safety
    /// `p` is NULL or memory of cudaMalloc / cudaMallocManaged not yet freed, and no queued work
    /// uses it any more (cudaFree waits for the device, but the caller must not use it after).
    fn free(p: *mut c_void) => raw::cudaFree(p);

    /// `cudaFreeHost`.
    ///
    /// # Safety
    /// `p` is NULL or memory of cudaMallocHost / cudaHostAlloc not yet freed, which no queued work
    /// uses any more.
    fn free_host(p: *mut c_void) => raw::cudaFreeHost(p);

    /// `cudaHostGetDevicePointer`.
    ///
    /// # Safety
    /// `host` is mapped pinned memory of cudaHostAlloc or registered memory.
    fn host_get_device_pointer(host: *mut c_void) -> d: *mut c_void = null_mut(),
        => raw::cudaHostGetDevicePointer(&mut d, host, 0);

    /// `cudaHostRegister` (portable and mapped).
    ///
    /// # Safety
    /// `p` is valid for `size` bytes until it is unregistered.
    fn host_register(p: *mut c_void, size: usize)
        => raw::cudaHostRegister(p, size,
            raw::cudaHostRegisterPortable | raw::cudaHostRegisterMapped);

    /// `cudaHostUnregister`.
    ///
    /// # Safety
    /// No queued work uses the registered range any more; cudart refuses unregistered pointers.
    fn host_unregister(p: *mut c_void) => raw::cudaHostUnregister(p);

    /// `cudaMemset`.
    ///
    /// # Safety
    /// `p` is device-accessible memory valid for `size` bytes.
    fn memset(p: *mut c_void, value: u8, size: usize)
        => raw::cudaMemset(p, c_int::from(value), size);

    /// `cudaMemsetAsync`.
    ///
    /// # Safety
    /// `p` is device-accessible memory valid for `size` bytes until the memset has run; `s` is
    /// NULL or a live stream.
    fn memset_async(p: *mut c_void, value: u8, size: usize, s: StreamHandle)
        => raw::cudaMemsetAsync(p, c_int::from(value), size, s);
}

/// `cudaHostAllocPortable`: pinned for every device, not only the current one.
pub(crate) const HOST_ALLOC_PORTABLE: u32 = raw::cudaHostAllocPortable;
/// `cudaHostAllocMapped`: also mapped into the device address space.
pub(crate) const HOST_ALLOC_MAPPED: u32 = raw::cudaHostAllocMapped;

fn location(device: i32) -> raw::cudaMemLocation {
    raw::cudaMemLocation {
        type_: if device < 0 {
            raw::cudaMemLocationType::cudaMemLocationTypeHost
        } else {
            raw::cudaMemLocationType::cudaMemLocationTypeDevice
        },
        id: device.max(0),
    }
}

/// `cudaMemPrefetchAsync` to `device` (-1: the host).
///
/// # Safety
/// `p` is managed memory valid for `size` bytes; `s` NULL or a live stream.
pub(crate) unsafe fn mem_prefetch_async(
    p: *const c_void,
    size: usize,
    device: i32,
    s: StreamHandle,
) -> CallResult<()> {
    // SAFETY: `p` is managed memory valid for `size` bytes, `s` NULL or a live stream (this
    // function's contract).
    #[cfg(llaisys_cuda13)]
    let rc = unsafe { raw::cudaMemPrefetchAsync(p, size, location(device), 0, s) };
    // SAFETY: as above.
    #[cfg(not(llaisys_cuda13))]
    let rc = unsafe { raw::cudaMemPrefetchAsync_v2(p, size, location(device), 0, s) };
    check("cudaMemPrefetchAsync", rc)
}

/// `cudaMemAdvise` (`advice` a cudaMemoryAdvise value, `device` -1 for the host).
///
/// # Safety
/// `p` is managed memory valid for `size` bytes.
pub(crate) unsafe fn mem_advise(
    p: *const c_void,
    size: usize,
    advice: u32,
    device: i32,
) -> CallResult<()> {
    let a = raw::cudaMemoryAdvise(advice);
    // SAFETY: `p` is managed memory valid for `size` bytes (this function's contract); cudart
    // checks the advice value.
    #[cfg(llaisys_cuda13)]
    let rc = unsafe { raw::cudaMemAdvise(p, size, a, location(device)) };
    // SAFETY: as above.
    #[cfg(not(llaisys_cuda13))]
    let rc = unsafe { raw::cudaMemAdvise_v2(p, size, a, location(device)) };
    check("cudaMemAdvise", rc)
}

/// What `cudaPointerGetAttributes` says about an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PointerInfo {
    /// 0 unregistered, 1 host, 2 device, 3 managed (cudaMemoryType).
    pub(crate) memory_type: u32,
    pub(crate) device: i32,
    pub(crate) device_pointer: *mut c_void,
    pub(crate) host_pointer: *mut c_void,
}

/// `cudaMemoryTypeHost`.
pub(crate) const MEMORY_TYPE_HOST: u32 = raw::cudaMemoryType::cudaMemoryTypeHost.0;
/// `cudaMemoryTypeDevice`.
pub(crate) const MEMORY_TYPE_DEVICE: u32 = raw::cudaMemoryType::cudaMemoryTypeDevice.0;
/// `cudaMemoryTypeManaged`.
pub(crate) const MEMORY_TYPE_MANAGED: u32 = raw::cudaMemoryType::cudaMemoryTypeManaged.0;

/// `cudaPointerGetAttributes`: any address may be asked about.
pub(crate) fn pointer_get_attributes(p: *const c_void) -> CallResult<PointerInfo> {
    // SAFETY: plain data; all-zero is a valid value to be overwritten.
    let mut a: raw::cudaPointerAttributes = unsafe { std::mem::zeroed() };
    // SAFETY: writes one struct to a local; the address is only looked up, never accessed.
    check("cudaPointerGetAttributes", unsafe {
        raw::cudaPointerGetAttributes(&mut a, p)
    })?;
    Ok(PointerInfo {
        memory_type: a.type_.0,
        device: a.device,
        device_pointer: a.devicePointer,
        host_pointer: a.hostPointer,
    })
}

// ---- copies ---------------------------------------------------------------------------------

calls! { unsafe:
    /// `cudaMemcpy` (`kind` 0..=3: HostToHost .. DeviceToDevice).
    ///
    /// # Safety
    /// `dst` and `src` are valid for `size` bytes of the memory `kind` says.
    fn memcpy(dst: *mut c_void, src: *const c_void, size: usize, kind: u32)
        => raw::cudaMemcpy(dst, src, size, raw::cudaMemcpyKind(kind));

    /// `cudaMemcpyAsync`.
    ///
    /// # Safety
    /// As `memcpy`, until the copy has run; `s` is NULL or a live stream.
    fn memcpy_async(dst: *mut c_void, src: *const c_void, size: usize, kind: u32, s: StreamHandle)
        => raw::cudaMemcpyAsync(dst, src, size, raw::cudaMemcpyKind(kind), s);

    /// `cudaMemcpyPeerAsync`.
    ///
    /// # Safety
    /// `dst`/`src` are device memory of `dst_device`/`src_device` valid for `size` bytes until the
    /// copy has run; `s` is NULL or a live stream.
    fn memcpy_peer_async(
        dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, size: usize,
        s: StreamHandle
    ) => raw::cudaMemcpyPeerAsync(dst, dst_device, src, src_device, size, s);
}

// ---- streams --------------------------------------------------------------------------------

/// `cudaStreamNonBlocking`.
pub(crate) const STREAM_NON_BLOCKING: u32 = raw::cudaStreamNonBlocking;
/// `cudaStreamDefault`.
pub(crate) const STREAM_DEFAULT: u32 = raw::cudaStreamDefault;

calls! { safe:
    /// `cudaStreamCreate`.
    fn stream_create() -> s: StreamHandle = null_mut(), => raw::cudaStreamCreate(&mut s);

    /// `cudaStreamCreateWithPriority`.
    fn stream_create_with_priority(flags: u32, priority: i32) -> s: StreamHandle = null_mut(),
        => raw::cudaStreamCreateWithPriority(&mut s, flags, priority);
}

calls! { unsafe:
    /// `cudaStreamDestroy`.
    ///
    /// # Safety
    /// `s` is a live stream, destroyed once, not used afterwards.
    fn stream_destroy(s: StreamHandle) => raw::cudaStreamDestroy(s);

    /// `cudaStreamSynchronize`.
    ///
    /// # Safety
    /// `s` is NULL (the legacy stream) or a live stream.
    fn stream_synchronize(s: StreamHandle) => raw::cudaStreamSynchronize(s);

    /// `cudaStreamWaitEvent(s, e, 0)`.
    ///
    /// # Safety
    /// `s` is NULL or a live stream; `e` a live event.
    fn stream_wait_event(s: StreamHandle, e: EventHandle) => raw::cudaStreamWaitEvent(s, e, 0);

    /// `cudaStreamGetFlags`.
    ///
    /// # Safety
    /// `s` is a live stream.
    fn stream_get_flags(s: StreamHandle) -> f: u32 = 0, => raw::cudaStreamGetFlags(s, &mut f);

    /// `cudaStreamGetDevice`.
    ///
    /// # Safety
    /// `s` is a live stream.
    fn stream_get_device(s: StreamHandle) -> d: c_int = 0, => raw::cudaStreamGetDevice(s, &mut d);
}

/// `cudaStreamQuery`: true when all its work has completed.
///
/// # Safety
/// `s` is NULL or a live stream.
pub(crate) unsafe fn stream_query(s: StreamHandle) -> CallResult<bool> {
    // SAFETY: `s` is NULL or a live stream (this function's contract).
    ready("cudaStreamQuery", unsafe { raw::cudaStreamQuery(s) })
}

// ---- events ---------------------------------------------------------------------------------

/// `cudaEventDefault`.
pub(crate) const EVENT_DEFAULT: u32 = raw::cudaEventDefault;
/// `cudaEventBlockingSync`.
pub(crate) const EVENT_BLOCKING_SYNC: u32 = raw::cudaEventBlockingSync;
/// `cudaEventDisableTiming`.
pub(crate) const EVENT_DISABLE_TIMING: u32 = raw::cudaEventDisableTiming;

calls! { safe:
    /// `cudaEventCreateWithFlags` on the current device.
    fn event_create_with_flags(flags: u32) -> e: EventHandle = null_mut(),
        => raw::cudaEventCreateWithFlags(&mut e, flags);
}

calls! { unsafe:
    /// `cudaEventDestroy`.
    ///
    /// # Safety
    /// `e` is a live event, destroyed once, not used afterwards.
    fn event_destroy(e: EventHandle) => raw::cudaEventDestroy(e);

    /// `cudaEventRecord`.
    ///
    /// # Safety
    /// `e` is a live event; `s` NULL or a live stream of the event's device.
    fn event_record(e: EventHandle, s: StreamHandle) => raw::cudaEventRecord(e, s);

    /// `cudaEventSynchronize`.
    ///
    /// # Safety
    /// `e` is a live event.
    fn event_synchronize(e: EventHandle) => raw::cudaEventSynchronize(e);

    /// `cudaEventElapsedTime` in milliseconds.
    ///
    /// # Safety
    /// Both are live events.
    fn event_elapsed_time(start: EventHandle, end: EventHandle) -> ms: f32 = 0.0,
        => raw::cudaEventElapsedTime(&mut ms, start, end);
}

/// `cudaEventQuery`: true when complete (or never recorded).
///
/// # Safety
/// `e` is a live event.
pub(crate) unsafe fn event_query(e: EventHandle) -> CallResult<bool> {
    // SAFETY: `e` is a live event (this function's contract).
    ready("cudaEventQuery", unsafe { raw::cudaEventQuery(e) })
}

// ---- stream-ordered memory pools --------------------------------------------------------------

pub(crate) use raw::cudaMemPool_t as PoolHandle;

/// `cudaMemPoolCreate` for device memory of `device`, pinned allocation, no export handles,
/// release threshold at the maximum (freed memory stays in the pool).
pub(crate) fn mem_pool_create(device: i32) -> CallResult<PoolHandle> {
    // SAFETY: plain data; zero is the documented default for the fields not set.
    let mut props: raw::cudaMemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = raw::cudaMemAllocationType::cudaMemAllocationTypePinned;
    props.handleTypes = raw::cudaMemAllocationHandleType::cudaMemHandleTypeNone;
    props.location.type_ = raw::cudaMemLocationType::cudaMemLocationTypeDevice;
    props.location.id = device;
    let mut pool = null_mut();
    // SAFETY: writes one handle to a local; `props` is a valid description.
    check("cudaMemPoolCreate", unsafe {
        raw::cudaMemPoolCreate(&mut pool, &props)
    })?;
    let mut threshold: u64 = u64::MAX;
    // SAFETY: the release threshold attribute is a u64; `pool` was just made.
    let set = check("cudaMemPoolSetAttribute", unsafe {
        raw::cudaMemPoolSetAttribute(
            pool,
            raw::cudaMemPoolAttr::cudaMemPoolAttrReleaseThreshold,
            (&mut threshold as *mut u64).cast(),
        )
    });
    if let Err(e) = set {
        // SAFETY: just made, never used.
        let _ = unsafe { mem_pool_destroy(pool) };
        return Err(e);
    }
    Ok(pool)
}

calls! { unsafe:
    /// `cudaMemPoolDestroy`.
    ///
    /// # Safety
    /// `pool` is a live pool, destroyed once, not used afterwards.
    fn mem_pool_destroy(pool: PoolHandle) => raw::cudaMemPoolDestroy(pool);

    /// `cudaMemPoolGetAttribute(cudaMemPoolAttrReservedMemCurrent)`: bytes the pool holds.
    ///
    /// # Safety
    /// `pool` is a live pool.
    fn mem_pool_reserved(pool: PoolHandle) -> v: u64 = 0, => raw::cudaMemPoolGetAttribute(pool,
        raw::cudaMemPoolAttr::cudaMemPoolAttrReservedMemCurrent, (&mut v as *mut u64).cast());

    /// `cudaMemPoolTrimTo(pool, keep)`: unused memory beyond `keep` bytes goes back.
    ///
    /// # Safety
    /// `pool` is a live pool.
    fn mem_pool_trim(pool: PoolHandle, keep: usize) => raw::cudaMemPoolTrimTo(pool, keep);

    /// `cudaMallocFromPoolAsync`.
    ///
    /// # Safety
    /// `pool` is a live pool; `s` NULL or a live stream.
    fn malloc_from_pool_async(size: usize, pool: PoolHandle, s: StreamHandle)
        -> p: *mut c_void = null_mut(), => raw::cudaMallocFromPoolAsync(&mut p, size, pool, s);

    /// `cudaFreeAsync`.
    ///
    /// # Safety
    /// `p` is pool memory not yet freed, not used by work queued after this on `s`; `s` NULL or a
    /// live stream.
    fn free_async(p: *mut c_void, s: StreamHandle) => raw::cudaFreeAsync(p, s);
}

/// `cudaMemPoolSetAccess`: device `peer` may read and write memory of `pool`.
///
/// # Safety
/// `pool` is a live pool.
pub(crate) unsafe fn mem_pool_grant(pool: PoolHandle, peer: i32) -> CallResult<()> {
    // SAFETY: plain data.
    let mut desc: raw::cudaMemAccessDesc = unsafe { std::mem::zeroed() };
    desc.location.type_ = raw::cudaMemLocationType::cudaMemLocationTypeDevice;
    desc.location.id = peer;
    desc.flags = raw::cudaMemAccessFlags::cudaMemAccessFlagsProtReadWrite;
    // SAFETY: one valid descriptor; `pool` is a live pool (this function's contract).
    check("cudaMemPoolSetAccess", unsafe {
        raw::cudaMemPoolSetAccess(pool, &desc, 1)
    })
}

// ---- stream capture and graphs ----------------------------------------------------------------

pub(crate) use raw::{
    cudaGraphExec_t as GraphExecHandle, cudaGraph_t as GraphHandle,
    cudaUserObject_t as UserObjectHandle,
};

use raw::{cudaStreamCaptureMode as Mode, cudaStreamCaptureStatus as Status};
/// A stream's capture status (`cudaStreamCaptureStatus`): 0 none, 1 active, 2 invalidated.
pub(crate) const CAPTURE_STATUS_NONE: u32 = Status::cudaStreamCaptureStatusNone.0;
/// `cudaStreamCaptureStatusActive`.
pub(crate) const CAPTURE_STATUS_ACTIVE: u32 = Status::cudaStreamCaptureStatusActive.0;
/// `cudaStreamCaptureStatusInvalidated`.
pub(crate) const CAPTURE_STATUS_INVALIDATED: u32 = Status::cudaStreamCaptureStatusInvalidated.0;
/// `cudaStreamCaptureModeGlobal`.
pub(crate) const CAPTURE_MODE_GLOBAL: u32 = Mode::cudaStreamCaptureModeGlobal.0;
/// `cudaStreamCaptureModeThreadLocal`.
pub(crate) const CAPTURE_MODE_THREAD_LOCAL: u32 = Mode::cudaStreamCaptureModeThreadLocal.0;
/// `cudaStreamCaptureModeRelaxed`.
pub(crate) const CAPTURE_MODE_RELAXED: u32 = Mode::cudaStreamCaptureModeRelaxed.0;

/// `cudaStreamIsCapturing`: the capture status of `s`. On the legacy stream (NULL) while a
/// blocking stream of the device captures, cudart answers `cudaErrorStreamCaptureImplicit`
/// (returned as the failure; the capture is not invalidated, but cudart keeps the code as the
/// thread's last error).
///
/// # Safety
/// `s` is NULL or a live stream.
pub(crate) unsafe fn stream_is_capturing(s: StreamHandle) -> CallResult<u32> {
    let mut st = raw::cudaStreamCaptureStatus(0);
    // SAFETY: writes one status to a local; `s` is NULL or a live stream (this function's
    // contract).
    check("cudaStreamIsCapturing", unsafe {
        raw::cudaStreamIsCapturing(s, &mut st)
    })?;
    Ok(st.0)
}

/// `cudaStreamGetCaptureInfo`: (status, capture id, the graph being captured). The id and graph
/// are meaningful only while the status is active.
///
/// # Safety
/// `s` is a live stream (not the legacy stream).
pub(crate) unsafe fn stream_get_capture_info(
    s: StreamHandle,
) -> CallResult<(u32, u64, GraphHandle)> {
    let mut st = raw::cudaStreamCaptureStatus(0);
    let mut id: std::os::raw::c_ulonglong = 0;
    let mut graph: GraphHandle = null_mut();
    // SAFETY: writes a status, an id and a graph handle to locals; the dependency outputs are
    // NULL (not asked for), which the API allows; `s` is a live stream (this function's
    // contract).
    #[cfg(llaisys_cuda13)]
    let rc = unsafe {
        raw::cudaStreamGetCaptureInfo(
            s,
            &mut st,
            &mut id,
            &mut graph,
            null_mut(),
            null_mut(),
            null_mut(),
        )
    };
    // SAFETY: as above (CUDA 12's signature has no edge data).
    #[cfg(not(llaisys_cuda13))]
    let rc = unsafe {
        raw::cudaStreamGetCaptureInfo(s, &mut st, &mut id, &mut graph, null_mut(), null_mut())
    };
    check("cudaStreamGetCaptureInfo", rc)?;
    Ok((st.0, id as u64, graph))
}

/// `cudaThreadExchangeStreamCaptureMode`: sets this thread's capture mode, returns the previous.
pub(crate) fn thread_exchange_capture_mode(mode: u32) -> CallResult<u32> {
    let mut m = raw::cudaStreamCaptureMode(mode);
    // SAFETY: reads and writes one mode in a local; cudart checks the value.
    check("cudaThreadExchangeStreamCaptureMode", unsafe {
        raw::cudaThreadExchangeStreamCaptureMode(&mut m)
    })?;
    Ok(m.0)
}

calls! { unsafe:
    /// `cudaStreamBeginCapture`.
    ///
    /// # Safety
    /// `s` is a live stream (cudart refuses the legacy stream and unknown modes).
    fn stream_begin_capture(s: StreamHandle, mode: u32)
        => raw::cudaStreamBeginCapture(s, raw::cudaStreamCaptureMode(mode));

    /// `cudaGraphUpload`.
    ///
    /// # Safety
    /// `exec` is a live executable graph; `s` NULL or a live stream.
    fn graph_upload(exec: GraphExecHandle, s: StreamHandle) => raw::cudaGraphUpload(exec, s);

    /// `cudaGraphLaunch`.
    ///
    /// # Safety
    /// `exec` is a live executable graph; `s` NULL or a live stream.
    fn graph_launch(exec: GraphExecHandle, s: StreamHandle) => raw::cudaGraphLaunch(exec, s);

    /// `cudaGraphExecDestroy`.
    ///
    /// # Safety
    /// `exec` is a live executable graph, destroyed once, not used afterwards.
    fn graph_exec_destroy(exec: GraphExecHandle) => raw::cudaGraphExecDestroy(exec);

    /// `cudaGraphDestroy`.
    ///
    /// # Safety
    /// `graph` is a live graph, destroyed once, not used afterwards.
    fn graph_destroy(graph: GraphHandle) => raw::cudaGraphDestroy(graph);

    /// `cudaUserObjectCreate(ptr, destroy, 1, cudaUserObjectNoDestructorSync)`: one reference,
    /// owned by the caller (to be moved into a graph).
    ///
    /// # Safety
    /// `destroy(ptr)` is sound to call once, from any thread, at any later time.
    fn user_object_create(ptr: *mut c_void, destroy: HostFn) -> obj: UserObjectHandle = null_mut(),
        => raw::cudaUserObjectCreate(&mut obj, ptr, Some(destroy), 1,
            raw::cudaUserObjectFlags::cudaUserObjectNoDestructorSync.0);

    /// `cudaUserObjectRelease(obj, 1)`.
    ///
    /// # Safety
    /// The caller owns one reference of `obj`, given up here.
    fn user_object_release(obj: UserObjectHandle) => raw::cudaUserObjectRelease(obj, 1);

    /// `cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove)`: the caller's reference
    /// moves into the graph (and every executable graph made from it holds one).
    ///
    /// # Safety
    /// `graph` is a live graph (one being captured included); the caller owns one reference of
    /// `obj`, given up on success.
    fn graph_retain_user_object_move(graph: GraphHandle, obj: UserObjectHandle)
        => raw::cudaGraphRetainUserObject(graph, obj, 1,
            raw::cudaUserObjectRetainFlags::cudaGraphUserObjectMove.0);
}

/// `cudaStreamEndCapture`: the captured graph (NULL when the capture was invalidated, with the
/// failure cudart returned).
///
/// # Safety
/// `s` is a live stream.
pub(crate) unsafe fn stream_end_capture(s: StreamHandle) -> (GraphHandle, CallResult<()>) {
    let mut g: GraphHandle = null_mut();
    // SAFETY: writes one handle to a local; `s` is a live stream (this function's contract).
    let rc = check("cudaStreamEndCapture", unsafe {
        raw::cudaStreamEndCapture(s, &mut g)
    });
    (g, rc)
}

/// `cudaGraphInstantiateWithParams` (no flags): the executable graph, or the failure with
/// cudart's reason (`cudaGraphInstantiateResult`) and the type of the node that caused it
/// (`cudaGraphNodeType`, -1 when none was named).
///
/// # Safety
/// `graph` is a live graph.
pub(crate) unsafe fn graph_instantiate(
    graph: GraphHandle,
) -> std::result::Result<GraphExecHandle, (Failed, u32, i32)> {
    let mut exec: GraphExecHandle = null_mut();
    // SAFETY: plain data; zero flags, no upload stream, outputs written by cudart.
    let mut params: raw::cudaGraphInstantiateParams = unsafe { std::mem::zeroed() };
    // SAFETY: writes the exec handle and the outputs of `params` (locals); `graph` is a live
    // graph (this function's contract).
    let rc = unsafe { raw::cudaGraphInstantiateWithParams(&mut exec, graph, &mut params) };
    match check("cudaGraphInstantiateWithParams", rc) {
        Ok(()) => Ok(exec),
        Err(f) => {
            let mut node_type = -1;
            if !params.errNode_out.is_null() {
                let mut t = raw::cudaGraphNodeType(0);
                // SAFETY: a node of `graph` that cudart named; writes one value to a local.
                if unsafe { raw::cudaGraphNodeGetType(params.errNode_out, &mut t) }.0 == 0 {
                    node_type = t.0 as i32;
                }
            }
            Err((f, params.result_out.0, node_type))
        }
    }
}

/// `cudaGraphExecUpdate`: Ok, or the failure with cudart's reason (`cudaGraphExecUpdateResult`).
///
/// # Safety
/// `exec` is a live executable graph, `graph` a live graph.
pub(crate) unsafe fn graph_exec_update(
    exec: GraphExecHandle,
    graph: GraphHandle,
) -> std::result::Result<(), (Failed, u32)> {
    // SAFETY: plain data, written by cudart.
    let mut info: raw::cudaGraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
    // SAFETY: writes the result info (a local); `exec` is a live executable graph, `graph` a
    // live graph (this function's contract).
    let rc = unsafe { raw::cudaGraphExecUpdate(exec, graph, &mut info) };
    check("cudaGraphExecUpdate", rc).map_err(|f| (f, info.result.0))
}

/// What a user object calls when its last reference goes (on a CUDA thread; it must not call
/// CUDA).
pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);

/*
 * llaisys_runtime.h: the C ABI of llaisys-nvidia, the NVIDIA CUDA backend of llaisys.
 *
 * Compiles as C99 and as C++17. It declares llaisys's own runtime types (llaisysStream_t,
 * llaisysMemcpyKind_t, the function-pointer typedefs, struct LlaisysRuntimeAPI) under llaisys's
 * own include guards (__LLAISYS_H__, LLAISYS_RUNTIME_H), so it coexists with llaisys's
 * include/llaisys.h and include/llaisys/runtime.h in one translation unit, in either order:
 * when those headers are reachable on the include path (<llaisys.h>, <llaisys/runtime.h>) this
 * header includes them first and uses their definitions. Everything of our own is prefixed
 * llaisysNvidia / LLAISYS_NVIDIA.
 *
 * Devices. As in CUDA, the current device is per host thread: set_device(i) affects only the
 * calling thread; streams and allocations belong to the device current when they are made. A
 * stream stays a real cudaStream_t. Copies on a stream of another device are correct (llaisys
 * makes a runtime's stream before set_device), and the caches order frees and reuse with such
 * streams; a kernel launched on one while another device is current fails, as in CUDA. Once a
 * second device is in use, memory of malloc_device is reachable from every device in use that
 * can access it (as cudaMalloc memory is). README "Several GPUs" has the details and costs.
 *
 * Errors. The table's functions cannot return a status. Every CUDA error is reported, never
 * dropped: it becomes the calling thread's last error (llaisysNvidiaLastError*) and is handed to
 * the error handler. The default handler prints one line to stderr (our function, the device,
 * the CUDA call, the error's name, code and description, the arguments that matter) and aborts
 * the process, so nothing continues with broken state. A host may install its own handler with
 * llaisysNvidiaSetErrorHandler; when it returns, the failing function returns its failure value
 * (NULL for pointers and streams, nothing for void functions). A C++ handler may throw: every
 * table function unwinds C++ exceptions (Rust "C-unwind"); llaisys_nvidia_exceptions.hpp
 * has one that throws std::runtime_error, on the threads inside a scoped_exception_handler or
 * on every thread (install_exception_handler). A panic inside the library never crosses this
 * boundary: it is reported as LLAISYS_NVIDIA_ERROR_INTERNAL under the same policy.
 *
 * An error caused by earlier asynchronous work (a kernel or copy that faulted; CUDA reports it
 * at a later call and the context stays broken) is reported with status
 * LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA and a message saying so, not blamed on the innocent call.
 *
 * Lifecycle (README "Lifecycle and process rules"). Every function may be called from any
 * thread at any point of its life and of the process's, including pthread key destructors,
 * atexit handlers and C++ static and thread_local destructors, in any order: it works or fails
 * with its status; the library's own bookkeeping never aborts.
 *
 * fork(). A child forked after the process made its first call into this library (any call but
 * the error-handler, last-error, version and status-name functions and
 * llaisysNvidiaGetRuntimeAPI) cannot use CUDA (NVIDIA: CUDA after fork is undefined until exec)
 * nor the library's caches, whose locks other threads of the parent may have held at fork. In
 * such a child every other function is refused, without touching those locks, with status
 * LLAISYS_NVIDIA_ERROR_CUDA and cudaErrorInitializationError (3), and a message that says why:
 * get_device_count returns 0 (the reason as last error), the other table functions report to the
 * handler, the status API returns the status (its out-parameters hold their failure values,
 * "Out-parameters on failure" below), H2H copies included. The handler functions and the last
 * error keep working there. Such a child should exec or _exit (exit also runs the parent's
 * atexit handlers, CUDA's own among them). A child forked before the first call is an ordinary
 * process and may use the library.
 */
#ifndef LLAISYS_NVIDIA_RUNTIME_H
#define LLAISYS_NVIDIA_RUNTIME_H

/* Prefer llaisys's own headers when they are on the include path. */
#if defined(__has_include)
#if __has_include(<llaisys/runtime.h>) && defined(__cplusplus)
#include <llaisys/runtime.h>
#elif __has_include(<llaisys.h>)
#include <llaisys.h>
#endif
#endif

/* ---- llaisys's shared types, under llaisys's include guard ------------------------------ */
#ifndef __LLAISYS_H__
#define __LLAISYS_H__
#if defined(_WIN32)
#define __export __declspec(dllexport)
#elif defined(__GNUC__) && ((__GNUC__ >= 4) || (__GNUC__ == 3 && __GNUC_MINOR__ >= 3))
#define __export __attribute__((visibility("default")))
#else
#define __export
#endif
#ifdef __cplusplus
#define __C extern "C"
#include <cstddef>
#include <cstdint>
#else
#define __C
#include <stddef.h>
#include <stdint.h>
#endif
typedef enum {
    LLAISYS_DEVICE_CPU = 0,
    LLAISYS_DEVICE_NVIDIA = 1,
    LLAISYS_DEVICE_TYPE_COUNT
} llaisysDeviceType_t;
typedef void *llaisysStream_t;
typedef enum {
    LLAISYS_MEMCPY_H2H = 0,
    LLAISYS_MEMCPY_H2D = 1,
    LLAISYS_MEMCPY_D2H = 2,
    LLAISYS_MEMCPY_D2D = 3
} llaisysMemcpyKind_t;
#endif /* __LLAISYS_H__ */

/* ---- llaisys's runtime table, under llaisys's include guard ----------------------------- */
#ifndef LLAISYS_RUNTIME_H
#define LLAISYS_RUNTIME_H
#ifdef __cplusplus
extern "C" {
#endif
typedef int (*get_device_count_api)(void);
typedef void (*set_device_api)(int);
typedef void (*device_synchronize_api)(void);
typedef llaisysStream_t (*create_stream_api)(void);
typedef void (*destroy_stream_api)(llaisysStream_t);
typedef void (*stream_synchronize_api)(llaisysStream_t);
typedef void *(*malloc_device_api)(size_t);
typedef void (*free_device_api)(void *);
typedef void *(*malloc_host_api)(size_t);
typedef void (*free_host_api)(void *);
typedef void (*memcpy_sync_api)(void *, const void *, size_t, llaisysMemcpyKind_t);
typedef void (*memcpy_async_api)(void *, const void *, size_t, llaisysMemcpyKind_t, llaisysStream_t);
/* The field order is the ABI. */
typedef struct LlaisysRuntimeAPI {
    get_device_count_api get_device_count;
    set_device_api set_device;
    device_synchronize_api device_synchronize;
    create_stream_api create_stream;
    destroy_stream_api destroy_stream;
    stream_synchronize_api stream_synchronize;
    malloc_device_api malloc_device;
    free_device_api free_device;
    malloc_host_api malloc_host;
    free_host_api free_host;
    memcpy_sync_api memcpy_sync;
    memcpy_async_api memcpy_async;
} LlaisysRuntimeAPI;
/* The llaisys core's own exports (not defined by this library). */
__export const struct LlaisysRuntimeAPI *llaisysGetRuntimeAPI(llaisysDeviceType_t);
__export void llaisysSetContextRuntime(llaisysDeviceType_t, int);
#ifdef __cplusplus
}
#endif
#endif /* LLAISYS_RUNTIME_H */

/* ---- llaisys-nvidia ------------------------------------------------------------------------ */
#if defined(_WIN32)
#define LLAISYS_NVIDIA_API __declspec(dllimport)
#elif defined(__GNUC__)
#define LLAISYS_NVIDIA_API __attribute__((visibility("default")))
#else
#define LLAISYS_NVIDIA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Returns this backend's llaisys runtime table; never NULL, never fails, callable from any
 * thread. What each function does (all use the calling thread's current device):
 *
 * get_device_count()   The number of CUDA devices. Without a driver or without a GPU it returns
 *                      0 quickly and silently (no handler call, nothing printed); the reason
 *                      (cudaErrorInsufficientDriver 35, cudaErrorNoDevice 100) becomes the thread's
 *                      last error. Any other failure also answers 0, prints one line once per
 *                      process and is kept as the last error. Read once per process and cached.
 * set_device(id)       cudaSetDevice(id) for the calling thread. id outside 0..count-1 (including
 *                      -1) is an error (cudaErrorInvalidDevice) whose message names the count.
 * device_synchronize() Waits for all work on the current device.
 * create_stream()      A new ordinary blocking stream (cudaStreamCreate) on the current device
 *                      (usable from any device for copies); NULL on error.
 * destroy_stream(s)    Destroys s (pending work still completes). NULL does nothing.
 * stream_synchronize(s) Waits for s; NULL means the legacy default stream.
 * malloc_device(n)     n bytes of device memory, from a cache (see "Memory caches" below).
 *                      n == 0 returns NULL and is not an error. NULL on error (out of memory
 *                      after releasing the caches, no device).
 * free_device(p)       Frees p from malloc_device into the cache, in stream order; with the
 *                      cache on it blocks the host only when a large block leaves the cache
 *                      (see "Memory caches"; with LLAISYS_NVIDIA_DEVICE_CACHE=0 it is cudaFree).
 *                      NULL does nothing; a pointer not from malloc_device is an error.
 * malloc_host(n)       n bytes of pinned (page-locked) host memory, from a cache. n == 0
 *                      returns NULL and is not an error. NULL on error.
 * free_host(p)         Frees p from malloc_host into the cache. NULL does nothing; a pointer
 *                      not from malloc_host is an error. If the stream a copy used p on is
 *                      broken (no event, no synchronize), p is taken all the same but kept
 *                      out of use until llaisysNvidiaReleaseCachedMemory, and the error is
 *                      reported.
 * memcpy_sync(d,s,n,k) Copies n bytes with exactly cudaMemcpy's host-visible guarantees, and
 *                      waits no more than it does. On return:
 *                        kind              source reusable   destination
 *                        H2H               yes               holds the data
 *                        D2H               yes               holds the data
 *                        H2D from pinned   yes               complete
 *                        H2D from pageable yes (read)        ordered: complete for later work on
 *                                                            the legacy stream and blocking
 *                                                            streams (DMA may be in flight)
 *                        D2D               ordered           ordered, as above (only queued)
 *                      "Ordered" memory may be freed with free_device at once (frees are
 *                      stream-ordered). Set LLAISYS_NVIDIA_MEMCPY_SYNC_COMPLETE=1 to make every
 *                      copy complete on return (debugging). n == 0 does nothing. H2H works
 *                      without a driver or GPU (a host copy). A kind outside 0..3 or a NULL
 *                      pointer with n > 0 is LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT.
 * memcpy_async(d,s,n,k,st) Queues the copy on stream st (NULL: legacy default stream). n == 0
 *                      does nothing. Bad kind / NULL pointer as memcpy_sync. From pageable memory
 *                      CUDA copies synchronously with respect to the host.
 *
 * A stream this library did not make (or one already destroyed) passed to destroy_stream,
 * stream_synchronize or memcpy_async is refused (LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT); NULL is
 * the legacy default stream. Sizes above PTRDIFF_MAX are refused; copies of 256 KiB and more whose
 * kind does not match their memory are refused. Copying through a pointer that is too short or
 * already freed is undefined (CUDA's own rules apply). README "Bad input" has the whole table.
 */
LLAISYS_NVIDIA_API const struct LlaisysRuntimeAPI *llaisysNvidiaGetRuntimeAPI(void);

/* Status values; stable, never reused. */
typedef enum {
    LLAISYS_NVIDIA_SUCCESS = 0,
    /* A CUDA call failed; cuda_error holds its cudaError_t. */
    LLAISYS_NVIDIA_ERROR_CUDA = 1,
    /* A CUDA call reported an error left by earlier asynchronous work (sticky/deferred). */
    LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA = 2,
    /* Bad input, refused before any CUDA call (bad memcpy kind, NULL with a size). */
    LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT = 3,
    /* A bug inside this library (a caught panic). */
    LLAISYS_NVIDIA_ERROR_INTERNAL = 4
} llaisysNvidiaStatus_t;

/* What an error handler receives. The strings are valid until the handler returns or throws. */
typedef struct llaisysNvidiaError {
    int status;            /* llaisysNvidiaStatus_t */
    int cuda_error;        /* cudaError_t, 0 when no CUDA call failed */
    int device;            /* the calling thread's current device; -1 when unknown and for
                              LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT (no CUDA call was made) */
    const char *function;  /* our function, e.g. "malloc_device" */
    const char *cuda_call; /* the CUDA call, e.g. "cudaMalloc"; "" when none */
    const char *message;   /* the whole one-line message */
} llaisysNvidiaError;

/* An error handler. It must return (the failing call then returns its failure value) or, in
 * C++, throw (the exception propagates out of the failing table function). It runs on the
 * failing thread, without any lock of the library held: it may call into the library (a failure
 * there runs the handler again, nested) and may replace the handler.
 *
 * longjmp out of a handler is not supported, nor is leaving it by pthread_exit or thread
 * cancellation: the handler is called from inside the library's Rust frames, which still have
 * destructors to run, and jumping or force-unwinding over such frames is undefined behaviour in
 * Rust (RFC 2945, "plain old frames"). In practice the library's record of the call is never
 * released: memory leaks, and the call counts as running forever, so a later
 * llaisysNvidiaSetErrorHandler from another thread waits for it (after 10 s it says so on
 * stderr). To leave a failing call early, return or throw from the handler, or use the status
 * API, which never calls the handler. */
typedef void (*llaisysNvidiaErrorHandler)(const llaisysNvidiaError *error, void *user_data);

/* Installs the process-wide error handler; NULL restores the default (print, abort).
 * Replacing a handler: a failing call reads the handler and its user_data together and calls it
 * after releasing the library's lock, so other threads may be running the old handler when this
 * is called. llaisysNvidiaSetErrorHandler returns only once no other thread still runs a handler
 * installed before; after it returns, the old user_data may be freed. Called from inside a
 * handler it returns at once without waiting (it would otherwise wait for its own call, or for
 * another thread that waits for it): then do not free the old user_data until a later call made
 * outside any handler has returned. Do not call it while holding a lock that a handler running
 * on another thread may need: it would wait for that handler forever. */
LLAISYS_NVIDIA_API void llaisysNvidiaSetErrorHandler(llaisysNvidiaErrorHandler handler, void *user_data);
/* Reads the installed handler (NULL: the default) and its user data; either pointer may be NULL. */
LLAISYS_NVIDIA_API void llaisysNvidiaGetErrorHandler(llaisysNvidiaErrorHandler *handler, void **user_data);
/* The default handler, for a handler that passes on what it does not handle: prints the error's
 * message as one line on stderr and aborts. user_data is ignored. */
LLAISYS_NVIDIA_API void llaisysNvidiaDefaultErrorHandler(const llaisysNvidiaError *error, void *user_data);

/* The calling thread's last error: it stays until a later failure replaces it or it is
 * cleared; successful calls do not clear it (like errno). It is kept where it works at any
 * point of the thread's life: also inside atexit handlers, C++ static and thread_local
 * destructors, and the thread's pthread key destructors, in the first two of glibc's
 * PTHREAD_DESTRUCTOR_ITERATIONS (4) rounds of them (and in round 3 for keys made before this
 * library was loaded). It is freed when the thread exits (for the main thread: with the
 * process), except a record first stored in round 2 or later by a thread that had never
 * called into the library before, which may outlive the rounds. Where it cannot be kept (after
 * this library's unload hook ran, e.g. from a destructor that runs after the library is
 * finalised) the getters answer "none"; the calls themselves behave as always. */
LLAISYS_NVIDIA_API int llaisysNvidiaLastErrorStatus(void); /* 0 when none */
LLAISYS_NVIDIA_API int llaisysNvidiaLastCudaError(void);   /* cudaError_t, 0 when none */
LLAISYS_NVIDIA_API int llaisysNvidiaLastErrorDevice(void); /* -1 when none or unknown */
/* Copies the message into buf (NUL-terminated, truncated to len bytes; buf may be NULL when len
 * is 0) and returns its full length without the NUL, 0 when there is no last error. */
LLAISYS_NVIDIA_API size_t llaisysNvidiaLastErrorMessage(char *buf, size_t len);
LLAISYS_NVIDIA_API void llaisysNvidiaClearLastError(void);

/* The out-of-memory report. A device allocation (malloc_device, llaisysNvidiaMallocDevice,
 * llaisysNvidiaMallocAsync) that fails for want of memory, after every cache was released and
 * the allocation tried again, says in its message what was asked for, what the device has and
 * has free, what this library holds there, the largest allocation that succeeds now, what other
 * processes use (NVML, loaded at run time when the driver's libnvidia-ml.so.1 is found;
 * LLAISYS_NVIDIA_NVML_LIBRARY names another), and what to do; the figures are here: */
typedef struct llaisysNvidiaOutOfMemory {
    int device;
    int other_processes;              /* other processes NVML lists on the device; -1 when NVML
                                         could not say (the message says why) */
    uint64_t requested_bytes;         /* the size asked for */
    uint64_t total_bytes;             /* the device's memory (cudaMemGetInfo) */
    uint64_t free_bytes;              /* its free memory after the caches were released */
    uint64_t in_use_bytes;            /* handed out by this library on the device, not freed */
    uint64_t cached_bytes;            /* held by this library's caches there (graph pools apart) */
    uint64_t graph_pool_bytes;        /* held by graph pools of captures through this library */
    uint64_t largest_allocation_bytes; /* the largest allocation that succeeded just after, to
                                         2 MiB; UINT64_MAX when not probed (a stream of the
                                         device was capturing a graph) */
    uint64_t other_processes_bytes;   /* what the other processes use, summed over those NVML can
                                         measure */
    uint64_t limit_bytes;             /* the device's memory limit for this library, 0 when none
                                         (llaisysNvidiaSetMemoryLimit) */
} llaisysNvidiaOutOfMemory;
/* When the calling thread's last error is such a failure: writes its figures to *out and returns
 * 1. Otherwise (another error, none, out NULL) writes zeros with device -1 and returns 0. Leaves
 * the last error as it is. */
LLAISYS_NVIDIA_API int llaisysNvidiaLastOutOfMemory(llaisysNvidiaOutOfMemory *out);

/*
 * Memory caches. malloc_device/free_device use a CUDA memory pool per device, ordered on the
 * legacy default stream: a freed block is reused only after all work queued before the free on
 * the legacy stream and on every blocking stream (all streams of create_stream) has run.
 * Large blocks (16 MiB up to 128 MiB, allocated with one device in use) come from cudaMalloc
 * instead, as PyTorch's allocator takes its memory (pool memory copies 1-3% slower at such
 * sizes), kept and reused the same way; peer kernels on such a block need
 * cudaDeviceEnablePeerAccess (copies do not). free_device of a pool block never blocks the host;
 * a large block that leaves the cache is parked and freed with cudaFree (which waits for the
 * device) together with others once 1 GiB is parked, and a large free that cannot be kept (on a
 * stream, several devices in use) is a cudaFree. Work queued on NON-blocking streams (the host's
 * own, or llaisysNvidiaStreamCreate with LLAISYS_NVIDIA_STREAM_NON_BLOCKING) must be
 * synchronized before free_device. malloc_host/free_host cache pinned blocks in size classes;
 * a block used by memcpy_async is reused only after events recorded at free_host on those streams
 * complete. Out of memory releases every cache and retries once before reporting the error
 * (while a stream of a device captures, that device's cache and the pinned cache stay).
 * free_device / free_host of a pointer this library did not hand out (or a double free) is an
 * LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT and frees nothing.
 * Switches (read once per process): LLAISYS_NVIDIA_DEVICE_CACHE=0 (plain cudaMalloc/cudaFree),
 * LLAISYS_NVIDIA_DEVICE_LARGE_BYTES=N (smallest block taken from cudaMalloc, default 16777216;
 * 0: every block from the pool), LLAISYS_NVIDIA_HOST_CACHE=0 (plain cudaMallocHost/cudaFreeHost).
 * These functions return a status and set the thread's last error; they never call the handler.
 */
typedef struct llaisysNvidiaAllocatorStats {
    uint64_t in_use_bytes;      /* handed out, not yet freed (requested sizes) */
    uint64_t peak_in_use_bytes; /* highest in_use_bytes since start or the last reset */
    uint64_t cached_bytes;      /* held by the cache, not handed out */
    uint64_t alloc_count;       /* successful allocations */
    uint64_t free_count;        /* frees of our pointers */
    uint64_t cache_hits;        /* allocations served from cached memory (device: estimated from
                                   the pool's reserved size, exact for one allocating thread) */
    uint64_t cache_misses;      /* allocations that took new memory from CUDA (same caveat) */
    uint64_t oom_retries;       /* out-of-memory failures retried after releasing caches */
} llaisysNvidiaAllocatorStats;
/* Device allocator statistics of `device`, or of all devices summed when device is -1 (then
 * peak_in_use_bytes is the sum of the per-device peaks). */
LLAISYS_NVIDIA_API int llaisysNvidiaDeviceMemoryStats(int device, llaisysNvidiaAllocatorStats *out);
LLAISYS_NVIDIA_API int llaisysNvidiaHostMemoryStats(llaisysNvidiaAllocatorStats *out);
/* Returns all cached device memory (every device) and pinned host memory to CUDA. */
LLAISYS_NVIDIA_API int llaisysNvidiaReleaseCachedMemory(void);
/* A limit on the device memory this library holds on a device (in use and cached, graph pools
 * included), to share the GPU with other processes and other libraries of this process: in
 * bytes, or as a fraction (above 0, at most 1) of the device's memory; 0 lifts it. For every
 * device: LLAISYS_NVIDIA_MEMORY_LIMIT (read once: bytes, or a fraction such as 0.5 or 50%), which
 * a limit set here replaces for its device. Cached memory beyond a new limit is given back at
 * once; an allocation that would pass it (after the device's cached memory was released) fails
 * as out of memory, with the report (llaisysNvidiaLastOutOfMemory: limit_bytes). Allocations
 * inside a capture through this library (graph pools) count toward it but are not refused by
 * it. It is checked before each allocation that takes new memory from CUDA: threads allocating
 * at the same moment can pass it together by what they ask at once. llaisysNvidiaGetMemoryLimit
 * gives the limit in bytes (0: none). */
LLAISYS_NVIDIA_API int llaisysNvidiaSetMemoryLimit(int device, uint64_t bytes);
LLAISYS_NVIDIA_API int llaisysNvidiaSetMemoryFraction(int device, double fraction);
LLAISYS_NVIDIA_API int llaisysNvidiaGetMemoryLimit(int device, uint64_t *bytes);
/* A release threshold: the most freed device memory the cache keeps on a device for reuse. By
 * default (UINT64_MAX) it keeps all of it, which makes reuse fastest but leaves the memory to
 * no one else; with a threshold, what passes it goes back to CUDA now and at each later
 * free_device and device_synchronize, so that other libraries of this process and other
 * processes can have it. For every device: LLAISYS_NVIDIA_RELEASE_THRESHOLD (bytes, read once),
 * which a threshold set here replaces for its device. Giving memory back waits for the device's
 * legacy stream (a free then waits for the work queued before it); while a stream of the device
 * captures a graph nothing is given back. */
LLAISYS_NVIDIA_API int llaisysNvidiaSetReleaseThreshold(int device, uint64_t bytes);
/* Writes a memory snapshot to the file `path` (replaced): every device the library used and every
 * device block it knows there (in use, cached, graph pools) with its address, size, state,
 * origin, stream, allocation number and, with LLAISYS_NVIDIA_MEMORY_HISTORY=1 (read once; slow:
 * a backtrace per allocation), its call site; the JSON document is described in
 * docs/memory-snapshot.md, and `llaisys-nvidia memory FILE [--html OUT.html]` sums it up and
 * draws it. With LLAISYS_NVIDIA_OOM_SNAPSHOT=FILE, a device allocation out of memory writes one
 * there and its message says so. A NULL path, or one that cannot be written, is
 * LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT. */
LLAISYS_NVIDIA_API int llaisysNvidiaMemorySnapshot(const char *path);
LLAISYS_NVIDIA_API void llaisysNvidiaResetPeakMemoryStats(void);

/*
 * ---- The status-returning API beyond the table ------------------------------------------------
 * Every function below returns a llaisysNvidiaStatus_t (0 = LLAISYS_NVIDIA_SUCCESS). On failure
 * it sets the thread's last error (llaisysNvidiaLastCudaError, llaisysNvidiaLastErrorMessage)
 * and does NOT call the error handler. Out-pointers must not be NULL (a NULL one is
 * LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT) unless the function says it may be.
 * Out-parameters on failure: every status-returning function (this block's, the memory
 * statistics' above and the communicator's below) writes each out-parameter's failure value before anything can fail (a refusal in a forked child
 * included), so after any failure it holds exactly that: pointers and handles NULL; numbers 0,
 * except device and rank numbers, -1 (llaisysNvidiaGetDevice, llaisysNvidiaCommDevice,
 * llaisysNvidiaCommRank); structs every byte zero; strings empty (buf[0] is '\0' when len > 0)
 * with a length of 0; arrays (llaisysNvidiaCommInitAll's comms) every element NULL. Two
 * exceptions, documented with their functions: llaisysNvidiaGraphInstantiate's log then holds the
 * failure's message, and llaisysNvidiaGraphExecUpdate's *exec (read and written) is left as it
 * was. A value
 * that reads as an answer (0 for "not done", "no access", "healthy") is only one when the
 * status is 0. Without a driver every call that needs CUDA returns LLAISYS_NVIDIA_ERROR_CUDA with
 * cudaErrorInsufficientDriver (35). Streams and memory are shared with the table: a stream of
 * llaisysNvidiaStreamCreate works with memcpy_async, memory of llaisysNvidiaMallocDevice with
 * free_device, and so on. The current device is per host thread, as in CUDA.
 */

/* Versions. */
typedef struct llaisysNvidiaVersions {
    int built_cudart; /* CUDART_VERSION built against (13000 = 13.0) */
    int runtime;      /* cudaRuntimeGetVersion */
    int driver;       /* cudaDriverGetVersion, 0 without a driver */
} llaisysNvidiaVersions;
LLAISYS_NVIDIA_API const char *llaisysNvidiaVersion(void); /* crate version, static string */
LLAISYS_NVIDIA_API int llaisysNvidiaGetVersions(llaisysNvidiaVersions *out);
LLAISYS_NVIDIA_API const char *llaisysNvidiaStatusName(int status); /* static string */
/* Which CUDA runtime this library uses and why. *version (may be NULL) gets its
 * cudaRuntimeGetVersion, 0 when none could be loaded; buf gets a report, one fact per line (the
 * link mode, the file, why, and in the `loaded` mode the driver's CUDA version and every place
 * tried), copied like llaisysNvidiaLastErrorMessage; *length (may be NULL) its full length. In
 * the `loaded` mode the first call loads the runtime; it succeeds also when none can be loaded
 * (the report says why, and every call that needs CUDA fails with a status naming the library
 * and the symbol or version). */
LLAISYS_NVIDIA_API int llaisysNvidiaCudartLibrary(int *version, char *buf, size_t len,
                                                  size_t *length);

/* Devices. */
typedef struct llaisysNvidiaDeviceProperties {
    char name[256];
    int major, minor; /* compute capability */
    size_t total_memory;
    int multiprocessors;
    char pci_bus_id[32];
    int async_engines;      /* copy engines concurrent with kernels */
    int unified_addressing; /* 1: unified virtual addressing */
    int memory_pools;       /* 1: stream-ordered memory pools supported */
} llaisysNvidiaDeviceProperties;
/* *count is always written: 0 when there is none, and the status says why (35 no driver, 100 no
 * device). */
LLAISYS_NVIDIA_API int llaisysNvidiaDeviceCount(int *count);
/* Creates the context of `device` now and makes it current; *ms (may be NULL) gets the time it
 * took (0 on failure). Transient failures of several processes starting at once (cudaErrorDevicesUnavailable,
 * cudaErrorInitializationError, cudaErrorUnknown) are tried again: three tries, 50 and 200 ms
 * apart. */
LLAISYS_NVIDIA_API int llaisysNvidiaInitDevice(int device, double *ms);
LLAISYS_NVIDIA_API int llaisysNvidiaGetDevice(int *device); /* -1 on failure */
LLAISYS_NVIDIA_API int llaisysNvidiaSetDevice(int device);
LLAISYS_NVIDIA_API int llaisysNvidiaDeviceSynchronize(void);
LLAISYS_NVIDIA_API int llaisysNvidiaGetDeviceProperties(int device, llaisysNvidiaDeviceProperties *out);
LLAISYS_NVIDIA_API int llaisysNvidiaMemGetInfo(size_t *free_bytes, size_t *total_bytes); /* current device; either may be NULL */
LLAISYS_NVIDIA_API int llaisysNvidiaDeviceCanAccessPeer(int *can, int device, int peer);
LLAISYS_NVIDIA_API int llaisysNvidiaDeviceEnablePeerAccess(int peer); /* from the current device; already enabled is success */

/* Streams and events. Handles of other libraries, or destroyed ones, are refused. */
typedef void *llaisysNvidiaEvent_t;
#define LLAISYS_NVIDIA_STREAM_NON_BLOCKING 1u   /* does not synchronize with the legacy stream */
#define LLAISYS_NVIDIA_EVENT_BLOCKING_SYNC 1u   /* synchronize sleeps instead of spinning */
#define LLAISYS_NVIDIA_EVENT_DISABLE_TIMING 2u  /* cheaper; no elapsed time */
LLAISYS_NVIDIA_API int llaisysNvidiaStreamCreate(llaisysStream_t *out, unsigned flags, int priority);
LLAISYS_NVIDIA_API int llaisysNvidiaStreamDestroy(llaisysStream_t stream); /* NULL: nothing */
LLAISYS_NVIDIA_API int llaisysNvidiaStreamQuery(llaisysStream_t stream, int *done); /* *done 1 when idle */
LLAISYS_NVIDIA_API int llaisysNvidiaStreamSynchronize(llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaStreamWaitEvent(llaisysStream_t stream, llaisysNvidiaEvent_t event);
LLAISYS_NVIDIA_API int llaisysNvidiaStreamPriorityRange(int *least, int *greatest);
LLAISYS_NVIDIA_API int llaisysNvidiaEventCreate(llaisysNvidiaEvent_t *out, unsigned flags);
LLAISYS_NVIDIA_API int llaisysNvidiaEventRecord(llaisysNvidiaEvent_t event, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaEventQuery(llaisysNvidiaEvent_t event, int *done);
LLAISYS_NVIDIA_API int llaisysNvidiaEventSynchronize(llaisysNvidiaEvent_t event);
LLAISYS_NVIDIA_API int llaisysNvidiaEventElapsedTime(float *ms, llaisysNvidiaEvent_t start, llaisysNvidiaEvent_t end);
LLAISYS_NVIDIA_API int llaisysNvidiaEventDestroy(llaisysNvidiaEvent_t event); /* NULL: nothing */

/* Memory: the four kinds, stream-ordered allocation, memset, registration, attributes. */
typedef struct llaisysNvidiaPointerAttributes {
    int kind;             /* 0 pageable host, 1 pinned/registered host, 2 device, 3 managed */
    int device;           /* -1 for pageable host memory */
    void *device_pointer; /* address for device code, NULL when none */
    void *host_pointer;   /* address for host code, NULL when none */
    int ours;             /* 1 inside memory of malloc_device / malloc_host */
} llaisysNvidiaPointerAttributes;
LLAISYS_NVIDIA_API int llaisysNvidiaMallocDevice(void **out, size_t size);  /* the table's device cache */
LLAISYS_NVIDIA_API int llaisysNvidiaFreeDevice(void *ptr);
LLAISYS_NVIDIA_API int llaisysNvidiaMallocAsync(void **out, size_t size, llaisysStream_t stream); /* stream-ordered */
LLAISYS_NVIDIA_API int llaisysNvidiaFreeAsync(void *ptr, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaMallocHost(void **out, size_t size);    /* the table's pinned cache */
LLAISYS_NVIDIA_API int llaisysNvidiaFreeHost(void *ptr);
/* Managed memory; a size above the device's free memory is refused (never oversubscribed). */
LLAISYS_NVIDIA_API int llaisysNvidiaMallocManaged(void **out, size_t size);
LLAISYS_NVIDIA_API int llaisysNvidiaFreeManaged(void *ptr);
LLAISYS_NVIDIA_API int llaisysNvidiaMemPrefetch(const void *ptr, size_t size, int device /* -1 host */, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaMemAdvise(const void *ptr, size_t size, unsigned advice /* cudaMemoryAdvise */, int device);
/* Mapped zero-copy host memory: *host for the host, *device for device code. */
LLAISYS_NVIDIA_API int llaisysNvidiaMallocMapped(void **host, void **device, size_t size);
LLAISYS_NVIDIA_API int llaisysNvidiaFreeMapped(void *host);
LLAISYS_NVIDIA_API int llaisysNvidiaHostRegister(void *ptr, size_t size); /* page-locks existing memory */
LLAISYS_NVIDIA_API int llaisysNvidiaHostUnregister(void *ptr);
LLAISYS_NVIDIA_API int llaisysNvidiaMemset(void *ptr, int value, size_t size); /* returns complete */
LLAISYS_NVIDIA_API int llaisysNvidiaMemsetAsync(void *ptr, int value, size_t size, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaPointerGetAttributes(const void *ptr, llaisysNvidiaPointerAttributes *out);

/* Copies with a status (the table's semantics and checks), and between devices. */
LLAISYS_NVIDIA_API int llaisysNvidiaMemcpy(void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind);
LLAISYS_NVIDIA_API int llaisysNvidiaMemcpyAsync(void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaMemcpyPeer(void *dst, int dst_device, const void *src, int src_device, size_t size); /* returns complete */
LLAISYS_NVIDIA_API int llaisysNvidiaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device, size_t size, llaisysStream_t stream);

/*
 * ---- CUDA graphs: capture and replay --------------------------------------------------------
 * A decode step of hundreds of small kernels launches much faster as a graph. Capture the step
 * on a stream of ours, instantiate it once, launch it every step:
 *
 *   llaisysNvidiaStreamBeginCapture(stream, LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL, 0);
 *   ... kernels on `stream`, memcpy_async on `stream`, malloc_device/free_device ...
 *   llaisysNvidiaStreamEndCapture(stream, &graph);
 *   llaisysNvidiaGraphInstantiate(&exec, graph, log, sizeof log);
 *   for (...) llaisysNvidiaGraphLaunch(exec, stream);
 *
 * Memory. While a thread captures through llaisysNvidiaStreamBeginCapture, malloc_device on that
 * thread allocates from the capture's graph pool: memory that stays valid for every replay of
 * the graph and goes back to CUDA once the graph and every executable graph made from it are
 * destroyed (and the pool's handle released). A block freed during the capture is not reused
 * in that capture; it serves later captures into the same pool. Several captures may share a
 * pool (llaisysNvidiaGraphPoolCreate) when their graphs are replayed in order, one after the
 * other, never at the same time. Memory of a pool freed outside a capture into it (an output the
 * host read) is kept until the pool goes.
 *
 * The caches never join or invalidate a capture, whoever began it (this API, or the host with
 * cudaStreamBeginCapture on a stream of ours): while a stream of the device captures, the
 * library queues nothing on the legacy stream; frees wait until the capture ends, and memory
 * freed during it is not handed out before. Other threads keep working during a capture in
 * thread-local or relaxed mode: malloc_device, free_device, malloc_host, free_host, streams,
 * events, and memcpy_sync of every kind, which then runs on a private stream of the library and
 * returns complete, ordered after nothing else on the device: synchronize the work that writes
 * its source (or reads its destination) first. A capture the host begins directly with
 * cudaStreamBeginCapture is seen only through CUDA's own status: a table call racing with that
 * call itself can still invalidate it, and memory malloc_device hands out during it is ordinary
 * cached memory (not kept for replays): allocate inside captures begun here.
 *
 * Refused with LLAISYS_NVIDIA_ERROR_CAPTURE (the capture is left as it was): device_synchronize
 * and llaisysNvidiaReleaseCachedMemory while a stream of the device captures (the release
 * still gives back the other devices' cached memory); waiting for or
 * querying a capturing stream; work on NULL (the legacy stream) while a blocking stream of the
 * device captures; on a thread capturing here in global or thread-local mode, waits, queries,
 * memcpy_sync, and memset and peer copies without a stream (CUDA forbids them there; use
 * memcpy_async on the capturing stream); a staged
 * copy of pageable host memory on a capturing stream (copy from malloc_host memory instead).
 * The table's functions report it through the error handler, as every failure.
 */
#define LLAISYS_NVIDIA_ERROR_CAPTURE 8
/* Capture modes (CUDA's cudaStreamCaptureMode values). */
#define LLAISYS_NVIDIA_CAPTURE_MODE_GLOBAL 0
#define LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL 1
#define LLAISYS_NVIDIA_CAPTURE_MODE_RELAXED 2
/* Capture statuses (cudaStreamCaptureStatus). */
#define LLAISYS_NVIDIA_CAPTURE_STATUS_NONE 0
#define LLAISYS_NVIDIA_CAPTURE_STATUS_ACTIVE 1
#define LLAISYS_NVIDIA_CAPTURE_STATUS_INVALIDATED 2
typedef void *llaisysNvidiaGraph_t;        /* a graph of llaisysNvidiaStreamEndCapture */
typedef void *llaisysNvidiaGraphExec_t;    /* an executable graph of llaisysNvidiaGraphInstantiate */
typedef uint64_t llaisysNvidiaGraphPool_t; /* 0: a pool of the capture's own */

/* A graph pool on the current device (*pool is 0 on failure); Release gives up its handle. */
LLAISYS_NVIDIA_API int llaisysNvidiaGraphPoolCreate(llaisysNvidiaGraphPool_t *pool);
LLAISYS_NVIDIA_API int llaisysNvidiaGraphPoolRelease(llaisysNvidiaGraphPool_t pool);
/* Begins capturing `stream` (ours, not NULL) in `mode`, allocating into `pool` (0: its own). */
LLAISYS_NVIDIA_API int llaisysNvidiaStreamBeginCapture(llaisysStream_t stream, int mode, llaisysNvidiaGraphPool_t pool);
/* Ends it (in global and thread-local mode on the thread that began it): *graph is the graph,
 * NULL on failure (an invalidated capture gives cudaErrorStreamCaptureInvalidated). A capture the
 * host began with cudaStreamBeginCapture on a stream of ours may be ended here too. */
LLAISYS_NVIDIA_API int llaisysNvidiaStreamEndCapture(llaisysStream_t stream, llaisysNvidiaGraph_t *graph);
/* *status: LLAISYS_NVIDIA_CAPTURE_STATUS_* of `stream` (NULL: the legacy stream, ACTIVE while a
 * blocking stream of the current device captures); NONE on failure. */
LLAISYS_NVIDIA_API int llaisysNvidiaStreamCaptureStatus(llaisysStream_t stream, int *status);
/* *exec is NULL on failure, and `log` (NULL, or log_size bytes) then says why (CUDA's reason and
 * the kind of node at fault), NUL-terminated and truncated to fit; an empty string on success. */
LLAISYS_NVIDIA_API int llaisysNvidiaGraphInstantiate(llaisysNvidiaGraphExec_t *exec, llaisysNvidiaGraph_t graph,
                                                     char *log, size_t log_size);
LLAISYS_NVIDIA_API int llaisysNvidiaGraphUpload(llaisysNvidiaGraphExec_t exec, llaisysStream_t stream);
/* On a capturing stream the graph becomes a child graph of that capture. */
LLAISYS_NVIDIA_API int llaisysNvidiaGraphLaunch(llaisysNvidiaGraphExec_t exec, llaisysStream_t stream);
/* Makes *exec run `graph`: updated in place when CUDA can (same topology, same kinds of node,
 * same kernels; new parameters), else `graph` is instantiated and the old executable graph
 * destroyed: *exec is then the new handle and *reinstantiated (may be NULL) 1. On failure *exec
 * is unchanged and usable, *reinstantiated 0. */
LLAISYS_NVIDIA_API int llaisysNvidiaGraphExecUpdate(llaisysNvidiaGraphExec_t *exec, llaisysNvidiaGraph_t graph,
                                                    int *reinstantiated);
/* NULL does nothing. Destroying a graph leaves executable graphs made from it valid. */
LLAISYS_NVIDIA_API int llaisysNvidiaGraphExecDestroy(llaisysNvidiaGraphExec_t exec);
LLAISYS_NVIDIA_API int llaisysNvidiaGraphDestroy(llaisysNvidiaGraph_t graph);

/* The same functions as a llaisys-style table; the field order is the ABI. */
typedef struct LlaisysNvidiaGraphAPI {
    int (*pool_create)(llaisysNvidiaGraphPool_t *pool);
    int (*pool_release)(llaisysNvidiaGraphPool_t pool);
    int (*begin_capture)(llaisysStream_t stream, int mode, llaisysNvidiaGraphPool_t pool);
    int (*end_capture)(llaisysStream_t stream, llaisysNvidiaGraph_t *graph);
    int (*capture_status)(llaisysStream_t stream, int *status);
    int (*instantiate)(llaisysNvidiaGraphExec_t *exec, llaisysNvidiaGraph_t graph, char *log, size_t log_size);
    int (*upload)(llaisysNvidiaGraphExec_t exec, llaisysStream_t stream);
    int (*launch)(llaisysNvidiaGraphExec_t exec, llaisysStream_t stream);
    int (*exec_update)(llaisysNvidiaGraphExec_t *exec, llaisysNvidiaGraph_t graph, int *reinstantiated);
    int (*exec_destroy)(llaisysNvidiaGraphExec_t exec);
    int (*graph_destroy)(llaisysNvidiaGraph_t graph);
} LlaisysNvidiaGraphAPI;
/* Never NULL, never fails. */
LLAISYS_NVIDIA_API const LlaisysNvidiaGraphAPI *llaisysNvidiaGetGraphAPI(void);

/*
 * ---- The communicator: collectives over NCCL ------------------------------------------------
 * One process per GPU (or one thread with llaisysNvidiaCommInitAll): rank 0 makes a unique id,
 * sends its 128 bytes to every other rank (a file, a pipe, a socket), and each rank joins with
 * llaisysNvidiaCommInitRank on its own current device. README "Communicator" walks through it.
 *
 * NCCL is loaded at run time, on the first call that needs it (this library does not link it;
 * a process that never calls these functions never loads it). Search: the variable
 * LLAISYS_NVIDIA_NCCL_LIBRARY (a file, or a folder holding libnccl.so.2; when set nothing else is
 * searched), then the dynamic loader's path for libnccl.so.2, then the PyPI wheels
 * (nvidia/nccl/lib) of the active Python (LLAISYS_NVIDIA_PYTHON, else python3), which is asked
 * for its site folders with a 10 s bound on its whole run, output included (past it, it and
 * the processes it started are killed; a Python that crashes or fails is reported with its
 * signal or exit status). A library is accepted only when its ncclGetVersion reports a version
 * of NCCL 2, the major release the bindings were built for (codes 2000-2899 and 20900-29999:
 * NCCL 2.0.0 to 2.99.99); any other (-1, INT_MAX, 3.x) is LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE
 * naming the file and the code. Each function NCCL lacks (an older release) is
 * LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE naming it.
 *
 * Same error model as the status API above: every function returns a llaisysNvidiaStatus_t,
 * sets the thread's last error on failure and never calls the error handler. Bad input (NULL,
 * a count whose bytes overflow, an unknown dtype or op, a root/peer/rank out of range, a
 * destroyed or foreign communicator, a stream of another device than the communicator's, more
 * bytes than a malloc_device block holds) is LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT before NCCL
 * is called. The new statuses (values stable, never reused):
 *   5 LLAISYS_NVIDIA_ERROR_NCCL              an NCCL call failed: llaisysNvidiaLastNcclError()
 *                                            is its ncclResult_t; the message has
 *                                            ncclGetErrorString and ncclGetLastError.
 *   6 LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE  libnccl.so.2 not found (the message lists where it
 *                                            looked and how to fix it), not NCCL, not NCCL 2,
 *                                            or too old.
 *   7 LLAISYS_NVIDIA_ERROR_TIMEOUT           NCCL work did not complete within the timeout
 *                                            (a rank that never joined or died): the
 *                                            communicator was aborted.
 *
 * Faults. Communicators are non-blocking inside (ncclConfig_t.blocking = 0): no call waits
 * for other ranks without a bound. Every wait (initialisation, a call NCCL answers with
 * ncclInProgress, the end of a group, destroy, llaisysNvidiaCommSynchronize) is bounded by the
 * communicator's timeout: llaisysNvidiaCommSetTimeout, else LLAISYS_NVIDIA_NCCL_TIMEOUT_MS, else
 * 300000 ms (0: no limit), taken when it is made. Past it, or on an asynchronous NCCL error,
 * the communicator is aborted (ncclCommAbort: its kernels return); its handle then answers
 * every call with an error saying why, until llaisysNvidiaCommDestroy forgets it.
 * NVLink multicast (NVLS) is off in every communicator (LLAISYS_NVIDIA_NCCL_NVLS=1 leaves it to
 * NCCL); run with NCCL_NVLS_ENABLE=0 as well on shared multi-GPU machines.
 *
 * Element types are llaisysDataType_t values (include/llaisys.h), passed as int: BYTE 1, BOOL 2,
 * I8 3, I16 4, I32 5, I64 6, U8 7, U16 8, U32 9, U64 10, F8 11, F16 12, F32 13, F64 14, C16 15,
 * C32 16, C64 17, C128 18, BF16 19. Moving collectives (all-gather, broadcast, send, recv) take
 * every one (those NCCL lacks move as bytes). Reductions take BYTE/U8, I8, I32, U32, I64, U64,
 * F16, BF16, F32, F64; BOOL with MAX (or) and MIN (and) only; C32/C64/C128 with SUM and AVG only
 * (as pairs of F16/F32/F64); I16, U16, F8 and C16 are refused (NCCL has no such type).
 * Counts are in elements of dtype.
 *
 * Streams are ours (create_stream, llaisysNvidiaStreamCreate) on the communicator's device, or
 * NULL for that device's legacy default stream. Memory is any device-accessible memory of the
 * communicator's device; cached memory of malloc_device/malloc_host works: a block freed while
 * a collective that uses it is still queued is not handed out again before it has run (device
 * blocks: the free is ordered on the legacy stream after the collective, also for non-blocking
 * streams; pinned blocks: an event at free_host).
 * Groups (llaisysNvidiaGroupStart/End) are per thread, as NCCL's: calls between them are queued
 * and launched together by the outermost GroupEnd (send and recv between ranks of one thread,
 * or to oneself, need a group). A communicator with work in an open group cannot be destroyed
 * or aborted until the group ends (an abort after a timeout or an NCCL error then refuses every
 * call at once and aborts NCCL's communicator when the group ends), and other threads' calls on
 * it are refused meanwhile; a thread that exits with a group open leaves the communicators it
 * queued work of aborted (every call refused; destroy them). Calls from several threads on one communicator enter NCCL one at a
 * time.
 */
#define LLAISYS_NVIDIA_ERROR_NCCL 5
#define LLAISYS_NVIDIA_ERROR_NCCL_UNAVAILABLE 6
#define LLAISYS_NVIDIA_ERROR_TIMEOUT 7
/* Reductions (NCCL's values). */
#define LLAISYS_NVIDIA_REDUCE_SUM 0
#define LLAISYS_NVIDIA_REDUCE_PROD 1
#define LLAISYS_NVIDIA_REDUCE_MAX 2
#define LLAISYS_NVIDIA_REDUCE_MIN 3
#define LLAISYS_NVIDIA_REDUCE_AVG 4
/* The unique id: 128 opaque bytes (NCCL_UNIQUE_ID_BYTES), copied as they are between ranks. */
#define LLAISYS_NVIDIA_COMM_ID_BYTES 128
typedef struct llaisysNvidiaCommId {
    char internal[LLAISYS_NVIDIA_COMM_ID_BYTES];
} llaisysNvidiaCommId;
/* A communicator handle (a token of this library, not an ncclComm_t). */
typedef struct llaisysNvidiaComm *llaisysNvidiaComm_t;

/* The ncclResult_t of the thread's last error (0 when none or when no NCCL call failed; 7
 * ncclInProgress for a timeout). */
LLAISYS_NVIDIA_API int llaisysNvidiaLastNcclError(void);
/* Loads NCCL if needed; its version code (23203 = 2.32.3) and the file it was loaded from
 * (copied like llaisysNvidiaLastErrorMessage; *length, if not NULL, gets the full length; on
 * failure buf holds "" and *length 0). */
LLAISYS_NVIDIA_API int llaisysNvidiaNcclGetVersion(int *version);
LLAISYS_NVIDIA_API int llaisysNvidiaNcclLibraryPath(char *buf, size_t len, size_t *length);
/* A new unique id (all zeros on failure). Needs no GPU (NCCL picks a network interface and
 * listens on it; that process must stay alive until the ranks have joined). */
LLAISYS_NVIDIA_API int llaisysNvidiaCommGetUniqueId(llaisysNvidiaCommId *id);
/* The timeout of communicators made from now on, in ms (0: no limit); overrides the variable. */
LLAISYS_NVIDIA_API int llaisysNvidiaCommSetTimeout(int64_t timeout_ms);
/* Joins rank `rank` (0..nranks-1) on the calling thread's current device; returns once all
 * nranks have joined, or LLAISYS_NVIDIA_ERROR_TIMEOUT. *comm is NULL on failure. */
LLAISYS_NVIDIA_API int llaisysNvidiaCommInitRank(llaisysNvidiaComm_t *comm, int nranks,
                                                 const llaisysNvidiaCommId *id, int rank);
/* ndev communicators of one process, made together: comms[i] is rank i on devices[i] (NULL:
 * devices 0..ndev-1; each listed once). Every comms[i] is NULL on failure. */
LLAISYS_NVIDIA_API int llaisysNvidiaCommInitAll(llaisysNvidiaComm_t *comms, int ndev, const int *devices);
/* Destroy flushes queued work (bounded by the timeout, aborted past it); abort stops it. Both
 * free the handle; NULL does nothing. */
LLAISYS_NVIDIA_API int llaisysNvidiaCommDestroy(llaisysNvidiaComm_t comm);
LLAISYS_NVIDIA_API int llaisysNvidiaCommAbort(llaisysNvidiaComm_t comm);
LLAISYS_NVIDIA_API int llaisysNvidiaCommRank(llaisysNvidiaComm_t comm, int *rank);     /* -1 on failure */
LLAISYS_NVIDIA_API int llaisysNvidiaCommSize(llaisysNvidiaComm_t comm, int *size);     /* 0 on failure */
LLAISYS_NVIDIA_API int llaisysNvidiaCommDevice(llaisysNvidiaComm_t comm, int *device); /* -1 on failure */
/* ncclCommGetAsyncError: *result 0 healthy, 7 in progress, else the error of earlier
 * asynchronous work (the communicator is then unusable: abort it); 0 on failure. */
LLAISYS_NVIDIA_API int llaisysNvidiaCommGetAsyncError(llaisysNvidiaComm_t comm, int *result);
/* Waits for `stream` (NULL: the communicator device's legacy stream) while watching comm; on
 * an asynchronous NCCL error or after timeout_ms (-1: the communicator's timeout, 0: no
 * limit) the communicator is aborted (its kernels return) and the status says why. The
 * bounded replacement of stream_synchronize after collectives. */
LLAISYS_NVIDIA_API int llaisysNvidiaCommSynchronize(llaisysNvidiaComm_t comm, llaisysStream_t stream, int64_t timeout_ms);
/* Collectives and point-to-point, queued on `stream`; NCCL's semantics (in place when
 * sendbuff == recvbuff). all-gather: recvbuff holds nranks * sendcount; reduce-scatter:
 * sendbuff holds nranks * recvcount. broadcast reads sendbuff on the root only, reduce writes
 * recvbuff on the root only (NULL allowed elsewhere). */
LLAISYS_NVIDIA_API int llaisysNvidiaAllReduce(const void *sendbuff, void *recvbuff, size_t count, int dtype, int op,
                                              llaisysNvidiaComm_t comm, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int dtype,
                                              llaisysNvidiaComm_t comm, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int dtype,
                                                  int op, llaisysNvidiaComm_t comm, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaBroadcast(const void *sendbuff, void *recvbuff, size_t count, int dtype, int root,
                                              llaisysNvidiaComm_t comm, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaReduce(const void *sendbuff, void *recvbuff, size_t count, int dtype, int op,
                                           int root, llaisysNvidiaComm_t comm, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaSend(const void *sendbuff, size_t count, int dtype, int peer,
                                         llaisysNvidiaComm_t comm, llaisysStream_t stream);
LLAISYS_NVIDIA_API int llaisysNvidiaRecv(void *recvbuff, size_t count, int dtype, int peer,
                                         llaisysNvidiaComm_t comm, llaisysStream_t stream);
/* Groups of NCCL calls, per thread, nestable. GroupEnd without GroupStart is an invalid argument. */
LLAISYS_NVIDIA_API int llaisysNvidiaGroupStart(void);
LLAISYS_NVIDIA_API int llaisysNvidiaGroupEnd(void);

/* The same functions as a llaisys-style table (the common subset); the field order is the ABI. */
typedef struct LlaisysNvidiaCommAPI {
    int (*get_unique_id)(llaisysNvidiaCommId *id);
    int (*init_rank)(llaisysNvidiaComm_t *comm, int nranks, const llaisysNvidiaCommId *id, int rank);
    int (*init_all)(llaisysNvidiaComm_t *comms, int ndev, const int *devices);
    int (*destroy)(llaisysNvidiaComm_t comm);
    int (*abort)(llaisysNvidiaComm_t comm);
    int (*get_rank)(llaisysNvidiaComm_t comm, int *rank);
    int (*get_size)(llaisysNvidiaComm_t comm, int *size);
    int (*allreduce)(const void *sendbuff, void *recvbuff, size_t count, int dtype, int op,
                     llaisysNvidiaComm_t comm, llaisysStream_t stream);
    int (*allgather)(const void *sendbuff, void *recvbuff, size_t sendcount, int dtype,
                     llaisysNvidiaComm_t comm, llaisysStream_t stream);
    int (*reduce_scatter)(const void *sendbuff, void *recvbuff, size_t recvcount, int dtype, int op,
                          llaisysNvidiaComm_t comm, llaisysStream_t stream);
    int (*broadcast)(const void *sendbuff, void *recvbuff, size_t count, int dtype, int root,
                     llaisysNvidiaComm_t comm, llaisysStream_t stream);
    int (*send)(const void *sendbuff, size_t count, int dtype, int peer, llaisysNvidiaComm_t comm,
                llaisysStream_t stream);
    int (*recv)(void *recvbuff, size_t count, int dtype, int peer, llaisysNvidiaComm_t comm,
                llaisysStream_t stream);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*synchronize)(llaisysNvidiaComm_t comm, llaisysStream_t stream, int64_t timeout_ms);
} LlaisysNvidiaCommAPI;
/* Never NULL, never fails, loads nothing. */
LLAISYS_NVIDIA_API const LlaisysNvidiaCommAPI *llaisysNvidiaGetCommAPI(void);

#ifdef __cplusplus
}
#endif

#endif /* LLAISYS_NVIDIA_RUNTIME_H */

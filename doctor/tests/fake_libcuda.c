/* A fake libcuda.so.1 for the doctor's watchdog and old-driver tests: just enough of the
 * driver API for the static (and shared) cudart of CUDA 12.9 and 13.0 to load it and call its
 * cuInit. What cudart does with it (found by tracing these calls):
 *   - dlopen("libcuda.so.1"), cuGetProcAddress_v2 looked up in it (this fake exports the
 *     older name too), then every driver entry point through that, "cuGetProcAddress" itself
 *     included (cudaVersion 11030 and 12000);
 *   - cudaDriverGetVersion calls cuDriverGetVersion, then (for a driver new enough for this
 *     runtime) cuInit(0) and cuGetExportTable: a hanging or crashing cuInit hangs or crashes
 *     cudaDriverGetVersion; a driver older than the runtime gets no cuInit and
 *     cudaErrorInsufficientDriver (35) from cudaGetDeviceCount;
 *   - cudaGetDeviceCount returns cuInit's error mapped to a cudaError_t (999 -> 999
 *     cudaErrorUnknown, 2 -> 2 cudaErrorMemoryAllocation); entry points that are missing
 *     (CUDA_ERROR_NOT_FOUND) give cudaErrorCallRequiresNewerDriver (36);
 *   - when the driver's initialisation fails (any of the above), cudart unloads libcuda.so.1
 *     again inside cudaDriverGetVersion: the library's teardown runs there.
 * Built with at most one of -DFAKE_HANG, -DFAKE_CRASH, -DFAKE_INIT_RESULT=N,
 * -DFAKE_HANG_ON_LOAD, -DFAKE_CRASH_AT_EXIT, and -DFAKE_DRIVER_VERSION=N (default 13000);
 * -DFAKE_HOLDER=SECONDS adds a helper process that cuInit starts first, as a driver library
 * may: it inherits the caller's stdout and stderr and keeps them open for SECONDS (its pid is
 * written on stderr, `holder PID keeps stdout open`, so that a test can end it). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(FAKE_HOLDER)
static void start_holder(void) {
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls after fork in a possibly threaded process. */
        sleep(FAKE_HOLDER);
        _exit(0);
    }
    fprintf(stderr, "fake libcuda.so.1: holder %d keeps stdout open\n", (int)pid);
}
#endif

typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_FOUND 500

#ifndef FAKE_DRIVER_VERSION
#define FAKE_DRIVER_VERSION 13000
#endif
#ifndef FAKE_INIT_RESULT
#define FAKE_INIT_RESULT 0
#endif

CUresult cuDriverGetVersion(int *version) {
    *version = FAKE_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
#if defined(FAKE_HOLDER)
    start_holder();
#endif
#if defined(FAKE_HANG)
    fprintf(stderr, "fake libcuda.so.1: cuInit hangs now\n");
    for (;;)
        pause();
#elif defined(FAKE_CRASH)
    fprintf(stderr, "fake libcuda.so.1: cuInit crashes now\n");
    {
        volatile int *volatile nowhere = 0;
        *nowhere = 1;
    }
    return 999;
#else
    return FAKE_INIT_RESULT;
#endif
}

/* Any other entry point: CUDA_ERROR_UNKNOWN. */
static CUresult unsupported(void) { return 999; }

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags);

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                             unsigned long long flags, int *status) {
    void *f = NULL;
    (void)flags;
    if (strcmp(symbol, "cuInit") == 0)
        f = (void *)cuInit;
    else if (strcmp(symbol, "cuDriverGetVersion") == 0)
        f = (void *)cuDriverGetVersion;
    else if (strcmp(symbol, "cuGetProcAddress") == 0)
        f = cuda_version >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    else if (symbol[0] != '\0')
        f = (void *)unsupported;
    *pfn = f;
    if (status)
        *status = f ? 0 : 1;
    return f ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, NULL);
}

#if defined(FAKE_HANG_ON_LOAD)
/* The library's initialiser hangs: dlopen itself never returns. */
__attribute__((constructor)) static void hang_on_load(void) {
    fprintf(stderr, "fake libcuda.so.1: hangs while loading\n");
    for (;;)
        pause();
}
#endif

#if defined(FAKE_CRASH_AT_EXIT)
/* Works, then crashes in its teardown when the process exits. */
__attribute__((destructor)) static void crash_at_exit(void) {
    volatile int *volatile nowhere = 0;
    fprintf(stderr, "fake libcuda.so.1: crashes at exit\n");
    *nowhere = 1;
}
#endif

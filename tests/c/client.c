/* A C99 client of llaisys-nvidia on a machine WITHOUT a CUDA driver (CI). Built by
 * tests/c_abi.rs with -std=c99 -Wall -Wextra -Werror -pedantic, linked against the staticlib
 * and against the cdylib. Modes:
 *   client layout   print the ABI layout (sizeof/offsetof/enum values) for the Rust test
 *   client checks   run every no-driver check; prints "ok: N checks" or fails with exit 1
 *   client abort    call create_stream with the default handler: must abort with one line */
#include "llaisys_runtime.h"

#include "check.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    int calls, status, cuda_error, device;
    char function[64], cuda_call[64], message[512];
    void *user;
} seen;

static void recording_handler(const llaisysNvidiaError *e, void *user) {
    seen.calls++;
    seen.status = e->status;
    seen.cuda_error = e->cuda_error;
    seen.device = e->device;
    seen.user = user;
    snprintf(seen.function, sizeof seen.function, "%s", e->function);
    snprintf(seen.cuda_call, sizeof seen.cuda_call, "%s", e->cuda_call);
    snprintf(seen.message, sizeof seen.message, "%s", e->message);
}

static void expect_cuda_failure(const char *function, const char *cuda_call, int before) {
    CHECK(seen.calls == before + 1);
    CHECK(seen.status == LLAISYS_NVIDIA_ERROR_CUDA);
    CHECK(seen.cuda_error == 35); /* cudaErrorInsufficientDriver: no driver here */
    CHECK(strcmp(seen.function, function) == 0);
    CHECK(strcmp(seen.cuda_call, cuda_call) == 0);
    CHECK(strstr(seen.message, "cudaErrorInsufficientDriver") != NULL);
    CHECK(strstr(seen.message, function) != NULL);
    CHECK(llaisysNvidiaLastErrorStatus() == LLAISYS_NVIDIA_ERROR_CUDA);
    CHECK(llaisysNvidiaLastCudaError() == 35);
}

static int layout(void) {
    printf("sizeof %zu\n", sizeof(LlaisysRuntimeAPI));
    printf("get_device_count %zu\n", offsetof(LlaisysRuntimeAPI, get_device_count));
    printf("set_device %zu\n", offsetof(LlaisysRuntimeAPI, set_device));
    printf("device_synchronize %zu\n", offsetof(LlaisysRuntimeAPI, device_synchronize));
    printf("create_stream %zu\n", offsetof(LlaisysRuntimeAPI, create_stream));
    printf("destroy_stream %zu\n", offsetof(LlaisysRuntimeAPI, destroy_stream));
    printf("stream_synchronize %zu\n", offsetof(LlaisysRuntimeAPI, stream_synchronize));
    printf("malloc_device %zu\n", offsetof(LlaisysRuntimeAPI, malloc_device));
    printf("free_device %zu\n", offsetof(LlaisysRuntimeAPI, free_device));
    printf("malloc_host %zu\n", offsetof(LlaisysRuntimeAPI, malloc_host));
    printf("free_host %zu\n", offsetof(LlaisysRuntimeAPI, free_host));
    printf("memcpy_sync %zu\n", offsetof(LlaisysRuntimeAPI, memcpy_sync));
    printf("memcpy_async %zu\n", offsetof(LlaisysRuntimeAPI, memcpy_async));
    printf("sizeof_error %zu\n", sizeof(llaisysNvidiaError));
    printf("error_message %zu\n", offsetof(llaisysNvidiaError, message));
    printf("LLAISYS_MEMCPY_H2H %d\nLLAISYS_MEMCPY_H2D %d\nLLAISYS_MEMCPY_D2H %d\nLLAISYS_MEMCPY_D2D %d\n",
           (int)LLAISYS_MEMCPY_H2H, (int)LLAISYS_MEMCPY_H2D, (int)LLAISYS_MEMCPY_D2H, (int)LLAISYS_MEMCPY_D2D);
    printf("LLAISYS_DEVICE_NVIDIA %d\n", (int)LLAISYS_DEVICE_NVIDIA);
    printf("LLAISYS_NVIDIA_ERROR_INTERNAL %d\n", (int)LLAISYS_NVIDIA_ERROR_INTERNAL);
    return 0;
}

static int run_checks(void) {
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    llaisysNvidiaErrorHandler h = recording_handler;
    void *user = NULL;
    char buf[8], big[512], src[1024], dst[1024];
    size_t n;
    int i, before;

    CHECK(api != NULL);
    CHECK(api == llaisysNvidiaGetRuntimeAPI());
    CHECK(llaisysNvidiaLastErrorStatus() == 0);
    CHECK(llaisysNvidiaLastErrorMessage(NULL, 0) == 0);

    /* No driver: 0 devices, silently, the reason kept as the last error. */
    CHECK(api->get_device_count() == 0);
    CHECK(llaisysNvidiaLastErrorStatus() == LLAISYS_NVIDIA_ERROR_CUDA);
    CHECK(llaisysNvidiaLastCudaError() == 35);
    n = llaisysNvidiaLastErrorMessage(big, sizeof big);
    CHECK(n > 0 && n == strlen(big));
    CHECK(strstr(big, "get_device_count") && strstr(big, "cudaGetDeviceCount") && strstr(big, "cudaErrorInsufficientDriver"));
    /* Truncation: 7 bytes and a NUL, the full length returned. */
    CHECK(llaisysNvidiaLastErrorMessage(buf, sizeof buf) == n);
    CHECK(strlen(buf) == 7 && strncmp(buf, big, 7) == 0);
    llaisysNvidiaClearLastError();
    CHECK(llaisysNvidiaLastErrorStatus() == 0 && llaisysNvidiaLastCudaError() == 0);
    CHECK(llaisysNvidiaLastErrorDevice() == -1);

    /* A returning handler: failure values come back, the handler sees each error. */
    llaisysNvidiaSetErrorHandler(recording_handler, &seen);
    h = NULL;
    llaisysNvidiaGetErrorHandler(&h, &user);
    CHECK(h == recording_handler && user == &seen);

    before = seen.calls;
    CHECK(api->create_stream() == NULL);
    expect_cuda_failure("create_stream", "cudaStreamCreate", before);
    CHECK(seen.user == &seen);

    before = seen.calls;
    CHECK(api->malloc_device(1 << 20) == NULL);
    /* The first CUDA call of the allocator asks for the current device. */
    expect_cuda_failure("malloc_device", "cudaGetDevice", before);
    CHECK(strstr(seen.message, "size=1048576") != NULL);

    before = seen.calls;
    CHECK(api->malloc_host(4096) == NULL);
    expect_cuda_failure("malloc_host", "cudaMallocHost", before);

    before = seen.calls;
    api->set_device(0);
    expect_cuda_failure("set_device", "cudaSetDevice", before);
    CHECK(strstr(seen.message, "device=0") && strstr(seen.message, "device count 0"));

    before = seen.calls;
    api->device_synchronize();
    expect_cuda_failure("device_synchronize", "cudaDeviceSynchronize", before);

    /* Defined no-ops: size 0 and NULL frees call nothing and report nothing. */
    llaisysNvidiaClearLastError();
    before = seen.calls;
    CHECK(api->malloc_device(0) == NULL);
    CHECK(api->malloc_host(0) == NULL);
    api->free_device(NULL);
    api->free_host(NULL);
    api->destroy_stream(NULL);
    api->memcpy_sync(NULL, NULL, 0, LLAISYS_MEMCPY_D2D);
    api->memcpy_async(NULL, NULL, 0, LLAISYS_MEMCPY_H2D, NULL);
    CHECK(seen.calls == before);
    CHECK(llaisysNvidiaLastErrorStatus() == 0);

    /* H2H works without a driver. */
    for (i = 0; i < (int)sizeof src; ++i) src[i] = (char)(i * 7 + 3);
    memset(dst, 0, sizeof dst);
    api->memcpy_sync(dst, src, sizeof src, LLAISYS_MEMCPY_H2H);
    CHECK(memcmp(dst, src, sizeof src) == 0);
    memset(dst, 0, sizeof dst);
    api->memcpy_async(dst, src, sizeof src, LLAISYS_MEMCPY_H2H, NULL);
    CHECK(memcmp(dst, src, sizeof src) == 0);
    CHECK(seen.calls == before);

    /* Bad kinds and NULL pointers: invalid argument, nothing copied. */
    memset(dst, 0, sizeof dst);
    api->memcpy_sync(dst, src, sizeof src, (llaisysMemcpyKind_t)7);
    CHECK(seen.calls == before + 1 && seen.status == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
    CHECK(seen.cuda_error == 0 && strstr(seen.message, "kind=7") && strcmp(seen.function, "memcpy_sync") == 0);
    api->memcpy_async(dst, src, sizeof src, (llaisysMemcpyKind_t)-1, NULL);
    CHECK(seen.calls == before + 2 && strstr(seen.message, "kind=-1") && strcmp(seen.function, "memcpy_async") == 0);
    api->memcpy_sync(dst, src, sizeof src, (llaisysMemcpyKind_t)4);
    CHECK(seen.calls == before + 3 && strstr(seen.message, "kind=4"));
    api->memcpy_sync(NULL, src, 16, LLAISYS_MEMCPY_H2H);
    CHECK(seen.calls == before + 4 && seen.status == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT && strstr(seen.message, "NULL"));
    CHECK(dst[0] == 0 && dst[100] == 0);
    CHECK(llaisysNvidiaLastErrorStatus() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);

    /* Pointers we never handed out: refused, nothing freed. */
    {
        static char not_ours[64];
        before = seen.calls;
        api->free_device(not_ours);
        CHECK(seen.calls == before + 1 && seen.status == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(seen.message, "not returned by malloc_device") && strcmp(seen.function, "free_device") == 0);
        api->free_host(not_ours + 8);
        CHECK(seen.calls == before + 2 && seen.status == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(seen.message, "not returned by malloc_host") && strcmp(seen.function, "free_host") == 0);
    }

    /* Allocator statistics: status-returning, no handler call. */
    {
        llaisysNvidiaAllocatorStats st;
        memset(&st, 0xff, sizeof st);
        before = seen.calls;
        CHECK(llaisysNvidiaDeviceMemoryStats(-1, &st) == LLAISYS_NVIDIA_SUCCESS);
        CHECK(st.in_use_bytes == 0 && st.alloc_count == 0 && st.cached_bytes == 0);
        CHECK(llaisysNvidiaHostMemoryStats(&st) == LLAISYS_NVIDIA_SUCCESS && st.alloc_count == 0);
        CHECK(llaisysNvidiaDeviceMemoryStats(-1, NULL) == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        CHECK(llaisysNvidiaDeviceMemoryStats(1000, &st) == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        CHECK(llaisysNvidiaReleaseCachedMemory() == LLAISYS_NVIDIA_SUCCESS);
        llaisysNvidiaResetPeakMemoryStats();
        CHECK(seen.calls == before);
    }

    /* NULL restores the default handler. */
    llaisysNvidiaSetErrorHandler(NULL, NULL);
    h = recording_handler;
    llaisysNvidiaGetErrorHandler(&h, NULL);
    CHECK(h == NULL);
    printf("ok: %d checks\n", checks);
    return 0;
}

static int run_abort(void) {
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    api->create_stream(); /* default handler: prints one line and aborts */
    printf("returned after an error with the default handler\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "layout") == 0) return layout();
    if (argc == 2 && strcmp(argv[1], "checks") == 0) return run_checks();
    if (argc == 2 && strcmp(argv[1], "abort") == 0) return run_abort();
    fprintf(stderr, "usage: %s layout|checks|abort\n", argv[0]);
    return 2;
}

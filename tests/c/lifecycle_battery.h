/* The calls tests/c/lifecycle_exit.{c,cpp} make at the end of a thread's or the process's life
 * (README "Lifecycle and process rules"), on a machine WITHOUT a CUDA driver: the last error,
 * the status API, the table with a returning handler, the handler functions, H2H copies and the
 * statistics. Each must work (or fail with its status) wherever it is called; none may abort.
 * Compiles as C99 and C++17. */
#ifndef LIFECYCLE_BATTERY_H
#define LIFECYCLE_BATTERY_H

#include "llaisys_runtime.h"

#include <stdio.h>
#include <string.h>

static int battery_failures = 0;

#define BATTERY_CHECK(ctx, cond)                                                              \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FAILED in %s: %s:%d: %s\n", ctx, __FILE__, __LINE__, #cond);     \
            ++battery_failures;                                                               \
        }                                                                                     \
    } while (0)

static void battery_count(const llaisysNvidiaError *e, void *user_data) {
    (void)e;
    ++*(int *)user_data;
}

/* Runs every kind of call once in context `ctx`; prints "ok: <ctx>" when all checks held. */
static void battery(const char *ctx) {
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    int before = battery_failures;
    char msg[512];
    llaisysStream_t s = (llaisysStream_t)&msg;
    int seen = 0;
    llaisysNvidiaErrorHandler old_h = NULL;
    void *old_u = NULL;
    char a[32] = "lifecycle", b[32] = {0};
    llaisysNvidiaAllocatorStats st;

    /* The last error: recorded and readable here too. */
    llaisysNvidiaClearLastError();
    BATTERY_CHECK(ctx, llaisysNvidiaLastErrorStatus() == 0);
    BATTERY_CHECK(ctx, api->get_device_count() == 0);
    BATTERY_CHECK(ctx, llaisysNvidiaLastErrorStatus() == LLAISYS_NVIDIA_ERROR_CUDA);
    BATTERY_CHECK(ctx, llaisysNvidiaLastCudaError() == 35);
    BATTERY_CHECK(ctx, llaisysNvidiaLastErrorMessage(msg, sizeof msg) > 0);
    BATTERY_CHECK(ctx, strstr(msg, "get_device_count") != NULL);

    /* The status API. */
    BATTERY_CHECK(ctx, llaisysNvidiaStreamCreate(&s, 0, 0) == LLAISYS_NVIDIA_ERROR_CUDA);
    BATTERY_CHECK(ctx, s == NULL);
    BATTERY_CHECK(ctx, llaisysNvidiaLastCudaError() == 35);
    BATTERY_CHECK(ctx, llaisysNvidiaHostMemoryStats(&st) == 0);
    BATTERY_CHECK(ctx, llaisysNvidiaDeviceMemoryStats(-1, &st) == 0);

    /* The table, with a handler that returns. */
    llaisysNvidiaGetErrorHandler(&old_h, &old_u);
    llaisysNvidiaSetErrorHandler(battery_count, &seen);
    BATTERY_CHECK(ctx, api->create_stream() == NULL);
    BATTERY_CHECK(ctx, api->malloc_device(64) == NULL);
    api->memcpy_sync(b, a, sizeof a, LLAISYS_MEMCPY_H2H);
    BATTERY_CHECK(ctx, strcmp(b, "lifecycle") == 0);
    api->memcpy_sync(b, a, sizeof a, (llaisysMemcpyKind_t)9);
    BATTERY_CHECK(ctx, seen == 3);
    BATTERY_CHECK(ctx, llaisysNvidiaLastErrorStatus() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
    api->free_device(NULL);
    api->free_host(NULL);
    api->destroy_stream(NULL);
    BATTERY_CHECK(ctx, seen == 3);
    llaisysNvidiaSetErrorHandler(old_h, old_u);

    llaisysNvidiaClearLastError();
    BATTERY_CHECK(ctx, llaisysNvidiaLastErrorStatus() == 0);
    BATTERY_CHECK(ctx, llaisysNvidiaLastErrorMessage(NULL, 0) == 0);
    if (battery_failures == before) {
        printf("ok: %s\n", ctx);
    }
    fflush(stdout);
}

#endif /* LIFECYCLE_BATTERY_H */

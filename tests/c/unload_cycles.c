/* dlopen -> failing calls -> dlclose, many times, measuring the heap in between:
 *   unload_cycles PATH_TO_CDYLIB WARMUP CYCLES
 * Each cycle loads the cdylib, installs an error handler that returns, makes the table report an
 * error to it (memcpy_sync with a bad kind), asks get_device_count, makes a status call fail
 * (llaisysNvidiaMemcpy with a bad kind), reads the last error, and unloads the library. After
 * WARMUP cycles the bytes in use on the heap (mallinfo2's uordblks) are read, then again after
 * CYCLES more. Prints "unloaded: yes|no", "heap: BEFORE -> AFTER" and
 * "growth per cycle: N bytes" (a decimal), and exits 0 when every call answered as documented. */
#define _DEFAULT_SOURCE
#include "llaisys_runtime.h"

#include <dlfcn.h>
#include "heap_in_use.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef const struct LlaisysRuntimeAPI *(*get_api_fn)(void);
typedef void (*set_handler_fn)(llaisysNvidiaErrorHandler, void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, llaisysMemcpyKind_t);
typedef int (*int_fn)(void);
typedef size_t (*message_fn)(char *, size_t);

static int reports = 0;

static void count_report(const llaisysNvidiaError *e, void *user_data) {
    (void)e;
    ++*(int *)user_data;
}

/* One load cycle; 0 when every call answered as documented. */
static int cycle(const char *path) {
    char a[16] = "unload", b[16];
    char msg[256];
    int failures = 0;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    get_api_fn get_api;
    set_handler_fn set_handler;
    memcpy_fn copy;
    int_fn last_status;
    message_fn last_message;
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    get_api = (get_api_fn)(size_t)dlsym(lib, "llaisysNvidiaGetRuntimeAPI");
    set_handler = (set_handler_fn)(size_t)dlsym(lib, "llaisysNvidiaSetErrorHandler");
    copy = (memcpy_fn)(size_t)dlsym(lib, "llaisysNvidiaMemcpy");
    last_status = (int_fn)(size_t)dlsym(lib, "llaisysNvidiaLastErrorStatus");
    last_message = (message_fn)(size_t)dlsym(lib, "llaisysNvidiaLastErrorMessage");
    if (!get_api || !set_handler || !copy || !last_status || !last_message) {
        fprintf(stderr, "dlsym failed\n");
        dlclose(lib);
        return 1;
    }
    set_handler(count_report, &reports);
    get_api()->memcpy_sync(b, a, sizeof a, (llaisysMemcpyKind_t)9);
    failures += last_status() != LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT;
    (void)get_api()->get_device_count();
    failures += copy(b, a, sizeof a, (llaisysMemcpyKind_t)9) != LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT;
    failures += last_message(msg, sizeof msg) == 0 || strstr(msg, "llaisysNvidiaMemcpy") == NULL;
    set_handler(NULL, NULL);
    if (dlclose(lib) != 0) {
        fprintf(stderr, "dlclose: %s\n", dlerror());
        return 1;
    }
    return failures;
}

int main(int argc, char **argv) {
    int warmup, cycles, i, failures = 0, expected_reports;
    size_t before, after;
    void *still;
    if (argc < 4) {
        fprintf(stderr, "usage: %s PATH_TO_CDYLIB WARMUP CYCLES\n", argv[0]);
        return 2;
    }
    warmup = atoi(argv[2]);
    cycles = atoi(argv[3]);
    for (i = 0; i < warmup; ++i) {
        failures += cycle(argv[1]);
    }
    before = heap_in_use();
    for (i = 0; i < cycles; ++i) {
        failures += cycle(argv[1]);
    }
    after = heap_in_use();
    expected_reports = warmup + cycles;
    if (reports != expected_reports) {
        fprintf(stderr, "the handler saw %d reports, expected %d\n", reports, expected_reports);
        ++failures;
    }
    still = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    printf("unloaded: %s\n", still ? "no" : "yes");
    if (still) {
        dlclose(still);
    }
    printf("heap: %zu -> %zu\n", before, after);
    printf("growth per cycle: %.1f bytes\n",
           cycles > 0 ? ((double)after - (double)before) / cycles : 0.0);
    if (failures) {
        fprintf(stderr, "%d calls answered otherwise than documented\n", failures);
        return 1;
    }
    return 0;
}

/* GPU client: dlopen our cdylib, make staged pageable copies (which start the
 * fast path's threads), dlclose it while those threads may still spin, dlopen it again, repeat.
 * The library pins itself once its threads run, so nothing they execute is ever unmapped.
 *   cc -std=c99 dlclose_cycles.c -ldl -o dlclose_cycles && ./dlclose_cycles PATH/libllaisys_nvidia.so
 * Prints "ok: N cycles" and exits 0; a failed check exits 1; a crash is a signal. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int (*get_device_count)(void);
    void (*set_device)(int);
    void (*device_synchronize)(void);
    void *(*create_stream)(void);
    void (*destroy_stream)(void *);
    void (*stream_synchronize)(void *);
    void *(*malloc_device)(size_t);
    void (*free_device)(void *);
    void *(*malloc_host)(size_t);
    void (*free_host)(void *);
    void (*memcpy_sync)(void *, const void *, size_t, int);
    void (*memcpy_async)(void *, const void *, size_t, int, void *);
} table_t;

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s libllaisys_nvidia.so\n", argv[0]);
        return 2;
    }
    const size_t n = 16u << 20;
    unsigned char *src = malloc(n), *back = malloc(n);
    if (!src || !back) return 1;
    const int cycles = 6;
    for (int c = 0; c < cycles; ++c) {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            fprintf(stderr, "FAILED dlopen: %s\n", dlerror());
            return 1;
        }
        const table_t *(*get)(void) = (const table_t *(*)(void))dlsym(lib, "llaisysNvidiaGetRuntimeAPI");
        if (!get) return 1;
        const table_t *t = get();
        if (t->get_device_count() < 1) {
            fprintf(stderr, "FAILED: no device\n");
            return 1;
        }
        t->set_device(0);
        for (size_t i = 0; i < n; ++i) src[i] = (unsigned char)(i * 7 + c);
        memset(back, 0, n);
        void *d = t->malloc_device(n);
        void *s = t->create_stream();
        t->memcpy_sync(d, src, n, 1);            /* staged H2D */
        t->memcpy_async(back, d, n, 2, s);       /* staged D2H */
        t->stream_synchronize(s);
        t->destroy_stream(s);
        t->free_device(d);
        if (memcmp(src, back, n) != 0) {
            fprintf(stderr, "FAILED: data in cycle %d\n", c);
            return 1;
        }
        /* Close while the copy threads still spin (they spin ~250 us after a job). */
        if (dlclose(lib) != 0) {
            fprintf(stderr, "FAILED dlclose: %s\n", dlerror());
            return 1;
        }
        struct timespec ms = {0, 20 * 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    printf("ok: %d cycles\n", cycles);
    return 0;
}

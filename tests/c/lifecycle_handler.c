/* The error handler contract (README "Lifecycle and process rules"), no driver needed:
 *   lifecycle_handler wait       llaisysNvidiaSetErrorHandler returns only once no other thread
 *                                still runs the old handler
 *   lifecycle_handler reentrant  handlers that replace themselves, call into the library, or
 *                                replace the handler while another thread waits for them: no
 *                                deadlock (alarm after 20 s)
 *   lifecycle_handler hammer     8 threads fail while the main thread swaps handlers and frees
 *                                the old user_data right away (built with -fsanitize=address
 *                                too: a use after free is reported)
 *   lifecycle_handler slow       a handler call that does not end for 11.5 s: SetErrorHandler
 *                                waits for it and says so on stderr after 10 s
 * Exit status 0 and "ok: <mode>" when the contract held. */
#define _POSIX_C_SOURCE 200809L
#include "llaisys_runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;
/* A failed check is counted and the mode goes on; main reports the failures. */
#define CHECK_COUNT() ((void)0)
#define CHECK_FAILED() (++failures)
#include "check.h"

static const LlaisysRuntimeAPI *api;

static void sleep_ms(long ms) {
    struct timespec t;
    t.tv_sec = ms / 1000;
    t.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&t, NULL);
}

static void quiet(const llaisysNvidiaError *e, void *u) {
    (void)e;
    (void)u;
}

/* ---- wait ----------------------------------------------------------------------------------- */

struct blocker {
    pthread_mutex_t m;
    pthread_cond_t c;
    int entered, release, running, set_returned, running_at_return, max_wait_ms;
};
static struct blocker blk = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, -1, 10000};

static void blocking_handler(const llaisysNvidiaError *e, void *u) {
    struct blocker *b = (struct blocker *)u;
    int waited = 0;
    (void)e;
    pthread_mutex_lock(&b->m);
    b->running = 1;
    b->entered = 1;
    pthread_cond_broadcast(&b->c);
    while (!b->release && 50 * waited++ < b->max_wait_ms) {
        pthread_mutex_unlock(&b->m);
        sleep_ms(50);
        pthread_mutex_lock(&b->m);
    }
    b->running = 0;
    pthread_mutex_unlock(&b->m);
}

static void *fail_once(void *arg) {
    (void)arg;
    api->create_stream();
    return NULL;
}

static void *replace_handler(void *arg) {
    (void)arg;
    llaisysNvidiaSetErrorHandler(quiet, NULL);
    pthread_mutex_lock(&blk.m);
    blk.set_returned = 1;
    blk.running_at_return = blk.running;
    pthread_mutex_unlock(&blk.m);
    return NULL;
}

static void mode_wait(void) {
    pthread_t failer, setter;
    int returned_early;
    llaisysNvidiaSetErrorHandler(blocking_handler, &blk);
    pthread_create(&failer, NULL, fail_once, NULL);
    pthread_mutex_lock(&blk.m);
    while (!blk.entered) {
        pthread_cond_wait(&blk.c, &blk.m);
    }
    pthread_mutex_unlock(&blk.m);
    pthread_create(&setter, NULL, replace_handler, NULL);
    sleep_ms(300);
    pthread_mutex_lock(&blk.m);
    returned_early = blk.set_returned;
    blk.release = 1;
    pthread_mutex_unlock(&blk.m);
    pthread_join(setter, NULL);
    pthread_join(failer, NULL);
    if (returned_early) {
        fprintf(stderr, "SetErrorHandler returned while another thread still ran the old handler\n");
    }
    CHECK(!returned_early);
    CHECK(blk.set_returned == 1);
    CHECK(blk.running_at_return == 0);
}

/* ---- slow: a handler call that does not end (as one left by longjmp would not) --------------- */

static void mode_slow(void) {
    pthread_t failer;
    time_t start;
    blk.max_wait_ms = 11500; /* never released: returns by itself after 11.5 s */
    llaisysNvidiaSetErrorHandler(blocking_handler, &blk);
    pthread_create(&failer, NULL, fail_once, NULL);
    pthread_mutex_lock(&blk.m);
    while (!blk.entered) {
        pthread_cond_wait(&blk.c, &blk.m);
    }
    pthread_mutex_unlock(&blk.m);
    start = time(NULL);
    llaisysNvidiaSetErrorHandler(quiet, NULL); /* says so on stderr after 10 s, keeps waiting */
    CHECK(time(NULL) - start >= 10);
    CHECK(blk.running == 0);
    pthread_join(failer, NULL);
}

/* ---- reentrant ------------------------------------------------------------------------------ */

static int counted = 0;
static void counting(const llaisysNvidiaError *e, void *u) {
    (void)e;
    ++*(int *)u;
}

static void self_replacing(const llaisysNvidiaError *e, void *u) {
    (void)e;
    (void)u;
    llaisysNvidiaSetErrorHandler(counting, &counted);
}

static int nest_depth = 0, nested_calls = 0;
static void nesting(const llaisysNvidiaError *e, void *u) {
    (void)e;
    ++nested_calls;
    if (nest_depth < 3) {
        ++nest_depth;
        /* Fails again: the handler runs nested on this thread. */
        CHECK(api->malloc_device(1) == NULL);
        if (nest_depth == 3) {
            llaisysNvidiaSetErrorHandler(nesting, u);
        }
    }
}

static struct blocker cross = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, -1, 0};
static void replaces_while_waited_for(const llaisysNvidiaError *e, void *u) {
    (void)e;
    (void)u;
    pthread_mutex_lock(&cross.m);
    cross.entered = 1;
    pthread_cond_broadcast(&cross.c);
    pthread_mutex_unlock(&cross.m);
    sleep_ms(200); /* the main thread is waiting in SetErrorHandler for this call by now */
    llaisysNvidiaSetErrorHandler(counting, &counted);
}

static void mode_reentrant(void) {
    llaisysNvidiaErrorHandler h = NULL;
    void *ud = NULL;
    pthread_t t;

    llaisysNvidiaSetErrorHandler(self_replacing, NULL);
    CHECK(api->create_stream() == NULL);
    llaisysNvidiaGetErrorHandler(&h, &ud);
    CHECK(h == counting && ud == &counted);
    CHECK(api->create_stream() == NULL);
    CHECK(counted == 1);

    llaisysNvidiaSetErrorHandler(nesting, &nest_depth);
    CHECK(api->create_stream() == NULL);
    CHECK(nested_calls == 4);

    llaisysNvidiaSetErrorHandler(replaces_while_waited_for, NULL);
    pthread_create(&t, NULL, fail_once, NULL);
    pthread_mutex_lock(&cross.m);
    while (!cross.entered) {
        pthread_cond_wait(&cross.c, &cross.m);
    }
    pthread_mutex_unlock(&cross.m);
    llaisysNvidiaSetErrorHandler(quiet, NULL); /* waits for the other thread's handler */
    pthread_join(t, NULL);
    llaisysNvidiaGetErrorHandler(&h, &ud);
    CHECK(h == quiet || h == counting);
}

/* ---- hammer --------------------------------------------------------------------------------- */

#define MAGIC 0x5eed1e55u
struct user_data {
    unsigned magic;
    unsigned calls;
};
static int stop = 0, bad = 0;

static void checking(const llaisysNvidiaError *e, void *u) {
    struct user_data *d = (struct user_data *)u;
    volatile unsigned spin;
    (void)e;
    if (d->magic != MAGIC) {
        __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    }
    for (spin = 0; spin < 2000; ++spin) {
    }
    if (d->magic != MAGIC) {
        __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    }
    __atomic_add_fetch(&d->calls, 1, __ATOMIC_RELAXED);
}

static void *hammer(void *arg) {
    void *p = NULL;
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        api->create_stream();
        api->malloc_host(64);
        llaisysNvidiaMallocDevice(&p, 64);
    }
    return NULL;
}

static void mode_hammer(void) {
    pthread_t t[8];
    int i;
    struct user_data *cur = (struct user_data *)malloc(sizeof *cur);
    cur->magic = MAGIC;
    cur->calls = 0;
    llaisysNvidiaSetErrorHandler(checking, cur);
    for (i = 0; i < 8; ++i) {
        pthread_create(&t[i], NULL, hammer, NULL);
    }
    for (i = 0; i < 3000; ++i) {
        struct user_data *next = (struct user_data *)malloc(sizeof *next);
        next->magic = MAGIC;
        next->calls = 0;
        llaisysNvidiaSetErrorHandler(checking, next);
        /* The contract: once SetErrorHandler has returned, the old user_data is ours again. */
        cur->magic = 0;
        free(cur);
        cur = next;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (i = 0; i < 8; ++i) {
        pthread_join(t[i], NULL);
    }
    llaisysNvidiaSetErrorHandler(NULL, NULL);
    free(cur);
    if (bad) {
        fprintf(stderr, "%d handler calls saw freed user_data\n", bad);
    }
    CHECK(bad == 0);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    api = llaisysNvidiaGetRuntimeAPI();
    alarm(20); /* a deadlock ends as SIGALRM, not as a hung test */
    if (strcmp(mode, "wait") == 0) {
        mode_wait();
    } else if (strcmp(mode, "reentrant") == 0) {
        mode_reentrant();
    } else if (strcmp(mode, "hammer") == 0) {
        mode_hammer();
    } else if (strcmp(mode, "slow") == 0) {
        mode_slow();
    } else {
        fprintf(stderr, "usage: %s wait|reentrant|hammer|slow\n", argv[0]);
        return 2;
    }
    if (failures) {
        return 1;
    }
    printf("ok: %s\n", mode);
    return 0;
}

/* The calling thread's last error at the end of a thread's and of the process's life. Every
 * failing call here is bad input (a memcpy kind outside 0..3), refused the same way with or
 * without a GPU:
 *   last_error_exit key      an error set in a thread's body is read in the thread's own
 *                            pthread key destructor (the key made after the library was loaded,
 *                            so its destructor runs after the library's) in rounds 1 and 2 of
 *                            destructors; an error set in round 1 is read in round 2; a
 *                            cleared error reads as none there
 *   last_error_exit first    a thread whose first call into the library is made from its key
 *                            destructor reads that error back in the same and the next round
 *   last_error_exit leak N   N threads each leave an error behind and exit, and N threads
 *                            make their first call from a key destructor: the heap in use
 *                            grows by less than 16 bytes a thread (each record is freed)
 *   last_error_exit atexit   an error set in main is read in an atexit handler
 * Exit status 0 and "ok: ..." lines when every check held. */
#define _DEFAULT_SOURCE
#include "llaisys_runtime.h"

#include "heap_in_use.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_key_t key;
static int failures = 0;
static int rounds_seen = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A failed check is counted (under the lock: threads check in their key destructors) and the
 * mode goes on; main reports the failures. */
static void check_failed(void) {
    pthread_mutex_lock(&lock);
    ++failures;
    pthread_mutex_unlock(&lock);
}
#define CHECK_COUNT() ((void)0)
#define CHECK_FAILED() check_failed()
#include "check.h"

/* A call that fails with LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT on every machine. */
static int fail_copy(void) {
    char a[8] = "exit", b[8];
    return llaisysNvidiaMemcpy(b, a, sizeof a, (llaisysMemcpyKind_t)9);
}

static int fail_async_copy(void) {
    char a[8] = "exit", b[8];
    return llaisysNvidiaMemcpyAsync(b, a, sizeof a, (llaisysMemcpyKind_t)9, NULL);
}

/* 1 when the thread's last error is status 3 and its message names `function` followed by
 * ": " (so llaisysNvidiaMemcpy is not taken for llaisysNvidiaMemcpyAsync). */
static int last_error_is(const char *function) {
    char msg[512], want[128];
    snprintf(want, sizeof want, "%s: ", function);
    return llaisysNvidiaLastErrorStatus() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT &&
           llaisysNvidiaLastErrorMessage(msg, sizeof msg) > 0 && strstr(msg, want) != NULL;
}

/* Per thread: what the destructor does in each round. */
enum plan { SET_IN_BODY, SET_IN_DESTRUCTOR, CLEARED_IN_BODY, QUIET, QUIET_FIRST };

struct state {
    enum plan plan;
    int round;
};

static void key_destructor(void *value) {
    struct state *st = value;
    ++st->round;
    switch (st->plan) {
    case SET_IN_BODY:
        /* Round 1 reads the body's error and sets another; round 2 reads that one. */
        if (st->round == 1) {
            CHECK(last_error_is("llaisysNvidiaMemcpy"));
            CHECK(fail_async_copy() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        } else {
            CHECK(last_error_is("llaisysNvidiaMemcpyAsync"));
        }
        break;
    case SET_IN_DESTRUCTOR:
        if (st->round == 1) {
            CHECK(llaisysNvidiaLastErrorStatus() == 0);
            CHECK(fail_copy() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        }
        CHECK(last_error_is("llaisysNvidiaMemcpy"));
        break;
    case CLEARED_IN_BODY:
        CHECK(llaisysNvidiaLastErrorStatus() == 0);
        CHECK(llaisysNvidiaLastErrorMessage(NULL, 0) == 0);
        break;
    case QUIET:
        return;
    case QUIET_FIRST:
        (void)fail_copy();
        return;
    }
    pthread_mutex_lock(&lock);
    ++rounds_seen;
    pthread_mutex_unlock(&lock);
    if (st->round < 2) {
        pthread_setspecific(key, st); /* runs again in the next round */
    }
}

static void *thread_body(void *arg) {
    struct state *st = arg;
    if (st->plan != SET_IN_DESTRUCTOR && st->plan != QUIET_FIRST) {
        CHECK(fail_copy() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        CHECK(last_error_is("llaisysNvidiaMemcpy"));
    }
    if (st->plan == CLEARED_IN_BODY) {
        llaisysNvidiaClearLastError();
    }
    pthread_setspecific(key, st);
    return NULL;
}

static void run_thread(enum plan plan) {
    pthread_t t;
    struct state st;
    st.plan = plan;
    st.round = 0;
    pthread_create(&t, NULL, thread_body, &st);
    pthread_join(t, NULL);
}

static void at_exit(void) {
    CHECK(last_error_is("llaisysNvidiaMemcpy"));
    if (failures) {
        _exit(1);
    }
    printf("ok: atexit\n");
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    pthread_key_create(&key, key_destructor);
    if (strcmp(mode, "key") == 0) {
        run_thread(SET_IN_BODY);
        CHECK(rounds_seen == 2);
        rounds_seen = 0;
        run_thread(CLEARED_IN_BODY);
        CHECK(rounds_seen == 2);
        if (!failures) {
            printf("ok: key destructors, rounds 1 and 2\n");
        }
    } else if (strcmp(mode, "first") == 0) {
        run_thread(SET_IN_DESTRUCTOR);
        CHECK(rounds_seen == 2);
        if (!failures) {
            printf("ok: first call in a key destructor\n");
        }
    } else if (strcmp(mode, "leak") == 0 && argc > 2) {
        int i, n = atoi(argv[2]);
        size_t before, after;
        for (i = 0; i < 8; ++i) {
            run_thread(QUIET); /* the first threads' one-time allocations */
            run_thread(QUIET_FIRST);
        }
        before = heap_in_use();
        for (i = 0; i < n; ++i) {
            run_thread(QUIET);
            run_thread(QUIET_FIRST);
        }
        after = heap_in_use();
        printf("heap: %zu -> %zu after %d threads\n", before, after, 2 * n);
        CHECK(after < before + 16 * (size_t)n);
        if (!failures) {
            printf("ok: records freed at thread exit\n");
        }
    } else if (strcmp(mode, "atexit") == 0) {
        CHECK(fail_copy() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
        atexit(at_exit);
    } else {
        fprintf(stderr, "usage: %s key|first|leak N|atexit\n", argv[0]);
        return 2;
    }
    return failures ? 1 : 0;
}

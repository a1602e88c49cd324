/* fork() while 8 threads are inside llaisys-nvidia (no driver needed):
 *   lifecycle_fork N exit|_exit
 * forks N children while the threads swap the error handler, destroy NULL streams, free NULL,
 * read the device count and make failing calls. Each child makes a few calls, checks what the
 * header promises a forked child (README "Lifecycle and process rules") and exits with exit()
 * or _exit(); a child still running after 3 s counts as hung and is killed.
 * A child forked before the library's first use must work as any process.
 * Prints "hung: H", "failed: F" and "ok: N children" when none hung or failed. */
#define _DEFAULT_SOURCE
#include "llaisys_runtime.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const LlaisysRuntimeAPI *api;
static int stop = 0;
static int parent_calls = 0;

static void quiet(const llaisysNvidiaError *e, void *u) {
    (void)e;
    __atomic_add_fetch((int *)u, 1, __ATOMIC_RELAXED);
}

static void *busy(void *arg) {
    long id = (long)arg;
    void *p = NULL;
    char a[64] = {0}, b[64];
    char msg[128];
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        switch (id % 4) {
        case 0:
            llaisysNvidiaSetErrorHandler(quiet, &parent_calls);
            break;
        case 1:
            api->destroy_stream(NULL);
            api->free_device(NULL);
            break;
        case 2:
            api->get_device_count();
            llaisysNvidiaLastErrorMessage(msg, sizeof msg);
            break;
        default:
            api->create_stream();
            api->memcpy_sync(b, a, sizeof a, (llaisysMemcpyKind_t)7);
            llaisysNvidiaMallocHost(&p, 64);
            break;
        }
    }
    return NULL;
}

static int child_seen = 0;
static int child_status = 0, child_cuda = 0;
static void child_handler(const llaisysNvidiaError *e, void *u) {
    (void)u;
    ++child_seen;
    child_status = e->status;
    child_cuda = e->cuda_error;
}

/* What a forked child may do; returns the number of broken promises. */
static int child_checks(void) {
    int bad = 0;
    char msg[512];
    llaisysStream_t s = (llaisysStream_t)&msg;
    char a[16] = "abc", b[16] = {0};
    void *p = (void *)&msg;
    llaisysNvidiaErrorHandler h = NULL;
    void *ud = NULL;

    /* The handler functions and the last error work. */
    llaisysNvidiaSetErrorHandler(child_handler, &child_seen);
    llaisysNvidiaGetErrorHandler(&h, &ud);
    bad += h != child_handler || ud != &child_seen;
    llaisysNvidiaClearLastError();
    bad += llaisysNvidiaLastErrorStatus() != 0;
    /* Everything else is refused with CUDA's own answer for CUDA after fork. */
    bad += api->get_device_count() != 0;
    bad += llaisysNvidiaLastErrorStatus() != LLAISYS_NVIDIA_ERROR_CUDA;
    bad += llaisysNvidiaLastCudaError() != 3;
    llaisysNvidiaLastErrorMessage(msg, sizeof msg);
    bad += strstr(msg, "fork") == NULL;
    bad += child_seen != 0; /* get_device_count never calls the handler */
    bad += api->create_stream() != NULL;
    bad += child_seen != 1 || child_status != LLAISYS_NVIDIA_ERROR_CUDA || child_cuda != 3;
    api->memcpy_sync(b, a, sizeof a, LLAISYS_MEMCPY_H2H);
    bad += child_seen != 2 || b[0] != 0;
    /* Refused before the call's body, and the pointer out-parameters hold NULL. */
    s = (void *)0x5eed;
    p = (void *)0x5eed;
    bad += llaisysNvidiaStreamCreate(&s, 0, 0) != LLAISYS_NVIDIA_ERROR_CUDA;
    bad += s != NULL;
    bad += llaisysNvidiaMallocHost(&p, 64) != LLAISYS_NVIDIA_ERROR_CUDA;
    bad += p != NULL;
    bad += llaisysNvidiaLastCudaError() != 3;
    bad += child_seen != 2; /* the status API never calls the handler */
    llaisysNvidiaSetErrorHandler(NULL, NULL);
    if (bad) {
        fprintf(stderr, "child %d: %d checks failed (last message: %s)\n", (int)getpid(), bad, msg);
    }
    return bad;
}

static void sleep_ms(long ms) {
    struct timespec t;
    t.tv_sec = ms / 1000;
    t.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    int use_exit = argc > 2 && strcmp(argv[2], "exit") == 0;
    int hung = 0, failed = 0, i;
    long t;
    pthread_t threads[8];
    api = llaisysNvidiaGetRuntimeAPI();
    llaisysNvidiaSetErrorHandler(quiet, &parent_calls);
    {
        /* A child forked before the library's first use is an ordinary process. */
        int status = 0;
        pid_t pid = fork();
        if (pid == 0) {
            int fresh = api->get_device_count() == 0 && llaisysNvidiaLastCudaError() == 35;
            _exit(fresh ? 0 : 1);
        }
        waitpid(pid, &status, 0);
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "a child forked before the first use was refused\n");
            ++failed;
        }
    }
    for (t = 0; t < 8; ++t) {
        pthread_create(&threads[t], NULL, busy, (void *)t);
    }
    sleep_ms(50);
    for (i = 0; i < n; ++i) {
        int status = 0, waited = 0;
        pid_t pid = fork();
        if (pid == 0) {
            int bad = child_checks();
            if (use_exit) {
                exit(bad ? 1 : 0);
            }
            _exit(bad ? 1 : 0);
        }
        while (waitpid(pid, &status, WNOHANG) == 0) {
            if (++waited > 3000) { /* 3 s */
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                ++hung;
                break;
            }
            sleep_ms(1);
        }
        if (waited <= 3000 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            ++failed;
        }
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (t = 0; t < 8; ++t) {
        pthread_join(threads[t], NULL);
    }
    printf("hung: %d\nfailed: %d\n", hung, failed);
    if (hung || failed) {
        return 1;
    }
    printf("ok: %d children\n", n);
    return 0;
}

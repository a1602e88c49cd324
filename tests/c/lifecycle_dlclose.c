/* dlopen -> calls that leave a last error on two threads -> dlclose, repeated, then the threads
 * exit and the process forks (no driver needed):
 *   lifecycle_dlclose PATH_TO_CDYLIB
 * The last-error key's destructor and the fork handlers are the library's code: after the
 * library is unloaded neither may run (a thread exiting, or a fork, would jump into unmapped
 * code). Prints "unloaded: yes|no" and "ok: N cycles". */
#define _DEFAULT_SOURCE
#include "llaisys_runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef const struct LlaisysRuntimeAPI *(*get_api_fn)(void);
typedef int (*last_fn)(void);

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int phase = 0; /* 1: called in, 2: may exit */
static get_api_fn get_api;

static void *caller(void *arg) {
    (void)arg;
    get_api()->get_device_count(); /* leaves the reason as this thread's last error */
    pthread_mutex_lock(&m);
    ++phase;
    pthread_cond_broadcast(&c);
    while (phase < 100) {
        pthread_cond_wait(&c, &m);
    }
    pthread_mutex_unlock(&m);
    return NULL; /* exits after the library is unloaded */
}

int main(int argc, char **argv) {
    int cycles = 0, unloaded = 0, status = 0;
    pthread_t t[2];
    pid_t pid;
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_CDYLIB\n", argv[0]);
        return 2;
    }
    for (cycles = 0; cycles < 3; ++cycles) {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        last_fn last;
        if (!lib) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        get_api = (get_api_fn)(size_t)dlsym(lib, "llaisysNvidiaGetRuntimeAPI");
        last = (last_fn)(size_t)dlsym(lib, "llaisysNvidiaLastCudaError");
        if (!get_api || !last) {
            fprintf(stderr, "dlsym failed\n");
            return 1;
        }
        if (get_api()->get_device_count() != 0 || last() != 35) {
            fprintf(stderr, "unexpected answers before dlclose\n");
            return 1;
        }
        if (cycles == 2) {
            phase = 0;
            pthread_create(&t[0], NULL, caller, NULL);
            pthread_create(&t[1], NULL, caller, NULL);
            pthread_mutex_lock(&m);
            while (phase < 2) {
                pthread_cond_wait(&c, &m);
            }
            pthread_mutex_unlock(&m);
        }
        dlclose(lib);
    }
    /* Unloaded if a fresh RTLD_NOLOAD finds nothing. */
    {
        void *still = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
        unloaded = still == NULL;
        if (still) {
            dlclose(still);
        }
    }
    pthread_mutex_lock(&m);
    phase = 100;
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    pid = fork();
    if (pid == 0) {
        _exit(0);
    }
    waitpid(pid, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fprintf(stderr, "the child of a fork after dlclose failed\n");
        return 1;
    }
    printf("unloaded: %s\nok: %d cycles\n", unloaded ? "yes" : "no", cycles);
    return 0;
}

/* Calls into llaisys-nvidia at the end of a thread's and of the process's life (no driver):
 *   lifecycle_exit key      from a pthread key destructor of a thread that called us before
 *   lifecycle_exit atexit   from an atexit handler, after main called us
 * In both, the thread's Rust thread-local state is destroyed before the call (glibc runs those
 * destructors first). Exit status 0 and "ok: <context>" when every call behaved. */
#define _POSIX_C_SOURCE 200809L
#include "lifecycle_battery.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_key_t key;

static void key_destructor(void *value) {
    (void)value;
    battery("pthread key destructor");
}

static void *thread_main(void *arg) {
    (void)arg;
    /* The thread's first call into the library sets up its thread-local state. */
    llaisysNvidiaGetRuntimeAPI()->get_device_count();
    pthread_setspecific(key, &key);
    return NULL;
}

static void at_exit(void) {
    battery("atexit handler");
    if (battery_failures) {
        _exit(1);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "key") == 0) {
        pthread_t t;
        pthread_key_create(&key, key_destructor);
        pthread_create(&t, NULL, thread_main, NULL);
        pthread_join(t, NULL);
        return battery_failures ? 1 : 0;
    }
    if (strcmp(mode, "atexit") == 0) {
        llaisysNvidiaGetRuntimeAPI()->get_device_count();
        atexit(at_exit);
        return 0;
    }
    fprintf(stderr, "usage: %s key|atexit\n", argv[0]);
    return 2;
}

/*
 * nccl_allreduce.c: N processes, one per GPU, all-reduce a tensor of their own values through
 * llaisys-nvidia's communicator and check the sum.
 *
 *   nccl_allreduce N                  starts N processes (rank 0 is this one, ranks 1..N-1 are
 *                                     copies of this program), passing the unique id through a
 *                                     file; exits 0 when every rank found the right sum
 *   nccl_allreduce RANK N IDFILE      one rank of N, for starting the ranks yourself (any way:
 *                                     a shell loop, a job launcher, several machines sharing
 *                                     IDFILE): rank 0 writes the unique id to IDFILE, the others
 *                                     wait for it (up to 120 s) and read it
 *
 * Rank r uses device r % device_count, fills 1 Mi floats with r + 1 + (i % 7), all-reduces
 * them (sum, in place) on a stream of ours, waits with llaisysNvidiaCommSynchronize (bounded by
 * the communicator's timeout) and checks every element against N(N+1)/2 + N(i % 7).
 *
 * Build (C99):  cc -std=c99 -I csrc examples/nccl_allreduce.c -L DIR -lllaisys_nvidia -Wl,-rpath,DIR
 * NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is set unless the environment sets it.
 */
#define _XOPEN_SOURCE 700
#include "llaisys_runtime.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define COUNT (1u << 20)

static int g_rank = -1;
/* In the launcher: the other ranks, stopped when rank 0 fails. */
static pid_t *g_children = NULL;
static int g_nranks = 0;

/* Prints the last error of a failed call and exits. */
static void check(int status, const char *what) {
    char msg[1024];
    if (status == 0) {
        return;
    }
    llaisysNvidiaLastErrorMessage(msg, sizeof msg);
    fprintf(stderr, "rank %d: %s failed: %s (status %d, cudaError %d, ncclResult %d): %s\n", g_rank,
            what, llaisysNvidiaStatusName(status), status, llaisysNvidiaLastCudaError(),
            llaisysNvidiaLastNcclError(), msg);
    if (g_children != NULL) {
        int r;
        for (r = 1; r < g_nranks; r++) {
            if (g_children[r] > 0) {
                kill(g_children[r], SIGTERM);
            }
        }
    }
    exit(1);
}

static void sleep_ms(long ms) {
    struct timespec t;
    t.tv_sec = ms / 1000;
    t.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&t, NULL);
}

/* Rank 0: writes the id atomically (a temporary file renamed into place). */
static void write_id(const char *path, const llaisysNvidiaCommId *id) {
    char tmp[4096];
    FILE *f;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (f == NULL || fwrite(id->internal, 1, sizeof id->internal, f) != sizeof id->internal || fclose(f) != 0) {
        fprintf(stderr, "rank 0: cannot write %s: %s\n", tmp, strerror(errno));
        exit(1);
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "rank 0: cannot rename %s to %s: %s\n", tmp, path, strerror(errno));
        exit(1);
    }
}

/* Other ranks: wait for the file, then read it. */
static void read_id(const char *path, llaisysNvidiaCommId *id) {
    int waited_ms = 0;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f != NULL) {
            size_t n = fread(id->internal, 1, sizeof id->internal, f);
            fclose(f);
            if (n == sizeof id->internal) {
                return;
            }
        }
        if (waited_ms >= 120000) {
            fprintf(stderr, "rank %d: no unique id in %s after 120 s\n", g_rank, path);
            exit(1);
        }
        sleep_ms(10);
        waited_ms += 10;
    }
}

static int run_rank(int rank, int nranks, const char *idfile) {
    const struct LlaisysRuntimeAPI *rt = llaisysNvidiaGetRuntimeAPI();
    llaisysNvidiaCommId id;
    llaisysNvidiaComm_t comm = NULL;
    llaisysStream_t stream = NULL;
    int devices = 0, device, size = 0, r = -1;
    size_t i, bad = 0;
    float *host, *dev;
    double ms = 0;

    g_rank = rank;
    if (rank == 0) {
        check(llaisysNvidiaCommGetUniqueId(&id), "llaisysNvidiaCommGetUniqueId");
        write_id(idfile, &id);
    } else {
        read_id(idfile, &id);
    }
    check(llaisysNvidiaDeviceCount(&devices), "llaisysNvidiaDeviceCount");
    device = rank % devices;
    check(llaisysNvidiaInitDevice(device, &ms), "llaisysNvidiaInitDevice");
    check(llaisysNvidiaCommInitRank(&comm, nranks, &id, rank), "llaisysNvidiaCommInitRank");
    check(llaisysNvidiaCommRank(comm, &r), "llaisysNvidiaCommRank");
    check(llaisysNvidiaCommSize(comm, &size), "llaisysNvidiaCommSize");
    if (r != rank || size != nranks) {
        fprintf(stderr, "rank %d: the communicator says rank %d of %d\n", rank, r, size);
        return 1;
    }
    check(llaisysNvidiaStreamCreate(&stream, 0, 0), "llaisysNvidiaStreamCreate");
    host = (float *)rt->malloc_host(COUNT * sizeof(float));
    dev = (float *)rt->malloc_device(COUNT * sizeof(float));
    if (host == NULL || dev == NULL) {
        check(llaisysNvidiaLastErrorStatus(), "malloc_host/malloc_device");
    }
    for (i = 0; i < COUNT; i++) {
        host[i] = (float)(rank + 1) + (float)(i % 7);
    }
    check(llaisysNvidiaMemcpyAsync(dev, host, COUNT * sizeof(float), LLAISYS_MEMCPY_H2D, stream), "memcpy H2D");
    check(llaisysNvidiaAllReduce(dev, dev, COUNT, 13 /* LLAISYS_DTYPE_F32 */, LLAISYS_NVIDIA_REDUCE_SUM, comm, stream),
          "llaisysNvidiaAllReduce");
    check(llaisysNvidiaMemcpyAsync(host, dev, COUNT * sizeof(float), LLAISYS_MEMCPY_D2H, stream), "memcpy D2H");
    check(llaisysNvidiaCommSynchronize(comm, stream, -1), "llaisysNvidiaCommSynchronize");
    for (i = 0; i < COUNT; i++) {
        float want = (float)(nranks * (nranks + 1) / 2) + (float)nranks * (float)(i % 7);
        if (host[i] != want) {
            if (bad < 5) {
                fprintf(stderr, "rank %d: element %lu is %g, want %g\n", rank, (unsigned long)i, host[i], want);
            }
            bad++;
        }
    }
    rt->free_device(dev);
    rt->free_host(host);
    check(llaisysNvidiaStreamDestroy(stream), "llaisysNvidiaStreamDestroy");
    check(llaisysNvidiaCommDestroy(comm), "llaisysNvidiaCommDestroy");
    if (bad != 0) {
        fprintf(stderr, "rank %d of %d: %lu of %u elements wrong\n", rank, nranks, (unsigned long)bad, COUNT);
        return 1;
    }
    printf("rank %d of %d (device %d): all-reduce of %u floats: sum correct\n", rank, nranks, device, COUNT);
    return 0;
}

int main(int argc, char **argv) {
    int nranks, rank, failed = 0;
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    if (argc == 4) {
        return run_rank(atoi(argv[1]), atoi(argv[2]), argv[3]);
    }
    if (argc != 2 || (nranks = atoi(argv[1])) < 1) {
        fprintf(stderr, "usage: %s N | %s RANK N IDFILE\n", argv[0], argv[0]);
        return 2;
    }
    {
        char idfile[] = "/tmp/llaisys-nccl-id-XXXXXX";
        char nbuf[16], rbuf[16];
        pid_t *pids = (pid_t *)calloc((size_t)nranks, sizeof(pid_t));
        int fd = mkstemp(idfile);
        if (fd < 0 || pids == NULL) {
            fprintf(stderr, "cannot make a temporary file: %s\n", strerror(errno));
            return 1;
        }
        close(fd);
        unlink(idfile); /* rank 0 creates it when the id exists */
        snprintf(nbuf, sizeof nbuf, "%d", nranks);
        g_children = pids;
        g_nranks = nranks;
        for (rank = 1; rank < nranks; rank++) {
            pids[rank] = fork();
            if (pids[rank] == 0) {
                snprintf(rbuf, sizeof rbuf, "%d", rank);
                execl(argv[0], argv[0], rbuf, nbuf, idfile, (char *)NULL);
                fprintf(stderr, "cannot start %s: %s\n", argv[0], strerror(errno));
                _exit(127);
            }
        }
        failed |= run_rank(0, nranks, idfile) != 0;
        for (rank = 1; rank < nranks; rank++) {
            int st = 0;
            if (pids[rank] > 0 && waitpid(pids[rank], &st, 0) == pids[rank]) {
                failed |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            } else {
                failed = 1;
            }
        }
        unlink(idfile);
        free(pids);
        printf("%s: %d rank(s)\n", failed ? "FAILED" : "all ranks correct", nranks);
        return failed;
    }
}

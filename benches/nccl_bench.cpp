// nccl_bench.cpp: the same all-reduce and all-gather through llaisys-nvidia's communicator and
// through raw NCCL, in one process, on the same buffers and streams, from 8 B to 1 GiB, with bus
// bandwidth computed as NVIDIA's nccl-tests do:
//   all-reduce: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n
//   all-gather: algbw = (total received bytes) / time, busbw = algbw * (n - 1) / n
// One process drives every GPU (a communicator per device, made at once; with several GPUs each
// round is one group). On one GPU busbw is 0 by definition: the table then measures our
// overhead per call (time ours - time raw).
//
// Raw NCCL is the very library our communicator loaded (llaisysNvidiaNcclLibraryPath, dlopen'd
// again: the same handle), called directly. Time per call: wall clock over `iters` calls ended by
// synchronizing every stream, median of 5 rounds that alternate which path goes first.
//
//   nccl_bench LIBLLAISYS_NVIDIA.so [--max-bytes N] [--budget-s S] [--ops allreduce,allgather]
// Prints a Markdown table to stdout, progress to stderr; exits 1 on a data check failure.
// Built on the GPU machine by scripts/gpu-nccl.sh: nvcc -std=c++17 -I <nccl include> ... -ldl.
#include <nccl.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

using bench::median;
using bench::now_s;

using Comm = void *;
using Stream = void *;

struct Ours {
    int (*device_count)(int *);
    int (*set_device)(int);
    int (*stream_create)(Stream *, unsigned, int);
    int (*stream_sync)(Stream);
    int (*malloc_device)(void **, size_t);
    int (*memcpy)(void *, const void *, size_t, int);
    int (*init_all)(Comm *, int, const int *);
    int (*destroy)(Comm);
    int (*all_reduce)(const void *, void *, size_t, int, int, Comm, Stream);
    int (*all_gather)(const void *, void *, size_t, int, Comm, Stream);
    int (*group_start)();
    int (*group_end)();
    int (*library_path)(char *, size_t, size_t *);
    int (*nccl_version)(int *);
    size_t (*last_message)(char *, size_t);
};

struct Raw {
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)();
    ncclResult_t (*group_end)();
    const char *(*error_string)(ncclResult_t);
};

Ours ours;
Raw raw;

[[noreturn]] void die(const char *what) {
    char msg[2048] = {0};
    if (ours.last_message) ours.last_message(msg, sizeof msg);
    std::fprintf(stderr, "nccl_bench: %s %s\n", what, msg);
    std::exit(2);
}

void *open_library(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        std::fprintf(stderr, "nccl_bench: %s\n", dlerror());
        std::exit(2);
    }
    return h;
}

template <class F> void sym(void *h, const char *name, F *&f) {
    f = reinterpret_cast<F *>(dlsym(h, name));
    if (!f) {
        std::fprintf(stderr, "nccl_bench: %s lacks %s\n", h ? "library" : "?", name);
        std::exit(2);
    }
}

void check(int status, const char *what) {
    if (status != 0) die(what);
}

void check_raw(ncclResult_t r, const char *what) {
    if (r != ncclSuccess) {
        std::fprintf(stderr, "nccl_bench: %s: %s\n", what, raw.error_string(r));
        std::exit(2);
    }
}

struct Setup {
    int n = 1;
    std::vector<Comm> comms;
    std::vector<ncclComm_t> raw_comms;
    std::vector<Stream> streams;
    std::vector<void *> send, recv;
};

enum Op { ALLREDUCE, ALLGATHER };

// One call of `op` with `count` floats per rank on every device (one group when n > 1).
void launch(Setup &s, Op op, size_t count, bool use_ours) {
    bool grouped = s.n > 1;
    if (grouped) {
        if (use_ours) check(ours.group_start(), "group start");
        else check_raw(raw.group_start(), "group start");
    }
    for (int d = 0; d < s.n; d++) {
        if (use_ours) {
            int st = op == ALLREDUCE ? ours.all_reduce(s.send[d], s.recv[d], count, 13, 0, s.comms[d], s.streams[d])
                                     : ours.all_gather(s.send[d], s.recv[d], count, 13, s.comms[d], s.streams[d]);
            check(st, "collective");
        } else {
            auto st = op == ALLREDUCE
                          ? raw.all_reduce(s.send[d], s.recv[d], count, ncclFloat32, ncclSum, s.raw_comms[d],
                                           static_cast<cudaStream_t>(s.streams[d]))
                          : raw.all_gather(s.send[d], s.recv[d], count, ncclFloat32, s.raw_comms[d],
                                           static_cast<cudaStream_t>(s.streams[d]));
            check_raw(st, "collective");
        }
    }
    if (grouped) {
        if (use_ours) check(ours.group_end(), "group end");
        else check_raw(raw.group_end(), "group end");
    }
}

void sync_all(Setup &s) {
    for (int d = 0; d < s.n; d++) check(ours.stream_sync(s.streams[d]), "stream sync");
}

double time_per_call(Setup &s, Op op, size_t count, bool use_ours, int iters) {
    for (int i = 0; i < 2; i++) launch(s, op, count, use_ours);
    sync_all(s);
    double t0 = now_s();
    for (int i = 0; i < iters; i++) launch(s, op, count, use_ours);
    sync_all(s);
    return (now_s() - t0) / iters;
}

// All-reduce of ones (sum = n) and all-gather of rank ids through ours, checked on the host.
void data_check(Setup &s, size_t count) {
    std::vector<float> host(count * s.n);
    for (int d = 0; d < s.n; d++) {
        std::fill(host.begin(), host.begin() + count, 1.0f);
        check(ours.memcpy(s.send[d], host.data(), count * 4, 1), "H2D");
    }
    launch(s, ALLREDUCE, count, true);
    sync_all(s);
    for (int d = 0; d < s.n; d++) {
        check(ours.memcpy(host.data(), s.recv[d], count * 4, 2), "D2H");
        for (size_t i = 0; i < count; i++)
            if (host[i] != static_cast<float>(s.n)) {
                std::fprintf(stderr, "nccl_bench: DATA CHECK FAILED: all-reduce on device %d element %zu = %g\n", d, i,
                             host[i]);
                std::exit(1);
            }
    }
    for (int d = 0; d < s.n; d++) {
        std::fill(host.begin(), host.begin() + count, static_cast<float>(d));
        check(ours.memcpy(s.send[d], host.data(), count * 4, 1), "H2D");
    }
    launch(s, ALLGATHER, count, true);
    sync_all(s);
    for (int d = 0; d < s.n; d++) {
        check(ours.memcpy(host.data(), s.recv[d], count * 4 * s.n, 2), "D2H");
        for (size_t i = 0; i < count * s.n; i++)
            if (host[i] != static_cast<float>(i / count)) {
                std::fprintf(stderr, "nccl_bench: DATA CHECK FAILED: all-gather on device %d element %zu = %g\n", d, i,
                             host[i]);
                std::exit(1);
            }
    }
}

}  // namespace

int main(int argc, char **argv) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s LIBLLAISYS_NVIDIA.so [--max-bytes N] [--budget-s S] [--ops allreduce,allgather]\n",
                     argv[0]);
        return 2;
    }
    size_t max_bytes = size_t(1) << 30;
    double budget = 240;
    std::string ops = "allreduce,allgather";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--max-bytes")) max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
        else if (!std::strcmp(argv[i], "--budget-s")) budget = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--ops")) ops = argv[i + 1];
    }
    void *lib = open_library(argv[1]);
    sym(lib, "llaisysNvidiaDeviceCount", ours.device_count);
    sym(lib, "llaisysNvidiaSetDevice", ours.set_device);
    sym(lib, "llaisysNvidiaStreamCreate", ours.stream_create);
    sym(lib, "llaisysNvidiaStreamSynchronize", ours.stream_sync);
    sym(lib, "llaisysNvidiaMallocDevice", ours.malloc_device);
    sym(lib, "llaisysNvidiaMemcpy", ours.memcpy);
    sym(lib, "llaisysNvidiaCommInitAll", ours.init_all);
    sym(lib, "llaisysNvidiaCommDestroy", ours.destroy);
    sym(lib, "llaisysNvidiaAllReduce", ours.all_reduce);
    sym(lib, "llaisysNvidiaAllGather", ours.all_gather);
    sym(lib, "llaisysNvidiaGroupStart", ours.group_start);
    sym(lib, "llaisysNvidiaGroupEnd", ours.group_end);
    sym(lib, "llaisysNvidiaNcclLibraryPath", ours.library_path);
    sym(lib, "llaisysNvidiaNcclGetVersion", ours.nccl_version);
    sym(lib, "llaisysNvidiaLastErrorMessage", ours.last_message);

    Setup s;
    check(ours.device_count(&s.n), "device count");
    int version = 0;
    check(ours.nccl_version(&version), "NCCL version");
    char path[4096];
    size_t len = 0;
    check(ours.library_path(path, sizeof path, &len), "NCCL path");
    void *nccl = open_library(path);
    sym(nccl, "ncclCommInitAll", raw.init_all);
    sym(nccl, "ncclCommDestroy", raw.destroy);
    sym(nccl, "ncclAllReduce", raw.all_reduce);
    sym(nccl, "ncclAllGather", raw.all_gather);
    sym(nccl, "ncclGroupStart", raw.group_start);
    sym(nccl, "ncclGroupEnd", raw.group_end);
    sym(nccl, "ncclGetErrorString", raw.error_string);

    s.comms.resize(s.n);
    s.raw_comms.resize(s.n);
    check(ours.init_all(s.comms.data(), s.n, nullptr), "llaisysNvidiaCommInitAll");
    check_raw(raw.init_all(s.raw_comms.data(), s.n, nullptr), "ncclCommInitAll");
    for (int d = 0; d < s.n; d++) {
        check(ours.set_device(d), "set device");
        Stream st = nullptr;
        check(ours.stream_create(&st, 0, 0), "stream");
        s.streams.push_back(st);
        void *a = nullptr, *b = nullptr;
        check(ours.malloc_device(&a, max_bytes), "malloc send");
        check(ours.malloc_device(&b, max_bytes * s.n), "malloc recv");
        s.send.push_back(a);
        s.recv.push_back(b);
    }
    check(ours.set_device(0), "set device");
    data_check(s, 1 << 20);
    std::fprintf(stderr, "nccl_bench: %d GPU(s), NCCL %d from %s, data checks passed\n", s.n, version, path);

    std::printf("## Communicator: llaisys-nvidia vs raw NCCL, %d GPU(s), one process\n\n", s.n);
    std::printf("NCCL %d (%s), float32, sum; time = wall clock per call over a loop ended by stream "
                "synchronization, median of 5 rounds; busbw as nccl-tests (all-reduce x 2(n-1)/n, all-gather x (n-1)/n).\n\n",
                version, path);
    std::printf("| op | bytes | ours us | raw us | ours - raw us | ours algbw GB/s | raw algbw GB/s | ours busbw GB/s | "
                "raw busbw GB/s | ours/raw busbw |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double start = now_s();
    bool out_of_time = false;
    for (Op op : {ALLREDUCE, ALLGATHER}) {
        if (ops.find(op == ALLREDUCE ? "allreduce" : "allgather") == std::string::npos) continue;
        for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
            if (now_s() - start > budget) {
                out_of_time = true;
                break;
            }
            size_t count = bytes / 4 / (op == ALLGATHER ? s.n : 1);
            if (count == 0) continue;
            double probe = time_per_call(s, op, count, false, 3);
            int iters = static_cast<int>(std::min(2000.0, std::max(5.0, 0.02 / std::max(probe, 1e-7))));
            std::vector<double> t_ours, t_raw;
            for (int round = 0; round < 5; round++) {
                bool ours_first = round % 2 == 0;
                double a = time_per_call(s, op, count, ours_first, iters);
                double b = time_per_call(s, op, count, !ours_first, iters);
                (ours_first ? t_ours : t_raw).push_back(a);
                (ours_first ? t_raw : t_ours).push_back(b);
            }
            double to = median(t_ours), tr = median(t_raw);
            double total = static_cast<double>(op == ALLGATHER ? count * 4 * s.n : count * 4);
            double factor = op == ALLREDUCE ? 2.0 * (s.n - 1) / s.n : static_cast<double>(s.n - 1) / s.n;
            double ao = total / to / 1e9, ar = total / tr / 1e9;
            double bo = ao * factor, br = ar * factor;
            std::printf("| %s | %.0f | %.2f | %.2f | %+.2f | %.2f | %.2f | %.2f | %.2f | %s |\n",
                        op == ALLREDUCE ? "all-reduce" : "all-gather", total, to * 1e6, tr * 1e6, (to - tr) * 1e6, ao,
                        ar, bo, br, s.n > 1 ? std::to_string(bo / br).substr(0, 5).c_str() : "n/a (1 GPU)");
            std::fflush(stdout);
            std::fprintf(stderr, "nccl_bench: %s %zu B: ours %.2f us, raw %.2f us (%d iters)\n",
                         op == ALLREDUCE ? "all-reduce" : "all-gather", static_cast<size_t>(total), to * 1e6, tr * 1e6,
                         iters);
        }
    }
    if (out_of_time) std::printf("\n(stopped at the %.0f s budget; larger sizes not measured)\n", budget);
    for (int d = 0; d < s.n; d++) {
        check(ours.destroy(s.comms[d]), "destroy");
        check_raw(raw.destroy(s.raw_comms[d]), "raw destroy");
    }
    return 0;
}

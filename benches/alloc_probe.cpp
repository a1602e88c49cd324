// alloc_probe: what cudaMalloc costs by how it is asked, with raw cudart (no library): COUNT
// blocks of SIZE bytes (default 84 of 27.5 MB, the MLP matrices of the weights benchmark's
// model) from COUNT cudaMallocs, from COUNT/4 of four blocks each, and from one; then the same
// COUNT cudaMallocs on a second thread while the first copies 8 MiB chunks H2D from pinned
// memory, against those copies alone. The first measures what the device cache's large blocks
// pay per cudaMalloc (docs/caches.md); the last, what a cudaMalloc on another thread costs the
// copies beside it.
// Build and run on the GPU machine: nvcc -O2 -std=c++17 -o alloc_probe gpu-stage/benches/alloc_probe.cpp
// && ./alloc_probe [--size BYTES] [--count N]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "alloc_probe: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// Seconds for `calls` cudaMallocs of `bytes` each (the blocks freed afterwards, not timed).
double mallocs(size_t bytes, int calls) {
    std::vector<void *> p(static_cast<size_t>(calls));
    double t0 = now_s();
    for (auto &q : p) check(cudaMalloc(&q, bytes), "cudaMalloc");
    double t = now_s() - t0;
    for (void *q : p) check(cudaFree(q), "cudaFree");
    return t;
}

// GB/s of `reps` 8 MiB H2D copies from pinned memory, each waited for, while `beside` runs.
template <class F> double copies(int reps, F beside) {
    const size_t chunk = 8 << 20;
    void *h = nullptr, *d = nullptr;
    check(cudaMallocHost(&h, chunk), "cudaMallocHost");
    check(cudaMalloc(&d, chunk), "cudaMalloc");
    std::memset(h, 1, chunk);
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaMemcpyAsync(d, h, chunk, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    std::atomic<bool> go{false};
    std::thread other([&] {
        check(cudaSetDevice(0), "cudaSetDevice");
        while (!go.load()) std::this_thread::yield();
        beside();
    });
    double t0 = now_s();
    go = true;
    for (int r = 0; r < reps; ++r) {
        check(cudaMemcpyAsync(d, h, chunk, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    }
    double t = now_s() - t0;
    other.join();
    check(cudaStreamDestroy(s), "cudaStreamDestroy");
    check(cudaFree(d), "cudaFree");
    check(cudaFreeHost(h), "cudaFreeHost");
    return static_cast<double>(chunk) * reps / t / 1e9;
}

}  // namespace

int main(int argc, char **argv) {
    size_t size = 8960ull * 1536 * 2;
    int count = 84;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "--size" || a == "--count") && i + 1 < argc) {
            long long v = std::atoll(argv[++i]);
            if (v <= 0) {
                std::fprintf(stderr, "alloc_probe: %s must be positive\n", a.c_str());
                return 2;
            }
            if (a == "--size") size = static_cast<size_t>(v);
            else count = static_cast<int>(std::max(4LL, v));
        } else {
            std::fprintf(stderr, "usage: alloc_probe [--size BYTES] [--count N]\n");
            return 2;
        }
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        std::fprintf(stderr, "alloc_probe: no CUDA device available; run it on the GPU machine\n");
        return 3;
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaFree(nullptr), "cudaFree");
    mallocs(size, 4);  // warm-up
    std::printf("| how | cudaMalloc calls | us per call | us per block |\n|---|--:|--:|--:|\n");
    struct Way {
        const char *what;
        int blocks_per_call;
    } ways[] = {{"one block each", 1}, {"four blocks each", 4}, {"all in one", count}};
    for (const Way &w : ways) {
        int calls = count / w.blocks_per_call;
        double t = mallocs(size * static_cast<size_t>(w.blocks_per_call), calls);
        std::printf("| %d x %zu B, %s | %d | %.1f | %.1f |\n", count, size, w.what, calls, t / calls * 1e6,
                    t / (calls * w.blocks_per_call) * 1e6);
    }
    const int reps = 400;
    double alone = copies(reps, [] {});
    double with = copies(reps, [&] { mallocs(size, count); });
    std::printf("\n%d x 8 MiB H2D pinned copies, each waited for: %.1f GB/s alone, %.1f GB/s with %d cudaMallocs of "
                "%zu B on another thread\n",
                reps, alone, with, count, size);
    return 0;
}

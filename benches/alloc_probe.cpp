// alloc_probe: what cudaMalloc costs by how it is asked, with raw cudart (no library): COUNT
// blocks of SIZE bytes (default 84 of 27.5 MB, the MLP matrices of the weights benchmark's
// model) from COUNT cudaMallocs, from COUNT/4 of four blocks each, and from one; then the same
// COUNT cudaMallocs on a second thread while the first copies 8 MiB chunks H2D from pinned
// memory, against those copies alone. The first measures what the device cache's large blocks
// pay per cudaMalloc (docs/caches.md); the last, what a cudaMalloc on another thread costs the
// copies beside it. Then four pinned 8 MiB host buffers, as a set of the library's staging
// buffers, made five ways, five times each in turn: cudaHostAlloc one after another and on a
// thread each; anonymous mappings asked for transparent huge pages (MADV_HUGEPAGE) and touched,
// one after another and on a thread each, then cudaHostRegister'ed; the same with 4 KiB pages
// (docs/caches.md).
// Build and run on the GPU machine: nvcc -O2 -std=c++17 -o alloc_probe gpu-stage/benches/alloc_probe.cpp
// && ./alloc_probe [--size BYTES] [--count N]
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
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

// An anonymous mapping of `n` bytes aligned to 2 MiB, asked for huge pages when `huge`, one
// byte per 4 KiB page written; `base` and `mapped` for munmap.
struct Mapped {
    void *base = nullptr, *p = nullptr;
    size_t mapped = 0;
};
Mapped map_touched(size_t n, bool huge) {
    const size_t al = 2 << 20;
    Mapped m;
    m.mapped = n + al;
    m.base = mmap(nullptr, m.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m.base == MAP_FAILED) {
        std::fprintf(stderr, "alloc_probe: mmap of %zu bytes failed\n", m.mapped);
        std::exit(1);
    }
    char *p = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(m.base) + al - 1) & ~static_cast<uintptr_t>(al - 1));
    if (huge) madvise(p, n, MADV_HUGEPAGE);
    for (size_t at = 0; at < n; at += 4096) p[at] = 0;
    m.p = p;
    return m;
}

// Milliseconds to make four pinned 8 MiB buffers way `how` (0-4, as `staging_ways`); the
// buffers are freed afterwards, not timed.
double staging_set(int how) {
    const size_t n = 8 << 20;
    std::vector<void *> h(4, nullptr);
    std::vector<Mapped> m(4);
    auto each = [&](bool threads, auto make) {
        if (!threads) {
            for (int k = 0; k < 4; ++k) make(k);
            return;
        }
        std::vector<std::thread> t;
        for (int k = 0; k < 4; ++k) t.emplace_back([&, k] { make(k); });
        for (auto &x : t) x.join();
    };
    double t0 = now_s();
    if (how <= 1) {
        each(how == 1, [&](int k) { check(cudaHostAlloc(&h[k], n, cudaHostAllocPortable), "cudaHostAlloc"); });
    } else {
        each(how == 3, [&](int k) { m[k] = map_touched(n, how != 4); });
        for (auto &x : m) check(cudaHostRegister(x.p, n, cudaHostRegisterPortable), "cudaHostRegister");
    }
    double t = now_s() - t0;
    for (void *p : h)
        if (p) check(cudaFreeHost(p), "cudaFreeHost");
    for (auto &x : m)
        if (x.p) {
            check(cudaHostUnregister(x.p), "cudaHostUnregister");
            munmap(x.base, x.mapped);
        }
    return t * 1e3;
}

const char *const staging_ways[] = {"cudaHostAlloc, one after another", "cudaHostAlloc, a thread each",
                                    "huge pages touched one after another, then cudaHostRegister",
                                    "huge pages touched on a thread each, then cudaHostRegister",
                                    "4 KiB pages touched one after another, then cudaHostRegister"};

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

    std::printf("\n| four pinned 8 MiB buffers | ms, five runs in turn |\n|---|---|\n");
    std::vector<std::string> runs(5);
    for (int r = 0; r < 5; ++r)
        for (int w = 0; w < 5; ++w) {
            char b[32];
            std::snprintf(b, sizeof b, "%s%.2f", r ? ", " : "", staging_set(w));
            runs[w] += b;
        }
    for (int w = 0; w < 5; ++w) std::printf("| %s | %s |\n", staging_ways[w], runs[w].c_str());
    return 0;
}

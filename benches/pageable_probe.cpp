// pageable_probe: what is the floor for copies between pageable host memory and the device on
// this machine? Raw cudart only (the cudart linked into this program), one device,
// nothing of ours. For H2D and D2H at 1, 4, 16, 64 and 256 MiB:
//   (a) cudaMemcpy from / to pageable memory, as is (what the reference does);
//   (b) cudaMemcpy from / to pinned memory: the link's limit;
//   (c) host memcpy pageable -> pinned (the H2D staging copy) and pinned -> pageable (D2H) with
//       1, 2, 4, 8, 12 threads (already spinning): the host copy's limit;
//   (d) an ideal staged pipeline: K pinned staging buffers of chunk C made beforehand (K = 2, 4),
//       T host threads (4, 8, 12) copying chunk k+1 while the copy engine moves chunk k, for
//       C = 256 KiB .. 8 MiB; threads spinning between copies (hot) or asleep in the kernel and
//       woken (futex) at the start of each copy (cold);
//   (e) what such a pipeline is made of: the first chunk (host time until the first DMA is queued;
//       one chunk's DMA), waking host threads (futex wake until running, measured per thread),
//       handing a job to spinning threads and back, an event record + query, a cudaMemcpyAsync
//       enqueue; making a staging buffer (cudaHostAlloc, or pages touched and registered); and
//       the first chunk of a copy from a file mapping touched for the first time (a model's
//       weights) against the same copy once the mapping is touched;
//   (f) cudaHostRegister + cudaMemcpy + cudaHostUnregister per copy (is registering on the fly
//       ever cheaper?);
//   (g) the host copy and the copy engine at the same time: the host copy's rate while DMAs of
//       other pinned memory keep running, and one DMA's rate while T threads keep copying. A
//       staged pipeline does both at once in its steady state, so it cannot beat the slower of
//       the two (the bound under load), whatever its chunks and staging buffers;
//   (l) with --library PATH (a llaisys runtime table, e.g. our libllaisys_nvidia.so): its
//       memcpy_sync on the same buffers, alternated repetition by repetition with this probe's
//       pipeline (the best (d) configuration of the run, else C=4 MiB, T and K the largest), both
//       with their threads asleep (cold) and right after a copy of the same size (hot); the
//       probe's pipeline also sums its threads' copy time (per-thread rate) to set beside the
//       library's own trace (LLAISYS_NVIDIA_PAGEABLE_TRACE);
//   (r) the tensor round trip (table_bench's: H2D then D2H of the same bytes; an H2D that returns
//       once its source is read, so the D2H's DMAs queue right behind the H2D's on one stream):
//       the link (pinned both ways), the probe's pipelines of (d) back to back that way, hot and
//       cold, and with --library the library's malloc_device + memcpy_sync H2D + memcpy_sync D2H +
//       free_device, cold (3 ms idle first, about table_bench's time between two of one backend's
//       round trips) and hot, alternated with them.
// Host copies (c, d, g) use glibc's memcpy and/or 16-byte non-temporal stores, or memcpy followed by
// CLDEMOTE of the lines written (--stores).
// Markdown on stdout: the best configuration per size and direction first, then every figure.
// Built and run on the GPU machine by `bash gpu-stage/bench.sh --probe` (scripts/gpu-bench.sh):
//   nvcc -O2 -std=c++17 -Icsrc benches/pageable_probe.cpp -o pageable_probe -lpthread -ldl
// Usage: pageable_probe [--quick] [--parts abcdefglr] [--library PATH] [--budget-s S] [--csv FILE]   (--help)
// Exit: 0 measured; 1 a data check failed (the tables still print); 2 bad usage; 3 no CUDA device.
// Clock: steady_clock on the host; every timed copy ends when its data is in place (H2D: the last
// DMA's event has completed; D2H: the last host copy is done). Medians of repetitions, each timed
// on its own after one warm-up run (which is also the data check). GB/s = 1e9 bytes per second.
#include <cuda_runtime_api.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "llaisys_runtime.h"
#include "runtime_table.hpp"

using namespace bench;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

#define PROBE_CUDA(call)                                                                          \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (__builtin_expect(e_ != cudaSuccess, 0))                                               \
            ::bench::die(2, "%s failed: %s (%d): %s", #call, cudaGetErrorName(e_),                \
                         static_cast<int>(e_), cudaGetErrorString(e_));                           \
    } while (0)

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex word is 32 bits");

void futex_wait(std::atomic<uint32_t> *word, uint32_t expected) {
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t> *word) {
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// T host threads that run one job at a time, each its share. Hot: they spin between jobs and
// between copies. Cold: between copies they sleep in the kernel (futex); wake() at the start of a
// copy wakes them (they spin from then on, between its chunks) and sleep() at its end lets them
// sleep again. The main thread only hands out jobs and waits for them.
class Workers {
public:
    using Fn = void (*)(void *ctx, int index, int count);

    Workers(int n, bool hot) : n_(n), hot_(hot), awake_(hot) {
        for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { loop(i); });
        if (!hot) wait_asleep();
    }
    ~Workers() {
        quit_.store(true, std::memory_order_release);
        gen_.fetch_add(1, std::memory_order_release);
        futex_wake_all(&gen_);
        for (auto &t : threads_) t.join();
    }
    Workers(const Workers &) = delete;
    Workers &operator=(const Workers &) = delete;

    int count() const { return n_; }
    bool hot() const { return hot_; }
    // The start of a copy: cold threads are woken and spin until sleep().
    void wake() {
        if (hot_) return;
        awake_.store(true, std::memory_order_release);
        futex_wake_all(&gen_);
    }
    void sleep() {
        if (!hot_) awake_.store(false, std::memory_order_release);
    }
    // Hands fn(ctx, i, T) to every thread; a sleeping pool is woken for it.
    void start(Fn fn, void *ctx) {
        fn_ = fn;
        ctx_ = ctx;
        done_.store(0, std::memory_order_relaxed);
        gen_.fetch_add(1, std::memory_order_release);
        if (!awake_.load(std::memory_order_relaxed)) futex_wake_all(&gen_);
    }
    void wait() const {
        while (done_.load(std::memory_order_acquire) < n_) cpu_relax();
    }
    // Cold pools: until every thread is about to sleep in the kernel, plus 200 us for it to get there.
    void wait_asleep() const {
        while (asleep_.load(std::memory_order_acquire) < n_) cpu_relax();
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, nullptr);
    }

private:
    void loop(int i) {
        uint32_t seen = 0;
        for (;;) {
            uint32_t g = gen_.load(std::memory_order_acquire);
            while (g == seen) {
                if (awake_.load(std::memory_order_acquire)) {
                    cpu_relax();
                } else {
                    asleep_.fetch_add(1, std::memory_order_acq_rel);
                    futex_wait(&gen_, seen);
                    asleep_.fetch_sub(1, std::memory_order_acq_rel);
                }
                g = gen_.load(std::memory_order_acquire);
            }
            seen = g;
            if (quit_.load(std::memory_order_acquire)) return;
            fn_(ctx_, i, n_);
            done_.fetch_add(1, std::memory_order_acq_rel);
        }
    }

    const int n_;
    const bool hot_;
    std::vector<std::thread> threads_;
    alignas(64) std::atomic<uint32_t> gen_{0};
    alignas(64) std::atomic<int> done_{0};
    alignas(64) std::atomic<int> asleep_{0};
    std::atomic<bool> awake_;
    std::atomic<bool> quit_{false};
    Fn fn_ = nullptr;
    void *ctx_ = nullptr;
};

// How a host copy writes: glibc's memcpy (which picks its own stores by size) or non-temporal
// stores (they bypass the caches: the copy engine then reads memory, and the copy does not first
// read the lines it overwrites), as the library writes its staging buffers below 128 MiB for a
// source read again: 16-byte stores, the source asked for a page ahead of the loads (the
// processor's prefetchers stop at the end of a 4 KiB page). stream-noahead: the same stores
// without that prefetch, for comparison. ahead: the same loads and prefetch with ordinary 16-byte
// stores, against glibc's memcpy, with which the library writes its staging buffers from 128 MiB
// and for a source no recent copy read.
// Or demote: glibc's memcpy in blocks of 16 KiB, each followed by CLDEMOTE of its lines (a hint
// that moves them from the core's own caches to the shared last-level cache, where the copy
// engine's reads find them without a snoop of that core; executed as a NOP where the processor
// lacks it).
enum class Stores { Memcpy, Stream, Demote, StreamNoAhead, Ahead };
const char *stores_name(Stores s) {
    return s == Stores::Stream     ? "stream"
           : s == Stores::Demote   ? "demote"
           : s == Stores::StreamNoAhead ? "stream-noahead"
           : s == Stores::Ahead        ? "ahead"
                                   : "memcpy";
}
Stores stores_of(const std::string &name) {
    return name == "stream"     ? Stores::Stream
           : name == "demote"   ? Stores::Demote
           : name == "stream-noahead" ? Stores::StreamNoAhead
           : name == "ahead"    ? Stores::Ahead
                                : Stores::Memcpy;
}

void demote_copy(unsigned char *dst, const unsigned char *src, size_t n) {
    constexpr size_t kBlock = 16 * 1024;
    for (size_t at = 0; at < n; at += kBlock) {
        const size_t len = std::min(kBlock, n - at);
        std::memcpy(dst + at, src + at, len);
#if defined(__x86_64__)
        // from the line holding the block's first byte to the one holding its last
        uintptr_t line = reinterpret_cast<uintptr_t>(dst + at) & ~uintptr_t(63);
        for (const uintptr_t end = reinterpret_cast<uintptr_t>(dst + at + len); line < end; line += 64)
            asm volatile("cldemote (%0)" : : "r"(line) : "memory");
#endif
    }
}

// 16-byte non-temporal (`stream`) or ordinary stores; with `ahead`, each line's loads preceded by a
// prefetch of the source one page further, as the library's copies do.
void lined_copy(unsigned char *dst, const unsigned char *src, size_t n, bool ahead, bool stream) {
#if defined(__x86_64__)
    size_t head = std::min(n, static_cast<size_t>((16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16));
    std::memcpy(dst, src, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
        // the address is formed as an integer: it may lie past the source (a prefetch never faults)
        if (ahead) _mm_prefetch(reinterpret_cast<const char *>(reinterpret_cast<uintptr_t>(src) + i + 4096), _MM_HINT_T0);
        const __m128i *s = reinterpret_cast<const __m128i *>(src + i);
        __m128i *d = reinterpret_cast<__m128i *>(dst + i);
        __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                e = _mm_loadu_si128(s + 3);
        if (stream) {
            _mm_stream_si128(d, a);
            _mm_stream_si128(d + 1, b);
            _mm_stream_si128(d + 2, c);
            _mm_stream_si128(d + 3, e);
        } else {
            _mm_store_si128(d, a);
            _mm_store_si128(d + 1, b);
            _mm_store_si128(d + 2, c);
            _mm_store_si128(d + 3, e);
        }
    }
    std::memcpy(dst + i, src + i, n - i);
    if (stream) _mm_sfence();
#else
    (void)ahead;
    (void)stream;
    std::memcpy(dst, src, n);
#endif
}

// One host copy split in T contiguous parts, 4 KiB aligned.
struct CopyJob {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
    Stores stores = Stores::Memcpy;
    // When set, each thread adds the nanoseconds its part took (part l's per-thread rate).
    std::atomic<uint64_t> *busy_ns = nullptr;
};
void copy_range(const CopyJob &j, int i, int count) {
    size_t part = (j.n / static_cast<size_t>(count) + 4095) & ~size_t(4095);
    size_t lo = std::min(j.n, part * static_cast<size_t>(i)), hi = std::min(j.n, lo + part);
    if (hi <= lo) return;
    const double t0 = j.busy_ns ? now_s() : 0;
    unsigned char *dst = j.dst + lo;
    const unsigned char *src = j.src + lo;
    switch (j.stores) {
    case Stores::Stream: lined_copy(dst, src, hi - lo, /*ahead=*/true, /*stream=*/true); break;
    case Stores::StreamNoAhead: lined_copy(dst, src, hi - lo, false, true); break;
    case Stores::Ahead: lined_copy(dst, src, hi - lo, true, false); break;
    case Stores::Demote: demote_copy(dst, src, hi - lo); break;
    case Stores::Memcpy: std::memcpy(dst, src, hi - lo); break;
    }
    if (j.busy_ns) j.busy_ns->fetch_add(static_cast<uint64_t>((now_s() - t0) * 1e9), std::memory_order_relaxed);
}
void copy_part(void *ctx, int i, int count) { copy_range(*static_cast<const CopyJob *>(ctx), i, count); }
// The same copy over and over until `stop` (part g's load on the host).
struct LoopJob {
    CopyJob copy;
    std::atomic<bool> stop{false};
};
void copy_until_stopped(void *ctx, int i, int count) {
    auto &j = *static_cast<LoopJob *>(ctx);
    while (!j.stop.load(std::memory_order_acquire)) copy_range(j.copy, i, count);
}
void nothing(void *, int, int) {}
struct WakeTimes {
    double at[64];
};
void record_time(void *ctx, int i, int) { static_cast<WakeTimes *>(ctx)->at[i] = now_s(); }

// Non-zero, position-dependent bytes.
void fill_pattern(unsigned char *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t x = (seed + i / 8) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 29;
        x |= 0x0101010101010101ull;
        std::memcpy(p + i, &x, 8);
    }
}

struct Stat {
    std::vector<double> v;
    double med() const { return median(v); }
};

// Each repetition timed on its own: prep() outside the clock, then op().
template <class Prep, class Op>
Stat time_each(int reps, Prep &&prep, Op &&op) {
    Stat s;
    for (int r = 0; r < reps; ++r) {
        prep();
        double t0 = now_s();
        op();
        s.v.push_back(now_s() - t0);
    }
    return s;
}
Stat time_each(int reps, const std::function<void()> &op) {
    return time_each(reps, [] {}, op);
}

// Per repetition: op() back to back, in batches of 16 between clock reads, for at least min_s;
// seconds per op.
template <class Op>
Stat time_per_op(int reps, double min_s, Op &&op) {
    Stat s;
    for (int r = 0; r < reps; ++r) {
        long n = 0;
        double t0 = now_s(), t = 0;
        do {
            for (int i = 0; i < 16; ++i) op();
            n += 16;
            t = now_s() - t0;
        } while (t < min_s);
        s.v.push_back(t / static_cast<double>(n));
    }
    return s;
}

int reps_for(size_t n) { return n >= 64 * MiB ? 7 : n >= 16 * MiB ? 9 : 15; }

// Everything measured, for the tables and the CSV.
struct Result {
    std::string part, dir, metric;  // metric: "copy" (a time per copy, GB/s shown) or a latency's name
    size_t size = 0, chunk = 0;
    int threads = 0, slots = 0;
    std::string mode;  // "hot", "cold" or ""
    std::string stores;  // "memcpy", "stream", "stream-noahead", "ahead", "demote" or "" (no host copy)
    int busy = 0;        // (g) "host copy under DMA load": repetitions whose DMAs outlasted the copy
    double med = 0;      // seconds
    std::vector<double> samples;
    double gbs() const { return static_cast<double>(size) / med / 1e9; }
};

// A pipeline's copy of n bytes in chunks of c, t threads, k buffers (parts d and r).
Result pipeline_result(const char *part, const std::string &dir, size_t n, size_t c, int t, int k, bool hot,
                       Stores st) {
    Result r;
    r.part = part;
    r.dir = dir;
    r.metric = "copy";
    r.size = n;
    r.chunk = c;
    r.threads = t;
    r.slots = k;
    r.mode = hot ? "hot" : "cold";
    r.stores = stores_name(st);
    return r;
}

struct Probe {
    bool quick = false;
    // --evict-mib M: before each timed repetition of (c), (d) and (g), outside the clock, the
    // main thread reads M MiB of other memory, so that the copy's pageable buffer and the staging
    // buffers are no longer in the CPU caches (as in table_bench, where four backends' copies run
    // between two of one backend's); 0: the buffers stay as the last repetition left them.
    size_t evict_bytes = 0;
    unsigned char *evict_buf = nullptr;
    volatile uint64_t evict_sink = 0;
    void evict() {
        if (!evict_bytes) return;
        uint64_t sum = 0;
        for (size_t i = 0; i < evict_bytes; i += 64) sum += evict_buf[i];
        evict_sink = evict_sink + sum;
    }
    std::string parts = "abcdefg";
    double budget_s = 360;
    std::string csv;
    double start = now_s();
    std::vector<Result> results;
    std::vector<std::string> failures, skipped;

    std::vector<size_t> sizes, chunks;
    std::vector<int> copy_threads, pipe_threads, slot_counts, wake_threads = {1, 4, 8, 12};
    std::vector<Stores> stores = {Stores::Memcpy, Stores::Stream};

    unsigned char *pg_src = nullptr, *pg_dst = nullptr;  // pageable, max size; pg_src holds the pattern
    unsigned char *pin = nullptr;                         // pinned, max size
    unsigned char *staging = nullptr;                     // pinned, max K * max C
    unsigned char *pin2 = nullptr;                        // pinned, max size (part g only)
    unsigned char *dev = nullptr, *dev_src = nullptr;     // device, max size; dev_src holds the pattern
    cudaStream_t stream = nullptr;
    cudaEvent_t ev[4] = {};
    // Part l: the library's table (--library), and where the pipelines sum their threads' time.
    std::string library;
    const LlaisysRuntimeAPI *table = nullptr;
    std::atomic<uint64_t> *busy_sink = nullptr;

    bool want(char part) const { return parts.find(part) != std::string::npos; }
    bool out_of_time() const { return now_s() - start > budget_s; }
    void fail(const std::string &what) {
        if (std::find(failures.begin(), failures.end(), what) == failures.end()) {
            failures.push_back(what);
            std::fprintf(stderr, "pageable_probe: DATA CHECK FAILED: %s\n", what.c_str());
        }
    }
    Result &add(Result r, const Stat &s) {
        r.samples = s.v;
        r.med = s.med();
        results.push_back(r);
        return results.back();
    }
    const Result *find(const std::function<bool(const Result &)> &pred) const {
        for (const auto &r : results)
            if (pred(r)) return &r;
        return nullptr;
    }
    // The fastest copy among results matching pred.
    const Result *best(const std::function<bool(const Result &)> &pred) const {
        const Result *b = nullptr;
        for (const auto &r : results)
            if (r.metric == "copy" && pred(r) && (!b || r.med < b->med)) b = &r;
        return b;
    }

    // (g): the DMA under host copy load measured with the same T, stores, direction and size.
    const Result *dma_loaded_of(const Result &host_loaded) const {
        return find([&](const Result &r) {
            return r.part == "g" && r.metric == "DMA under host copy load" && r.dir == host_loaded.dir &&
                   r.size == host_loaded.size && r.threads == host_loaded.threads && r.stores == host_loaded.stores;
        });
    }
    // The slower of the loaded host copy and the loaded DMA, GB/s.
    double loaded_bound(const Result &host_loaded) const {
        const Result *dma = dma_loaded_of(host_loaded);
        return dma ? std::min(host_loaded.gbs(), dma->gbs()) : host_loaded.gbs();
    }
    // The (g) configuration with the highest bound under load.
    const Result *best_loaded(const std::string &dir, size_t n) const {
        const Result *b = nullptr;
        for (const auto &r : results)
            if (r.part == "g" && r.metric == "host copy under DMA load" && r.dir == dir && r.size == n &&
                (!b || loaded_bound(r) > loaded_bound(*b)))
                b = &r;
        return b;
    }

    void spin_event(cudaEvent_t e) const {
        for (;;) {
            cudaError_t q = cudaEventQuery(e);
            if (q == cudaSuccess) return;
            if (q != cudaErrorNotReady) PROBE_CUDA(q);
            cpu_relax();
        }
    }

    // (d) H2D: host threads copy chunk k+1 into its staging buffer while chunk k's DMA runs. A
    // staging buffer is reused once the event after its last DMA has completed. Returns the total
    // time; `first` gets the host time until the first DMA was queued.
    // With `land` false it returns once the last DMA is queued (the source has been read) and
    // leaves the threads awake: part r's round trip queues its D2H right behind.
    double pipeline_h2d(Workers &w, unsigned char *d, const unsigned char *src, size_t n, size_t C, int K,
                        Stores st, double &first, bool land = true) {
        const size_t chunks = (n + C - 1) / C;
        auto len = [&](size_t k) { return std::min(C, n - k * C); };
        auto slot = [&](size_t k) { return staging + (k % static_cast<size_t>(K)) * C; };
        CopyJob job{slot(0), src, len(0), st, busy_sink};
        double t0 = now_s();
        w.wake();
        w.start(copy_part, &job);
        for (size_t k = 0; k < chunks; ++k) {
            w.wait();
            if (k + 1 < chunks) {
                if (k + 1 >= static_cast<size_t>(K)) spin_event(ev[(k + 1) % K]);
                job = CopyJob{slot(k + 1), src + (k + 1) * C, len(k + 1), st, busy_sink};
                w.start(copy_part, &job);
            }
            PROBE_CUDA(cudaMemcpyAsync(d + k * C, slot(k), len(k), cudaMemcpyHostToDevice, stream));
            PROBE_CUDA(cudaEventRecord(ev[k % K], stream));
            if (k == 0) first = now_s() - t0;
        }
        if (!land) return now_s() - t0;
        spin_event(ev[(chunks - 1) % K]);
        w.sleep();
        return now_s() - t0;
    }

    // (d) D2H: K DMAs in flight into the staging buffers; host threads copy chunk k out while
    // the DMAs of k+1 .. k+K-1 run; a buffer gets its next DMA once its host copy is done.
    // `first` gets the time until the first chunk is in pageable memory.
    double pipeline_d2h(Workers &w, unsigned char *dst, const unsigned char *d, size_t n, size_t C, int K,
                        Stores st, double &first) {
        const size_t chunks = (n + C - 1) / C;
        auto len = [&](size_t k) { return std::min(C, n - k * C); };
        auto slot = [&](size_t k) { return staging + (k % static_cast<size_t>(K)) * C; };
        CopyJob job{nullptr, nullptr, 0, st, nullptr};
        double t0 = now_s();
        w.wake();
        for (size_t k = 0; k < chunks && k < static_cast<size_t>(K); ++k) {
            PROBE_CUDA(cudaMemcpyAsync(slot(k), d + k * C, len(k), cudaMemcpyDeviceToHost, stream));
            PROBE_CUDA(cudaEventRecord(ev[k % K], stream));
        }
        for (size_t k = 0; k < chunks; ++k) {
            spin_event(ev[k % K]);
            job = CopyJob{dst + k * C, slot(k), len(k), st, busy_sink};
            w.start(copy_part, &job);
            w.wait();
            if (k == 0) first = now_s() - t0;
            if (k + K < chunks) {
                PROBE_CUDA(cudaMemcpyAsync(slot(k + K), d + (k + K) * C, len(k + K), cudaMemcpyDeviceToHost, stream));
                PROBE_CUDA(cudaEventRecord(ev[k % K], stream));
            }
        }
        w.sleep();
        return now_s() - t0;
    }

    // Repetitions of a pipeline `op` of n bytes, each timed on its own: the caches made cold first
    // when asked (--evict-mib), a cold pool asleep first; after() runs after each, off the clock.
    Stat time_pipeline(Workers &w, size_t n, const std::function<void()> &op,
                       const std::function<void()> &after = [] {}) {
        Stat s;
        for (int r = 0; r < reps_for(n); ++r) {
            evict();
            if (!w.hot()) w.wait_asleep();
            double t0 = now_s();
            op();
            s.v.push_back(now_s() - t0);
            after();
        }
        return s;
    }

    // H2D data check: what landed on the device equals pg_src.
    void check_device(const char *what, size_t n) {
        PROBE_CUDA(cudaMemcpy(pin, dev, n, cudaMemcpyDeviceToHost));
        if (std::memcmp(pin, pg_src, n) != 0) fail(format("%s: device data differ from the source", what));
    }
    void check_pageable(const char *what, size_t n) {
        if (std::memcmp(pg_dst, pg_src, n) != 0) fail(format("%s: host data differ from the source", what));
    }
    void poison_device(size_t n) { PROBE_CUDA(cudaMemset(dev, 0, n)); }
    void poison_pageable(size_t n) { std::memset(pg_dst, 0x5A, n); }

    void part_a_b();
    // For each T of `threads` (a pool of T spinning threads; skipped once out of time), each kind
    // of stores, direction (0: H2D) and size: body(pool, T, stores, direction, size).
    template <class Body>
    void each_host_copy(const std::vector<int> &threads, char part, Body &&body) {
        for (int t : threads) {
            if (out_of_time()) {
                skipped.push_back(format("(%c) T=%d", part, t));
                continue;
            }
            Workers w(t, true);
            for (Stores st : stores)
                for (int d = 0; d < 2; ++d)
                    for (size_t n : sizes) body(w, t, st, d, n);
        }
    }
    void part_c();
    void part_d();
    void part_e();
    template <class Lat>
    void staging_buffer_costs(Lat &lat);
    template <class Lat>
    void fresh_mapping_costs(Lat &lat);
    void part_f();
    void part_g();
    void part_l();
    void part_r();
    std::string markdown(const std::string &header) const;
    void write_csv() const;
};

const char *const kDirs[2] = {"H2D", "D2H"};

void Probe::part_a_b() {
    for (int d = 0; d < 2; ++d)
        for (size_t n : sizes) {
            const bool h2d = d == 0;
            for (int pinned = 0; pinned < 2; ++pinned) {
                unsigned char *host = pinned ? pin : (h2d ? pg_src : pg_dst);
                if (pinned && h2d) std::memcpy(pin, pg_src, n);
                auto op = [&] {
                    if (h2d) PROBE_CUDA(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
                    else PROBE_CUDA(cudaMemcpy(host, dev_src, n, cudaMemcpyDeviceToHost));
                    // cudaMemcpy from pageable memory may return before its last DMA lands
                    PROBE_CUDA(cudaDeviceSynchronize());
                };
                if (h2d) poison_device(n);
                else std::memset(host, 0x5A, n);
                op();
                std::string what = format("(%c) cudaMemcpy %s %s %s", pinned ? 'b' : 'a', kDirs[d],
                                          pinned ? "pinned" : "pageable", fmt_size(n).c_str());
                if (h2d) check_device(what.c_str(), n);
                else if (std::memcmp(host, pg_src, n) != 0) fail(what + ": host data differ from the source");
                Result r;
                r.part = pinned ? "b" : "a";
                r.dir = kDirs[d];
                r.metric = "copy";
                r.size = n;
                const Result &got = add(r, time_each(reps_for(n), op));
                std::fprintf(stderr, "  %-44s %s\n", what.c_str(), fmt_gbs(got.gbs()).c_str());
            }
        }
}

void Probe::part_c() {
    each_host_copy(copy_threads, 'c', [&](Workers &w, int t, Stores st, int d, size_t n) {
        // H2D's staging copy: pageable -> pinned; D2H's: pinned -> pageable.
        const bool h2d = d == 0;
        if (!h2d) std::memcpy(pin, pg_src, n);
        CopyJob job = h2d ? CopyJob{pin, pg_src, n, st, nullptr} : CopyJob{pg_dst, pin, n, st, nullptr};
        auto op = [&] {
            w.start(copy_part, &job);
            w.wait();
        };
        std::memset(job.dst, 0x5A, n);
        op();
        if (std::memcmp(job.dst, pg_src, n) != 0)
            fail(format("(c) host copy %s T=%d %s %s: data differ", kDirs[d], t, stores_name(st),
                        fmt_size(n).c_str()));
        Result r;
        r.part = "c";
        r.dir = kDirs[d];
        r.metric = "copy";
        r.size = n;
        r.threads = t;
        r.stores = stores_name(st);
        const Result &got = add(r, time_each(reps_for(n), [&] { evict(); }, op));
        std::fprintf(stderr, "  (c) host copy %s %-8s T=%-2d %-6s %s\n", h2d ? "pageable->pinned" : "pinned->pageable",
                     fmt_size(n).c_str(), t, stores_name(st), fmt_gbs(got.gbs()).c_str());
    });
}

void Probe::part_d() {
    for (int t : pipe_threads)
        for (int hot = 1; hot >= 0; --hot) {
            if (out_of_time()) {
                skipped.push_back(format("(d) T=%d %s", t, hot ? "hot" : "cold"));
                continue;
            }
            Workers w(t, hot != 0);
            for (Stores st : stores)
            for (int d = 0; d < 2; ++d)
                for (size_t c : chunks)
                    for (int k : slot_counts)
                        for (size_t n : sizes) {
                            if (c > n) continue;
                            const bool h2d = d == 0;
                            double first = 0;
                            auto op = [&] {
                                if (h2d) pipeline_h2d(w, dev, pg_src, n, c, k, st, first);
                                else pipeline_d2h(w, pg_dst, dev_src, n, c, k, st, first);
                            };
                            std::string what = format("(d) pipeline %s %s C=%s T=%d K=%d %s %s", kDirs[d], fmt_size(n).c_str(),
                                                      fmt_size(c).c_str(), t, k, hot ? "hot" : "cold", stores_name(st));
                            if (h2d) poison_device(n);
                            else poison_pageable(n);
                            // and the staging buffers, so that a chunk read before its DMA landed shows
                            std::memset(staging, 0xA5, static_cast<size_t>(k) * c);
                            if (!hot) w.wait_asleep();
                            op();
                            if (h2d) check_device(what.c_str(), n);
                            else check_pageable(what.c_str(), n);
                            Stat firsts;
                            Stat total = time_pipeline(w, n, op, [&] { firsts.v.push_back(first); });
                            Result r = pipeline_result("d", kDirs[d], n, c, t, k, hot != 0, st);
                            const Result &got = add(r, total);
                            r.metric = h2d ? "first DMA queued" : "first chunk landed";
                            add(r, firsts);
                            std::fprintf(stderr, "  %-52s %s\n", what.c_str(), fmt_gbs(got.gbs()).c_str());
                        }
        }
}

void Probe::part_e() {
    auto lat = [&](const std::string &metric, const Stat &s, int threads = 0, size_t size = 0, const char *mode = "") {
        Result r;
        r.part = "e";
        r.metric = metric;
        r.threads = threads;
        r.size = size;
        r.mode = mode;
        const Result &got = add(r, s);
        std::fprintf(stderr, "  (e) %-56s %s\n", (metric + (threads ? format(", T=%d", threads) : std::string())).c_str(),
                     fmt_time(got.med).c_str());
    };
    // Waking T sleeping threads: from the futex wake until each runs its job (first and last).
    for (int t : wake_threads) {
        Workers w(t, false);
        WakeTimes times;
        Stat first, last;
        for (int r = 0; r < 41; ++r) {
            w.wait_asleep();
            double t0 = now_s();
            w.start(record_time, &times);
            w.wait();
            double lo = times.at[0], hi = times.at[0];
            for (int i = 1; i < t; ++i) lo = std::min(lo, times.at[i]), hi = std::max(hi, times.at[i]);
            first.v.push_back(lo - t0);
            last.v.push_back(hi - t0);
        }
        lat("futex wake -> first thread running", first, t, 0, "cold");
        lat("futex wake -> last thread running", last, t, 0, "cold");
    }
    // Handing an empty job to T spinning threads and seeing them all done.
    for (int t : wake_threads) {
        Workers w(t, true);
        lat("handoff to spinning threads and back (empty job)", time_per_op(11, 1e-3, [&] {
                w.start(nothing, nullptr);
                w.wait();
            }), t, 0, "hot");
    }
    lat("cudaEventRecord + cudaEventQuery until complete (idle stream)", time_per_op(11, 1e-3, [&] {
            PROBE_CUDA(cudaEventRecord(ev[0], stream));
            spin_event(ev[0]);
        }));
    lat("cudaEventQuery of a completed event", time_per_op(11, 1e-3, [&] { PROBE_CUDA(cudaEventQuery(ev[0])); }));
    // Enqueue only: 64 copies queued with the clock running, waited for with it stopped.
    for (size_t n : {size_t(64), 1 * MiB}) {
        for (int d = 0; d < 2; ++d) {
            Stat s;
            for (int r = 0; r < 15; ++r) {
                double t0 = now_s();
                for (int i = 0; i < 64; ++i) {
                    if (d == 0) PROBE_CUDA(cudaMemcpyAsync(dev, staging, n, cudaMemcpyHostToDevice, stream));
                    else PROBE_CUDA(cudaMemcpyAsync(staging, dev_src, n, cudaMemcpyDeviceToHost, stream));
                }
                s.v.push_back((now_s() - t0) / 64);
                PROBE_CUDA(cudaStreamSynchronize(stream));
            }
            lat(format("cudaMemcpyAsync %s pinned %s, enqueue only", kDirs[d], fmt_size(n).c_str()), s, 0, n);
        }
    }
    // Four chunks' DMAs queued back to back, until all have completed: on the legacy stream (one
    // after the other, as a staged copy queues them) against alternating over two blocking
    // streams (ordered with the legacy stream as a staged copy must be, two copy engines).
    {
        cudaStream_t two[2];
        for (auto &t : two) PROBE_CUDA(cudaStreamCreateWithFlags(&t, 0));  // 0: cudaStreamDefault, blocking
        for (size_t c : chunks) {
            if (4 * c > sizes.back()) continue;
            for (int d = 0; d < 2; ++d)
                for (int streams = 1; streams <= 2; ++streams) {
                    auto dmas = [&] {
                        for (size_t k = 0; k < 4; ++k) {
                            cudaStream_t on = streams == 1 ? nullptr : two[k % 2];
                            if (d == 0) PROBE_CUDA(cudaMemcpyAsync(dev + k * c, pin + k * c, c, cudaMemcpyHostToDevice, on));
                            else PROBE_CUDA(cudaMemcpyAsync(pin + k * c, dev_src + k * c, c, cudaMemcpyDeviceToHost, on));
                        }
                        PROBE_CUDA(cudaDeviceSynchronize());
                    };
                    dmas();
                    lat(format("4 DMAs %s pinned of %s, %s, until all done", kDirs[d], fmt_size(c).c_str(),
                               streams == 1 ? "one stream (legacy)" : "alternating over 2 blocking streams"),
                        time_each(15, dmas), 0, c);
                }
        }
        for (auto &t : two) PROBE_CUDA(cudaStreamDestroy(t));
    }
    // One chunk's DMA: the other half of the first chunk's cost.
    for (size_t c : chunks)
        for (int d = 0; d < 2; ++d)
            lat(format("one chunk's DMA: cudaMemcpyAsync %s pinned %s + cudaStreamSynchronize", kDirs[d],
                       fmt_size(c).c_str()),
                time_each(15, [&] {
                    if (d == 0) PROBE_CUDA(cudaMemcpyAsync(dev, staging, c, cudaMemcpyHostToDevice, stream));
                    else PROBE_CUDA(cudaMemcpyAsync(staging, dev_src, c, cudaMemcpyDeviceToHost, stream));
                    PROBE_CUDA(cudaStreamSynchronize(stream));
                }),
                0, c);
    staging_buffer_costs(lat);
    fresh_mapping_costs(lat);
}

// Making one staging buffer of the largest chunk, as a library does on its first staged copy:
// cudaHostAlloc, or ordinary pages (huge pages asked for with MADV_HUGEPAGE, or 4 KiB ones)
// touched and then registered with cudaHostRegister. Timed until the buffer is usable; freed
// outside the clock.
template <class Lat>
void Probe::staging_buffer_costs(Lat &lat) {
    const size_t c = chunks.back();
    Stat alloc, huge, small;
    for (int r = 0; r < 7; ++r) {
        void *p = nullptr;
        double t0 = now_s();
        PROBE_CUDA(cudaHostAlloc(&p, c, cudaHostAllocPortable));
        alloc.v.push_back(now_s() - t0);
        PROBE_CUDA(cudaFreeHost(p));
        for (int h = 1; h >= 0; --h) {
            t0 = now_s();
            void *q = mmap(nullptr, c, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (q == MAP_FAILED) die(2, "mmap(%zu): %s", c, std::strerror(errno));
            madvise(q, c, h ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
            std::memset(q, 0, c);
            PROBE_CUDA(cudaHostRegister(q, c, cudaHostRegisterPortable));
            (h ? huge : small).v.push_back(now_s() - t0);
            PROBE_CUDA(cudaHostUnregister(q));
            munmap(q, c);
        }
    }
    const std::string sz = fmt_size(c);
    lat(format("make a %s staging buffer: cudaHostAlloc (portable)", sz.c_str()), alloc, 0, c);
    lat(format("make a %s staging buffer: mmap, MADV_HUGEPAGE, touch, cudaHostRegister", sz.c_str()), huge, 0, c);
    lat(format("make a %s staging buffer: mmap, 4 KiB pages, touch, cudaHostRegister", sz.c_str()), small, 0, c);
}

// A copy's first chunk when its source is a range of a file mapping touched for the first time
// (a model's weights: a file in the page cache, mapped, copied tensor by tensor): a 16 MiB file
// written here (so its pages are cached), mapped anew for each repetition, its first 256 KiB and
// 4.5 MiB copied into pinned memory by T spinning threads; then the same copy again from the
// mapping, now touched. The difference is what first touching a mapping costs a staged copy.
template <class Lat>
void Probe::fresh_mapping_costs(Lat &lat) {
    const size_t file_len = 16 * MiB;
    const char *tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/var/tmp") + "/pageable_probe-XXXXXX";
    int fd = mkstemp(&path[0]);
    if (fd < 0) die(2, "mkstemp %s: %s", path.c_str(), std::strerror(errno));
    unlink(path.c_str());
    std::vector<unsigned char> pattern(file_len);
    fill_pattern(pattern.data(), file_len, 57);
    for (size_t off = 0; off < file_len;) {
        ssize_t w = ::write(fd, pattern.data() + off, file_len - off);
        if (w <= 0) die(2, "write %s: %s", path.c_str(), std::strerror(errno));
        off += static_cast<size_t>(w);
    }
    const size_t sizes_here[] = {256 * KiB, 4608 * KiB};
    unsigned char *dst = nullptr;
    PROBE_CUDA(cudaMallocHost(reinterpret_cast<void **>(&dst), sizes_here[1]));
    for (int t : wake_threads)
        for (size_t n : sizes_here) {
            Workers w(t, true);
            Stat fresh, touched;
            for (int r = 0; r < 15; ++r) {
                void *map = mmap(nullptr, file_len, PROT_READ, MAP_SHARED, fd, 0);
                if (map == MAP_FAILED) die(2, "mmap %s: %s", path.c_str(), std::strerror(errno));
                CopyJob job{dst, static_cast<const unsigned char *>(map), n, Stores::Memcpy, nullptr};
                for (int pass = 0; pass < 2; ++pass) {
                    std::memset(dst, 0x5A, n);
                    double t0 = now_s();
                    w.start(copy_part, &job);
                    w.wait();
                    (pass == 0 ? fresh : touched).v.push_back(now_s() - t0);
                    if (std::memcmp(dst, pattern.data(), n) != 0)
                        fail(format("(e) copy %s from a file mapping, T=%d: data differ", fmt_size(n).c_str(), t));
                }
                munmap(map, file_len);
            }
            lat(format("copy %s from a fresh mapping of a cached file to pinned", fmt_size(n).c_str()), fresh, t, n,
                "hot");
            lat(format("copy %s from the same mapping, touched, to pinned", fmt_size(n).c_str()), touched, t, n, "hot");
        }
    PROBE_CUDA(cudaFreeHost(dst));
    ::close(fd);
}

void Probe::part_f() {
    for (int d = 0; d < 2; ++d)
        for (size_t n : sizes) {
            if (out_of_time()) {
                skipped.push_back(format("(f) %s %s", kDirs[d], fmt_size(n).c_str()));
                continue;
            }
            const bool h2d = d == 0;
            unsigned char *host = h2d ? pg_src : pg_dst;
            Stat total, reg, unreg;
            const int reps = std::min(reps_for(n), 9);
            for (int r = 0; r <= reps; ++r) {
                if (h2d) poison_device(n);
                else poison_pageable(n);
                double t0 = now_s();
                PROBE_CUDA(cudaHostRegister(host, n, cudaHostRegisterDefault));
                double t1 = now_s();
                if (h2d) PROBE_CUDA(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
                else PROBE_CUDA(cudaMemcpy(host, dev_src, n, cudaMemcpyDeviceToHost));
                PROBE_CUDA(cudaDeviceSynchronize());
                double t2 = now_s();
                PROBE_CUDA(cudaHostUnregister(host));
                double t3 = now_s();
                if (r == 0) {  // the warm-up is the data check
                    std::string what = format("(f) register+copy+unregister %s %s", kDirs[d], fmt_size(n).c_str());
                    if (h2d) check_device(what.c_str(), n);
                    else check_pageable(what.c_str(), n);
                    continue;
                }
                total.v.push_back(t3 - t0);
                reg.v.push_back(t1 - t0);
                unreg.v.push_back(t3 - t2);
            }
            Result r;
            r.part = "f";
            r.dir = kDirs[d];
            r.size = n;
            r.metric = "copy";
            const Result &got = add(r, total);
            std::fprintf(stderr, "  (f) register+copy+unregister %s %-8s %s\n", kDirs[d], fmt_size(n).c_str(),
                         fmt_gbs(got.gbs()).c_str());
            r.metric = "cudaHostRegister";
            add(r, reg);
            r.metric = "cudaHostUnregister";
            add(r, unreg);
        }
}

// (g) The host copy and the copy engine at once. Under load, for T threads and each kind of stores:
// - the host copy (H2D: pageable -> pinned; D2H: pinned -> pageable) timed while DMAs of other
//   pinned memory (pin: to / from the device) keep running, queued to outlast it ("busy" counts
//   the repetitions where they did);
// - one DMA of n bytes (cudaMemcpyAsync + spin on its event) timed while the T threads keep
//   copying the same way.
// And the two alone, in the same loop: the host copy with no DMA, the DMA with no host copy.
// A staged copy's steady state runs both, each on its own bytes, so its rate is at most the
// slower of the two under load.
void Probe::part_g() {
    each_host_copy(pipe_threads, 'g', [&](Workers &w, int t, Stores st, int d, size_t n) {
        const bool h2d = d == 0;
        // The host copy: H2D's into pin2, D2H's out of pin2; the load's DMAs use pin.
        CopyJob job = h2d ? CopyJob{pin2, pg_src, n, st, nullptr} : CopyJob{pg_dst, pin2, n, st, nullptr};
        if (!h2d) std::memcpy(pin2, pg_src, n);
        auto dma = [&] {
            if (h2d) PROBE_CUDA(cudaMemcpyAsync(dev, pin, n, cudaMemcpyHostToDevice, stream));
            else PROBE_CUDA(cudaMemcpyAsync(pin, dev_src, n, cudaMemcpyDeviceToHost, stream));
        };
        auto host_copy = [&] {
            w.start(copy_part, &job);
            w.wait();
        };
        const int reps = reps_for(n);
        Stat host_alone, host_loaded, dma_alone, dma_loaded;
        int busy = 0;
        std::memset(job.dst, 0x5A, n);
        host_copy();
        if (std::memcmp(job.dst, pg_src, n) != 0)
            fail(format("(g) host copy %s T=%d %s %s: data differ", kDirs[d], t, stores_name(st),
                        fmt_size(n).c_str()));
        for (int r = 0; r < reps; ++r) {
            evict();
            double t0 = now_s();
            host_copy();
            host_alone.v.push_back(now_s() - t0);
            evict();

            // The load: DMAs of 8 n bytes (at 55 GB/s 8 n take longer than one host
            // copy of n at 7 GB/s or more); the first event says they have begun.
            PROBE_CUDA(cudaEventRecord(ev[0], stream));
            for (int k = 0; k < 8; ++k) dma();
            PROBE_CUDA(cudaEventRecord(ev[1], stream));
            spin_event(ev[0]);
            t0 = now_s();
            host_copy();
            host_loaded.v.push_back(now_s() - t0);
            cudaError_t q = cudaEventQuery(ev[1]);
            if (q == cudaErrorNotReady) ++busy;
            else PROBE_CUDA(q);
            PROBE_CUDA(cudaStreamSynchronize(stream));

            t0 = now_s();
            dma();
            PROBE_CUDA(cudaEventRecord(ev[0], stream));
            spin_event(ev[0]);
            dma_alone.v.push_back(now_s() - t0);

            LoopJob load;
            load.copy = job;
            w.start(copy_until_stopped, &load);
            t0 = now_s();
            dma();
            PROBE_CUDA(cudaEventRecord(ev[0], stream));
            spin_event(ev[0]);
            dma_loaded.v.push_back(now_s() - t0);
            load.stop.store(true, std::memory_order_release);
            w.wait();
        }
        Result r;
        r.part = "g";
        r.dir = kDirs[d];
        r.size = n;
        r.threads = t;
        r.stores = stores_name(st);
        r.busy = busy;
        const struct {
            const char *metric;
            const Stat *s;
        } all[] = {{"host copy alone", &host_alone},
                   {"host copy under DMA load", &host_loaded},
                   {"DMA alone", &dma_alone},
                   {"DMA under host copy load", &dma_loaded}};
        for (const auto &m : all) {
            r.metric = m.metric;
            add(r, *m.s);
        }
        std::fprintf(stderr, "  (g) %s %-8s T=%-2d %-6s host %s -> %s loaded (%d/%d busy), DMA %s -> %s loaded\n",
                     kDirs[d], fmt_size(n).c_str(), t, stores_name(st),
                     fmt_gbs(n / host_alone.med() / 1e9).c_str(), fmt_gbs(n / host_loaded.med() / 1e9).c_str(),
                     busy, reps, fmt_gbs(n / dma_alone.med() / 1e9).c_str(),
                     fmt_gbs(n / dma_loaded.med() / 1e9).c_str());
    });
}

// (l) The library's memcpy_sync (--library) against this probe's pipeline, on the same buffers, in
// one process: per repetition, in alternating order, each one cold (threads asleep: the library's
// after 2 ms idle, longer than its threads spin; the probe's cold pool) and each one hot (right
// after an untimed copy of the same size: the library's threads still spin; a spinning probe
// pool made for it). H2D ends with cudaDeviceSynchronize after the library's call (its
// memcpy_sync returns once the source is read) and with the last event for the probe's, D2H
// when the call returns. The probe's pipeline runs with the best (d) configuration of this run
// for the direction and size, else C = min(4 MiB, size), the largest T and K; its threads' copy
// time is summed (bytes / thread-seconds: the per-thread rate).
void Probe::part_l() {
    auto idle = [] {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, nullptr);
    };
    for (int d = 0; d < 2; ++d)
        for (size_t n : sizes) {
            if (out_of_time()) {
                skipped.push_back(format("(l) %s %s", kDirs[d], fmt_size(n).c_str()));
                continue;
            }
            const bool h2d = d == 0;
            const Result *bd = best([&](const Result &r) { return r.part == "d" && r.dir == kDirs[d] && r.size == n; });
            // at most the largest chunk: the staging buffers were sized for it
            const size_t cmax = *std::max_element(chunks.begin(), chunks.end());
            const size_t C = bd ? bd->chunk : std::min({n, cmax, 4 * MiB});
            const int T = bd ? bd->threads : pipe_threads.back();
            const int K = bd ? bd->slots : slot_counts.back();
            // without a (d) result: the library's own stores where they are among those asked for
            const bool has_stream = std::find(stores.begin(), stores.end(), Stores::Stream) != stores.end();
            const Stores st = bd ? stores_of(bd->stores) : has_stream ? Stores::Stream : stores.back();
            double first = 0;
            auto probe_op = [&](Workers &w) {
                if (h2d) pipeline_h2d(w, dev, pg_src, n, C, K, st, first);
                else pipeline_d2h(w, pg_dst, dev_src, n, C, K, st, first);
            };
            auto lib_op = [&] {
                if (h2d) {
                    table->memcpy_sync(dev, pg_src, n, LLAISYS_MEMCPY_H2D);
                    PROBE_CUDA(cudaDeviceSynchronize());
                } else {
                    table->memcpy_sync(pg_dst, dev_src, n, LLAISYS_MEMCPY_D2H);
                }
            };
            auto check = [&](const char *who) {
                std::string what = format("(l) %s %s %s", who, kDirs[d], fmt_size(n).c_str());
                if (h2d) check_device(what.c_str(), n);
                else check_pageable(what.c_str(), n);
            };
            auto poison = [&] {
                if (h2d) poison_device(n);
                else poison_pageable(n);
            };
            Workers cold(T, false);
            poison();
            lib_op();
            check("library memcpy_sync");
            poison();
            probe_op(cold);
            check("probe pipeline");
            Stat lib_cold, lib_hot, pipe_cold, pipe_hot, busy_cold, busy_hot;
            std::atomic<uint64_t> busy{0};
            for (int r = 0; r < reps_for(n); ++r) {
                for (int turn = 0; turn < 2; ++turn) {
                    const bool lib_turn = (turn == 0) == (r % 2 == 0);
                    idle();
                    evict();
                    double t0 = 0;
                    if (lib_turn) {
                        t0 = now_s();
                        lib_op();
                        lib_cold.v.push_back(now_s() - t0);
                        lib_op();  // untimed: the threads spin after it
                        t0 = now_s();
                        lib_op();
                        lib_hot.v.push_back(now_s() - t0);
                    } else {
                        cold.wait_asleep();
                        busy.store(0);
                        busy_sink = &busy;
                        t0 = now_s();
                        probe_op(cold);
                        pipe_cold.v.push_back(now_s() - t0);
                        busy_cold.v.push_back(static_cast<double>(busy.load()) * 1e-9);
                        busy_sink = nullptr;
                        Workers hot(T, true);
                        probe_op(hot);  // untimed, as the library's
                        busy.store(0);
                        busy_sink = &busy;
                        t0 = now_s();
                        probe_op(hot);
                        pipe_hot.v.push_back(now_s() - t0);
                        busy_hot.v.push_back(static_cast<double>(busy.load()) * 1e-9);
                        busy_sink = nullptr;
                    }
                }
            }
            Result res;
            res.part = "l";
            res.dir = kDirs[d];
            res.size = n;
            res.chunk = C;
            res.threads = T;
            res.slots = K;
            res.stores = stores_name(st);
            const struct {
                const char *metric, *mode;
                const Stat *s;
            } all[] = {{"library", "cold", &lib_cold},          {"library", "hot", &lib_hot},
                       {"pipeline", "cold", &pipe_cold},        {"pipeline", "hot", &pipe_hot},
                       {"pipeline thread-seconds", "cold", &busy_cold}, {"pipeline thread-seconds", "hot", &busy_hot}};
            for (const auto &m : all) {
                res.metric = m.metric;
                res.mode = m.mode;
                add(res, *m.s);
            }
            std::fprintf(stderr, "  (l) %s %-8s library %s cold, %s hot; pipeline (C=%s T=%d K=%d %s) %s cold, %s hot\n",
                         kDirs[d], fmt_size(n).c_str(), fmt_gbs(n / lib_cold.med() / 1e9).c_str(),
                         fmt_gbs(n / lib_hot.med() / 1e9).c_str(), fmt_size(C).c_str(), T, K, stores_name(st),
                         fmt_gbs(n / pipe_cold.med() / 1e9).c_str(), fmt_gbs(n / pipe_hot.med() / 1e9).c_str());
        }
}

// (r): H2D then D2H of the same n bytes, the D2H queued behind the H2D's DMAs on one stream (as
// table_bench's tensor round trip, whose memcpy_sync H2D returns once the source is read). Times
// until the data is back in pageable memory.
void Probe::part_r() {
    auto idle = [] {
        struct timespec ts = {0, 3 * 1000 * 1000};
        nanosleep(&ts, nullptr);
    };
    auto result = [&](const std::string &metric, size_t n, const Stat &s) -> Result & {
        Result r;
        r.part = "r";
        r.dir = "H2D+D2H";
        r.metric = metric;
        r.size = n;
        return add(r, s);
    };
    for (size_t n : sizes) {
        if (out_of_time()) {
            skipped.push_back(format("(r) %s", fmt_size(n).c_str()));
            continue;
        }
        auto pinned = [&] {
            PROBE_CUDA(cudaMemcpyAsync(dev, pin, n, cudaMemcpyHostToDevice, stream));
            PROBE_CUDA(cudaMemcpyAsync(pin, dev, n, cudaMemcpyDeviceToHost, stream));
            PROBE_CUDA(cudaStreamSynchronize(stream));
        };
        pinned();
        result("link (pinned)", n, time_each(reps_for(n), pinned));
        for (int t : pipe_threads)
            for (int hot = 1; hot >= 0; --hot) {
                if (out_of_time()) {
                    skipped.push_back(format("(r) %s T=%d %s", fmt_size(n).c_str(), t, hot ? "hot" : "cold"));
                    continue;
                }
                Workers w(t, hot != 0);
                for (Stores st : stores)
                    for (size_t c : chunks)
                        for (int k : slot_counts) {
                            if (c > n) continue;
                            double first = 0;
                            // The D2H's copy-out with glibc's stores (the library's below 32 MiB).
                            auto op = [&] {
                                pipeline_h2d(w, dev, pg_src, n, c, k, st, first, false);
                                pipeline_d2h(w, pg_dst, dev, n, c, k, Stores::Memcpy, first);
                            };
                            std::string what = format("(r) round trip %s C=%s T=%d K=%d %s %s", fmt_size(n).c_str(),
                                                      fmt_size(c).c_str(), t, k, hot ? "hot" : "cold", stores_name(st));
                            poison_device(n);
                            poison_pageable(n);
                            std::memset(staging, 0xA5, static_cast<size_t>(k) * c);
                            if (!hot) w.wait_asleep();
                            op();
                            check_pageable(what.c_str(), n);
                            Stat total = time_pipeline(w, n, op);
                            const Result &got =
                                add(pipeline_result("r", "H2D+D2H", n, c, t, k, hot != 0, st), total);
                            std::fprintf(stderr, "  %-56s %s\n", what.c_str(), fmt_time(got.med).c_str());
                        }
            }
        if (!table) continue;
        auto lib = [&] {
            void *d = table->malloc_device(n);
            if (!d) die(2, "(r) the library's malloc_device(%zu) returned NULL", n);
            table->memcpy_sync(d, pg_src, n, LLAISYS_MEMCPY_H2D);
            table->memcpy_sync(pg_dst, d, n, LLAISYS_MEMCPY_D2H);
            table->free_device(d);
        };
        poison_pageable(n);
        lib();
        check_pageable(format("(r) library round trip %s", fmt_size(n).c_str()).c_str(), n);
        Stat cold, hot;
        for (int r = 0; r < reps_for(n); ++r) {
            idle();
            evict();
            double t0 = now_s();
            lib();
            cold.v.push_back(now_s() - t0);
            t0 = now_s();
            lib();
            hot.v.push_back(now_s() - t0);
        }
        result("library", n, cold).mode = "cold";
        result("library", n, hot).mode = "hot";
        std::fprintf(stderr, "  (r) %-8s library %s cold, %s hot\n", fmt_size(n).c_str(), fmt_time(cold.med()).c_str(),
                     fmt_time(hot.med()).c_str());
    }
}

std::string cfg(const Result *r) {
    if (!r) return "-";
    std::string s = fmt_gbs(r->gbs());
    if (r->part == "c" || r->part == "g") s += format(" (T=%d, %s)", r->threads, r->stores.c_str());
    if (r->part == "d")
        s += format(" (C=%s, T=%d, K=%d, %s)", fmt_size(r->chunk).c_str(), r->threads, r->slots, r->stores.c_str());
    return s;
}

std::string Probe::markdown(const std::string &header) const {
    std::string out = header;
    auto gbs_of = [](const Result *r) { return r ? fmt_gbs(r->gbs()) : std::string("-"); };
    // ---- summary ----
    {
        MdTable t;
        t.left = 2;
        t.header = {"direction", "size", "(a) pageable cudaMemcpy", "(b) pinned cudaMemcpy (link)",
                    "(c) host memcpy, best T", "bound min(b, c)", "(d) pipeline hot, best", "(d) pipeline cold, best",
                    "best (d) / bound", "(f) register + copy + unregister", "(g) bound under load, best",
                    "best (d) / (g)"};
        for (int d = 0; d < 2; ++d)
            for (size_t n : sizes) {
                std::string dir = kDirs[d];
                auto is = [&](const char *part) {
                    return [=](const Result &r) { return r.part == part && r.dir == dir && r.size == n; };
                };
                const Result *a = best(is("a")), *b = best(is("b")), *c = best(is("c")), *f = best(is("f"));
                const Result *hot = best([&](const Result &r) { return is("d")(r) && r.mode == "hot"; });
                const Result *cold = best([&](const Result &r) { return is("d")(r) && r.mode == "cold"; });
                double bound = 0;
                if (b && c) bound = std::min(b->gbs(), c->gbs());
                else if (b) bound = b->gbs();
                double bestd = std::max(hot ? hot->gbs() : 0.0, cold ? cold->gbs() : 0.0);
                const Result *g = best_loaded(dir, n);
                std::string gcell = "-";
                double gbound = 0;
                if (g) {
                    gbound = loaded_bound(*g);
                    gcell = format("%s (T=%d, %s)", fmt_gbs(gbound).c_str(), g->threads, g->stores.c_str());
                }
                t.rows.push_back({dir, fmt_size(n), gbs_of(a), gbs_of(b), cfg(c), bound > 0 ? fmt_gbs(bound) : "-",
                                  cfg(hot), cfg(cold), bound > 0 && bestd > 0 ? format("%.0f%%", bestd / bound * 100) : "-",
                                  gbs_of(f), gcell, gbound > 0 && bestd > 0 ? format("%.0f%%", bestd / gbound * 100) : "-"});
            }
        if (!best([](const Result &r) { return r.part == "a" || r.part == "b" || r.part == "c" || r.part == "d"; }))
            t.rows.clear();
        if (!t.rows.empty()) {
        out += "### Summary: the floor per size and direction\n\n";
        out += "(a) is what cudaMemcpy does with pageable memory; (b) the link; (c) the host copy alone; a staged "
               "copy can reach at most min(b, c) (the bound); (d) what an ideal staged pipeline reaches, with "
               "its best chunk C, host threads T, staging buffers K and stores; (f) registering the pages for "
               "each copy; (g) the slower of the host copy and the DMA while the other runs, at its best T and "
               "stores: what a staged copy's steady state can reach at most.\n\n";
        out += t.render();
        }
    }
    // ---- (c) ----
    if (best([](const Result &r) { return r.part == "c"; })) {
        MdTable t;
        t.left = 2;
        t.header = {"host copy", "size"};
        for (int th : copy_threads) t.header.push_back(format("T=%d", th));
        t.header.insert(t.header.begin() + 1, "stores");
        t.left = 3;
        for (Stores st : stores)
            for (int d = 0; d < 2; ++d)
                for (size_t n : sizes) {
                    std::vector<std::string> row = {d == 0 ? "pageable -> pinned (H2D)" : "pinned -> pageable (D2H)",
                                                    stores_name(st), fmt_size(n)};
                    for (int th : copy_threads)
                        row.push_back(gbs_of(find([&](const Result &r) {
                            return r.part == "c" && r.dir == kDirs[d] && r.size == n && r.threads == th &&
                                   r.stores == stores_name(st);
                        })));
                    t.rows.push_back(row);
                }
        out += "\n### (c) Host memcpy with T threads (spinning), GB/s\n\n" + t.render();
    }
    // ---- (d) ----
    for (int d = 0; d < 2; ++d)
        for (const char *mode : {"hot", "cold"}) {
            MdTable t;
            t.left = 4;
            t.header = {"C", "T", "K", "stores"};
            for (size_t n : sizes) t.header.push_back(fmt_size(n));
            // The first chunk's cost, shown at 64 MiB (or the largest size measured).
            const size_t ref = std::find(sizes.begin(), sizes.end(), 64 * MiB) != sizes.end() ? 64 * MiB : sizes.back();
            t.header.push_back(format("%s (%s)", d == 0 ? "first DMA queued" : "first chunk landed", fmt_size(ref).c_str()));
            for (size_t c : chunks)
                for (int th : pipe_threads)
                    for (int k : slot_counts)
                    for (Stores st : stores) {
                        std::vector<std::string> row = {fmt_size(c), format("%d", th), format("%d", k), stores_name(st)};
                        bool any = false;
                        auto match = [&](const Result &r, size_t n) {
                            return r.part == "d" && r.dir == kDirs[d] && r.mode == mode && r.chunk == c &&
                                   r.threads == th && r.slots == k && r.size == n && r.stores == stores_name(st);
                        };
                        for (size_t n : sizes) {
                            const Result *r = find([&](const Result &x) { return x.metric == "copy" && match(x, n); });
                            any = any || r;
                            row.push_back(gbs_of(r));
                        }

                        const Result *f = find([&](const Result &x) { return x.metric != "copy" && match(x, ref); });
                        row.push_back(f ? fmt_time(f->med) : "-");
                        if (any) t.rows.push_back(row);
                    }
            if (!t.rows.empty())
                out += format("\n### (d) Staged pipeline %s, %s threads, GB/s\n\n", kDirs[d], mode) + t.render();
        }
    // ---- (e) ----
    {
        MdTable t;
        t.header = {"cost", "T", "median"};
        for (const auto &r : results)
            if (r.part == "e")
                t.rows.push_back({r.metric, r.threads ? format("%d", r.threads) : "-", fmt_time(r.med)});
        if (!t.rows.empty()) out += "\n### (e) What a pipeline is made of\n\n" + t.render();
    }
    // ---- (f) ----
    {
        MdTable t;
        t.left = 2;
        t.header = {"direction", "size", "register + copy + unregister", "cudaHostRegister", "cudaHostUnregister",
                    "(a) pageable cudaMemcpy"};
        for (int d = 0; d < 2; ++d)
            for (size_t n : sizes) {
                auto get = [&](const char *part, const char *metric) {
                    return find([&](const Result &r) {
                        return r.part == part && r.dir == kDirs[d] && r.size == n && r.metric == metric;
                    });
                };
                const Result *f = get("f", "copy");
                if (!f) continue;
                const Result *reg = get("f", "cudaHostRegister"), *unreg = get("f", "cudaHostUnregister");
                t.rows.push_back({kDirs[d], fmt_size(n), cfg(f), reg ? fmt_time(reg->med) : "-",
                                  unreg ? fmt_time(unreg->med) : "-", gbs_of(get("a", "copy"))});
            }
        if (!t.rows.empty()) out += "\n### (f) Registering pageable memory for each copy\n\n" + t.render();
    }
    // ---- (g) ----
    {
        MdTable t;
        t.left = 4;
        t.header = {"direction", "size", "T", "stores", "host copy alone", "host copy under DMA load", "busy",
                    "DMA alone", "DMA under host copy load", "bound under load"};
        for (int d = 0; d < 2; ++d)
            for (size_t n : sizes)
                for (int th : pipe_threads)
                    for (Stores st : stores) {
                        auto get = [&](const char *metric) {
                            return find([&](const Result &r) {
                                return r.part == "g" && r.dir == kDirs[d] && r.size == n && r.threads == th &&
                                       r.stores == stores_name(st) && r.metric == metric;
                            });
                        };
                        const Result *loaded = get("host copy under DMA load");
                        if (!loaded) continue;
                        t.rows.push_back({kDirs[d], fmt_size(n), format("%d", th), stores_name(st),
                                          gbs_of(get("host copy alone")), gbs_of(loaded),
                                          format("%d/%zu", loaded->busy, loaded->samples.size()), gbs_of(get("DMA alone")),
                                          gbs_of(get("DMA under host copy load")), fmt_gbs(loaded_bound(*loaded))});
                    }
        if (!t.rows.empty())
            out += "\n### (g) The host copy and the DMA at the same time, GB/s\n\n"
                   "busy: repetitions whose DMAs were still running when the host copy ended (else the "
                   "host copy was not under load to its end). Bound under load: the slower of the two "
                   "loaded rates.\n\n" +
                   t.render();
    }
    // ---- (l) ----
    {
        MdTable t;
        t.left = 3;
        t.header = {"direction", "size", "probe pipeline (C, T, K, stores)", "library cold", "pipeline cold",
                    "library / pipeline cold", "library hot", "pipeline hot", "library / pipeline hot",
                    "pipeline per-thread copy rate cold / hot"};
        for (int d = 0; d < 2; ++d)
            for (size_t n : sizes) {
                auto get = [&](const char *metric, const char *mode) {
                    return find([&](const Result &r) {
                        return r.part == "l" && r.dir == kDirs[d] && r.size == n && r.metric == metric && r.mode == mode;
                    });
                };
                const Result *lc = get("library", "cold"), *lh = get("library", "hot");
                const Result *pc = get("pipeline", "cold"), *ph = get("pipeline", "hot");
                const Result *bc = get("pipeline thread-seconds", "cold"), *bh = get("pipeline thread-seconds", "hot");
                if (!lc || !lh || !pc || !ph || !bc || !bh) continue;
                t.rows.push_back({kDirs[d], fmt_size(n),
                                  format("%s, %d, %d, %s", fmt_size(pc->chunk).c_str(), pc->threads, pc->slots,
                                         pc->stores.c_str()),
                                  gbs_of(lc), gbs_of(pc), format("%.2fx", lc->gbs() / pc->gbs()), gbs_of(lh), gbs_of(ph),
                                  format("%.2fx", lh->gbs() / ph->gbs()),
                                  fmt_gbs(bc->gbs()) + " / " + fmt_gbs(bh->gbs())});
            }
        if (!t.rows.empty())
            out += "\n### (l) The library's memcpy_sync beside the probe's pipeline, same buffers, one process\n\n"
                   "Library: `" + library + "`. Cold: threads asleep (2 ms idle before); hot: right after an untimed "
                   "copy of the same size. H2D ends when the data has landed. Per-thread copy rate: bytes / the "
                   "pipeline threads' summed copy time (compare the library's trace, `busyN`).\n\n" +
                   t.render();
    }
    // ---- (r) ----
    {
        auto rcfg = [](const Result *r) {
            return r ? format("%s (C=%s, T=%d, K=%d, %s)", fmt_time(r->med).c_str(), fmt_size(r->chunk).c_str(),
                              r->threads, r->slots, r->stores.c_str())
                     : std::string("-");
        };
        auto time_of = [](const Result *r) { return r ? fmt_time(r->med) : std::string("-"); };
        MdTable t;
        t.left = 1;
        t.header = {"size", "link (pinned both ways)", "pipelines hot, best (C, T, K, H2D stores)", "pipelines cold, best",
                    "library cold", "library hot", "library cold / pipelines cold"};
        for (size_t n : sizes) {
            auto is = [&](const Result &r) { return r.part == "r" && r.size == n; };
            const Result *link = find([&](const Result &r) { return is(r) && r.metric == "link (pinned)"; });
            if (!link) continue;
            const Result *hot = best([&](const Result &r) { return is(r) && r.mode == "hot"; });
            const Result *cold = best([&](const Result &r) { return is(r) && r.mode == "cold"; });
            const Result *lc = find([&](const Result &r) { return is(r) && r.metric == "library" && r.mode == "cold"; });
            const Result *lh = find([&](const Result &r) { return is(r) && r.metric == "library" && r.mode == "hot"; });
            t.rows.push_back({fmt_size(n), time_of(link), rcfg(hot), rcfg(cold), time_of(lc), time_of(lh),
                              lc && cold ? format("%.2fx", lc->med / cold->med) : "-"});
        }
        if (!t.rows.empty())
            out += "\n### (r) The tensor round trip: H2D, then D2H of the same bytes queued behind it, us\n\n"
                   "Until the data is back in pageable memory. Pipelines: (d)'s, the H2D returning once its last "
                   "DMA is queued (its source read), the D2H's DMAs queued right behind on the same stream, its "
                   "copy-out with glibc's stores; hot: threads spinning; cold: asleep at the start, woken for the "
                   "copy. Library (--library): malloc_device + memcpy_sync H2D + memcpy_sync D2H + free_device, cold "
                   "(3 ms idle first) and hot (right after); > 1.00x: the library slower than the probe's best "
                   "cold pipelines.\n\n" +
                   t.render();
    }
    out += format("\nProbe took %.0f s.\n", now_s() - start);
    if (!skipped.empty()) {
        out += format("\nSkipped (time budget of %.0f s spent):", budget_s);
        for (const auto &s : skipped) out += " `" + s + "`;";
        out += "\n";
    }
    for (const auto &f : failures) out += "\n**DATA CHECK FAILED**: " + f + "\n";
    return out;
}

void Probe::write_csv() const {
    FILE *f = std::fopen(csv.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "pageable_probe: cannot write %s\n", csv.c_str());
        return;
    }
    std::fprintf(f, "part,direction,metric,size,chunk,threads,slots,mode,stores,busy,median_s,gbs,samples_s\n");
    for (const auto &r : results) {
        const bool copy = r.metric == "copy" || r.part == "g" || r.part == "l" || r.part == "r";
        // a round trip (r) moves its bytes over the link twice
        const double gbs = copy ? r.gbs() * (r.part == "r" ? 2 : 1) : 0.0;
        std::fprintf(f, "%s,%s,\"%s\",%zu,%zu,%d,%d,%s,%s,%d,%.6e,%.3f,", r.part.c_str(), r.dir.c_str(), r.metric.c_str(),
                     r.size, r.chunk, r.threads, r.slots, r.mode.c_str(), r.stores.c_str(), r.busy, r.med, gbs);
        for (size_t k = 0; k < r.samples.size(); ++k) std::fprintf(f, "%s%.6e", k ? ";" : "", r.samples[k]);
        std::fprintf(f, "\n");
    }
    std::fclose(f);
}

void usage(const char *argv0) {
    std::fprintf(stderr,
                 "usage: %s [options]\n"
                 "  --quick          sizes 1, 16, 64 MiB; chunks 256 KiB, 1 MiB, 4 MiB; T 4, 12; K 4 (a smoke run)\n"
                 "  --parts LETTERS  which parts to run, of abcdefglr (default abcdefg)\n"
                 "  --budget-s S     start no new group of measurements after S seconds (default 360)\n"
                 "  --csv FILE       write every result with its samples to FILE\n"
                 "  --sizes LIST     copy sizes, e.g. 1M,16M (K and M suffixes; default 1M,4M,16M,64M,256M)\n"
                 "  --chunks LIST    pipeline chunks (default 256K,512K,1M,2M,4M,8M)\n"
                 "  --threads LIST   host threads for (c) and (d), at most 64 (default 1,2,4,8,12 and 4,8,12)\n"
                 "  --slots LIST     staging buffers for (d), 2 to 4 (default 2,4)\n"
                 "  --evict-mib M    before each timed repetition of (c), (d), (g) read M MiB of other memory (caches cold)\n"
                 "  --stores LIST    host copies of (c), (d), (g): memcpy (glibc), stream (non-temporal stores, as the\n"
                 "                   library's), stream-noahead (the same without its prefetch), ahead (ordinary\n"
                 "                   stores with that prefetch), demote (memcpy,\n"
                 "                   then CLDEMOTE of the lines written; default memcpy,stream)\n"
                 "  --library PATH   part l: a llaisys runtime table library (e.g. libllaisys_nvidia.so) measured\n"
                 "                   beside the probe's pipeline; --parts must name l (not in the default parts);\n"
                 "                   with part r (round trip, not in the default parts either) also its round trip\n"
                 "  --library-symbol S  its table getter (default llaisysNvidiaGetRuntimeAPI)\n",
                 argv0);
}

// "256K", "1M", "4096" -> bytes; 0 when malformed.
size_t parse_size(const std::string &s) {
    char *end = nullptr;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (end == s.c_str()) return 0;
    std::string unit(end);
    if (unit == "K" || unit == "KiB") v *= KiB;
    else if (unit == "M" || unit == "MiB") v *= MiB;
    else if (!unit.empty()) return 0;
    return static_cast<size_t>(v);
}

template <class T>
std::vector<T> parse_list(const std::string &opt, const std::string &text, T lo, T hi, T (*conv)(const std::string &)) {
    std::vector<T> out;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t comma = text.find(',', pos);
        std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        T v = conv(item);
        if (!(v >= lo && v <= hi)) die(2, "%s: '%s' is not a value in range", opt.c_str(), item.c_str());
        out.push_back(v);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}
int parse_int(const std::string &s) {
    char *end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    return end != s.c_str() && *end == 0 && v > 0 && v < INT_MAX ? static_cast<int>(v) : 0;
}

std::string utc_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm;
    gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
    return buf;
}

}  // namespace

int main(int argc, char **argv) {
    program_name() = "pageable_probe";
    Probe P;
    std::string sizes_opt, chunks_opt, threads_opt, slots_opt, stores_opt;
    std::string symbol = "llaisysNvidiaGetRuntimeAPI";
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage(argv[0]);
                die(2, "%s needs a value", a.c_str());
            }
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            usage(argv[0]);
            return 0;
        } else if (a == "--quick") P.quick = true;
        else if (a == "--parts") P.parts = value();
        else if (a == "--budget-s") P.budget_s = std::atof(value().c_str());
        else if (a == "--evict-mib") P.evict_bytes = static_cast<size_t>(parse_int(value())) * MiB;
        else if (a == "--csv") P.csv = value();
        else if (a == "--sizes") sizes_opt = value();
        else if (a == "--chunks") chunks_opt = value();
        else if (a == "--threads") threads_opt = value();
        else if (a == "--slots") slots_opt = value();
        else if (a == "--stores") stores_opt = value();
        else if (a == "--library") P.library = value();
        else if (a == "--library-symbol") symbol = value();
        else {
            usage(argv[0]);
            die(2, "unknown argument %s", a.c_str());
        }
    }
    if (P.parts.find_first_not_of("abcdefglr") != std::string::npos || P.parts.empty())
        die(2, "--parts takes letters of abcdefglr, got '%s'", P.parts.c_str());
    if (P.want('l') && P.library.empty()) die(2, "part l needs --library PATH (a llaisys runtime table library)");
    if (!stores_opt.empty()) {
        // Each kind as 1 + its enumerator (0: not a kind's name), in the enumeration's order.
        auto kinds = parse_list<int>("--stores", stores_opt, 1, static_cast<int>(Stores::Ahead) + 1,
                                     [](const std::string &v) {
                                         const Stores s = stores_of(v);
                                         return v == stores_name(s) ? static_cast<int>(s) + 1 : 0;
                                     });
        P.stores.clear();
        for (int k : kinds) P.stores.push_back(static_cast<Stores>(k - 1));
    }

    if (P.quick) {
        P.sizes = {1 * MiB, 16 * MiB, 64 * MiB};
        P.chunks = {256 * KiB, 1 * MiB, 4 * MiB};
        P.copy_threads = {1, 4, 12};
        P.pipe_threads = {4, 12};
        P.slot_counts = {4};
    } else {
        P.sizes = {1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB};
        P.chunks = {256 * KiB, 512 * KiB, 1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB};
        P.copy_threads = {1, 2, 4, 8, 12};
        P.pipe_threads = {4, 8, 12};
        P.slot_counts = {2, 4};
    }
    if (!sizes_opt.empty()) P.sizes = parse_list<size_t>("--sizes", sizes_opt, 4 * KiB, 4096 * MiB, parse_size);
    if (!chunks_opt.empty()) P.chunks = parse_list<size_t>("--chunks", chunks_opt, 4 * KiB, 256 * MiB, parse_size);
    if (!threads_opt.empty())
        P.copy_threads = P.pipe_threads = P.wake_threads = parse_list<int>("--threads", threads_opt, 1, 64, parse_int);
    // One buffer cannot overlap: the next chunk would overwrite it before its DMA was queued.
    if (!slots_opt.empty()) P.slot_counts = parse_list<int>("--slots", slots_opt, 2, 4, parse_int);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1)
        die(3, "no CUDA device available (cudaGetDeviceCount: %s (%d): %s; %d devices); this probe needs a GPU: "
               "run it on the GPU machine (bash gpu-stage/bench.sh --probe)",
            cudaGetErrorName(e), static_cast<int>(e), cudaGetErrorString(e), count);

    if (P.want('l') || (P.want('r') && !P.library.empty())) {
        // The library keeps its own cudart; both share the device's primary context.
        P.table = load_runtime_table("--library", P.library, symbol.c_str());
        P.table->set_device(0);
    }
    const size_t max_size = P.sizes.back();
    const size_t max_staging = static_cast<size_t>(*std::max_element(P.slot_counts.begin(), P.slot_counts.end())) *
                               *std::max_element(P.chunks.begin(), P.chunks.end());

    double t0 = now_s();
    PROBE_CUDA(cudaSetDevice(0));
    PROBE_CUDA(cudaFree(nullptr));
    double init_s = now_s() - t0;
    cudaDeviceProp prop;
    std::memset(&prop, 0, sizeof prop);
    PROBE_CUDA(cudaGetDeviceProperties(&prop, 0));
    int runtime = 0, driver = 0;
    PROBE_CUDA(cudaRuntimeGetVersion(&runtime));
    PROBE_CUDA(cudaDriverGetVersion(&driver));

    P.pg_src = static_cast<unsigned char *>(std::malloc(max_size));
    P.pg_dst = static_cast<unsigned char *>(std::malloc(max_size));
    if (!P.pg_src || !P.pg_dst) die(2, "malloc(%zu) of pageable memory failed", max_size);
    fill_pattern(P.pg_src, max_size, 41);
    std::memset(P.pg_dst, 0x5A, max_size);  // touched: no first-touch page fault is timed
    PROBE_CUDA(cudaMallocHost(reinterpret_cast<void **>(&P.pin), max_size));
    PROBE_CUDA(cudaMallocHost(reinterpret_cast<void **>(&P.staging), max_staging));
    std::memset(P.pin, 0, max_size);
    if (P.want('g')) {
        PROBE_CUDA(cudaMallocHost(reinterpret_cast<void **>(&P.pin2), max_size));
        std::memset(P.pin2, 0, max_size);
    }
    std::memset(P.staging, 0, max_staging);
    if (P.evict_bytes) {
        P.evict_buf = static_cast<unsigned char *>(std::malloc(P.evict_bytes));
        if (!P.evict_buf) die(2, "malloc(%zu) for --evict-mib failed", P.evict_bytes);
        std::memset(P.evict_buf, 1, P.evict_bytes);
    }
    PROBE_CUDA(cudaMalloc(reinterpret_cast<void **>(&P.dev), max_size));
    PROBE_CUDA(cudaMalloc(reinterpret_cast<void **>(&P.dev_src), max_size));
    PROBE_CUDA(cudaMemcpy(P.dev_src, P.pg_src, max_size, cudaMemcpyHostToDevice));
    PROBE_CUDA(cudaStreamCreateWithFlags(&P.stream, cudaStreamNonBlocking));
    for (auto &ev : P.ev) PROBE_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    PROBE_CUDA(cudaDeviceSynchronize());

    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::string kmod = kernel_driver_version();
    std::string header = "## Pageable copy floor probe (benches/pageable_probe.cpp)\n\n";
    header += format("- %s, host `%s`, CPU %s (%ld online)\n", utc_now().c_str(), host, cpu_model().c_str(),
                     sysconf(_SC_NPROCESSORS_ONLN));
    header += format("- GPU %s (sm_%d%d, PCI %04x:%02x:%02x); driver %s%sCUDA %d.%d; cudart %d.%d; context %s\n", prop.name,
                     prop.major, prop.minor, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, kmod.c_str(),
                     kmod.empty() ? "" : ", ", driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10,
                     fmt_time(init_s).c_str());
    header += "- method: host clock around each copy until its data is in place; medians of 7-15 repetitions after a "
              "warm-up that is also the data check; GB/s = 1e9 bytes/s; pipeline threads are T workers plus the "
              "main thread, which queues DMAs and waits (spinning) on events\n";
    if (P.evict_bytes)
        header += format("- caches cold: before each timed repetition of (c), (d) and (g) the main thread read %zu MiB of "
                         "other memory (--evict-mib)\n",
                         P.evict_bytes / MiB);
    std::string cmd = "pageable_probe";
    for (int i = 1; i < argc; ++i) cmd += std::string(" ") + argv[i];
    header += format("- command: `%s` (budget %.0f s)\n\n", cmd.c_str(), P.budget_s);

    std::fprintf(stderr, "pageable_probe: %s, parts %s\n", prop.name, P.parts.c_str());
    struct Part {
        char id;
        void (Probe::*run)();
    };
    const Part parts[] = {{'a', &Probe::part_a_b}, {'c', &Probe::part_c}, {'d', &Probe::part_d},
                          {'e', &Probe::part_e}, {'f', &Probe::part_f}, {'g', &Probe::part_g},
                          {'l', &Probe::part_l}, {'r', &Probe::part_r}};
    for (const Part &p : parts) {
        bool wanted = p.id == 'a' ? (P.want('a') || P.want('b')) : P.want(p.id);
        if (!wanted) continue;
        if (P.out_of_time()) {
            P.skipped.push_back(format("(%c)", p.id));
            continue;
        }
        (P.*p.run)();
    }

    if (!P.csv.empty()) P.write_csv();
    std::string md = P.markdown(header);
    std::fwrite(md.data(), 1, md.size(), stdout);
    std::fflush(stdout);

    for (auto &ev : P.ev) cudaEventDestroy(ev);
    cudaStreamDestroy(P.stream);
    cudaFree(P.dev);
    cudaFree(P.dev_src);
    cudaFreeHost(P.pin);
    cudaFreeHost(P.staging);
    if (P.pin2) cudaFreeHost(P.pin2);
    std::free(P.pg_src);
    std::free(P.pg_dst);
    return P.failures.empty() ? 0 : 1;
}

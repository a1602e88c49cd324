// Captures that the host's own graph code begins (cudaStreamBeginCapture on a create_stream
// stream, as a llaisys core with graphs of its own does) while other threads use the library,
// compiled on the GPU machine with nvcc and linked against our staticlib or cdylib:
//   capture_race copies MODE [N]   N captures (default 200) in MODE (global, thread_local,
//                                  relaxed), each replayed and its result checked, while another
//                                  thread runs malloc_device/free_device and memcpy_sync of 4 KiB,
//                                  1 MiB and 64 MiB, H2D, D2D and D2H, from and to pageable and
//                                  pinned memory, every copy checked; no call of the other
//                                  thread may fail, at most 3% of the captures may be
//                                  invalidated (the residual window of docs/graphs.md)
//   capture_race rate MODE N       the same with short captures (5 kernels), counting the
//                                  captures invalidated (prints "invalidated X of N captures"); the
//                                  copies must still all succeed
//   capture_race stress SECONDS    four threads run every table call in a loop while a fifth
//                                  captures and replays, in turn through
//                                  llaisysNvidiaStreamBeginCapture (every mode) and
//                                  cudaStreamBeginCapture (thread-local and relaxed); the only
//                                  failures allowed are capture refusals
//                                  (LLAISYS_NVIDIA_ERROR_CAPTURE), every result is checked, no
//                                  capture through the library may be invalidated; the direct
//                                  captures invalidated (the residual window that `rate`
//                                  measures) are counted
// Prints "ok: N checks" (and the counts) and exits 0, or names the failed check and exits 1.
#include "llaisys_runtime.h"

#include <cuda_runtime.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

static std::atomic<long> checks{0};
#define CHECK_COUNT() (++checks)
// A failed check ends the process at once: exit() would run static destructors while the other
// threads still call the library.
#define CHECK_FAILED() (std::fflush(nullptr), std::_Exit(1))
#include "../c/check.h"
#define OK(call) CHECK((call) == LLAISYS_NVIDIA_SUCCESS)

static const int kFloats = 16;  // 64 B
static const size_t KiB = 1024, MiB = 1024 * KiB;

__global__ void add_in(float *state, const float *in) { state[threadIdx.x] += in[0]; }

// Errors the table reports, per thread: how many, and the last one's status.
// Inside a capture the host began itself (`in_direct_capture`), the capturing thread's own
// errors are counted apart: once another thread's call has invalidated that capture, its copies
// fail with cudaErrorStreamCaptureInvalidated, which `once` accepts only for an invalidated one.
static thread_local int my_errors = 0;
static thread_local bool in_direct_capture = false;
static thread_local int direct_capture_errors = 0;
static std::atomic<int> refusals{0}, other_errors{0};
static void on_error(const llaisysNvidiaError *e, void *) {
    ++my_errors;
    if (in_direct_capture) {
        ++direct_capture_errors;
    } else if (e->status == LLAISYS_NVIDIA_ERROR_CAPTURE) {
        ++refusals;
    } else {
        ++other_errors;
        std::fprintf(stderr, "error: %s\n", e->message);
    }
}

static cudaStreamCaptureMode mode_of(const char *name) {
    if (!std::strcmp(name, "global")) return cudaStreamCaptureModeGlobal;
    if (!std::strcmp(name, "thread_local")) return cudaStreamCaptureModeThreadLocal;
    if (!std::strcmp(name, "relaxed")) return cudaStreamCaptureModeRelaxed;
    std::fprintf(stderr, "unknown mode %s (global, thread_local, relaxed)\n", name);
    std::exit(2);
}

// One graph: the input's H2D copy through the table, `kernels` kernels, the D2H copy of the state.
struct Graphs {
    const LlaisysRuntimeAPI *api;
    llaisysStream_t s;
    float *state, *in, *h_in, *h_out;
    float expect = 0.0f;
    long captured = 0, invalidated = 0;

    explicit Graphs(const LlaisysRuntimeAPI *a) : api(a) {
        s = api->create_stream();
        state = static_cast<float *>(api->malloc_device(kFloats * sizeof(float)));
        in = static_cast<float *>(api->malloc_device(kFloats * sizeof(float)));
        h_in = static_cast<float *>(api->malloc_host(kFloats * sizeof(float)));
        h_out = static_cast<float *>(api->malloc_host(kFloats * sizeof(float)));
        CHECK(s && state && in && h_in && h_out);
        std::vector<float> zero(kFloats, 0.0f);
        api->memcpy_sync(state, zero.data(), kFloats * sizeof(float), LLAISYS_MEMCPY_H2D);
    }
    ~Graphs() {
        api->free_device(state);
        api->free_device(in);
        api->free_host(h_in);
        api->free_host(h_out);
        api->destroy_stream(s);
    }

    // Captures one graph (through the library when `through_api`), replays it once and checks
    // the result; a capture that was invalidated is counted and skipped.
    void once(int mode, bool through_api, int kernels) {
        float v = static_cast<float>(captured % 5 + 1);
        for (int i = 0; i < kFloats; ++i) h_in[i] = v;
        const int errors_before = direct_capture_errors;
        if (through_api) {
            OK(llaisysNvidiaStreamBeginCapture(s, mode, 0));
        } else {
            CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(s), static_cast<cudaStreamCaptureMode>(mode)) ==
                  cudaSuccess);
            in_direct_capture = true;
        }
        api->memcpy_async(in, h_in, kFloats * sizeof(float), LLAISYS_MEMCPY_H2D, s);
        for (int k = 0; k < kernels; ++k) add_in<<<1, kFloats, 0, static_cast<cudaStream_t>(s)>>>(state, in);
        api->memcpy_async(h_out, state, kFloats * sizeof(float), LLAISYS_MEMCPY_D2H, s);
        cudaGraph_t graph = nullptr;
        ++captured;
        if (through_api) {
            OK(llaisysNvidiaStreamEndCapture(s, reinterpret_cast<llaisysNvidiaGraph_t *>(&graph)));
        } else {
            in_direct_capture = false;
            if (cudaStreamEndCapture(static_cast<cudaStream_t>(s), &graph) != cudaSuccess) {
                cudaGetLastError();
                if (graph) cudaGraphDestroy(graph);
                ++invalidated;
                return;
            }
            CHECK(direct_capture_errors == errors_before);  // a valid capture saw no error
        }
        CHECK(graph != nullptr);
        cudaGraphExec_t exec = nullptr;
        CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        CHECK(cudaGraphLaunch(exec, static_cast<cudaStream_t>(s)) == cudaSuccess);
        api->stream_synchronize(s);
        expect += v * kernels;
        for (int i = 0; i < kFloats; ++i) CHECK(h_out[i] == expect);
        CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
        if (through_api)
            OK(llaisysNvidiaGraphDestroy(reinterpret_cast<llaisysNvidiaGraph_t>(graph)));
        else
            CHECK(cudaGraphDestroy(graph) == cudaSuccess);
    }
};

// Host buffers of `n` bytes, pageable and pinned, with a pattern tagged by `round` in every 4 KiB.
struct HostPair {
    std::vector<unsigned char> page_src, page_dst;
    unsigned char *pin_src, *pin_dst;
    const LlaisysRuntimeAPI *api;
    HostPair(const LlaisysRuntimeAPI *a, size_t n) : page_src(n), page_dst(n), api(a) {
        pin_src = static_cast<unsigned char *>(api->malloc_host(n));
        pin_dst = static_cast<unsigned char *>(api->malloc_host(n));
        CHECK(pin_src && pin_dst);
        for (size_t i = 0; i < n; ++i) page_src[i] = pin_src[i] = static_cast<unsigned char>(i * 131 + 7);
    }
    ~HostPair() {
        api->free_host(pin_src);
        api->free_host(pin_dst);
    }
    static void tag(unsigned char *p, size_t n, long round) {
        for (size_t i = 0; i < n; i += 4 * KiB) std::memcpy(p + i, &round, sizeof round);
    }
};

// H2D into a new block, D2D into another, D2H back: the result must equal the source. False when
// a call was refused (only capture refusals are allowed; the caller counts the others).
static bool chain(const LlaisysRuntimeAPI *api, unsigned char *src, unsigned char *dst, size_t n, long round) {
    HostPair::tag(src, n, round);
    void *a = api->malloc_device(n), *b = api->malloc_device(n);
    int before = my_errors;
    bool done = false;
    if (a && b) {
        std::memset(dst, 0, n);
        api->memcpy_sync(a, src, n, LLAISYS_MEMCPY_H2D);
        api->memcpy_sync(b, a, n, LLAISYS_MEMCPY_D2D);
        api->memcpy_sync(dst, b, n, LLAISYS_MEMCPY_D2H);
        done = my_errors == before;
        if (done) CHECK(std::memcmp(dst, src, n) == 0);
    }
    api->free_device(a);
    api->free_device(b);
    return done;
}

// The copies of `copies` and `rate`: every size, pageable and pinned, with small allocations
// between them, until `stop`.
static void copy_loop(const LlaisysRuntimeAPI *api, std::atomic<bool> &stop, std::atomic<long> &copies,
                      std::atomic<bool> &ready) {
    const size_t sizes[] = {4 * KiB, 1 * MiB, 64 * MiB};
    HostPair h(api, 64 * MiB);
    ready = true;
    for (long round = 1; !stop; ++round) {
        for (size_t n : sizes) {
            for (int pinned = 0; pinned < 2 && !stop; ++pinned) {
                void *t = api->malloc_device(256 + (round % 7) * 512);
                CHECK(t != nullptr);
                api->free_device(t);
                unsigned char *src = pinned ? h.pin_src : h.page_src.data();
                unsigned char *dst = pinned ? h.pin_dst : h.page_dst.data();
                if (chain(api, src, dst, n, round)) ++copies;
            }
        }
    }
}

static int copies_case(const LlaisysRuntimeAPI *api, cudaStreamCaptureMode mode, int n, int kernels, bool strict) {
    Graphs g(api);
    // What the library asks before each use of the legacy stream: another thread sees it blocked
    // by this capture, whatever its mode, and asking does not invalidate the capture.
    CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(g.s), mode) == cudaSuccess);
    cudaError_t seen = cudaSuccess;
    std::thread([&] {
        cudaStreamCaptureStatus status;
        seen = cudaStreamIsCapturing(cudaStreamLegacy, &status);
        cudaGetLastError();
    }).join();
    cudaGraph_t probe = nullptr;
    CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(g.s), &probe) == cudaSuccess && probe);
    CHECK(cudaGraphDestroy(probe) == cudaSuccess);
    std::printf("another thread asking about the legacy stream during the capture: %s\n", cudaGetErrorName(seen));
    CHECK(seen == cudaErrorStreamCaptureImplicit);
    std::atomic<bool> stop{false}, ready{false};
    std::atomic<long> copies{0};
    std::thread other([&] { copy_loop(api, stop, copies, ready); });
    while (!ready) std::this_thread::yield();
    // At least n captures, and as many as it takes for the copies to go round every size and kind
    // twice (12 chains) beside them.
    for (int i = 0; i < n || copies.load() < 12; ++i) g.once(mode, false, kernels);
    stop = true;
    other.join();
    std::printf("invalidated %ld of %ld captures; %ld copy chains (H2D, D2D, D2H) beside them\n", g.invalidated,
                g.captured, copies.load());
    CHECK(copies.load() >= 12);
    // A capture that wins the race with a copy costs the copy nothing: it never fails.
    CHECK(other_errors.load() == 0);
    if (strict) {
        // The residual window of docs/graphs.md (a capture begun between the library's check
        // and its use of the legacy stream): 0.7% of these captures on an H100 (up to 1.6% in
        // one run). Far above, the copies use the legacy stream without asking again.
        CHECK(g.invalidated * 100 <= 3 * g.captured);
        CHECK(refusals.load() == 0);  // memcpy_sync never refuses on a thread that does not capture
    }
    return 0;
}

// Every table call, in a loop until `stop`; copies checked when they were not refused.
static void table_loop(const LlaisysRuntimeAPI *api, std::atomic<bool> &stop, std::atomic<long> &rounds) {
    HostPair h(api, 2 * MiB);
    for (long round = 1; !stop; ++round) {
        CHECK(api->get_device_count() >= 1);
        api->set_device(0);
        llaisysStream_t s = api->create_stream();
        void *d = api->malloc_device(1 * MiB);
        void *p = api->malloc_host(64 * KiB);
        CHECK(s && d && p);
        chain(api, h.page_src.data(), h.page_dst.data(), (round % 2) ? 1 * MiB : 8 * KiB, round);
        chain(api, h.pin_src, h.pin_dst, 64 * KiB, round);
        int before = my_errors;
        std::memset(p, 0, 64 * KiB);
        api->memcpy_sync(p, h.pin_src, 64 * KiB, LLAISYS_MEMCPY_H2H);
        api->memcpy_async(d, p, 64 * KiB, LLAISYS_MEMCPY_H2D, s);
        api->memcpy_async(h.pin_dst, d, 64 * KiB, LLAISYS_MEMCPY_D2H, s);
        api->stream_synchronize(s);
        if (my_errors == before) CHECK(std::memcmp(h.pin_dst, h.pin_src, 64 * KiB) == 0);
        api->memcpy_async(d, h.pin_src, 4 * KiB, LLAISYS_MEMCPY_H2D, nullptr);  // may be refused
        api->stream_synchronize(nullptr);                                     // may be refused
        api->device_synchronize();                                            // may be refused
        api->free_host(p);
        api->free_device(d);
        api->destroy_stream(s);
        ++rounds;
    }
}

static int stress_case(const LlaisysRuntimeAPI *api, double seconds) {
    std::atomic<bool> stop{false};
    std::atomic<long> rounds{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t) workers.emplace_back([&] { table_loop(api, stop, rounds); });
    const int modes[] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed};
    long api_captures = 0, direct_captures = 0, direct_invalidated = 0;
    {
        Graphs g(api);
        auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        for (long i = 0; std::chrono::steady_clock::now() < end; ++i) {
            if (i % 2 == 0) {
                g.once(modes[i / 2 % 3], true, 20);
                ++api_captures;
            } else {
                // Direct captures in thread-local and relaxed mode: in global mode CUDA itself
                // forbids the other threads' waits (stream_synchronize of their own streams),
                // as under any runtime; `copies global` covers what the library does then.
                long before = g.invalidated;
                g.once(modes[1 + i / 2 % 2], false, 20);
                ++direct_captures;
                direct_invalidated += g.invalidated - before;
            }
        }
    }
    stop = true;
    for (auto &w : workers) w.join();
    std::printf("%ld captures through the library (none invalidated), %ld direct (%ld invalidated); "
                "%ld rounds of every table call, %d capture refusals\n",
                api_captures, direct_captures, direct_invalidated, rounds.load(), refusals.load());
    CHECK(api_captures > 0 && direct_captures > 0 && rounds.load() > 0);
    CHECK(other_errors.load() == 0);
    return 0;
}

// A crash names where it happened (built with -g -rdynamic: the functions, the library's too).
static void on_crash(int sig, siginfo_t *info, void *) {
    char line[96];
    int n = std::snprintf(line, sizeof line, "crash: signal %d at address %p, backtrace:\n", sig, info->si_addr);
    if (n > 0) (void)!write(2, line, static_cast<size_t>(n));
    void *frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
    std::_Exit(128 + sig);
}

int main(int argc, char **argv) {
    struct sigaction sa {};
    sa.sa_sigaction = on_crash;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    const char *which = argc > 1 ? argv[1] : "";
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    llaisysNvidiaSetErrorHandler(on_error, nullptr);
    CHECK(api->get_device_count() >= 1);
    api->set_device(0);
    int rc = 2;
    if (!std::strcmp(which, "copies") && argc > 2) {
        rc = copies_case(api, mode_of(argv[2]), argc > 3 ? std::atoi(argv[3]) : 200, 50, true);
    } else if (!std::strcmp(which, "rate") && argc > 3) {
        rc = copies_case(api, mode_of(argv[2]), std::atoi(argv[3]), 5, false);
    } else if (!std::strcmp(which, "stress") && argc > 2) {
        rc = stress_case(api, std::atof(argv[2]));
    } else {
        std::fprintf(stderr, "usage: capture_race copies MODE [N] | rate MODE N | stress SECONDS\n");
    }
    if (rc == 0) {
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        std::printf("ok: %ld checks\n", checks.load());
    }
    return rc;
}

// A C++ host that captures llaisys-style decode steps as CUDA graphs through our library,
// compiled on the GPU machine with nvcc (its own shared cudart) and linked against our
// staticlib or cdylib. A step: a 64 B H2D copy and a D2H copy through the table on a
// create_stream stream, kernels of the host's own on that stream, temporaries from
// malloc_device freed in the step. Every replay's result is checked. Cases:
//   graph_client api       capture through llaisysNvidiaStreamBeginCapture in each mode, with
//                          temporaries; replays after eager churn of the same sizes; a shared pool
//   graph_client direct    the host's own cudaStreamBeginCapture on our stream in each mode,
//                          with temporaries (the capture must stay valid)
//   graph_client threads   a thread-local or relaxed capture on one thread while another thread
//                          calls malloc_device, free_device, memcpy_sync of every kind, streams
//   graph_client refusals  what a global capture forbids is refused, the capture stays valid
// Prints "ok: N checks" and exits 0, or names the failed check and exits 1.
#include "llaisys_runtime.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

static std::atomic<int> checks{0};
// Checks run on several threads: the count is atomic, and a failed one's line ends with the
// thread's last error.
static void print_last_error() {
    char msg[512];
    llaisysNvidiaLastErrorMessage(msg, sizeof msg);
    std::fprintf(stderr, " (last error: %s)", msg);
}
#define CHECK_COUNT() (++checks)
#define CHECK_DETAIL() print_last_error()
#include "../c/check.h"
#define OK(call) CHECK((call) == LLAISYS_NVIDIA_SUCCESS)

static const int kFloats = 16;  // 64 B

// state[i] += in[0], K times per step; the temporaries take a copy of the state.
__global__ void add_in(float *state, const float *in) { state[threadIdx.x] += in[0]; }
__global__ void copy_to(float *dst, const float *src) { dst[threadIdx.x] = src[threadIdx.x]; }

// The table's error handler: count errors instead of printing them (the refusals below expect
// some).
static std::atomic<int> handler_calls{0};
static void count_errors(const llaisysNvidiaError *, void *) { ++handler_calls; }

struct Step {
    const LlaisysRuntimeAPI *api;
    llaisysStream_t s;
    float *state;   // device, persistent
    float *h_in;    // pinned, the step's input
    float *h_out;   // pinned, the step's output
    int kernels;
    void *last_tmp = nullptr;

    // The step as a core runs it (no final synchronize: the caller does it or captures).
    void run() {
        float *in = static_cast<float *>(api->malloc_device(kFloats * sizeof(float)));
        float *tmp = static_cast<float *>(api->malloc_device(64 << 10));
        CHECK(in && tmp);
        last_tmp = tmp;
        api->memcpy_async(in, h_in, kFloats * sizeof(float), LLAISYS_MEMCPY_H2D, s);
        for (int k = 0; k < kernels; ++k) add_in<<<1, kFloats, 0, static_cast<cudaStream_t>(s)>>>(state, in);
        copy_to<<<1, kFloats, 0, static_cast<cudaStream_t>(s)>>>(tmp, state);
        api->memcpy_async(h_out, tmp, kFloats * sizeof(float), LLAISYS_MEMCPY_D2H, s);
        api->free_device(in);
        api->free_device(tmp);
    }
};

static Step make_step(const LlaisysRuntimeAPI *api, int kernels) {
    Step st{};
    st.api = api;
    st.kernels = kernels;
    st.s = api->create_stream();
    CHECK(st.s != nullptr);
    st.state = static_cast<float *>(api->malloc_device(kFloats * sizeof(float)));
    st.h_in = static_cast<float *>(api->malloc_host(kFloats * sizeof(float)));
    st.h_out = static_cast<float *>(api->malloc_host(kFloats * sizeof(float)));
    CHECK(st.state && st.h_in && st.h_out);
    std::vector<float> zero(kFloats, 0.0f);
    api->memcpy_sync(st.state, zero.data(), kFloats * sizeof(float), LLAISYS_MEMCPY_H2D);
    return st;
}

static void free_step(Step &st) {
    st.api->free_device(st.state);
    st.api->free_host(st.h_in);
    st.api->free_host(st.h_out);
    st.api->destroy_stream(st.s);
}

// Launches `exec` `replays` times, each with a new input, and checks every result; `expect` is
// the state before.
static float replay_and_check(Step &st, llaisysNvidiaGraphExec_t exec, int replays, float expect) {
    for (int r = 0; r < replays; ++r) {
        float v = static_cast<float>(r % 5 + 1);
        for (int i = 0; i < kFloats; ++i) st.h_in[i] = v;
        OK(llaisysNvidiaGraphLaunch(exec, st.s));
        st.api->stream_synchronize(st.s);
        expect += v * st.kernels;
        for (int i = 0; i < kFloats; ++i) CHECK(st.h_out[i] == expect);
    }
    return expect;
}

// Eager allocations of the sizes the graph's temporaries have, each filled with garbage: if the
// graph's memory were handed out, a replay would read it.
static void churn(const LlaisysRuntimeAPI *api) {
    std::vector<void *> held;
    for (int i = 0; i < 64; ++i) {
        void *a = api->malloc_device(kFloats * sizeof(float));
        void *b = api->malloc_device(64 << 10);
        CHECK(a && b);
        CHECK(cudaMemset(a, 0x7f, kFloats * sizeof(float)) == cudaSuccess);
        CHECK(cudaMemset(b, 0x7f, 64 << 10) == cudaSuccess);
        held.push_back(a);
        held.push_back(b);
        if (i % 3 == 0) {
            api->free_device(held.back());
            held.pop_back();
        }
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    for (void *p : held) api->free_device(p);
}

static int api_case(const LlaisysRuntimeAPI *api) {
    for (int mode : {LLAISYS_NVIDIA_CAPTURE_MODE_GLOBAL, LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL,
                     LLAISYS_NVIDIA_CAPTURE_MODE_RELAXED}) {
        Step st = make_step(api, 200);
        for (int i = 0; i < kFloats; ++i) st.h_in[i] = 1.0f;
        OK(llaisysNvidiaStreamBeginCapture(st.s, mode, 0));
        int status = -1;
        OK(llaisysNvidiaStreamCaptureStatus(st.s, &status));
        CHECK(status == LLAISYS_NVIDIA_CAPTURE_STATUS_ACTIVE);
        st.run();
        void *first_tmp = st.last_tmp;
        // A second step in the same capture: blocks freed by the first are not reused in it.
        st.run();
        CHECK(st.last_tmp != first_tmp);
        llaisysNvidiaGraph_t graph = nullptr;
        OK(llaisysNvidiaStreamEndCapture(st.s, &graph));
        CHECK(graph != nullptr);
        char log[256] = "x";
        llaisysNvidiaGraphExec_t exec = nullptr;
        OK(llaisysNvidiaGraphInstantiate(&exec, graph, log, sizeof log));
        CHECK(exec != nullptr && log[0] == 0);
        OK(llaisysNvidiaGraphUpload(exec, st.s));
        st.kernels *= 2;  // two steps per replay
        float expect = replay_and_check(st, exec, 3, 0.0f);
        churn(api);
        expect = replay_and_check(st, exec, 3, expect);
        OK(llaisysNvidiaGraphExecDestroy(exec));
        OK(llaisysNvidiaGraphDestroy(graph));
        free_step(st);
    }
    // A shared pool: the second capture reuses what the first freed; both replay in order.
    llaisysNvidiaGraphPool_t pool = 0;
    OK(llaisysNvidiaGraphPoolCreate(&pool));
    CHECK(pool != 0);
    Step st = make_step(api, 50);
    llaisysNvidiaGraph_t g[2] = {nullptr, nullptr};
    llaisysNvidiaGraphExec_t x[2] = {nullptr, nullptr};
    void *tmp[2] = {nullptr, nullptr};
    for (int i = 0; i < 2; ++i) {
        OK(llaisysNvidiaStreamBeginCapture(st.s, LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL, pool));
        st.run();
        tmp[i] = st.last_tmp;
        OK(llaisysNvidiaStreamEndCapture(st.s, &g[i]));
        OK(llaisysNvidiaGraphInstantiate(&x[i], g[i], nullptr, 0));
    }
    CHECK(tmp[0] == tmp[1]);
    OK(llaisysNvidiaGraphPoolRelease(pool));
    float expect = 0.0f;
    for (int r = 0; r < 4; ++r) expect = replay_and_check(st, x[r % 2], 1, expect);
    // Update in place (same topology), then a graph of another shape (re-instantiated).
    int again = -1;
    OK(llaisysNvidiaGraphExecUpdate(&x[0], g[1], &again));
    CHECK(again == 0);
    expect = replay_and_check(st, x[0], 1, expect);
    OK(llaisysNvidiaStreamBeginCapture(st.s, LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL, 0));
    st.run();
    st.run();
    llaisysNvidiaGraph_t g2 = nullptr;
    OK(llaisysNvidiaStreamEndCapture(st.s, &g2));
    llaisysNvidiaGraphExec_t old = x[0];
    OK(llaisysNvidiaGraphExecUpdate(&x[0], g2, &again));
    CHECK(again == 1 && x[0] != old);
    CHECK(llaisysNvidiaGraphLaunch(old, st.s) == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT);
    st.kernels *= 2;
    expect = replay_and_check(st, x[0], 2, expect);
    for (int i = 0; i < 2; ++i) {
        OK(llaisysNvidiaGraphExecDestroy(x[i]));
        OK(llaisysNvidiaGraphDestroy(g[i]));
    }
    OK(llaisysNvidiaGraphDestroy(g2));
    free_step(st);
    return 0;
}

static int direct_case(const LlaisysRuntimeAPI *api) {
    for (cudaStreamCaptureMode mode :
         {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed}) {
        Step st = make_step(api, 50);
        for (int i = 0; i < kFloats; ++i) st.h_in[i] = 1.0f;
        // Eager frees before the capture, so that some are pending when it begins.
        churn(api);
        CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(st.s), mode) == cudaSuccess);
        for (int i = 0; i < 20; ++i) st.run();  // enough frees for the caches' batch to fill
        cudaGraph_t graph = nullptr;
        CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(st.s), &graph) == cudaSuccess);
        CHECK(graph != nullptr);
        cudaGraphExec_t exec = nullptr;
        CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        for (int i = 0; i < kFloats; ++i) st.h_in[i] = 2.0f;
        CHECK(cudaGraphLaunch(exec, static_cast<cudaStream_t>(st.s)) == cudaSuccess);
        api->stream_synchronize(st.s);
        for (int i = 0; i < kFloats; ++i) CHECK(st.h_out[i] == 2.0f * 50 * 20);
        CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
        CHECK(cudaGraphDestroy(graph) == cudaSuccess);
        free_step(st);
    }
    return 0;
}

// Another thread's table calls while `st.s` captures; every copy checked.
static void other_thread_work(const LlaisysRuntimeAPI *api, std::atomic<bool> &failed) {
    std::vector<unsigned char> page(4 << 20), back(4 << 20);
    for (size_t i = 0; i < page.size(); ++i) page[i] = static_cast<unsigned char>(i * 131 + 7);
    unsigned char *pinned = static_cast<unsigned char *>(api->malloc_host(1 << 20));
    llaisysStream_t s2 = api->create_stream();
    if (!pinned || !s2) failed = true;
    for (int round = 0; round < 24 && !failed; ++round) {
        size_t n = (round % 3 == 0) ? (4 << 20) : (round % 3 == 1 ? 4096 : (96 << 10) + 4096 * round);
        void *d = api->malloc_device(n);
        void *d2 = api->malloc_device(n);
        if (!d || !d2) {
            failed = true;
            break;
        }
        api->memcpy_sync(d, page.data(), n, LLAISYS_MEMCPY_H2D);
        api->memcpy_sync(d2, d, n, LLAISYS_MEMCPY_D2D);
        std::memset(back.data(), 0, n);
        api->memcpy_sync(back.data(), d2, n, LLAISYS_MEMCPY_D2H);
        if (std::memcmp(back.data(), page.data(), n) != 0) failed = true;
        size_t m = n < (1u << 20) ? n : (1u << 20);
        api->memcpy_sync(pinned, page.data(), m, LLAISYS_MEMCPY_H2H);
        api->memcpy_async(d, pinned, m, LLAISYS_MEMCPY_H2D, s2);
        api->stream_synchronize(s2);
        api->memcpy_sync(back.data(), d, m, LLAISYS_MEMCPY_D2H);
        if (std::memcmp(back.data(), page.data(), m) != 0) failed = true;
        api->free_device(d);
        api->free_device(d2);
    }
    api->free_host(pinned);
    api->destroy_stream(s2);
}

static int threads_case(const LlaisysRuntimeAPI *api) {
    for (int through_api = 0; through_api < 2; ++through_api) {
        for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed}) {
            Step st = make_step(api, 100);
            for (int i = 0; i < kFloats; ++i) st.h_in[i] = 1.0f;
            if (through_api)
                OK(llaisysNvidiaStreamBeginCapture(st.s, static_cast<int>(mode), 0));
            else
                CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(st.s), mode) == cudaSuccess);
            std::atomic<bool> failed{false};
            int errors_before = handler_calls.load();
            std::thread other([&] { other_thread_work(api, failed); });
            for (int i = 0; i < 5; ++i) st.run();
            other.join();
            CHECK(!failed);
            CHECK(handler_calls.load() == errors_before);
            cudaGraph_t graph = nullptr;
            if (through_api) {
                OK(llaisysNvidiaStreamEndCapture(st.s, reinterpret_cast<llaisysNvidiaGraph_t *>(&graph)));
            } else {
                CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(st.s), &graph) == cudaSuccess);
            }
            CHECK(graph != nullptr);
            cudaGraphExec_t exec = nullptr;
            CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
            for (int i = 0; i < kFloats; ++i) st.h_in[i] = 3.0f;
            CHECK(cudaGraphLaunch(exec, static_cast<cudaStream_t>(st.s)) == cudaSuccess);
            api->stream_synchronize(st.s);
            for (int i = 0; i < kFloats; ++i) CHECK(st.h_out[i] == 3.0f * 100 * 5);
            CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
            if (through_api)
                OK(llaisysNvidiaGraphDestroy(graph));
            else
                CHECK(cudaGraphDestroy(graph) == cudaSuccess);
            free_step(st);
        }
    }
    return 0;
}

static int refusals_case(const LlaisysRuntimeAPI *api) {
    Step st = make_step(api, 10);
    std::vector<char> host(64);
    void *d = api->malloc_device(64);
    OK(llaisysNvidiaStreamBeginCapture(st.s, LLAISYS_NVIDIA_CAPTURE_MODE_GLOBAL, 0));
    st.run();
    // On the capturing thread (global mode): refused with the capture status, capture intact.
    CHECK(llaisysNvidiaMemcpy(host.data(), d, 64, LLAISYS_MEMCPY_D2H) == LLAISYS_NVIDIA_ERROR_CAPTURE);
    CHECK(llaisysNvidiaDeviceSynchronize() == LLAISYS_NVIDIA_ERROR_CAPTURE);
    CHECK(llaisysNvidiaStreamSynchronize(st.s) == LLAISYS_NVIDIA_ERROR_CAPTURE);
    CHECK(llaisysNvidiaStreamSynchronize(nullptr) == LLAISYS_NVIDIA_ERROR_CAPTURE);
    CHECK(llaisysNvidiaMemcpyAsync(d, host.data(), 64, LLAISYS_MEMCPY_H2D, nullptr) == LLAISYS_NVIDIA_ERROR_CAPTURE);
    CHECK(llaisysNvidiaReleaseCachedMemory() == LLAISYS_NVIDIA_ERROR_CAPTURE);
    CHECK(llaisysNvidiaStreamDestroy(st.s) == LLAISYS_NVIDIA_ERROR_CAPTURE);
    // The table reports through the handler and returns.
    int before = handler_calls.load();
    api->device_synchronize();
    CHECK(handler_calls.load() == before + 1);
    // Another thread: device_synchronize refused; its own stream work fine.
    std::thread other([&] {
        CHECK(llaisysNvidiaDeviceSynchronize() == LLAISYS_NVIDIA_ERROR_CAPTURE);
        llaisysStream_t s2 = nullptr;
        OK(llaisysNvidiaStreamCreate(&s2, 0, 0));
        OK(llaisysNvidiaMemcpyAsync(d, host.data(), 64, LLAISYS_MEMCPY_H2D, s2));
        OK(llaisysNvidiaStreamSynchronize(s2));
        OK(llaisysNvidiaStreamDestroy(s2));
    });
    other.join();
    int status = -1;
    OK(llaisysNvidiaStreamCaptureStatus(st.s, &status));
    CHECK(status == LLAISYS_NVIDIA_CAPTURE_STATUS_ACTIVE);
    llaisysNvidiaGraph_t graph = nullptr;
    OK(llaisysNvidiaStreamEndCapture(st.s, &graph));
    llaisysNvidiaGraphExec_t exec = nullptr;
    OK(llaisysNvidiaGraphInstantiate(&exec, graph, nullptr, 0));
    for (int i = 0; i < kFloats; ++i) st.h_in[i] = 1.0f;
    replay_and_check(st, exec, 2, 0.0f);
    // Everything works again once the capture has ended.
    OK(llaisysNvidiaDeviceSynchronize());
    OK(llaisysNvidiaReleaseCachedMemory());
    OK(llaisysNvidiaGraphExecDestroy(exec));
    OK(llaisysNvidiaGraphDestroy(graph));
    api->free_device(d);
    free_step(st);
    return 0;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "";
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    llaisysNvidiaSetErrorHandler(count_errors, nullptr);
    CHECK(api->get_device_count() >= 1);
    api->set_device(0);
    int rc = 2;
    if (!std::strcmp(which, "api")) rc = api_case(api);
    else if (!std::strcmp(which, "direct")) rc = direct_case(api);
    else if (!std::strcmp(which, "threads")) rc = threads_case(api);
    else if (!std::strcmp(which, "refusals")) rc = refusals_case(api);
    else std::fprintf(stderr, "usage: graph_client api|direct|threads|refusals\n");
    if (rc == 0) {
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        std::printf("ok: %d checks\n", checks.load());
    }
    return rc;
}

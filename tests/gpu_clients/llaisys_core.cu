// A C++ host that behaves like a llaisys core, compiled on the GPU machine with nvcc and its own
// SHARED cudart (--cudart shared), linked against our staticlib or our cdylib. It uses our
// streams and memory from its own kernels and copies and checks every byte. Modes:
//   llaisys_core core       the core's pattern + mixing with the host's own cudart
//   llaisys_core deferred   a faulting kernel: the next table call reports a deferred error
// Prints "ok: N checks" and exits 0, or names the failed check and exits 1.
#include "llaisys_nvidia_exceptions.hpp"

#include "../c/check.h"
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUDA_OK(call) CHECK((call) == cudaSuccess)

__global__ void add_one(unsigned char *p, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = (unsigned char)(p[i] + 1);
}

__global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

__global__ void fault(int *p) { *p = 1; }

static void pattern(unsigned char *p, size_t n, unsigned seed) {
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

static int core() {
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    int n = api->get_device_count();
    CHECK(n >= 1);
    int host_count = 0;
    CUDA_OK(cudaGetDeviceCount(&host_count));
    CHECK(host_count == n);

    // Runtime(type, id): create_stream in the constructor, set_device later.
    llaisysStream_t stream = api->create_stream();
    CHECK(stream != nullptr);
    api->set_device(0);

    // CPU tensors on malloc_host; a tensor load from pageable memory; debug read-back.
    const size_t size = (64u << 20) + 5;
    std::vector<unsigned char> pageable(size), back(size);
    pattern(pageable.data(), size, 7);
    auto *pinned = static_cast<unsigned char *>(api->malloc_host(size));
    CHECK(pinned != nullptr);
    void *dev = api->malloc_device(size);
    CHECK(dev != nullptr);
    api->memcpy_sync(dev, pageable.data(), size, LLAISYS_MEMCPY_H2D);  // Tensor::load

    // The host's own kernel on OUR stream and OUR memory (a different cudart than ours).
    auto s = static_cast<cudaStream_t>(stream);
    add_one<<<(unsigned)((size + 255) / 256), 256, 0, s>>>(static_cast<unsigned char *>(dev), size);
    CUDA_OK(cudaGetLastError());
    api->memcpy_async(pinned, dev, size, LLAISYS_MEMCPY_D2H, stream);
    api->stream_synchronize(stream);
    for (size_t i = 0; i < size; ++i) {
        if (pinned[i] != (unsigned char)(pageable[i] + 1)) {
            std::fprintf(stderr, "byte %zu: %u != %u + 1\n", i, pinned[i], pageable[i]);
            CHECK(false);
        }
    }
    ++checks;

    // Tensor::debug: device_synchronize + memcpy_sync D2H to pageable.
    api->device_synchronize();
    api->memcpy_sync(back.data(), dev, size, LLAISYS_MEMCPY_D2H);
    CHECK(std::memcmp(back.data(), pinned, size) == 0);

    // The host's own cudaMemcpy on our memory, and our D2D on memory the host allocated
    // (llaisys's test helpers copy torch tensors in with D2D).
    void *theirs = nullptr;
    CUDA_OK(cudaMalloc(&theirs, size));
    api->memcpy_sync(theirs, dev, size, LLAISYS_MEMCPY_D2D);
    std::memset(back.data(), 0, size);
    CUDA_OK(cudaMemcpy(back.data(), theirs, size, cudaMemcpyDeviceToHost));
    CHECK(std::memcmp(back.data(), pinned, size) == 0);

    // Stream ordering across the two cudarts: long work on our stream, then our async copy must
    // wait for it (the kernel bumps the data after the spin).
    spin<<<1, 1, 0, s>>>(20000000);
    add_one<<<(unsigned)((size + 255) / 256), 256, 0, s>>>(static_cast<unsigned char *>(dev), size);
    api->memcpy_async(pinned, dev, size, LLAISYS_MEMCPY_D2H, stream);
    api->stream_synchronize(stream);
    for (size_t i = 0; i < size; i += 4093) CHECK(pinned[i] == (unsigned char)(pageable[i] + 2));

    // Errors become exceptions with the C++ helper.
    {
        llaisys_nvidia::scoped_exception_handler scope;
        bool caught = false;
        try {
            api->malloc_device((size_t)1 << 62);
        } catch (const llaisys_nvidia::error &e) {
            caught = e.cuda_error() == 2 && e.function() == "malloc_device";
        }
        CHECK(caught);
    }

    CUDA_OK(cudaFree(theirs));
    api->free_device(dev);
    api->free_host(pinned);
    api->destroy_stream(stream);
    api->device_synchronize();
    std::printf("ok: %d checks\n", checks);
    return 0;
}

static struct {
    int calls, status, cuda_error;
    char message[512];
} seen;

static void record(const llaisysNvidiaError *e, void *) {
    seen.calls++;
    seen.status = e->status;
    seen.cuda_error = e->cuda_error;
    std::snprintf(seen.message, sizeof seen.message, "%s", e->message);
}

static int deferred() {
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    llaisysNvidiaSetErrorHandler(record, nullptr);
    api->set_device(0);
    llaisysStream_t stream = api->create_stream();
    fault<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(reinterpret_cast<int *>(16));
    // An innocent call: the fault surfaces here and must be reported as deferred.
    api->stream_synchronize(stream);
    CHECK(seen.calls >= 1);
    CHECK(seen.status == LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA);
    CHECK(seen.cuda_error == 700 || seen.cuda_error == 719);
    CHECK(std::strstr(seen.message, "earlier asynchronous work") != nullptr);
    std::printf("deferred error reported: %s\n", seen.message);
    // Later calls keep reporting it as deferred, never as their own fault.
    int before = seen.calls;
    void *p = api->malloc_device(1024);
    CHECK(p == nullptr);
    CHECK(seen.calls == before + 1 && seen.status == LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA);
    std::printf("ok: %d checks\n", checks);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && std::strcmp(argv[1], "core") == 0) return core();
    if (argc == 2 && std::strcmp(argv[1], "deferred") == 0) return deferred();
    std::fprintf(stderr, "usage: %s core|deferred\n", argv[0]);
    return 2;
}

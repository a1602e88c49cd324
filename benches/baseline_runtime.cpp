// baseline_runtime.cpp: the "reference" column of every benchmark: a llaisys runtime table in which
// each function is the one cudart call it names, with no caches, checks or error handling, as
// llaisys's assignment describes it. Exported as seedGetRuntimeAPI, so any baseline exporting that
// name can replace it (LLAISYS_BENCH_BASELINE); built by scripts/gpu-bench.sh with nvcc's static
// cudart (-Xlinker --exclude-libs,ALL), and by the host tests against a stand-in cudart.
#include <cuda_runtime_api.h>

#include "llaisys_runtime.h"

namespace {

int get_device_count() {
    int count = 0;
    // No driver or no GPU: 0, as llaisys expects of a machine without devices.
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    return count;
}

void set_device(int device) { cudaSetDevice(device); }

void device_synchronize() { cudaDeviceSynchronize(); }

llaisysStream_t create_stream() {
    cudaStream_t stream = nullptr;
    cudaStreamCreate(&stream);
    return stream;
}

void destroy_stream(llaisysStream_t stream) { cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }

void stream_synchronize(llaisysStream_t stream) { cudaStreamSynchronize(static_cast<cudaStream_t>(stream)); }

void *malloc_device(size_t size) {
    void *ptr = nullptr;
    cudaMalloc(&ptr, size);
    return ptr;
}

void free_device(void *ptr) { cudaFree(ptr); }

void *malloc_host(size_t size) {
    void *ptr = nullptr;
    cudaMallocHost(&ptr, size);
    return ptr;
}

void free_host(void *ptr) { cudaFreeHost(ptr); }

// llaisysMemcpyKind_t's values are cudaMemcpyKind's (H2H 0, H2D 1, D2H 2, D2D 3).
void memcpy_sync(void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind) {
    cudaMemcpy(dst, src, size, static_cast<cudaMemcpyKind>(kind));
}

void memcpy_async(void *dst, const void *src, size_t size, llaisysMemcpyKind_t kind, llaisysStream_t stream) {
    cudaMemcpyAsync(dst, src, size, static_cast<cudaMemcpyKind>(kind), static_cast<cudaStream_t>(stream));
}

// In the ABI's field order.
const LlaisysRuntimeAPI kTable = {
    get_device_count, set_device,  device_synchronize, create_stream, destroy_stream, stream_synchronize,
    malloc_device,    free_device, malloc_host,        free_host,     memcpy_sync,    memcpy_async,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const LlaisysRuntimeAPI *seedGetRuntimeAPI() { return &kTable; }

// backends.hpp: table_bench's backends behind one compile-time interface. TableBackend: a llaisys
// runtime table loaded with dlopen by its getter's symbol. RawBackend: the reference's cudart calls
// made directly and inlined into the timed loops (the floor; templates, so no indirection at all).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "bench_util.hpp"
#include "llaisys_runtime.h"
#include "runtime_table.hpp"

namespace bench {

struct TableBackend {
    const LlaisysRuntimeAPI *t = nullptr;

    int get_device_count() { return t->get_device_count(); }
    void set_device(int id) { t->set_device(id); }
    void device_synchronize() { t->device_synchronize(); }
    llaisysStream_t create_stream() { return t->create_stream(); }
    void destroy_stream(llaisysStream_t s) { t->destroy_stream(s); }
    void stream_synchronize(llaisysStream_t s) { t->stream_synchronize(s); }
    void *malloc_device(size_t n) { return t->malloc_device(n); }
    void free_device(void *p) { t->free_device(p); }
    void *malloc_host(size_t n) { return t->malloc_host(n); }
    void free_host(void *p) { t->free_host(p); }
    void memcpy_sync(void *d, const void *s, size_t n, llaisysMemcpyKind_t k) { t->memcpy_sync(d, s, n, k); }
    void memcpy_async(void *d, const void *s, size_t n, llaisysMemcpyKind_t k, llaisysStream_t st) {
        t->memcpy_async(d, s, n, k, st);
    }
};

// The table of `path`, fetched by its getter `symbol` (runtime_table.hpp: exits on any failure).
inline TableBackend load_table(const std::string &label, const std::string &path, const char *symbol) {
    TableBackend b;
    b.t = load_runtime_table(label, path, symbol);
    return b;
}

// Every return code is checked (a predictable branch costs nothing measurable); a failure ends the
// run with the call's name, since the raw path has no other way to report one.
#define BENCH_CUDA(call)                                                                         \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (__builtin_expect(e_ != cudaSuccess, 0))                                              \
            ::bench::die(1, "raw cudart: %s failed: %s (%d): %s", #call, cudaGetErrorName(e_),   \
                         static_cast<int>(e_), cudaGetErrorString(e_));                          \
    } while (0)

struct RawBackend {
    // The floor of a device cache on a stream-ordered pool (ours is): release threshold at the
    // maximum so freed memory stays, used on the legacy stream. Made by make_pool.
    cudaMemPool_t pool = nullptr;
    // --raw-pool: raw's device buffers come from that pool too, to show what pool memory costs a copy.
    bool pool_buffers = false;

    void make_pool(int device) {
        cudaMemPoolProps props;
        std::memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        BENCH_CUDA(cudaMemPoolCreate(&pool, &props));
        uint64_t threshold = UINT64_MAX;
        BENCH_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    }
    void *malloc_pool(size_t n) {
        void *p = nullptr;
        BENCH_CUDA(cudaMallocFromPoolAsync(&p, n, pool, nullptr));
        return p;
    }
    void free_pool(void *p) { BENCH_CUDA(cudaFreeAsync(p, nullptr)); }

    int get_device_count() {
        int c = 0;
        BENCH_CUDA(cudaGetDeviceCount(&c));
        return c;
    }
    void set_device(int id) { BENCH_CUDA(cudaSetDevice(id)); }
    void device_synchronize() { BENCH_CUDA(cudaDeviceSynchronize()); }
    llaisysStream_t create_stream() {
        cudaStream_t s = nullptr;
        BENCH_CUDA(cudaStreamCreate(&s));
        return static_cast<llaisysStream_t>(s);
    }
    void destroy_stream(llaisysStream_t s) { BENCH_CUDA(cudaStreamDestroy(static_cast<cudaStream_t>(s))); }
    void stream_synchronize(llaisysStream_t s) { BENCH_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(s))); }
    void *malloc_device(size_t n) {
        if (pool_buffers) return malloc_pool(n);
        void *p = nullptr;
        BENCH_CUDA(cudaMalloc(&p, n));
        return p;
    }
    void free_device(void *p) {
        if (pool_buffers) return free_pool(p);
        BENCH_CUDA(cudaFree(p));
    }
    void *malloc_host(size_t n) {
        void *p = nullptr;
        BENCH_CUDA(cudaMallocHost(&p, n));
        return p;
    }
    void free_host(void *p) { BENCH_CUDA(cudaFreeHost(p)); }
    void memcpy_sync(void *d, const void *s, size_t n, llaisysMemcpyKind_t k) {
        BENCH_CUDA(cudaMemcpy(d, s, n, static_cast<cudaMemcpyKind>(k)));
    }
    void memcpy_async(void *d, const void *s, size_t n, llaisysMemcpyKind_t k, llaisysStream_t st) {
        BENCH_CUDA(cudaMemcpyAsync(d, s, n, static_cast<cudaMemcpyKind>(k), static_cast<cudaStream_t>(st)));
    }
};

template <class B>
constexpr bool is_raw() {
    return std::is_same<typename std::decay<B>::type, RawBackend>::value;
}

// Device allocation as the rows tagged "pool" measure it: through the table for the libraries,
// and with cudaMallocFromPoolAsync / cudaFreeAsync on the raw backend's pool for the raw column.
template <class B>
void *pool_or_table_malloc_device(B &b, size_t n) {
    if constexpr (is_raw<B>()) return b.malloc_pool(n);
    else return b.malloc_device(n);
}
template <class B>
void pool_or_table_free_device(B &b, void *p) {
    if constexpr (is_raw<B>()) b.free_pool(p);
    else b.free_device(p);
}

// The machine, for the table's header line.
struct MachineInfo {
    std::string gpu, driver, cpu;
    int runtime_version = 0, driver_api_version = 0;
};

inline MachineInfo machine_info(int device) {
    MachineInfo m;
    cudaDeviceProp p;
    std::memset(&p, 0, sizeof p);
    BENCH_CUDA(cudaGetDeviceProperties(&p, device));
    m.gpu = format("%s (sm_%d%d, %.1f GiB, PCI %04x:%02x:%02x)", p.name, p.major, p.minor,
                   static_cast<double>(p.totalGlobalMem) / (1ull << 30), p.pciDomainID, p.pciBusID, p.pciDeviceID);
    BENCH_CUDA(cudaRuntimeGetVersion(&m.runtime_version));
    BENCH_CUDA(cudaDriverGetVersion(&m.driver_api_version));
    std::string kmod = kernel_driver_version();
    m.driver = format("%s%sCUDA %d.%d", kmod.c_str(), kmod.empty() ? "" : ", ", m.driver_api_version / 1000,
                      (m.driver_api_version % 1000) / 10);
    m.cpu = cpu_model();
    return m;
}

}  // namespace bench

// backends.hpp: the four things table_bench measures, behind one compile-time interface.
//   TableBackend: a llaisys runtime table loaded from a shared library with dlopen and fetched by
//                 its getter's symbol name (ours: llaisysNvidiaGetRuntimeAPI; the reference:
//                 seedGetRuntimeAPI). The bench sees only the table.
//   RawBackend:   the CUDA runtime calls the reference makes, called directly by this program (the
//                 cudart linked into table_bench), inlined into the timed loops: the floor.
// Workloads are templates over the backend type, so the raw path has no indirection at all.
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "bench_util.hpp"
#include "llaisys_runtime.h"

namespace bench {

static_assert(sizeof(LlaisysRuntimeAPI) == 12 * sizeof(void *), "the llaisys table has 12 function pointers");

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

// dlopens `path` (RTLD_NOW | RTLD_LOCAL: each library keeps its own cudart and symbols) and calls
// the table getter `symbol`. Exits with a clear message when either is missing.
inline TableBackend load_table(const std::string &label, const std::string &path, const char *symbol) {
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) die(2, "%s: cannot load %s: %s", label.c_str(), path.c_str(), dlerror());
    dlerror();
    void *sym = dlsym(h, symbol);
    const char *err = dlerror();
    if (err || !sym) die(2, "%s: %s has no symbol %s: %s", label.c_str(), path.c_str(), symbol, err ? err : "NULL");
    using Getter = const LlaisysRuntimeAPI *(*)();
    Getter get = reinterpret_cast<Getter>(sym);
    TableBackend b;
    b.t = get();
    if (!b.t) die(2, "%s: %s() returned NULL", label.c_str(), symbol);
    const void *const *fns = reinterpret_cast<const void *const *>(b.t);
    for (int i = 0; i < 12; ++i)
        if (!fns[i]) die(2, "%s: table entry %d of %s is NULL", label.c_str(), i, path.c_str());
    return b;  // the handle stays open for the life of the process
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
        void *p = nullptr;
        BENCH_CUDA(cudaMalloc(&p, n));
        return p;
    }
    void free_device(void *p) { BENCH_CUDA(cudaFree(p)); }
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

// The machine, for the table's header line.
struct MachineInfo {
    std::string gpu, driver, cpu;
    int runtime_version = 0, driver_api_version = 0;
};

// The kernel module's version ("580.159.04") from /proc/driver/nvidia/version; "" when absent.
inline std::string kernel_driver_version() {
    FILE *f = std::fopen("/proc/driver/nvidia/version", "r");
    if (!f) return "";
    char line[512] = {0};
    bool got = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    if (!got) return "";
    // The first token shaped like digits.digits[.digits].
    for (char *tok = std::strtok(line, " \t\n"); tok; tok = std::strtok(nullptr, " \t\n")) {
        int dots = 0;
        bool ok = tok[0] >= '0' && tok[0] <= '9';
        for (char *c = tok; ok && *c; ++c) {
            if (*c == '.') ++dots;
            else if (*c < '0' || *c > '9') ok = false;
        }
        if (ok && dots >= 1) return tok;
    }
    return "";
}

inline std::string cpu_model() {
    FILE *f = std::fopen("/proc/cpuinfo", "r");
    if (!f) return "";
    char line[512];
    std::string model;
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "model name", 10) == 0) {
            const char *colon = std::strchr(line, ':');
            if (colon) {
                model = colon + 1;
                while (!model.empty() && (model.front() == ' ' || model.front() == '\t')) model.erase(0, 1);
                while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
            }
            break;
        }
    }
    std::fclose(f);
    return model;
}

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

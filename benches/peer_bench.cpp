// peer_bench: copies between two GPUs, and the cost of llaisys's stream-before-set_device
// pattern. Needs two devices; built and run by scripts/gpu-bench.sh --peer.
//
//   peer_bench <our libllaisys_nvidia.so> <reference libbaseline_runtime.so>
//
// Part 1: raw cudaMemcpyPeer, ours llaisysNvidiaMemcpyPeer, ours and the reference's memcpy_sync D2D,
// each repetition followed by cudaDeviceSynchronize on both devices (completed copies). Part 2: 256 MiB
// copies on a stream made while device 0 was current (llaisys's Runtime(1)) vs one made on device 1.
// Output: Markdown tables on stdout; a data check after every column.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstring>

#include "bench_util.hpp"
#include "llaisys_runtime.h"
#include "runtime_table.hpp"

using bench::format;

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) bench::die(2, "%s: %s (%s:%d)", #x, cudaGetErrorString(e_), \
                                          __FILE__, __LINE__);                             \
    } while (0)

typedef int (*peer_fn)(void *, int, const void *, int, size_t);

static void *sym(const char *lib, const char *name) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) bench::die(2, "dlopen %s: %s", lib, dlerror());
    void *s = dlsym(h, name);
    if (!s) bench::die(2, "dlsym %s in %s: %s", name, lib, dlerror());
    return s;
}

static void sync_both() {
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceSynchronize());
    }
}

// Median seconds of `reps` runs of f (after 2 warm-ups).
template <class F> static double time_it(int reps, F f) {
    std::vector<double> v;
    for (int i = 0; i < reps + 2; ++i) {
        double t0 = bench::now_s();
        f();
        double t = bench::now_s() - t0;
        if (i >= 2) v.push_back(t);
    }
    return bench::median(v);
}

static void check(const void *dev, const std::vector<unsigned char> &want, size_t n, const char *what) {
    std::vector<unsigned char> got(n);
    CK(cudaMemcpy(got.data(), dev, n, cudaMemcpyDeviceToHost));
    if (std::memcmp(got.data(), want.data(), n) != 0) bench::die(1, "DATA CHECK FAILED: %s", what);
}

static std::string gbps(size_t n, double s) { return format("%.1f", n / s / 1e9); }

int main(int argc, char **argv) {
    if (argc != 3) bench::die(2, "usage: peer_bench <libllaisys_nvidia.so> <libbaseline_runtime.so>");
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count < 2) bench::die(2, "needs two devices, found %d", count);
    auto ours_peer = reinterpret_cast<peer_fn>(sym(argv[1], "llaisysNvidiaMemcpyPeer"));
    auto ours = bench::load_runtime_table("ours", argv[1], "llaisysNvidiaGetRuntimeAPI");
    auto ref = bench::load_runtime_table("reference", argv[2], "seedGetRuntimeAPI");
    int can01 = 0, can10 = 0;
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        cudaError_t e = cudaDeviceEnablePeerAccess(1 - d, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
        (void)cudaGetLastError();
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    std::printf("## Peer copies, 2x %s (can access peer 0->1 %d, 1->0 %d)\n\n", p.name, can01, can10);
    std::printf("GB/s (median of the repetitions; each = the copy + cudaDeviceSynchronize on both devices)\n\n");
    std::printf("| size | direction | raw cudaMemcpyPeer | ours MemcpyPeer | ours/raw | ours memcpy_sync D2D | reference memcpy_sync D2D | ours D2D/ref |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    const size_t sizes[] = {64 << 10, 1 << 20, 16 << 20, 256 << 20, size_t(1) << 30};
    const size_t max = sizes[sizeof sizes / sizeof *sizes - 1];
    // raw and reference copy cudaMalloc memory; ours its malloc_device's pools, as a llaisys core would.
    void *buf[2], *obuf[2];
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&buf[d], max));
        ours->set_device(d);
        obuf[d] = ours->malloc_device(max);
    }
    std::vector<unsigned char> pat(max);
    for (size_t i = 0; i < max; ++i) pat[i] = (unsigned char)(i * 131 + (i >> 12));
    for (size_t n : sizes) {
        int reps = n >= (256 << 20) ? 10 : 50;
        for (int src = 0; src < 2; ++src) {
            int dst = 1 - src;
            CK(cudaSetDevice(src));
            CK(cudaMemcpy(buf[src], pat.data(), n, cudaMemcpyHostToDevice));
            double raw = time_it(reps, [&] { CK(cudaMemcpyPeer(buf[dst], dst, buf[src], src, n)); sync_both(); });
            check(buf[dst], pat, n, "raw");
            CK(cudaMemset(buf[dst], 0, n));
            CK(cudaSetDevice(src));
            CK(cudaMemcpy(obuf[src], pat.data(), n, cudaMemcpyHostToDevice));
            double op = time_it(reps, [&] {
                if (ours_peer(obuf[dst], dst, obuf[src], src, n) != 0) bench::die(2, "llaisysNvidiaMemcpyPeer failed");
                sync_both();
            });
            check(obuf[dst], pat, n, "ours MemcpyPeer");
            CK(cudaMemset(obuf[dst], 0, n));
            ours->set_device(dst);
            CK(cudaSetDevice(dst));
            double od = time_it(reps, [&] { ours->memcpy_sync(obuf[dst], obuf[src], n, LLAISYS_MEMCPY_D2D); sync_both(); });
            check(obuf[dst], pat, n, "ours memcpy_sync D2D");
            ref->set_device(dst);
            double rd = time_it(reps, [&] { ref->memcpy_sync(buf[dst], buf[src], n, LLAISYS_MEMCPY_D2D); sync_both(); });
            check(buf[dst], pat, n, "reference memcpy_sync D2D");
            std::printf("| %s | %d->%d | %s | %s | %.2fx | %s | %s | %.2fx |\n", bench::fmt_size(n).c_str(), src, dst,
                        gbps(n, raw).c_str(), gbps(n, op).c_str(), raw / op, gbps(n, od).c_str(), gbps(n, rd).c_str(),
                        rd / od);
            std::fflush(stdout);
        }
    }

    for (int d = 0; d < 2; ++d) {
        ours->set_device(d);
        ours->free_device(obuf[d]);
    }
    // Part 2: llaisys's Runtime(1) stream (made while device 0 was current) vs a device-1 stream.
    const size_t n = 256 << 20;
    ours->set_device(0);
    llaisysStream_t early = ours->create_stream();
    ours->set_device(1);
    llaisysStream_t native = ours->create_stream();
    CK(cudaSetDevice(0));
    cudaStream_t raw_early;
    CK(cudaStreamCreate(&raw_early));
    CK(cudaSetDevice(1));
    cudaStream_t raw_native;
    CK(cudaStreamCreate(&raw_native));
    llaisysStream_t os[2] = {early, native};
    cudaStream_t rs[2] = {raw_early, raw_native};
    void *a = ours->malloc_device(n), *b = ours->malloc_device(n);
    void *h = ours->malloc_host(n);
    std::memcpy(h, pat.data(), n);
    std::printf("\n## llaisys's stream-before-set_device, device 1 current, 256 MiB, GB/s\n\n");
    std::printf("| copy | ours, stream of device 0 | ours, stream of device 1 | raw, stream of device 0 | raw, stream of device 1 |\n");
    std::printf("|---|---|---|---|---|\n");
    struct Row { const char *name; void *d; const void *s; int kind; };
    Row rows[] = {{"H2D pinned", a, h, LLAISYS_MEMCPY_H2D}, {"D2D on device 1", b, a, LLAISYS_MEMCPY_D2D},
                  {"D2H pinned", h, b, LLAISYS_MEMCPY_D2H}};
    for (const Row &r : rows) {
        double t[4];
        for (int k = 0; k < 2; ++k) {
            t[k] = time_it(10, [&] { ours->memcpy_async(r.d, r.s, n, (llaisysMemcpyKind_t)r.kind, os[k]); ours->stream_synchronize(os[k]); });
            t[2 + k] = time_it(10, [&] { CK(cudaMemcpyAsync(r.d, r.s, n, (cudaMemcpyKind)r.kind, rs[k])); CK(cudaStreamSynchronize(rs[k])); });
        }
        std::printf("| %s | %s | %s | %s | %s |\n", r.name, gbps(n, t[0]).c_str(), gbps(n, t[1]).c_str(),
                    gbps(n, t[2]).c_str(), gbps(n, t[3]).c_str());
        std::fflush(stdout);
    }
    check(b, pat, n, "pattern through H2D, D2D");

    // Part 3: ways of making a complete peer copy (what llaisysNvidiaMemcpyPeer should be built on).
    std::printf("\n## A complete peer copy 0->1, raw cudart, us (median; + sync of both devices)\n\n");
    std::printf("| size | cudaMemcpyPeer | PeerAsync legacy(src) + sync | PeerAsync legacy(dst) + sync | cudaMemcpy D2D (dst current) + sync | ours MemcpyPeer |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (size_t m : {size_t(64) << 10, size_t(1) << 20}) {
        double v[5];
        v[0] = time_it(50, [&] { CK(cudaMemcpyPeer(buf[1], 1, buf[0], 0, m)); sync_both(); });
        for (int k = 0; k < 2; ++k) {
            v[1 + k] = time_it(50, [&] {
                CK(cudaSetDevice(k));
                CK(cudaMemcpyPeerAsync(buf[1], 1, buf[0], 0, m, 0));
                CK(cudaStreamSynchronize(0));
                sync_both();
            });
        }
        v[3] = time_it(50, [&] {
            CK(cudaSetDevice(1));
            CK(cudaMemcpy(buf[1], buf[0], m, cudaMemcpyDeviceToDevice));
            CK(cudaStreamSynchronize(0));
            sync_both();
        });
        ours->set_device(0);
        void *a0 = ours->malloc_device(m);
        ours->set_device(1);
        v[4] = time_it(50, [&] {
            if (ours_peer(a, 1, a0, 0, m) != 0) bench::die(2, "llaisysNvidiaMemcpyPeer failed");
            sync_both();
        });
        ours->free_device(a0);
        std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", bench::fmt_size(m).c_str(), v[0] * 1e6,
                    v[1] * 1e6, v[2] * 1e6, v[3] * 1e6, v[4] * 1e6);
    }

    // Part 4: cross-device bookkeeping: with two devices in use, memcpy_async asks pointer attributes.
    std::printf("\n## memcpy_async 64 B, two devices in use: ns per call (2000 queued, then waited for)\n\n");
    std::printf("| copy | ours, stream of device 1 | ours, stream of device 0 (llaisys) | raw, stream of device 1 | raw, stream of device 0 |\n|---|---|---|---|---|\n");
    Row small[] = {{"H2D pinned", a, h, LLAISYS_MEMCPY_H2D}, {"D2D", b, a, LLAISYS_MEMCPY_D2D}};
    for (const Row &r : small) {
        double t[4];
        for (int k = 0; k < 4; ++k) {
            llaisysStream_t o = os[1 - k % 2];  // device 1's stream first
            cudaStream_t rw = rs[1 - k % 2];
            t[k] = time_it(9, [&] {
                for (int i = 0; i < 2000; ++i) {
                    if (k < 2) ours->memcpy_async(r.d, r.s, 64, (llaisysMemcpyKind_t)r.kind, o);
                    else CK(cudaMemcpyAsync(r.d, r.s, 64, (cudaMemcpyKind)r.kind, rw));
                }
                if (k < 2) ours->stream_synchronize(o); else CK(cudaStreamSynchronize(rw));
            });
        }
        std::printf("| %s | %.0f | %.0f | %.0f | %.0f |\n", r.name, t[0] / 2000 * 1e9, t[1] / 2000 * 1e9,
                    t[2] / 2000 * 1e9, t[3] / 2000 * 1e9);
    }
    return 0;
}

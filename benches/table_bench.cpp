// table_bench: measures llaisys runtime tables side by side, in one process, one run, alternating:
//   ours static   our cdylib built with the static cudart   (llaisysNvidiaGetRuntimeAPI)
//   ours dynamic  our cdylib built with the shared cudart   (llaisysNvidiaGetRuntimeAPI)
//   reference     benches/baseline_runtime.cpp (cudart called directly, no caches), built with nvcc
//                 -shared by scripts/gpu-bench.sh, or another baseline exporting seedGetRuntimeAPI
//   raw           the same CUDA runtime calls the reference makes, made directly by this program
// Each library is dlopened by path and seen only through its table. Workloads, method and how to
// run: docs/benchmark.md. The usual way: bash scripts/stage-gpu.sh here, then on the GPU machine
// bash gpu-stage/bench.sh (scripts/gpu-bench.sh), which builds this file with
//   nvcc -O2 -std=c++17 -I<csrc> benches/table_bench.cpp -o table_bench -ldl
// Usage: table_bench [options] OURS_STATIC.so OURS_DYNAMIC.so REFERENCE.so   (--help)
// Markdown goes to stdout at the end; progress (one line per workload) to stderr as it runs.
// Exit: 0 measured; 1 a data check failed (the table still prints); 2 bad usage or a library that
// does not load; 3 no CUDA device.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends.hpp"
#include "bench_util.hpp"
#include "runner.hpp"

using namespace bench;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

struct Bufs {
    void *dA = nullptr, *dB = nullptr, *hA = nullptr, *hB = nullptr;
};

// One backend's streams and buffers, every one from its own table, as a llaisys core gets them.
struct Ctx {
    const char *name = "";
    llaisysStream_t s = nullptr, s2 = nullptr;
    void *d64 = nullptr, *h64 = nullptr;  // small buffers for the enqueue rows
    void *h_in = nullptr;                 // the mixed step's pinned input
    // Copy k of a repetition uses set k mod sets, so one buffer's place in memory decides no column.
    Bufs set[2];
    int sets = 1;
    double first_use_s = 0;
};

template <class T>
T *need(T *p, const Ctx &c, const char *what, size_t n) {
    if (!p) die(1, "%s: %s(%zu) returned NULL", c.name, what, n);
    return p;
}

// Non-zero, position-dependent bytes (never time or check on zeros).
void fill_pattern(void *dst, size_t n, uint64_t seed) {
    unsigned char *p = static_cast<unsigned char *>(dst);
    size_t words = n / 8;
    for (size_t i = 0; i < words; ++i) {
        uint64_t x = (seed + i) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 29;
        x |= 0x0101010101010101ull;  // no zero byte
        std::memcpy(p + 8 * i, &x, 8);
    }
    for (size_t i = words * 8; i < n; ++i) p[i] = static_cast<unsigned char>(0xA5 ^ i);
}

// malloc'd (pageable) memory, touched so that first-touch page faults stay out of every clock.
unsigned char *pageable(size_t n, uint64_t seed) {
    unsigned char *p = static_cast<unsigned char *>(std::malloc(n));
    if (!p) die(1, "malloc(%zu) of pageable host memory failed", n);
    fill_pattern(p, n, seed);
    return p;
}

// The mixed many-tensor workload: one inference-like step (see docs/benchmark.md).
struct StepPlan {
    static constexpr int kLayers = 8, kSmallPerLayer = 25;
    std::vector<size_t> small, large;  // 200 sizes in 4 KiB..256 KiB, 8 sizes in 16..64 MiB
    std::vector<int> free_order;       // the order a layer's temporaries are freed in
    size_t in_bytes = 1 * MiB, out_bytes = 64 * KiB, small_copy = 4 * KiB;

    StepPlan() {
        uint64_t x = 0x2545F4914F6CDD1Dull;  // xorshift64: the same plan on every machine
        auto next = [&x]() { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x; };
        for (int i = 0; i < kLayers * kSmallPerLayer; ++i)
            small.push_back((4 * KiB + next() % (252 * KiB + 1) + 15) & ~size_t(15));
        for (int i = 0; i < kLayers; ++i) large.push_back((16 * MiB + next() % (48 * MiB + 1) + 4095) & ~size_t(4095));
        for (int i = 0; i < kSmallPerLayer; ++i) free_order.push_back(i);
        for (int i = kSmallPerLayer - 1; i > 0; --i) std::swap(free_order[i], free_order[next() % (i + 1)]);
    }
};

// One step: 209 allocations, 64 D2D copies, one H2D, one D2H; a layer's buffers are freed (shuffled)
// while copies that read them may still be queued.
template <class B>
void inference_step(B &b, Ctx &c, const StepPlan &p, void *page_out) {
    constexpr int S = StepPlan::kSmallPerLayer;
    void *in = need(b.malloc_device(p.in_bytes), c, "malloc_device", p.in_bytes);
    b.memcpy_async(in, c.h_in, p.in_bytes, LLAISYS_MEMCPY_H2D, c.s);
    void *prev_big = nullptr, *prev_small[S] = {}, *cur_small[S] = {};
    size_t prev_n = p.in_bytes;
    for (int l = 0; l < StepPlan::kLayers; ++l) {
        size_t n = p.large[l];
        void *big = need(b.malloc_device(n), c, "malloc_device", n);
        b.memcpy_async(big, prev_big ? prev_big : in, std::min(prev_n, n), LLAISYS_MEMCPY_D2D, c.s);
        for (int j = 0; j < S; ++j) {
            size_t sn = p.small[l * S + j];
            cur_small[j] = need(b.malloc_device(sn), c, "malloc_device", sn);
            if (j % 4 == 0) b.memcpy_async(cur_small[j], in, p.small_copy, LLAISYS_MEMCPY_D2D, c.s);
        }
        if (prev_big) {
            for (int k = 0; k < S; ++k) b.free_device(prev_small[p.free_order[k]]);
            b.free_device(prev_big);
        }
        prev_big = big;
        prev_n = n;
        std::copy(cur_small, cur_small + S, prev_small);
    }
    b.stream_synchronize(c.s);
    b.memcpy_sync(page_out, prev_big, p.out_bytes, LLAISYS_MEMCPY_D2H);
    for (int k = S - 1; k >= 0; --k) b.free_device(prev_small[p.free_order[k]]);
    b.free_device(prev_big);
    b.free_device(in);
}

struct CopyVariant {
    const char *name;
    llaisysMemcpyKind_t kind;
};
const CopyVariant kVariants[] = {
    {"H2D pinned", LLAISYS_MEMCPY_H2D}, {"H2D pageable", LLAISYS_MEMCPY_H2D}, {"D2H pinned", LLAISYS_MEMCPY_D2H},
    {"D2H pageable", LLAISYS_MEMCPY_D2H}, {"D2D", LLAISYS_MEMCPY_D2D},      {"H2H pinned", LLAISYS_MEMCPY_H2H},
    {"H2H pageable", LLAISYS_MEMCPY_H2H},
};
constexpr int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

void endpoints(int v, const Bufs &c, unsigned char *pA, unsigned char *pB, void *&dst, const void *&src) {
    switch (v) {
    case 0: dst = c.dA; src = c.hA; break;  // H2D pinned
    case 1: dst = c.dA; src = pA; break;    // H2D pageable
    case 2: dst = c.hB; src = c.dB; break;  // D2H pinned
    case 3: dst = pB; src = c.dB; break;    // D2H pageable
    case 4: dst = c.dB; src = c.dA; break;  // D2D
    case 5: dst = c.hB; src = c.hA; break;  // H2H pinned
    default: dst = pB; src = pA; break;     // H2H pageable
    }
}

// "Not below the reference", read as >= 0.98x: the tolerance for noise the other ratio targets use.
Target not_below() { return Target::min_ratio(0.98, ">= 0.98x ref"); }

// Async pinned/D2D targets from 1 MiB only: below, an async copy is one enqueue plus one wait, the same calls for all.
std::vector<Target> copy_targets(int v, bool async, size_t size) {
    const bool pinned_or_d2d = v == 0 || v == 2 || v == 4;
    const bool pageable_h2d_d2h = v == 1 || v == 3;
    std::vector<Target> t;
    if (pageable_h2d_d2h) {
        if (size >= 1 * GiB) return {Target::min_ratio(2.5, ">= 2.5x ref")};
        if (size >= 64 * MiB) t.push_back(Target::min_gbs(48));
        else if (size >= 16 * MiB) t.push_back(Target::min_gbs(40));
        else if (size >= 1 * MiB) t.push_back(Target::min_gbs(20));
        t.push_back(not_below());
    } else if (pinned_or_d2d && (!async || size >= 1 * MiB)) {
        t.push_back(not_below());
    }
    return t;
}

// Sends pA through every buffer of the group, each destination poisoned first, so a copy that did
// nothing shows; then pB must equal pA.
template <class B>
bool check_copies(B &b, const Ctx &ctx, const Bufs &c, const unsigned char *pA, unsigned char *pB, size_t n) {
    std::memset(pB, 0x5A, n);
    b.memcpy_sync(c.hA, pB, n, LLAISYS_MEMCPY_H2H);
    b.memcpy_sync(c.hB, pB, n, LLAISYS_MEMCPY_H2H);
    b.memcpy_sync(c.dB, pB, n, LLAISYS_MEMCPY_H2D);
    b.memcpy_sync(c.dA, pA, n, LLAISYS_MEMCPY_H2D);
    b.memcpy_async(c.dB, c.dA, n, LLAISYS_MEMCPY_D2D, ctx.s);
    b.stream_synchronize(ctx.s);
    b.memcpy_async(c.hA, c.dB, n, LLAISYS_MEMCPY_D2H, ctx.s);
    b.stream_synchronize(ctx.s);
    b.memcpy_sync(c.hB, c.hA, n, LLAISYS_MEMCPY_H2H);
    b.memcpy_sync(c.dA, pB, n, LLAISYS_MEMCPY_H2D);  // poison dA again
    b.memcpy_async(c.dA, c.hB, n, LLAISYS_MEMCPY_H2D, ctx.s);
    b.stream_synchronize(ctx.s);
    b.memcpy_sync(pB, c.dA, n, LLAISYS_MEMCPY_D2H);
    return std::memcmp(pA, pB, n) == 0;
}

void usage(const char *argv0) {
    std::fprintf(stderr,
                 "usage: %s [options] OURS_STATIC.so OURS_DYNAMIC.so REFERENCE.so\n"
                 "  --quick            3 repetitions, no 1 GiB copies, shorter repetitions (a smoke run)\n"
                 "  --only TEXT        run only the workloads whose name contains TEXT (A|B: either)\n"
                 "  --reps-scale X     multiply every repetition count by X (at least 3 remain)\n"
                 "  --budget-s S       stop starting new workloads after S seconds (default 420)\n"
                 "  --csv FILE         write every sample (seconds per operation) to FILE\n"
                 "  --note TEXT        add a line to the report's header (repeatable)\n"
                 "  --no-rotate        every repetition in column order, one buffer set per backend for the copy\n"
                 "                     rows (default: rotated order, two sets below 1 GiB)\n"
                 "  --raw-pool         the raw column's device buffers come from its memory pool (as ours do from\n"
                 "                     ours), not cudaMalloc: raw vs reference is then what pool memory costs\n"
                 "  --getters A,B,C    the three libraries' getter symbols (default llaisysNvidiaGetRuntimeAPI,\n"
                 "                     llaisysNvidiaGetRuntimeAPI,seedGetRuntimeAPI): any table in any column\n"
                 "  --list             print every workload's name and targets, tab-separated (honours --quick,\n"
                 "                     --only), and exit; needs neither a GPU nor the libraries\n",
                 argv0);
}

Options parse(int argc, char **argv, std::vector<std::string> &header_notes) {
    Options o;
    std::vector<std::string> pos;
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
            std::exit(0);
        } else if (a == "--quick") o.quick = true;
        else if (a == "--only") o.only = value();
        else if (a == "--reps-scale") o.rep_scale = std::atof(value().c_str());
        else if (a == "--budget-s") o.budget_s = std::atof(value().c_str());
        else if (a == "--csv") o.csv_path = value();
        else if (a == "--note") header_notes.push_back(value());
        else if (a == "--list") o.list_only = true;
        else if (a == "--no-rotate") o.rotate = false;
        else if (a == "--raw-pool") o.raw_pool = true;
        else if (a == "--getters") {
            std::string v = value();
            size_t c1 = v.find(','), c2 = c1 == std::string::npos ? c1 : v.find(',', c1 + 1);
            if (c2 == std::string::npos || v.find(',', c2 + 1) != std::string::npos || c1 == 0 || c2 == c1 + 1 ||
                c2 + 1 == v.size())
                die(2, "--getters needs three symbols separated by commas, got \"%s\"", v.c_str());
            o.getters[0] = v.substr(0, c1);
            o.getters[1] = v.substr(c1 + 1, c2 - c1 - 1);
            o.getters[2] = v.substr(c2 + 1);
        }
        else if (!a.empty() && a[0] == '-') {
            usage(argv[0]);
            die(2, "unknown option %s", a.c_str());
        } else pos.push_back(a);
    }
    if (pos.size() != 3 && !(o.list_only && pos.empty())) {
        usage(argv[0]);
        die(2, "expected 3 libraries (ours static, ours dynamic, reference), got %zu", pos.size());
    }
    if (o.quick) o.rep_scale *= 3.0 / 11.0;
    if (!(o.rep_scale > 0)) die(2, "--reps-scale must be positive");
    for (size_t i = 0; i < pos.size(); ++i) o.paths[i] = pos[i];
    return o;
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> header_notes;
    Options opt = parse(argc, argv, header_notes);
    Runner<Ctx> R(opt);

    for (int i = 0; i < kBackends; ++i) R.ctx[i].name = backend_name(i);
    int count = 0;
    MachineInfo m;
    if (!opt.list_only) {
        for (int i = 0; i < 3; ++i) R.tables[i] = load_table(backend_name(i), opt.paths[i], opt.getters[i].c_str());
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count < 1)
            die(3, "no CUDA device available (cudaGetDeviceCount: %s (%d): %s; %d devices); this benchmark "
                   "needs a GPU: run it on the GPU machine (bash gpu-stage/bench.sh)",
                cudaGetErrorName(e), static_cast<int>(e), cudaGetErrorString(e), count);
        m = machine_info(0);
        R.raw.make_pool(0);
        R.raw.pool_buffers = opt.raw_pool;
    }
    if (opt.raw_pool)
        R.notes.push_back("--raw-pool: every device buffer of the raw column comes from its pool "
                          "(cudaMallocFromPoolAsync, freed with cudaFreeAsync on the legacy stream), as ours come from "
                          "our device cache's pool; the reference's from cudaMalloc.");
    R.notes.push_back("raw (pool): cudaMallocFromPoolAsync + cudaFreeAsync on the legacy stream, from a pool of "
                      "table_bench's own whose release threshold is the maximum (what our device cache is built "
                      "on): the floor for malloc_device/free_device; the reference column there is cudaMalloc + "
                      "cudaFree. Other raw cells are the reference's own cudart calls.");

    // First use, in column order: set_device, two streams, small device and pinned buffers. The
    // first backend also pays for creating the device's primary context, which all four share.
    R.for_each([&](auto &b, Ctx &c) {
        double t0 = now_s();
        int n = b.get_device_count();
        if (n < 1) die(1, "%s: get_device_count() = %d but cudart sees %d devices", c.name, n, count);
        b.set_device(0);
        c.s = b.create_stream();
        c.s2 = b.create_stream();
        if (!c.s || !c.s2) die(1, "%s: create_stream returned NULL", c.name);
        c.d64 = need(b.malloc_device(4 * KiB), c, "malloc_device", 4 * KiB);
        c.h64 = need(b.malloc_host(4 * KiB), c, "malloc_host", 4 * KiB);
        b.device_synchronize();
        c.first_use_s = now_s() - t0;
        fill_pattern(c.h64, 4 * KiB, 7);
        std::fprintf(stderr, "table_bench: %-12s first use %s\n", c.name, fmt_time(c.first_use_s).c_str());
    });

    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::string header = "## llaisys runtime table benchmark\n\n";
    header += format("- %s, host `%s`, CPU %s (%ld online)\n", utc_now().c_str(), host, m.cpu.c_str(),
                     sysconf(_SC_NPROCESSORS_ONLN));
    header += format("- GPU %s; driver %s; table_bench's own cudart %d.%d (the raw column)\n", m.gpu.c_str(),
                     m.driver.c_str(), m.runtime_version / 1000, (m.runtime_version % 1000) / 10);
    header += format("- ours static `%s`; ours dynamic `%s`; reference `%s`\n", opt.paths[0].c_str(),
                     opt.paths[1].c_str(), opt.paths[2].c_str());
    if (opt.getters[0] != Options().getters[0] || opt.getters[1] != Options().getters[1] ||
        opt.getters[2] != Options().getters[2])
        header += format("- getters (--getters): ours static `%s`; ours dynamic `%s`; reference `%s`\n",
                         opt.getters[0].c_str(), opt.getters[1].c_str(), opt.getters[2].c_str());
    header += "- first use (set_device, 2 streams, first allocations; the first column also creates the context): ";
    for (int i = 0; i < kBackends; ++i)
        header += format("%s %s%s", backend_name(i), fmt_time(R.ctx[i].first_use_s).c_str(), i + 1 < kBackends ? ", " : "\n");
    header += std::string("- method (docs/benchmark.md): medians of repetitions, each running the four columns once, ") +
              (opt.rotate ? "repetition r starting at column r mod 4; copies below 1 GiB alternate between two buffer "
                            "sets per backend"
                          : "always in column order, one buffer set (--no-rotate)") +
              "; host clock; GB/s = bytes copied / time (1e9), async = copy + stream_synchronize; static vs ref = "
              "reference time / ours (> 1: ours better); spread = largest IQR / median in the row\n";
    for (const auto &n : header_notes) header += "- " + n + "\n";
    header += "\n";

    std::fprintf(stderr, "  %-44s %11s %11s %11s %11s  %7s\n", "workload", "ours static", "ours dynamic", "reference",
                 "raw", "st/ref");

    // ---- each table call's own cost --------------------------------------------------------------
    {
        Spec s;
        s.unit = Unit::Latency;
        // 31 repetitions, not 11: raw +5% is tighter than the 4-37% spread these rows showed with 11.
        s.reps = 31;
        s.targets = {Target::overhead()};
        s.max_n = 1 << 22;

        s.name = "get_device_count";
        s.order = 100;
        R.measure(s, [](auto &b, Ctx &, long n) {
            volatile int sink = 0;
            double t0 = now_s();
            for (long k = 0; k < n; ++k) sink = sink + b.get_device_count();
            return now_s() - t0;
        });
        s.name = "set_device(0)";
        s.order = 101;
        R.measure(s, [](auto &b, Ctx &, long n) {
            double t0 = now_s();
            for (long k = 0; k < n; ++k) b.set_device(0);
            return now_s() - t0;
        });
        s.name = "stream_synchronize, idle stream";
        s.order = 102;
        s.max_n = 1 << 20;
        R.measure(s, [](auto &b, Ctx &c, long n) {
            double t0 = now_s();
            for (long k = 0; k < n; ++k) b.stream_synchronize(c.s);
            return now_s() - t0;
        });
        // n stays small so the stream's queue never fills and blocks the host.
        s.name = "memcpy_async 64 B H2D pinned, enqueue only";
        s.order = 103;
        s.max_n = 256;
        R.measure(s, [](auto &b, Ctx &c, long n) {
            double t0 = now_s();
            for (long k = 0; k < n; ++k) b.memcpy_async(c.d64, c.h64, 64, LLAISYS_MEMCPY_H2D, c.s);
            double t = now_s() - t0;
            b.stream_synchronize(c.s);
            return t;
        });
        s.name = "memcpy_async 64 B D2D, enqueue only";
        s.order = 104;
        R.measure(s, [](auto &b, Ctx &c, long n) {
            double t0 = now_s();
            for (long k = 0; k < n; ++k)
                b.memcpy_async(static_cast<char *>(c.d64) + 2048, c.d64, 64, LLAISYS_MEMCPY_D2D, c.s);
            double t = now_s() - t0;
            b.stream_synchronize(c.s);
            return t;
        });
        s.name = "create_stream + destroy_stream";
        s.order = 105;
        s.max_n = 1 << 14;
        R.measure(s, [](auto &b, Ctx &c, long n) {
            double t0 = now_s();
            for (long k = 0; k < n; ++k) {
                llaisysStream_t st = b.create_stream();
                if (!st) die(1, "%s: create_stream returned NULL", c.name);
                b.destroy_stream(st);
            }
            return now_s() - t0;
        });
    }

    // ---- malloc + free pairs -----------------------------------------------------------------------
    {
        const size_t sizes[] = {1 * KiB, 1 * MiB, 64 * MiB};
        // Sizes that a cached 1 MiB block fits: 1 MiB, 1020 KiB, ..., 992 KiB, in turn.
        auto varying = [](long k) { return 1 * MiB - static_cast<size_t>(k & 7) * 4 * KiB; };
        for (int host = 0; host < 2; ++host) {
            const char *what = host ? "malloc_host+free_host" : "malloc_device+free_device";
            for (int si = 0; si <= 3; ++si) {
                Spec s;
                s.unit = Unit::Latency;
                s.order = 200 + host * 10 + si;
                s.max_n = 1 << 16;
                s.reps = (host && si == 2) ? 5 : 11;
                if (si < 3) s.name = format("%s %s", what, fmt_size(sizes[si]).c_str());
                else s.name = format("%s 992 KiB..1 MiB (fits cached)", what);
                if (host) {
                    s.targets = {Target::max_time(1.5e-6, "<= 1.5 us (cached)"), Target::overhead()};
                } else {
                    s.raw_tag = "pool";
                    if (si < 3) s.targets = {Target::max_time(0.8e-6, "<= 0.8 us"), Target::overhead()};
                }
                size_t fixed = si < 3 ? sizes[si] : 0;
                R.measure(s, [host, fixed, varying](auto &b, Ctx &c, long n) {
                    double t0 = now_s();
                    for (long k = 0; k < n; ++k) {
                        size_t sz = fixed ? fixed : varying(k);
                        if (host) {
                            void *p = need(b.malloc_host(sz), c, "malloc_host", sz);
                            b.free_host(p);
                        } else {
                            void *p = need(pool_or_table_malloc_device(b, sz), c, "malloc_device", sz);
                            pool_or_table_free_device(b, p);
                        }
                    }
                    return now_s() - t0;
                });
            }
        }
    }

    // ---- free alone, of a cached block -------------------------------------------------------------
    // Allocated with the clock stopped, freed with it running; small batches so that the legacy
    // stream's queue of cudaFreeAsync never fills.
    {
        const size_t sz = 1 * MiB;
        for (int host = 0; host < 2; ++host) {
            Spec s;
            s.name = host ? "free_host 1 MiB, cached block (free only)" : "free_device 1 MiB, cached block (free only)";
            s.order = 230 + host;
            s.unit = Unit::Latency;
            s.reps = 11;
            s.max_n = 1 << 16;
            s.targets = {Target::overhead()};
            if (!host) s.raw_tag = "pool";
            const long batch = host ? 64 : 256;
            R.measure(s, [host, sz, batch](auto &b, Ctx &c, long n) {
                std::vector<void *> blocks;
                blocks.reserve(static_cast<size_t>(batch));
                double t = 0;
                for (long done = 0; done < n;) {
                    const long k = std::min(batch, n - done);
                    blocks.clear();
                    for (long j = 0; j < k; ++j)
                        blocks.push_back(host ? need(b.malloc_host(sz), c, "malloc_host", sz)
                                              : need(pool_or_table_malloc_device(b, sz), c, "malloc_device", sz));
                    double t0 = now_s();
                    if (host) {
                        for (void *p : blocks) b.free_host(p);
                    } else {
                        for (void *p : blocks) pool_or_table_free_device(b, p);
                    }
                    t += now_s() - t0;
                    done += k;
                }
                return t;
            });
        }
    }

    {
        const size_t n4 = 4 * MiB;
        unsigned char *src = pageable(n4, 11), *dst = pageable(n4, 12);
        Spec s;
        s.name = "tensor round trip 4 MiB (malloc, H2D+D2H pageable, free)";
        s.order = 2100;
        s.unit = Unit::Latency;
        s.reps = 11;
        s.targets = {Target::max_time(250e-6, "<= 250 us"), Target::min_ratio(2.5, "<= 0.4x ref time")};
        R.measure(s, [&R, src, dst, n4](auto &b, Ctx &c, long n) {
            std::memset(dst, 0x3C, n4);
            double t0 = now_s();
            for (long k = 0; k < n; ++k) {
                void *d = need(b.malloc_device(n4), c, "malloc_device", n4);
                b.memcpy_sync(d, src, n4, LLAISYS_MEMCPY_H2D);
                b.memcpy_sync(dst, d, n4, LLAISYS_MEMCPY_D2H);
                b.free_device(d);
            }
            double t = now_s() - t0;
            if (std::memcmp(src, dst, n4) != 0) R.fail(format("%s: tensor round trip data differ", c.name));
            return t;
        });
        std::free(src);
        std::free(dst);
    }

    {
        StepPlan plan;
        unsigned char *out = pageable(plan.out_bytes, 13);
        Spec s;
        s.name = "mixed inference step (209 allocs, 66 copies)";
        s.order = 2200;
        s.unit = Unit::Latency;
        s.reps = 9;
        s.min_rep_s = 5e-3;
        if (R.wanted(s.name)) {
            R.for_each([&](auto &b, Ctx &c) {
                c.h_in = need(b.malloc_host(plan.in_bytes), c, "malloc_host", plan.in_bytes);
                fill_pattern(c.h_in, plan.in_bytes, 21);
            });
            R.measure(s, [&R, &plan, out](auto &b, Ctx &c, long n) {
                std::memset(out, 0x3C, plan.out_bytes);
                double t0 = now_s();
                for (long k = 0; k < n; ++k) inference_step(b, c, plan, out);
                double t = now_s() - t0;
                if (std::memcmp(out, c.h_in, plan.out_bytes) != 0)
                    R.fail(format("%s: mixed step read back wrong data", c.name));
                return t;
            });
            R.for_each([&](auto &b, Ctx &c) { b.free_host(c.h_in); });
        }
        std::free(out);
    }

    {
        const size_t n = 256 * MiB;
        Spec s;
        s.name = "two streams H2D+D2H pinned 2x256 MiB (aggregate)";
        s.order = 2000;
        s.unit = Unit::Bandwidth;
        s.bytes = 2.0 * static_cast<double>(n);
        s.reps = 9;
        s.targets = {Target::min_ratio(0.98, ">= 0.98x ref")};
        if (R.wanted(s.name) && !R.out_of_time()) {
            R.for_each([&](auto &b, Ctx &c) {
                c.set[0].dA = need(b.malloc_device(n), c, "malloc_device", n);
                c.set[0].dB = need(b.malloc_device(n), c, "malloc_device", n);
                c.set[0].hA = need(b.malloc_host(n), c, "malloc_host", n);
                c.set[0].hB = need(b.malloc_host(n), c, "malloc_host", n);
                fill_pattern(c.set[0].hA, n, 31);
                b.memcpy_sync(c.set[0].dB, c.set[0].hA, n, LLAISYS_MEMCPY_H2D);
            });
            R.measure(s, [n](auto &b, Ctx &c, long reps) {
                double t0 = now_s();
                for (long k = 0; k < reps; ++k) {
                    b.memcpy_async(c.set[0].dA, c.set[0].hA, n, LLAISYS_MEMCPY_H2D, c.s);
                    b.memcpy_async(c.set[0].hB, c.set[0].dB, n, LLAISYS_MEMCPY_D2H, c.s2);
                    b.stream_synchronize(c.s);
                    b.stream_synchronize(c.s2);
                }
                return now_s() - t0;
            });
            R.for_each([&](auto &b, Ctx &c) {
                b.free_device(c.set[0].dA);
                b.free_device(c.set[0].dB);
                b.free_host(c.set[0].hA);
                b.free_host(c.set[0].hB);
            });
        } else if (R.wanted(s.name)) {
            R.skipped.push_back(s.name);
        }
    }

    // ---- memcpy_sync / memcpy_async for every kind, pinned and pageable, by size ---------------------
    // Smallest sizes first so the 1 GiB buffers (18 GiB in all) exist only at the end.
    {
        std::vector<size_t> sizes = {4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB};
        if (!opt.quick) sizes.push_back(1 * GiB);
        auto row_name = [](int v, int async, size_t size) {
            return format("%s %s %s", async ? "memcpy_async" : "memcpy_sync", kVariants[v].name, fmt_size(size).c_str());
        };
        // memcpy_sync D2D returns before the copy is done (cudaMemcpy): the host's cost alone.
        const std::string nowait_name = "memcpy_sync D2D 4 KiB host time, no wait";
        const bool nowait_wanted = R.wanted(nowait_name);
        size_t max_size = nowait_wanted ? 4 * KiB : 0;
        for (size_t si = 0; si < sizes.size(); ++si)
            for (int v = 0; v < kNumVariants; ++v)
                for (int a = 0; a < 2; ++a)
                    if (R.wanted(row_name(v, a, sizes[si]))) max_size = std::max(max_size, sizes[si]);
        if (opt.list_only) max_size = 0;
        unsigned char *pA = max_size ? pageable(max_size, 41) : nullptr;
        unsigned char *pB = max_size ? pageable(max_size, 42) : nullptr;
        for (size_t si = 0; si < sizes.size(); ++si) {
            const size_t size = sizes[si];
            std::vector<std::pair<int, int>> todo;  // (variant, async)
            for (int v = 0; v < kNumVariants; ++v)
                for (int a = 0; a < 2; ++a)
                    if (R.wanted(row_name(v, a, size))) todo.emplace_back(v, a);
            const bool nowait = nowait_wanted && size == 4 * KiB;
            if (todo.empty() && !nowait) continue;
            if (R.out_of_time()) {
                for (auto &va : todo) R.skipped.push_back(row_name(va.first, va.second, size));
                if (nowait) R.skipped.push_back(nowait_name);
                continue;
            }
            const int sets = opt.rotate && size < 1 * GiB ? 2 : 1;
            R.for_each([&](auto &b, Ctx &c) {
                c.sets = sets;
                for (int k = 0; k < sets; ++k) {
                    Bufs &u = c.set[k];
                    u.dA = need(b.malloc_device(size), c, "malloc_device", size);
                    u.dB = need(b.malloc_device(size), c, "malloc_device", size);
                    u.hA = need(b.malloc_host(size), c, "malloc_host", size);
                    u.hB = need(b.malloc_host(size), c, "malloc_host", size);
                    if (!check_copies(b, c, u, pA, pB, size))
                        R.fail(format("%s: copy chain through every kind at %s (buffer set %d)", c.name,
                                      fmt_size(size).c_str(), k));
                }
            });
            for (auto &va : todo) {
                const int v = va.first, async = va.second;
                Spec s;
                s.name = row_name(v, async, size);
                s.order = 1000 + v * 100 + async * 10 + static_cast<int>(si);
                s.unit = Unit::Bandwidth;
                s.bytes = static_cast<double>(size);
                s.reps = size >= 1 * GiB ? 5 : 9;
                s.max_n = 1 << 16;
                s.targets = copy_targets(v, async != 0, size);
                const llaisysMemcpyKind_t kind = kVariants[v].kind;
                R.measure(s, [=](auto &b, Ctx &c, long n) {
                    void *dst[2];
                    const void *src[2];
                    for (int k = 0; k < c.sets; ++k) endpoints(v, c.set[k], pA, pB, dst[k], src[k]);
                    const int m = c.sets;
                    double t0 = now_s();
                    if (async) {
                        for (long k = 0; k < n; ++k) {
                            b.memcpy_async(dst[k % m], src[k % m], size, kind, c.s);
                            b.stream_synchronize(c.s);
                        }
                    } else {
                        for (long k = 0; k < n; ++k) b.memcpy_sync(dst[k % m], src[k % m], size, kind);
                        // cudaMemcpy from pageable memory may return before its last DMA lands.
                        b.device_synchronize();
                    }
                    return now_s() - t0;
                });
            }
            if (nowait) {
                Spec s;
                s.name = nowait_name;
                s.order = 1000 + 4 * 100 + 9;  // after the memcpy_sync D2D rows
                s.unit = Unit::Latency;
                s.reps = 11;
                s.max_n = 256;  // so the queue never fills and blocks the host
                s.targets = {not_below()};
                R.measure(s, [size](auto &b, Ctx &c, long n) {
                    double t0 = now_s();
                    for (long k = 0; k < n; ++k) {
                        const Bufs &u = c.set[k % c.sets];
                        b.memcpy_sync(u.dB, u.dA, size, LLAISYS_MEMCPY_D2D);
                    }
                    double t = now_s() - t0;
                    b.device_synchronize();
                    return t;
                });
            }
            R.for_each([&](auto &b, Ctx &c) {
                for (int k = 0; k < c.sets; ++k) {
                    Bufs &u = c.set[k];
                    b.free_device(u.dA);
                    b.free_device(u.dB);
                    b.free_host(u.hA);
                    b.free_host(u.hB);
                    u = Bufs{};
                }
            });
        }
        std::free(pA);
        std::free(pB);
    }

    R.for_each([&](auto &b, Ctx &c) {
        b.device_synchronize();
        b.destroy_stream(c.s);
        b.destroy_stream(c.s2);
        b.free_device(c.d64);
        b.free_host(c.h64);
    });

    if (opt.list_only) return 0;
    if (!opt.csv_path.empty()) R.write_csv(opt.csv_path);
    std::string md = R.markdown(header);
    std::fwrite(md.data(), 1, md.size(), stdout);
    std::fflush(stdout);
    return R.failures.empty() ? 0 : 1;
}

// fresh_sources: memcpy_sync H2D from pageable buffers that no recent copy read, through two
// llaisys runtime tables (ours and the reference) in one process, one copy at a time.
//
//   fresh_sources [--sizes MIB,...] [--reps N] [--buffers N] [--flush-mib M] OURS.so REFERENCE.so
//
// Per size, each library copies from --buffers (16) buffers in turn, so that no source is one
// of its last 8 copies' (the library's store policy, docs/caches.md, tells such a source from a
// buffer copied again; 8 is `KEPT` in src/pageable/recent.rs). Before each copy the caller
// writes --flush-mib MiB (1024) of other memory, which sends everything else out of the CPU
// caches (the staging buffers too, as after other work), then writes the whole source, which
// then sits in the caches as far as they hold it (`cached`); or it writes the source first and
// then flushes, which sends the source to memory as well (`memory`). The clock runs from the
// call to device_synchronize after it; the libraries alternate copy by copy. Every copy is read
// back and compared outside the clock (exit 1 on a mismatch). The process's
// LLAISYS_NVIDIA_PAGEABLE_STORES is named in the output: run it once per setting, in
// alternating processes, to compare settings (bench.sh --fresh-sources does).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench_util.hpp"
#include "runtime_table.hpp"

using namespace bench;

namespace {

constexpr size_t MiB = size_t(1) << 20;

struct Options {
    std::vector<size_t> sizes_mib = {1, 4, 16, 64};
    int reps = 16;
    int buffers = 16;
    size_t flush_mib = 1024;
    std::string ours, reference;
};

[[noreturn]] void usage() {
    die(2, "usage: fresh_sources [--sizes MIB,...] [--reps N] [--buffers N] [--flush-mib M] OURS.so REFERENCE.so");
}

size_t number(const char *what, const std::string &s, size_t lo, size_t hi) {
    char *end = nullptr;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < lo || v > hi) die(2, "%s: %s is not a number in [%zu, %zu]", what, s.c_str(), lo, hi);
    return static_cast<size_t>(v);
}

Options parse(int argc, char **argv) {
    Options o;
    std::vector<std::string> libs;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (a == "--sizes") {
            o.sizes_mib.clear();
            std::string list = value();
            size_t at = 0;
            while (at <= list.size()) {
                size_t comma = list.find(',', at);
                if (comma == std::string::npos) comma = list.size();
                o.sizes_mib.push_back(number("--sizes", list.substr(at, comma - at), 1, 4096));
                at = comma + 1;
            }
        } else if (a == "--reps") {
            o.reps = static_cast<int>(number("--reps", value(), 1, 1000));
        } else if (a == "--buffers") {
            o.buffers = static_cast<int>(number("--buffers", value(), 9, 256));
        } else if (a == "--flush-mib") {
            o.flush_mib = number("--flush-mib", value(), 1, 65536);
        } else if (!a.empty() && a[0] == '-') {
            usage();
        } else {
            libs.push_back(a);
        }
    }
    if (libs.size() != 2) usage();
    o.ours = libs[0];
    o.reference = libs[1];
    return o;
}

// Writes one byte of every 64-byte line of `v`, so that the lines the caches held before are
// written back and dropped; the compiler must not leave the stores out.
void flush_caches(std::vector<unsigned char> &v) {
    for (size_t i = 0; i < v.size(); i += 64) v[i] = static_cast<unsigned char>(v[i] + 1);
    asm volatile("" : : "r"(v.data()) : "memory");
}

}  // namespace

int main(int argc, char **argv) {
    program_name() = "fresh_sources";
    const Options o = parse(argc, argv);
    struct Lib {
        const char *label;
        const LlaisysRuntimeAPI *t;
        std::vector<double> s[2];
    };
    Lib libs[2] = {{"ours", load_runtime_table("ours", o.ours, "llaisysNvidiaGetRuntimeAPI"), {}},
                   {"reference", load_runtime_table("reference", o.reference, "seedGetRuntimeAPI"), {}}};
    const char *stores = std::getenv("LLAISYS_NVIDIA_PAGEABLE_STORES");
    const std::string setting = stores ? format("LLAISYS_NVIDIA_PAGEABLE_STORES=%s", stores) : "default";
    const char *modes[2] = {"cached", "memory"};

    // What the run holds in host memory: every size's buffers, the flush, one read-back buffer.
    size_t total = o.flush_mib * MiB, largest = 0;
    for (size_t mib : o.sizes_mib) {
        total += mib * MiB * static_cast<size_t>(o.buffers);
        largest = std::max(largest, mib * MiB);
    }
    total += largest;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && total > static_cast<size_t>(pages) / 4 * 3 * static_cast<size_t>(page))
        die(2, "the run needs %zu MiB of host memory, more than 3/4 of this machine's %zu MiB: fewer --sizes or --buffers",
            total / MiB, static_cast<size_t>(pages) * static_cast<size_t>(page) / MiB);
    std::vector<unsigned char> flush(o.flush_mib * MiB, 1);
    std::printf("fresh_sources: ours %s (%s), reference %s; %d buffers a size, %d copies a row; flush %zu MiB\n\n",
                o.ours.c_str(), setting.c_str(), o.reference.c_str(), o.buffers, o.reps, o.flush_mib);
    std::printf("| H2D pageable, a source no recent copy read | source | ours (%s) | reference | ours vs reference |\n",
                setting.c_str());
    std::printf("|---|---|--:|--:|--:|\n");
    // Every size's buffers exist from the start: a buffer made after another was freed could
    // take its addresses, and the library would take it for a source copied again.
    std::vector<std::vector<unsigned char *>> all(o.sizes_mib.size());
    for (size_t k = 0; k < o.sizes_mib.size(); ++k)
        for (int b = 0; b < o.buffers; ++b) {
            const size_t n = o.sizes_mib[k] * MiB;
            void *p = nullptr;
            if (posix_memalign(&p, 4096, n) != 0) die(1, "posix_memalign(%zu) failed", n);
            std::memset(p, 0, n);  // first-touch page faults stay out of every clock
            all[k].push_back(static_cast<unsigned char *>(p));
        }
    for (size_t k = 0; k < o.sizes_mib.size(); ++k) {
        const size_t mib = o.sizes_mib[k], n = mib * MiB;
        const std::vector<unsigned char *> &bufs = all[k];
        std::vector<unsigned char> back(n);
        void *dev[2];
        for (int l = 0; l < 2; ++l) {
            dev[l] = libs[l].t->malloc_device(n);
            if (!dev[l]) die(1, "%s: malloc_device(%zu) returned NULL", libs[l].label, n);
            libs[l].s[0].clear();
            libs[l].s[1].clear();
        }
        // Each library takes the buffers in turn on its own count: its source is never one of its
        // last buffers - 1 copies'.
        int next[2] = {0, 0};
        for (int m = 0; m < 2; ++m)
            for (int r = 0; r < o.reps + 1; ++r)
                for (int l = 0; l < 2; ++l) {
                    unsigned char *src = bufs[next[l]++ % o.buffers];
                    const uint64_t seed = (uint64_t(mib) << 20) ^ (uint64_t(m) << 16) ^ (uint64_t(r) << 1) ^ uint64_t(l);
                    if (m == 0) flush_caches(flush);
                    // A random stream of its own per copy: a chunk copied to the wrong place,
                    // left out or cut short shows in the check.
                    fill_random(src, n, seed);
                    if (m == 1) flush_caches(flush);
                    const double t0 = now_s();
                    libs[l].t->memcpy_sync(dev[l], src, n, LLAISYS_MEMCPY_H2D);
                    libs[l].t->device_synchronize();
                    const double dt = now_s() - t0;
                    if (r > 0) libs[l].s[m].push_back(dt);  // the first copy of a row is not timed
                    libs[l].t->memcpy_sync(back.data(), dev[l], n, LLAISYS_MEMCPY_D2H);
                    if (std::memcmp(back.data(), src, n) != 0)
                        die(1, "%s: H2D %zu MiB (%s source, copy %d) read back wrong", libs[l].label, mib, modes[m], r);
                }
        for (int m = 0; m < 2; ++m) {
            const double ours = median(libs[0].s[m]), ref = median(libs[1].s[m]);
            std::printf("| %zu MiB | %s | %s | %s | %s |\n", mib, modes[m], fmt_gbs(n / ours / 1e9).c_str(),
                        fmt_gbs(n / ref / 1e9).c_str(), fmt_ratio(ref / ours).c_str());
        }
        std::fflush(stdout);
        for (int l = 0; l < 2; ++l) libs[l].t->free_device(dev[l]);
    }
    for (auto &bufs : all)
        for (unsigned char *p : bufs) std::free(p);
    std::printf("\nGB/s: median of the copies (call to device_synchronize); every copy read back and compared.\n");
    return 0;
}

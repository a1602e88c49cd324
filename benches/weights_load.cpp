// weights_load: a model's weights to the GPU through llaisys runtime tables, as a llaisys core
// loads them: a safetensors file mapped with mmap, then per tensor malloc_device + memcpy_sync
// H2D from the mapping. Measures our library and the reference backend in one process, with the
// file's pages in the page cache (hot) and evicted from it (cold), beside the two floors: the
// pinned link (memcpy_sync H2D from malloc_host memory) and the storage's own read speed (cold),
// and a third: the file read through a fresh mapping by the host threads alone, as a staged copy
// reads it (its page faults, and cold the storage reads they start), with no device, and hot once
// more while the copy engine streams from other pinned memory (the host copy and the DMAs share
// the host's memory). Each load's malloc_device calls are also timed inside it.
// benches/weights_torch.py measures torch's loader on the same file and merges the tables.
//
// The file is made by this program (random bf16 data, a Qwen2 shape: by default that of
// DeepSeek-R1-Distill-Qwen-1.5B, the model llaisys's own inference test uses, about 3.5 GB) and
// kept for the next run; its name carries the shape. Every load is checked: each tensor is copied
// back (memcpy_sync D2H through a malloc_host buffer) and compared with the file's bytes.
//
// Needs no cudart of its own: everything goes through the tables. Usual way: bash
// scripts/stage-gpu.sh here, then on the GPU machine bash gpu-stage/bench.sh --weights.
// Usage: weights_load [options] OURS.so REFERENCE.so   (--help)
// Exit: 0 measured; 1 a data check failed (the table still prints); 2 bad usage or a library that
// does not load; 3 no CUDA device.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "llaisys_runtime.h"
#include "runtime_table.hpp"
#include "weights_file.hpp"

using namespace bench;

namespace {

struct Backend {
    std::string label;
    const LlaisysRuntimeAPI *t = nullptr;
};

// One load through `b`; seconds, and in `alloc_s` those of its malloc_device calls. Leaves the
// device pointers and the mapping for the check.
double load(const Backend &b, const std::string &path, std::vector<Tensor> &ts, std::vector<void *> &ptrs,
            void *&map, size_t &map_len, const unsigned char *&data, double &alloc_s) {
    double t0 = now_s();
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) die(1, "cannot open %s: %s", path.c_str(), std::strerror(errno));
    map_len = file_size(path);
    map = ::mmap(nullptr, map_len, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) die(1, "mmap %s: %s", path.c_str(), std::strerror(errno));
    const unsigned char *base = static_cast<const unsigned char *>(map);
    uint64_t hlen = 0;
    std::memcpy(&hlen, base, 8);
    ts.clear();
    if (hlen + 8 > map_len || !parse_header(reinterpret_cast<const char *>(base + 8), hlen, ts))
        die(1, "%s: not a safetensors file this program reads", path.c_str());
    data = base + 8 + hlen;
    ptrs.assign(ts.size(), nullptr);
    for (size_t k = 0; k < ts.size(); ++k) {
        size_t n = ts[k].bytes();
        if (data + ts[k].end > base + map_len) die(1, "%s: tensor %s lies past the end", path.c_str(), ts[k].name.c_str());
        double a = now_s();
        ptrs[k] = b.t->malloc_device(n);
        alloc_s += now_s() - a;
        if (!ptrs[k]) die(1, "%s: malloc_device(%zu) returned NULL", b.label.c_str(), n);
        b.t->memcpy_sync(ptrs[k], data + ts[k].begin, n, LLAISYS_MEMCPY_H2D);
    }
    b.t->device_synchronize();
    return now_s() - t0;
}

// Checks every tensor against the file, frees it all; returns the first that differs ("": none).
std::string check_and_free(const Backend &b, const std::vector<Tensor> &ts, std::vector<void *> &ptrs, void *map,
                           size_t map_len, const unsigned char *data) {
    const size_t piece = 64 * MiB;
    unsigned char *h = static_cast<unsigned char *>(b.t->malloc_host(piece));
    if (!h) die(1, "%s: malloc_host(%zu) returned NULL", b.label.c_str(), piece);
    std::string bad;
    for (size_t k = 0; k < ts.size(); ++k) {
        for (size_t at = 0; bad.empty() && at < ts[k].bytes(); at += piece) {
            size_t n = std::min(piece, ts[k].bytes() - at);
            b.t->memcpy_sync(h, static_cast<unsigned char *>(ptrs[k]) + at, n, LLAISYS_MEMCPY_D2H);
            if (std::memcmp(h, data + ts[k].begin + at, n) != 0) bad = ts[k].name;
        }
        b.t->free_device(ptrs[k]);
    }
    b.t->free_host(h);
    ::munmap(map, map_len);
    ptrs.clear();
    return bad;
}

// GB/s of memcpy_sync H2D from malloc_host memory of `b` (256 MiB, median of 5): the link.
double pinned_link(const Backend &b) {
    const size_t n = 256 * MiB;
    void *h = b.t->malloc_host(n), *d = b.t->malloc_device(n);
    if (!h || !d) die(1, "%s: malloc_host/malloc_device(%zu) returned NULL", b.label.c_str(), n);
    std::memset(h, 0x5A, n);
    b.t->memcpy_sync(d, h, n, LLAISYS_MEMCPY_H2D);
    std::vector<double> s;
    for (int r = 0; r < 5; ++r) {
        double t0 = now_s();
        b.t->memcpy_sync(d, h, n, LLAISYS_MEMCPY_H2D);
        b.t->device_synchronize();
        s.push_back(now_s() - t0);
    }
    b.t->free_device(d);
    b.t->free_host(h);
    return static_cast<double>(n) / median(s) / 1e9;
}

// A load's malloc_device calls alone, then device_synchronize; seconds (the frees not timed).
double allocate_only(const Backend &b, const std::vector<Tensor> &ts) {
    std::vector<void *> ptrs(ts.size(), nullptr);
    double t0 = now_s();
    for (size_t k = 0; k < ts.size(); ++k) {
        ptrs[k] = b.t->malloc_device(ts[k].bytes());
        if (!ptrs[k]) die(1, "%s: malloc_device(%zu) returned NULL", b.label.c_str(), ts[k].bytes());
    }
    b.t->device_synchronize();
    double sec = now_s() - t0;
    for (void *p : ptrs) b.t->free_device(p);
    return sec;
}

// Keeps the link busy while the host reads: each `step` one 64 MiB memcpy_async H2D, waited for.
struct BusyLink {
    const Backend &b;
    static constexpr size_t n = 64 * MiB;
    void *h = nullptr, *d = nullptr;
    llaisysStream_t s = nullptr;
    size_t bytes = 0;
    double t0 = 0, t1 = 0;

    explicit BusyLink(const Backend &backend) : b(backend) {
        h = b.t->malloc_host(n);
        d = b.t->malloc_device(n);
        s = b.t->create_stream();
        if (!h || !d || !s) die(1, "%s: malloc_host/malloc_device(%zu) or create_stream returned NULL", b.label.c_str(), n);
        std::memset(h, 0x5A, n);
    }
    ~BusyLink() {
        b.t->destroy_stream(s);
        b.t->free_device(d);
        b.t->free_host(h);
    }
    void reset() {
        bytes = 0;
        t0 = t1 = 0;
    }
    void step() {
        if (bytes == 0) t0 = now_s();
        b.t->memcpy_async(d, h, n, LLAISYS_MEMCPY_H2D, s);
        b.t->stream_synchronize(s);
        t1 = now_s();
        bytes += n;
    }
    double gbs() const { return t1 > t0 ? static_cast<double>(bytes) / (t1 - t0) / 1e9 : 0; }
};

struct Options {
    std::string dir, ours, reference, csv;
    Shape shape;
    int reps = 3;
    bool hot = true, cold = true;
};

[[noreturn]] void usage(int code) {
    std::fprintf(code ? stderr : stdout,
                 "usage: weights_load [options] OURS.so REFERENCE.so\n"
                 "  --dir DIR          where the safetensors file is made and kept (default: $TMPDIR or /var/tmp)\n"
                 "  --modes hot,cold   page cache states to measure (default both)\n"
                 "  --reps N           loads per library and mode (default 3; the median is reported)\n"
                 "  --csv PATH         every load as CSV (loader,cache,seconds,bytes)\n"
                 "  --layers N --hidden N --intermediate N --vocab N --heads N --kv-heads N --head-dim N\n"
                 "                     the model's shape (default DeepSeek-R1-Distill-Qwen-1.5B's)\n");
    std::exit(code);
}

size_t positive(const char *flag, const char *v) {
    char *end = nullptr;
    unsigned long long x = std::strtoull(v, &end, 10);
    if (!v[0] || *end || x == 0 || x > (1ull << 40)) die(2, "%s: '%s' is not a positive number", flag, v);
    return static_cast<size_t>(x);
}

Options parse(int argc, char **argv) {
    Options o;
    const char *tmp = std::getenv("TMPDIR");
    o.dir = tmp && *tmp ? tmp : "/var/tmp";
    std::vector<std::string> pos;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) die(2, "%s needs a value", a.c_str());
            return argv[++i];
        };
        if (a == "--help" || a == "-h") usage(0);
        else if (a == "--dir") o.dir = val();
        else if (a == "--csv") o.csv = val();
        else if (a == "--reps") o.reps = static_cast<int>(std::min<size_t>(positive("--reps", val()), 100));
        else if (a == "--modes") {
            std::string m = val();
            o.hot = m.find("hot") != std::string::npos;
            o.cold = m.find("cold") != std::string::npos;
            if ((!o.hot && !o.cold) || m.find_first_not_of("hotcld,") != std::string::npos)
                die(2, "--modes: '%s' is not hot, cold or hot,cold", m.c_str());
        } else if (a == "--layers") o.shape.layers = positive("--layers", val());
        else if (a == "--hidden") o.shape.hidden = positive("--hidden", val());
        else if (a == "--intermediate") o.shape.intermediate = positive("--intermediate", val());
        else if (a == "--vocab") o.shape.vocab = positive("--vocab", val());
        else if (a == "--heads") o.shape.heads = positive("--heads", val());
        else if (a == "--kv-heads") o.shape.kv_heads = positive("--kv-heads", val());
        else if (a == "--head-dim") o.shape.head_dim = positive("--head-dim", val());
        else if (!a.empty() && a[0] == '-') die(2, "unknown option %s (--help)", a.c_str());
        else pos.push_back(a);
    }
    if (pos.size() != 2) usage(2);
    o.ours = pos[0];
    o.reference = pos[1];
    return o;
}

}  // namespace

int main(int argc, char **argv) {
    program_name() = "weights_load";
    Options o = parse(argc, argv);
    Backend backends[2] = {{"ours", load_runtime_table("ours", o.ours, "llaisysNvidiaGetRuntimeAPI")},
                           {"reference", load_runtime_table("reference", o.reference, "seedGetRuntimeAPI")}};
    if (backends[0].t->get_device_count() < 1)
        die(3, "no CUDA device available (ours: get_device_count() = 0); this benchmark needs a GPU: run it on "
               "the GPU machine (bash gpu-stage/bench.sh --weights)");
    for (Backend &b : backends) b.t->set_device(0);

    const Shape &s = o.shape;
    std::vector<Tensor> made = tensors_of(s);
    size_t bytes = made.back().end;
    std::string path = o.dir + format("/llaisys-weights-qwen2-h%zu-i%zu-l%zu-v%zu-a%zu-k%zu-d%zu-bf16.safetensors",
                                      s.hidden, s.intermediate, s.layers, s.vocab, s.heads, s.kv_heads, s.head_dim);
    std::string header = header_of(made);
    if (file_size(path) != 8 + header.size() + bytes) {
        std::fprintf(stderr, "weights_load: making %s (%.2f GB, %zu tensors)\n", path.c_str(), bytes / 1e9, made.size());
        double t0 = now_s();
        make_file(path, made);
        std::fprintf(stderr, "weights_load: made in %.1f s\n", now_s() - t0);
    }

    FILE *csv = nullptr;
    if (!o.csv.empty()) {
        csv = std::fopen(o.csv.c_str(), "w");
        if (!csv) die(2, "cannot write %s: %s", o.csv.c_str(), std::strerror(errno));
        std::fprintf(csv, "loader,cache,seconds,bytes\n");
    }
    auto record = [&](const char *loader, const char *cache, double sec) {
        if (csv) std::fprintf(csv, "%s,%s,%.9f,%zu\n", loader, cache, sec, bytes);
    };

    MdTable t;
    t.header = {"loader", "page cache", "seconds per model", "GB/s", "vs reference", "vs floor", "vs mapping read",
                "spread"};
    std::vector<std::string> notes;
    bool data_ok = true;

    double link = pinned_link(backends[0]);
    t.rows.push_back({"pinned link: ours memcpy_sync H2D from malloc_host, 256 MiB", "-", "-", fmt_gbs(link), "-",
                      "-", "-", "-"});

    // The mapping read's threads and 8 MiB buffers: as many as our staged copies use by default.
    const size_t slot = 8 * MiB;
    int mapping_threads = static_cast<int>(std::clamp<long>(sysconf(_SC_NPROCESSORS_ONLN) * 3 / 4, 1, 12));
    if (const char *v = std::getenv("LLAISYS_NVIDIA_PAGEABLE_THREADS"); v && *v)
        mapping_threads = static_cast<int>(std::min<size_t>(positive("LLAISYS_NVIDIA_PAGEABLE_THREADS", v), 64));
    std::vector<unsigned char *> bufs;
    for (int k = 0; k < mapping_threads; ++k) {
        bufs.push_back(static_cast<unsigned char *>(backends[0].t->malloc_host(slot)));
        if (!bufs.back()) die(1, "ours: malloc_host(%zu) returned NULL", slot);
    }
    const std::string mapping_label =
        format("mapping read: %d thread%s copy the fresh mmap in 64 KiB pieces to malloc_host (no device)",
               mapping_threads, mapping_threads > 1 ? "s" : "");

    for (int mode = 0; mode < 2; ++mode) {
        bool cold = mode == 1;
        if ((cold && !o.cold) || (!cold && !o.hot)) continue;
        const char *cache = cold ? "cold" : "hot";
        double floor_gbs = link;
        if (cold) {
            double left = evict(path);
            if (left > 0.05) {
                notes.push_back(format("cold: not measured: %.0f%% of the file stayed in the page cache after "
                                       "POSIX_FADV_DONTNEED (a file system whose pages cannot be dropped, e.g. tmpfs: "
                                       "--dir on a disk)",
                                       left * 100));
                continue;
            }
            // The storage's own speed: one reader, then 8 in parallel; the faster is the floor.
            double best = 0;
            for (int threads : {1, 8}) {
                evict(path);
                double sec = read_file(path, threads);
                double gbs = static_cast<double>(file_size(path)) / sec / 1e9;
                best = std::max(best, gbs);
                std::string label = format("storage read: %d thread%s, pread 16 MiB", threads, threads > 1 ? "s" : "");
                record(label.c_str(), cache, sec);
                t.rows.push_back({label, cache, fmt_time(sec), fmt_gbs(gbs), "-", "-", "-", "-"});
            }
            floor_gbs = best;
        } else {
            read_file(path, 8);  // into the page cache
        }
        std::vector<double> mapping;
        for (int r = 0; r < o.reps; ++r) {
            if (cold) evict(path);
            mapping.push_back(read_mapping(path, bufs, slot));
            record("mapping read", cache, mapping.back());
        }
        double mapping_gbs = static_cast<double>(file_size(path)) / median(mapping) / 1e9;
        t.rows.push_back({mapping_label, cache, fmt_time(median(mapping)), fmt_gbs(mapping_gbs), "-",
                          cold ? fmt_ratio(mapping_gbs / floor_gbs) : "-", "-",
                          format("%.0f%%", rel_iqr(mapping) * 100)});
        if (!cold) {
            // A hot load needs both at once: its host copy and the DMAs reading the staging buffers.
            BusyLink busy(backends[0]);
            std::vector<double> busy_sec, busy_link;
            for (int r = 0; r < o.reps; ++r) {
                busy.reset();
                busy_sec.push_back(read_mapping(path, bufs, slot, [&] { busy.step(); }));
                busy_link.push_back(busy.gbs());
                record("mapping read, link busy", cache, busy_sec.back());
            }
            double busy_gbs = static_cast<double>(file_size(path)) / median(busy_sec) / 1e9;
            t.rows.push_back({format("mapping read, link busy: as the mapping read, while memcpy_async H2D from "
                                     "malloc_host runs 64 MiB after 64 MiB (%.1f GB/s meanwhile)",
                                     median(busy_link)),
                              cache, fmt_time(median(busy_sec)), fmt_gbs(busy_gbs), "-", "-", "-",
                              format("%.0f%%", rel_iqr(busy_sec) * 100)});
        }
        std::vector<double> sec[2], in_load[2];
        for (int r = 0; r < o.reps; ++r) {
            for (int j = 0; j < 2; ++j) {
                const Backend &b = backends[(r + j) % 2];  // alternating which goes first
                if (cold) {
                    double left = evict(path);
                    if (left > 0.05) notes.push_back(format("%s cold load %d: %.0f%% resident before it", b.label.c_str(), r, left * 100));
                }
                std::vector<Tensor> ts;
                std::vector<void *> ptrs;
                void *map = nullptr;
                size_t map_len = 0;
                const unsigned char *data = nullptr;
                double alloc_s = 0;
                double x = load(b, path, ts, ptrs, map, map_len, data, alloc_s);
                std::string bad = check_and_free(b, ts, ptrs, map, map_len, data);
                if (!bad.empty()) {
                    data_ok = false;
                    notes.push_back(format("DATA CHECK FAILED: %s %s load %d: tensor %s differs from the file",
                                           b.label.c_str(), cache, r, bad.c_str()));
                }
                sec[(r + j) % 2].push_back(x);
                in_load[(r + j) % 2].push_back(alloc_s);
                record(b.label.c_str(), cache, x);
                std::fprintf(stderr, "weights_load: %s %s %.3f s (%.1f GB/s), malloc_device %.2f ms%s\n",
                             b.label.c_str(), cache, x, bytes / x / 1e9, alloc_s * 1e3,
                             bad.empty() ? "" : " DATA CHECK FAILED");
            }
        }
        if (!cold) {
            // What a load spends allocating: the same malloc_device calls with no copy between them.
            std::vector<double> alloc[2];
            for (int r = 0; r < o.reps; ++r)
                for (int j = 0; j < 2; ++j) alloc[(r + j) % 2].push_back(allocate_only(backends[(r + j) % 2], made));
            for (int i = 0; i < 2; ++i) {
                record((backends[i].label + " allocation").c_str(), cache, median(alloc[i]));
                t.rows.push_back({backends[i].label + ": malloc_device per tensor alone (no copy), then "
                                                      "device_synchronize",
                                  "-", fmt_time(median(alloc[i])), "-", "-", "-", "-",
                                  format("%.0f%%", rel_iqr(alloc[i]) * 100)});
            }
        }
        double ref = median(sec[1]);
        for (int i = 0; i < 2; ++i) {
            double m = median(sec[i]);
            double gbs = bytes / m / 1e9;
            t.rows.push_back({backends[i].label + ": malloc_device + memcpy_sync per tensor from the mmap", cache,
                              fmt_time(m), fmt_gbs(gbs), fmt_ratio(ref / m), fmt_ratio(gbs / floor_gbs),
                              fmt_ratio(gbs / mapping_gbs), format("%.0f%%", rel_iqr(sec[i]) * 100)});
        }
        for (int i = 0; i < 2; ++i)
            t.rows.push_back({backends[i].label + ": of which its malloc_device calls", cache,
                              fmt_time(median(in_load[i])), "-", "-", "-", "-",
                              format("%.0f%%", rel_iqr(in_load[i]) * 100)});
    }
    if (csv) std::fclose(csv);
    for (unsigned char *b : bufs) backends[0].t->free_host(b);

    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::printf("## Weights load\n\n");
    std::string driver = kernel_driver_version();
    std::printf("- %s, host `%s`, CPU %s (%ld online); NVIDIA driver %s\n", utc_now().c_str(), host,
                cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN), driver.empty() ? "n/a" : driver.c_str());
    std::printf("- file `%s`: %.3f GB in %zu bf16 tensors (hidden %zu, intermediate %zu, %zu layers, vocabulary "
                "%zu, %zu heads, %zu key-value heads of %zu)\n",
                path.c_str(), bytes / 1e9, made.size(), s.hidden, s.intermediate, s.layers, s.vocab, s.heads,
                s.kv_heads, s.head_dim);
    std::printf("- ours `%s`; reference `%s`\n", o.ours.c_str(), o.reference.c_str());
    std::printf("- method: per library and page cache state, %d loads alternating which library goes first; each "
                "from open to device_synchronize after the last copy; every load's data checked against the file "
                "afterwards (not timed); medians; cold loads follow POSIX_FADV_DONTNEED of the file (checked with "
                "mincore); vs floor: against the pinned link (hot) or the faster storage read (cold); mapping read: "
                "the file through a fresh mapping, no device, %d times per state, median; vs mapping read: the "
                "load's GB/s over it\n\n",
                o.reps, o.reps);
    std::printf("%s", t.render().c_str());
    for (const std::string &n : notes) std::printf("\n%s", n.c_str());
    std::printf("\n");
    return data_ok ? 0 : 1;
}

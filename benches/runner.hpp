// runner.hpp: how table_bench measures: calibration and warm-up, interleaved repetitions over the
// four backends, medians, targets (PASS/MISS) and the Markdown/CSV report.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends.hpp"
#include "bench_util.hpp"

namespace bench {

// Column order, which is also the interleaving order of every repetition.
enum : int { kOursStatic = 0, kOursDynamic = 1, kReference = 2, kRaw = 3, kBackends = 4 };
inline const char *backend_name(int i) {
    static const char *const names[kBackends] = {"ours static", "ours dynamic", "reference", "raw"};
    return names[i];
}

enum class Unit { Latency, Bandwidth };

// A target of a row, checked for ours in static mode; each of a row's targets on its own.
struct Target {
    enum Kind { Overhead, MaxTime, MinRatio, MinGBs } kind = Overhead;
    double value = 0;  // MaxTime: seconds; MinRatio: reference time / our time; MinGBs: GB/s
    std::string text;

    // Within 5% of the raw column, or within 20 ns of it.
    static Target overhead() { return Target{Overhead, 0, "<= raw +5%/+20 ns"}; }
    static Target max_time(double s, std::string text) { return Target{MaxTime, s, std::move(text)}; }
    // "ours >= r x reference" in the row's own sense (bandwidth: faster; latency: less time).
    static Target min_ratio(double r, std::string text) { return Target{MinRatio, r, std::move(text)}; }
    // Bandwidth rows: at least this many GB/s (1e9 bytes per second).
    static Target min_gbs(double gbs) { return Target{MinGBs, gbs, format(">= %.0f GB/s", gbs)}; }
};

struct Spec {
    std::string name;
    int order = 0;  // rows are printed sorted by this, measured in whatever order memory allows
    Unit unit = Unit::Latency;
    double bytes = 0;        // Bandwidth: bytes moved per operation
    int reps = 11;           // interleaved repetitions after warm-up
    double min_rep_s = 2e-3; // each repetition runs the operation n times, n chosen to last this long
    long max_n = 1 << 20;
    std::vector<Target> targets;
    // Shown beside the raw cell when raw measures other calls than the reference ("pool").
    std::string raw_tag;
};

struct Row {
    Spec spec;
    std::array<std::vector<double>, kBackends> per_op;  // seconds per operation, one per repetition
    std::array<long, kBackends> n{};

    double med(int i) const { return median(per_op[i]); }
    std::string cell(int i) const {
        double t = med(i);
        std::string c = spec.unit == Unit::Latency ? fmt_time(t) : fmt_gbs(spec.bytes / t / 1e9);
        if (i == kRaw && !spec.raw_tag.empty()) c += " (" + spec.raw_tag + ")";
        return c;
    }
    // > 1: ours (static) better than the reference, in time for latency and in GB/s for bandwidth.
    double ratio() const { return med(kReference) / med(kOursStatic); }
    // Whether ours (static) meets target t.
    bool meets(const Target &t) const {
        double s = med(kOursStatic), raw = med(kRaw);
        switch (t.kind) {
        case Target::Overhead: return s <= raw * 1.05 || s - raw <= 20e-9;
        case Target::MaxTime: return s <= t.value;
        case Target::MinRatio: return ratio() >= t.value;
        case Target::MinGBs: return spec.bytes / s / 1e9 >= t.value;
        }
        return false;
    }
    // "-" without a target; otherwise "PASS" or "MISS" per target, in order, comma-separated.
    std::string result(bool markdown) const {
        if (spec.targets.empty()) return "-";
        std::string out;
        for (size_t k = 0; k < spec.targets.size(); ++k) {
            bool ok = meets(spec.targets[k]);
            out += k ? ", " : "";
            out += ok ? "PASS" : (markdown ? "**MISS**" : "MISS");
        }
        return out;
    }
    std::string target_text() const {
        if (spec.targets.empty()) return "-";
        std::string out;
        for (size_t k = 0; k < spec.targets.size(); ++k) out += (k ? "; " : "") + spec.targets[k].text;
        return out;
    }
    double spread() const {
        double w = 0;
        for (int i = 0; i < kBackends; ++i) w = std::max(w, rel_iqr(per_op[i]));
        return w;
    }
};

struct Options {
    std::string paths[3];  // ours static, ours dynamic, reference
    // Each library's getter symbol (--getters): ours twice, then the reference's.
    std::string getters[3] = {"llaisysNvidiaGetRuntimeAPI", "llaisysNvidiaGetRuntimeAPI", "seedGetRuntimeAPI"};
    double rep_scale = 1.0;
    bool quick = false;
    std::string only;  // run only rows whose name contains this (or one of its '|'-separated parts)
    double budget_s = 420;
    std::string csv_path;
    bool list_only = false;  // print every workload's name instead of measuring (no device touched)
    // Rotated column order and two buffer sets per backend (--no-rotate: neither).
    bool rotate = true;
    bool raw_pool = false;  // --raw-pool: the raw column's device buffers come from its pool
};

// Holds the backends and one context per backend; `with(i, f)` calls f(backend_i, ctx_i) with the
// backend's own type, so each workload is compiled once per type and the raw path is direct.
template <class Ctx>
class Runner {
public:
    TableBackend tables[3];
    RawBackend raw;
    Ctx ctx[kBackends];
    std::vector<Row> rows;
    std::vector<std::string> skipped, failures, notes;

    Runner(const Options &opt) : opt_(opt), start_s_(now_s()) {}

    template <class F>
    decltype(auto) with(int i, F &&f) {
        if (i == kRaw) return f(raw, ctx[i]);
        return f(tables[i], ctx[i]);
    }
    // Setup and teardown over the four backends; does nothing with --list.
    template <class F>
    void for_each(F &&f) {
        if (opt_.list_only) return;
        for (int i = 0; i < kBackends; ++i) with(i, f);
    }

    // Records a failed data check once, however often the same workload repeats it.
    void fail(const std::string &what) {
        if (std::find(failures.begin(), failures.end(), what) == failures.end()) failures.push_back(what);
    }

    // --only TEXT: rows whose name contains TEXT, or one of its '|'-separated parts.
    bool wanted(const std::string &name) const {
        if (opt_.only.empty()) return true;
        for (size_t at = 0;;) {
            const size_t bar = opt_.only.find('|', at);
            const std::string part = opt_.only.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
            if (!part.empty() && name.find(part) != std::string::npos) return true;
            if (bar == std::string::npos) return false;
            at = bar + 1;
        }
    }
    double elapsed_s() const { return now_s() - start_s_; }
    bool out_of_time() const { return elapsed_s() > opt_.budget_s; }
    const Options &options() const { return opt_; }

    // Measures one row: f(backend, ctx, n) runs the operation n times, returns the seconds of it alone.
    template <class F>
    void measure(Spec spec, F &&f) {
        if (!wanted(spec.name)) return;
        if (opt_.list_only) {
            Row row;
            row.spec = spec;
            std::printf("%s\t%s%s\n", spec.name.c_str(), row.target_text().c_str(),
                        spec.raw_tag.empty() ? "" : (" (raw: " + spec.raw_tag + ")").c_str());
            return;
        }
        if (out_of_time()) {
            skipped.push_back(spec.name);
            return;
        }
        spec.reps = std::max(3, static_cast<int>(std::lround(spec.reps * opt_.rep_scale)));
        if (opt_.quick) spec.min_rep_s = std::min(spec.min_rep_s, 1e-3);
        Row row;
        row.spec = spec;
        // Warm-up, then n grows until a repetition lasts min_rep_s, one backend at a time.
        for (int i = 0; i < kBackends; ++i) {
            long n = 1;
            run(i, f, n); // warm-up: first use may fill a cache or create a context
            double t = run(i, f, n);
            for (int k = 0; k < 24 && n < spec.max_n && t < spec.min_rep_s; ++k) {
                double grow = t > 1e-7 ? spec.min_rep_s / t * 1.25 : 16.0;
                grow = std::min(64.0, std::max(2.0, grow));
                n = std::min(spec.max_n, static_cast<long>(static_cast<double>(n) * grow));
                t = run(i, f, n);
            }
            row.n[i] = n;
        }
        // Interleaved: ours static, ours dynamic, reference, raw, then again, so drift in the
        // machine lands on all four alike; repetition r starts at column r mod 4, so no column
        // always runs right after the same other one (--no-rotate: always in column order).
        for (int r = 0; r < spec.reps; ++r)
            for (int j = 0; j < kBackends; ++j) {
                const int i = opt_.rotate ? (j + r) % kBackends : j;
                row.per_op[i].push_back(run(i, f, row.n[i]) / static_cast<double>(row.n[i]));
            }
        std::fprintf(stderr, "  %-44s %11s %11s %11s %11s  %7s %s\n", spec.name.c_str(), row.cell(0).c_str(),
                     row.cell(1).c_str(), row.cell(2).c_str(), row.cell(3).c_str(), fmt_ratio(row.ratio()).c_str(),
                     row.result(false).c_str());
        rows.push_back(std::move(row));
    }

    std::string markdown(const std::string &header) const {
        std::vector<const Row *> sorted;
        for (const auto &r : rows) sorted.push_back(&r);
        std::stable_sort(sorted.begin(), sorted.end(),
                         [](const Row *a, const Row *b) { return a->spec.order < b->spec.order; });
        MdTable t;
        t.header = {"workload", "ours static", "ours dynamic", "reference", "raw", "static vs ref",
                    "target (static)", "result", "spread"};
        t.left = 1;
        int pass = 0, miss = 0, with_target = 0;
        for (const Row *r : sorted) {
            for (const Target &tg : r->spec.targets) (r->meets(tg) ? pass : miss) += 1;
            with_target += r->spec.targets.empty() ? 0 : 1;
            t.rows.push_back({r->spec.name, r->cell(0), r->cell(1), r->cell(2), r->cell(3), fmt_ratio(r->ratio()),
                              r->target_text(), r->result(true), format("%.0f%%", r->spread() * 100)});
        }
        std::string out = header;
        out += t.render();
        out += format("\nTargets (ours static): %d PASS, %d MISS, of %d targets in %d rows. Run took %.0f s.\n", pass,
                      miss, pass + miss, with_target, elapsed_s());
        out += same_calls_line();
        for (const auto &n : notes) out += "\n" + n + "\n";
        if (!skipped.empty()) {
            out += "\nSkipped (time budget of " + format("%.0f", opt_.budget_s) + " s spent):";
            for (const auto &s : skipped) out += " `" + s + "`;";
            out += "\n";
        }
        for (const auto &f : failures) out += "\n**DATA CHECK FAILED**: " + f + "\n";
        return out;
    }

    void write_csv(const std::string &path) const {
        FILE *f = std::fopen(path.c_str(), "w");
        if (!f) {
            std::fprintf(stderr, "table_bench: cannot write %s\n", path.c_str());
            return;
        }
        std::fprintf(f, "workload,backend,unit,bytes,n_per_rep,seconds_per_op\n");
        for (const auto &r : rows)
            for (int i = 0; i < kBackends; ++i) {
                std::fprintf(f, "\"%s\",%s,%s,%.0f,%ld,", r.spec.name.c_str(), backend_name(i),
                             r.spec.unit == Unit::Latency ? "latency" : "bandwidth", r.spec.bytes, r.n[i]);
                for (size_t k = 0; k < r.per_op[i].size(); ++k)
                    std::fprintf(f, "%s%.6e", k ? ";" : "", r.per_op[i][k]);
                std::fprintf(f, "\n");
            }
        std::fclose(f);
    }

private:
    // The A/A check: raw makes the reference's own cudart calls, so raw against the reference
    // is what the method itself gives two equal backends (their own buffers, their own place
    // in each round). Over the rows with a ratio target, pageable copies apart (cudaMemcpy of
    // pageable memory varies far more): the lowest and highest such ratio.
    std::string same_calls_line() const {
        auto aa = [](const Row *r) { return r->med(kReference) / r->med(kRaw); };
        auto range = [&](bool pageable) -> std::string {
            const Row *lo = nullptr, *hi = nullptr;
            for (const auto &r : rows) {
                bool ratio = false;
                for (const Target &t : r.spec.targets) ratio = ratio || t.kind == Target::MinRatio;
                if (!ratio || !r.spec.raw_tag.empty()) continue;
                if ((r.spec.name.find("pageable") != std::string::npos) != pageable) continue;
                if (!lo || aa(&r) < aa(lo)) lo = &r;
                if (!hi || aa(&r) > aa(hi)) hi = &r;
            }
            if (!lo) return "no such rows";
            return format("%s (`%s`) to %s (`%s`)", fmt_ratio(aa(lo)).c_str(), lo->spec.name.c_str(),
                          fmt_ratio(aa(hi)).c_str(), hi->spec.name.c_str());
        };
        if (rows.empty()) return "";
        return format("\nSame calls (A/A): raw makes the reference's own cudart calls, so raw vs reference is what the "
                      "method gives two equal backends in this run (method: %s). Over the rows with a ratio target: "
                      "pinned and device memory %s; pageable memory %s.\n",
                      (std::string(opt_.rotate ? "rotated column order, two buffer sets per backend for copies below 1 GiB"
                                               : "--no-rotate: fixed column order, one buffer set") +
                       (opt_.raw_pool ? "; --raw-pool: raw's device buffers from its own pool" : ""))
                          .c_str(),
                      range(false).c_str(), range(true).c_str());
    }

    template <class F>
    double run(int i, F &f, long n) {
        return with(i, [&](auto &b, Ctx &c) -> double { return f(b, c, n); });
    }

    Options opt_;
    double start_s_;
};

}  // namespace bench

// bench_util.hpp: host clock, the date, random fill, statistics, number formatting and Markdown
// tables for the benchmarks.
// Knows nothing about CUDA or llaisys.
// Also the machine as /proc tells it (CPU model, NVIDIA kernel module version).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace bench {

// Seconds on the monotonic host clock. Device work is asynchronous: every timed region in the
// bench ends with a call that waits for its work (memcpy_sync, stream_synchronize).
inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline std::string vformat(const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int len = std::vsnprintf(nullptr, 0, fmt, ap2);
    va_end(ap2);
    if (len <= 0) return std::string();
    std::string s(static_cast<size_t>(len) + 1, '\0');
    std::vsnprintf(&s[0], s.size(), fmt, ap);
    s.resize(static_cast<size_t>(len));
    return s;
}

__attribute__((format(printf, 1, 2))) inline std::string format(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

// The name messages start with; a program other than table_bench sets its own first.
inline const char *&program_name() {
    static const char *name = "table_bench";
    return name;
}

// Prints "<program>: <message>" to stderr and exits with `code`.
__attribute__((format(printf, 2, 3), noreturn)) inline void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "%s: %s\n", program_name(), s.c_str());
    std::exit(code);
}

// The time now in UTC ("%Y-%m-%d %H:%M UTC"), for a report's header.
inline std::string utc_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm;
    gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
    return buf;
}

// Random bytes (xorshift64*), one stream per seed (a weights file's tensors, a copy's source).
inline void fill_random(unsigned char *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t v = x * 0x2545F4914F6CDD1Dull;
        std::memcpy(p + i, &v, 8);
    }
    for (; i < n; ++i) p[i] = static_cast<unsigned char>(x >> (8 * (i % 8)));
}

// Quantile q in [0, 1] with linear interpolation; NaN for an empty sample.
inline double quantile(std::vector<double> v, double q) {
    if (v.empty()) return __builtin_nan("");
    std::sort(v.begin(), v.end());
    double pos = q * static_cast<double>(v.size() - 1);
    size_t lo = static_cast<size_t>(pos);
    size_t hi = std::min(lo + 1, v.size() - 1);
    double frac = pos - static_cast<double>(lo);
    return v[lo] + (v[hi] - v[lo]) * frac;
}

inline double median(const std::vector<double> &v) { return quantile(v, 0.5); }

// Interquartile range over the median: how noisy one cell is.
inline double rel_iqr(const std::vector<double> &v) {
    double m = median(v);
    return m > 0 ? (quantile(v, 0.75) - quantile(v, 0.25)) / m : 0.0;
}

// Three significant digits, unit chosen by magnitude: "23.4 ns", "1.52 us", "744 us", "29.8 ms".
inline std::string three_digits(double v, const char *unit) {
    if (!(v == v)) return "n/a";
    return format(v >= 100 ? "%.0f%s" : v >= 10 ? "%.1f%s" : "%.2f%s", v, unit);
}

inline std::string fmt_time(double s) {
    if (s < 1e-6) return three_digits(s * 1e9, " ns");
    if (s < 1e-3) return three_digits(s * 1e6, " us");
    if (s < 1.0) return three_digits(s * 1e3, " ms");
    return three_digits(s, " s");
}

// Decimal gigabytes per second (1 GB = 1e9 bytes), as nvidia and BASELINES.md count them.
inline std::string fmt_gbs(double gbs) { return three_digits(gbs, " GB/s"); }
inline std::string fmt_ratio(double r) { return three_digits(r, "x"); }

// "4 KiB", "1 MiB", "1 GiB", or bytes.
inline std::string fmt_size(size_t n) {
    if (n >= (1ull << 30) && n % (1ull << 30) == 0) return format("%zu GiB", n >> 30);
    if (n >= (1ull << 20) && n % (1ull << 20) == 0) return format("%zu MiB", n >> 20);
    if (n >= (1ull << 10) && n % (1ull << 10) == 0) return format("%zu KiB", n >> 10);
    return format("%zu B", n);
}

// A Markdown pipe table. The first `left` columns are left-aligned, the rest right-aligned.
struct MdTable {
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    size_t left = 1;

    std::string render() const {
        std::string out = "|";
        for (const auto &h : header) out += " " + h + " |";
        out += "\n|";
        for (size_t c = 0; c < header.size(); ++c) out += c < left ? "---|" : "--:|";
        out += "\n";
        for (const auto &r : rows) {
            out += "|";
            for (const auto &cell : r) out += " " + cell + " |";
            out += "\n";
        }
        return out;
    }
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

}  // namespace bench

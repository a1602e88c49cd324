// weights_file.hpp: the safetensors file weights_load measures: a Qwen2 decoder's tensors (bf16,
// random data), the file's header written and read back as a loader reads it, and the file's
// pages in the page cache (resident fraction, eviction, plain reads: the storage's own speed; reads
// through a fresh mapping: the floor of a copy from it).
// Knows nothing about CUDA or llaisys.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace bench {

constexpr size_t MiB = 1024 * 1024;

// A Qwen2 decoder's shape; bf16 (2 bytes) everywhere.
struct Shape {
    size_t hidden = 1536, intermediate = 8960, layers = 28, vocab = 151936, heads = 12, kv_heads = 2,
           head_dim = 128;
};

struct Tensor {
    std::string name;
    std::vector<size_t> dims;
    size_t begin = 0, end = 0;  // data offsets, from the start of the data section
    size_t bytes() const { return end - begin; }
};

// The tensors of `s` with their offsets, in a checkpoint's order (untied LM head, q/k/v biases).
std::vector<Tensor> tensors_of(const Shape &s) {
    std::vector<Tensor> t;
    size_t at = 0;
    auto add = [&](std::string name, std::vector<size_t> dims) {
        size_t n = 2;
        for (size_t d : dims) n *= d;
        t.push_back({std::move(name), std::move(dims), at, at + n});
        at += n;
    };
    const size_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
    add("model.embed_tokens.weight", {s.vocab, s.hidden});
    for (size_t l = 0; l < s.layers; ++l) {
        std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {s.hidden});
        add(p + "self_attn.q_proj.weight", {q, s.hidden});
        add(p + "self_attn.q_proj.bias", {q});
        add(p + "self_attn.k_proj.weight", {kv, s.hidden});
        add(p + "self_attn.k_proj.bias", {kv});
        add(p + "self_attn.v_proj.weight", {kv, s.hidden});
        add(p + "self_attn.v_proj.bias", {kv});
        add(p + "self_attn.o_proj.weight", {s.hidden, q});
        add(p + "post_attention_layernorm.weight", {s.hidden});
        add(p + "mlp.gate_proj.weight", {s.intermediate, s.hidden});
        add(p + "mlp.up_proj.weight", {s.intermediate, s.hidden});
        add(p + "mlp.down_proj.weight", {s.hidden, s.intermediate});
    }
    add("model.norm.weight", {s.hidden});
    add("lm_head.weight", {s.vocab, s.hidden});
    return t;
}

// The safetensors header of `t`: JSON, padded with spaces to a multiple of 8 bytes.
std::string header_of(const std::vector<Tensor> &t) {
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
    for (const Tensor &x : t) {
        h += ",\"" + x.name + "\":{\"dtype\":\"BF16\",\"shape\":[";
        for (size_t i = 0; i < x.dims.size(); ++i) h += (i ? "," : "") + std::to_string(x.dims[i]);
        h += "],\"data_offsets\":[" + std::to_string(x.begin) + "," + std::to_string(x.end) + "]}";
    }
    h += "}";
    while (h.size() % 8) h += ' ';
    return h;
}

// Reads a safetensors header's names and data offsets; false on anything it does not understand.
bool parse_header(const char *h, size_t n, std::vector<Tensor> &out) {
    size_t i = 0;
    auto ws = [&] { while (i < n && (h[i] == ' ' || h[i] == '\n' || h[i] == '\t' || h[i] == '\r')) ++i; };
    auto str = [&](std::string &s) {
        ws();
        if (i >= n || h[i] != '"') return false;
        for (++i; i < n && h[i] != '"'; ++i) {
            if (h[i] == '\\') ++i;
            if (i < n) s += h[i];
        }
        return i++ < n;
    };
    auto skip_value = [&] {  // any value: a string, an object or array (by depth), or a scalar
        ws();
        if (i < n && h[i] == '"') {
            std::string ignored;
            return str(ignored);
        }
        int depth = 0;
        while (i < n) {
            char c = h[i];
            if (c == '"') {
                std::string ignored;
                if (!str(ignored)) return false;
                continue;
            }
            if (depth == 0 && (c == ',' || c == '}' || c == ']')) return true;
            if (c == '{' || c == '[') ++depth;
            if (c == '}' || c == ']') --depth;
            ++i;
            if (depth == 0 && (c == '}' || c == ']')) return true;
        }
        return false;
    };
    ws();
    if (i >= n || h[i++] != '{') return false;
    for (;;) {
        ws();
        if (i < n && h[i] == '}') return true;
        std::string key;
        if (!str(key)) return false;
        ws();
        if (i >= n || h[i++] != ':') return false;
        ws();
        if (key == "__metadata__") {
            if (!skip_value()) return false;
        } else {
            if (i >= n || h[i++] != '{') return false;
            Tensor t;
            t.name = key;
            bool offsets = false;
            for (;;) {
                ws();
                if (i < n && h[i] == '}') { ++i; break; }
                std::string field;
                if (!str(field)) return false;
                ws();
                if (i >= n || h[i++] != ':') return false;
                ws();
                if (field == "data_offsets") {
                    unsigned long long a = 0, b = 0;
                    int used = 0;
                    if (std::sscanf(h + i, "[%llu ,%llu ]%n", &a, &b, &used) != 2 || used <= 0) return false;
                    i += static_cast<size_t>(used);
                    t.begin = a;
                    t.end = b;
                    offsets = b >= a;
                } else if (!skip_value()) {
                    return false;
                }
                ws();
                if (i < n && h[i] == ',') ++i;
            }
            if (!offsets) return false;
            out.push_back(t);
        }
        ws();
        if (i < n && h[i] == ',') ++i;
    }
}

void write_all(int fd, const void *p, size_t n, const std::string &path) {
    const char *c = static_cast<const char *>(p);
    while (n) {
        ssize_t w = ::write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die(1, "cannot write %s: %s", path.c_str(), std::strerror(errno));
        c += w;
        n -= static_cast<size_t>(w);
    }
}

// Writes and syncs the file of `t`, so that its pages are clean and can be evicted.
void make_file(const std::string &path, const std::vector<Tensor> &t) {
    std::string tmp = path + ".partial";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die(1, "cannot create %s: %s", tmp.c_str(), std::strerror(errno));
    std::string h = header_of(t);
    uint64_t len = h.size();
    write_all(fd, &len, 8, tmp);
    write_all(fd, h.data(), h.size(), tmp);
    std::vector<unsigned char> buf;
    for (size_t k = 0; k < t.size(); ++k) {
        buf.resize(t[k].bytes());
        fill_random(buf.data(), buf.size(), k + 1);
        write_all(fd, buf.data(), buf.size(), tmp);
    }
    if (::fsync(fd) != 0) die(1, "fsync %s: %s", tmp.c_str(), std::strerror(errno));
    ::close(fd);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) die(1, "rename %s: %s", tmp.c_str(), std::strerror(errno));
}

size_t file_size(const std::string &path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

// The fraction of the file's pages in the page cache (mincore over a mapping).
double resident_fraction(const std::string &path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) die(1, "cannot open %s: %s", path.c_str(), std::strerror(errno));
    size_t n = file_size(path);
    void *m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) die(1, "mmap %s: %s", path.c_str(), std::strerror(errno));
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> v((n + page - 1) / page);
    size_t in = 0;
    if (::mincore(m, n, v.data()) == 0)
        for (unsigned char c : v) in += c & 1;
    ::munmap(m, n);
    return v.empty() ? 0.0 : static_cast<double>(in) / static_cast<double>(v.size());
}

// Drops the file's pages from the page cache; returns the fraction still resident.
double evict(const std::string &path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) die(1, "cannot open %s: %s", path.c_str(), std::strerror(errno));
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    return resident_fraction(path);
}

// Reads the whole file with `threads` threads (each a contiguous share, 16 MiB reads); seconds.
double read_file(const std::string &path, int threads) {
    size_t n = file_size(path);
    double t0 = now_s();
    std::vector<std::thread> pool;
    std::vector<int> failed(static_cast<size_t>(threads), 0);
    for (int k = 0; k < threads; ++k) {
        pool.emplace_back([&, k] {
            int fd = ::open(path.c_str(), O_RDONLY);
            if (fd < 0) { failed[static_cast<size_t>(k)] = 1; return; }
            size_t share = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
            size_t at = share * static_cast<size_t>(k), end = std::min(n, at + share);
            std::vector<char> buf(16 * MiB);
            while (at < end) {
                ssize_t r = ::pread(fd, buf.data(), std::min(buf.size(), end - at), static_cast<off_t>(at));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) { failed[static_cast<size_t>(k)] = 1; break; }
                at += static_cast<size_t>(r);
            }
            ::close(fd);
        });
    }
    for (auto &t : pool) t.join();
    for (int f : failed)
        if (f) die(1, "reading %s failed", path.c_str());
    return now_s() - t0;
}

// Reads the whole file through a fresh mapping as a staged copy reads its source: `bufs.size()`
// threads copy 64 KiB pieces in file order into their own buffers; seconds. `meanwhile`, when
// given, runs on the calling thread over and over until every reader has ended.
double read_mapping(const std::string &path, const std::vector<unsigned char *> &bufs, size_t buf_bytes,
                    const std::function<void()> &meanwhile = {}) {
    const size_t piece = 64 * 1024;
    const size_t ring = buf_bytes - buf_bytes % piece;  // whole pieces per buffer
    size_t n = file_size(path);
    double t0 = now_s();
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) die(1, "cannot open %s: %s", path.c_str(), std::strerror(errno));
    void *m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) die(1, "mmap %s: %s", path.c_str(), std::strerror(errno));
    const unsigned char *base = static_cast<const unsigned char *>(m);
    std::atomic<size_t> next{0};
    std::atomic<size_t> running{bufs.size()};
    std::vector<double> ended(bufs.size(), t0);
    std::vector<std::thread> pool;
    for (size_t i = 0; i < bufs.size(); ++i) {
        pool.emplace_back([&, i] {
            unsigned char *buf = bufs[i];
            for (size_t k = 0, at; (at = next.fetch_add(piece)) < n; ++k)
                std::memcpy(buf + (k * piece) % ring, base + at, std::min(piece, n - at));
            ended[i] = now_s();
            running.fetch_sub(1, std::memory_order_release);
        });
    }
    if (meanwhile) {
        do meanwhile();
        while (running.load(std::memory_order_acquire) > 0);
    }
    for (auto &t : pool) t.join();
    double sec = *std::max_element(ended.begin(), ended.end()) - t0;
    ::munmap(m, n);
    return sec;
}

}  // namespace bench

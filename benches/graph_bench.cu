// graph_bench.cu: the decode-step rows (docs/benchmark.md). A step as a llaisys core runs it:
// temporaries from malloc_device, a 64 B H2D copy from pinned memory through the table's
// memcpy_async, K tiny kernels on a create_stream stream, a 64 B D2H copy back, the temporaries
// freed, stream_synchronize. Measured per step, for K = 50, 200, 800:
//   - eager through our library and through the reference backend (both loaded with dlopen, each
//     with its own cudart; the kernels are this program's);
//   - graph replay through our library: the step (without the final synchronize) captured once
//     with llaisysNvidiaStreamBeginCapture, then llaisysNvidiaGraphLaunch + stream_synchronize.
// Every step's result is checked (the D2H copy brings back the state the kernels computed).
// Repetitions rotate the three columns; the figure is the median of the repetitions' time per
// step. Prints a Markdown table; --csv writes every sample.
//   usage: graph_bench OURS.so REFERENCE.so [--steps N] [--reps R] [--csv FILE] [--only K]
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "llaisys_runtime.h"
#include "runtime_table.hpp"

namespace {

const int kFloats = 16;  // 64 B

__global__ void add_in(float *state, const float *in) { state[threadIdx.x] += in[0]; }
__global__ void copy_to(float *dst, const float *src) { dst[threadIdx.x] = src[threadIdx.x]; }

struct Column {
    const char *name;
    const LlaisysRuntimeAPI *t;
    const LlaisysNvidiaGraphAPI *g;  // ours only
    bool graph;
    llaisysStream_t s = nullptr;
    float *state = nullptr, *h_in = nullptr, *h_out = nullptr;
    float expect = 0.0f;
    llaisysNvidiaGraph_t graph_h = nullptr;
    llaisysNvidiaGraphExec_t exec = nullptr;
};

// The step's work on `c.s`, without its final synchronize.
void enqueue_step(Column &c, int kernels) {
    float *in = static_cast<float *>(c.t->malloc_device(kFloats * sizeof(float)));
    float *t1 = static_cast<float *>(c.t->malloc_device(64 << 10));
    float *t2 = static_cast<float *>(c.t->malloc_device(256 << 10));
    if (!in || !t1 || !t2) bench::die(1, "%s: malloc_device returned NULL", c.name);
    cudaStream_t s = static_cast<cudaStream_t>(c.s);
    c.t->memcpy_async(in, c.h_in, kFloats * sizeof(float), LLAISYS_MEMCPY_H2D, c.s);
    for (int k = 0; k < kernels; ++k) add_in<<<1, kFloats, 0, s>>>(c.state, in);
    copy_to<<<1, kFloats, 0, s>>>(t1, c.state);
    copy_to<<<1, kFloats, 0, s>>>(t2, t1);
    c.t->memcpy_async(c.h_out, t2, kFloats * sizeof(float), LLAISYS_MEMCPY_D2H, c.s);
    c.t->free_device(in);
    c.t->free_device(t1);
    c.t->free_device(t2);
}

// One step: a new input, the work (eager or the graph), synchronize, check.
void step(Column &c, int kernels, int i) {
    float v = static_cast<float>(i % 3 + 1);
    for (int j = 0; j < kFloats; ++j) c.h_in[j] = v;
    if (c.graph) {
        if (c.g->launch(c.exec, c.s) != 0) bench::die(1, "%s: graph launch failed", c.name);
    } else {
        enqueue_step(c, kernels);
    }
    c.t->stream_synchronize(c.s);
    c.expect += v * kernels;
    for (int j = 0; j < kFloats; ++j)
        if (c.h_out[j] != c.expect)
            bench::die(1, "DATA CHECK FAILED: %s K=%d step %d: element %d is %g, expected %g", c.name, kernels, i, j,
                       c.h_out[j], c.expect);
}

void setup(Column &c, int kernels) {
    c.t->set_device(0);
    c.s = c.t->create_stream();
    c.state = static_cast<float *>(c.t->malloc_device(kFloats * sizeof(float)));
    c.h_in = static_cast<float *>(c.t->malloc_host(kFloats * sizeof(float)));
    c.h_out = static_cast<float *>(c.t->malloc_host(kFloats * sizeof(float)));
    if (!c.s || !c.state || !c.h_in || !c.h_out) bench::die(1, "%s: setup failed", c.name);
    std::vector<float> zero(kFloats, 0.0f);
    c.t->memcpy_sync(c.state, zero.data(), sizeof(float) * kFloats, LLAISYS_MEMCPY_H2D);
    c.expect = 0.0f;
    if (c.graph) {
        if (c.g->begin_capture(c.s, LLAISYS_NVIDIA_CAPTURE_MODE_THREAD_LOCAL, 0) != 0)
            bench::die(1, "%s: begin_capture failed", c.name);
        enqueue_step(c, kernels);
        if (c.g->end_capture(c.s, &c.graph_h) != 0) bench::die(1, "%s: end_capture failed", c.name);
        char log[512] = "";
        if (c.g->instantiate(&c.exec, c.graph_h, log, sizeof log) != 0)
            bench::die(1, "%s: instantiate failed: %s", c.name, log);
        if (c.g->upload(c.exec, c.s) != 0) bench::die(1, "%s: upload failed", c.name);
    }
}

void teardown(Column &c) {
    if (c.graph) {
        c.g->exec_destroy(c.exec);
        c.g->graph_destroy(c.graph_h);
    }
    c.t->free_device(c.state);
    c.t->free_host(c.h_in);
    c.t->free_host(c.h_out);
    c.t->destroy_stream(c.s);
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> paths;
    int steps = 200, reps = 9;
    int only = 0;
    std::string csv;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) bench::die(2, "%s needs a value", a.c_str());
            return argv[++i];
        };
        if (a == "--steps") steps = std::atoi(value().c_str());
        else if (a == "--reps") reps = std::atoi(value().c_str());
        else if (a == "--csv") csv = value();
        else if (a == "--only") only = std::atoi(value().c_str());
        else paths.push_back(a);
    }
    if (paths.size() != 2 || steps < 1 || reps < 3)
        bench::die(2, "usage: graph_bench OURS.so REFERENCE.so [--steps N>=1] [--reps R>=3] [--csv FILE] [--only K]");
    const LlaisysRuntimeAPI *ours = bench::load_runtime_table("ours", paths[0], "llaisysNvidiaGetRuntimeAPI");
    const LlaisysRuntimeAPI *ref = bench::load_runtime_table("reference", paths[1], "seedGetRuntimeAPI");
    void *h = dlopen(paths[0].c_str(), RTLD_NOW | RTLD_NOLOAD);
    auto get_graph = h ? reinterpret_cast<const LlaisysNvidiaGraphAPI *(*)()>(dlsym(h, "llaisysNvidiaGetGraphAPI"))
                       : nullptr;
    if (!get_graph) bench::die(2, "ours: %s has no llaisysNvidiaGetGraphAPI", paths[0].c_str());
    const LlaisysNvidiaGraphAPI *graphs = get_graph();
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) bench::die(3, "no CUDA device available");

    FILE *csv_f = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
    if (csv_f) std::fprintf(csv_f, "k,column,rep,seconds_per_step\n");
    std::printf("## Decode step: eager and graph replay\n\n");
    std::printf("- a step: malloc_device x3 (64 B, 64 KiB, 256 KiB), memcpy_async 64 B H2D from pinned memory, K "
                "tiny kernels (1 block of 16 threads), 2 copy kernels, memcpy_async 64 B D2H, free_device x3, "
                "stream_synchronize; graph: the step captured once (thread-local mode), then graph launch + "
                "stream_synchronize. %d steps per repetition, median of %d repetitions (columns rotated).\n\n",
                steps, reps);
    std::printf("| K | ours eager (us/step) | reference eager | ours graph replay | ours eager / reference | "
                "replay speed-up over ours eager |\n|---|---|---|---|---|---|\n");
    for (int kernels : {50, 200, 800}) {
        if (only && kernels != only) continue;
        Column cols[3] = {{"ours eager", ours, graphs, false},
                          {"reference eager", ref, nullptr, false},
                          {"ours graph", ours, graphs, true}};
        for (auto &c : cols) setup(c, kernels);
        // Warm-up: caches filled, graphs uploaded, lazy loading done.
        for (auto &c : cols)
            for (int i = 0; i < 20; ++i) step(c, kernels, i);
        std::vector<double> t[3];
        int i = 20;
        for (int r = 0; r < reps; ++r) {
            for (int j = 0; j < 3; ++j) {
                int col = (r + j) % 3;
                Column &c = cols[col];
                double t0 = bench::now_s();
                for (int n = 0; n < steps; ++n) step(c, kernels, i++);
                double per = (bench::now_s() - t0) / steps;
                t[col].push_back(per);
                if (csv_f) std::fprintf(csv_f, "%d,%s,%d,%.9f\n", kernels, c.name, r, per);
            }
        }
        double e = bench::median(t[0]), ref_e = bench::median(t[1]), g = bench::median(t[2]);
        std::printf("| %d | %.1f | %.1f | %.1f | %.3fx | %.2fx |\n", kernels, e * 1e6, ref_e * 1e6, g * 1e6, e / ref_e,
                    e / g);
        std::fflush(stdout);
        for (auto &c : cols) teardown(c);
    }
    if (csv_f) std::fclose(csv_f);
    return 0;
}

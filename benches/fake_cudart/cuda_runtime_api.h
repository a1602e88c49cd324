// A stand-in for the part of cudart that benches/pageable_probe.cpp uses, for testing the probe's
// logic on a machine without a GPU (benches/test_bench_tools.py builds the probe with
// -Ibenches/fake_cudart ahead of the real headers). Never used on the GPU machine.
//
// "Device" memory is host memory. Work queued on a stream runs in order, as late as the host can
// tell: only when the host waits for it (an event query that reaches its record, a synchronize, a
// blocking copy or memset). So a pipeline that overwrites a staging buffer before the event after
// its DMA completed, or reads one before then, always gets wrong data and fails the probe's data
// check. The first query of each pending record answers cudaErrorNotReady (the spin path runs).
// One stream (the probe makes one); the legacy stream is the same queue.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorNotReady = 600 };
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3
};
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostRegisterDefault 0x00

struct cudaDeviceProp {
    char name[256];
    int major, minor, pciDomainID, pciBusID, pciDeviceID;
};

struct FakeCudaEvent {
    std::atomic<uint64_t> recorded{0}, completed{0}, asked{0};
};
typedef FakeCudaEvent *cudaEvent_t;
struct FakeCudaStream {};
typedef FakeCudaStream *cudaStream_t;

namespace fake_cudart {

struct Op {
    void *dst;
    const void *src;
    size_t n;
    FakeCudaEvent *event;  // non-null: an event record
    uint64_t seq;
};

class Queue {
public:
    void push(const Op &op) {
        std::lock_guard<std::mutex> g(m_);
        q_.push_back(op);
    }
    void drain() {
        std::lock_guard<std::mutex> g(m_);
        while (!q_.empty()) run_front();
    }
    // Runs the queue up to the record `seq` of `e`.
    void run_to(FakeCudaEvent *e, uint64_t seq) {
        std::lock_guard<std::mutex> g(m_);
        while (!q_.empty() && e->completed.load(std::memory_order_acquire) < seq) run_front();
    }

private:
    void run_front() {
        Op op = q_.front();
        q_.pop_front();
        if (op.event) op.event->completed.store(op.seq, std::memory_order_release);
        else std::memcpy(op.dst, op.src, op.n);
    }
    std::mutex m_;
    std::deque<Op> q_;
};

inline Queue &queue() {
    static Queue q;
    return q;
}

}  // namespace fake_cudart

inline const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorNotReady ? "cudaErrorNotReady" : "cudaErrorInvalidValue";
}
inline const char *cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }
inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaFree(void *p) {
    std::free(p);
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void *p) {
    std::free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = std::malloc(n);
    return *p ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    std::memset(p, 0, sizeof *p);
    std::strcpy(p->name, "fake cudart (host memory)");
    return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    fake_cudart::queue().drain();
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaDeviceSynchronize(); }
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
    fake_cudart::queue().push(fake_cudart::Op{d, s, n, nullptr, 0});
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
    cudaMemcpyAsync(d, s, n, k, nullptr);
    return cudaDeviceSynchronize();
}
inline cudaError_t cudaMemset(void *p, int v, size_t n) {
    cudaDeviceSynchronize();
    std::memset(p, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new FakeCudaStream;
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    cudaDeviceSynchronize();
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = new FakeCudaEvent;
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    cudaDeviceSynchronize();
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    uint64_t seq = e->recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
    fake_cudart::queue().push(fake_cudart::Op{nullptr, nullptr, 0, e, seq});
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    uint64_t seq = e->recorded.load(std::memory_order_acquire);
    if (e->completed.load(std::memory_order_acquire) >= seq) return cudaSuccess;
    if (e->asked.exchange(seq) != seq) return cudaErrorNotReady;  // the first time this record is asked
    fake_cudart::queue().run_to(e, seq);
    return cudaSuccess;
}
inline cudaError_t cudaHostRegister(void *, size_t, unsigned) { return cudaSuccess; }
inline cudaError_t cudaHostUnregister(void *) { return cudaSuccess; }

// A stand-in libcudart.so.13, never used on a GPU machine. Device memory is host memory.
// - As is (scripts/overhead.sh): every call our library makes succeeds at once, copies are
//   memcpy, so that valgrind counts only our own instructions around each CUDA call.
// - With -DFAKE_ASYNC (tests/staged_fake.rs, tests/bench_fake.rs): a stand-in GPU thread runs the queued copies,
//   memsets and stream-ordered frees in order, each after a pseudo-random delay (0-31 us, one in
//   8 2 ms), and events complete when the work queued before them has run: the staged pageable
//   copies' ordering (a staging buffer reused before its DMA has read it, a chunk copied out
//   before it landed) shows as wrong data. Copies from or to memory that is neither cudaMalloc'd
//   nor pinned run at once after the queue has drained, as CUDA's pageable copies are
//   synchronous for the host. FAKE_FAIL_COPY=N makes the N-th cudaMemcpyAsync fail
//   (cudaErrorInvalidValue), FAKE_FAIL_QUERY=N the N-th cudaEventQuery (cudaErrorUnknown).
//   Streams are tracked: a call on a destroyed one fails (400) and is counted; a test can make
//   cudaEventRecord fail (fake_fail_next_records, fake_dead_stream_calls: tests/host_cache_fake.rs).
//   Kinder than CUDA in ways the test cannot see: one queue for every stream (work on two
//   streams is never reordered), errors only from the call that fails (none sticky), and
//   coherent memcpy with x86 ordering (a missing fence or a relaxed publish would still pass).
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
typedef int E;
static __thread int cur = 0;
static uintptr_t next_h = 0x10000;
static void *h(void) { return (void *)(next_h += 0x100); }
E cudaGetDeviceCount(int *n) { *n = 1; return 0; }
E cudaGetDevice(int *d) { *d = cur; return 0; }
E cudaSetDevice(int d) { if (d != 0) return 101; cur = d; return 0; }
E cudaInitDevice(int d, unsigned a, unsigned b) { return 0; }
#ifndef FAKE_ASYNC
E cudaDeviceSynchronize(void) { return 0; }
#endif
E cudaDeviceGetAttribute(int *v, int attr, int d) { *v = 1; return 0; }
E cudaDeviceCanAccessPeer(int *v, int a, int b) { *v = 0; return 0; }
E cudaDeviceEnablePeerAccess(int a, unsigned f) { return 0; }
E cudaDeviceGetPCIBusId(char *s, int n, int d) { strncpy(s, "0000:00:00.0", n); return 0; }
E cudaDeviceGetStreamPriorityRange(int *lo, int *hi) { *lo = 0; *hi = 0; return 0; }
E cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
E cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
#ifdef FAKE_ASYNC
// benches/table_bench.cpp names the GPU in its report (tests/bench_fake.rs); the name is the
// first field of cudaDeviceProp, the caller zeroed the rest.
E cudaGetDeviceProperties(void *p, int d) { strcpy((char *)p, "stand-in GPU (fake_cudart.c)"); return 0; }
#else
E cudaGetDeviceProperties(void *p, int d) { return 1; }
#endif
const char *cudaGetErrorName(E e) { return "cudaErrorFake"; }
const char *cudaGetErrorString(E e) { return "fake"; }
E cudaGetLastError(void) { return 0; }
#ifndef FAKE_ASYNC
E cudaEventCreateWithFlags(void **e, unsigned f) { *e = h(); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaEventDestroy(void *e) { return 0; }
#endif
E cudaEventElapsedTime(float *ms, void *a, void *b) { *ms = 0; return 0; }
#ifndef FAKE_ASYNC
E cudaEventQuery(void *e) { return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaEventRecord(void *e, void *s) { return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaEventSynchronize(void *e) { return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaStreamCreate(void **s) { *s = h(); return 0; }
E cudaStreamCreateWithPriority(void **s, unsigned f, int p) { *s = h(); return 0; }
E cudaStreamDestroy(void *s) { return 0; }
#endif
E cudaStreamGetDevice(void *s, int *d) { *d = 0; return 0; }
E cudaStreamGetFlags(void *s, unsigned *f) { *f = 0; return 0; }
#ifndef FAKE_ASYNC
E cudaStreamQuery(void *s) { return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaStreamSynchronize(void *s) { return 0; }
#endif
E cudaStreamWaitEvent(void *s, void *e, unsigned f) { return 0; }
#ifndef FAKE_ASYNC
E cudaMalloc(void **p, size_t n) { *p = malloc(n); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaFree(void *p) { free(p); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaMallocHost(void **p, size_t n) { *p = malloc(n); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaHostAlloc(void **p, size_t n, unsigned f) { *p = malloc(n); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaFreeHost(void *p) { free(p); return 0; }
#endif
E cudaHostGetDevicePointer(void **d, void *h, unsigned f) { *d = h; return 0; }
E cudaHostRegister(void *p, size_t n, unsigned f) { return 0; }
E cudaHostUnregister(void *p) { return 0; }
E cudaMallocManaged(void **p, size_t n, unsigned f) { *p = malloc(n); return 0; }
E cudaMemAdvise(const void *p, size_t n, int a, int d) { return 0; }
E cudaMemPrefetchAsync(const void *p, size_t n, int d, void *s) { return 0; }
E cudaMemGetInfo(size_t *f, size_t *t) { *f = *t = (size_t)80 << 30; return 0; }
E cudaMemPoolCreate(void **p, const void *props) { *p = h(); return 0; }
E cudaMemPoolDestroy(void *p) { return 0; }
E cudaMemPoolGetAttribute(void *p, int a, void *v) { memset(v, 0, 8); return 0; }
E cudaMemPoolSetAttribute(void *p, int a, void *v) { return 0; }
E cudaMemPoolSetAccess(void *p, const void *d, size_t n) { return 0; }
E cudaMemPoolTrimTo(void *p, size_t n) { return 0; }
#ifndef FAKE_ASYNC
E cudaMallocFromPoolAsync(void **p, size_t n, void *pool, void *s) { *p = malloc(n); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaFreeAsync(void *p, void *s) { free(p); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaMemcpy(void *d, const void *s, size_t n, int k) { memcpy(d, s, n); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaMemcpyAsync(void *d, const void *s, size_t n, int k, void *st) { memcpy(d, s, n); return 0; }
#endif
E cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, void *st) { memcpy(d, s, n); return 0; }
#ifndef FAKE_ASYNC
E cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
#endif
#ifndef FAKE_ASYNC
E cudaMemsetAsync(void *p, int v, size_t n, void *s) { memset(p, v, n); return 0; }
#endif
struct attrs { int type; int device; void *dp; void *hp; };
#ifndef FAKE_ASYNC
E cudaPointerGetAttributes(struct attrs *a, const void *p) { a->type = 0; a->device = -2; a->dp = 0; a->hp = 0; return 0; }
#endif

#ifdef FAKE_ASYNC
#include <pthread.h>
#include <time.h>

enum { OP_COPY, OP_SET, OP_FREE };
struct op { int kind; void *d; const void *s; size_t n; int v; };
#define QCAP 4096
static struct op q[QCAP];
static uint64_t q_head, q_tail; // ops [q_head, q_tail) are queued; q_head ops have run
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_work = PTHREAD_COND_INITIALIZER, cv_done = PTHREAD_COND_INITIALIZER;
static pthread_once_t started = PTHREAD_ONCE_INIT;

// Allocations: [base, base + n) of kind 1 (pinned) or 2 (device).
#define ACAP 4096
static struct { uintptr_t base; size_t n; int kind; } allocs[ACAP];
static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER;
static void track(void *p, size_t n, int kind) {
  pthread_mutex_lock(&amu);
  int i = 0;
  while (i < ACAP && allocs[i].base != 0) i++;
  if (i == ACAP) abort(); // untracked memory would pass for pageable: never silently
  allocs[i].base = (uintptr_t)p; allocs[i].n = n ? n : 1; allocs[i].kind = kind;
  pthread_mutex_unlock(&amu);
}
static void untrack(void *p) {
  pthread_mutex_lock(&amu);
  for (int i = 0; i < ACAP; i++)
    if (allocs[i].base == (uintptr_t)p) { allocs[i].base = 0; break; }
  pthread_mutex_unlock(&amu);
}
static int kind_of(const void *p) {
  int k = 0;
  pthread_mutex_lock(&amu);
  for (int i = 0; i < ACAP; i++)
    if (allocs[i].base && (uintptr_t)p >= allocs[i].base && (uintptr_t)p < allocs[i].base + allocs[i].n) { k = allocs[i].kind; break; }
  pthread_mutex_unlock(&amu);
  return k;
}

static uint64_t rng = 88172645463325252ull;
static void delay(void) { // 0-31 us, one op in 8 2 ms: busy (the GPU thread's clock)
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  long ns = rng % 8 == 0 ? 2000000L : (long)(rng % 32) * 1000;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}
static void *gpu(void *x) {
  for (;;) {
    pthread_mutex_lock(&mu);
    while (q_head == q_tail) pthread_cond_wait(&cv_work, &mu);
    struct op o = q[q_head % QCAP];
    pthread_mutex_unlock(&mu);
    delay();
    if (o.kind == OP_COPY) memcpy(o.d, o.s, o.n);
    else if (o.kind == OP_SET) memset(o.d, o.v, o.n);
    else { untrack(o.d); free(o.d); }
    pthread_mutex_lock(&mu);
    q_head++;
    pthread_cond_broadcast(&cv_done);
    pthread_mutex_unlock(&mu);
  }
  return x;
}
static void start(void) { pthread_t t; pthread_create(&t, 0, gpu, 0); pthread_detach(t); }
static uint64_t enqueue(struct op o) { // the count of ops that must have run for o to be done
  pthread_once(&started, start);
  pthread_mutex_lock(&mu);
  while (q_tail - q_head >= QCAP) pthread_cond_wait(&cv_done, &mu);
  q[q_tail % QCAP] = o;
  uint64_t t = ++q_tail;
  pthread_cond_signal(&cv_work);
  pthread_mutex_unlock(&mu);
  return t;
}
static uint64_t tail(void) { pthread_mutex_lock(&mu); uint64_t t = q_tail; pthread_mutex_unlock(&mu); return t; }
static void wait_for(uint64_t t) {
  pthread_mutex_lock(&mu);
  while (q_head < t) pthread_cond_wait(&cv_done, &mu);
  pthread_mutex_unlock(&mu);
}
static int done(uint64_t t) { pthread_mutex_lock(&mu); int d = q_head >= t; pthread_mutex_unlock(&mu); return d; }

struct ev { uint64_t target; };
E cudaEventCreateWithFlags(void **e, unsigned f) { *e = calloc(1, sizeof(struct ev)); return 0; }
E cudaEventDestroy(void *e) { free(e); return 0; }
// Streams: handles are tracked, so that a call on a destroyed one is an error (400,
// cudaErrorInvalidResourceHandle) and is counted (fake_dead_stream_calls). Handles are never
// reused here.
#define SCAP 1024
static uintptr_t streams[SCAP];
static long dead_stream_calls, fail_records;
static pthread_mutex_t smu = PTHREAD_MUTEX_INITIALIZER;
static E new_stream(void **s) {
  *s = h();
  pthread_mutex_lock(&smu);
  int i = 0;
  while (i < SCAP && streams[i]) i++;
  if (i == SCAP) abort();
  streams[i] = (uintptr_t)*s;
  pthread_mutex_unlock(&smu);
  return 0;
}
static int live_stream(void *s, int forget) { // NULL, the legacy stream, is always live
  if (!s) return 1;
  int live = 0;
  pthread_mutex_lock(&smu);
  for (int i = 0; i < SCAP; i++)
    if (streams[i] == (uintptr_t)s) { live = 1; if (forget) streams[i] = 0; break; }
  if (!live) dead_stream_calls++;
  pthread_mutex_unlock(&smu);
  return live;
}
E cudaStreamCreate(void **s) { return new_stream(s); }
E cudaStreamCreateWithPriority(void **s, unsigned f, int p) { return new_stream(s); }
E cudaStreamDestroy(void *s) { return live_stream(s, 1) ? 0 : 400; }
// For tests: calls made on a destroyed stream so far; makes the next `n` cudaEventRecord fail.
long fake_dead_stream_calls(void) { pthread_mutex_lock(&smu); long n = dead_stream_calls; pthread_mutex_unlock(&smu); return n; }
void fake_fail_next_records(long n) { __atomic_store_n(&fail_records, n, __ATOMIC_RELAXED); }
E cudaEventRecord(void *e, void *s) {
  if (!live_stream(s, 0)) return 400;
  if (__atomic_load_n(&fail_records, __ATOMIC_RELAXED) > 0) {
    __atomic_sub_fetch(&fail_records, 1, __ATOMIC_RELAXED);
    return 999;
  }
  ((struct ev *)e)->target = tail();
  return 0;
}
static long env_count(const char *name) { const char *v = getenv(name); return v ? atol(v) : 0; }
static long fail_copy_at, fail_query_at, copies, queries;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static void read_env(void) { fail_copy_at = env_count("FAKE_FAIL_COPY"); fail_query_at = env_count("FAKE_FAIL_QUERY"); }
E cudaEventQuery(void *e) {
  pthread_once(&env_once, read_env);
  if (__atomic_add_fetch(&queries, 1, __ATOMIC_RELAXED) == fail_query_at) return 999;
  return done(((struct ev *)e)->target) ? 0 : 600;
}
E cudaEventSynchronize(void *e) { wait_for(((struct ev *)e)->target); return 0; }
E cudaStreamQuery(void *s) { if (!live_stream(s, 0)) return 400; return done(tail()) ? 0 : 600; }
E cudaStreamSynchronize(void *s) { if (!live_stream(s, 0)) return 400; wait_for(tail()); return 0; }
E cudaDeviceSynchronize(void) { wait_for(tail()); return 0; }
E cudaMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); track(*p, n, 2); return 0; }
E cudaFree(void *p) { wait_for(tail()); untrack(p); free(p); return 0; }
E cudaMallocHost(void **p, size_t n) { *p = malloc(n ? n : 1); track(*p, n, 1); return 0; }
E cudaHostAlloc(void **p, size_t n, unsigned f) { return cudaMallocHost(p, n); }
E cudaFreeHost(void *p) { wait_for(tail()); untrack(p); free(p); return 0; }
E cudaMallocFromPoolAsync(void **p, size_t n, void *pool, void *s) { return cudaMalloc(p, n); }
E cudaFreeAsync(void *p, void *s) { struct op o = {OP_FREE, p, 0, 0, 0}; enqueue(o); return 0; }
static E copy(void *d, const void *s, size_t n) {
  if (!kind_of(d) || !kind_of(s)) { wait_for(tail()); memcpy(d, s, n); return 0; }
  struct op o = {OP_COPY, d, s, n, 0};
  enqueue(o);
  return 0;
}
E cudaMemcpyAsync(void *d, const void *s, size_t n, int k, void *st) {
  pthread_once(&env_once, read_env);
  if (!live_stream(st, 0)) return 400;
  if (__atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED) == fail_copy_at) return 1;
  return copy(d, s, n);
}
E cudaMemcpy(void *d, const void *s, size_t n, int k) {
  E e = copy(d, s, n);
  wait_for(tail());
  return e;
}
E cudaMemsetAsync(void *p, int v, size_t n, void *s) { struct op o = {OP_SET, p, 0, n, v}; enqueue(o); return 0; }
E cudaMemset(void *p, int v, size_t n) { cudaMemsetAsync(p, v, n, 0); wait_for(tail()); return 0; }
E cudaPointerGetAttributes(struct attrs *a, const void *p) {
  int k = kind_of(p);
  a->type = k; a->device = k ? 0 : -2; a->dp = k ? (void *)p : 0; a->hp = k == 1 ? (void *)p : 0;
  return 0;
}
#endif

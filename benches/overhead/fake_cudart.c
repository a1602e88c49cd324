// A stand-in libcudart.so.13 for scripts/overhead.sh: every call our library makes succeeds at once
// (device memory is host memory, copies are memcpy), so that valgrind counts only our own
// instructions around each CUDA call. Never used on a GPU machine.
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
E cudaDeviceSynchronize(void) { return 0; }
E cudaDeviceGetAttribute(int *v, int attr, int d) { *v = 1; return 0; }
E cudaDeviceCanAccessPeer(int *v, int a, int b) { *v = 0; return 0; }
E cudaDeviceEnablePeerAccess(int a, unsigned f) { return 0; }
E cudaDeviceGetPCIBusId(char *s, int n, int d) { strncpy(s, "0000:00:00.0", n); return 0; }
E cudaDeviceGetStreamPriorityRange(int *lo, int *hi) { *lo = 0; *hi = 0; return 0; }
E cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
E cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
E cudaGetDeviceProperties(void *p, int d) { return 1; }
const char *cudaGetErrorName(E e) { return "cudaErrorFake"; }
const char *cudaGetErrorString(E e) { return "fake"; }
E cudaGetLastError(void) { return 0; }
E cudaEventCreateWithFlags(void **e, unsigned f) { *e = h(); return 0; }
E cudaEventDestroy(void *e) { return 0; }
E cudaEventElapsedTime(float *ms, void *a, void *b) { *ms = 0; return 0; }
E cudaEventQuery(void *e) { return 0; }
E cudaEventRecord(void *e, void *s) { return 0; }
E cudaEventSynchronize(void *e) { return 0; }
E cudaStreamCreate(void **s) { *s = h(); return 0; }
E cudaStreamCreateWithPriority(void **s, unsigned f, int p) { *s = h(); return 0; }
E cudaStreamDestroy(void *s) { return 0; }
E cudaStreamGetDevice(void *s, int *d) { *d = 0; return 0; }
E cudaStreamGetFlags(void *s, unsigned *f) { *f = 0; return 0; }
E cudaStreamQuery(void *s) { return 0; }
E cudaStreamSynchronize(void *s) { return 0; }
E cudaStreamWaitEvent(void *s, void *e, unsigned f) { return 0; }
E cudaMalloc(void **p, size_t n) { *p = malloc(n); return 0; }
E cudaFree(void *p) { free(p); return 0; }
E cudaMallocHost(void **p, size_t n) { *p = malloc(n); return 0; }
E cudaHostAlloc(void **p, size_t n, unsigned f) { *p = malloc(n); return 0; }
E cudaFreeHost(void *p) { free(p); return 0; }
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
E cudaMallocFromPoolAsync(void **p, size_t n, void *pool, void *s) { *p = malloc(n); return 0; }
E cudaFreeAsync(void *p, void *s) { free(p); return 0; }
E cudaMemcpy(void *d, const void *s, size_t n, int k) { memcpy(d, s, n); return 0; }
E cudaMemcpyAsync(void *d, const void *s, size_t n, int k, void *st) { memcpy(d, s, n); return 0; }
E cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, void *st) { memcpy(d, s, n); return 0; }
E cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
E cudaMemsetAsync(void *p, int v, size_t n, void *s) { memset(p, v, n); return 0; }
struct attrs { int type; int device; void *dp; void *hp; };
E cudaPointerGetAttributes(struct attrs *a, const void *p) { a->type = 0; a->device = -2; a->dp = 0; a->hp = 0; return 0; }

// scripts/overhead.sh: each table call N times, one function per call, for callgrind to count.
#include <stdio.h>
#include <stdlib.h>
#include "llaisys_runtime.h"
#define N 2000
__attribute__((noinline)) void f_set(const struct LlaisysRuntimeAPI *a) { for (int i = 0; i < N; i++) a->set_device(0); }
__attribute__((noinline)) void f_sync(const struct LlaisysRuntimeAPI *a, void *s) { for (int i = 0; i < N; i++) a->stream_synchronize(s); }
__attribute__((noinline)) void f_async64(const struct LlaisysRuntimeAPI *a, void *d, void *h, void *s) { for (int i = 0; i < N; i++) a->memcpy_async(d, h, 64, 1, s); }
__attribute__((noinline)) void f_sync4k(const struct LlaisysRuntimeAPI *a, void *d, void *h) { for (int i = 0; i < N; i++) a->memcpy_sync(d, h, 4096, 1); }
__attribute__((noinline)) void f_sync64k(const struct LlaisysRuntimeAPI *a, void *d, void *h) { for (int i = 0; i < N; i++) a->memcpy_sync(d, h, 65536, 1); }
__attribute__((noinline)) void f_d2h64k_pageable(const struct LlaisysRuntimeAPI *a, void *p, void *d) { for (int i = 0; i < N; i++) a->memcpy_sync(p, d, 65536, 2); }
__attribute__((noinline)) void f_malloc(const struct LlaisysRuntimeAPI *a) { for (int i = 0; i < N; i++) a->free_device(a->malloc_device(1 << 20)); }
__attribute__((noinline)) void f_mhost(const struct LlaisysRuntimeAPI *a) { for (int i = 0; i < N; i++) a->free_host(a->malloc_host(1 << 20)); }
__attribute__((noinline)) void f_stream(const struct LlaisysRuntimeAPI *a) { for (int i = 0; i < N; i++) a->destroy_stream(a->create_stream()); }
int main(void) {
  const struct LlaisysRuntimeAPI *a = llaisysNvidiaGetRuntimeAPI();
  printf("devices %d\n", a->get_device_count());
  a->set_device(0);
  void *s = a->create_stream();
  void *d = a->malloc_device(1 << 20), *h = a->malloc_host(1 << 20), *p = malloc(1 << 20);
  // One call of each first: one-time set-up (settings read once, first blocks) is not counted.
  a->set_device(0); a->stream_synchronize(s); a->memcpy_async(d, h, 64, 1, s); a->memcpy_sync(d, h, 4096, 1);
  a->memcpy_sync(d, h, 65536, 1); a->memcpy_sync(p, d, 65536, 2); a->free_device(a->malloc_device(1 << 20));
  a->free_host(a->malloc_host(1 << 20)); a->destroy_stream(a->create_stream());
  f_set(a); f_sync(a, s); f_async64(a, d, h, s); f_sync4k(a, d, h); f_sync64k(a, d, h); f_d2h64k_pageable(a, p, d); f_malloc(a); f_mhost(a); f_stream(a);
  printf("done\n");
  return 0;
}

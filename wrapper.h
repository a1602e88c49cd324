/* The CUDA runtime API, as bindgen sees it (build/bindings.rs). */
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "llaisys-nvidia must not be built with CUDA_API_PER_THREAD_DEFAULT_STREAM: it renames the API (_ptds/_ptsz) and changes what stream 0 means"
#endif
#include <cuda_runtime.h>

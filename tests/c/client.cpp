// A C++17 client on a machine WITHOUT a CUDA driver (CI): errors become C++ exceptions through
// llaisys_nvidia_exceptions.hpp and propagate out of the table's functions. Prints "ok: N checks".
#include "llaisys_nvidia_exceptions.hpp"

#include "check.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main() {
    const LlaisysRuntimeAPI *api = llaisysNvidiaGetRuntimeAPI();
    CHECK(api->get_device_count() == 0);
    {
        llaisys_nvidia::scoped_exception_handler scope;
        bool caught = false;
        try {
            llaisysStream_t s = api->create_stream();
            std::fprintf(stderr, "create_stream returned %p instead of throwing\n", s);
        } catch (const llaisys_nvidia::error &e) {
            caught = true;
            CHECK(e.cuda_error() == 35);
            CHECK(e.status() == LLAISYS_NVIDIA_ERROR_CUDA);
            CHECK(!e.deferred());
            CHECK(e.function() == "create_stream");
            CHECK(e.cuda_call() == "cudaStreamCreate");
            CHECK(std::strstr(e.what(), "cudaErrorInsufficientDriver") != nullptr);
        }
        CHECK(caught);
        CHECK(llaisysNvidiaLastCudaError() == 35);

        // Caught as llaisys's own convention, std::runtime_error.
        caught = false;
        try {
            api->malloc_device(4096);
        } catch (const std::runtime_error &e) {
            caught = std::strstr(e.what(), "malloc_device") != nullptr;
        }
        CHECK(caught);

        caught = false;
        char a[16] = {0}, b[16] = {0};
        try {
            api->memcpy_sync(a, b, sizeof a, static_cast<llaisysMemcpyKind_t>(9));
        } catch (const llaisys_nvidia::error &e) {
            caught = e.status() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT;
        }
        CHECK(caught);

        // Many throws in a row: nothing left behind that breaks the next call.
        int thrown = 0;
        for (int i = 0; i < 1000; ++i) {
            try {
                api->malloc_host(64);
            } catch (const llaisys_nvidia::error &) {
                ++thrown;
            }
        }
        CHECK(thrown == 1000);
    }
    // The scope restored the default handler.
    llaisysNvidiaErrorHandler h = &llaisys_nvidia::throwing_handler;
    llaisysNvidiaGetErrorHandler(&h, nullptr);
    CHECK(h == nullptr);
    std::printf("ok: %d checks\n", checks);
    return 0;
}

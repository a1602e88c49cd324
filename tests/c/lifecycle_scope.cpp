// llaisys_nvidia::scoped_exception_handler is per thread (README "Lifecycle and process rules"),
// no driver needed:
//   lifecycle_scope handler  while one thread is inside a scope, a plain C thread (pthread, no
//                            try/catch) keeps the C handler installed before; scopes nest, scopes
//                            on two threads overlap, and the C handler is back after the last one
//   lifecycle_scope default  as above with no handler installed: the C thread gets the default
//                            (one line on stderr, abort), not an exception
// Exit status 0 and "ok: <mode>" (handler mode).
#include "llaisys_nvidia_exceptions.hpp"

#include "check.h"
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

static const LlaisysRuntimeAPI *api;
static std::atomic<int> c_calls{0};
static std::atomic<int> stage{0};

extern "C" void c_handler(const llaisysNvidiaError *e, void *user_data) {
    if (user_data == &c_calls && e->status == LLAISYS_NVIDIA_ERROR_CUDA) {
        c_calls.fetch_add(1);
    }
}

static void wait_for(int s) {
    while (stage.load() < s) {
        std::this_thread::yield();
    }
}

// A C thread: no try/catch; an exception thrown at it would end the process.
extern "C" void *c_thread(void *) {
    wait_for(1);
    llaisysStream_t s = api->create_stream();
    CHECK(s == nullptr);
    stage.store(2);
    return nullptr;
}

static bool throws_here() {
    try {
        api->malloc_device(4096);
    } catch (const llaisys_nvidia::error &e) {
        return e.cuda_error() == 35 && e.function() == "malloc_device";
    }
    return false;
}

static void scoped_thread() {
    llaisys_nvidia::scoped_exception_handler scope;
    stage.store(1);
    wait_for(2);  // the C thread failed meanwhile
    CHECK(throws_here());
    {
        llaisys_nvidia::scoped_exception_handler nested;
        CHECK(throws_here());
    }
    CHECK(throws_here());  // still inside the outer scope
}

int main(int argc, char **argv) {
    std::string mode = argc > 1 ? argv[1] : "";
    api = llaisysNvidiaGetRuntimeAPI();
    if (mode == "handler") {
        llaisysNvidiaSetErrorHandler(c_handler, &c_calls);
    } else if (mode != "default") {
        std::fprintf(stderr, "usage: %s handler|default\n", argv[0]);
        return 2;
    }
    pthread_t c;
    CHECK(pthread_create(&c, nullptr, c_thread, nullptr) == 0);
    std::thread scoped(scoped_thread);
    scoped.join();
    CHECK(pthread_join(c, nullptr) == 0);
    CHECK(c_calls.load() == 1);

    // Outside every scope: the C handler again, on this thread too.
    CHECK(api->create_stream() == nullptr);
    CHECK(c_calls.load() == 2);

    // Two threads inside overlapping scopes, each gets its own exceptions.
    std::atomic<int> inside{0}, caught{0};
    auto both = [&] {
        llaisys_nvidia::scoped_exception_handler scope;
        inside.fetch_add(1);
        while (inside.load() < 2) {
            std::this_thread::yield();
        }
        for (int i = 0; i < 100; ++i) {
            caught.fetch_add(throws_here() ? 1 : 0);
        }
        inside.fetch_add(1);
        while (inside.load() < 4) {
            std::this_thread::yield();
        }
    };
    std::thread t1(both), t2(both);
    t1.join();
    t2.join();
    CHECK(caught.load() == 200);

    // The last scope gave the process its handler back.
    llaisysNvidiaErrorHandler h = nullptr;
    void *ud = nullptr;
    llaisysNvidiaGetErrorHandler(&h, &ud);
    CHECK(h == c_handler && ud == &c_calls);
    CHECK(api->create_stream() == nullptr);
    CHECK(c_calls.load() == 3);
    std::printf("ok: %s, %d checks\n", mode.c_str(), checks);
    return 0;
}

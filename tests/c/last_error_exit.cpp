// The calling thread's last error in C++ destructors at the end of a thread's and of the
// process's life; the failing calls are bad input, refused the same way with or without a GPU:
//   last_error_exit_cpp thread_local  an error set in a thread's body is read in the destructor
//                                     of a thread_local object of that thread
//   last_error_exit_cpp static        an error set in main is read in a static object's
//                                     destructor
// Exit status 0 and "ok: <context>" when every check held.
#include "llaisys_runtime.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

bool last_error_is_the_copy() {
    char msg[512];
    return llaisysNvidiaLastErrorStatus() == LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT &&
           llaisysNvidiaLastErrorMessage(msg, sizeof msg) > 0 &&
           std::strstr(msg, "llaisysNvidiaMemcpy: ") != nullptr;
}

int fail_copy() {
    char a[8] = "exit", b[8];
    return llaisysNvidiaMemcpy(b, a, sizeof a, static_cast<llaisysMemcpyKind_t>(9));
}

struct ReadsAtDestruction {
    const char *context;
    bool armed = false;
    explicit ReadsAtDestruction(const char *c) : context(c) {}
    ~ReadsAtDestruction() {
        if (!armed) {
            return;
        }
        if (!last_error_is_the_copy()) {
            std::fprintf(stderr, "FAILED in %s: the last error is status %d\n", context,
                         llaisysNvidiaLastErrorStatus());
            std::_Exit(1);
        }
        std::printf("ok: %s\n", context);
        std::fflush(stdout);
    }
};

ReadsAtDestruction at_static_destruction("C++ static destructor");
bool thread_failed = false;

void thread_body() {
    thread_local ReadsAtDestruction at_thread_exit("C++ thread_local destructor");
    at_thread_exit.armed = true;
    thread_failed = fail_copy() != LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT;
}

}  // namespace

int main(int argc, char **argv) {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "static") {
        if (fail_copy() != LLAISYS_NVIDIA_ERROR_INVALID_ARGUMENT) {
            return 1;
        }
        at_static_destruction.armed = true;
        return 0;
    }
    if (mode == "thread_local") {
        std::thread(thread_body).join();
        return thread_failed ? 1 : 0;
    }
    std::fprintf(stderr, "usage: %s static|thread_local\n", argv[0]);
    return 2;
}

// Calls into llaisys-nvidia from C++ destructors at the end of a thread's and of the process's
// life (no driver):
//   lifecycle_exit_cpp static        a static object's destructor, after main called us
//   lifecycle_exit_cpp thread_local  a thread_local object's destructor, the object made before
//                                    the thread's first call into us (so destroyed after our
//                                    thread-local state)
// Exit status 0 and "ok: <context>" when every call behaved.
#include "lifecycle_battery.h"

#include <cstdlib>
#include <string>
#include <thread>

namespace {

struct CallsAtDestruction {
    const char *context;
    bool armed = false;
    explicit CallsAtDestruction(const char *c) : context(c) {}
    ~CallsAtDestruction() {
        if (armed) {
            battery(context);
            if (battery_failures) {
                std::_Exit(1);
            }
        }
    }
};

CallsAtDestruction at_static_destruction("C++ static destructor");

void thread_body() {
    thread_local CallsAtDestruction at_thread_exit("C++ thread_local destructor");
    at_thread_exit.armed = true;
    // After the thread_local: our thread-local state is set up now, destroyed first.
    llaisysNvidiaGetRuntimeAPI()->get_device_count();
}

}  // namespace

int main(int argc, char **argv) {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "static") {
        llaisysNvidiaGetRuntimeAPI()->get_device_count();
        at_static_destruction.armed = true;
        return 0;
    }
    if (mode == "thread_local") {
        std::thread(thread_body).join();
        return battery_failures ? 1 : 0;
    }
    std::fprintf(stderr, "usage: %s static|thread_local\n", argv[0]);
    return 2;
}

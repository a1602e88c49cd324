// llaisys_nvidia_exceptions.hpp: turns llaisys-nvidia errors into C++ exceptions, llaisys's own
// convention (std::runtime_error). Header-only, C++17.
//
//   #include "llaisys_nvidia_exceptions.hpp"
//   {
//       llaisys_nvidia::scoped_exception_handler scope;   // this thread, this scope
//       try { api->malloc_device(n); } catch (const llaisys_nvidia::error &e) { ... e.what() ... }
//   }
//   llaisys_nvidia::install_exception_handler();           // or: every thread, for good
//
// The table's functions are declared to unwind (Rust "C-unwind"), so the exception thrown by the
// handler propagates out of the failing call legally. The thread's last error is set as well.
//
// Per thread or process-wide:
// - scoped_exception_handler makes errors throw on the thread that made it, while it lives. Other
//   threads are not affected: a thread outside every scope gets the handler that was installed
//   when the process's first live scope began (a C handler, or the default: print one line and
//   abort), so a plain C thread never has an exception thrown at it. Scopes nest and may live on
//   several threads at once; when the last one ends, that handler is installed again. A scope
//   belongs to its thread: make and destroy it there, and not inside an error handler. While
//   scopes live, the process-wide handler is theirs; install another one before or after.
// - install_exception_handler() makes errors throw on every thread of the process: only for a
//   program whose every thread calling the library catches them.
#ifndef LLAISYS_NVIDIA_EXCEPTIONS_HPP
#define LLAISYS_NVIDIA_EXCEPTIONS_HPP

#include "llaisys_runtime.h"

#include <mutex>
#include <stdexcept>
#include <string>

namespace llaisys_nvidia {

// One reported error, as an exception.
class error : public std::runtime_error {
public:
    explicit error(const llaisysNvidiaError &e)
        : std::runtime_error(e.message ? e.message : "llaisys-nvidia: unknown error"),
          status_(e.status), cuda_error_(e.cuda_error), device_(e.device),
          function_(e.function ? e.function : ""), cuda_call_(e.cuda_call ? e.cuda_call : "") {}
    int status() const noexcept { return status_; }          // llaisysNvidiaStatus_t
    int cuda_error() const noexcept { return cuda_error_; }  // cudaError_t, 0 when none
    int device() const noexcept { return device_; }          // -1 when unknown
    bool deferred() const noexcept { return status_ == LLAISYS_NVIDIA_ERROR_DEFERRED_CUDA; }
    const std::string &function() const noexcept { return function_; }
    const std::string &cuda_call() const noexcept { return cuda_call_; }

private:
    int status_, cuda_error_, device_;
    std::string function_, cuda_call_;
};

// The handler: throws llaisys_nvidia::error.
inline void throwing_handler(const llaisysNvidiaError *e, void *) { throw error(*e); }

// Installs throwing_handler for the whole process: every thread gets exceptions.
inline void install_exception_handler() { llaisysNvidiaSetErrorHandler(&throwing_handler, nullptr); }

namespace detail {

// The handler the process had when its first live scope began.
struct previous_handler {
    llaisysNvidiaErrorHandler handler;
    void *user_data;
};

// Scopes alive in the process. Never destroyed, so scopes work in static destructors too.
struct scope_registry {
    std::mutex lock;
    long alive = 0;
    previous_handler *installed = nullptr;  // the dispatcher's user data while it is installed
};
inline scope_registry &registry() {
    static scope_registry *r = new scope_registry;
    return *r;
}

// Scopes alive on this thread (trivially destructible: usable at any point of the thread).
inline thread_local int scope_depth = 0;

// Installed while scopes live: throws on threads inside a scope, passes the error on otherwise.
// user_data is the previous_handler, freed only after the dispatcher is replaced (which waits
// until no thread still runs it).
inline void scope_dispatcher(const llaisysNvidiaError *e, void *user_data) {
    if (scope_depth > 0) {
        throw error(*e);
    }
    const previous_handler *prev = static_cast<const previous_handler *>(user_data);
    if (prev->handler) {
        prev->handler(e, prev->user_data);
    } else {
        llaisysNvidiaDefaultErrorHandler(e, nullptr);
    }
}

}  // namespace detail

// Errors on this thread throw llaisys_nvidia::error while the scope lives (see the top).
class scoped_exception_handler {
public:
    scoped_exception_handler() {
        detail::scope_registry &r = detail::registry();
        std::lock_guard<std::mutex> hold(r.lock);
        if (r.alive == 0) {
            detail::previous_handler *prev = new detail::previous_handler{nullptr, nullptr};
            llaisysNvidiaGetErrorHandler(&prev->handler, &prev->user_data);
            r.installed = prev;
            llaisysNvidiaSetErrorHandler(&detail::scope_dispatcher, prev);
        }
        ++r.alive;
        ++detail::scope_depth;
    }
    ~scoped_exception_handler() {
        detail::scope_registry &r = detail::registry();
        std::lock_guard<std::mutex> hold(r.lock);
        --detail::scope_depth;
        if (--r.alive == 0) {
            detail::previous_handler *prev = r.installed;
            r.installed = nullptr;
            llaisysNvidiaErrorHandler now = nullptr;
            void *now_user = nullptr;
            llaisysNvidiaGetErrorHandler(&now, &now_user);
            if (now == &detail::scope_dispatcher && now_user == prev) {
                // Returns once no thread still runs the dispatcher: prev may go.
                llaisysNvidiaSetErrorHandler(prev->handler, prev->user_data);
            }
            delete prev;
        }
    }
    scoped_exception_handler(const scoped_exception_handler &) = delete;
    scoped_exception_handler &operator=(const scoped_exception_handler &) = delete;
};

}  // namespace llaisys_nvidia

#endif  // LLAISYS_NVIDIA_EXCEPTIONS_HPP

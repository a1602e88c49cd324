// llaisys_nvidia_exceptions.hpp: turns llaisys-nvidia errors into C++ exceptions, llaisys's own
// convention (std::runtime_error). Header-only, C++17.
//
//   #include "llaisys_nvidia_exceptions.hpp"
//   llaisys_nvidia::install_exception_handler();   // once, at start-up
//   try { api->malloc_device(n); } catch (const llaisys_nvidia::error &e) { ... e.what() ... }
//
// The table's functions are declared to unwind (Rust "C-unwind"), so the exception thrown by the
// handler propagates out of the failing call legally. The thread's last error is set as well.
#ifndef LLAISYS_NVIDIA_EXCEPTIONS_HPP
#define LLAISYS_NVIDIA_EXCEPTIONS_HPP

#include "llaisys_runtime.h"

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

// Installs throwing_handler for the whole process.
inline void install_exception_handler() { llaisysNvidiaSetErrorHandler(&throwing_handler, nullptr); }

// Installs throwing_handler for a scope and restores the previous handler after it.
class scoped_exception_handler {
public:
    scoped_exception_handler() {
        llaisysNvidiaGetErrorHandler(&old_, &old_user_);
        install_exception_handler();
    }
    ~scoped_exception_handler() { llaisysNvidiaSetErrorHandler(old_, old_user_); }
    scoped_exception_handler(const scoped_exception_handler &) = delete;
    scoped_exception_handler &operator=(const scoped_exception_handler &) = delete;

private:
    llaisysNvidiaErrorHandler old_ = nullptr;
    void *old_user_ = nullptr;
};

}  // namespace llaisys_nvidia

#endif  // LLAISYS_NVIDIA_EXCEPTIONS_HPP

// Drop-in NVIDIA backend for llaisys: put this file at src/device/nvidia/nvidia_runtime_api.cpp
// in the llaisys tree (replacing the stub nvidia_runtime_api.cu), with this crate's csrc/ on the
// include path and the crate's library linked (see csrc/xmake/nvidia.lua and README "Use from
// llaisys"). The core then reaches llaisys-nvidia through its own getRuntimeAPI(LLAISYS_DEVICE_NVIDIA).
#include "../runtime_api.hpp"

#include "llaisys_runtime.h"

namespace llaisys::device::nvidia {
const LlaisysRuntimeAPI *getRuntimeAPI() { return llaisysNvidiaGetRuntimeAPI(); }
} // namespace llaisys::device::nvidia

-- xmake/nvidia.lua for llaisys, using llaisys-nvidia as the NVIDIA backend.
--
-- In the llaisys tree:
--   1. copy this file to xmake/nvidia.lua;
--   2. copy csrc/nvidia_runtime_api.cpp of llaisys-nvidia to src/device/nvidia/nvidia_runtime_api.cpp
--      (and delete the stub src/device/nvidia/nvidia_runtime_api.cu);
--   3. point LLAISYS_NVIDIA_DIR at the llaisys-nvidia checkout (default: third_party/llaisys-nvidia);
--   4. xmake f --nv-gpu=y && xmake
-- llaisys's xmake.lua already defines ENABLE_NVIDIA_API and includes this file under --nv-gpu=y;
-- its llaisys-device target must add_deps("llaisys-device-nvidia") (as it does for cpu).
-- LLAISYS_NVIDIA_FEATURE=dynamic links the shared libcudart instead of the static one.

local crate = os.getenv("LLAISYS_NVIDIA_DIR") or path.join(os.projectdir(), "third_party", "llaisys-nvidia")
local feature = os.getenv("LLAISYS_NVIDIA_FEATURE") or "static"
local libdir = path.join(crate, "target", "release")
-- Only the staticlib goes here, so -lllaisys_nvidia cannot pick the cdylib beside it.
local linkdir = path.join(os.projectdir(), "build", "llaisys-nvidia")

target("llaisys-device-nvidia")
    set_kind("static")
    set_languages("cxx17")
    set_warnings("all", "error")
    add_cxflags("-fPIC")
    add_includedirs("include", path.join(crate, "csrc"), {public = true})
    add_files("src/device/nvidia/*.cpp")
    before_build(function (target)
        local args = {"build", "--release", "--lib", "--manifest-path", path.join(crate, "Cargo.toml")}
        if feature == "dynamic" then
            table.join2(args, {"--no-default-features", "--features", "dynamic"})
        end
        os.execv("cargo", args)
        os.mkdir(linkdir)
        os.cp(path.join(libdir, "libllaisys_nvidia.a"), linkdir)
    end)
    -- The staticlib, kept private inside libllaisys.so: its static cudart must not be re-exported.
    add_linkdirs(linkdir, {public = true})
    add_links("llaisys_nvidia", {public = true})
    add_shflags("-Wl,--exclude-libs,libllaisys_nvidia.a", {public = true})
    add_ldflags("-Wl,--exclude-libs,libllaisys_nvidia.a", {public = true})
    -- rustc --print native-static-libs (README "Linking from C/C++").
    add_syslinks("gcc_s", "util", "rt", "pthread", "m", "dl", "c", {public = true})
target_end()

-- xmake/nvidia.lua for llaisys, using llaisys-nvidia as the NVIDIA backend.
--
-- In the llaisys tree:
--   1. copy this file to xmake/nvidia.lua;
--   2. copy csrc/nvidia_runtime_api.cpp of llaisys-nvidia to src/device/nvidia/nvidia_runtime_api.cpp
--      (and delete the stub src/device/nvidia/nvidia_runtime_api.cu);
--   3. point LLAISYS_NVIDIA_DIR at the llaisys-nvidia checkout (default: third_party/llaisys-nvidia);
--   4. xmake f --nv-gpu=y && xmake
-- llaisys's xmake.lua defines ENABLE_NVIDIA_API and includes this file under --nv-gpu=y; its
-- llaisys-device target must add_deps("llaisys-device-nvidia") (as it does for cpu).
-- LLAISYS_NVIDIA_FEATURE=dynamic builds the crate with the shared libcudart and links its cdylib
-- (which finds libcudart through its RUNPATH); the default links the staticlib, with the static
-- cudart inside kept private (--exclude-libs). CARGO_TARGET_DIR is honoured.
-- Tested by tests/xmake.rs against a fixture of the llaisys tree.

local crate = os.getenv("LLAISYS_NVIDIA_DIR") or path.join(os.projectdir(), "third_party", "llaisys-nvidia")
local feature = os.getenv("LLAISYS_NVIDIA_FEATURE") or "static"
local target_dir = os.getenv("CARGO_TARGET_DIR") or path.join(crate, "target")
local libdir = path.join(target_dir, "release")
-- Only the staticlib goes here, so -lllaisys_nvidia cannot pick the cdylib beside it.
local staticdir = path.join(os.projectdir(), "build", "llaisys-nvidia")

target("llaisys-device-nvidia")
    set_kind("static")
    set_languages("cxx17")
    set_warnings("all", "error")
    add_cxflags("-fPIC")
    -- Paths in an included file are relative to it: name the project's own explicitly.
    add_includedirs(path.join(os.projectdir(), "include"), path.join(crate, "csrc"), {public = true})
    add_files(path.join(os.projectdir(), "src", "device", "nvidia", "*.cpp"))
    before_build(function (target)
        local args = {"build", "--release", "--lib", "--manifest-path", path.join(crate, "Cargo.toml"),
                      "--target-dir", target_dir}
        if feature == "dynamic" then
            table.join2(args, {"--no-default-features", "--features", "dynamic"})
        end
        os.execv("cargo", args)
        if feature ~= "dynamic" then
            os.mkdir(staticdir)
            os.cp(path.join(libdir, "libllaisys_nvidia.a"), staticdir)
        end
    end)
    if feature == "dynamic" then
        add_linkdirs(libdir, {public = true})
        add_rpathdirs(libdir, {public = true})
        add_links("llaisys_nvidia", {public = true})
    else
        add_linkdirs(staticdir, {public = true})
        add_links("llaisys_nvidia", {public = true})
        add_shflags("-Wl,--exclude-libs,libllaisys_nvidia.a", {public = true})
        add_ldflags("-Wl,--exclude-libs,libllaisys_nvidia.a", {public = true})
        -- rustc --print native-static-libs (README "Linking from C/C++").
        add_syslinks("gcc_s", "util", "rt", "pthread", "m", "dl", "c", {public = true})
    end
target_end()

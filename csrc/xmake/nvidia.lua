-- xmake/nvidia.lua of a llaisys tree: llaisys-nvidia (a Rust crate) as llaisys's NVIDIA backend.
--
-- Put in place by llaisys-nvidia's `scripts/plug-llaisys.sh TREE` (which also puts the adapter
-- src/device/nvidia/nvidia_runtime_api.cpp in place of the stub) and removed by its `--undo`.
-- The plug command writes the settings below into this copy, so nothing has to be set again
-- for each build; re-run it to change them. Then llaisys's own flow builds everything:
--   xmake f --nv-gpu=y && xmake && xmake install && pip install ./python
-- llaisys's xmake.lua includes this file under --nv-gpu=y and defines ENABLE_NVIDIA_API.
-- Tested by llaisys-nvidia's tests/llaisys_upstream.rs on the real upstream tree.

-- Written by the plug command (a hand copy of this file can name the crate by LLAISYS_NVIDIA_DIR).
local crate = "@LLAISYS_NVIDIA_DIR@"       -- the llaisys-nvidia checkout
local cudart = "@LLAISYS_NVIDIA_CUDART@"   -- "static": libcudart_static.a inside libllaisys.so;
                                           -- "dynamic": our cdylib + the shared libcudart;
                                           -- "loaded": our staticlib, no cudart: it loads
                                           -- a CUDA 13 or 12 runtime at run time, first its
                                           -- own (installed beside libllaisys.so)
local cuda_home = "@LLAISYS_NVIDIA_CUDA_HOME@" -- CUDA root for cargo ("" = the crate's own search)

-- A value the plug command did not write still starts with its placeholder's "@".
local function written(v) return v:sub(1, 1) ~= "@" end
if not written(crate) then crate = os.getenv("LLAISYS_NVIDIA_DIR") or "" end
if not written(cudart) then cudart = os.getenv("LLAISYS_NVIDIA_FEATURE") or "static" end
if not written(cuda_home) then cuda_home = "" end
-- Reported when the target loads (raise() is not available in this description scope).
local problem = nil
if crate == "" or not os.isfile(path.join(crate, "Cargo.toml")) then
    problem = string.format("xmake/nvidia.lua: no llaisys-nvidia checkout at '%s'; run llaisys-nvidia's " ..
                            "scripts/plug-llaisys.sh on this tree (it writes the checkout's path here)", crate)
elseif cudart ~= "static" and cudart ~= "dynamic" and cudart ~= "loaded" then
    problem = string.format("xmake/nvidia.lua: cudart must be static, dynamic or loaded, not '%s'", cudart)
end

-- Our library, copied out of cargo's target folder (so -lllaisys_nvidia finds only the kind
-- this mode links, and the build keeps working once that folder is cleaned).
local libdir = path.join(os.projectdir(), "build", "llaisys-nvidia", cudart)
local libname = cudart == "dynamic" and "libllaisys_nvidia.so" or "libllaisys_nvidia.a"

target("llaisys-device-nvidia")
    set_kind("static")
    set_languages("cxx17")
    set_warnings("all", "error")
    add_cxflags("-fPIC")
    -- Paths in an included file are relative to it: name the project's own explicitly.
    add_includedirs(path.join(os.projectdir(), "include"), path.join(crate, "csrc"), {public = true})
    add_files(path.join(os.projectdir(), "src", "device", "nvidia", "*.cpp"))
    add_linkdirs(libdir, {public = true})
    add_links("llaisys_nvidia", {public = true})
    if cudart == "dynamic" then
        -- Installed beside libllaisys.so (on_install below), found there through $ORIGIN.
        add_rpathdirs("$ORIGIN", libdir, {public = true})
    else
        -- The static cudart inside (none with "loaded") stays private to libllaisys.so.
        add_shflags("-Wl,--exclude-libs,libllaisys_nvidia.a", {public = true})
        add_ldflags("-Wl,--exclude-libs,libllaisys_nvidia.a", {public = true})
        -- rustc --print native-static-libs (llaisys-nvidia README "Linking from C/C++").
        add_syslinks("gcc_s", "util", "rt", "pthread", "m", "dl", "c", {public = true})
    end

    on_load(function (target)
        if problem then
            raise(problem)
        end
    end)

    before_build(function (target)
        import("core.project.project")
        local target_dir = os.getenv("CARGO_TARGET_DIR") or path.join(crate, "target")
        local args = {"build", "--release", "--lib", "--manifest-path", path.join(crate, "Cargo.toml"),
                      "--target-dir", target_dir}
        if cudart ~= "static" then
            table.join2(args, {"--no-default-features", "--features", cudart})
        end
        local envs = nil
        if cuda_home ~= "" then
            envs = {CUDA_HOME = cuda_home}
        end
        os.execv(os.getenv("CARGO") or "cargo", args, {envs = envs})
        if cudart == "loaded" then
            -- Its own runtimes, where the build made them (cargo replays the build script's
            -- record): installed beside libllaisys.so (on_install), where the library looks first.
            local record = os.iorunv(os.getenv("CARGO") or "cargo",
                                     table.join(args, {"--message-format=json"}), {envs = envs})
            local own = record:match('"LLAISYS_NVIDIA_BUILD_BUNDLED_RUNTIMES","([^"]*)"') or ""
            os.mkdir(libdir)
            os.tryrm(path.join(libdir, "libllaisys_nvidia_cudart*.so"))
            for file in own:gmatch("=([^,]+)") do
                os.cp(file, libdir)
            end
        end
        local built = path.join(target_dir, "release", libname)
        local copy = path.join(libdir, libname)
        if os.isfile(copy) and hash.sha256(copy) == hash.sha256(built) then
            return
        end
        os.mkdir(libdir)
        os.cp(built, copy)
        -- xmake does not track libraries named by add_links: relink what links us.
        for _, t in pairs(project.targets()) do
            if t:kind() == "shared" or t:kind() == "binary" then
                for _, d in ipairs(t:orderdeps()) do
                    if d:name() == target:name() then
                        os.tryrm(t:targetfile())
                    end
                end
            end
        end
    end)

    -- Like llaisys's own targets: nothing of ours goes to the system. The dynamic mode puts our
    -- cdylib where libllaisys.so is installed, the loaded mode its own runtimes (llaisys copies
    -- lib/*.so into its Python package).
    on_install(function (target)
        if cudart == "static" then
            return
        end
        import("core.project.project")
        local core = project.target("llaisys")
        local dir = path.join(path.absolute(core and core:installdir() or ".", os.projectdir()), "lib")
        os.mkdir(dir)
        if cudart == "dynamic" then
            os.cp(path.join(libdir, libname), dir)
        else
            os.cp(path.join(libdir, "libllaisys_nvidia_cudart*.so"), dir)
        end
    end)
target_end()

-- llaisys's device target calls llaisys::device::nvidia::getRuntimeAPI(): link our adapter with it.
target("llaisys-device")
    add_deps("llaisys-device-nvidia")
target_end()

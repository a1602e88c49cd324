#!/usr/bin/env bash
# Builds llaisys-nvidia (release) and installs it for C/C++ frameworks under a prefix:
#   bash scripts/install.sh --prefix PREFIX [--cudart static|dynamic|loaded] [--cuda12 | --cuda-home DIR]
# PREFIX/include/llaisys-nvidia/   llaisys_runtime.h (C99/C++17), llaisys_nvidia_exceptions.hpp
# PREFIX/lib/                      libllaisys_nvidia.so (cdylib), libllaisys_nvidia.a (staticlib);
#                                  with --cudart loaded also libllaisys_nvidia_cudart13.so, 12.so
# PREFIX/lib/pkgconfig/            llaisys-nvidia.pc (shared; Libs.private: the static natives),
#                                  llaisys-nvidia-static.pc (the archive with its native libraries)
# PREFIX/lib/cmake/llaisys-nvidia/ find_package(llaisys-nvidia): llaisys-nvidia::shared, ::static
# The static link line is rustc's own --print native-static-libs for this build (with, for the
# dynamic cudart, the folder of libcudart.so.N as -L and rpath). --cudart dynamic links the shared
# libcudart (default static: cudart inside); --cudart loaded links none (the library loads
# libcudart.so.13 or .12 at run time: no cudart in any link line); --cuda12 builds against CUDA
# 12.9 (.deps/cuda12), --cuda-home DIR against the CUDA root DIR. Cargo builds into
# CARGO_TARGET_DIR (default target/).
set -euo pipefail
crate=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=
cudart=static
cuda_home=
die() { echo "install: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; prefix=$2; shift ;;
    --prefix=*) prefix=${1#--prefix=} ;;
    --cudart) [ $# -ge 2 ] || die "--cudart needs static, dynamic or loaded"; cudart=$2; shift ;;
    --cudart=*) cudart=${1#--cudart=} ;;
    --cuda12) cuda_home=$crate/.deps/cuda12 ;;
    --cuda-home) [ $# -ge 2 ] || die "--cuda-home needs a folder"; cuda_home=$2; shift ;;
    --cuda-home=*) cuda_home=${1#--cuda-home=} ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[ -n "$prefix" ] || die "--prefix PREFIX is required (for example --prefix \$HOME/.local)"
case "$cudart" in static|dynamic|loaded) ;; *) die "--cudart must be static, dynamic or loaded, not '$cudart'" ;; esac
case "$prefix" in /*) ;; *) prefix=$(pwd)/$prefix ;; esac

# The loaded mode compiles against the CUDA 13 and the 12.9 headers.
if [ "$cuda_home" = "$crate/.deps/cuda12" ] || [ "$cudart" = loaded ]; then
  bash "$crate/scripts/bootstrap.sh" --cuda12 >/dev/null
else
  bash "$crate/scripts/bootstrap.sh" >/dev/null
fi
if [ -n "$cuda_home" ]; then
  export CUDA_HOME=$cuda_home
fi
features=()
[ "$cudart" = static ] || features=(--no-default-features --features "$cudart")
target_dir=${CARGO_TARGET_DIR:-$crate/target}

# One cargo call builds both library kinds and prints rustc's native-static-libs; cargo's JSON
# messages also name the artifacts and the folders the build script linked from.
json=$(mktemp)
trap 'rm -f "$json"' EXIT
if ! cargo rustc --release --lib --crate-type staticlib,cdylib "${features[@]}" \
    --manifest-path "$crate/Cargo.toml" --target-dir "$target_dir" --message-format=json \
    -- --print native-static-libs >"$json"; then
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    if m.get("reason") == "compiler-message": sys.stderr.write(m["message"].get("rendered") or "")' "$json"
  die "cargo build failed (messages above)"
fi
facts=$(python3 - "$json" <<'EOF'
import json, sys
natives, paths, files, version, own = None, [], [], None, ""
for line in open(sys.argv[1]):
    m = json.loads(line)
    pkg = m.get("package_id", "")
    if "llaisys-nvidia" not in pkg and "llaisys_nvidia" not in pkg:
        continue
    r = m.get("reason")
    if r == "compiler-message":
        text = m["message"].get("message", "")
        if text.startswith("native-static-libs:"):
            natives = text.split(":", 1)[1].strip()
    elif r == "build-script-executed":
        paths = [p.split("=", 1)[-1] for p in m.get("linked_paths", [])]
        for k, v in m.get("env", []):
            if k == "LLAISYS_NVIDIA_BUILD_CUDART_VERSION":
                version = v
            if k == "LLAISYS_NVIDIA_BUILD_BUNDLED_RUNTIMES":
                own = v
    elif r == "compiler-artifact" and m["target"]["kind"] != ["custom-build"]:
        files += m.get("filenames", [])
if natives is None:
    sys.exit("no native-static-libs note from rustc")
staticlib = [f for f in files if f.endswith(".a")]
cdylib = [f for f in files if f.endswith(".so")]
if not staticlib or not cdylib:
    sys.exit("cargo made no .a/.so: %r" % files)
print(natives)
print(" ".join(paths))
print(staticlib[0])
print(cdylib[0])
v = int(version) if (version or "").isdigit() else 0
print("%d.%d" % (v // 1000, v % 1000 // 10) if v else "unknown")
print(" ".join(e.split("=", 1)[1] for e in own.split(",") if "=" in e))
EOF
) || die "could not read cargo's messages"
natives=$(sed -n 1p <<<"$facts")
linked=$(sed -n 2p <<<"$facts")
staticlib=$(sed -n 3p <<<"$facts")
cdylib=$(sed -n 4p <<<"$facts")
cuda_version=$(sed -n 5p <<<"$facts")
own_runtimes=$(sed -n 6p <<<"$facts")
# A shared libcudart must be found at link and at run time: the folder the build linked it from.
case " $natives " in
  *cudart*)
    extra=
    for p in $linked; do extra="$extra -L$p -Wl,-rpath,$p"; done
    natives="${extra# } $natives" ;;
esac
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$crate/Cargo.toml" | head -n 1)

inc=$prefix/include/llaisys-nvidia
lib=$prefix/lib
mkdir -p "$inc" "$lib/pkgconfig" "$lib/cmake/llaisys-nvidia"
install -m 644 "$crate/csrc/llaisys_runtime.h" "$crate/csrc/llaisys_nvidia_exceptions.hpp" "$inc/"
install -m 644 "$staticlib" "$lib/libllaisys_nvidia.a"
install -m 755 "$cdylib" "$lib/libllaisys_nvidia.so"
# The loaded mode's own runtimes (NVIDIA's static cudart of each major as a shared library): the
# library loads them from beside itself (a program linking the staticlib: from beside that
# program). Another mode's install leaves none of an earlier one behind.
rm -f "$lib"/libllaisys_nvidia_cudart*.so
for f in $own_runtimes; do install -m 755 "$f" "$lib/"; done
# CMake: -lNAME -> NAME, other flags (-L, -Wl, -l:file) as they are.
cmake_natives=
for f in $natives; do
  case "$f" in -l:*) v=$f ;; -l*) v=${f#-l} ;; *) v=$f ;; esac
  cmake_natives=${cmake_natives:+$cmake_natives;}$v
done
fill() { # fill TEMPLATE OUT
  local esc_prefix esc_natives esc_cmake
  esc_prefix=$(printf '%s' "$prefix" | sed -e 's/[\\/&|]/\\&/g')
  esc_natives=$(printf '%s' "$natives" | sed -e 's/[\\/&|]/\\&/g')
  esc_cmake=$(printf '%s' "$cmake_natives" | sed -e 's/[\\/&|]/\\&/g')
  sed -e "s|@PREFIX@|$esc_prefix|g" -e "s|@VERSION@|$version|g" -e "s|@CUDART@|$cudart|g" \
      -e "s|@CUDART_VERSION@|$cuda_version|g" -e "s|@NATIVE_STATIC_LIBS@|$esc_natives|g" \
      -e "s|@CMAKE_NATIVE_STATIC_LIBS@|$esc_cmake|g" "$1" >"$2"
  chmod 644 "$2"
}
fill "$crate/csrc/pkgconfig/llaisys-nvidia.pc.in" "$lib/pkgconfig/llaisys-nvidia.pc"
fill "$crate/csrc/pkgconfig/llaisys-nvidia-static.pc.in" "$lib/pkgconfig/llaisys-nvidia-static.pc"
fill "$crate/csrc/cmake/llaisys-nvidiaConfig.cmake.in" "$lib/cmake/llaisys-nvidia/llaisys-nvidiaConfig.cmake"
fill "$crate/csrc/cmake/llaisys-nvidiaConfigVersion.cmake.in" \
  "$lib/cmake/llaisys-nvidia/llaisys-nvidiaConfigVersion.cmake"

if [ "$cudart" = loaded ]; then
  cuda_words="no link-time cudart: CUDA 13 or 12 loaded at run time, headers of CUDA $cuda_version"
else
  cuda_words="$cudart cudart, CUDA $cuda_version"
fi
echo "install: llaisys-nvidia $version ($cuda_words) installed under $prefix"
echo "install: static link line: $lib/libllaisys_nvidia.a $natives"
echo "install: pkg-config: PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --cflags --libs llaisys-nvidia[-static]"
echo "install: CMake: -DCMAKE_PREFIX_PATH=$prefix, find_package(llaisys-nvidia), llaisys-nvidia::shared or ::static"

#!/usr/bin/env bash
# The GPU suite, run on the GPU machine from the folder scripts/stage-gpu.sh made:
#   bash gpu-stage/run.sh [filter]
# LLAISYS_GPU_RUN_PARTS chooses the parts (default: all of them), for runs that must fit a time
# limit: any of static, dynamic, cuda12, loaded, own (static and dynamic include their upstream
# llaisys test; own: the loaded build with its own runtimes beside it).
# gpu-steps.sh sets LLAISYS_TEST_REQUIRE_GPU=1 so nothing can pass by skipping; the GPU tests,
# #[ignore]d by default, run with --include-ignored. Ends with the number of tests that skipped
# visibly (those that need more devices than the machine has) and "N passed, M failed" (one per
# step); $OUT/run.log when OUT is set.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=gpu-steps.sh
. "$here/gpu-steps.sh"
parts=" ${LLAISYS_GPU_RUN_PARTS:-static dynamic cuda12 loaded own} "
want() { [[ $parts == *" $1 "* ]]; }
# The sources the tests read (tests/fixtures, for the check of the GPU tests' skip rule): the
# crate's root, where this runs; and a scratch folder.
export LLAISYS_TEST_SOURCE_DIR=${LLAISYS_TEST_SOURCE_DIR:-$(pwd)} LLAISYS_TEST_TMPDIR=$work/tmp
mkdir -p "$LLAISYS_TEST_TMPDIR"
link_static() { # the README's documented line for each feature
  if [ "$1" = static ]; then echo "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"; else
    echo "-L$here/dynamic -l:$(cd "$here/dynamic" && ls libcudart.so.* | head -n 1) -Xlinker -rpath,$here/dynamic -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"; fi
}
for mode in static dynamic; do
  want $mode || continue
  d=$here/$mode
  # --nocapture: the figures tests print (stress iterations, reuse counts) land in the log.
  step "$mode: rust GPU tests" "$d/gpu" $gpu_tests --nocapture ${1:+"$1"}
  step "$mode: rust GPU tests, caches and pageable fast path switched off" \
    env LLAISYS_NVIDIA_DEVICE_CACHE=0 LLAISYS_NVIDIA_HOST_CACHE=0 LLAISYS_NVIDIA_PAGEABLE_FAST=0 \
    "$d/gpu" $gpu_tests caching table graphs
  step "$mode: doctor GPU tests" env LLAISYS_NVIDIA_DOCTOR_BIN="$d/llaisys-nvidia" "$d/doctor-gpu" $gpu_tests --nocapture
  step "$mode: doctor --bench" "$d/llaisys-nvidia" doctor --bench
  # A C++ host with its own shared cudart, linked against our staticlib, then our cdylib.
  step "$mode: nvcc host + staticlib builds" nvcc -std=c++17 -O2 --cudart shared -I"$here/csrc" \
    "$here/clients/llaisys_core.cu" -o "$work/core-$mode-a" "$d/libllaisys_nvidia.a" $(link_static $mode)
  step "$mode: nvcc host + staticlib runs" "$work/core-$mode-a" core
  step "$mode: nvcc host + staticlib deferred error" "$work/core-$mode-a" deferred
  step "$mode: nvcc host + cdylib builds" nvcc -std=c++17 -O2 --cudart shared -I"$here/csrc" \
    "$here/clients/llaisys_core.cu" -o "$work/core-$mode-so" -L"$d" -lllaisys_nvidia -Xlinker -rpath,"$d"
  step "$mode: nvcc host + cdylib runs" "$work/core-$mode-so" core
  step "$mode: nvcc host + cdylib deferred error" "$work/core-$mode-so" deferred
  # CUDA graphs with kernels: captures through the library and the host's own, other threads
  # during a capture, the refusals; with the caches on, then off.
  step "$mode: graph client builds" nvcc -std=c++17 -O2 -arch=native --cudart shared -I"$here/csrc" \
    "$here/clients/graph_client.cu" -o "$work/graph-$mode" "$d/libllaisys_nvidia.a" $(link_static $mode)
  for c in api direct threads refusals; do
    step "$mode: graph client $c" "$work/graph-$mode" $c
    step "$mode: graph client $c, caches off" \
      env LLAISYS_NVIDIA_DEVICE_CACHE=0 LLAISYS_NVIDIA_HOST_CACHE=0 "$work/graph-$mode" $c
  done
  # Captures the host begins itself while other threads copy and allocate (none may be
  # invalidated), in each mode, with the caches on and off; then every table call on four
  # threads while a fifth captures, 30 s.
  step "$mode: capture race client builds" nvcc -std=c++17 -O2 -arch=native --cudart shared -I"$here/csrc" \
    "$here/clients/capture_race.cu" -o "$work/race-$mode" "$d/libllaisys_nvidia.a" $(link_static $mode)
  for m in thread_local relaxed global; do
    step "$mode: capture race, $m captures" "$work/race-$mode" copies $m
    step "$mode: capture race, $m captures, caches off" \
      env LLAISYS_NVIDIA_DEVICE_CACHE=0 LLAISYS_NVIDIA_HOST_CACHE=0 "$work/race-$mode" copies $m
  done
  step "$mode: capture race, every table call on four threads for 30 s" "$work/race-$mode" stress 30
  # dlopen -> staged copies (the copy threads start) -> dlclose -> dlopen again, repeated.
  step "$mode: dlclose cycles client builds" cc -std=c99 -O2 "$here/clients/dlclose_cycles.c" -ldl -o "$work/dlclose-$mode"
  step "$mode: dlclose cycles after staged copies" env LD_LIBRARY_PATH="$d" "$work/dlclose-$mode" "$d/libllaisys_nvidia.so"
done
# Upstream llaisys's own runtime test with our libllaisys.so, then the CUDA 12.9 build.
# upstream_runtime_test MODE: test/test_runtime.py --device nvidia of the staged llaisys-MODE;
# passes only with at least one device found and each device's copy test passed.
upstream_runtime_test() {
  local d=$here/llaisys-$1 log rc n
  [ -f "$d/python/llaisys/libllaisys/libllaisys.so" ] || { echo "llaisys-$1 not staged"; return 1; }
  log=$(cd "$d" && PYTHONPATH="$d/python${PYTHONPATH:+:$PYTHONPATH}" python3 test/test_runtime.py --device nvidia 2>&1)
  rc=$?
  echo "$log"
  [ "$rc" -eq 0 ] || return 1
  if grep -q "^Found 0 " <<<"$log"; then echo "no device found"; return 1; fi
  n=$(sed -n 's/^Found \([0-9][0-9]*\) nvidia devices$/\1/p' <<<"$log")
  [ "${n:-0}" -ge 1 ] || { echo "no 'Found N nvidia devices' line"; return 1; }
  [ "$(grep -c "Passed" <<<"$log")" -eq "$n" ] || { echo "not every device passed"; return 1; }
  grep -q "Test passed" <<<"$log"
}
for mode in static dynamic; do
  want $mode || continue
  step "$mode: upstream llaisys test/test_runtime.py --device nvidia" upstream_runtime_test "$mode"
done
want cuda12 && step "cuda12 (static cudart 12.9): rust GPU tests" "$here/cuda12/gpu" $gpu_tests ${1:+"$1"}
# ---- the loaded link mode: the same files under the CUDA 13 and the CUDA 12.9 runtime ----
# loaded_choice VERSION ENV...: with ENV, the loaded build's doctor (in $ldir) reports the
# runtime it chose (text) and that runtime's cudaRuntimeGetVersion is VERSION (and, when
# want_file is set, the file is that one).
ldir=$here/loaded
want_file=
loaded_choice() {
  local want=$1 json
  shift
  env "$@" "$ldir/llaisys-nvidia" doctor | sed -n '/^== Machine/,/^== Environment/p'
  json=$(env "$@" "$ldir/llaisys-nvidia" doctor --json) || true
  python3 -c 'import json,sys
c = json.loads(sys.argv[1])["machine"]["libcudart"]["loaded"]
v = (c.get("version") or {}).get("number")
print("loaded:", c.get("path"), v)
sys.exit(0 if v == int(sys.argv[2]) and sys.argv[3] in ("", c.get("path")) else 1)' "$json" "$want" "$want_file"
}
loaded_llaisys() { # loaded_llaisys ENV...: upstream test_runtime.py with the loaded libllaisys.so
  local d=$here/llaisys-loaded log n
  log=$(cd "$d" && env "$@" PYTHONPATH="$d/python${PYTHONPATH:+:$PYTHONPATH}" python3 test/test_runtime.py --device nvidia 2>&1) || { echo "$log"; return 1; }
  echo "$log"
  n=$(sed -n 's/^Found \([0-9][0-9]*\) nvidia devices$/\1/p' <<<"$log")
  [ "${n:-0}" -ge 1 ] && [ "$(grep -c "Passed" <<<"$log")" -eq "$n" ] && grep -q "Test passed" <<<"$log"
}
own_in_llaisys() { # the loaded libllaisys.so, asked for its devices, maps its own CUDA 13 runtime
  local d=$here/llaisys-loaded
  (cd "$d" && PYTHONPATH="$d/python${PYTHONPATH:+:$PYTHONPATH}" python3 -c 'import llaisys
n = llaisys.RuntimeAPI(llaisys.DeviceType.NVIDIA).get_device_count()
own = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libllaisys_nvidia_cudart" in l})
print("devices:", n, "runtime mapped:", own)
raise SystemExit(0 if n >= 1 and len(own) == 1 and own[0].endswith("/libllaisys/libllaisys_nvidia_cudart13.so") else 1)')
}
if want loaded; then
for rt in 13:13000 12:12090; do
  major=${rt%%:*}
  lib=$here/loaded/cudart$major/libcudart.so.$major
  step "loaded, cudart $major by LLAISYS_NVIDIA_CUDART_LIBRARY: the choice" loaded_choice "${rt#*:}" LLAISYS_NVIDIA_CUDART_LIBRARY="$lib"
  step "loaded, cudart $major by LLAISYS_NVIDIA_CUDART_LIBRARY: rust GPU tests" \
    env LLAISYS_NVIDIA_CUDART_LIBRARY="$lib" "$here/loaded/gpu" $gpu_tests ${1:+"$1"}
  step "loaded, cudart $major by LLAISYS_NVIDIA_CUDART_LIBRARY: doctor GPU tests" \
    env LLAISYS_NVIDIA_CUDART_LIBRARY="$lib" LLAISYS_NVIDIA_DOCTOR_BIN="$here/loaded/llaisys-nvidia" \
    "$here/loaded/doctor-gpu" $gpu_tests --nocapture
  step "loaded, cudart $major: upstream llaisys test/test_runtime.py --device nvidia" loaded_llaisys LLAISYS_NVIDIA_CUDART_LIBRARY="$lib"
done
# Only 12.9 offered on the loader's path (no variable, no Python wheels): the search finds it,
# unless the system's loader cache holds a libcudart.so.13, which then comes first (13 first).
only12=(LD_LIBRARY_PATH="$here/loaded/cudart12" LLAISYS_NVIDIA_PYTHON=/nonexistent/python)
only12_want=12090
if ldconfig -p 2>/dev/null | grep -q 'libcudart\.so\.13 '; then
  only12_want=13000
  echo "note: ld.so.cache has a libcudart.so.13; the loaded build must choose it over 12.9 on LD_LIBRARY_PATH"
fi
step "loaded, only cudart 12.9 on LD_LIBRARY_PATH: the choice" loaded_choice "$only12_want" "${only12[@]}"
step "loaded, only cudart 12.9 on LD_LIBRARY_PATH: rust GPU tests" env "${only12[@]}" "$here/loaded/gpu" $gpu_tests ${1:+"$1"}
fi
# The loaded build with its own runtimes beside it (libllaisys_nvidia_cudart13.so and 12.so,
# NVIDIA's static runtimes made into shared libraries), as install.sh and plug-llaisys.sh lay it
# out: with nothing set it loads the CUDA 13 one; the variable chooses the CUDA 12 one.
if want own; then
mkdir -p "$work/own"
ldir=$(realpath "$work/own")
cp "$here/loaded/gpu" "$here/loaded/doctor-gpu" "$here/loaded/llaisys-nvidia" \
  "$here/loaded/libllaisys_nvidia.so" "$here/loaded/own/"*.so "$ldir/"
want_file=$ldir/libllaisys_nvidia_cudart13.so
step "own runtimes: the CUDA 13 one beside the library: the choice" loaded_choice 13000
step "own runtimes: the CUDA 13 one: rust GPU tests" "$ldir/gpu" $gpu_tests ${1:+"$1"}
step "own runtimes: the CUDA 13 one: doctor GPU tests" \
  env LLAISYS_NVIDIA_DOCTOR_BIN="$ldir/llaisys-nvidia" "$ldir/doctor-gpu" $gpu_tests --nocapture
step "own runtimes: upstream llaisys test/test_runtime.py --device nvidia" loaded_llaisys
step "own runtimes: upstream llaisys loads the one beside libllaisys.so" own_in_llaisys
want_file=$ldir/libllaisys_nvidia_cudart12.so
step "own runtimes: the CUDA 12 one by LLAISYS_NVIDIA_CUDART_LIBRARY: the choice" \
  loaded_choice 12090 LLAISYS_NVIDIA_CUDART_LIBRARY="$want_file"
step "own runtimes: the CUDA 12 one by LLAISYS_NVIDIA_CUDART_LIBRARY: rust GPU tests" \
  env LLAISYS_NVIDIA_CUDART_LIBRARY="$want_file" "$ldir/gpu" $gpu_tests ${1:+"$1"}
want_file=
ldir=$here/loaded
fi
# ---- end of the loaded link mode block ----
echo
echo "tests that skipped visibly: $(grep -c 'skipped: ' "$log")"
summary run

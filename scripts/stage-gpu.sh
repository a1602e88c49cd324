#!/usr/bin/env bash
# Stages everything the GPU suite needs into gpu-stage/ (ignored by git), to copy to a machine
# with an NVIDIA GPU and run there from the crate's root:
#   bash scripts/stage-gpu.sh          (here)
#   bash gpu-stage/run.sh              (there; also bench.sh, sanitize.sh, nccl.sh)
# Builds here (release, debug info stripped) for each link mode (static, dynamic, loaded): the GPU
# test binaries (the library's `gpu`, the doctor crate's `doctor-gpu`), the llaisys-nvidia binary,
# the cdylib and staticlib; adds libcudart.so.N for the dynamic mode, the runtimes the loaded mode
# loads, the C/C++ headers, the GPU C++ clients, the benchmarks' sources and the reference backend
# (compiled there with nvcc); upstream llaisys built by the README's flow for each mode (python/
# and test/), and the CUDA 12.9 GPU tests. run.sh runs from the crate's root there (the GPU
# tests' own check of their skip rule builds a stand-in library from tests/fixtures). The
# host-only tests have their own stage: scripts/stage-host-tests.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# --cuda12: the loaded build compiles against the CUDA 13 and the 12.9 headers; the CUDA 12.9 tests.
bash scripts/bootstrap.sh --cuda12
stage=gpu-stage
rm -rf "$stage"
mkdir -p "$stage/csrc" "$stage/clients" "$stage/c" "$stage/reference"

# test_exe NAME CARGO_ARGS...: builds the test binary NAME and prints its path.
test_exe() {
  local name=$1
  shift
  cargo test --release --no-run --message-format=json "$@" |
    NAME=$name python3 -c 'import json,os,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == os.environ["NAME"]:
        print(m["executable"])'
}

# Each link mode's $stage/MODE: the GPU test binaries (the library's `gpu`, the doctor crate's
# `doctor-gpu`), the doctor's program (the workspace's shared target dir holds it beside the
# library's files), the cdylib, and for static and dynamic the staticlib; for dynamic the
# libcudart.so.N it links.
for mode in static dynamic loaded; do
  args=(--no-default-features --features "$mode")
  tdir=target/$mode
  [ "$mode" != static ] || { args=(); tdir=target; }
  echo "stage-gpu: building $mode"
  exe=$(CARGO_TARGET_DIR=$tdir test_exe gpu --test gpu "${args[@]}" | tail -n 1)
  dexe=$(CARGO_TARGET_DIR=$tdir test_exe doctor_gpu -p llaisys-nvidia-doctor --test doctor_gpu "${args[@]}" | tail -n 1)
  [ -x "$exe" ] && [ -x "$dexe" ] || { echo "stage-gpu: no GPU test binaries for $mode" >&2; exit 1; }
  CARGO_TARGET_DIR=$tdir cargo build --release -p llaisys-nvidia -p llaisys-nvidia-doctor --lib --bins "${args[@]}"
  mkdir -p "$stage/$mode"
  cp "$exe" "$stage/$mode/gpu"
  cp "$dexe" "$stage/$mode/doctor-gpu"
  cp "$tdir/release/llaisys-nvidia" "$tdir/release/libllaisys_nvidia.so" "$stage/$mode/"
  [ "$mode" = loaded ] || cp "$tdir/release/libllaisys_nvidia.a" "$stage/$mode/"
  strip --strip-debug "$stage/$mode"/*
done
cudart=$(ls .deps/cuda13/nvidia/cu13/lib/libcudart.so.* | head -n 1)
cp "$cudart" "$stage/dynamic/"

cp csrc/*.h csrc/*.hpp "$stage/csrc/"
cp tests/gpu_clients/*.cu tests/gpu_clients/*.c "$stage/clients/"
# The clients include ../c/check.h, the CHECK macro of every C/C++ test client.
cp tests/c/check.h "$stage/c/"
shared="$here/../shared/reference"
[ -d "$shared" ] && cp "$shared"/seed_runtime.cu "$shared"/llaisys_abi.h "$stage/reference/"
# The runners, and what they share (gpu-steps.sh, sourced).
cp scripts/gpu-run.sh "$stage/run.sh"
cp scripts/gpu-bench.sh "$stage/bench.sh"
cp scripts/gpu-sanitize.sh "$stage/sanitize.sh"
cp scripts/gpu-nccl.sh "$stage/nccl.sh"
cp scripts/gpu-steps.sh "$stage/"
# The benchmarks' sources, built there with nvcc; nccl.h for the communicator's benchmark and the
# example's source.
mkdir -p "$stage/benches" "$stage/nccl/include" "$stage/examples"
cp benches/*.cpp benches/*.cu benches/*.hpp benches/*.py "$stage/benches/"
cp .deps/nccl/nvidia/nccl/include/nccl.h "$stage/nccl/include/"
cp examples/nccl_allreduce.c "$stage/examples/"
# Upstream llaisys through the README's flow, for each link mode. stage_llaisys MODE TARGET_DIR
# FILE...: a copy of the upstream llaisys tree (scripts/upstream.sh finds or fetches it) plugged
# with --cudart MODE (scripts/plug-llaisys.sh)
# and built with upstream's own `xmake f --nv-gpu=y && xmake && xmake install` (the rule's cargo
# reuses the build above: same target folder, same PATH, xmake called by its path); its python/
# (with the libllaisys.so that install put there, and each FILE that must be beside it) and test/
# go to $stage/llaisys-MODE/. run.sh runs upstream's test/test_runtime.py there.
upstream=$(bash scripts/upstream.sh) ||
  { echo "stage-gpu: no upstream llaisys tree (scripts/upstream.sh said why above)" >&2; exit 1; }
stage_llaisys() {
  local mode=$1 tdir=$2 tree f xmake=$here/.deps/xmake/bin/xmake
  shift 2
  echo "stage-gpu: llaisys with the $mode build"
  tree=$(mktemp -d)
  cp -r "$upstream/." "$tree/"
  chmod -R u+w "$tree"
  bash scripts/plug-llaisys.sh --cudart "$mode" "$tree" >/dev/null
  (cd "$tree" && export XMAKE_ROOT=y CARGO_TARGET_DIR=$tdir &&
    "$xmake" f --nv-gpu=y -y >/dev/null && "$xmake" -y >/dev/null && "$xmake" install >/dev/null)
  for f in libllaisys.so "$@"; do
    [ -f "$tree/python/llaisys/libllaisys/$f" ] ||
      { echo "stage-gpu: xmake install put no $f in python/llaisys/libllaisys ($mode)" >&2; exit 1; }
  done
  strip --strip-debug "$tree/python/llaisys/libllaisys/"*.so
  mkdir -p "$stage/llaisys-$mode"
  cp -r "$tree/python" "$tree/test" "$stage/llaisys-$mode/"
  rm -rf "$tree"
}
stage_llaisys static "$here/target"
# The dynamic mode's cdylib, and the libcudart.so.N it links beside it.
stage_llaisys dynamic "$here/target/dynamic" libllaisys_nvidia.so
cp "$cudart" "$stage/llaisys-dynamic/python/llaisys/libllaisys/"
echo "stage-gpu: building the CUDA 12.9 GPU tests (static cudart 12.9)"
exe=$(CUDA_HOME="$here/.deps/cuda12" CARGO_TARGET_DIR=target/cuda12 test_exe gpu --test gpu | tail -n 1)
[ -x "$exe" ] || { echo "stage-gpu: no CUDA 12.9 GPU test binary" >&2; exit 1; }
mkdir -p "$stage/cuda12"
cp "$exe" "$stage/cuda12/gpu"
strip --strip-debug "$stage/cuda12/gpu"
# ---- the loaded link mode: one library for the CUDA 13 and the CUDA 12.9 runtime ----
# Beside $stage/loaded's binaries and cdylib (no cudart inside, built above): the runtimes they
# load there (cudart13/libcudart.so.13, cudart12/libcudart.so.12), its own runtimes (own/:
# libllaisys_nvidia_cudart13.so and 12.so, kept apart so the other steps do not find them beside
# it), and upstream llaisys plugged with --cudart loaded (libllaisys.so holds our staticlib, no
# cudart; its own runtimes installed beside it). run.sh's block runs them.
mkdir -p "$stage/loaded/cudart13" "$stage/loaded/cudart12" "$stage/loaded/own"
cp .deps/cuda13/nvidia/cu13/lib/libcudart.so.13 "$stage/loaded/cudart13/"
cp .deps/cuda12/nvidia/cuda_runtime/lib/libcudart.so.12 "$stage/loaded/cudart12/"
own=$(CARGO_TARGET_DIR=target/loaded cargo build --release -p llaisys-nvidia --lib --no-default-features --features loaded --message-format=json |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    for k, v in m.get("env", []) if m.get("reason") == "build-script-executed" else []:
        if k == "LLAISYS_NVIDIA_BUILD_BUNDLED_RUNTIMES":
            print(" ".join(e.split("=", 1)[1] for e in v.split(",") if "=" in e))')
[ -n "$own" ] || { echo "stage-gpu: the loaded build made no runtimes of its own" >&2; exit 1; }
cp $own "$stage/loaded/own/"
stage_llaisys loaded "$here/target/loaded" libllaisys_nvidia_cudart13.so libllaisys_nvidia_cudart12.so
du -sh "$stage/loaded" "$stage/llaisys-loaded"
# ---- end of the loaded link mode block ----
du -sh "$stage"
echo "stage-gpu: done; on the GPU machine, from the crate's root: bash gpu-stage/run.sh"
echo "stage-gpu: benchmark: bash gpu-stage/bench.sh; sanitizers: bash gpu-stage/sanitize.sh;"
echo "stage-gpu: communicator: bash gpu-stage/nccl.sh"

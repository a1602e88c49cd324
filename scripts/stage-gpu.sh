#!/usr/bin/env bash
# Stages everything the GPU suite needs into gpu-stage/ (ignored by git), to copy to a machine
# with an NVIDIA GPU and run there from the crate's root:
#   bash scripts/stage-gpu.sh          (here)
#   bash gpu-stage/run.sh              (there; also bench.sh, sanitize.sh, nccl.sh)
# Builds here (release, debug info stripped) for both link modes: the GPU test binaries (the
# library's `gpu`, the doctor crate's `doctor-gpu`), the llaisys-nvidia binary, the cdylib and
# staticlib; adds libcudart.so.N for the dynamic mode, the C/C++ headers, the GPU C++ clients
# and the reference backend (compiled there with nvcc); upstream llaisys built by
# the README's flow for both modes (python/ and test/), and the CUDA 12.9 GPU tests. run.sh runs
# from the crate's root there (the GPU tests' own check of their skip rule builds a stand-in
# library from tests/fixtures). The host-only tests have their own stage:
# scripts/stage-host-tests.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/bootstrap.sh
stage=gpu-stage
rm -rf "$stage"
mkdir -p "$stage/csrc" "$stage/clients" "$stage/reference"

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

for mode in static dynamic; do
  if [ "$mode" = static ]; then
    args=(); tdir=target
  else
    args=(--no-default-features --features dynamic); tdir=target/dynamic
  fi
  echo "stage-gpu: building $mode"
  exe=$(CARGO_TARGET_DIR=$tdir test_exe gpu --test gpu "${args[@]}" | tail -n 1)
  [ -x "$exe" ] || { echo "stage-gpu: no GPU test binary for $mode" >&2; exit 1; }
  # The doctor's GPU tests (doctor/tests/doctor_gpu.rs), in the doctor crate of the workspace.
  dexe=$(CARGO_TARGET_DIR=$tdir test_exe doctor_gpu -p llaisys-nvidia-doctor --test doctor_gpu "${args[@]}" | tail -n 1)
  [ -x "$dexe" ] || { echo "stage-gpu: no doctor GPU test binary for $mode" >&2; exit 1; }
  CARGO_TARGET_DIR=$tdir cargo build --release -p llaisys-nvidia -p llaisys-nvidia-doctor --lib --bins "${args[@]}"
  mkdir -p "$stage/$mode"
  cp "$exe" "$stage/$mode/gpu"
  cp "$dexe" "$stage/$mode/doctor-gpu"
  # The workspace's shared target dir holds the doctor's binary next to the library's files.
  cp "$tdir/release/llaisys-nvidia" "$tdir/release/libllaisys_nvidia.so" "$tdir/release/libllaisys_nvidia.a" "$stage/$mode/"
  strip --strip-debug "$stage/$mode/gpu" "$stage/$mode/doctor-gpu" "$stage/$mode/llaisys-nvidia" "$stage/$mode/libllaisys_nvidia.so" "$stage/$mode/libllaisys_nvidia.a"
  if [ "$mode" = dynamic ]; then
    lib=$(ls .deps/cuda13/nvidia/cu13/lib/libcudart.so.* | head -n 1)
    cp "$lib" "$stage/$mode/"
  fi
done

cp csrc/*.h csrc/*.hpp "$stage/csrc/"
cp tests/gpu_clients/*.cu tests/gpu_clients/*.c "$stage/clients/"
shared="$here/../shared/reference"
[ -d "$shared" ] && cp "$shared"/seed_runtime.cu "$shared"/llaisys_abi.h "$stage/reference/"
cp scripts/gpu-run.sh "$stage/run.sh"
# The table benchmark (docs/benchmark.md): its sources, built there with nvcc, and its runner.
mkdir -p "$stage/benches"
cp benches/*.cpp benches/*.cu benches/*.hpp "$stage/benches/"
cp benches/*.py "$stage/benches/"
cp scripts/gpu-bench.sh "$stage/bench.sh"
cp scripts/gpu-sanitize.sh "$stage/sanitize.sh"
cp scripts/gpu-sweep.sh "$stage/sweep.sh"
# The communicator: its runner, nccl.h for the benchmark, the example's source.
mkdir -p "$stage/nccl/include" "$stage/examples"
cp .deps/nccl/nvidia/nccl/include/nccl.h "$stage/nccl/include/"
cp examples/nccl_allreduce.c "$stage/examples/"
cp benches/nccl_bench.cpp benches/nccl_torch.py "$stage/benches/"
cp scripts/gpu-nccl.sh "$stage/nccl.sh"
# Upstream llaisys through the README's flow, and the CUDA 12.9 build.
# For each link mode, a copy of ../shared/llaisys-upstream plugged (scripts/plug-llaisys.sh) and
# built with upstream's own `xmake f --nv-gpu=y && xmake && xmake install` (the rule's cargo reuses
# the build above: same target folder, same PATH, xmake called by its path); its python/ (with
# the libllaisys.so that install put there, and for dynamic our cdylib and libcudart.so.N beside
# it) and test/ go to $stage/llaisys-MODE/. run.sh runs upstream's test/test_runtime.py there.
upstream=$here/../shared/llaisys-upstream
[ -f "$upstream/xmake.lua" ] || { echo "stage-gpu: no llaisys tree at $upstream" >&2; exit 1; }
bash scripts/bootstrap.sh --cuda12 >/dev/null
for mode in static dynamic; do
  if [ "$mode" = static ]; then plug=(); tdir=$here/target; else plug=(--cudart dynamic); tdir=$here/target/dynamic; fi
  echo "stage-gpu: llaisys with the $mode build"
  tree=$(mktemp -d)
  cp -r "$upstream/." "$tree/"
  chmod -R u+w "$tree"
  bash scripts/plug-llaisys.sh "${plug[@]}" "$tree" >/dev/null
  (cd "$tree" && export XMAKE_ROOT=y CARGO_TARGET_DIR=$tdir &&
    "$here/.deps/xmake/bin/xmake" f --nv-gpu=y -y >/dev/null && "$here/.deps/xmake/bin/xmake" -y >/dev/null &&
    "$here/.deps/xmake/bin/xmake" install >/dev/null)
  libs=$tree/python/llaisys/libllaisys
  [ -f "$libs/libllaisys.so" ] || { echo "stage-gpu: xmake install made no $libs/libllaisys.so" >&2; exit 1; }
  if [ "$mode" = dynamic ]; then
    [ -f "$libs/libllaisys_nvidia.so" ] || { echo "stage-gpu: no libllaisys_nvidia.so installed" >&2; exit 1; }
    cp "$(ls .deps/cuda13/nvidia/cu13/lib/libcudart.so.* | head -n 1)" "$libs/"
  fi
  strip --strip-debug "$libs"/*.so
  mkdir -p "$stage/llaisys-$mode"
  cp -r "$tree/python" "$tree/test" "$stage/llaisys-$mode/"
  rm -rf "$tree"
done
echo "stage-gpu: building the CUDA 12.9 GPU tests (static cudart 12.9)"
exe=$(CUDA_HOME="$here/.deps/cuda12" CARGO_TARGET_DIR=target/cuda12 test_exe gpu --test gpu | tail -n 1)
[ -x "$exe" ] || { echo "stage-gpu: no CUDA 12.9 GPU test binary" >&2; exit 1; }
mkdir -p "$stage/cuda12"
cp "$exe" "$stage/cuda12/gpu"
strip --strip-debug "$stage/cuda12/gpu"
# ---- the loaded link mode: one library for the CUDA 13 and the CUDA 12.9 runtime ----
# $stage/loaded: its GPU test binaries, doctor and cdylib (no cudart inside), the runtimes they
# load there (cudart13/libcudart.so.13, cudart12/libcudart.so.12), its own runtimes (own/:
# libllaisys_nvidia_cudart13.so and 12.so, kept apart so the other steps do not find them beside
# it), and upstream llaisys plugged with --cudart loaded (libllaisys.so holds our staticlib, no
# cudart; its own runtimes installed beside it). run.sh's block runs them.
echo "stage-gpu: building loaded"
lexe=$(CARGO_TARGET_DIR=target/loaded test_exe gpu --test gpu --no-default-features --features loaded | tail -n 1)
[ -x "$lexe" ] || { echo "stage-gpu: no GPU test binary for loaded" >&2; exit 1; }
ldexe=$(CARGO_TARGET_DIR=target/loaded test_exe doctor_gpu -p llaisys-nvidia-doctor --test doctor_gpu --no-default-features --features loaded | tail -n 1)
[ -x "$ldexe" ] || { echo "stage-gpu: no doctor GPU test binary for loaded" >&2; exit 1; }
CARGO_TARGET_DIR=target/loaded cargo build --release -p llaisys-nvidia -p llaisys-nvidia-doctor --lib --bins --no-default-features --features loaded
mkdir -p "$stage/loaded/cudart13" "$stage/loaded/cudart12" "$stage/loaded/own"
cp "$lexe" "$stage/loaded/gpu"
cp "$ldexe" "$stage/loaded/doctor-gpu"
cp target/loaded/release/llaisys-nvidia target/loaded/release/libllaisys_nvidia.so "$stage/loaded/"
strip --strip-debug "$stage/loaded/gpu" "$stage/loaded/doctor-gpu" "$stage/loaded/llaisys-nvidia" "$stage/loaded/libllaisys_nvidia.so"
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
tree=$(mktemp -d)
cp -r "$upstream/." "$tree/"
chmod -R u+w "$tree"
bash scripts/plug-llaisys.sh --cudart loaded "$tree" >/dev/null
(cd "$tree" && export XMAKE_ROOT=y CARGO_TARGET_DIR=$here/target/loaded &&
  "$here/.deps/xmake/bin/xmake" f --nv-gpu=y -y >/dev/null && "$here/.deps/xmake/bin/xmake" -y >/dev/null &&
  "$here/.deps/xmake/bin/xmake" install >/dev/null)
[ -f "$tree/python/llaisys/libllaisys/libllaisys.so" ] || { echo "stage-gpu: xmake install made no libllaisys.so (loaded)" >&2; exit 1; }
for m in 13 12; do
  [ -f "$tree/python/llaisys/libllaisys/libllaisys_nvidia_cudart$m.so" ] ||
    { echo "stage-gpu: xmake install put no libllaisys_nvidia_cudart$m.so beside libllaisys.so (loaded)" >&2; exit 1; }
done
strip --strip-debug "$tree/python/llaisys/libllaisys/"*.so
mkdir -p "$stage/llaisys-loaded"
cp -r "$tree/python" "$tree/test" "$stage/llaisys-loaded/"
rm -rf "$tree"
du -sh "$stage/loaded" "$stage/llaisys-loaded"
# ---- end of the loaded link mode block ----
du -sh "$stage"
echo "stage-gpu: done; on the GPU machine, from the crate's root: bash gpu-stage/run.sh"
echo "stage-gpu: benchmark: bash gpu-stage/bench.sh; sanitizers: bash gpu-stage/sanitize.sh;"
echo "stage-gpu: communicator: bash gpu-stage/nccl.sh"

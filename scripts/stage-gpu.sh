#!/usr/bin/env bash
# Stages everything the GPU suite needs into gpu-stage/ (ignored by git), for one `device` call:
#   bash scripts/stage-gpu.sh
#   device run: command "bash gpu-stage/run.sh", carry ["gpu-stage"]
# Builds here (release, debug info stripped) for both link modes: the GPU test binaries (the
# library's `gpu`, the doctor crate's `doctor-gpu`), the llaisys-nvidia binary, the cdylib and
# staticlib; adds libcudart.so.N for the dynamic mode, the C/C++ headers, the GPU C++ clients
# and the reference backend (compiled there with nvcc).
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
cp benches/*.cpp benches/*.hpp "$stage/benches/"
cp benches/*.py "$stage/benches/"
cp scripts/gpu-bench.sh "$stage/bench.sh"
cp scripts/gpu-sanitize.sh "$stage/sanitize.sh"
# ---- communicator (issue 14): the runner, nccl.h for the benchmark, the example's source ----
mkdir -p "$stage/nccl/include" "$stage/examples"
cp .deps/nccl/nvidia/nccl/include/nccl.h "$stage/nccl/include/"
cp examples/nccl_allreduce.c "$stage/examples/"
cp benches/nccl_bench.cpp benches/nccl_torch.py "$stage/benches/"
cp scripts/gpu-nccl.sh "$stage/nccl.sh"
# ---- end communicator ----
du -sh "$stage"
echo "stage-gpu: done; run it with one device call: command 'bash gpu-stage/run.sh', carry ['gpu-stage']"
echo "stage-gpu: benchmark: command 'bash gpu-stage/bench.sh', carry ['gpu-stage']"
echo "stage-gpu: sanitizers: command 'bash gpu-stage/sanitize.sh', carry ['gpu-stage']"
echo "stage-gpu: communicator: command 'bash gpu-stage/nccl.sh', carry ['gpu-stage']"

#!/usr/bin/env bash
# The communicator's GPU run (one GPU, and two when there are), ON the GPU machine, from the folder
# scripts/stage-gpu.sh made, which holds it as gpu-stage/nccl.sh:
#   here:   bash scripts/stage-gpu.sh
#   there:  bash gpu-stage/nccl.sh [all|tests|bench]      (default all)
# tests: the GPU tests of module nccl (static and dynamic builds; then again with the PyPI wheel's
# NCCL of the machine's python3 when there is one), the example program (1 process, then one per
# GPU). bench: benches/nccl_bench.cpp (ours vs raw NCCL, 8 B .. 1 GiB; $OUT/nccl-bench.md) and,
# with two GPUs or more (or NCCL_TORCH=1), torch.distributed at the same sizes ($OUT/nccl-torch.md).
# gpu-steps.sh sets LLAISYS_TEST_REQUIRE_GPU=1, LLAISYS_TEST_REQUIRE_GPUS=<GPU count> and
# NCCL_NVLS_ENABLE=0. Ends with "N passed, M failed"; $OUT/nccl.log when OUT is set.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
what=${1:-all}
case $what in all | tests | bench) ;; *) echo "usage: nccl.sh [all|tests|bench]" >&2; exit 2 ;; esac
# shellcheck source=gpu-steps.sh
. "$here/gpu-steps.sh"
ngpus=$LLAISYS_TEST_REQUIRE_GPUS
out=${OUT:-$work}
mkdir -p "$out"
echo "nccl: system libnccl: $(ldconfig -p 2>/dev/null | grep -m1 'libnccl.so.2' || echo none)"
lib=$here/static
if [ "$what" != bench ]; then
for mode in static dynamic; do
  step "$mode: rust GPU tests, module nccl" "$here/$mode/gpu" nccl $gpu_tests --nocapture
done
wheel=$(python3 -c 'import os, nvidia.nccl as m; p = os.path.join(list(m.__path__)[0], "lib", "libnccl.so.2"); print(p if os.path.exists(p) else "")' 2>/dev/null || true)
if [ -n "$wheel" ]; then
  step "static: rust GPU tests, module nccl, with the PyPI wheel's NCCL ($wheel)" \
    env LLAISYS_NVIDIA_NCCL_LIBRARY="$wheel" "$here/static/gpu" nccl $gpu_tests --nocapture
else
  echo "nccl: python3 has no nvidia-nccl wheel: the wheel pass is not run"
fi
# The example: C99, linked against the cdylib.
step "example builds" cc -std=c99 -O2 -Wall -Wextra -Werror -pedantic -I"$here/csrc" \
  "$here/examples/nccl_allreduce.c" -o "$work/nccl_allreduce" -L"$lib" -lllaisys_nvidia -Wl,-rpath,"$lib"
step "example, 1 process" "$work/nccl_allreduce" 1
if [ "$ngpus" -ge 2 ]; then
  step "example, $ngpus processes (one per GPU)" "$work/nccl_allreduce" "$ngpus"
fi
fi
if [ "$what" != tests ]; then
# The benchmark: ours vs raw NCCL in one process.
step "benchmark builds" nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -I"$here/nccl/include" \
  "$here/benches/nccl_bench.cpp" -o "$work/nccl_bench" -ldl
# report NAME COMMAND...: COMMAND's Markdown as $work/NAME.md, copied to $out and shown.
report() {
  local name=$1
  shift
  "$@" >"$work/$name.md" && cp "$work/$name.md" "$out/" && cat "$work/$name.md"
}
step "benchmark: all-reduce and all-gather, 8 B .. 1 GiB, ours vs raw NCCL" \
  report nccl-bench timeout -k 10 260 "$work/nccl_bench" "$lib/libllaisys_nvidia.so" --budget-s 200
if [ "$ngpus" -ge 2 ] || [ "${NCCL_TORCH:-0}" = 1 ]; then
  step "torch.distributed all-reduce and all-gather at the same sizes" report nccl-torch \
    env PYTHONUNBUFFERED=1 timeout -k 10 240 python3 "$here/benches/nccl_torch.py" --budget-s 150
fi
fi
summary nccl

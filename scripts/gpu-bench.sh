#!/usr/bin/env bash
# The table benchmark (docs/benchmark.md), run ON the GPU machine from the folder that
# scripts/stage-gpu.sh made, which holds it as gpu-stage/bench.sh:
#   here:   bash scripts/stage-gpu.sh
#   device: command "bash gpu-stage/bench.sh", carry ["gpu-stage"]
# Extra arguments go to table_bench (e.g. --quick, --only D2D). `bench.sh --peer` instead runs
# benches/peer_bench.cpp (two GPUs: peer copies against cudaMemcpyPeer, and the cost of
# llaisys's stream-before-set_device pattern) and writes $OUT/peer.md. Builds the reference backend
# (reference/seed_runtime.cu, nvcc -shared) and table_bench (benches/, nvcc), then measures
# static/ and dynamic/libllaisys_nvidia.so, the reference and raw cudart in one process.
# The Markdown table goes to stdout (last) and, when OUT is set, to $OUT/bench.md, with
# $OUT/bench-samples.csv (every sample) and $OUT/bench-progress.log. About 2 minutes; table_bench
# stops starting new workloads after 360 s and is killed at 420 s, so the whole script stays under 8.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Staged as gpu-stage/bench.sh; also runs as scripts/gpu-bench.sh beside a staged gpu-stage/.
if [ -d "$here/static" ]; then
  stage=$here
elif [ -d "$here/../gpu-stage/static" ]; then
  stage=$(cd "$here/../gpu-stage" && pwd)
else
  echo "bench: no staged folder next to $here; run 'bash scripts/stage-gpu.sh' first" >&2
  exit 2
fi
for f in static/libllaisys_nvidia.so dynamic/libllaisys_nvidia.so reference/seed_runtime.cu \
  benches/table_bench.cpp benches/runner.hpp benches/backends.hpp benches/bench_util.hpp csrc/llaisys_runtime.h; do
  [ -f "$stage/$f" ] || { echo "bench: $stage/$f is missing; run 'bash scripts/stage-gpu.sh' again" >&2; exit 2; }
done
command -v nvcc >/dev/null || { echo "bench: nvcc not found on PATH (this runs on the GPU machine)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${OUT:-}
nvcc_version=$(nvcc --version | tail -n 1)

if [ "${1:-}" = --peer ]; then
  # Two GPUs (kind nvidia-h200-x2): peer copies and llaisys's stream-before-set_device pattern.
  nvcc -O2 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL \
    -o "$work/libseed_runtime.so" "$stage/reference/seed_runtime.cu"
  nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -o "$work/peer_bench" "$stage/benches/peer_bench.cpp" -ldl
  "$work/peer_bench" "$stage/static/libllaisys_nvidia.so" "$work/libseed_runtime.so" | tee "$work/peer.md"
  [ -z "$out" ] || { mkdir -p "$out"; cp "$work/peer.md" "$out/peer.md"; }
  exit 0
fi
echo "bench: building with nvcc ($nvcc_version)" >&2
# The reference as a llaisys core would build it: nvcc's default static cudart, kept private
# (--exclude-libs) so that it cannot bind to any other cudart in the process.
nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL \
  -o "$work/libseed_runtime.so" "$stage/reference/seed_runtime.cu"
# table_bench links nvcc's default static cudart too: that is the raw column.
nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -I"$stage/csrc" \
  -o "$work/table_bench" "$stage/benches/table_bench.cpp" -ldl

smi=$(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu,memory.used \
  --format=csv,noheader 2>/dev/null | head -n 1 || true)
echo "bench: nvidia-smi: ${smi:-unavailable}" >&2

rc=0
timeout -k 10 420 "$work/table_bench" --budget-s 360 --csv "$work/bench-samples.csv" \
  --note "command: \`bash gpu-stage/bench.sh${*:+ $*}\` (scripts/gpu-bench.sh); built with nvcc $nvcc_version" \
  --note "nvidia-smi (name, driver, PCIe gen, width, SM/mem clocks, temp, util, mem used) at start: ${smi:-unavailable}" \
  "$@" "$stage/static/libllaisys_nvidia.so" "$stage/dynamic/libllaisys_nvidia.so" "$work/libseed_runtime.so" \
  >"$work/bench.md" 2> >(tee "$work/bench-progress.log" >&2) || rc=$?
wait  # for tee

if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$work/bench.md" "$out/bench.md"
  for f in bench-samples.csv bench-progress.log; do [ -f "$work/$f" ] && cp "$work/$f" "$out/$f"; done
fi
echo
cat "$work/bench.md"
case $rc in
  0) ;;
  124 | 137) echo "bench: table_bench ran past 420 s and was killed; the table above is empty or partial" >&2 ;;
  1) echo "bench: a data check failed (see DATA CHECK FAILED above)" >&2 ;;
  *) echo "bench: table_bench exited with $rc" >&2 ;;
esac
exit "$rc"

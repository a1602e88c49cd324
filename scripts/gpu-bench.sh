#!/usr/bin/env bash
# The table benchmark (docs/benchmark.md), run ON the GPU machine from the folder that
# scripts/stage-gpu.sh made, which holds it as gpu-stage/bench.sh:
#   here:            bash scripts/stage-gpu.sh
#   on the GPU host: bash gpu-stage/bench.sh   (gpu-stage/ copied there)
# Extra arguments go to table_bench (e.g. --quick, --only D2D; torch_bench gets --quick and --only).
# Builds the reference backend (reference/seed_runtime.cu, nvcc -shared) and table_bench
# (benches/, nvcc), measures static/ and dynamic/libllaisys_nvidia.so, the reference and raw cudart
# in one process; then benches/torch_bench.py measures the same operations with torch (python3,
# or $PYTHON; BENCH_TORCH=0 leaves it out) and benches/bench_merge.py adds its column to the table.
# The Markdown table goes to stdout (last) and, when OUT is set, to $OUT/bench.md, with
# $OUT/bench-samples.csv (every sample), $OUT/torch.csv and $OUT/bench-progress.log. About 3
# minutes; table_bench starts no new workload after 270 s (killed at 300 s), torch_bench none
# after 100 s (killed at 150 s), so the whole script stays under 8 minutes.
# --loaded (first): the "ours dynamic" column measures the loaded build instead
# (loaded/libllaisys_nvidia.so with its own CUDA 13 runtime, loaded/own/libllaisys_nvidia_cudart13.so,
# made of the libcudart_static.a the static build links: what it loads when installed), so that
# the per-call rows compare the run-time dispatch with static in one run; --loaded-shared: the
# same with the shared loaded/cudart13/libcudart.so.13 instead.
# Other modes, each its own run:
#   bench.sh --peer   benches/peer_bench.cpp (two GPUs: peer copies against cudaMemcpyPeer, and the
#                     cost of llaisys's stream-before-set_device pattern); $OUT/peer.md
#   bench.sh --graphs benches/graph_bench.cu (the decode step, K = 50, 200, 800: eager through ours and
#                     the reference, graph replay through ours) and benches/graph_torch.py (the same
#                     step under torch, eager and torch.cuda.graph); $OUT/graphs.md. Extra arguments
#                     go to both (--steps, --reps, --only K). About a minute.
#   bench.sh --weights benches/weights_load.cpp (a Qwen2-1.5B-shaped safetensors file, made once
#                     in $WEIGHTS_DIR or /var/tmp, loaded through ours and the reference, hot and
#                     cold page cache, beside the pinned link and the storage's read speed) and
#                     benches/weights_torch.py (torch's loader on the same file); $OUT/weights.md.
#                     Extra arguments go to weights_load (--reps, --modes). A few minutes.
#   bench.sh --fresh-sources benches/fresh_sources.cpp (H2D copies from pageable sources no
#                     recent copy read, one at a time, in the CPU caches and in memory: ours by
#                     default and with LLAISYS_NVIDIA_PAGEABLE_STORES=size, and the reference, in
#                     alternating processes); $OUT/fresh-sources.md. Extra arguments go to it.
#                     About two minutes.
#   bench.sh --probe  benches/pageable_probe.cpp (raw cudart: the floor for pageable H2D/D2H
#                     copies; extra arguments go to it; `--parts dl --library
#                     gpu-stage/static/libllaisys_nvidia.so` sets our library beside its pipeline,
#                     part l); $OUT/probe.md, probe.csv, probe-progress.log.
#                     About 1-2 minutes; no new part after 360 s, killed at 480 s.
set -euo pipefail
export NCCL_NVLS_ENABLE=0
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
  benches/table_bench.cpp benches/runner.hpp benches/backends.hpp benches/runtime_table.hpp benches/bench_util.hpp \
  csrc/llaisys_runtime.h \
  benches/pageable_probe.cpp benches/torch_bench.py benches/bench_merge.py; do
  [ -f "$stage/$f" ] || { echo "bench: $stage/$f is missing; run 'bash scripts/stage-gpu.sh' again" >&2; exit 2; }
done
command -v nvcc >/dev/null || { echo "bench: nvcc not found on PATH (this runs on the GPU machine)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${OUT:-}
nvcc_version=$(nvcc --version | tail -n 1)

if [ "${1:-}" = --probe ]; then
  # The pageable floor (raw cudart; a staged library only in part l, --library): docs/benchmark.md.
  shift
  echo "bench: building pageable_probe with nvcc ($nvcc_version)" >&2
  nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -I"$stage/csrc" -o "$work/pageable_probe" "$stage/benches/pageable_probe.cpp" -lpthread -ldl
  rc=0
  timeout -k 10 480 "$work/pageable_probe" --budget-s 360 --csv "$work/probe.csv" "$@" \
    >"$work/probe.md" 2> >(tee "$work/probe-progress.log" >&2) || rc=$?
  wait  # for tee
  if [ -n "$out" ]; then
    mkdir -p "$out"
    for f in probe.md probe.csv probe-progress.log; do [ -f "$work/$f" ] && cp "$work/$f" "$out/$f"; done
  fi
  echo
  cat "$work/probe.md"
  case $rc in
    0) ;;
    124 | 137) echo "bench: pageable_probe ran past 480 s and was killed; the tables above are empty" >&2 ;;
    1) echo "bench: a probe data check failed (see DATA CHECK FAILED above)" >&2 ;;
    *) echo "bench: pageable_probe exited with $rc" >&2 ;;
  esac
  exit "$rc"
fi

if [ "${1:-}" = --graphs ]; then
  shift
  nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL \
    -o "$work/libseed_runtime.so" "$stage/reference/seed_runtime.cu"
  nvcc -O2 -std=c++17 -arch=native -Xcompiler -Wall,-Wextra -I"$stage/csrc" -I"$stage/benches" \
    -o "$work/graph_bench" "$stage/benches/graph_bench.cu" -ldl
  rc=0
  timeout -k 10 300 "$work/graph_bench" "$stage/static/libllaisys_nvidia.so" "$work/libseed_runtime.so" \
    --csv "$work/graphs.csv" "$@" | tee "$work/graphs.md" || rc=$?
  timeout -k 5 200 "${PYTHON:-python3}" "$stage/benches/graph_torch.py" "$@" | tee -a "$work/graphs.md" ||
    echo "bench: graph_torch.py failed or found no torch" >&2
  if [ -n "$out" ]; then mkdir -p "$out"; cp "$work/graphs.md" "$work/graphs.csv" "$out/" 2>/dev/null || true; fi
  exit "$rc"
fi

if [ "${1:-}" = --weights ]; then
  # A model's weights to the GPU: benches/weights_load.cpp (ours and the reference through the
  # table, hot and cold page cache, the pinned link and the storage's read speed) and
  # benches/weights_torch.py (torch's loader on the same file). The file (about 3.5 GB) is made
  # once in $WEIGHTS_DIR (default /var/tmp, a disk: a file in tmpfs cannot be made cold).
  shift
  nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL \
    -o "$work/libseed_runtime.so" "$stage/reference/seed_runtime.cu"
  nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -I"$stage/csrc" -I"$stage/benches" \
    -o "$work/weights_load" "$stage/benches/weights_load.cpp" -ldl -lpthread
  dir=${WEIGHTS_DIR:-/var/tmp}
  rc=0
  timeout -k 10 400 "$work/weights_load" --dir "$dir" --csv "$work/weights.csv" "$@" \
    "$stage/static/libllaisys_nvidia.so" "$work/libseed_runtime.so" | tee "$work/weights.md" || rc=$?
  file=$(ls -t "$dir"/llaisys-weights-*.safetensors 2>/dev/null | head -n 1)
  if [ -n "$file" ]; then
    timeout -k 5 150 "${PYTHON:-python3}" "$stage/benches/weights_torch.py" --file "$file" \
      --ours-csv "$work/weights.csv" --csv "$work/weights-torch.csv" | tee -a "$work/weights.md" ||
      echo "bench: weights_torch.py failed or found no torch" >&2
  fi
  if [ -n "$out" ]; then mkdir -p "$out"; cp "$work"/weights*.md "$work"/weights*.csv "$out/" 2>/dev/null || true; fi
  exit "$rc"
fi

if [ "${1:-}" = --fresh-sources ]; then
  # H2D copies from sources no recent copy read, one at a time: benches/fresh_sources.cpp, ours
  # (by default, then with LLAISYS_NVIDIA_PAGEABLE_STORES=size) and the reference, in alternating
  # processes, two rounds. Extra arguments go to fresh_sources (--sizes, --reps, --buffers,
  # --flush-mib).
  shift
  nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL \
    -o "$work/libseed_runtime.so" "$stage/reference/seed_runtime.cu"
  nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -I"$stage/csrc" -I"$stage/benches" \
    -o "$work/fresh_sources" "$stage/benches/fresh_sources.cpp" -ldl
  rc=0
  for round in 1 2; do
    for stores in default size; do
      echo "## round $round, $stores" | tee -a "$work/fresh-sources.md"
      setting=(-u LLAISYS_NVIDIA_PAGEABLE_STORES)
      [ "$stores" = default ] || setting=("LLAISYS_NVIDIA_PAGEABLE_STORES=$stores")
      env "${setting[@]}" timeout -k 5 200 "$work/fresh_sources" "$@" \
        "$stage/static/libllaisys_nvidia.so" "$work/libseed_runtime.so" | tee -a "$work/fresh-sources.md" || rc=$?
    done
  done
  [ -z "$out" ] || { mkdir -p "$out"; cp "$work/fresh-sources.md" "$out/"; }
  exit "$rc"
fi

if [ "${1:-}" = --peer ]; then
  # Two GPUs: peer copies and llaisys's stream-before-set_device pattern.
  nvcc -O2 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL \
    -o "$work/libseed_runtime.so" "$stage/reference/seed_runtime.cu"
  nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -o "$work/peer_bench" "$stage/benches/peer_bench.cpp" -ldl
  "$work/peer_bench" "$stage/static/libllaisys_nvidia.so" "$work/libseed_runtime.so" | tee "$work/peer.md"
  [ -z "$out" ] || { mkdir -p "$out"; cp "$work/peer.md" "$out/peer.md"; }
  exit 0
fi
second=$stage/dynamic/libllaisys_nvidia.so
second_note="ours dynamic: the dynamic build (shared libcudart linked)"
if [ "${1:-}" = --loaded ] || [ "${1:-}" = --loaded-shared ]; then
  second=$stage/loaded/libllaisys_nvidia.so
  export LLAISYS_NVIDIA_CUDART_LIBRARY=$stage/loaded/own/libllaisys_nvidia_cudart13.so
  [ "$1" = --loaded ] || LLAISYS_NVIDIA_CUDART_LIBRARY=$stage/loaded/cudart13/libcudart.so.13
  shift
  second_note="ours dynamic: the LOADED build (no link-time cudart; $LLAISYS_NVIDIA_CUDART_LIBRARY loaded at run time)"
  [ -f "$second" ] && [ -f "$LLAISYS_NVIDIA_CUDART_LIBRARY" ] ||
    { echo "bench: no staged loaded build; run 'bash scripts/stage-gpu.sh' again" >&2; exit 2; }
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
timeout -k 10 300 "$work/table_bench" --budget-s 270 --csv "$work/bench-samples.csv" \
  --note "command: \`bash gpu-stage/bench.sh${*:+ $*}\` (scripts/gpu-bench.sh); built with nvcc $nvcc_version" \
  --note "nvidia-smi (name, driver, PCIe gen, width, SM/mem clocks, temp, util, mem used) at start: ${smi:-unavailable}" \
  --note "$second_note" \
  "$@" "$stage/static/libllaisys_nvidia.so" "$second" "$work/libseed_runtime.so" \
  >"$work/bench.md" 2> >(tee "$work/bench-progress.log" >&2) || rc=$?
wait  # for tee

# The torch column: the same operations through torch 2.11, in its own process right after, then
# merged into the table (a torch row per table row it matches; docs/benchmark.md).
torch_rc=
if [ "$rc" -le 1 ] && [ -s "$work/bench.md" ] && [ "${BENCH_TORCH:-1}" != 0 ]; then
  targs=()  # of table_bench's arguments, only these apply to torch_bench
  args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
      --quick) targs+=(--quick) ;;
      --only) targs+=(--only "${args[i + 1]:-}") ;;
    esac
  done
  echo "bench: the torch column (benches/torch_bench.py, ${PYTHON:-python3})" >&2
  torch_rc=0
  timeout -k 5 150 "${PYTHON:-python3}" "$stage/benches/torch_bench.py" --budget-s 100 --csv "$work/torch.csv" \
    ${targs[@]+"${targs[@]}"} 2> >(tee -a "$work/bench-progress.log" >&2) || torch_rc=$?
  wait  # for tee
  python3 "$stage/benches/bench_merge.py" --table "$work/bench.md" --samples "$work/bench-samples.csv" \
    --torch "$work/torch.csv" --torch-rc "$torch_rc" ||
    echo "bench: bench_merge.py failed; the table has no torch column" >&2
fi

if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$work/bench.md" "$out/bench.md"
  for f in bench-samples.csv torch.csv bench-progress.log; do [ -f "$work/$f" ] && cp "$work/$f" "$out/$f"; done
fi
echo
cat "$work/bench.md"
case $rc in
  0) ;;
  124 | 137) echo "bench: table_bench ran past 300 s and was killed; the table above is empty or partial" >&2 ;;
  1) echo "bench: a data check failed (see DATA CHECK FAILED above)" >&2 ;;
  *) echo "bench: table_bench exited with $rc" >&2 ;;
esac
case ${torch_rc:-none} in
  none | 0) ;;
  1) echo "bench: a torch data check failed (see DATA CHECK FAILED (torch) above)" >&2; [ "$rc" -ne 0 ] || rc=1 ;;
  3) echo "bench: no torch column: torch or its CUDA device is unavailable in ${PYTHON:-python3}" >&2 ;;
  *) echo "bench: torch_bench exited with $torch_rc; the torch column is partial or missing" >&2 ;;
esac
exit "$rc"

#!/usr/bin/env bash
# The table benchmark (docs/benchmark.md), run ON the GPU machine from the folder that
# scripts/stage-gpu.sh made, which holds it as gpu-stage/bench.sh:
#   here:            bash scripts/stage-gpu.sh
#   on the GPU host: bash gpu-stage/bench.sh   (gpu-stage/ copied there)
# Extra arguments go to table_bench (e.g. --quick, --only D2D; torch_bench gets --quick and --only).
# Builds the reference backend (our baseline, benches/baseline_runtime.cpp: cudart called directly,
# no caches; nvcc -shared) and table_bench (benches/, nvcc), measures static/ and
# dynamic/libllaisys_nvidia.so, the reference and raw cudart in one process; then
# benches/torch_bench.py measures the same operations with torch (python3, or $PYTHON;
# BENCH_TORCH=0 leaves it out) and benches/bench_merge.py adds its column to the table.
# The Markdown table goes to stdout (last) and, when OUT is set, to $OUT/bench.md, with
# $OUT/bench-samples.csv (every sample), $OUT/torch.csv and $OUT/bench-progress.log. About 3
# minutes; table_bench starts no new workload after 270 s (killed at 300 s), torch_bench none
# after 100 s (killed at 150 s), so the whole script stays under 8 minutes.
# --loaded (first): the "ours dynamic" column measures the loaded build instead
# (loaded/libllaisys_nvidia.so with its own CUDA 13 runtime, loaded/own/libllaisys_nvidia_cudart13.so,
# made of the libcudart_static.a the static build links: what it loads when installed), so that
# the per-call rows compare the run-time dispatch with static in one run; --loaded-shared: the
# same with the shared loaded/cudart13/libcudart.so.13 instead.
# LLAISYS_BENCH_BASELINE=FILE: the reference of every mode is built from FILE (a .cpp or .cu that
# exports seedGetRuntimeAPI, e.g. gpu-stage/reference/seed_runtime.cu) instead of our baseline; the
# report's header says which was built.
# Other modes, each its own run:
#   bench.sh --baselines  table_bench with our baseline (or LLAISYS_BENCH_BASELINE) in the "ours
#                     static" column and gpu-stage/reference/seed_runtime.cu (staged only when
#                     ../shared/reference exists beside the checkout) in the "reference" column,
#                     a second copy of the baseline in the "ours dynamic" one (the A/A), then
#                     benches/bench_baselines.py: per row the two medians and their ratio, and
#                     whether every row is within 3% (exit 1 when one is not); $OUT/baselines.md.
#                     Extra arguments go to table_bench (--quick, --only). About 3 minutes.
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
for f in static/libllaisys_nvidia.so dynamic/libllaisys_nvidia.so benches/baseline_runtime.cpp csrc/llaisys_runtime.h \
  benches/table_bench.cpp benches/runner.hpp benches/backends.hpp benches/runtime_table.hpp benches/bench_util.hpp \
  benches/torch_bench.py benches/bench_merge.py benches/bench_common.py benches/bench_baselines.py; do
  [ -f "$stage/$f" ] || { echo "bench: $stage/$f is missing; run 'bash scripts/stage-gpu.sh' again" >&2; exit 2; }
done
baseline=${LLAISYS_BENCH_BASELINE:-$stage/benches/baseline_runtime.cpp}
[ -f "$baseline" ] || { echo "bench: LLAISYS_BENCH_BASELINE=$baseline: no such file" >&2; exit 2; }
baseline=$(cd "$(dirname "$baseline")" && pwd)/$(basename "$baseline")
command -v nvcc >/dev/null || { echo "bench: nvcc not found on PATH (this runs on the GPU machine)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${OUT:-}
nvcc_version=$(nvcc --version | tail -n 1)
ours=$stage/static/libllaisys_nvidia.so
# build_baseline SOURCE OUT: a reference backend as a llaisys core would build it: nvcc's default
# static cudart, kept private (--exclude-libs) so that it cannot bind to any other cudart in the
# process; headers from csrc/ and from SOURCE's own folder.
build_baseline() {
  nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL -I"$stage/csrc" -I"$(dirname "$1")" \
    -o "$2" "$1"
}
reference=$work/libbaseline_runtime.so
baseline_note="reference: built from \`${baseline#"$stage/"}\`"
[ -n "${LLAISYS_BENCH_BASELINE:-}" ] && baseline_note+=" (LLAISYS_BENCH_BASELINE)" ||
  baseline_note+=" (our baseline: cudart called directly, no caches)"
echo "bench: building with nvcc ($nvcc_version); $baseline_note" >&2
build_baseline "$baseline" "$reference"
# build NAME NVCC_ARGS...: benches/NAME.cpp (or .cu) as $work/NAME; a program that uses CUDA
# itself links nvcc's default static cudart (table_bench: the raw column).
build() {
  local name=$1 src=$stage/benches/$1.cpp
  shift
  [ -f "$src" ] || src=${src%.cpp}.cu
  nvcc -O2 -std=c++17 -Xcompiler -Wall,-Wextra -I"$stage/csrc" -I"$stage/benches" -o "$work/$name" "$src" "$@"
}
# keep FILE...: those of $work's FILEs that exist, copied to $OUT when it is set.
keep() {
  [ -n "$out" ] || return 0
  mkdir -p "$out"
  for f in "$@"; do [ ! -f "$work/$f" ] || cp "$work/$f" "$out/"; done
}

case ${1:-} in
  --graphs)
    shift
    build graph_bench -arch=native -ldl
    rc=0
    timeout -k 10 300 "$work/graph_bench" "$ours" "$reference" --csv "$work/graphs.csv" "$@" | tee "$work/graphs.md" || rc=$?
    timeout -k 5 200 "${PYTHON:-python3}" "$stage/benches/graph_torch.py" "$@" | tee -a "$work/graphs.md" ||
      echo "bench: graph_torch.py failed or found no torch" >&2
    keep graphs.md graphs.csv
    exit "$rc" ;;
  --weights)
    # The file (about 3.5 GB) is made once in $WEIGHTS_DIR (default /var/tmp, a disk: a file in
    # tmpfs cannot be made cold).
    shift
    build weights_load -ldl -lpthread
    dir=${WEIGHTS_DIR:-/var/tmp}
    rc=0
    timeout -k 10 400 "$work/weights_load" --dir "$dir" --csv "$work/weights.csv" "$@" "$ours" "$reference" |
      tee "$work/weights.md" || rc=$?
    file=$(ls -t "$dir"/llaisys-weights-*.safetensors 2>/dev/null | head -n 1)
    if [ -n "$file" ]; then
      timeout -k 5 150 "${PYTHON:-python3}" "$stage/benches/weights_torch.py" --file "$file" \
        --ours-csv "$work/weights.csv" --csv "$work/weights-torch.csv" | tee -a "$work/weights.md" ||
        echo "bench: weights_torch.py failed or found no torch" >&2
    fi
    keep weights.md weights.csv weights-torch.csv
    exit "$rc" ;;
  --baselines)
    # Whether our baseline is within 3% of seed_runtime.cu (the reference of the earlier figures)
    # on every row, in one run. The baseline sits in the "ours static" column (its getter named by
    # --getters), so that the table's own "static vs ref" is the same ratio inverted.
    shift
    seed=$stage/reference/seed_runtime.cu
    [ -f "$seed" ] || {
      echo "bench: --baselines compares with $seed, which is not staged: scripts/stage-gpu.sh copies it" \
        "from ../shared/reference/ when that folder exists beside the checkout (it is not part of the" \
        "repository); nothing else needs it" >&2
      exit 2
    }
    build_baseline "$seed" "$work/libseed_runtime.so"
    # The middle column is a second build of the baseline, not our library: each column runs
    # right after the one before it in most repetitions, and a column that follows ours measures
    # pageable D2H copies up to 30% slower (an H100, 16 MiB) than one that follows a plain
    # cudart library. Baseline against its second build is the run's A/A.
    cp "$reference" "$work/libbaseline_runtime_b.so"
    build table_bench -ldl
    rc=0
    timeout -k 10 300 "$work/table_bench" --budget-s 270 --csv "$work/baselines-samples.csv" \
      --getters seedGetRuntimeAPI,seedGetRuntimeAPI,seedGetRuntimeAPI \
      --note "command: \`bash gpu-stage/bench.sh --baselines${*:+ $*}\` (scripts/gpu-bench.sh); built with nvcc $nvcc_version" \
      --note "--baselines: ours static = the baseline, built from \`${baseline#"$stage/"}\`; ours dynamic = a second copy of that build (the A/A); reference = \`reference/seed_runtime.cu\`; the targets judge the baseline here, not ours" \
      "$@" "$reference" "$work/libbaseline_runtime_b.so" "$work/libseed_runtime.so" >"$work/baselines.md" || rc=$?
    cat "$work/baselines.md"
    brc=0
    if [ -s "$work/baselines-samples.csv" ]; then
      echo
      python3 "$stage/benches/bench_baselines.py" --samples "$work/baselines-samples.csv" \
        --first "$(basename "$baseline")" --second seed_runtime.cu | tee -a "$work/baselines.md" || brc=${PIPESTATUS[0]}
    fi
    keep baselines.md baselines-samples.csv
    [ "$rc" -ne 0 ] || rc=$brc
    exit "$rc" ;;
  --peer)
    build peer_bench -ldl
    "$work/peer_bench" "$ours" "$reference" | tee "$work/peer.md"
    keep peer.md
    exit 0 ;;
esac
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
build table_bench -ldl

smi=$(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu,memory.used \
  --format=csv,noheader 2>/dev/null | head -n 1 || true)
echo "bench: nvidia-smi: ${smi:-unavailable}" >&2

rc=0
timeout -k 10 300 "$work/table_bench" --budget-s 270 --csv "$work/bench-samples.csv" \
  --note "command: \`bash gpu-stage/bench.sh${*:+ $*}\` (scripts/gpu-bench.sh); built with nvcc $nvcc_version" \
  --note "nvidia-smi (name, driver, PCIe gen, width, SM/mem clocks, temp, util, mem used) at start: ${smi:-unavailable}" \
  --note "$second_note" \
  --note "$baseline_note" \
  "$@" "$ours" "$second" "$reference" \
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

keep bench.md bench-samples.csv torch.csv bench-progress.log
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

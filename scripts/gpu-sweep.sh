#!/usr/bin/env bash
# Developer tool: the pageable fast path under each of its run-time settings, side by side. Run
# ON the GPU machine from the staged folder (scripts/stage-gpu.sh stages it as
# gpu-stage/sweep.sh):
#   bash gpu-stage/sweep.sh [--only TEXT]
# For each setting below (the LLAISYS_NVIDIA_PAGEABLE_* variables of docs/variables.md), one
# table_bench process with `--quick --only TEXT` (default "pageable") measures every backend as
# the benchmark does; the summary prints ours static per row and setting, ours static against
# the reference of the same run, and the geometric mean over the rows; $OUT/sweep.md when OUT
# is set. About 10-15 s per setting. The shape of a staged copy (chunks, pieces, staging
# buffers, stores) is fixed in src/pageable; benches/pageable_probe.cpp sweeps those
# (docs/benchmark.md).
#   SWEEP_EXTRA="VAR=V ..."        adds one setting to the list below
#   SWEEP_SETTINGS="A;B;default;A" replaces the list (';' between settings; repeat them to
#                                  interleave rounds)
#   SWEEP_ARGS="..."               table_bench's arguments instead of --quick (e.g. "--quick
#                                  --reps-scale 3.67": the full 9 repetitions, no 1 GiB rows)
#   SWEEP_TRACE=0                  leaves out the traces at the end
#   SWEEP_TRACE_ONLY="A;B"         the rows the traces cover (default: pageable 1, 16, 64 MiB
#                                  and the round trip)
#   SWEEP_TRACE_SETTINGS="A;B"     the settings traced (default: default)
#   SWEEP_TRACE_EVERY=N            trace every N-th staged copy (default 50)
set -euo pipefail
export NCCL_NVLS_ENABLE=0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$here/static" ] && stage=$here || stage=$(cd "$here/../gpu-stage" && pwd)
only=pageable
[ "${1:-}" = --only ] && only=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc -O2 -std=c++17 -shared -Xcompiler -fPIC -Xlinker --exclude-libs,ALL \
  -o "$work/libseed_runtime.so" "$stage/reference/seed_runtime.cu"
nvcc -O2 -std=c++17 -I"$stage/csrc" -o "$work/table_bench" "$stage/benches/table_bench.cpp" -ldl
P=LLAISYS_NVIDIA_PAGEABLE
# The default; fewer and more host threads than the default's at most 12; the staged path off
# (the driver's own pageable copies); the default again (the run-to-run spread).
settings=(
  "default"
  "${P}_THREADS=4"
  "${P}_THREADS=8"
  "${P}_THREADS=16"
  "${P}_FAST=0"
  "default"
  ${SWEEP_EXTRA:+"$SWEEP_EXTRA"}
)
if [ -n "${SWEEP_SETTINGS:-}" ]; then
  IFS=';' read -r -a settings <<<"$SWEEP_SETTINGS"
fi
read -r -a bench_args <<<"${SWEEP_ARGS:---quick}"
i=0
for s in "${settings[@]}"; do
  i=$((i + 1))
  envs=()
  [ "$s" = default ] || read -r -a envs <<<"$s"
  echo "sweep: [$i/${#settings[@]}] $s" >&2
  env ${envs[@]+"${envs[@]}"} timeout -k 5 90 "$work/table_bench" "${bench_args[@]}" --only "$only" \
    "$stage/static/libllaisys_nvidia.so" "$stage/dynamic/libllaisys_nvidia.so" "$work/libseed_runtime.so" \
    >"$work/run$i.md" 2>/dev/null || echo "sweep: setting $i exited with $?" >&2
  echo "$s" >"$work/name$i"
done
python3 - "$work" "$i" <<'PY' | tee "$work/sweep.md"
import math, sys, re
work, n = sys.argv[1], int(sys.argv[2])
rows, table = [], {}
for i in range(1, n + 1):
    name = open(f"{work}/name{i}").read().strip()
    for line in open(f"{work}/run{i}.md"):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) < 5 or not c[0] or c[0] in ("workload",) or c[0].startswith("-"):
            continue
        if "GB/s" not in c[1] and " us" not in c[1] and " ms" not in c[1]:
            continue
        if c[0] not in rows:
            rows.append(c[0])
        table.setdefault(c[0], {})[i] = (c[1], c[3], c[5])
    table.setdefault("__name", {})[i] = name
def val(cell):
    m = re.match(r"([0-9.]+) (GB/s|us|ms|ns)", cell)
    if not m: return None
    v = float(m.group(1))
    return v if m.group(2) == "GB/s" else 1.0 / v
print("| row | reference | " + " | ".join(f"[{i}]" for i in range(1, n + 1)) + " |")
print("|---|--:|" + "--:|" * n)
for r in rows:
    ref = next((table[r][i][1] for i in range(1, n + 1) if i in table[r]), "-")
    print(f"| {r} | {ref} | " + " | ".join(table[r].get(i, ("-",))[0] for i in range(1, n + 1)) + " |")
print()
print("ours static vs reference in the same run (reference time / ours; > 1: ours better):")
print()
print("| row | " + " | ".join(f"[{i}]" for i in range(1, n + 1)) + " |")
print("|---|" + "--:|" * n)
for r in rows:
    print(f"| {r} | " + " | ".join(table[r].get(i, ("-", "-", "-"))[2] for i in range(1, n + 1)) + " |")
print()
for i in range(1, n + 1):
    vals = [val(table[r][i][0]) for r in rows if i in table[r] and "H2H" not in r]
    vals = [v for v in vals if v]
    g = math.exp(sum(map(math.log, vals)) / len(vals)) if vals else float("nan")
    print(f"- [{i}] `{table['__name'][i]}`: geometric mean (ours static, H2D/D2H rows) {g:.3f}")
PY
# Where a copy's time goes (LLAISYS_NVIDIA_PAGEABLE_TRACE, src/pageable/trace.rs): pageable
# rows at 1, 4 (the round trip), 16 and 64 MiB (SWEEP_TRACE_ONLY="A;B" instead), every 50th staged
# copy (SWEEP_TRACE_EVERY), 24 lines per group, under the default settings (SWEEP_TRACE_SETTINGS
# ="A;B" instead, settings written as in SWEEP_SETTINGS).
traces=("pageable 1 MiB" "round trip" "pageable 16 MiB" "pageable 64 MiB")
[ -z "${SWEEP_TRACE_ONLY:-}" ] || IFS=';' read -r -a traces <<<"$SWEEP_TRACE_ONLY"
[ "${SWEEP_TRACE:-1}" != 0 ] || traces=()
trace_settings=(default)
[ -z "${SWEEP_TRACE_SETTINGS:-}" ] || IFS=';' read -r -a trace_settings <<<"$SWEEP_TRACE_SETTINGS"
for s in "${trace_settings[@]}"; do
  envs=()
  [ "$s" = default ] || read -r -a envs <<<"$s"
  for o in ${traces[@]+"${traces[@]}"}; do
    echo "== trace: --only '$o', setting $s"
    env ${envs[@]+"${envs[@]}"} LLAISYS_NVIDIA_PAGEABLE_TRACE="${SWEEP_TRACE_EVERY:-50}" timeout -k 5 60 \
      "$work/table_bench" --quick --only "$o" \
      "$stage/static/libllaisys_nvidia.so" "$stage/dynamic/libllaisys_nvidia.so" "$work/libseed_runtime.so" \
      2>&1 >/dev/null | grep "pageable trace" | head -n 24 | cut -c1-1600 || true
  done
done | tee "$work/trace.log"
[ -z "${OUT:-}" ] || { mkdir -p "$OUT"; cp "$work/sweep.md" "$work/trace.log" "$OUT/"; }

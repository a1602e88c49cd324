#!/usr/bin/env bash
# compute-sanitizer over the GPU suite, on the GPU machine, from the folder stage-gpu.sh made:
#   bash gpu-stage/sanitize.sh
# memcheck over the Rust GPU tests (static build; the stress and many-process tests are left to
# the plain run: 16 threads and 8 child processes under the sanitizer take too long), and
# memcheck, racecheck, synccheck and initcheck over the nvcc host client, whose own kernels run
# on our streams and memory. Ends with "N passed, M failed"; a tool that reports anything fails.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
export LLAISYS_TEST_REQUIRE_GPU=1 LLAISYS_FUZZ_SECONDS=5 NCCL_NVLS_ENABLE=0
pass=0
fail=0
check() {
  local name=$1 log=$work/$(echo "$1" | tr ' :/' '___').log
  shift
  echo "=== $name"
  timeout 300 "$@" >"$log" 2>&1
  local rc=$?
  tail -n 3 "$log"
  # racecheck sums up as "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
  if [ $rc -eq 0 ] && grep -Eq "ERROR SUMMARY: 0 errors|SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)" "$log"; then
    pass=$((pass + 1))
    echo "--- PASS: $name"
  else
    fail=$((fail + 1))
    echo "--- FAIL: $name (rc $rc)"
    grep -m 20 -E "=========|FAILED|panicked" "$log"
  fi
}
# API errors the tests provoke on purpose (out of memory, bad device ids) are not memory errors.
cs="compute-sanitizer --error-exitcode 9 --print-limit 20 --report-api-errors no"
# The GPU tests are #[ignore]d by default; the child_* tests are entry points of child processes.
check "memcheck: rust GPU tests" $cs --tool memcheck "$here/static/gpu" --include-ignored --skip ::child_ \
  --test-threads=1 table:: caching:: hostile:: leaks:: multi:: sync_semantics:: graphs::
nvcc -std=c++17 -O1 -lineinfo --cudart shared -I"$here/csrc" "$here/clients/llaisys_core.cu" -o "$work/core" \
  "$here/static/libllaisys_nvidia.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
nvcc -std=c++17 -O1 -lineinfo -arch=native --cudart shared -I"$here/csrc" "$here/clients/graph_client.cu" \
  -o "$work/graph" "$here/static/libllaisys_nvidia.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
for tool in memcheck racecheck synccheck initcheck; do
  check "$tool: nvcc host client on our streams and memory" $cs --tool $tool "$work/core" core
  check "$tool: graph client (captures, replays, other threads)" $cs --tool $tool "$work/graph" api
  check "$tool: graph client, other threads during captures" $cs --tool $tool "$work/graph" threads
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

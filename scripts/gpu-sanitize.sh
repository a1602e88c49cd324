#!/usr/bin/env bash
# compute-sanitizer over the GPU suite, on the GPU machine, from the folder stage-gpu.sh made:
#   bash gpu-stage/sanitize.sh
# memcheck over the Rust GPU tests (static build; the stress and many-process tests are left to
# the plain run: 16 threads and 8 child processes under the sanitizer take too long), and
# memcheck, racecheck, synccheck and initcheck over the nvcc host client, whose own kernels run
# on our streams and memory. Ends with "N passed, M failed" (gpu-steps.sh; $OUT/sanitize.log when
# OUT is set); a tool that reports anything fails.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=gpu-steps.sh
. "$here/gpu-steps.sh"
export LLAISYS_FUZZ_SECONDS=5
# sanitized COMMAND...: passes when COMMAND exits 0 within 300 s and its tool reported nothing
# (racecheck sums up as "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"). API
# errors the tests provoke on purpose (out of memory, bad device ids) are not memory errors.
sanitized() {
  local out=$work/sanitizer.log rc
  timeout 300 compute-sanitizer --error-exitcode 9 --print-limit 20 --report-api-errors no "$@" >"$out" 2>&1
  rc=$?
  tail -n 3 "$out"
  [ $rc -eq 0 ] && grep -Eq "ERROR SUMMARY: 0 errors|SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)" "$out" &&
    return 0
  echo "exit status $rc"
  grep -m 20 -E "=========|FAILED|panicked" "$out"
  return 1
}
step "memcheck: rust GPU tests" sanitized --tool memcheck "$here/static/gpu" $gpu_tests \
  table:: caching:: hostile:: leaks:: multi:: sync_semantics:: graphs::
nvcc -std=c++17 -O1 -lineinfo --cudart shared -I"$here/csrc" "$here/clients/llaisys_core.cu" -o "$work/core" \
  "$here/static/libllaisys_nvidia.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
nvcc -std=c++17 -O1 -lineinfo -arch=native --cudart shared -I"$here/csrc" "$here/clients/graph_client.cu" \
  -o "$work/graph" "$here/static/libllaisys_nvidia.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
nvcc -std=c++17 -O1 -lineinfo -arch=native --cudart shared -I"$here/csrc" "$here/clients/capture_race.cu" \
  -o "$work/race" "$here/static/libllaisys_nvidia.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
step "memcheck: every table call on four threads while a fifth captures, 30 s" \
  sanitized --tool memcheck "$work/race" stress 30
for tool in memcheck racecheck synccheck initcheck; do
  step "$tool: nvcc host client on our streams and memory" sanitized --tool $tool "$work/core" core
  step "$tool: graph client (captures, replays, other threads)" sanitized --tool $tool "$work/graph" api
  step "$tool: graph client, other threads during captures" sanitized --tool $tool "$work/graph" threads
done
summary sanitize

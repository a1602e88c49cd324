# shellcheck shell=bash
# Sourced by the GPU machine's runs (gpu-run.sh, gpu-nccl.sh, gpu-sanitize.sh; staged beside them
# as gpu-stage/gpu-steps.sh): what every such run sets, its steps and their count.
# LLAISYS_TEST_REQUIRE_GPU=1: nothing passes by skipping; LLAISYS_TEST_REQUIRE_GPUS=<the GPU
# count>: a test that needs N devices fails instead of skipping on a machine with N; NVLink
# multicast stays off (NCCL_NVLS_ENABLE=0) for everything a run starts.
export LLAISYS_TEST_REQUIRE_GPU=1 NCCL_NVLS_ENABLE=0
LLAISYS_TEST_REQUIRE_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
export LLAISYS_TEST_REQUIRE_GPUS
# The test binaries' arguments: every test, the ignored GPU tests included, one at a time
# (--skip ::child_: the entry points of child processes run only from their parent tests).
# shellcheck disable=SC2034 # read by the scripts that source this
gpu_tests="--include-ignored --skip ::child_ --test-threads=1"
work=$(mktemp -d)
log=$work/log
pass=0
fail=0
failed=()
# step NAME COMMAND...: runs COMMAND (a program or a function), its output also kept in $log,
# and counts it passed or failed by its exit status.
step() {
  local name=$1 rc
  shift
  echo "=== $name"
  "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    pass=$((pass + 1))
    echo "--- PASS: $name"
  else
    fail=$((fail + 1))
    failed+=("$name")
    echo "--- FAIL: $name"
  fi
}
# summary NAME: the failed steps and "N passed, M failed"; the log goes to $OUT/NAME.log when OUT
# is set. Its status is the run's: 0 when no step failed.
summary() {
  echo
  [ "$fail" -eq 0 ] || printf 'failed: %s\n' "${failed[@]}"
  echo "$pass passed, $fail failed"
  [ -z "${OUT:-}" ] || { mkdir -p "$OUT" && cp "$log" "$OUT/$1.log"; }
  [ "$fail" -eq 0 ]
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

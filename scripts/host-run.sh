#!/usr/bin/env bash
# The host-only test binaries on a machine with an NVIDIA GPU and driver, from the folder
# scripts/stage-host-tests.sh made, run from the crate's root (whose csrc/, tests/ and README.md
# the tests read; or set LLAISYS_TEST_SOURCE_DIR):
#   bash host-stage/run.sh [filter]
# Each binary runs with LLAISYS_TEST_REQUIRE_GPU=1 and LLAISYS_TEST_STAGED=1 (a test that needs a
# tool this machine lacks, such as cargo or valgrind, prints a "skipped:" line instead of
# failing; it is counted as skipped, not passed). Prints a line per binary, the binaries not
# staged and why, and ends with "N passed, M failed" (tests). Each binary's output is kept in
# $OUT/host-tests/ when OUT is set.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${LLAISYS_TEST_SOURCE_DIR:-$(pwd)}
if [ ! -f "$root/csrc/llaisys_runtime.h" ] || [ ! -d "$root/tests/fixtures" ]; then
  echo "host-run: no crate sources at $root: run from the crate's root, or set LLAISYS_TEST_SOURCE_DIR"
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xzf "$here/tests.tar.gz" || exit 2
export LLAISYS_TEST_SOURCE_DIR=$root LLAISYS_TEST_STAGED=1 LLAISYS_TEST_REQUIRE_GPU=1
# The upstream llaisys tree staged beside this script, unless the caller names one.
if [ -z "${LLAISYS_UPSTREAM_DIR:-}" ] && [ -d "$here/llaisys-upstream" ]; then
  export LLAISYS_UPSTREAM_DIR=$here/llaisys-upstream
fi
# NVLink multicast stays off for everything these tests start.
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || echo "host-run: nvidia-smi found no GPU"
# Each binary's output, then its counts: "passed failed skipped ignored" and the skip lines.
counts() {
  python3 - "$1" "$2" <<'PY'
import re, sys
log, rc = open(sys.argv[1], errors="replace").read(), int(sys.argv[2])
passed = failed = ignored = 0
for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;", log):
    passed, failed, ignored = passed + int(m[1]), failed + int(m[2]), ignored + int(m[3])
# --show-output prints each passed test's output under "---- NAME stdout ----".
skips = []
for name, body in re.findall(r"^---- (\S+) stdout ----\n(.*?)(?=^---- |^successes:|^failures:|\Z)", log, re.M | re.S):
    lines = [l for l in body.splitlines() if l.startswith("skipped: ")]
    if lines:
        skips.append(f"{name}: {lines[0]}")
if rc != 0 and failed == 0:
    failed = 1  # it crashed or timed out before reporting
print(passed - len(skips), failed, len(skips), ignored)
for s in skips:
    print(s)
PY
}
pass=0
fail=0
skip=0
failed=()
for mode in static dynamic; do
  d=$work/$mode
  mkdir -p "$work/tmp-$mode"
  while read -r name; do
    log=$work/$mode-$name.log
    LLAISYS_TEST_LIB_DIR=$d LLAISYS_TEST_CUDA_LIB=$d LLAISYS_TEST_TMPDIR=$work/tmp-$mode \
      LLAISYS_NVIDIA_DOCTOR_BIN=$d/llaisys-nvidia \
      timeout 300 "$d/$name" --show-output ${1:+"$1"} >"$log" 2>&1
    rc=$?
    out=$(counts "$log" "$rc")
    read -r p f s i <<<"$(head -n 1 <<<"$out")"
    pass=$((pass + p))
    fail=$((fail + f))
    skip=$((skip + s))
    echo "$mode $name: $p passed, $f failed, $s skipped, $i ignored (exit $rc)"
    tail -n +2 <<<"$out" | sed 's/^/  /'
    if [ "$f" -ne 0 ]; then
      failed+=("$mode $name")
      tail -n 60 "$log" | sed 's/^/  | /'
    fi
  done <"$d/tests"
done
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/host-tests" && cp "$work"/*.log "$OUT/host-tests/"
fi
echo
echo "not staged:"
sed 's/^/  /' "$work/not-staged"
echo
[ "$fail" -eq 0 ] || printf 'failed: %s\n' "${failed[@]}"
echo "skipped: $skip (listed above with their reason)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

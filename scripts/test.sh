#!/usr/bin/env bash
# The whole test suite (what CI runs), on a machine with or without a GPU: formatting, lints,
# docs, and the tests of every build: CUDA 13 static, CUDA 13 dynamic, CUDA 12.9 static, and the
# loaded mode's own tests (the library's unit tests, tests/loaded.rs, the build's discovery,
# install.sh).
# `--workspace`: the library and the doctor crate (doctor/). The host-only tests make the
# conditions they test (a child process without a driver, stand-in libraries), so they pass on
# either machine. The GPU tests (tests/gpu, doctor/tests/doctor_gpu.rs) are #[ignore]d and
# counted as skipped in the summary at the end; with LLAISYS_TEST_REQUIRE_GPU=1 they run too, for
# each build, and fail without a CUDA device (scripts/stage-gpu.sh and the GPU machine run them
# with everything else they need).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
require_gpu=${LLAISYS_TEST_REQUIRE_GPU:-0}
# Every test run's output, for the summary.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
tests() { # cargo test ARGS..., its output also kept for the summary
  cargo test "$@" 2>&1 | tee -a "$log"
}
gpu_tests() { # with LLAISYS_TEST_REQUIRE_GPU=1: the GPU tests of the build of `cargo test ARGS...`
  [ "$require_gpu" = 1 ] || return 0
  echo "== GPU tests of this build (LLAISYS_TEST_REQUIRE_GPU=1)"
  NCCL_NVLS_ENABLE=0 tests "$@" --test gpu -- --include-ignored --skip ::child_ --test-threads=1
  NCCL_NVLS_ENABLE=0 tests "$@" -p llaisys-nvidia-doctor --test doctor_gpu -- --include-ignored --test-threads=1
}
# --llaisys-python: torch and safetensors for upstream llaisys's Python tests (tests/llaisys_upstream.rs).
bash scripts/bootstrap.sh --cuda12 --llaisys-python
# The upstream llaisys tree (LLAISYS_UPSTREAM_DIR, ../shared/llaisys-upstream, or fetched into
# .deps/ when github.com answers): without it the tests that build or read it print a "skipped:"
# line saying so (listed in the summary), or fail with CI=true.
bash scripts/upstream.sh >/dev/null ||
  echo "test: no upstream llaisys tree; the tests that need it will skip (fail with CI=true)"
command -v rustfmt >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
# The C/C++ client tests compile with cc/c++ and check leaks with valgrind.
missing=()
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v readelf >/dev/null 2>&1 || missing+=(binutils)
# tests/install.rs builds consumers of the installed prefix with CMake and pkg-config;
# tests/llaisys_upstream.rs runs the flow once as another user (setpriv, useradd).
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v useradd >/dev/null 2>&1 || missing+=(passwd)
# doctor/tests/memory_cli.rs checks the memory page in a headless browser.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The aarch64 lint (below) runs the build script's preprocessing with the target's C compiler.
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test: installing ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "${missing[@]}"; else sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}"; fi
fi

echo "== rustfmt"
cargo fmt --all --check
echo "== clippy (static, dynamic; loaded below)"
cargo clippy --workspace --all-targets -- -D warnings
CARGO_TARGET_DIR=target/dynamic cargo clippy --workspace --all-targets --no-default-features --features dynamic -- -D warnings
echo "== clippy for aarch64 (Grace Hopper, Jetson): code that differs by target (\`c_char\` is u8 there, no x86-64 stores)"
if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
  command -v rustup >/dev/null 2>&1 || { echo "test: the aarch64 lint needs rustup (or the aarch64-unknown-linux-gnu target installed)" >&2; exit 1; }
  rustup target add aarch64-unknown-linux-gnu
fi
CARGO_TARGET_DIR=target/aarch64 cargo clippy --workspace --all-targets --target aarch64-unknown-linux-gnu -- -D warnings
echo "== rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
echo "== tests: static cudart, CUDA 13"
tests --workspace
gpu_tests
echo "== valgrind over the host-only bad-input and fuzz tests (no invalid access, no definite leak)"
test_exe() { # the executable of integration test $1
  cargo test --no-run --test "$1" --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])'
}
# The tests of no-driver behaviour run in child processes of the test binary: traced too
# (a compiler that builds a stand-in library is not).
for t in hostile errors fuzz; do
  LLAISYS_FUZZ_SECONDS=10 valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
    --trace-children=yes --trace-children-skip='*/cc,*/gcc,*/c++,*/g++,*/ld,*/as,*/collect2' \
    --error-exitcode=97 "$(test_exe "$t")" --test-threads=1
done
echo "== tests: dynamic cudart, CUDA 13"
CARGO_TARGET_DIR=target/dynamic tests --workspace --no-default-features --features dynamic
CARGO_TARGET_DIR=target/dynamic gpu_tests --no-default-features --features dynamic
echo "== the loaded mode (no link-time cudart): clippy, its tests, --all-features builds it (loaded wins)"
CARGO_TARGET_DIR=target/loaded cargo clippy --workspace --all-targets --no-default-features --features loaded -- -D warnings
CARGO_TARGET_DIR=target/loaded tests --no-default-features --features loaded --lib --test loaded --test discovery --test install
CARGO_TARGET_DIR=target/loaded cargo build --all-features -q
echo "== tests: static cudart, CUDA 12.9"
CUDA_HOME="$here/.deps/cuda12" CARGO_TARGET_DIR=target/cuda12 tests --workspace
CUDA_HOME="$here/.deps/cuda12" CARGO_TARGET_DIR=target/cuda12 gpu_tests
echo "== all test runs passed"
# The counts of every run above; an ignored test is one that did not run (the libtest line
# `test NAME ... ignored, REASON` names why).
python3 - "$log" "$require_gpu" <<'PY'
import collections, re, sys
passed = failed = ignored = 0
reasons = collections.Counter()
skips = collections.defaultdict(set)
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;", line)
    if m:
        passed, failed, ignored = passed + int(m[1]), failed + int(m[2]), ignored + int(m[3])
    m = re.match(r"test \S+ \.\.\. ignored(?:, (.*))?$", line.rstrip())
    if m:
        reasons[m[1] or "no reason given"] += 1
    # A test that returned early, having printed why (tests/llaisys_tree/mod.rs, `upstream`).
    m = re.search(r"skipped: (\S+): (.*)$", line.rstrip())
    if m:
        skips[m[2]].add(m[1])
gpu = sum(n for r, n in reasons.items() if "CUDA device" in r)
child = sum(n for r, n in reasons.items() if r.startswith("entry point of a child process"))
print(f"== summary: {passed} passed, {failed} failed, {ignored} ignored")
if sys.argv[2] == "1":
    print(f"   GPU tests: ran (LLAISYS_TEST_REQUIRE_GPU=1); {gpu} ignored in the runs without them")
else:
    print(f"   skipped: {gpu} GPU tests (need a CUDA device: LLAISYS_TEST_REQUIRE_GPU=1 on a GPU machine,")
    print("   or scripts/stage-gpu.sh and gpu-stage/run.sh there, runs them)")
print(f"   not run on their own: {child} entry points of child processes (their parent tests run them)")
for r, n in sorted(reasons.items()):
    if "CUDA device" not in r and not r.startswith("entry point of a child process"):
        print(f"   ignored: {n} x {r}")
for why, names in sorted(skips.items()):
    print(f"   passed without running ({', '.join(sorted(names))}): {why}")
PY

#!/usr/bin/env bash
# The whole test suite on a machine without a GPU (what CI runs): formatting, lints, docs, and the
# tests of every build: CUDA 13 static, CUDA 13 dynamic, CUDA 12.9 static, and the loaded mode's
# own tests (the library's unit tests, tests/loaded.rs, the build's discovery). GPU tests print
# "skipped: no CUDA device" here; scripts/stage-gpu.sh + the device machine run them for real.
# `--workspace`: the library and the doctor crate (doctor/).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# --llaisys-python: torch and safetensors for upstream llaisys's Python tests (tests/llaisys_upstream.rs).
bash scripts/bootstrap.sh --cuda12 --llaisys-python
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
if [ ${#missing[@]} -gt 0 ]; then
  echo "test: installing ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "${missing[@]}"; else sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}"; fi
fi

echo "== rustfmt"
cargo fmt --all --check
echo "== clippy (static, dynamic; loaded below)"
cargo clippy --workspace --all-targets -- -D warnings
CARGO_TARGET_DIR=target/dynamic cargo clippy --workspace --all-targets --no-default-features --features dynamic -- -D warnings
echo "== rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
echo "== tests: static cudart, CUDA 13"
cargo test --workspace
echo "== valgrind over the host-only bad-input and fuzz tests (no invalid access, no definite leak)"
test_exe() { # the executable of integration test $1
  cargo test --no-run --test "$1" --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])'
}
for t in hostile errors fuzz; do
  LLAISYS_FUZZ_SECONDS=10 valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
    --error-exitcode=97 "$(test_exe "$t")" --test-threads=1
done
echo "== tests: dynamic cudart, CUDA 13"
CARGO_TARGET_DIR=target/dynamic cargo test --workspace --no-default-features --features dynamic
echo "== the loaded mode (no link-time cudart): clippy, its tests, --all-features builds it (loaded wins)"
CARGO_TARGET_DIR=target/loaded cargo clippy --workspace --all-targets --no-default-features --features loaded -- -D warnings
CARGO_TARGET_DIR=target/loaded cargo test --no-default-features --features loaded --lib --test loaded --test discovery
CARGO_TARGET_DIR=target/loaded cargo build --all-features -q
echo "== tests: static cudart, CUDA 12.9"
CUDA_HOME="$here/.deps/cuda12" CARGO_TARGET_DIR=target/cuda12 cargo test --workspace
echo "== all test runs passed"

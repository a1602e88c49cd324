#!/usr/bin/env bash
# Stages the host-only test binaries into host-stage/ (ignored by git), to run them on a machine
# with an NVIDIA GPU and driver, where they must pass as they do on CI (each test of no-driver
# behaviour makes that condition itself):
#   bash scripts/stage-host-tests.sh   (here)
#   bash host-stage/run.sh             (there, from the crate's root, with host-stage/ copied)
# For the static and dynamic link modes: the test binaries `cargo test` builds (the ones CI runs,
# stripped: the library's unit and integration tests, and with the static build the doctor's and
# the doctor's program they run), the cdylib and staticlib their C/C++ clients link (release,
# stripped), and for the dynamic mode libcudart.so.N; packed into host-stage/tests.tar.gz, with
# scripts/host-run.sh as host-stage/run.sh and a copy of the upstream llaisys tree
# (scripts/upstream.sh finds or fetches it) for the tests that read its headers. The sources the
# tests read (csrc/, tests/, README.md) are the crate's own on that machine: run.sh runs from the
# crate's root. Binaries that need the build machine itself (cargo, xmake, .deps) are not staged; run.sh
# lists them with the reason.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/bootstrap.sh >/dev/null
stage=host-stage
rm -rf "$stage"
mkdir -p "$stage"
payload=$(mktemp -d)
trap 'rm -rf "$payload"' EXIT

# The test binaries left out, and why (run.sh prints these lines).
not_staged() {
  case $1 in
    gpu) echo "the GPU tests (scripts/stage-gpu.sh stages them)" ;;
    discovery) echo "checks the build script against the build machine's CUDA roots (.deps)" ;;
    install) echo "runs scripts/install.sh, which builds the library with cargo" ;;
    xmake) echo "plugs upstream llaisys and builds it with xmake from .deps" ;;
    llaisys_upstream) echo "builds upstream llaisys with cargo and xmake, and runs it with Python packages from .deps" ;;
    bench_fake) echo "builds the benchmark against the build machine's CUDA headers (.deps) and reference backend" ;;
    nccl) echo "loads the NCCL wheel from .deps" ;;
    standalone) echo "copies the checkout and runs cargo test in the copy with the build machine's .deps" ;;
    doctor_gpu) echo "the doctor's GPU tests (scripts/stage-gpu.sh stages them)" ;;
    *) return 1 ;;
  esac
}

# test_exes CARGO_ARGS...: "NAME PATH" of each test binary cargo builds: an integration test
# by its name, the unit tests of a library as unit-NAME and of a program as unit-NAME-bin; and
# the doctor's program (its tests run it) as "llaisys-nvidia PATH".
test_exes() {
  cargo test --no-run --message-format=json "$@" 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if not m["profile"]["test"]:
        if t["kind"] == ["bin"] and t["name"] == "llaisys-nvidia":
            print("llaisys-nvidia", m["executable"])
    elif t["kind"] == ["test"]:
        print(t["name"], m["executable"])
    else:
        print("unit-" + t["name"] + ("-bin" if t["kind"] == ["bin"] else ""), m["executable"])'
}

: >"$payload/not-staged"
for mode in static dynamic; do
  if [ "$mode" = static ]; then
    args=(); tdir=target
  else
    args=(--no-default-features --features dynamic); tdir=target/dynamic
  fi
  echo "stage-host-tests: building $mode"
  CARGO_TARGET_DIR=$tdir cargo build --release --lib "${args[@]}"
  d=$payload/$mode
  mkdir -p "$d"
  : >"$d/tests"
  # The doctor's tests with the static build: the dynamic doctor's check that it loads the
  # libcudart its build linked (the rpath's folder on the build machine) holds only there.
  packages=(-p llaisys-nvidia)
  [ "$mode" = static ] && packages+=(-p llaisys-nvidia-doctor)
  exes=$(CARGO_TARGET_DIR=$tdir test_exes "${packages[@]}" "${args[@]}")
  [ -n "$exes" ] || { echo "stage-host-tests: no test binaries for $mode" >&2; exit 1; }
  [ "$mode" = static ] || printf '%s %s\t%s\n' "$mode" "doctor, fake_driver" \
    "the dynamic doctor's tests check that it loads the libcudart of the build machine's folder" >>"$payload/not-staged"
  while read -r name exe; do
    if [ "$name" = llaisys-nvidia ]; then
      cp "$exe" "$d/$name"
      strip --strip-debug "$d/$name"
      continue
    fi
    if ! why=$(not_staged "$name") && ! grep -q ': test$' <<<"$("$exe" --list 2>/dev/null || true)"; then
      why="has no tests in this link mode"
    fi
    if [ -n "$why" ]; then
      printf '%s %s\t%s\n' "$mode" "$name" "$why" >>"$payload/not-staged"
      continue
    fi
    cp "$exe" "$d/$name"
    strip --strip-debug "$d/$name"
    echo "$name" >>"$d/tests"
  done <<<"$exes"
  cp "$tdir/release/libllaisys_nvidia.so" "$tdir/release/libllaisys_nvidia.a" "$d/"
  strip --strip-debug "$d/libllaisys_nvidia.so" "$d/libllaisys_nvidia.a"
  if [ "$mode" = dynamic ]; then
    # Beside the test binaries and the cdylib, which find it through their $ORIGIN rpath.
    cp "$(ls .deps/cuda13/nvidia/cu13/lib/libcudart.so.* | head -n 1)" "$d/"
  fi
done
tar -C "$payload" -czf "$stage/tests.tar.gz" .
cp scripts/host-run.sh "$stage/run.sh"
# The upstream llaisys tree, for the tests that compile against its headers (tests/c_link.rs);
# run.sh points LLAISYS_UPSTREAM_DIR at the copy.
if upstream=$(bash scripts/upstream.sh); then
  cp -r "$upstream" "$stage/llaisys-upstream"
else
  echo "stage-host-tests: no upstream llaisys tree (scripts/upstream.sh said why above); the tests that need it will say so there" >&2
fi
echo "stage-host-tests: unpacked $(du -sh "$payload" | cut -f1), staged:"
du -sh "$stage"
echo "stage-host-tests: done; on the GPU machine, from the crate's root: bash host-stage/run.sh"

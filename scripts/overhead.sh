#!/usr/bin/env bash
# Instructions of our own per table call (no GPU needed): builds the dynamic cdylib, runs
# benches/overhead_calls.c against tests/fixtures/fake_cudart.c (a stand-in libcudart.so.13
# whose calls succeed at once) under valgrind's callgrind, and prints, per call, the
# instructions spent in the library and the stand-in cudart under it; the stand-in's own share
# is a few instructions per call (its 4 KiB memcpy aside). The host CPU's instructions per ns
# turn them into time.
#   bash scripts/overhead.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/bootstrap.sh >/dev/null
command -v valgrind >/dev/null || { echo "overhead: valgrind not found" >&2; exit 2; }
CARGO_TARGET_DIR=target/dynamic cargo build --release --no-default-features --features dynamic --lib -q
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -shared -fPIC -Wl,-soname,libcudart.so.13 -o "$work/libcudart.so.13" tests/fixtures/fake_cudart.c
cc -O2 -Icsrc -o "$work/calls" benches/overhead_calls.c -Ltarget/dynamic/release -lllaisys_nvidia \
  -Wl,-rpath,"$here/target/dynamic/release"
LD_LIBRARY_PATH=$work valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$work/calls" >/dev/null 2>&1
callgrind_annotate --inclusive=yes --threshold=100 "$work/cg.out" 2>/dev/null >"$work/incl.txt"
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
incl = {}
for line in open(f"{work}/incl.txt"):
    m = re.match(r"\s*([\d,]+) \(.*?\)\s+\?\?\?:(f_\w+) ", line)
    if m:
        incl[m.group(2)] = int(m.group(1).replace(",", ""))
N = 2000
names = {"f_set": "set_device(0)", "f_sync": "stream_synchronize", "f_async64": "memcpy_async 64 B H2D pinned",
         "f_sync4k": "memcpy_sync 4 KiB H2D pinned (incl. the stand-in's 4 KiB memcpy)",
         "f_malloc": "malloc_device + free_device 1 MiB",
         "f_mhost": "malloc_host + free_host 1 MiB", "f_stream": "create_stream + destroy_stream"}
print("| call | instructions per call (library + stand-in cudart) |")
print("|---|--:|")
for f, what in names.items():
    if f in incl:
        print(f"| {what} | {incl[f] / N:.0f} |")
PY

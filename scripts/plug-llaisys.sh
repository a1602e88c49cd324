#!/usr/bin/env bash
# Plugs llaisys-nvidia into a llaisys checkout as its NVIDIA backend, or takes it out again:
#   bash scripts/plug-llaisys.sh [--cudart static|dynamic|loaded] [--cuda12 | --cuda-home DIR] [LLAISYS_TREE]
#   bash scripts/plug-llaisys.sh --undo [LLAISYS_TREE]
# LLAISYS_TREE defaults to the current folder. Works on the unmodified upstream tree:
#   - src/device/nvidia/nvidia_runtime_api.cu (the stub) is moved to LLAISYS_TREE/.llaisys-nvidia/saved/;
#   - src/device/nvidia/nvidia_runtime_api.cpp (csrc/nvidia_runtime_api.cpp: llaisys's getter
#     returning our table) and xmake/nvidia.lua (csrc/xmake/nvidia.lua, with this checkout's path
#     and the options below written in; it makes llaisys-device depend on the NVIDIA target) are
#     put in place; a file of the tree they replace is saved first.
# Then llaisys's own `xmake f --nv-gpu=y && xmake && xmake install` and `pip install ./python`.
# Options: --cudart dynamic links our cdylib and the shared libcudart (default static: everything
# inside libllaisys.so); --cudart loaded puts our library inside libllaisys.so with no cudart at
# all: it loads a CUDA 13 or 12 runtime at run time, the newest the driver supports (one
# libllaisys.so for r525+ and r580+ drivers), first its own (NVIDIA's static runtimes made into
# libllaisys_nvidia_cudart13.so and 12.so, installed beside libllaisys.so); --cuda12 builds against CUDA 12.9 (.deps/cuda12,
# for drivers older than r580); --cuda-home DIR against the CUDA root DIR. Idempotent: run it
# again to change options. --undo puts back every saved file and removes what it added (and our
# libraries it installed).
set -euo pipefail
crate=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
undo=0
cudart=static
cuda_home=
tree=
usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "plug-llaisys: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --undo) undo=1 ;;
    --cudart) [ $# -ge 2 ] || die "--cudart needs static, dynamic or loaded"; cudart=$2; shift ;;
    --cudart=*) cudart=${1#--cudart=} ;;
    --cuda12) cuda_home=$crate/.deps/cuda12 ;;
    --cuda-home) [ $# -ge 2 ] || die "--cuda-home needs a folder"; cuda_home=$2; shift ;;
    --cuda-home=*) cuda_home=${1#--cuda-home=} ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$tree" ] || die "one llaisys tree at a time ('$tree' and '$1')"; tree=$1 ;;
  esac
  shift
done
case "$cudart" in static|dynamic|loaded) ;; *) die "--cudart must be static, dynamic or loaded, not '$cudart'" ;; esac
tree=${tree:-.}
[ -d "$tree" ] || die "no folder '$tree'"
tree=$(cd "$tree" && pwd)
# What makes a llaisys tree: the core's device dispatch and the xmake include of nvidia.lua.
grep -q 'namespace nvidia' "$tree/src/device/runtime_api.hpp" 2>/dev/null &&
  grep -q 'xmake/nvidia.lua' "$tree/xmake.lua" 2>/dev/null ||
  die "'$tree' is not a llaisys tree (want src/device/runtime_api.hpp declaring namespace nvidia and xmake.lua including xmake/nvidia.lua)"
[ "$tree" != "$crate" ] || die "run it on the llaisys tree, not on llaisys-nvidia itself"

state=$tree/.llaisys-nvidia
manifest=$state/plugged     # lines: "file <sha256> <path>" for each file we wrote
saved=$state/saved          # the tree's own files we replaced, at their paths
stub=src/device/nvidia/nvidia_runtime_api.cu
adapter=src/device/nvidia/nvidia_runtime_api.cpp
rule=xmake/nvidia.lua
installed=(lib/libllaisys_nvidia.so python/llaisys/libllaisys/libllaisys_nvidia.so)
for m in 13 12; do
  installed+=("lib/libllaisys_nvidia_cudart$m.so" "python/llaisys/libllaisys/libllaisys_nvidia_cudart$m.so")
done

sha() { sha256sum "$1" | cut -d' ' -f1; }
recorded_sha() { [ -f "$manifest" ] && awk -v p="$1" '$1 == "file" && $3 == p { print $2 }' "$manifest"; }
# ours PATH: the file at PATH is the one a plug wrote (unchanged since).
ours() { local r; r=$(recorded_sha "$1"); [ -n "$r" ] && [ -f "$tree/$1" ] && [ "$(sha "$tree/$1")" = "$r" ]; }

if [ "$undo" = 1 ]; then
  [ -d "$state" ] || die "'$tree' is not plugged (no .llaisys-nvidia/): nothing to undo"
  for f in "$adapter" "$rule"; do
    if [ -f "$tree/$f" ] && ! ours "$f"; then
      die "$f was changed after plugging; move your version away, then run --undo again"
    fi
  done
  for f in "$adapter" "$rule"; do rm -f "$tree/$f"; done
  for f in "${installed[@]}"; do rm -f "$tree/$f"; done
  rm -rf "$tree/build/llaisys-nvidia"
  if [ -d "$saved" ]; then
    (cd "$saved" && find . -type f -print) | while read -r f; do
      mkdir -p "$(dirname "$tree/$f")"
      mv "$saved/$f" "$tree/$f"
    done
  fi
  rm -rf "$state"
  echo "plug-llaisys: llaisys-nvidia taken out of $tree (the tree's own files are back)"
  echo "plug-llaisys: rebuild with: cd $tree && xmake f -c && xmake"
  exit 0
fi

# The crate's build needs what the bootstrap installs (CUDA headers and libraries, xmake; the
# loaded mode both header sets).
if [ "$cuda_home" = "$crate/.deps/cuda12" ] || [ "$cudart" = loaded ]; then
  bash "$crate/scripts/bootstrap.sh" --cuda12
else
  bash "$crate/scripts/bootstrap.sh"
fi
if [ -n "$cuda_home" ]; then
  [ -f "$cuda_home/include/cuda_runtime.h" ] || compgen -G "$cuda_home/nvidia/*/include/cuda_runtime.h" >/dev/null ||
    die "--cuda-home '$cuda_home' has no include/cuda_runtime.h (nor PyPI wheels with one)"
  cuda_home=$(cd "$cuda_home" && pwd)
fi

mkdir -p "$state"
# save PATH: keeps the tree's own file at PATH (once) before we replace or remove it.
save() {
  local f=$1
  [ -f "$tree/$f" ] || return 0
  ours "$f" && return 0
  if [ -f "$saved/$f" ]; then
    cmp -s "$saved/$f" "$tree/$f" && return 0
    die "$f differs both from what plug-llaisys wrote and from the saved $saved/$f; move one away"
  fi
  mkdir -p "$(dirname "$saved/$f")"
  cp -p "$tree/$f" "$saved/$f"
}
save "$stub"
save "$adapter"
save "$rule"
rm -f "$tree/$stub"

escape() { printf '%s' "$1" | sed -e 's/[\\/&|]/\\&/g'; }
tmp=$(mktemp "$state/.rule.XXXXXX")
sed -e "s|@LLAISYS_NVIDIA_DIR@|$(escape "$crate")|" \
    -e "s|@LLAISYS_NVIDIA_CUDART@|$cudart|" \
    -e "s|@LLAISYS_NVIDIA_CUDA_HOME@|$(escape "$cuda_home")|" \
    "$crate/csrc/xmake/nvidia.lua" >"$tmp"
mkdir -p "$tree/xmake" "$tree/src/device/nvidia"
mv "$tmp" "$tree/$rule"
cp "$crate/csrc/nvidia_runtime_api.cpp" "$tree/$adapter"
chmod 644 "$tree/$rule" "$tree/$adapter"
{
  echo "# written by llaisys-nvidia's scripts/plug-llaisys.sh; --undo reads it"
  echo "crate $crate"
  echo "cudart $cudart"
  echo "cuda_home ${cuda_home:--}"
  echo "file $(sha "$tree/$adapter") $adapter"
  echo "file $(sha "$tree/$rule") $rule"
} >"$manifest"
# A mode switch must not leave another mode's libraries to be installed (the dynamic mode's
# cdylib, the loaded mode's runtimes; the next `xmake install` puts this mode's in place).
for f in "${installed[@]}"; do
  case "$cudart:$f" in dynamic:*/libllaisys_nvidia.so) ;; *) rm -f "$tree/$f" ;; esac
done

echo "plug-llaisys: llaisys-nvidia ($cudart cudart${cuda_home:+, CUDA at $cuda_home}) plugged into $tree"
echo "plug-llaisys: undo with: bash $crate/scripts/plug-llaisys.sh --undo $tree"
echo "plug-llaisys: next, in a shell:"
echo "  cd $tree"
command -v xmake >/dev/null 2>&1 || echo "  export PATH=$crate/.deps/xmake/bin:\$PATH"
[ "$(id -u)" = 0 ] && echo "  export XMAKE_ROOT=y"
echo "  xmake f --nv-gpu=y && xmake && xmake install"
echo "  pip install ./python"
echo "  python test/test_runtime.py --device nvidia"

#!/usr/bin/env bash
# Installs what building this crate needs and is missing, into .deps/ (ignored by git):
#   .deps/cuda13   CUDA 13.0 runtime headers + libcudart (PyPI: nvidia-cuda-runtime, nvidia-cuda-crt)
#   .deps/cuda12   CUDA 12.9 runtime headers + libcudart (PyPI: nvidia-cuda-runtime-cu12, nvidia-cuda-nvcc-cu12),
#                  only with --cuda12
#   .deps/libclang libclang for bindgen (PyPI: libclang), only when the system has none
#   .deps/xmake    xmake (PyPI: xmake-wheel), for the tests that build the llaisys tree with xmake
#   .deps/nccl     NCCL's nccl.h (bindgen, build/nccl.rs) and libnccl.so.2 (host-only tests; the library
#                  itself loads it at run time) (PyPI: nvidia-nccl-cu13)
#   .deps/python   what upstream llaisys's Python package and test/test_runtime.py import (torch with
#                  the CUDA libraries it loads, safetensors, numpy), and pip/setuptools/wheel for an
#                  offline `pip install ./python`; only with --llaisys-python (about 4 GiB; put on
#                  PYTHONPATH by tests/llaisys_upstream.rs, never installed into a Python)
# Never needs a GPU or a driver. Idempotent: a second run only checks stamps.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps="$here/.deps"
want12=0
wantpy=0
for a in "$@"; do
  case "$a" in
    --cuda12) want12=1 ;;
    --llaisys-python) wantpy=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bootstrap: unknown argument '$a' (known: --cuda12, --llaisys-python)" >&2; exit 2 ;;
  esac
done

CUDA13_PKGS="nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88"
CUDA12_PKGS="nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86"
LIBCLANG_PKGS="libclang==18.1.1"
XMAKE_PKGS="xmake-wheel==3.0.0"
NCCL_PKGS="nvidia-nccl-cu13==2.32.3"
# torch 2.11.0 (the GPU machine's) and exactly the CUDA 13.0 libraries its import loads, without
# triton and the other extras it does not need to import; CPU-only use here.
LLAISYS_PY_PKGS="torch==2.11.0 nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.1.0.3 nvidia-cuda-cupti==13.0.85
 nvidia-cuda-nvrtc==13.0.88 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6 nvidia-curand==10.4.0.35
 nvidia-cusolver==12.0.4.66 nvidia-cusparse==12.6.3.3 nvidia-nvjitlink==13.0.88 nvidia-cudnn-cu13==9.19.0.56
 nvidia-cusparselt-cu13==0.8.0 nvidia-nccl-cu13==2.28.9 nvidia-nvshmem-cu13==3.4.5
 filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1 jinja2==3.1.6
 markupsafe==3.0.4 fsspec==2026.9.0 packaging==26.4 numpy==2.4.6 safetensors==0.8.0
 setuptools==81.0.0 wheel==0.48.0 pip==26.3"

need() { command -v "$1" >/dev/null 2>&1 || { echo "bootstrap: '$1' is required: $2" >&2; exit 1; }; }
need python3 "install Python 3 (apt-get install -y python3 python3-pip)"
need cargo "install Rust (https://rustup.rs)"
need cc "install a C compiler (apt-get install -y build-essential)"
python3 -m pip --version >/dev/null 2>&1 || { echo "bootstrap: python3 has no pip (apt-get install -y python3-pip)" >&2; exit 1; }

# pip_into DIR PKGS...: installs PKGS into DIR unless DIR/.stamp already names exactly PKGS.
pip_into() {
  local dir=$1; shift
  local stamp="$dir/.stamp"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$*" ]; then
    echo "bootstrap: $(basename "$dir") up to date ($*)"
    return
  fi
  echo "bootstrap: installing $* into ${dir#"$here"/}"
  rm -rf "$dir"
  mkdir -p "$dir"
  # --no-deps: these wheels depend on nothing we need; --target keeps everything project-local.
  PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip install -q --no-deps --no-compile --target "$dir" "$@" \
    2> >(grep -v "Running pip as the 'root' user" >&2)
  echo "$*" >"$stamp"
}

pip_into "$deps/cuda13" $CUDA13_PKGS
pip_into "$deps/xmake" $XMAKE_PKGS
pip_into "$deps/nccl" $NCCL_PKGS
[ "$want12" = 1 ] && pip_into "$deps/cuda12" $CUDA12_PKGS
[ "$wantpy" = 1 ] && pip_into "$deps/python" $LLAISYS_PY_PKGS

system_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so' && return 0
  compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null && return 0
  compgen -G '/usr/lib/llvm-*/lib/libclang-[0-9]*.so*' >/dev/null && return 0
  return 1
}
if system_libclang; then
  echo "bootstrap: using the system's libclang"
else
  pip_into "$deps/libclang" $LIBCLANG_PKGS
fi
echo "bootstrap: done; 'cargo build' and 'cargo test' now find CUDA in .deps/"

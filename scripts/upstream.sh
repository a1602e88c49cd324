#!/usr/bin/env bash
# The real upstream llaisys tree (InfiniTensor/llaisys at the pinned commit below), which the
# tests and scripts that build or read llaisys use. One rule, the first that applies:
#   1. LLAISYS_UPSTREAM_DIR, when set (and then nothing else is looked at);
#   2. ../shared/llaisys-upstream beside this checkout (our machines and CI);
#   3. .deps/llaisys-upstream, which this script fetches (ignored by git).
# A folder counts when it holds xmake.lua and src/device/runtime_api.hpp. The tests apply the
# same rule (tests/llaisys_tree/mod.rs, `find_upstream`; tests/standalone.rs checks that both
# agree); scripts/stage-gpu.sh and scripts/stage-host-tests.sh take the folder this prints.
#   bash scripts/upstream.sh          the tree's folder on stdout; when none is found, fetches it
#                                     into .deps/llaisys-upstream first (a shallow `git clone` of
#                                     the pinned commit, verified by its id, at most 60 s); exit 1
#                                     when none can be had (the tests that need it then skip, and
#                                     say so, unless CI=true)
#   bash scripts/upstream.sh --find   the same without fetching (no network)
set -euo pipefail
LLAISYS_UPSTREAM_REPO=https://github.com/InfiniTensor/llaisys
LLAISYS_UPSTREAM_COMMIT=7740d46f732fad16139c2312401515176ffbd091

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
dest=$root/.deps/llaisys-upstream

is_tree() { [ -f "$1/xmake.lua" ] && [ -f "$1/src/device/runtime_api.hpp" ]; }
# Prints the tree's folder by the rule above, or fails.
find_tree() {
  if [ -n "${LLAISYS_UPSTREAM_DIR+set}" ]; then
    is_tree "$LLAISYS_UPSTREAM_DIR" && echo "$LLAISYS_UPSTREAM_DIR"
  elif is_tree "$root/../shared/llaisys-upstream"; then
    (cd "$root/../shared/llaisys-upstream" && pwd -P)
  else
    is_tree "$dest" && echo "$dest"
  fi
}

# The shallow clone, made in a side folder and moved into place only once its commit is checked,
# so that .deps/llaisys-upstream is always a whole tree at the pinned commit.
fetch_tree() {
  local side=$dest.partial got
  command -v git >/dev/null 2>&1 || { echo "upstream: git is not installed" >&2; return 1; }
  echo "upstream: fetching $LLAISYS_UPSTREAM_REPO at ${LLAISYS_UPSTREAM_COMMIT:0:7} into .deps/llaisys-upstream" >&2
  rm -rf "$side"
  mkdir -p "$side"
  # A commit id, not a branch: init + fetch of that one commit (GitHub serves any reachable id).
  if ! (cd "$side" && export GIT_TERMINAL_PROMPT=0 &&
    git init -q && timeout 60 git fetch -q --depth 1 "$LLAISYS_UPSTREAM_REPO" "$LLAISYS_UPSTREAM_COMMIT" &&
    git -c advice.detachedHead=false checkout -q FETCH_HEAD) >&2; then
    rm -rf "$side"
    echo "upstream: could not fetch $LLAISYS_UPSTREAM_REPO at $LLAISYS_UPSTREAM_COMMIT (git says why above: no network, over 60 s, or no such commit)" >&2
    return 1
  fi
  got=$(git -C "$side" rev-parse HEAD)
  if [ "$got" != "$LLAISYS_UPSTREAM_COMMIT" ]; then
    rm -rf "$side"
    echo "upstream: fetched commit $got, expected $LLAISYS_UPSTREAM_COMMIT; not used" >&2
    return 1
  fi
  rm -rf "$dest"
  mv "$side" "$dest"
}

case "${1:-}" in
  --find) find_tree || { echo "upstream: no llaisys tree (bash $0 --help says where it looks)" >&2; exit 1; } ;;
  "")
    find_tree && exit 0
    if [ -n "${LLAISYS_UPSTREAM_DIR+set}" ]; then
      echo "upstream: no llaisys tree at LLAISYS_UPSTREAM_DIR=$LLAISYS_UPSTREAM_DIR (unset it to use or fetch the default)" >&2
      exit 1
    fi
    fetch_tree && find_tree
    ;;
  -h|--help) sed -n '2,15p' "$0" ;;
  *) echo "upstream: unknown argument '$1' (known: --find, --help)" >&2; exit 2 ;;
esac

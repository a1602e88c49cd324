#!/usr/bin/env bash
# The main job: `llaisys-nvidia doctor` (explains this machine's CUDA setup). Arguments are passed
# on: bash scripts/run.sh --json, bash scripts/run.sh --bench.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/bootstrap.sh >&2
cargo build --release -q -p llaisys-nvidia-doctor --bin llaisys-nvidia
exec target/release/llaisys-nvidia doctor "$@"

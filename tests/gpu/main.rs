//! GPU tests: one test binary (`cargo test --test gpu`), staged to the GPU machine by
//! `scripts/stage-gpu.sh`. Without a CUDA device each test prints "skipped: no CUDA device" and
//! passes; with LLAISYS_TEST_REQUIRE_GPU=1 (set on the GPU machine) it fails instead.

mod api;
mod caching;
mod common;
mod graphs;
mod hostile;
mod leaks;
mod multi;
mod nccl;
mod stress;
mod sync_semantics;
mod table;

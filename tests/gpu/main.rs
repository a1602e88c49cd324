//! GPU tests: one test binary (`cargo test --test gpu`), staged to the GPU machine by
//! `scripts/stage-gpu.sh` and run there by scripts/gpu-run.sh. Each GPU test is `#[ignore]`d
//! ("needs a CUDA device"), so that a plain `cargo test` reports it as ignored, never as
//! passed; `-- --include-ignored --skip ::child_` runs them (the `child_*` tests are entry
//! points of child processes, started by their parent tests). Without a CUDA device a GPU test
//! prints "skipped: no CUDA device" and passes; with LLAISYS_TEST_REQUIRE_GPU=1 (set on the GPU
//! machine) it fails instead (`gating`).

mod api;
mod caching;
mod common;
mod gating;
mod graphs;
mod hostile;
mod leaks;
mod multi;
mod nccl;
mod stress;
#[path = "../support/mod.rs"]
mod support;
mod sync_semantics;
mod table;

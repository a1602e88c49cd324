//! CUDA's runtime, below everything else: `loaded` (the `loaded` mode: which libcudart to open
//! at run time, and each function's symbol on first use), `sys` (the bindgen output over
//! `wrapper.h`) and `calls` (one thin function per cudart call, each with its safety argument:
//! with `error`, the only user of `sys`).

pub(crate) mod calls;
#[cfg(llaisys_loaded)]
pub(crate) mod loaded;
pub(crate) mod sys;

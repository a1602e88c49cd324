//! Shared helpers of the GPU tests.
#![allow(dead_code)]

/// The device count, or None after printing a visible skip line. Panics (fails the test) when
/// LLAISYS_TEST_REQUIRE_GPU=1 and there is no device.
pub fn gpu_or_skip(test: &str) -> Option<i32> {
    let n = llaisys_nvidia::runtime::device_count();
    match n {
        Ok(n) if n > 0 => Some(n),
        other => {
            if std::env::var("LLAISYS_TEST_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("{test}: LLAISYS_TEST_REQUIRE_GPU=1 but no CUDA device: {other:?}");
            }
            eprintln!("skipped: no CUDA device ({test}: {other:?})");
            None
        }
    }
}

/// Skips the rest of the test (visibly) without a GPU; see `gpu_or_skip`.
#[macro_export]
macro_rules! require_gpu {
    () => {
        match $crate::common::gpu_or_skip(module_path!()) {
            Some(n) => n,
            None => return,
        }
    };
}

/// A deterministic byte pattern (xorshift) for data checks.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

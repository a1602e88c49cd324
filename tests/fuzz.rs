//! Host-only fuzzing of the C ABI without a driver (each test runs in a child process without
//! one, `support::no_driver`; the GPU suite fuzzes real memory): a seeded random driver
//! (tests/support/fuzz.rs) runs random call sequences with hostile arguments for a bounded
//! time. Every failure must come back through the error handler with the right status, nothing
//! may crash, and the statistics must balance. LLAISYS_FUZZ_SECONDS (default 10) and LLAISYS_FUZZ_SEED (default: from the
//! clock, printed) set the run; a seed that failed becomes a regression case below.

#[path = "support/fuzz.rs"]
mod fuzz;
mod support;

use std::time::Duration;

fn seconds() -> u64 {
    std::env::var("LLAISYS_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

#[test]
fn random_call_sequences_with_hostile_arguments() {
    support::no_driver::test("random_call_sequences_with_hostile_arguments", || {
        let seed = std::env::var("LLAISYS_FUZZ_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("fuzz seed {seed} (rerun with LLAISYS_FUZZ_SEED={seed})");
        let out = fuzz::run(seed, Duration::from_secs(seconds()), u64::MAX, false);
        eprintln!("{out:?}");
        assert!(out.ops > 300, "too few operations: {out:?}");
        assert!(
            out.errors_by_status[3] > 0,
            "no hostile input was refused: {out:?}"
        );
        assert!(out.data_checks > 0, "no data was checked: {out:?}");
    });
}

#[test]
fn regression_seeds() {
    support::no_driver::test("regression_seeds", || {
        // Fixed seeds, each a short run (seeds that once failed are added here).
        for seed in [1u64, 2, 3, 0xDEAD_BEEF] {
            // The time cap only guards against a hang: natively 3000 calls take well under a
            // second, under valgrind (scripts/test.sh) about ten.
            let out = fuzz::run(seed, Duration::from_secs(120), 3000, false);
            assert_eq!(out.ops, 3000, "seed {seed}: {out:?}");
        }
    });
}

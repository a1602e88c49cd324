//! Ranks as processes: this test binary started again on one `#[ignore]`d entry point
//! (`nccl::procs::child_rank`) with the scenario, rank, size and unique id in its environment.
//! Each child exits 0 when its checks passed; the parent reads its output.

use super::data;
use super::{id_from_hex, id_to_hex, nvls_off, ok, stream, DevBuf};
use crate::support::child::{self, Finished, Running, TestChild};
use crate::support::last_error_message;
use llaisys_nvidia::ffi::*;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

const SCENARIO: &str = "LLAISYS_NCCL_GPU_CHILD";
const ENTRY: &str = "nccl::procs::child_rank";

/// A rank process of `scenario` (NCCL_NVLS_ENABLE=0: `TestChild`). It does not inherit
/// LLAISYS_TEST_REQUIRE_GPU: a rank checks what its scenario needs itself.
fn command(scenario: &str) -> TestChild {
    TestChild::new(ENTRY)
        .env(SCENARIO, scenario)
        .env_remove("LLAISYS_TEST_REQUIRE_GPU")
}

/// Starts rank `rank` of `n` in `scenario` with `id`.
pub fn spawn(
    scenario: &str,
    rank: usize,
    n: usize,
    id: &CommId,
    extra: &[(&str, &str)],
) -> Running {
    command(scenario)
        .env("LLAISYS_NCCL_RANK", rank.to_string())
        .env("LLAISYS_NCCL_NRANKS", n.to_string())
        .env("LLAISYS_NCCL_ID", id_to_hex(id))
        .envs(extra.iter().copied())
        .spawn()
}

/// Starts a process that makes a unique id, prints it and exits.
pub fn spawn_maker() -> Running {
    command("make_id_and_exit").spawn()
}

/// Runs `n` ranks of `scenario` (one per device), waits up to `limit` for all, and returns each
/// one's (success, output). A rank still running past the limit is killed and fails.
pub fn run_ranks(
    scenario: &str,
    n: usize,
    limit: Duration,
    extra: &[(&str, &str)],
) -> Vec<(bool, String)> {
    let id = super::unique_id();
    let ranks: Vec<Running> = (0..n).map(|r| spawn(scenario, r, n, &id, extra)).collect();
    child::wait_all(ranks, limit)
        .iter()
        .map(|out: &Finished| (out.ran_one_test(), out.report()))
        .collect()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

fn join(timeout_ms: i64) -> (Comm, usize, usize, c_int) {
    let rank: usize = env("LLAISYS_NCCL_RANK").parse().unwrap();
    let n: usize = env("LLAISYS_NCCL_NRANKS").parse().unwrap();
    let id = id_from_hex(&env("LLAISYS_NCCL_ID"));
    let device = rank as c_int;
    ok(
        llaisys_nvidia::ffi::llaisysNvidiaSetDevice(device),
        "set device",
    );
    ok(llaisysNvidiaCommSetTimeout(timeout_ms), "timeout");
    let mut c = std::ptr::null_mut();
    // SAFETY: valid pointers.
    let st = unsafe { llaisysNvidiaCommInitRank(&mut c, n as c_int, &id, rank as c_int) };
    if st != 0 {
        return (std::ptr::null_mut(), rank, n, st);
    }
    (c, rank, n, 0)
}

/// The entry point of every rank process.
#[test]
#[ignore = "entry point of a child process: run by the communicator tests"]
fn child_rank() {
    child::require_child(ENTRY);
    let scenario = env(SCENARIO);
    nvls_off();
    match scenario.as_str() {
        // Gets the id (from the environment) and exits without joining.
        "exit_before_joining" => {
            let _ = id_from_hex(&env("LLAISYS_NCCL_ID"));
            println!("rank {}: exiting before joining", env("LLAISYS_NCCL_RANK"));
        }
        "make_id_and_exit" => {
            let id = super::unique_id();
            println!("ID {}", id_to_hex(&id));
        }
        // Every collective and type, with data checks, on our streams and the legacy stream.
        "suite" => {
            let (c, rank, n, st) = join(120_000);
            ok(st, "init rank");
            let (mut r, mut size) = (0, 0);
            // SAFETY: valid out-pointers.
            unsafe {
                ok(llaisysNvidiaCommRank(c, &mut r), "rank");
                ok(llaisysNvidiaCommSize(c, &mut size), "size");
            }
            assert_eq!((r as usize, size as usize), (rank, n));
            let mut calls = 0;
            for s in [stream(0), stream(1), std::ptr::null_mut()] {
                calls += data::suite(c, rank, n, s, 1031);
                super::destroy_stream(s);
            }
            // send/recv both ways between every pair, each way alone (outside a group).
            let b = DevBuf::new(4096);
            let got = DevBuf::new(4096);
            for peer in 0..n {
                if peer == rank {
                    continue;
                }
                let mine = data::moving_bytes(data::U8, rank, 4096);
                b.upload(&mine);
                // The lower rank sends first; each call alone completes only with its partner.
                let order = if rank < peer {
                    [true, false]
                } else {
                    [false, true]
                };
                for sending in order {
                    ok(llaisysNvidiaGroupStart(), "group");
                    // SAFETY: 4096 bytes each.
                    unsafe {
                        if sending {
                            ok(
                                llaisysNvidiaSend(
                                    b.ptr,
                                    4096,
                                    data::U8,
                                    peer as c_int,
                                    c,
                                    std::ptr::null_mut(),
                                ),
                                "send",
                            );
                        } else {
                            ok(
                                llaisysNvidiaRecv(
                                    got.ptr,
                                    4096,
                                    data::U8,
                                    peer as c_int,
                                    c,
                                    std::ptr::null_mut(),
                                ),
                                "recv",
                            );
                        }
                    }
                    ok(llaisysNvidiaGroupEnd(), "group end");
                }
                ok(
                    llaisysNvidiaCommSynchronize(c, std::ptr::null_mut(), -1),
                    "sync",
                );
                assert!(
                    got.download(4096) == data::moving_bytes(data::U8, peer, 4096),
                    "recv from {peer}"
                );
            }
            ok(llaisysNvidiaCommDestroy(c), "destroy");
            println!("rank {rank} of {n}: {calls} collective calls with data checks passed");
        }
        // Rank 1 exits at once; rank 0 must see a timeout within its 5 s.
        "peer_never_joins" => {
            let rank: usize = env("LLAISYS_NCCL_RANK").parse().unwrap();
            if rank == 1 {
                return;
            }
            let t = Instant::now();
            let (c, _, _, st) = join(5000);
            let waited = t.elapsed();
            assert_eq!(st, 7, "status {st}: {}", last_error_message());
            assert!(c.is_null());
            assert!(waited < Duration::from_secs(20), "{waited:?}");
            println!("rank 0: peer never joined: status 7 after {waited:?}");
        }
        // Both join; rank 1 dies before the collective; rank 0's all-reduce never completes:
        // the watchdog wait returns an error within 5 s, aborts, and the stream drains.
        "peer_dies_mid_collective" => {
            let (c, rank, _, st) = join(60_000);
            ok(st, "init rank");
            if rank == 1 {
                std::process::exit(0);
            }
            let b = DevBuf::new(64 << 20);
            b.fill(0);
            let s = stream(0);
            // SAFETY: 16 Mi floats, in place.
            let queued = unsafe {
                llaisysNvidiaAllReduce(b.ptr, b.ptr, 16 << 20, data::F32, data::SUM, c, s)
            };
            let t = Instant::now();
            let st = if queued == 0 {
                llaisysNvidiaCommSynchronize(c, s, 5000)
            } else {
                queued
            };
            let waited = t.elapsed();
            assert!(st == 5 || st == 7, "status {st}: {}", last_error_message());
            assert!(waited < Duration::from_secs(30), "{waited:?}");
            ok(
                llaisys_nvidia::ffi::llaisysNvidiaStreamSynchronize(s),
                "the stream drains after the abort",
            );
            ok(llaisysNvidiaCommDestroy(c), "destroy the aborted handle");
            println!(
                "rank 0: peer died: status {st} after {waited:?}: {}",
                last_error_message()
            );
        }
        other => panic!("unknown scenario {other}"),
    }
}

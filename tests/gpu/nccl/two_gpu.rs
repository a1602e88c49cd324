//! Several devices: skipped visibly with fewer than two, failing instead under
//! LLAISYS_TEST_REQUIRE_GPUS=2. Two processes, one per GPU, the unique id passed to them: every
//! collective and type with data checks, send/recv both ways, groups; a rank that never joins
//! and one that dies mid-collective; and one process with a communicator per device.

use super::data::{self, F32, SUM};
use super::procs::run_ranks;
use super::{destroy_stream, fails, nvls_off, ok, DevBuf};
use crate::require_gpus;
use llaisys_nvidia::ffi::llaisysNvidiaSetDevice;
use llaisys_nvidia::ffi::*;
use std::os::raw::c_int;
use std::time::Duration;

fn check_ranks(what: &str, results: Vec<(bool, String)>) {
    for (r, (passed, out)) in results.iter().enumerate() {
        println!("--- {what}, rank {r}:\n{out}");
        assert!(passed, "{what}: rank {r} failed:\n{out}");
    }
}

#[test]
#[ignore = "needs 2 CUDA devices"]
fn two_processes_every_collective_and_type() {
    require_gpus!(2);
    nvls_off();
    check_ranks(
        "suite",
        run_ranks("suite", 2, Duration::from_secs(300), &[]),
    );
}

#[test]
#[ignore = "needs 2 CUDA devices"]
fn two_processes_a_rank_that_never_joins() {
    require_gpus!(2);
    nvls_off();
    check_ranks(
        "peer never joins",
        run_ranks("peer_never_joins", 2, Duration::from_secs(60), &[]),
    );
}

#[test]
#[ignore = "needs 2 CUDA devices"]
fn two_processes_a_rank_that_dies_mid_collective() {
    require_gpus!(2);
    nvls_off();
    check_ranks(
        "peer dies",
        run_ranks("peer_dies_mid_collective", 2, Duration::from_secs(120), &[]),
    );
}

/// One process, a communicator per device made at once; all-reduce on each device's own stream
/// in one group; a stream of another device is refused.
#[test]
#[ignore = "needs 2 CUDA devices"]
fn one_process_a_communicator_per_device() {
    let n = require_gpus!(2) as usize;
    nvls_off();
    let mut comms = vec![std::ptr::null_mut(); n];
    // SAFETY: n slots; NULL: devices 0..n-1.
    ok(
        unsafe { llaisysNvidiaCommInitAll(comms.as_mut_ptr(), n as c_int, std::ptr::null()) },
        "init all",
    );
    let count = 1 << 20;
    let mut streams = Vec::new();
    let mut bufs = Vec::new();
    for (d, &c) in comms.iter().enumerate() {
        let (mut r, mut size, mut dev) = (0, 0, 0);
        // SAFETY: valid out-pointers.
        unsafe {
            ok(llaisysNvidiaCommRank(c, &mut r), "rank");
            ok(llaisysNvidiaCommSize(c, &mut size), "size");
            ok(llaisysNvidiaCommDevice(c, &mut dev), "device");
        }
        assert_eq!((r as usize, size as usize, dev as usize), (d, n, d));
        ok(llaisysNvidiaSetDevice(d as c_int), "set device");
        streams.push(super::stream(0));
        let b = DevBuf::new(count * 4);
        let vals: Vec<i64> = (0..count).map(|i| data::value(F32, SUM, d, i)).collect();
        b.upload(&data::encode(F32, &vals));
        bufs.push(b);
    }
    // A stream of device 1 for the communicator of device 0.
    // SAFETY: refused before NCCL.
    let st = unsafe {
        llaisysNvidiaAllReduce(
            bufs[0].ptr,
            bufs[0].ptr,
            count,
            F32,
            SUM,
            comms[0],
            streams[1],
        )
    };
    fails(st, 3, "belongs to device 1");
    ok(llaisysNvidiaGroupStart(), "group");
    for d in 0..n {
        // SAFETY: count floats, in place.
        ok(
            unsafe {
                llaisysNvidiaAllReduce(
                    bufs[d].ptr,
                    bufs[d].ptr,
                    count,
                    F32,
                    SUM,
                    comms[d],
                    streams[d],
                )
            },
            "all-reduce",
        );
    }
    ok(llaisysNvidiaGroupEnd(), "group end");
    let want = data::encode(
        F32,
        &(0..count)
            .map(|i| data::reduced(F32, SUM, n, i))
            .collect::<Vec<_>>(),
    );
    for d in 0..n {
        ok(
            llaisysNvidiaCommSynchronize(comms[d], streams[d], -1),
            "synchronize",
        );
        ok(llaisysNvidiaSetDevice(d as c_int), "set device");
        assert!(bufs[d].download(count * 4) == want, "device {d}: wrong sum");
    }
    drop(bufs);
    for (c, s) in comms.into_iter().zip(streams) {
        ok(llaisysNvidiaCommDestroy(c), "destroy");
        destroy_stream(s);
    }
    ok(llaisysNvidiaSetDevice(0), "set device");
}

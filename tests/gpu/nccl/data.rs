//! Typed data for the collectives' checks: every llaisys type encoded from small integers (exact
//! in every type, f16 and bf16 included), the expected result of each reduction over n ranks,
//! and the whole suite of collectives run on one communicator and stream.

use super::{ok, DevBuf};
use llaisys_nvidia::ffi::*;
use std::os::raw::{c_int, c_void};

pub const BYTE: c_int = 1;
pub const BOOL: c_int = 2;
pub const I8: c_int = 3;
pub const I32: c_int = 5;
pub const I64: c_int = 6;
pub const U8: c_int = 7;
pub const U32: c_int = 9;
pub const U64: c_int = 10;
pub const F16: c_int = 12;
pub const F32: c_int = 13;
pub const F64: c_int = 14;
pub const C32: c_int = 16;
pub const C64: c_int = 17;
pub const C128: c_int = 18;
pub const BF16: c_int = 19;
/// Types that only move (NCCL cannot reduce them).
pub const MOVING_ONLY: [c_int; 4] = [4, 8, 11, 15];
pub const REDUCIBLE: [c_int; 15] = [
    BYTE, BOOL, I8, I32, I64, U8, U32, U64, F16, F32, F64, C32, C64, C128, BF16,
];

pub const SUM: c_int = 0;
pub const PROD: c_int = 1;
pub const MAX: c_int = 2;
pub const MIN: c_int = 3;
pub const AVG: c_int = 4;

/// Bytes of one element.
pub fn size(dt: c_int) -> usize {
    match dt {
        1 | 2 | 3 | 7 | 11 => 1,
        4 | 8 | 12 | 15 | 19 => 2,
        5 | 9 | 13 | 16 => 4,
        6 | 10 | 14 | 17 => 8,
        18 => 16,
        _ => panic!("dtype {dt}"),
    }
}

/// Scalars per element (2 for complex).
pub fn parts(dt: c_int) -> usize {
    if matches!(dt, 16..=18) {
        2
    } else {
        1
    }
}

/// The reductions `dt` takes.
pub fn ops_of(dt: c_int) -> Vec<c_int> {
    match dt {
        BOOL => vec![MAX, MIN],
        C32 | C64 | C128 => vec![SUM, AVG],
        _ => vec![SUM, PROD, MAX, MIN, AVG],
    }
}

fn f16_bits(v: i64) -> u16 {
    if v == 0 {
        return 0;
    }
    let b = (v as f32).to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let mant = ((b >> 13) & 0x3ff) as u16;
    sign | ((exp as u16) << 10) | mant
}

/// The scalars `vals` in type `dt` (parts for complex).
pub fn encode(dt: c_int, vals: &[i64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(vals.len() * 8);
    for &v in vals {
        match dt {
            BYTE | U8 | BOOL => out.push(v as u8),
            I8 => out.push(v as i8 as u8),
            I32 => out.extend((v as i32).to_le_bytes()),
            U32 => out.extend((v as u32).to_le_bytes()),
            I64 => out.extend(v.to_le_bytes()),
            U64 => out.extend((v as u64).to_le_bytes()),
            F16 | C32 => out.extend(f16_bits(v).to_le_bytes()),
            BF16 => out.extend((((v as f32).to_bits() >> 16) as u16).to_le_bytes()),
            F32 | C64 => out.extend((v as f32).to_le_bytes()),
            F64 | C128 => out.extend((v as f64).to_le_bytes()),
            _ => panic!("encode {dt}"),
        }
    }
    out
}

/// What rank r contributes at scalar index i for reduction `op` (small, exact everywhere, and
/// for AVG divisible by n: the sum over ranks of b + 2r is n*b + n(n-1)).
pub fn value(dt: c_int, op: c_int, r: usize, i: usize) -> i64 {
    if dt == BOOL {
        return ((i + r) % 2) as i64;
    }
    if op == PROD {
        return 1 + ((i + r) % 2) as i64;
    }
    (i % 5) as i64 + 1 + 2 * r as i64
}

/// The reduction over ranks 0..n of scalar i.
pub fn reduced(dt: c_int, op: c_int, n: usize, i: usize) -> i64 {
    let vals = (0..n).map(|r| value(dt, op, r, i));
    match op {
        SUM => vals.sum(),
        PROD => vals.product(),
        MAX => vals.max().unwrap(),
        MIN => vals.min().unwrap(),
        AVG => vals.sum::<i64>() / n as i64,
        _ => unreachable!(),
    }
}

/// Bytes that rank r sends in a moving collective: numbers of the type where NCCL has it (no
/// NaN patterns whose copies could be argued about), a byte pattern for the others.
pub fn moving_bytes(dt: c_int, r: usize, count: usize) -> Vec<u8> {
    if MOVING_ONLY.contains(&dt) {
        return (0..count * size(dt))
            .map(|k| (k * 7 + r * 31 + dt as usize) as u8)
            .collect();
    }
    let vals: Vec<i64> = (0..count * parts(dt))
        .map(|i| {
            if dt == BOOL {
                ((i + r) % 2) as i64
            } else {
                ((i * 3 + r * 11) % 100) as i64
            }
        })
        .collect();
    encode(dt, &vals)
}

/// Runs every collective and every type on `comm` (rank `rank` of `n`) on `stream` (NULL: the
/// legacy stream) with our cached memory, checking every byte; returns how many calls it made.
pub fn suite(comm: Comm, rank: usize, n: usize, stream: *mut c_void, count: usize) -> usize {
    let mut calls = 0;
    let wait = |what: &str| ok(llaisysNvidiaCommSynchronize(comm, stream, -1), what);
    for dt in REDUCIBLE {
        let scalars = count * parts(dt);
        let bytes = count * size(dt);
        for op in ops_of(dt) {
            let mine: Vec<i64> = (0..scalars).map(|i| value(dt, op, rank, i)).collect();
            let want = encode(
                dt,
                &(0..scalars)
                    .map(|i| reduced(dt, op, n, i))
                    .collect::<Vec<_>>(),
            );
            let what = format!("dtype {dt} op {op}");
            // all-reduce, out of place and in place
            let send = DevBuf::new(bytes);
            let recv = DevBuf::new(bytes);
            send.upload(&encode(dt, &mine));
            recv.fill(0xA5);
            // SAFETY: both hold `count` elements.
            ok(
                unsafe { llaisysNvidiaAllReduce(send.ptr, recv.ptr, count, dt, op, comm, stream) },
                &what,
            );
            // SAFETY: in place.
            ok(
                unsafe { llaisysNvidiaAllReduce(send.ptr, send.ptr, count, dt, op, comm, stream) },
                &what,
            );
            wait(&what);
            assert!(
                recv.download(bytes) == want,
                "all-reduce {what}: wrong result"
            );
            assert!(
                send.download(bytes) == want,
                "in-place all-reduce {what}: wrong result"
            );
            // reduce to the last rank
            let root = n - 1;
            send.upload(&encode(dt, &mine));
            recv.fill(0x5A);
            // SAFETY: as above.
            ok(
                unsafe {
                    llaisysNvidiaReduce(
                        send.ptr,
                        recv.ptr,
                        count,
                        dt,
                        op,
                        root as c_int,
                        comm,
                        stream,
                    )
                },
                &what,
            );
            wait(&what);
            if rank == root {
                assert!(recv.download(bytes) == want, "reduce {what}: wrong result");
            }
            // reduce-scatter: rank r gets block r of the reduction of n blocks
            let big: Vec<i64> = (0..n * scalars).map(|i| value(dt, op, rank, i)).collect();
            let bsend = DevBuf::new(n * bytes);
            bsend.upload(&encode(dt, &big));
            // SAFETY: n*count in, count out.
            ok(
                unsafe {
                    llaisysNvidiaReduceScatter(bsend.ptr, recv.ptr, count, dt, op, comm, stream)
                },
                &what,
            );
            wait(&what);
            let block: Vec<i64> = (0..scalars)
                .map(|j| reduced(dt, op, n, rank * scalars + j))
                .collect();
            assert!(
                recv.download(bytes) == encode(dt, &block),
                "reduce-scatter {what}: wrong result"
            );
            calls += 4;
        }
    }
    for dt in REDUCIBLE.iter().chain(MOVING_ONLY.iter()).copied() {
        let bytes = count * size(dt);
        let what = format!("dtype {dt}");
        let mine = moving_bytes(dt, rank, count);
        let send = DevBuf::new(bytes);
        send.upload(&mine);
        // all-gather
        let all = DevBuf::new(n * bytes);
        all.fill(0x11);
        // SAFETY: count in, n*count out.
        ok(
            unsafe { llaisysNvidiaAllGather(send.ptr, all.ptr, count, dt, comm, stream) },
            &what,
        );
        wait(&what);
        let want: Vec<u8> = (0..n).flat_map(|r| moving_bytes(dt, r, count)).collect();
        assert!(
            all.download(n * bytes) == want,
            "all-gather {what}: wrong result"
        );
        // broadcast from rank 0
        let recv = DevBuf::new(bytes);
        recv.fill(0x22);
        // SAFETY: count each.
        ok(
            unsafe { llaisysNvidiaBroadcast(send.ptr, recv.ptr, count, dt, 0, comm, stream) },
            &what,
        );
        wait(&what);
        assert!(
            recv.download(bytes) == moving_bytes(dt, 0, count),
            "broadcast {what}: wrong result"
        );
        // send/recv around the ring, in a group (to oneself when n == 1)
        let to = ((rank + 1) % n) as c_int;
        let from = ((rank + n - 1) % n) as c_int;
        recv.fill(0x33);
        ok(llaisysNvidiaGroupStart(), "group start");
        // SAFETY: count each.
        ok(
            unsafe { llaisysNvidiaSend(send.ptr, count, dt, to, comm, stream) },
            &what,
        );
        // SAFETY: count each.
        ok(
            unsafe { llaisysNvidiaRecv(recv.ptr, count, dt, from, comm, stream) },
            &what,
        );
        ok(llaisysNvidiaGroupEnd(), "group end");
        wait(&what);
        assert!(
            recv.download(bytes) == moving_bytes(dt, from as usize, count),
            "send/recv {what}: wrong result"
        );
        calls += 4;
    }
    calls
}

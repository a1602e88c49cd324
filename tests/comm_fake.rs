//! Host-only tests of the communicator's rules for NCCL, dynamic build only: the children run
//! over the asynchronous stand-in cudart and a stand-in NCCL (tests/fixtures/stand_nccl.c) that
//! counts every breach of NCCL's rules (a destroyed or aborted communicator used again, by a
//! call or by the `ncclGroupEnd` that launches a group's work; two threads inside calls of one
//! communicator at once).
//! - A destroy racing a collective queued in another thread's group: the destroy is refused, or
//!   the collective is; the group never launches work of a destroyed communicator. A refused
//!   destroy has cut short no other call's wait.
//! - An abort of ours (an asynchronous NCCL error) while an open group holds work of the
//!   communicator: every later call is refused at once, NCCL's abort waits for the group's end.
//! - A thread that exits with a group open: its communicators are aborted (NCCL's stay tied to
//!   the dead thread's group) and can be destroyed.
//! - Calls on one communicator from two threads: one at a time inside NCCL; and refused while
//!   another thread's open group holds work of it.
#![cfg(feature = "dynamic")]

use llaisys_nvidia::ffi::*;
use std::os::raw::{c_int, c_void};
use std::path::PathBuf;

mod support;

use support::last_error_message;

const F32: c_int = 13;
const SUM: c_int = 0;
/// `ncclRemoteError`: a peer failed.
const NCCL_REMOTE_ERROR: c_int = 6;

/// The stand-in NCCL, built once.
fn stand_nccl() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        support::c_shared_library(
            "tests/fixtures/stand_nccl.c",
            &support::tmp_dir().join("stand-nccl"),
            "libnccl.so.2",
            &["-pthread", "-Wl,-soname,libnccl.so.2"].map(String::from),
        )
    })
    .join("libnccl.so.2")
}

/// Runs the ignored test `name` in a child over both stand-ins (NVLink multicast off, as
/// everywhere NCCL starts); asserts that it passed.
fn in_child(name: &str) -> String {
    support::child::TestChild::new(name)
        .loader_path(support::fake_cudart())
        .env("LLAISYS_NVIDIA_NCCL_LIBRARY", stand_nccl())
        .env("NCCL_NVLS_ENABLE", "0")
        .limit(std::time::Duration::from_secs(120))
        .run_passing()
}

/// A function of the stand-in NCCL, which the library loaded.
///
/// # Safety
/// `T` is the C type of `name` in tests/fixtures/stand_nccl.c.
unsafe fn stand<T: Copy>(name: &std::ffi::CStr) -> T {
    // SAFETY: RTLD_NOLOAD only finds the library the process already loaded; the symbol's type
    // is `T` (this function's contract).
    unsafe {
        let lib = libc::dlopen(c"libnccl.so.2".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!lib.is_null(), "the stand-in NCCL is loaded");
        let f = libc::dlsym(lib, name.as_ptr());
        assert!(!f.is_null(), "the stand-in NCCL has {name:?}");
        std::mem::transmute_copy(&f)
    }
}

/// The stand-in NCCL's count of breaches; loads NCCL first.
fn violations() -> c_int {
    let mut v = 0;
    // SAFETY: a valid pointer; loads the library.
    assert_eq!(
        unsafe { llaisysNvidiaNcclGetVersion(&mut v) },
        0,
        "{}",
        last_error_message()
    );
    // SAFETY: the stand-in's function of this C type.
    let count = unsafe { stand::<extern "C" fn() -> c_int>(c"stand_violations") };
    count()
}

/// A communicator of one rank.
fn one_rank() -> *mut c_void {
    let mut id = CommId { internal: [0; 128] };
    let mut c = std::ptr::null_mut();
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(
            llaisysNvidiaCommGetUniqueId(&mut id),
            0,
            "{}",
            last_error_message()
        );
        assert_eq!(
            llaisysNvidiaCommInitRank(&mut c, 1, &id, 0),
            0,
            "{}",
            last_error_message()
        );
    }
    c
}

/// Device memory for the collectives (one buffer, sent and received in place).
fn buffer() -> *mut c_void {
    // SAFETY: the table's function.
    let p = unsafe { (llaisys_nvidia::ffi::TABLE.malloc_device)(64) };
    assert!(!p.is_null());
    p
}

fn all_reduce(buf: *mut c_void, c: *mut c_void) -> c_int {
    // SAFETY: `buf` holds 16 floats of device memory; `c` is a handle (checked by the call).
    unsafe { llaisysNvidiaAllReduce(buf, buf, 16, F32, SUM, c, std::ptr::null_mut()) }
}

#[test]
#[ignore = "entry point of a child process: run by a_destroy_racing_a_grouped_collective_never_leaves_work_of_a_destroyed_communicator"]
fn child_destroy_race() {
    support::child::require_child("child_destroy_race");
    assert_eq!(violations(), 0);
    let buf = buffer() as usize;
    let start = std::time::Instant::now();
    let (mut rounds, mut both) = (0, 0);
    while start.elapsed() < std::time::Duration::from_secs(2) && violations() == 0 {
        let c = one_rank() as usize;
        let barrier = std::sync::Barrier::new(2);
        let (grouped, destroyed) = std::thread::scope(|t| {
            let a = t.spawn(|| {
                barrier.wait();
                assert_eq!(llaisysNvidiaGroupStart(), 0);
                let st = all_reduce(buf as *mut c_void, c as *mut c_void);
                assert_eq!(llaisysNvidiaGroupEnd(), 0, "{}", last_error_message());
                st
            });
            let b = t.spawn(|| {
                barrier.wait();
                for _ in 0..(rounds % 64) * 50 {
                    std::hint::spin_loop();
                }
                llaisysNvidiaCommDestroy(c as *mut c_void)
            });
            (
                a.join().expect("the grouping thread"),
                b.join().expect("the destroying thread"),
            )
        });
        both += usize::from(grouped == 0 && destroyed == 0);
        if destroyed != 0 {
            assert_eq!(
                llaisysNvidiaCommDestroy(c as *mut c_void),
                0,
                "{}",
                last_error_message()
            );
        }
        rounds += 1;
    }
    assert_eq!(violations(), 0, "after {rounds} rounds");
    println!("destroy-race child: ok, {rounds} rounds, {both} with both calls done");
}

#[test]
fn a_destroy_racing_a_grouped_collective_never_leaves_work_of_a_destroyed_communicator() {
    let text = in_child("child_destroy_race");
    assert!(text.contains("destroy-race child: ok"), "{text}");
}

#[test]
#[ignore = "entry point of a child process: run by a_destroy_refused_for_an_open_group_ends_no_other_call_s_wait"]
fn child_refused_destroy() {
    support::child::require_child("child_refused_destroy");
    assert_eq!(violations(), 0);
    // SAFETY: the stand-in's functions of these C types (NCCL loaded by `violations`).
    let (set_call_sleep, set_in_progress) = unsafe {
        (
            stand::<extern "C" fn(c_int)>(c"stand_set_call_sleep"),
            stand::<extern "C" fn(c_int)>(c"stand_set_in_progress"),
        )
    };
    // Each call that queues work sleeps inside NCCL (holding the communicator's one call at a
    // time), and one outside a group leaves the communicator in progress for 2 ms, which the
    // library waits for.
    set_call_sleep(300);
    set_in_progress(2000);
    let buf = buffer() as usize;
    let start = std::time::Instant::now();
    let (mut rounds, mut refused, mut destroyed) = (0u32, 0u32, 0u32);
    // At least 2 s, and on until both outcomes have come often enough (at most 20 s).
    let enough = |refused: u32, destroyed: u32| refused >= 20 && destroyed >= 20;
    while start.elapsed() < std::time::Duration::from_secs(2)
        || (!enough(refused, destroyed) && start.elapsed() < std::time::Duration::from_secs(20))
    {
        let c = one_rank() as usize;
        let barrier = std::sync::Barrier::new(3);
        let pause = |us: u64| {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_micros(us) {
                std::hint::spin_loop();
            }
        };
        // W: a collective outside any group, then the wait for it. A, just after: a collective
        // in a group, which waits for W's call to leave NCCL before it queues. D: the destroy,
        // at a moment that moves across W's and A's calls from round to round.
        let (waited, grouped, destroy) = std::thread::scope(|t| {
            let w = t.spawn(|| {
                barrier.wait();
                let st = all_reduce(buf as *mut c_void, c as *mut c_void);
                (st, last_error_message())
            });
            let a = t.spawn(|| {
                barrier.wait();
                pause(50);
                assert_eq!(llaisysNvidiaGroupStart(), 0);
                let st = all_reduce(buf as *mut c_void, c as *mut c_void);
                assert_eq!(llaisysNvidiaGroupEnd(), 0, "{}", last_error_message());
                st
            });
            let d = t.spawn(|| {
                barrier.wait();
                pause(20 + u64::from(rounds % 32) * 20);
                llaisysNvidiaCommDestroy(c as *mut c_void)
            });
            (
                w.join().expect("the waiting thread"),
                a.join().expect("the grouping thread"),
                d.join().expect("the destroying thread"),
            )
        });
        if destroy == 0 {
            destroyed += 1;
        } else {
            refused += 1;
            // A destroy refused (an open group held work of the communicator) left everything
            // as it was: the other calls went on to their end. (W's call is refused on its own
            // when A's group queued first: a call of another thread than the group's.)
            assert!(
                waited.0 == 0 || waited.1.contains("in an open group of another thread"),
                "round {rounds}: the destroy was refused, yet another thread's call ended with: {}",
                waited.1
            );
            assert_eq!(grouped, 0, "round {rounds}: the grouped call failed");
            assert_eq!(
                llaisysNvidiaCommDestroy(c as *mut c_void),
                0,
                "{}",
                last_error_message()
            );
        }
        rounds += 1;
    }
    set_in_progress(0);
    set_call_sleep(0);
    assert_eq!(violations(), 0, "after {rounds} rounds");
    assert!(
        enough(refused, destroyed),
        "the rounds cover both outcomes: {refused} refused, {destroyed} destroyed"
    );
    println!(
        "refused-destroy child: ok, {rounds} rounds, {refused} refused, {destroyed} destroyed"
    );
}

#[test]
fn a_destroy_refused_for_an_open_group_ends_no_other_call_s_wait() {
    let text = in_child("child_refused_destroy");
    assert!(text.contains("refused-destroy child: ok"), "{text}");
}

#[test]
#[ignore = "entry point of a child process: run by an_abort_of_ours_waits_for_the_open_group_that_holds_work_of_the_communicator"]
fn child_abort_in_group() {
    support::child::require_child("child_abort_in_group");
    assert_eq!(violations(), 0);
    // SAFETY: the stand-in's functions of these C types.
    let (set_async_error, aborts) = unsafe {
        (
            stand::<extern "C" fn(c_int)>(c"stand_set_async_error"),
            stand::<extern "C" fn() -> c_int>(c"stand_aborts"),
        )
    };
    let (buf, c) = (buffer(), one_rank());
    assert_eq!(llaisysNvidiaGroupStart(), 0);
    assert_eq!(all_reduce(buf, c), 0, "{}", last_error_message());
    assert_ne!(
        llaisysNvidiaCommAbort(c),
        0,
        "refused while the group is open"
    );
    // A peer fails: the wait sees NCCL's asynchronous error and aborts the communicator.
    set_async_error(NCCL_REMOTE_ERROR);
    assert_ne!(llaisysNvidiaCommSynchronize(c, std::ptr::null_mut(), -1), 0);
    assert_eq!(aborts(), 0, "NCCL's abort waits for the group's end");
    assert_ne!(all_reduce(buf, c), 0, "a call after the abort is refused");
    assert!(
        last_error_message().contains("was aborted"),
        "{}",
        last_error_message()
    );
    assert_eq!(llaisysNvidiaGroupEnd(), 0, "{}", last_error_message());
    assert_eq!(aborts(), 1, "aborted once the group has ended");
    assert_eq!(violations(), 0);
    set_async_error(0);
    assert_eq!(llaisysNvidiaCommDestroy(c), 0, "{}", last_error_message());
    assert_eq!(violations(), 0);
    println!("abort-in-group child: ok");
}

#[test]
fn an_abort_of_ours_waits_for_the_open_group_that_holds_work_of_the_communicator() {
    let text = in_child("child_abort_in_group");
    assert!(text.contains("abort-in-group child: ok"), "{text}");
}

#[test]
#[ignore = "entry point of a child process: run by a_communicator_grouped_by_a_thread_that_exited_is_aborted_and_can_be_destroyed"]
fn child_group_thread_exit() {
    support::child::require_child("child_group_thread_exit");
    assert_eq!(violations(), 0);
    let (buf, c) = (buffer() as usize, one_rank() as usize);
    std::thread::spawn(move || {
        assert_eq!(llaisysNvidiaGroupStart(), 0);
        assert_eq!(all_reduce(buf as *mut c_void, c as *mut c_void), 0);
        // Exits with its group open.
    })
    .join()
    .expect("the grouping thread");
    // NCCL's communicator stays tied to the dead thread's group: marked aborted, every call
    // refused; NCCL is not called on the exiting thread, and the destroy aborts it.
    assert_ne!(all_reduce(buf as *mut c_void, c as *mut c_void), 0);
    let msg = last_error_message();
    assert!(msg.contains("a thread exited with a group open"), "{msg}");
    // SAFETY: the stand-in's function of this C type.
    let aborts = unsafe { stand::<extern "C" fn() -> c_int>(c"stand_aborts") };
    assert_eq!(aborts(), 0, "not aborted on the exiting thread");
    assert_eq!(
        llaisysNvidiaCommDestroy(c as *mut c_void),
        0,
        "{}",
        last_error_message()
    );
    assert_eq!(aborts(), 1, "the destroy aborts NCCL's communicator");
    assert_eq!(violations(), 0);
    println!("group-thread-exit child: ok");
}

#[test]
fn a_communicator_grouped_by_a_thread_that_exited_is_aborted_and_can_be_destroyed() {
    let text = in_child("child_group_thread_exit");
    assert!(text.contains("group-thread-exit child: ok"), "{text}");
}

#[test]
#[ignore = "entry point of a child process: run by calls_on_one_communicator_from_two_threads_enter_nccl_one_at_a_time"]
fn child_two_threads() {
    support::child::require_child("child_two_threads");
    assert_eq!(violations(), 0);
    // SAFETY: the stand-in's function of this C type.
    let set_call_sleep = unsafe { stand::<extern "C" fn(c_int)>(c"stand_set_call_sleep") };
    set_call_sleep(500);
    let (buf, c) = (buffer() as usize, one_rank() as usize);
    std::thread::scope(|t| {
        for _ in 0..2 {
            t.spawn(|| {
                for _ in 0..40 {
                    assert_eq!(all_reduce(buf as *mut c_void, c as *mut c_void), 0);
                }
            });
        }
    });
    assert_eq!(violations(), 0);
    assert_eq!(llaisysNvidiaCommDestroy(c as *mut c_void), 0);
    // SAFETY: the stand-in's function of this C type.
    let aborts = unsafe { stand::<extern "C" fn() -> c_int>(c"stand_aborts") };
    assert_eq!(
        aborts(),
        0,
        "a destroy of a healthy communicator finalizes, not aborts"
    );
    println!("two-threads child: ok");
}

#[test]
fn calls_on_one_communicator_from_two_threads_enter_nccl_one_at_a_time() {
    let text = in_child("child_two_threads");
    assert!(text.contains("two-threads child: ok"), "{text}");
}

#[test]
#[ignore = "entry point of a child process: run by calls_of_other_threads_are_refused_until_the_group_holding_work_of_the_communicator_ends"]
fn child_group_of_another_thread() {
    support::child::require_child("child_group_of_another_thread");
    assert_eq!(violations(), 0);
    let (buf, c) = (buffer() as usize, one_rank() as usize);
    let (queued_tx, queued_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let grouping = std::thread::spawn(move || {
        assert_eq!(llaisysNvidiaGroupStart(), 0);
        assert_eq!(all_reduce(buf as *mut c_void, c as *mut c_void), 0);
        queued_tx.send(()).expect("the main thread");
        end_rx.recv().expect("the main thread");
        assert_eq!(llaisysNvidiaGroupEnd(), 0, "{}", last_error_message());
    });
    queued_rx.recv().expect("the grouping thread");
    // NCCL would add this call's work to the other thread's group.
    assert_ne!(all_reduce(buf as *mut c_void, c as *mut c_void), 0);
    let msg = last_error_message();
    assert!(msg.contains("open group of another thread"), "{msg}");
    assert_eq!(llaisysNvidiaGroupStart(), 0, "a group of this thread");
    assert_ne!(
        all_reduce(buf as *mut c_void, c as *mut c_void),
        0,
        "also in a group"
    );
    assert_eq!(llaisysNvidiaGroupEnd(), 0, "{}", last_error_message());
    end_tx.send(()).expect("the grouping thread");
    grouping.join().expect("the grouping thread");
    assert_eq!(
        all_reduce(buf as *mut c_void, c as *mut c_void),
        0,
        "{}",
        last_error_message()
    );
    assert_eq!(llaisysNvidiaCommDestroy(c as *mut c_void), 0);
    assert_eq!(violations(), 0);
    println!("group-of-another-thread child: ok");
}

#[test]
fn calls_of_other_threads_are_refused_until_the_group_holding_work_of_the_communicator_ends() {
    let text = in_child("child_group_of_another_thread");
    assert!(text.contains("group-of-another-thread child: ok"), "{text}");
}

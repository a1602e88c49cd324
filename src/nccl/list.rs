//! The collectives and point-to-point calls, each described once.
//!
//! `list!` is the one description: for each call, its C function, its field in the C table
//! (`LlaisysNvidiaCommAPI`; the first group is in the table, in field order, the second is
//! not), the NCCL function (the loader's field, its name, its bindgen `PFN_` type and the NCCL
//! release that has it), a line of documentation, and its parameters before `comm` and
//! `stream`, each with its name (as in the header) and its role. `loader`, `collectives`,
//! `ops::comm::collectives` and `capi::comm` (exports, table, the signatures a test compares
//! with the header) are all made from it.
//!
//! The roles (a role fixes the C type, the NCCL argument and the checks):
//! - `send(Count)`, `send(Ranks)`, `send(OnRoot)`: `const void *sendbuff` holding `count`
//!   elements, `nranks * count` elements, or `count` elements read on the root only (NULL
//!   allowed elsewhere);
//! - `recv(...)`: `void *recvbuff`, as above, written;
//! - `count`: `size_t`, in elements of `dtype`; `dtype`: a `llaisysDataType_t` as `int`;
//! - `op`: a reduction (`LLAISYS_NVIDIA_REDUCE_*`) as `int`: the call reduces;
//! - `root`, `peer`: a rank as `int`.

/// Calls `$then!` with the description of every collective (see the module docs): first those
/// in the C table, in its field order, then the others.
macro_rules! list {
    ($then:ident) => {
        $then! {
            table: [
                AllReduce(
                    llaisysNvidiaAllReduce, allreduce,
                    all_reduce = "ncclAllReduce" PFN_ncclAllReduce since "1.0",
                    "All-reduce of `count` elements (in place when sendbuff == recvbuff)."
                ) (sendbuff: send(Count), recvbuff: recv(Count), count: count, dtype: dtype, op: op),
                AllGather(
                    llaisysNvidiaAllGather, allgather,
                    all_gather = "ncclAllGather" PFN_ncclAllGather since "2.0",
                    "All-gather: recvbuff gets `sendcount` elements from every rank, in rank order."
                ) (sendbuff: send(Count), recvbuff: recv(Ranks), sendcount: count, dtype: dtype),
                ReduceScatter(
                    llaisysNvidiaReduceScatter, reduce_scatter,
                    reduce_scatter = "ncclReduceScatter" PFN_ncclReduceScatter since "2.0",
                    "Reduce-scatter: rank r gets block r (`recvcount` elements) of the reduction."
                ) (sendbuff: send(Ranks), recvbuff: recv(Count), recvcount: count, dtype: dtype, op: op),
                Broadcast(
                    llaisysNvidiaBroadcast, broadcast,
                    broadcast = "ncclBroadcast" PFN_ncclBroadcast since "2.2",
                    "Broadcast of `count` elements from `root` (sendbuff is read on the root only)."
                ) (sendbuff: send(OnRoot), recvbuff: recv(Count), count: count, dtype: dtype, root: root),
                Send(
                    llaisysNvidiaSend, send,
                    send = "ncclSend" PFN_ncclSend since "2.7",
                    "Sends `count` elements to `peer` (to oneself only in a group with the recv)."
                ) (sendbuff: send(Count), count: count, dtype: dtype, peer: peer),
                Recv(
                    llaisysNvidiaRecv, recv,
                    recv = "ncclRecv" PFN_ncclRecv since "2.7",
                    "Receives `count` elements from `peer`."
                ) (recvbuff: recv(Count), count: count, dtype: dtype, peer: peer),
            ]
            other: [
                Reduce(
                    llaisysNvidiaReduce, _,
                    reduce = "ncclReduce" PFN_ncclReduce since "1.0",
                    "Reduce of `count` elements to `root` (recvbuff is written on the root only)."
                ) (sendbuff: send(Count), recvbuff: recv(OnRoot), count: count, dtype: dtype, op: op, root: root),
            ]
        }
    };
}
pub(crate) use list;

/// A parameter's type by its role: `c_param!(rust ROLE)` is the Rust type, `c_param!(c ROLE)`
/// the C type as the header spells it.
macro_rules! c_param {
    ($pick:ident send) => { c_param!(@$pick (*const ::std::os::raw::c_void) "const void *") };
    ($pick:ident recv) => { c_param!(@$pick (*mut ::std::os::raw::c_void) "void *") };
    ($pick:ident count) => { c_param!(@$pick (usize) "size_t") };
    ($pick:ident dtype) => { c_param!(@$pick (::std::os::raw::c_int) "int") };
    ($pick:ident op) => { c_param!(@$pick (::std::os::raw::c_int) "int") };
    ($pick:ident root) => { c_param!(@$pick (::std::os::raw::c_int) "int") };
    ($pick:ident peer) => { c_param!(@$pick (::std::os::raw::c_int) "int") };
    (@rust ($($rust:tt)*) $c:literal) => { $($rust)* };
    (@c ($($rust:tt)*) $c:literal) => { $c };
}
pub(crate) use c_param;

//! `LlaisysNvidiaCommAPI`, the llaisys-style table of the communicator (the common subset of
//! its C functions); the field order is the ABI. The collectives' fields come from the list
//! (`nccl::list`), in its table order.

use super::lifecycle::*;
use super::{collectives::*, Comm, CommId, Stream};
use crate::nccl::list::{c_param, list};
use std::os::raw::c_int;

macro_rules! comm_table {
    (table: [$(
        $kind:ident($c:ident, $field:ident, $nfield:ident = $nname:literal $pfn:ident since $since:literal, $doc:literal)
        ($($param:ident: $role:ident $(($extent:ident))?),*),
    )*] other: [$($o:tt)*]) => {
        /// The llaisys-style table of the common subset (`LlaisysNvidiaCommAPI`); field order is
        /// the ABI.
        #[repr(C)]
        pub struct LlaisysNvidiaCommAPI {
            /// `llaisysNvidiaCommGetUniqueId`
            pub get_unique_id: unsafe extern "C" fn(*mut CommId) -> c_int,
            /// `llaisysNvidiaCommInitRank`
            pub init_rank: unsafe extern "C" fn(*mut Comm, c_int, *const CommId, c_int) -> c_int,
            /// `llaisysNvidiaCommInitAll`
            pub init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int,
            /// `llaisysNvidiaCommDestroy`
            pub destroy: extern "C" fn(Comm) -> c_int,
            /// `llaisysNvidiaCommAbort`
            pub abort: extern "C" fn(Comm) -> c_int,
            /// `llaisysNvidiaCommRank`
            pub get_rank: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
            /// `llaisysNvidiaCommSize`
            pub get_size: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
            $(
                #[doc = concat!("`", stringify!($c), "`")]
                pub $field: unsafe extern "C" fn($(c_param!(rust $role),)* Comm, Stream) -> c_int,
            )*
            /// `llaisysNvidiaGroupStart`
            pub group_start: extern "C" fn() -> c_int,
            /// `llaisysNvidiaGroupEnd`
            pub group_end: extern "C" fn() -> c_int,
            /// `llaisysNvidiaCommSynchronize`
            pub synchronize: extern "C" fn(Comm, Stream, i64) -> c_int,
        }

        /// The one communicator table.
        pub static COMM_TABLE: LlaisysNvidiaCommAPI = LlaisysNvidiaCommAPI {
            get_unique_id: llaisysNvidiaCommGetUniqueId,
            init_rank: llaisysNvidiaCommInitRank,
            init_all: llaisysNvidiaCommInitAll,
            destroy: llaisysNvidiaCommDestroy,
            abort: llaisysNvidiaCommAbort,
            get_rank: llaisysNvidiaCommRank,
            get_size: llaisysNvidiaCommSize,
            $($field: $c,)*
            group_start: llaisysNvidiaGroupStart,
            group_end: llaisysNvidiaGroupEnd,
            synchronize: llaisysNvidiaCommSynchronize,
        };
    };
}

list!(comm_table);

/// Returns the communicator table; never NULL, never fails, loads nothing.
#[no_mangle]
pub extern "C" fn llaisysNvidiaGetCommAPI() -> *const LlaisysNvidiaCommAPI {
    &COMM_TABLE
}

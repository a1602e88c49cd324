//! The collectives and point-to-point calls as exported C functions, one per entry of the list
//! (`nccl::list`): each takes its parameters in the list's order, then `comm` and `stream`, and
//! hands them to `ops::comm::collective` by their roles. [`COLLECTIVES`] gives each one's C
//! signature, for the test that holds the hand-written header to the list.

use super::{Comm, Stream};
use crate::capi::api::status_of as status;
use crate::nccl::collectives::Collective;
use crate::nccl::list::{c_param, list};
use crate::ops::comm::{self as ops, Args};
use std::os::raw::c_int;

/// A collective's C function as the header must declare it.
#[derive(Clone, Copy, Debug)]
pub struct CollectiveAbi {
    /// The function (`llaisysNvidiaAllReduce`).
    pub function: &'static str,
    /// Its field in `LlaisysNvidiaCommAPI`, when it has one.
    pub table_field: Option<&'static str>,
    /// Its parameters before `comm` and `stream`: (name, C type as the header spells it).
    pub params: &'static [(&'static str, &'static str)],
}

/// Stores a parameter in the `Args` field of its role (a root or a peer is the rank).
macro_rules! set_arg {
    ($args:ident, root, $v:ident) => {
        $args.rank = $v
    };
    ($args:ident, peer, $v:ident) => {
        $args.rank = $v
    };
    ($args:ident, $role:ident, $v:ident) => {
        $args.$role = $v
    };
}

/// The table field of an entry, `_` for none.
macro_rules! field_name {
    (_) => {
        None
    };
    ($field:ident) => {
        Some(stringify!($field))
    };
}

macro_rules! c_functions {
    (table: [$($t:tt)*] other: [$($o:tt)*]) => {
        c_functions! { @each $($t)* $($o)* }
    };
    (@each $(
        $kind:ident($c:ident, $field:tt, $nfield:ident = $nname:literal $pfn:ident since $since:literal, $doc:literal)
        ($($param:ident: $role:ident $(($extent:ident))?),*),
    )*) => {
        $(
            #[doc = $doc]
            ///
            /// # Safety
            /// The buffers are device-accessible for the sizes the call names until the work
            /// has run on `stream` (the header's contract; our own blocks are checked).
            #[no_mangle]
            pub unsafe extern "C" fn $c($($param: c_param!(rust $role),)* comm: Comm, stream: Stream) -> c_int {
                status(stringify!($c), || {
                    let mut args = Args::default();
                    $(set_arg!(args, $role, $param);)*
                    // SAFETY: as this function's `# Safety` section requires.
                    unsafe { ops::collective(Collective::$kind, args, comm, stream) }
                })
            }
        )*

        /// Every collective's C function, in the list's order.
        pub const COLLECTIVES: &[CollectiveAbi] = &[$(
            CollectiveAbi {
                function: stringify!($c),
                table_field: field_name!($field),
                params: &[$((stringify!($param), c_param!(c $role))),*],
            },
        )*];
    };
}

list!(c_functions);

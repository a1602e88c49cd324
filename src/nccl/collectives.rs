//! What the collectives are, from the one list (`list`): [`Collective`], each call's
//! [`Shape`] (what its buffers hold, whether it reduces, which rank it names, from its
//! parameters' roles) and [`call`], the one thin `unsafe fn` that calls NCCL for any of them
//! with its arguments in the order its roles give.

use super::api::{check, Progress};
use super::error::Result;
use super::list::list;
use super::loader::Library;
use super::sys;
use std::os::raw::{c_int, c_void};

/// What a buffer of a call holds, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// The call has no such buffer.
    Absent,
    /// `count` elements.
    Count,
    /// `nranks * count` elements.
    Ranks,
    /// `count` elements on the root only (not touched elsewhere, may be NULL there).
    OnRoot,
}

/// Which rank a call names besides its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// None.
    Absent,
    /// The root of a rooted collective.
    Root,
    /// The other side of a send or recv.
    Peer,
}

/// One role of a parameter (see `list`).
#[derive(Clone, Copy, Debug)]
pub enum Part {
    /// A `send*` role.
    Send(Extent),
    /// A `recv*` role.
    Recv(Extent),
    /// `count`.
    Count,
    /// `dtype`.
    Dtype,
    /// `op`.
    Op,
    /// `root`.
    Root,
    /// `peer`.
    Peer,
}

/// The part a role stands for.
#[rustfmt::skip]
macro_rules! part {
    (send($extent:ident)) => { Part::Send(Extent::$extent) };
    (recv($extent:ident)) => { Part::Recv(Extent::$extent) };
    (count) => { Part::Count };
    (dtype) => { Part::Dtype };
    (op) => { Part::Op };
    (root) => { Part::Root };
    (peer) => { Part::Peer };
}

/// What a call moves and names, from its parameters' roles, with the parameters' names for
/// messages.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The NCCL function (`ncclAllReduce`).
    pub nccl: &'static str,
    /// The send buffer and its name.
    pub send: (Extent, &'static str),
    /// The receive buffer and its name.
    pub recv: (Extent, &'static str),
    /// The name of the count (`count`, `sendcount`, `recvcount`).
    pub count: &'static str,
    /// True for reductions (the call takes an `op`).
    pub reduces: bool,
    /// The rank the call names.
    pub rank: Rank,
}

impl Shape {
    const fn new(nccl: &'static str) -> Shape {
        Shape {
            nccl,
            send: (Extent::Absent, ""),
            recv: (Extent::Absent, ""),
            count: "",
            reduces: false,
            rank: Rank::Absent,
        }
    }

    const fn with(mut self, part: Part, name: &'static str) -> Shape {
        match part {
            Part::Send(e) => self.send = (e, name),
            Part::Recv(e) => self.recv = (e, name),
            Part::Count => self.count = name,
            Part::Dtype => {}
            Part::Op => self.reduces = true,
            Part::Root => self.rank = Rank::Root,
            Part::Peer => self.rank = Rank::Peer,
        }
        self
    }
}

/// The arguments of a call in NCCL's types (what a role's parameter becomes); fields a call
/// has no role for are not read.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// `sendbuff`.
    pub send: *const c_void,
    /// `recvbuff`.
    pub recv: *mut c_void,
    /// The count NCCL gets (types NCCL lacks move as several elements of another).
    pub count: usize,
    /// NCCL's element type.
    pub datatype: sys::ncclDataType_t,
    /// NCCL's reduction.
    pub op: sys::ncclRedOp_t,
    /// The root or the peer.
    pub rank: c_int,
}

/// The argument NCCL gets for a role.
#[rustfmt::skip]
macro_rules! nccl_arg {
    ($call:ident, dtype) => { $call.datatype };
    ($call:ident, root) => { $call.rank };
    ($call:ident, peer) => { $call.rank };
    ($call:ident, $field:ident) => { $call.$field };
}

macro_rules! collective_enum {
    (table: [$($t:tt)*] other: [$($o:tt)*]) => {
        collective_enum! { @each $($t)* $($o)* }
    };
    (@each $(
        $kind:ident($c:ident, $field:tt, $nfield:ident = $nname:literal $pfn:ident since $since:literal, $doc:literal)
        ($($param:ident: $role:ident $(($extent:ident))?),*),
    )*) => {
        /// One collective or point-to-point call.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Collective {
            $(#[doc = $doc] $kind,)*
        }

        impl Collective {
            /// What the call moves and names.
            pub const fn shape(self) -> Shape {
                match self {
                    $(Collective::$kind => Shape::new($nname)$(.with(part!($role $(($extent))?), stringify!($param)))*,)*
                }
            }
        }

        /// Calls NCCL's function for `which` with `call`'s arguments; a function the loaded
        /// NCCL lacks is [`super::Error::Unavailable`] naming it and the release that has it.
        ///
        /// # Safety
        /// The buffers of `call` are device-accessible for the sizes `which`'s shape gives them
        /// until the work has run on `stream`; `comm` is live (not destroyed, not aborted, no
        /// other call in it); `stream` is NULL or a live stream of the communicator's device.
        pub unsafe fn call(
            lib: &Library,
            which: Collective,
            call: &Call,
            comm: sys::ncclComm_t,
            stream: sys::cudaStream_t,
        ) -> Result<Progress> {
            match which {
                $(Collective::$kind => {
                    let f = lib.fns.$nfield.ok_or_else(|| lib.missing($nname, $since))?;
                    // SAFETY: the buffers of `call` cover the sizes of this call's shape, `comm`
                    // is live and `stream` NULL or a live stream of its device (this
                    // function's contract); the arguments are in `f`'s order and types.
                    check(lib, $nname, unsafe { f($(nccl_arg!(call, $role),)* comm, stream) })
                })*
            }
        }
    };
}

list!(collective_enum);

//! Element types and reductions: llaisys's `llaisysDataType_t` values and the reductions, how
//! each type goes to NCCL (its own type, or bytes, or pairs of floats for complex numbers), and
//! what the loaded NCCL cannot do.

use crate::nccl::loader::{version_code, version_text, Library};
use crate::nccl::{sys, Error, Result};
use std::os::raw::c_int;

/// llaisys's `llaisysDataType_t` values (include/llaisys.h), restated.
pub mod dtype {
    #![allow(missing_docs)]
    use std::os::raw::c_int;
    pub const INVALID: c_int = 0;
    pub const BYTE: c_int = 1;
    pub const BOOL: c_int = 2;
    pub const I8: c_int = 3;
    pub const I16: c_int = 4;
    pub const I32: c_int = 5;
    pub const I64: c_int = 6;
    pub const U8: c_int = 7;
    pub const U16: c_int = 8;
    pub const U32: c_int = 9;
    pub const U64: c_int = 10;
    pub const F8: c_int = 11;
    pub const F16: c_int = 12;
    pub const F32: c_int = 13;
    pub const F64: c_int = 14;
    pub const C16: c_int = 15;
    pub const C32: c_int = 16;
    pub const C64: c_int = 17;
    pub const C128: c_int = 18;
    pub const BF16: c_int = 19;
}

/// The reductions (`LLAISYS_NVIDIA_REDUCE_*`, equal to NCCL's values).
pub mod op {
    #![allow(missing_docs)]
    use std::os::raw::c_int;
    pub const SUM: c_int = 0;
    pub const PROD: c_int = 1;
    pub const MAX: c_int = 2;
    pub const MIN: c_int = 3;
    pub const AVG: c_int = 4;
}

/// ncclBfloat16 and ncclAvg came with NCCL 2.10.
const V2_10: c_int = version_code(2, 10, 0);

/// The names and sizes of llaisys's types 1 (BYTE) to 19 (BF16), in `dtype`'s order.
const NAMES: &str = "BYTE BOOL I8 I16 I32 I64 U8 U16 U32 U64 F8 F16 F32 F64 C16 C32 C64 C128 BF16";
const SIZES: [usize; 19] = [1, 1, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 16, 2];

/// (name, bytes) of a llaisys type.
pub(super) fn describe(dt: c_int) -> Option<(&'static str, usize)> {
    let i = usize::try_from(dt).ok()?.checked_sub(1)?;
    Some((NAMES.split(' ').nth(i)?, *SIZES.get(i)?))
}

/// NCCL's own type of the same meaning, where it has one.
pub(super) fn native(dt: c_int) -> Option<sys::ncclDataType_t> {
    use dtype::*;
    use sys::ncclDataType_t as N;
    Some(match dt {
        BYTE | U8 => N::ncclUint8,
        I8 => N::ncclInt8,
        I32 => N::ncclInt32,
        U32 => N::ncclUint32,
        I64 => N::ncclInt64,
        U64 => N::ncclUint64,
        F16 => N::ncclFloat16,
        F32 => N::ncclFloat32,
        F64 => N::ncclFloat64,
        BF16 => N::ncclBfloat16,
        _ => return None,
    })
}

/// How a llaisys type goes to NCCL: as `per` elements of `nccl` each, `size` bytes in all.
#[derive(Clone, Copy, Debug)]
pub(super) struct Element {
    pub(super) nccl: sys::ncclDataType_t,
    pub(super) per: usize,
    pub(super) size: usize,
    pub(super) name: &'static str,
}

pub(super) fn unknown_dtype(dt: c_int) -> Error {
    Error::invalid(format!(
        "dtype={dt} is not a llaisysDataType_t (1 BYTE .. 19 BF16; 0 is LLAISYS_DTYPE_INVALID)"
    ))
}

/// For operations that move data unchanged (all-gather, broadcast, send, recv): every type with
/// a size; those NCCL lacks (I16, U16, F8, BOOL, complex) move as bytes.
pub(super) fn moving(dt: c_int) -> Result<Element> {
    let (name, size) = describe(dt).ok_or_else(|| unknown_dtype(dt))?;
    let (nccl, per) = native(dt).map_or((sys::ncclDataType_t::ncclUint8, size), |n| (n, 1));
    Ok(Element {
        nccl,
        per,
        size,
        name,
    })
}

pub(super) fn op_name(o: c_int) -> Option<&'static str> {
    let names = ["SUM", "PROD", "MAX", "MIN", "AVG"];
    names.get(usize::try_from(o).ok()?).copied()
}

/// For reductions: the types NCCL reduces; BOOL with MAX (or) and MIN (and) as bytes; complex
/// C32/C64/C128 with SUM and AVG as pairs of F16/F32/F64. The rest is refused, saying why.
pub(super) fn reducing(dt: c_int, o: c_int) -> Result<(Element, sys::ncclRedOp_t)> {
    let (name, size) = describe(dt).ok_or_else(|| unknown_dtype(dt))?;
    let oname = op_name(o).ok_or_else(|| {
        Error::invalid(format!(
            "op={o} is not a reduction (0 SUM, 1 PROD, 2 MAX, 3 MIN, 4 AVG)"
        ))
    })?;
    let red = sys::ncclRedOp_t(o as _);
    use dtype::*;
    use sys::ncclDataType_t as N;
    let refuse = |why: &str| {
        Err(Error::invalid(format!(
            "dtype={dt} ({name}) cannot be reduced with {oname}: {why}"
        )))
    };
    let elem = |nccl, per| Element {
        nccl,
        per,
        size,
        name,
    };
    match dt {
        BOOL if o == op::MAX || o == op::MIN => Ok((elem(N::ncclUint8, 1), red)),
        BOOL => refuse("booleans reduce only with MAX (or) and MIN (and)"),
        C32 | C64 | C128 if o == op::SUM || o == op::AVG => {
            let part = match dt {
                C32 => N::ncclFloat16,
                C64 => N::ncclFloat32,
                _ => N::ncclFloat64,
            };
            Ok((elem(part, 2), red))
        }
        C32 | C64 | C128 => refuse("complex numbers reduce only with SUM and AVG"),
        C16 => refuse("NCCL has no type for the parts of a 2-byte complex"),
        I16 | U16 => refuse("NCCL has no 16-bit integer type"),
        F8 => refuse(
            "llaisys's F8 does not say which 8-bit float it is (NCCL reduces e4m3 and e5m2 \
             differently)",
        ),
        _ => Ok((elem(native(dt).ok_or_else(|| unknown_dtype(dt))?, 1), red)),
    }
}

/// Refuses what the loaded NCCL cannot do (bf16 and avg came with 2.10).
pub(super) fn check_features(
    lib: &Library,
    e: &Element,
    red: Option<sys::ncclRedOp_t>,
) -> Result<()> {
    if lib.version >= V2_10 {
        return Ok(());
    }
    let bf16 = e.nccl == sys::ncclDataType_t::ncclBfloat16;
    let avg = red == Some(sys::ncclRedOp_t::ncclAvg);
    if bf16 || avg {
        return Err(Error::Unavailable {
            detail: format!(
                "{} is NCCL {}, which has no {}; NCCL 2.10 and later have it",
                lib.path,
                version_text(lib.version),
                if bf16 { "ncclBfloat16" } else { "ncclAvg" }
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_and_reduction_has_its_name() {
        assert_eq!(describe(dtype::BYTE), Some(("BYTE", 1)));
        assert_eq!(describe(dtype::C128), Some(("C128", 16)));
        assert_eq!(describe(dtype::BF16), Some(("BF16", 2)));
        assert_eq!(
            [describe(dtype::INVALID), describe(20), describe(-1)],
            [None; 3]
        );
        assert_eq!(
            [op_name(op::AVG), op_name(5), op_name(-1)],
            [Some("AVG"), None, None]
        );
    }
}

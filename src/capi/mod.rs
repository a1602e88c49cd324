//! The C ABI: the llaisys runtime table (`table`), the error policy behind it (`policy`), the
//! checks of hostile input (`validate`), and the exported symbols (`exports`).

pub mod exports;
pub mod policy;
pub mod table;
pub mod validate;

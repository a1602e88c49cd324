//! The C ABI: the llaisys runtime table (`table`), the error policy behind it (`policy`), and the
//! exported symbols (`exports`).

pub mod exports;
pub mod policy;
pub mod table;

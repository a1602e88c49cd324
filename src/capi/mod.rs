//! The C ABI: the llaisys runtime table (`table`), the error policy behind it (`policy`), the
//! checks of hostile input (`validate`), the exported symbols of the table and errors
//! (`exports`), and the status-returning API beyond the table (`api`).

pub mod api;
pub mod comm;
pub mod exports;
pub mod policy;
pub mod table;
pub mod validate;

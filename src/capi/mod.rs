//! The C faces, which differ only in error policy: the llaisys runtime table (`table`, errors
//! go to the handler), the status-returning API (`api`, errors come back as a status), the
//! exported error getters and statistics (`exports`), and the error policy itself (`policy`:
//! the last error, the handler, the panic boundary). Every body is in `ops`.

pub mod api;
pub mod comm;
pub mod exports;
pub mod policy;
pub mod table;

//! Helpers every layer may use: `sync` (the one lock helper), `env` (switches and numbers from
//! environment variables), `hash` (the caches' address hasher).

pub(crate) mod env;
pub(crate) mod hash;
pub(crate) mod sync;

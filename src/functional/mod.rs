//! The tensor API: per-rank functions over `burn::Tensor`, each with a `try_` twin.

pub(crate) mod conv;
mod lift;
mod memory;
mod pad;
mod pool;

pub use conv::*;
pub use pool::*;

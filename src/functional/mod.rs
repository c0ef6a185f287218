//! The tensor API: per-rank functions over `burn::Tensor`, each with a `try_` twin.

mod conv;
mod lift;
mod pool;

pub use conv::*;
pub use pool::*;

//! The tensor API: per-rank functions over `burn::Tensor`, each with a `try_` twin.

mod conv;
mod lift;

pub use conv::*;

//! The tensor API: per-rank functions over `burn::Tensor`, each with a `try_` twin.

mod batch_norm;
pub(crate) mod conv;
pub(crate) mod conv_batch_norm;
mod device;
mod lift;
mod pad;
mod pool;
mod pool_fns;
mod reshape;

pub use batch_norm::*;
pub use conv::*;
pub use conv_batch_norm::*;
pub use pool::*;
pub use pool_fns::*;

pub(crate) use device::check_parameter_memory;

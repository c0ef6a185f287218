//! Pure integer code that every layer shares: option types, output shapes and validation.
//! No tensors and no compute here, so the CPU path, future GPU kernels, autodiff and tests
//! all agree on one formula for each shape.

mod conv;
mod error;
mod pool;
pub mod shapes;
mod window;

pub use conv::*;
pub use error::*;
pub use pool::*;
pub use window::*;

//! Pure integer code that every layer shares: option types, output shapes and validation.
//! No tensors and no compute here, so the CPU path, future GPU kernels, autodiff and tests
//! all agree on one formula for each shape.

mod conv;
mod dtype;
mod error;
mod limits;
mod pool;
pub mod shapes;
mod window;

pub use conv::*;
pub use dtype::*;
pub use error::*;
pub use limits::*;
pub use pool::*;
pub use window::*;

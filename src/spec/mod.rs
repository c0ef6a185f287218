//! Pure integer code that every layer shares: option types, output shapes and validation.
//! No tensors and no compute here, so the CPU path, future GPU kernels, autodiff and tests
//! all agree on one formula for each shape.

mod activation;
mod batch_norm;
mod bounds;
mod check;
mod conv;
mod dtype;
mod error;
mod geometry;
mod limits;
mod pool;
pub mod shapes;
mod spans;
mod window;

pub use activation::*;
pub use batch_norm::*;
pub use bounds::*;
pub use check::*;
pub use conv::*;
pub use dtype::*;
pub use error::*;
pub use geometry::*;
pub use limits::*;
pub use pool::*;
pub use spans::*;
pub use window::*;

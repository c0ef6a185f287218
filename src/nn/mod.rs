//! Drop-in `Module`s for every operator, in the style of `burn::nn`.
//!
//! Burn 0.22 routes `burn::nn` modules straight to its built-in ops, so this crate brings its own
//! modules. Where burn-nn has the module, ours has the same config fields, defaults,
//! initializers and parameter names and shapes (`weight`, `bias`), so a record saved from one
//! loads into the other, and `From` converts between them. On top of burn-nn: conv
//! `padding_mode`, pooling `forward_with_indices`, `divisor_override`, 3D pools, and the
//! adaptive-max, fractional, LP and unpool modules. Every `forward` also accepts an unbatched
//! input, as PyTorch's modules do.
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use burn::nn::PaddingConfig2d;
//! use burn_convpool::PaddingMode;
//! use burn_convpool::nn::{Conv2dConfig, MaxPool2dConfig};
//!
//! let device = Device::flex();
//! let conv = Conv2dConfig::new([3, 8], [3, 3])
//!     .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
//!     .with_padding_mode(PaddingMode::Reflect)
//!     .init(&device);
//! let pool = MaxPool2dConfig::new([2, 2]).init();
//! let x = Tensor::<4>::ones([2, 3, 16, 16], &device);
//! let (out, indices) = pool.forward_with_indices(conv.forward(x));
//! assert_eq!(out.dims(), [2, 8, 8, 8]);
//! assert_eq!(indices.dims(), [2, 8, 8, 8]);
//! ```

mod adaptive;
mod conv;
mod conv_transpose;
mod convert;
mod dims;
mod fractional;
mod lp_pool;
mod max_unpool;
mod pool;
mod validate;

pub use adaptive::*;
pub use conv::*;
pub use conv_transpose::*;
pub use dims::{Dims, PaddingConfigNd};
pub use fractional::*;
pub use lp_pool::*;
pub use max_unpool::*;
pub use pool::*;

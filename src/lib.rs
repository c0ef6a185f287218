//! PyTorch's convolution and pooling operators for Burn 0.22, with exact PyTorch semantics,
//! fast CPU kernels (im2col + GEMM, rayon) and hand-written autodiff.
//!
//! Call the functions at the crate root on any `burn::Tensor`; they work on every device this
//! crate implements (Flex, NdArray, and every CubeCL runtime through Burn's `Cube`) with or without
//! autodiff:
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use burn_convpool::{ConvNdOptions, conv2d};
//!
//! let device = Device::flex().autodiff();
//! let x = Tensor::<4>::ones([2, 3, 8, 8], &device).require_grad();
//! let weight = Tensor::<4>::ones([4, 3, 3, 3], &device).require_grad();
//! let out = conv2d(x.clone(), weight.clone(), None, ConvNdOptions::default().with_padding([1, 1]));
//! let grads = out.sum().backward();
//! assert_eq!(weight.grad(&grads).unwrap().dims(), [4, 3, 3, 3]);
//! ```
//!
//! For models, [`nn`] has drop-in `Module`s for every operator (burn-nn's configs, parameter
//! names and records, plus `padding_mode`, indices and the modules burn-nn lacks).
//!
//! Layers: [`spec`] (options, shapes, validation), [`backend`] (the extension trait with one
//! primitive per forward and gradient), `cpu` (Flex, NdArray), `cube` (every CubeCL runtime, kernels
//! in `burn-convpool-kernels`), `autodiff`, the functional API, and [`nn`].

#![warn(missing_docs)]

#[cfg(feature = "autodiff")]
mod autodiff;
pub mod backend;
mod conv_routing;
mod cpu;
#[cfg(feature = "cube")]
mod cube;
pub(crate) mod functional;
pub mod spec;

pub use backend::ConvPoolBackend;
pub use functional::*;
pub use spec::{
    AvgPoolNdOptions, ConvNdOptions, ConvTransposeNdOptions, FractionalMaxPoolOptions,
    FractionalOutput, LpPoolOptions, MAX_SIZE, MaxPoolOptions, MaxUnpoolOptions, Padding,
    PaddingMode, SpecError, SpecErrorKind,
};
pub mod nn;

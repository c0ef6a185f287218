//! PyTorch's convolution and pooling operators for Burn 0.22, with exact PyTorch semantics,
//! fast CPU kernels (seven convolution algorithms, rayon) and hand-written autodiff.
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
//! # Errors
//!
//! Every op has a `try_` twin that returns a [`SpecError`]: the op's name and a
//! [`SpecErrorKind`] holding the offending values. The plain function panics with the same
//! message (`conv2d: stride must be non-zero, got [0, 1]`). Each `SpecErrorKind` variant
//! documents its rule; in short:
//!
//! - **Options** follow PyTorch's rules exactly: non-zero kernel, stride, dilation and groups;
//!   groups dividing the channels; the kernel fitting the padded input; pool padding at most
//!   half the kernel; ceil mode's window rule; a reachable `output_size`; `output_padding`
//!   below `max(stride, dilation)`. One rule is stricter than PyTorch: a dilated max-pool
//!   window that holds only padding is [`SpecErrorKind::WindowInPadding`] (PyTorch returns
//!   -inf with an index outside the plane).
//! - **Empty tensors** behave as in PyTorch: an empty batch gives an empty output and empty
//!   (input) or zero (weight, bias) gradients. A pool input with no channels or an empty
//!   spatial dim, or a convolution input with an empty spatial dim, is
//!   [`SpecErrorKind::EmptyInput`]; a weight with no output channels is
//!   [`SpecErrorKind::Zero`].
//! - **Sizes** are computed exactly (128-bit where needed) and limited to [`MAX_SIZE`]
//!   (PyTorch's int64 limit), so nothing wraps: a huge stride gives its one exact window, a
//!   huge kernel or padding [`SpecErrorKind::TooLarge`]. An output must fit `MAX_SIZE` bytes
//!   at 8 bytes an element ([`SpecErrorKind::OutputTooLarge`]).
//! - **Memory**: an output the device cannot allocate in one piece is
//!   [`SpecErrorKind::OutOfMemory`] (on a CPU device, outputs of 1 GiB or more are reserved
//!   untouched first; on a CubeCL device the runtime's largest allocation bounds them), and so
//!   is the padded copy a `padding_mode` other than zeros makes
//!   ([`SpecErrorKind::PaddedInputTooLarge`]). A machine that runs out of memory
//!   mid-computation still aborts as Rust's allocator does.
//! - **Dtypes** follow PyTorch: the input is F64, F32, F16 or BF16 ([`SpecErrorKind::Dtype`]);
//!   weight, bias and fractional samples share its dtype ([`SpecErrorKind::DtypeMismatch`]).
//!   Max-pool indices must fit the device's int dtype ([`SpecErrorKind::IndexDtype`]). A
//!   CubeCL device computes in the float dtypes its runtime reports
//!   ([`SpecErrorKind::DeviceDtype`]).
//! - **Device limits**: the CubeCL kernels keep sizes, tables and parameters in 32 bits; a
//!   larger value the computation reads is [`SpecErrorKind::DeviceLimit`] there, where the CPU
//!   computes it as PyTorch does.
//! - **Data**: `max_unpool*` indices are range-checked before any write
//!   ([`SpecErrorKind::IndexOutOfRange`]); given fractional samples must lie in `[0, 1]`
//!   ([`SpecErrorKind::FractionalSample`]). Each such check is one device-to-host read.
//! - **Modules** panic at `init` on a zero kernel size, stride or dilation, and on a weight or
//!   bias the device cannot allocate ([`SpecErrorKind::ParameterTooLarge`]).
//!
//! The primitives of [`ConvPoolBackend`] check none of this: call the functions here or the
//! [`nn`] modules.
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
pub use cpu::choice as cpu_kernels;
#[cfg(feature = "cube")]
pub use cube::choice as cube_kernels;
#[cfg(feature = "cube")]
pub use cube::launches as cube_launches;
pub use functional::*;
pub use spec::{
    Activation, AvgPoolNdOptions, BatchNormActOptions, ConvNdOptions, ConvTransposeNdOptions,
    FractionalMaxPoolOptions, FractionalOutput, LpPoolOptions, MAX_SIZE, MaxPoolOptions,
    MaxUnpoolOptions, Padding, PaddingMode, SpecError, SpecErrorKind,
};
pub mod nn;

//! CPU implementation of the extension trait: shared slice kernels plus one thin adapter per
//! backend ([`host::HostTensors`]).

mod conv;
mod depthwise;
mod element;
#[cfg(feature = "flex")]
mod flex;
mod gemm;
pub(crate) mod host;
mod im2col;
#[cfg(feature = "ndarray")]
mod ndarray;
pub(crate) mod ops;
mod pool;
pub(crate) mod pool_ops;
mod tap_masks;
mod winograd;

//! CPU implementation of the extension trait: shared slice kernels (`kernels/`) plus one thin
//! adapter per backend ([`host::HostTensors`]): `conv_ops.rs`, `norm_ops.rs` and `pool_ops.rs` read a
//! backend's tensors as slices and run the kernels, `backend.rs` forwards the trait to them,
//! `flex.rs` and `ndarray.rs` are the two backends' adapters.

mod backend;
pub mod choice;
pub(crate) mod conv_ops;
#[cfg(feature = "flex")]
mod flex;
pub(crate) mod host;
mod kernels;
#[cfg(feature = "ndarray")]
mod ndarray;
pub(crate) mod norm_ops;
pub(crate) mod pool_ops;
mod threads;

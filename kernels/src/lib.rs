//! CubeCL kernels of `burn-convpool`. This crate depends on `cubecl` and on cubek-matmul (and
//! its `cubek-std`, both re-exported), whose GEMM routines the convolutions can run through
//! layouts of ours; the host side (allocation, validation, launch sizes) lives in the main
//! crate's `cube` module.
//!
//! - [`activation`]: the activations a fused convolution applies as it stores (PyTorch's ReLU,
//!   leaky ReLU, SiLU, GELU), their derivatives, and element-wise kernels of both.
//! - [`batch_norm`]: batch normalization over the batch's statistics with an activation after
//!   it: per-channel sums (one cube per channel) and element-wise passes, forward and backward.
//! - [`axes`]: the per-axis values (D, H, W) every kernel's arguments are made of, and the
//!   index arithmetic of a rank-3 volume.
//! - [`conv`]: one description of the three convolution GEMMs (forward, input gradient, weight
//!   gradient) as `C[m, n] = sum_k A[m, k] * B[k, n]` over implicitly gathered operands, and the
//!   three schedules that run it: a shared-memory tiled kernel, a per-output direct kernel for
//!   short reductions (depthwise), and a per-(output, k-split) kernel for long reductions with
//!   few outputs (weight gradients of depthwise and grouped convs, the bias gradient); and the
//!   same GEMMs as layouts of cubek-matmul's views (`conv::gemm`), for its routines.
//! - [`pool`]: one window kernel with pluggable reductions (max with indices, average with every
//!   divisor rule, LP), reading NCHW through strides, its windows sliding (computed in the
//!   kernel), adaptive (host tables) or fractional (per-plane samples).
//! - [`pool_backward`]: the pools' gather-form backward, deterministic without atomics.
//! - [`sliding`]: pooling (max, average, LP) over a sliding window of at most 7 taps per axis,
//!   its taps unrolled (the common pools).
//! - [`whole_plane`]: global pooling, one flat loop per plane.
//! - [`unpool`]: max-unpool's bounds-checked scatter and its gather backward.
//!
//! Every kernel takes `address_type = "dynamic"`: the launcher picks 32- or 64-bit addressing
//! from the tensor sizes, so no index wraps silently.

pub use cubek_matmul;
pub use cubek_std;

pub mod activation;
pub mod axes;
pub mod batch_norm;
pub mod conv;
pub mod pairwise;
pub mod pool;
pub mod pool_backward;
pub mod sliding;
pub mod unpool;
pub mod whole_plane;

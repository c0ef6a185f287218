//! Convolution as three implicit GEMMs, `C[m, n] = sum_k A[m, k] * B[k, n]` per group:
//!
//! | kind       | m                   | n                 | k                   | A          | B         |
//! |------------|---------------------|-------------------|---------------------|------------|-----------|
//! | [`Forward`](GemmKind::Forward) | (batch, out pos)    | out channel       | (in channel, tap)   | x (im2col) | weight    |
//! | [`Data`](GemmKind::Data) | (batch, in pos)     | in channel        | (out channel, tap)  | out_grad   | weight    |
//! | [`Weight`](GemmKind::Weight) | out channel         | (in channel, tap) | (batch, out pos)    | out_grad   | x (im2col)|
//!
//! The operands are never materialised: [`lhs_value()`] and [`rhs_value()`] gather them from the
//! tensors in the layout they arrive in (the [`Layout`]s of [`ConvArgs`]; the weight is
//! contiguous), and [`store()`] scatters `C` back, so every schedule below shares one
//! home for the index formulas. `Data` also serves `conv_transpose`'s forward pass.
//!
//! One file per job: [`operands`] holds those accessors, [`tiled`] the shared-memory tiled
//! schedule, [`direct`] the per-output direct schedule, [`weight`] the weight gradient's direct
//! and split schedules, [`gemm`] the operands as layouts of cubek-matmul's views (its GEMM
//! routines then run the schedule), [`repair`] the passes over the elements a non-finite
//! operand met with the padding; split-k partial results are summed by [`sum_splits()`] here,
//! or by the GEMM's own cubes where the runtime allows ([`handoff`]).

use cubecl::prelude::*;

use crate::activation::{ActivationKind, epilogue};
use crate::axes::{Index3, Layout};
use crate::pairwise::{pairwise_add, pairwise_sum, pairwise_value};

pub mod direct;
pub mod gemm;
pub mod handoff;
pub mod operands;
pub mod repair;
pub mod tiled;
pub mod weight;

pub use direct::conv_gemm_direct;
pub use handoff::Handoff;
pub use operands::{
    Reduced, Row, lhs_value, reduced_of, rhs_value, row_of, store, store_position, store_weight,
};
pub use repair::{
    SCAN_UNITS, TERMS_PER_ITERATION, nonfinite_flags, repair_at, repair_gemm, repair_weight,
    repair_weight_flat, sum_splits_exact,
};
pub use tiled::{NARROW_TILE, TILE_K, TILE_M, TILE_N, TILE_UNITS, conv_gemm_tiled, tile_shape};
pub use weight::{conv_weight_direct, conv_weight_split};

/// Which of a convolution's three GEMMs a kernel computes (a comptime parameter: each is its
/// own compiled kernel, and no other value exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmKind {
    /// `out = conv(x, weight)`: lhs is `x`, rhs is `weight`.
    Forward,
    /// `x_grad = conv_x_backward(weight, out_grad)`: lhs is `out_grad`, rhs is `weight`.
    Data,
    /// `weight_grad = conv_weight_backward(x, out_grad)`: lhs is `out_grad`, rhs is `x`.
    Weight,
}

/// Geometry of one convolution, rank 3 (1d and 2d have unit leading axes).
#[derive(CubeLaunch, CubeType, Clone)]
#[expand(derive(Clone))]
pub struct ConvArgs {
    pub groups: usize,
    /// Input channels per group.
    pub in_channels: usize,
    /// Output channels per group.
    pub out_channels: usize,
    pub in_size: Index3,
    pub out_size: Index3,
    pub kernel: Index3,
    pub stride: Index3,
    pub dilation: Index3,
    /// Padding before the first position, per axis.
    pub pad: Index3,
    /// Layout of the input side (`x`, or the input gradient a `Data` GEMM writes).
    pub in_layout: Layout,
    /// Layout of the output side (the forward's output, or the output gradient).
    pub out_layout: Layout,
}

/// Sizes of the GEMM of one group, the `k` range of one split (split-k runs one cube layer
/// per split and sums the partial results afterwards, in a fixed order), and the first `m`
/// tile of a tiled launch (a grid dimension holds at most 65,535 cubes, so a long `m` takes
/// several launches). A tiled input gradient's stride phases each hold part of `m` and `k`
/// ([`PHASE_ENTRIES`]).
#[derive(CubeLaunch, CubeType, Clone)]
#[expand(derive(Clone))]
pub struct GemmArgs {
    pub m_len: usize,
    pub n_len: usize,
    pub k_len: usize,
    pub k_per_split: usize,
    pub m_tile_offset: usize,
}

/// The input positions the rows of a tiled input-gradient cube run over: `first + step * j`
/// per axis, `j < count`. A strided conv's input gradient computes each stride phase
/// (positions alike modulo the stride, `step` = stride) in cubes of its own, each summing only
/// the taps that reach its positions: one GEMM over every position would multiply zeros for
/// the other taps (3 in 4 of the products at 3x3 stride 2). Unit stride: one phase of every
/// position.
///
/// In a phase every tap meets the output grid, at output `j + reach - back` per axis (the
/// tap's `reach` from the `k` table, `back` making every reach non-negative), so an exact
/// input gradient loads with no division. Read by `Data` only.
#[derive(CubeType, Clone)]
#[expand(derive(Clone))]
pub struct Phase {
    pub first: Index3,
    pub step: Index3,
    pub count: Index3,
    pub back: Index3,
}

/// Entries per stride phase of an exact input gradient's phase table, which the tiled kernel
/// reads so that one launch computes every phase: `[k_len, k_per_split, k_base, first d, h, w,
/// count d, h, w, back d, h, w]`, where `k_base` is the phase's first `k` in the `k` table
/// (the phases' tables follow one another) and the phase's `m` is the batch times its
/// positions.
pub const PHASE_ENTRIES: usize = 12;

/// Entries per `k` of a forward's `k` table: `[channel, kd, kh, kw]`.
pub const FORWARD_DIGITS: usize = 4;
/// Entries per `k` of an input gradient's: `[channel, kd, kh, kw, reach d, reach h, reach w,
/// 0]`.
pub const DATA_DIGITS: usize = 8;

/// `out[i] = activation(sum_s partials[s * len + i])`, summed pairwise in split order: the
/// deterministic second pass of a split-k GEMM, with the fused activation if any.
#[cube(launch, address_type = "dynamic")]
pub fn sum_splits<F: Float, A: Float>(
    partials: &Tensor<F>,
    out: &mut Tensor<F>,
    splits: usize,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= out.len() {
        terminate!();
    }
    let sum = split_sum::<F, A>(partials, splits, out.len(), ABSOLUTE_POS);
    out[ABSOLUTE_POS] = epilogue::<F, A>(sum, slope, activation);
}

/// `sum_s partials[s * len + i]`, summed pairwise in split order.
#[cube]
pub(crate) fn split_sum<F: Float, A: Float>(
    partials: &Tensor<F>,
    splits: usize,
    len: usize,
    i: usize,
) -> F {
    let mut acc = pairwise_sum::<A>();
    for s in 0..splits {
        pairwise_add::<A>(&mut acc, A::cast_from(partials[s * len + i]));
    }
    F::cast_from(pairwise_value::<A>(&acc))
}

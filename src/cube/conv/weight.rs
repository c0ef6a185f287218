//! The weight gradient's untiled launchers, direct and split, and the bias gradient (a split
//! weight gradient with one input of ones).

use burn_convpool_kernels::conv::{self, GemmArgsLaunch, GemmKind};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::ConvGeometry;

use super::{
    Sides, SplitRepair, conv_args, gemm_sizes, meets_padding, neighbours_share, repairs_within,
    with_splits,
};
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{
    LaunchError, accumulator_type, address_type, dims5, elementwise, empty, float_type, strided,
    zeros,
};

/// Output channels one unit of the direct weight-gradient schedule computes at most.
const DIRECT_WEIGHT_BLOCK: usize = 16;

/// Weights (output channels x input channels x kernel row) one unit of the direct
/// weight-gradient schedule keeps in registers; decided by `resnet50_1x1_reduce` and
/// `resnet_3x3_*` grad_weight.
const DIRECT_WEIGHT_OUTPUTS: usize = 256;

/// Output positions the direct weight-gradient schedule steps along W at a time, sharing their
/// input loads at the cost of live values; decided by `resnet_3x3_28` grad_weight.
const DIRECT_WEIGHT_W: usize = 2;

/// Units a split-schedule launch aims for.
const SPLIT_TARGET_UNITS: usize = 65_536;

/// Shortest `k` range of one unit of the split schedule.
const SPLIT_MIN_K: usize = 256;

/// How the split and direct weight-gradient schedules cut `k` (batch x output positions):
/// `(splits, k per split)`, whole output rows per split, enough splits for `units` units
/// per split to fill the device, none shorter than [`SPLIT_MIN_K`].
fn row_splits(geometry: &ConvGeometry, k: usize, units: usize) -> (usize, usize) {
    let row_len = geometry.out_size[2].max(1);
    let rows = k / row_len;
    let splits = SPLIT_TARGET_UNITS
        .div_ceil(units.max(1))
        .clamp(1, (k / SPLIT_MIN_K).max(1));
    let rows_per_split = rows.div_ceil(splits).max(1);
    (
        rows.div_ceil(rows_per_split).max(1),
        rows_per_split * row_len,
    )
}

/// Loop iterations of a weight-gradient unit over one split of `k_per_split` (whole output
/// rows): the positions, and one more per row.
fn row_walk(geometry: &ConvGeometry, k_per_split: usize) -> usize {
    k_per_split + k_per_split / geometry.out_size[2].max(1) + 1
}

/// What a split weight gradient's sum reads to repair it: the output gradient and the input.
fn weight_repair<'a>(
    geometry: &'a ConvGeometry,
    sides: &'a Sides,
    out_grad: &'a CubeTensor,
    x: &'a CubeTensor,
) -> SplitRepair<'a> {
    SplitRepair {
        geometry,
        sides,
        kind: GemmKind::Weight,
        lhs: out_grad,
        rhs: x,
        bias: None,
    }
}

/// The split schedule into `out`: whole output rows per split, enough splits to fill the
/// device. With `ones_rhs`, `x` is unused and this is the bias gradient.
pub(super) fn split(
    geometry: &ConvGeometry,
    out_grad: CubeTensor,
    x: CubeTensor,
    out: &CubeTensor,
    sides: &Sides,
    ones_rhs: bool,
) -> Result<bool, LaunchError> {
    let dtype = float_type(out)?;
    let (m, n, k) = gemm_sizes(geometry, GemmKind::Weight);
    let outputs = geometry.groups * m * n;
    let (splits, k_per_split) = row_splits(geometry, k, outputs);
    // The bias gradient (`ones_rhs`) meets no padding.
    let meets = !ones_rhs && meets_padding(geometry, GemmKind::Weight);
    let own = row_walk(geometry, k_per_split);
    let repair = meets && splits == 1 && repairs_within(geometry, GemmKind::Weight, own, 1);
    let split_repair = meets.then(|| weight_repair(geometry, sides, &out_grad, &x));
    let summed = with_splits(out, splits, (split_repair, None), |target| {
        let (cube_count, cube_dim) = elementwise(target, outputs * splits);
        note(Launch::Kernel("conv_weight_split"));
        conv::conv_weight_split::launch(
            &target.client,
            cube_count,
            cube_dim,
            address_type(&[&out_grad, &x, target]),
            out_grad.clone().into_tensor_arg(),
            x.clone().into_tensor_arg(),
            target.clone().into_tensor_arg(),
            conv_args(geometry, sides),
            GemmArgsLaunch::new(m, n, k, k_per_split, 0),
            ones_rhs,
            repair,
            [dtype, accumulator_type(dtype)],
        );
        Ok(())
    })?;
    Ok(repair || summed)
}

/// The direct weight-gradient schedule into `out`: a unit per block of input channels,
/// kernel row, block of output channels and split of whole output rows, enough splits to fill
/// the device ([`weight_blocks`] sizes the blocks).
pub(super) fn direct(
    geometry: &ConvGeometry,
    out_grad: CubeTensor,
    x: CubeTensor,
    out: &CubeTensor,
    sides: &Sides,
) -> Result<bool, LaunchError> {
    let dtype = float_type(out)?;
    let (m, n, k) = gemm_sizes(geometry, GemmKind::Weight);
    let blocks = weight_blocks(geometry);
    let units = geometry.groups
        * geometry.in_per_group().div_ceil(blocks.c)
        * geometry.kernel[0]
        * geometry.kernel[1]
        * m.div_ceil(blocks.m);
    let (splits, k_per_split) = row_splits(geometry, k, units);
    let meets = meets_padding(geometry, GemmKind::Weight);
    let own = row_walk(geometry, k_per_split);
    let elements = blocks.m * blocks.c * geometry.kernel[2];
    let repair = meets && splits == 1 && repairs_within(geometry, GemmKind::Weight, own, elements);
    let split_repair = meets.then(|| weight_repair(geometry, sides, &out_grad, &x));
    let summed = with_splits(out, splits, (split_repair, None), |target| {
        let (cube_count, cube_dim) = elementwise(target, units * splits);
        note(Launch::Kernel("conv_weight_direct"));
        conv::conv_weight_direct::launch(
            &target.client,
            cube_count,
            cube_dim,
            address_type(&[&out_grad, &x, target]),
            out_grad.clone().into_tensor_arg(),
            x.clone().into_tensor_arg(),
            target.clone().into_tensor_arg(),
            conv_args(geometry, sides),
            GemmArgsLaunch::new(m, n, k, k_per_split, 0),
            blocks.m,
            blocks.c,
            geometry.kernel[2],
            blocks.w,
            blocks.stride_w,
            repair,
            [dtype, accumulator_type(dtype)],
        );
        Ok(())
    })?;
    Ok(repair || summed)
}

/// The register block of one unit of the direct weight-gradient schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WeightBlocks {
    /// Output channels.
    m: usize,
    /// Input channels.
    c: usize,
    /// Output positions along W per step.
    w: usize,
    /// The stride along W when `w > 1` (comptime then), else 1.
    stride_w: usize,
}

/// Up to [`DIRECT_WEIGHT_BLOCK`] output channels, and as many input channels as keep the
/// block's weights within [`DIRECT_WEIGHT_OUTPUTS`]. Positions step [`DIRECT_WEIGHT_W`] at a
/// time where [`neighbours_share`] input values, one at a time otherwise.
fn weight_blocks(geometry: &ConvGeometry) -> WeightBlocks {
    let (m, _, _) = gemm_sizes(geometry, GemmKind::Weight);
    let kernel_w = geometry.kernel[2];
    let block_m = m.clamp(1, DIRECT_WEIGHT_BLOCK);
    let block_c = (DIRECT_WEIGHT_OUTPUTS / (block_m * kernel_w.max(1)))
        .clamp(1, geometry.in_per_group().max(1));
    let (w, stride_w) = if neighbours_share(geometry) {
        (
            DIRECT_WEIGHT_W.min(geometry.out_size[2].max(1)),
            geometry.stride[2],
        )
    } else {
        (1, 1)
    };
    WeightBlocks {
        m: block_m,
        c: block_c,
        w,
        stride_w,
    }
}

/// Bias gradient: `out_grad` summed over batch and positions.
pub fn bias_backward(out_grad: CubeTensor) -> Result<CubeTensor, LaunchError> {
    float_type(&out_grad)?;
    let out_grad = strided(out_grad);
    let [batch, channels, d, h, w] = dims5(&out_grad);
    if batch * d * h * w == 0 {
        return Ok(zeros(&out_grad, &[channels], out_grad.dtype));
    }
    let out = empty(&out_grad, &[channels], out_grad.dtype);
    // The bias gradient is a weight gradient with one group, 1x1 kernel, one input channel
    // and B = 1.
    let geometry = ConvGeometry {
        batch,
        groups: 1,
        in_channels: 1,
        out_channels: channels,
        in_size: [1, 1, 1],
        out_size: [d, h, w],
        kernel: [1, 1, 1],
        stride: [1, 1, 1],
        dilation: [1, 1, 1],
        pad_begin: [0, 0, 0],
    };
    // `x` is never read; both sides are the output gradient's.
    let sides = Sides::new(&out_grad, &out_grad);
    split(&geometry, out_grad.clone(), out_grad, &out, &sides, true)?;
    Ok(out)
}

//! The direct schedule's launcher (forward and input gradient).

use burn_convpool_kernels::conv::{self, GemmArgsLaunch, GemmKind};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::{Activation, ConvGeometry};

use super::{
    Sides, activation, conv_args, direct_walk, gemm_sizes, meets_padding, neighbours_share,
    repairs_within, written_w,
};
use crate::cube::choice::Packing;
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{LaunchError, accumulator_type, address_type, elementwise, float_type};

/// Channels one unit of the direct schedule computes at most.
const DIRECT_BLOCK: usize = 8;

/// The same where the unit's row has fewer than 16 positions, so that more channels fill its
/// [`DIRECT_OUTPUTS`]; decided by `resnet_3x3_7` and `resnext50_grouped32_3x3_7`.
const DIRECT_SHORT_ROW_BLOCK: usize = 16;

/// Outputs (channels x positions along the last axis) a unit computes at most, so each input it
/// loads serves up to 8 x 16 products; decided by `resnet_3x3_*` and `resnext_grouped32_3x3`.
const DIRECT_OUTPUTS: usize = 128;

/// Positions along the last axis one unit computes at most, for blocks of few channels, which
/// bounds its live registers; decided by `resnet_stem_7x7s2` grad_input.
const DIRECT_W: usize = 32;

/// Widest kernel row the direct forward and input-gradient schedules keep comptime (the
/// common 1, 3, 5 and 7).
const DIRECT_KERNEL_W: usize = 7;

/// The direct schedule of a forward or input gradient into `out`: a unit computes a block of
/// channels at a run of positions along the last axis of the side it writes (or, spread, at
/// one position), with the activation where no repair launch follows. Returns whether the
/// kernel repaired its result ([`repairs_within`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: CubeTensor,
    rhs: CubeTensor,
    (bias, activation): (Option<CubeTensor>, Option<Activation>),
    out: &CubeTensor,
    sides: &Sides,
    packing: Packing,
) -> Result<bool, LaunchError> {
    let dtype = float_type(out)?;
    let (m, n, k) = gemm_sizes(geometry, kind);
    // A unit computes up to 8 channels (16 on short rows) at up to 32 positions (of one
    // phase) along the last axis of the side it writes, 128 outputs at most (or at one
    // position, spread).
    let side_w = written_w(geometry, kind);
    let row_taps = row_taps(geometry, kind);
    // A strided input gradient's unit takes its positions from one stride phase.
    let phases = if kind == GemmKind::Data && row_taps > 0 {
        geometry.stride[2]
    } else {
        1
    };
    let phase_w = side_w.div_ceil(phases);
    // Short rows fill the block with more channels.
    let block_n = match packing {
        Packing::Packed => {
            n.min((DIRECT_OUTPUTS / phase_w).clamp(DIRECT_BLOCK, DIRECT_SHORT_ROW_BLOCK))
        }
        Packing::Spread => n.min(DIRECT_BLOCK),
    };
    let block_w = match packing {
        Packing::Packed => phase_w.clamp(1, (DIRECT_OUTPUTS / block_n).min(DIRECT_W)),
        Packing::Spread => 1,
    };
    let row_units = phases * phase_w.div_ceil(block_w);
    let units = geometry.groups * n.div_ceil(block_n) * (m / side_w) * row_units;
    let (cube_count, cube_dim) = elementwise(out, units);
    let own = direct_walk(geometry, kind);
    let meets = meets_padding(geometry, kind);
    let repair = meets && repairs_within(geometry, kind, own, block_n * block_w);
    // What the kernel stores is final unless a repair launch follows.
    let (slope, stored) = activation::stored(activation, repair || !meets);
    note(Launch::Kernel("conv_gemm_direct"));
    conv::conv_gemm_direct::launch(
        &out.client,
        cube_count,
        cube_dim,
        address_type(&[&lhs, &rhs, out]),
        lhs.into_tensor_arg(),
        rhs.into_tensor_arg(),
        bias.map(|bias| bias.into_tensor_arg()).into(),
        out.clone().into_tensor_arg(),
        conv_args(geometry, sides),
        GemmArgsLaunch::new(m, n, k, k, 0),
        kind,
        block_n,
        block_w,
        geometry.stride == [1; 3],
        row_taps,
        row_stride(geometry, kind, row_taps),
        repair,
        slope,
        stored,
        [dtype, accumulator_type(dtype)],
    );
    Ok(repair)
}

/// The direct schedule's comptime kernel row, for kernels up to [`DIRECT_KERNEL_W`] wide at
/// dilation 1 along W: the taps one position meets, all of the row for a forward at unit
/// stride or where [`neighbours_share`], every stride-th for an input gradient (0: a run-time
/// row).
pub(super) fn row_taps(geometry: &ConvGeometry, kind: GemmKind) -> usize {
    let [stride, dilation, width] = [geometry.stride[2], geometry.dilation[2], geometry.kernel[2]];
    let comptime_row = dilation == 1 && width <= DIRECT_KERNEL_W;
    match kind {
        GemmKind::Forward if comptime_row && (stride == 1 || neighbours_share(geometry)) => width,
        GemmKind::Data if comptime_row => width.div_ceil(stride),
        _ => 0,
    }
}

/// The stride along W of the direct forward's comptime row (1 for an input gradient, whose
/// unit reads one stride phase at unit stride, or a run-time row).
fn row_stride(geometry: &ConvGeometry, kind: GemmKind, row_taps: usize) -> usize {
    if kind == GemmKind::Forward && row_taps > 0 {
        geometry.stride[2]
    } else {
        1
    }
}

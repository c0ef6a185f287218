//! Launchers of the convolution kernels: pick a schedule for each GEMM from its sizes, as
//! `burn_convpool_kernels::conv` splits them:
//!
//! - tiled (`tiled.rs`: 64x64 tiles, 16-deep k steps) for the bulk of the work, `k` split over
//!   more cubes when there are few tiles (late layers, small batches), each k step loaded
//!   while the previous one computes (or, single-buffered, after it: fewer registers), a
//!   strided input gradient's stride phases in one launch, each over the taps that reach it;
//! - direct (`direct.rs`: a unit per block of outputs) when `n` or `k` is under a tile's depth,
//!   as in depthwise convs, where a tile would be mostly padding (pinned with
//!   `ConvSchedule::Untiled`, it runs every shape whose walk fits lavapipe's loop limit);
//! - the weight gradient's direct and split schedules (`weight.rs`) for weight gradients with
//!   few outputs, such as depthwise and grouped convs, and for the bias gradient;
//! - pinned with `ConvSchedule::Gemm`, cubek-matmul's GEMM routines over our layouts
//!   (`gemm.rs`) for every pass.
//!
//! Split results are summed afterwards in split order, so every result is deterministic. Where
//! the geometry meets padding ([`meets_padding`]), each kernel (or the sum of a split GEMM)
//! recomputes by the definition the elements it stores non-finite, in the same launch. The
//! register blocks were sized on CI's CPU Vulkan driver and are provisional: the GPU report's
//! rows named in each constant's comment decide them (`benches/REPORT-*.md`), and the tuner
//! times Burn's kernels and the spread launch beside them on every device.

mod activation;
mod direct;
mod gemm;
mod handoff;
mod repair;
mod tiled;
mod weight;

use burn_convpool_kernels::axes::LayoutLaunch;
use burn_convpool_kernels::conv::{self, ConvArgsLaunch, GemmKind};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::{Activation, ConvGeometry};

use super::choice::{ConvSchedule, GemmTile, OurKernels};
use super::launches::{Launch, note};
use super::limits::MAX_LOOP_ITERATIONS;
use super::tensor::{
    LaunchError, accumulator_type, address_type, axes, channels_last, contiguous, elementwise,
    empty, empty_channels_last, float_type, strided, strides5, zeros,
};

pub use activation::{activate, activate_result, activation_backward, stored};
pub use repair::{repair_gemm, repair_weight};
pub use weight::bias_backward;

/// Below this `n` or `k`, the direct schedule beats a mostly empty tile.
const DIRECT_BELOW: usize = 16;

/// Widest kernel row the direct weight-gradient schedule keeps in registers; wider rows take the
/// split schedule; decided by `audio_conv1d_k9` grad_weight (9 taps).
pub(super) const DIRECT_WEIGHT_KERNEL_W: usize = 11;

/// Widest stride along W at which the direct forward and weight gradient share loaded input
/// values between neighbouring positions ([`neighbours_share`]).
const SHARED_ROW_MAX_STRIDE: usize = 2;

/// Weight gradients with at most this many outputs per group use the direct schedule (the
/// split one for kernels wider than [`DIRECT_WEIGHT_KERNEL_W`]).
const SPLIT_MAX_OUTPUTS: usize = 1024;

/// The strides of a launch's two activation sides, which the kernels read and write through
/// ([`burn_convpool_kernels::axes::Layout`]): the input side (`x`, or the input gradient a
/// `Data` GEMM writes) and the output side (the forward's output, or the output gradient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sides {
    input: [usize; 5],
    output: [usize; 5],
}

impl Sides {
    /// The sides of a forward or input-gradient GEMM that reads `lhs` and writes `out`.
    fn of_gemm(kind: GemmKind, lhs: &CubeTensor, out: &CubeTensor) -> Self {
        match kind {
            GemmKind::Data => Self::new(out, lhs),
            _ => Self::new(lhs, out),
        }
    }

    /// The sides of the input-side tensor `input` and the output-side tensor `output`.
    pub(super) fn new(input: &CubeTensor, output: &CubeTensor) -> Self {
        Self {
            input: strides5(input),
            output: strides5(output),
        }
    }
}

pub(super) fn conv_args(geometry: &ConvGeometry, sides: &Sides) -> ConvArgsLaunch {
    ConvArgsLaunch::new(
        geometry.groups,
        geometry.in_per_group(),
        geometry.out_per_group(),
        axes(geometry.in_size),
        axes(geometry.out_size),
        axes(geometry.kernel),
        axes(geometry.stride),
        axes(geometry.dilation),
        axes(geometry.pad_begin),
        layout(sides.input),
        layout(sides.output),
    )
}

fn layout([batch, channel, d, h, w]: [usize; 5]) -> LayoutLaunch {
    LayoutLaunch::new(batch, channel, axes([d, h, w]))
}

/// A new rank-5 activation on `like`'s device in the layout Burn's own convolutions give it:
/// channels-last when the tensor it is computed from (`like`) is, contiguous otherwise.
fn empty_like_layout(like: &CubeTensor, dims: [usize; 5]) -> CubeTensor {
    match channels_last(like) {
        true => empty_channels_last(like, dims, like.dtype),
        false => empty(like, &dims, like.dtype),
    }
}

/// `(m, n, k)` of one group's GEMM of `kind` (see the table in `burn_convpool_kernels::conv`).
pub(super) fn gemm_sizes(geometry: &ConvGeometry, kind: GemmKind) -> (usize, usize, usize) {
    let taps: usize = geometry.kernel.iter().product();
    match kind {
        GemmKind::Forward => (
            geometry.batch * geometry.out_volume(),
            geometry.out_per_group(),
            geometry.in_per_group() * taps,
        ),
        GemmKind::Data => (
            geometry.batch * geometry.in_volume(),
            geometry.in_per_group(),
            geometry.out_per_group() * taps,
        ),
        GemmKind::Weight => (
            geometry.out_per_group(),
            geometry.in_per_group() * taps,
            geometry.batch * geometry.out_volume(),
        ),
    }
}

/// Whether the GEMM of `kind` runs the direct schedule, whose unit computes a block of
/// channels at up to 64 positions along the last axis of the side it writes.
fn is_direct(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    let (_, n, k) = gemm_sizes(geometry, kind);
    (n < DIRECT_BELOW || k < DIRECT_BELOW) && direct_walk_fits(geometry, kind)
}

/// Whether a direct unit's walk over its reduction (channels, then kernel planes, then rows,
/// then taps along a row that is not comptime) stays within [`MAX_LOOP_ITERATIONS`]; a longer
/// one (a few outputs over tens of thousands of channels) runs tiled, in 16-deep k steps.
fn direct_walk_fits(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    direct_walk(geometry, kind) <= MAX_LOOP_ITERATIONS
}

/// The loop iterations of a direct unit's walk over its reduction ([`direct_walk_fits`]).
pub(super) fn direct_walk(geometry: &ConvGeometry, kind: GemmKind) -> usize {
    let reduced = match kind {
        GemmKind::Data => geometry.out_per_group(),
        _ => geometry.in_per_group(),
    };
    let [depth, height, width] = geometry.kernel;
    let row = if direct::row_taps(geometry, kind) > 0 {
        0
    } else {
        width
    };
    let per_channel = 1 + depth * (1 + height * (1 + row));
    reduced.saturating_mul(per_channel)
}

/// The last axis of the side a forward (output) or input-gradient (input) GEMM writes.
pub(super) fn written_w(geometry: &ConvGeometry, kind: GemmKind) -> usize {
    if kind == GemmKind::Forward {
        geometry.out_size[2]
    } else {
        geometry.in_size[2]
    }
}

/// Whether the GEMM of `kind` runs the tiled schedule by default, which [`Buffering`] sets.
pub fn is_tiled(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    match kind {
        GemmKind::Weight => weight_is_tiled(geometry),
        _ => !is_direct(geometry, kind),
    }
}

/// A group's channels along the GEMM's channel side: `n` (output channels of a forward, input
/// channels of an input gradient) or a weight gradient's `m` (its output channels).
pub(super) fn channel_side(geometry: &ConvGeometry, kind: GemmKind) -> usize {
    let (m, n, _) = gemm_sizes(geometry, kind);
    if kind == GemmKind::Weight { m } else { n }
}

/// Whether [`Packing::Spread`] changes [`gemm`]'s launch: the direct schedule over rows
/// longer than one position (the tiled schedule has one launch shape).
pub fn spreads(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    is_direct(geometry, kind) && written_w(geometry, kind) > 1
}

/// Our forward pass (`kind` `Forward`: `lhs` = x, `rhs` = weight) or input gradient (`Data`:
/// `lhs` = output gradient, `rhs` = weight): `out = activation(lhs (*) rhs [+ bias])`, on the
/// schedule `ours` picks (spread, a unit of the direct schedule computes one position). The
/// kernel that stores the final result applies the activation; after cubek's routine, or
/// where a repair launch follows, a pass of its own does.
pub fn gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: CubeTensor,
    rhs: CubeTensor,
    (bias, activation): (Option<CubeTensor>, Option<Activation>),
    ours: OurKernels,
) -> Result<CubeTensor, LaunchError> {
    float_type(&lhs)?;
    float_type(&rhs)?;
    let activated = |out: CubeTensor| match activation {
        Some(activation) => activate_result(out, activation),
        None => Ok(out),
    };
    if let Some(tile) = on_cubek(geometry, kind, ours) {
        return gemm::gemm(geometry, kind, tile, (lhs, rhs, bias)).and_then(activated);
    }
    // The activation is read in its own layout; the weight and bias are small.
    let (lhs, rhs) = (strided(lhs), contiguous(rhs));
    let bias = bias.map(contiguous);
    let out_dims = if kind == GemmKind::Forward {
        geometry.out_shape()
    } else {
        geometry.in_shape()
    };
    let out = empty_like_layout(&lhs, out_dims);
    if out.meta.num_elements() == 0 {
        return Ok(out);
    }
    let sides = Sides::of_gemm(kind, &lhs, &out);
    let direct = ours.conv == ConvSchedule::Untiled || is_direct(geometry, kind);
    let operands = (lhs.clone(), rhs.clone(), bias.clone());
    let bias = (bias, activation);
    let repaired = if direct && direct_walk_fits(geometry, kind) {
        direct::gemm(geometry, kind, lhs, rhs, bias, &out, &sides, ours.packing)?
    } else {
        tiled::gemm(geometry, kind, &lhs, &rhs, bias, &out, &sides, ours)?
    };
    match repaired || !meets_padding(geometry, kind) {
        // The kernels stored the final result, the activation applied.
        true => Ok(out),
        false => repair_after(geometry, kind, operands, out).and_then(activated),
    }
}

/// Our weight gradient: `weight_grad = out_grad (*) x`.
pub fn weight_gemm(
    geometry: &ConvGeometry,
    out_grad: CubeTensor,
    x: CubeTensor,
    ours: OurKernels,
) -> Result<CubeTensor, LaunchError> {
    float_type(&x)?;
    float_type(&out_grad)?;
    if let Some(tile) = on_cubek(geometry, GemmKind::Weight, ours) {
        return gemm::weight(geometry, tile, out_grad, x);
    }
    let (out_grad, x) = (strided(out_grad), strided(x));
    let (_, _, k) = gemm_sizes(geometry, GemmKind::Weight);
    if k == 0 {
        return Ok(zeros(&x, &geometry.weight_shape(), x.dtype));
    }
    let out = empty(&x, &geometry.weight_shape(), x.dtype);
    let sides = Sides::new(&x, &out_grad);
    let operands = (out_grad.clone(), x.clone(), None);
    let repaired = if ours.conv == ConvSchedule::Untiled || !weight_is_tiled(geometry) {
        if geometry.kernel[2] <= DIRECT_WEIGHT_KERNEL_W {
            weight::direct(geometry, out_grad, x, &out, &sides)?
        } else {
            weight::split(geometry, out_grad, x, &out, &sides, false)?
        }
    } else {
        tiled::weight(geometry, &out_grad, &x, &out, &sides, ours)?
    };
    match repaired || !meets_padding(geometry, GemmKind::Weight) {
        true => Ok(out),
        false => repair_after(geometry, GemmKind::Weight, operands, out),
    }
}

/// The tile cubek's routine runs the GEMM of `kind` with, where it does: `ours` pins
/// `ConvSchedule::Gemm`, and a plain-core tile's reduction fits lavapipe's loop limit (each
/// unit walks all of `k`). Tensor-core tiles never run on lavapipe, which has none.
fn on_cubek(geometry: &ConvGeometry, kind: GemmKind, ours: OurKernels) -> Option<GemmTile> {
    match ours.conv {
        ConvSchedule::Gemm(tile)
            if tile.uses_tensor_cores() || gemm_sizes(geometry, kind).2 <= MAX_LOOP_ITERATIONS =>
        {
            Some(tile)
        }
        _ => None,
    }
}

/// Whether the weight gradient runs the tiled schedule (more outputs per group than the
/// direct and split schedules take).
fn weight_is_tiled(geometry: &ConvGeometry) -> bool {
    let (m, n, _) = gemm_sizes(geometry, GemmKind::Weight);
    m * n > SPLIT_MAX_OUTPUTS
}

/// Whether the GEMM of `kind` meets the padding where a non-finite operand would make NaN of a
/// finite element (`burn_convpool_kernels::conv::repair`): some window does (forward, weight
/// gradient), or some input meets a tap with no output (input gradient). Its kernels then
/// recompute by the definition what they store non-finite.
pub(super) fn meets_padding(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    match kind {
        GemmKind::Data => geometry.inputs_meet_padding(),
        _ => geometry.windows_meet_padding(),
    }
}

/// Whether a unit that runs `own` loop iterations can also recompute `elements` of its results
/// by the definition of the GEMM of `kind` within half of [`MAX_LOOP_ITERATIONS`]. Lavapipe
/// counts a unit's iterations over all its loops, and more than this model where a kernel holds
/// the repair's loop: an 8192-channel direct forward with a 41K-iteration walk and 14K of
/// repair cut its own sum short (`cube_cross::conv::long_repairs_sum_every_term`). Where the
/// budget does not allow it, the pass's result is repaired by a launch of its own
/// ([`repair_after`]).
pub(super) fn repairs_within(
    geometry: &ConvGeometry,
    kind: GemmKind,
    own: usize,
    elements: usize,
) -> bool {
    let taps: usize = geometry.kernel.iter().product();
    let terms = match kind {
        GemmKind::Forward => geometry.in_per_group() * taps,
        GemmKind::Data => geometry.out_per_group() * taps,
        GemmKind::Weight => geometry.batch * geometry.out_volume(),
    };
    let repair = terms.div_ceil(conv::TERMS_PER_ITERATION) + 1;
    own.saturating_add(elements.saturating_mul(repair)) <= MAX_LOOP_ITERATIONS / 2
}

/// The repair of a result whose kernels could not repair it within a unit's loop budget
/// ([`repairs_within`]): the weight's finiteness test and the gated repair for a forward or
/// input gradient over `lhs` and the weight `rhs`, the weight gradient's own pass for a weight
/// gradient over the output gradient `lhs` and the input `rhs`.
fn repair_after(
    geometry: &ConvGeometry,
    kind: GemmKind,
    (lhs, rhs, bias): (CubeTensor, CubeTensor, Option<CubeTensor>),
    out: CubeTensor,
) -> Result<CubeTensor, LaunchError> {
    match kind {
        GemmKind::Weight => repair_weight(geometry, rhs, lhs, out),
        _ => repair_gemm(geometry, kind, (lhs, rhs, bias), out),
    }
}

/// The operands a split GEMM's sum reads to repair its result ([`meets_padding`]): `lhs` and
/// `rhs` as the GEMM's kernel reads them (a weight gradient's: the output gradient, then the
/// input), and the bias a forward or input gradient adds.
pub(super) struct SplitRepair<'a> {
    pub geometry: &'a ConvGeometry,
    pub sides: &'a Sides,
    pub kind: GemmKind,
    pub lhs: &'a CubeTensor,
    pub rhs: &'a CubeTensor,
    pub bias: Option<&'a CubeTensor>,
}

/// Run `launch` into `out` directly, or into `splits` stacked partial results that are then
/// summed into `out` in split order (deterministic), and repaired where `repair` is given and
/// the sum's units have the loop budget for it; the sum applies `activation` where its result
/// is final (no repair launch follows). `out` is dense (contiguous or channels-last), so each
/// partial result is laid out as `out` and the sum runs element by element over the buffer.
/// Returns whether the sum repaired the result.
pub(super) fn with_splits(
    out: &CubeTensor,
    splits: usize,
    (repair, activation): (Option<SplitRepair<'_>>, Option<Activation>),
    launch: impl FnOnce(&CubeTensor) -> Result<(), LaunchError>,
) -> Result<bool, LaunchError> {
    if splits == 1 {
        launch(out)?;
        return Ok(false);
    }
    let needs_repair = repair.is_some();
    let repair = repair.filter(|repair| repairs_within(repair.geometry, repair.kind, splits, 1));
    let repaired = repair.is_some();
    let (slope, stored) = activation::stored(activation, repaired || !needs_repair);
    let dtype = float_type(out)?;
    let len = out.meta.num_elements();
    let partials = empty(out, &[splits * len], out.dtype);
    launch(&partials)?;
    let (cube_count, cube_dim) = elementwise(out, len);
    let dtypes = [dtype, accumulator_type(dtype)];
    match repair {
        None => {
            note(Launch::Kernel("sum_splits"));
            conv::sum_splits::launch(
                &out.client,
                cube_count,
                cube_dim,
                address_type(&[&partials, out]),
                partials.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                splits,
                slope,
                stored,
                dtypes,
            );
        }
        Some(repair) => {
            note(Launch::Kernel("sum_splits_exact"));
            conv::sum_splits_exact::launch(
                &out.client,
                cube_count,
                cube_dim,
                address_type(&[&partials, out, repair.lhs, repair.rhs]),
                partials.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                splits,
                repair.lhs.clone().into_tensor_arg(),
                repair.rhs.clone().into_tensor_arg(),
                repair
                    .bias
                    .map(|bias| bias.clone().into_tensor_arg())
                    .into(),
                conv_args(repair.geometry, repair.sides),
                repair.geometry.batch,
                slope,
                stored,
                repair.kind,
                dtypes,
            );
        }
    }
    Ok(repaired)
}

/// Whether neighbouring positions along W read some of the same input values, at a stride
/// small enough to load them as one run: dilation 1, a kernel row wider than the stride, and
/// a stride of at most [`SHARED_ROW_MAX_STRIDE`] (a 1x1 stride 2 would load values no
/// position reads).
pub(super) fn neighbours_share(geometry: &ConvGeometry) -> bool {
    let [stride, dilation, width] = [geometry.stride[2], geometry.dilation[2], geometry.kernel[2]];
    dilation == 1 && width > stride && stride <= SHARED_ROW_MAX_STRIDE
}

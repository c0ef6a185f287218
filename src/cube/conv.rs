//! Launchers of the convolution kernels: pick a schedule for each GEMM from its sizes.
//!
//! - tiled (64x64 tiles, 16-deep k steps) for the bulk of the work;
//! - direct (one unit per output) when `n` or `k` is under a tile's depth, as in depthwise
//!   convs, where a tile would be mostly padding, and where the tuner finds it faster
//!   ([`untiled_may_win`]);
//! - split (one unit per output and `k` range) for weight gradients with few outputs, such as
//!   depthwise and grouped convs, and for the bias gradient;
//! - tiled GEMMs also split `k` when there are few tiles (late layers, small batches), so more
//!   cubes share the reduction, and load each k step while the previous one computes (or,
//!   single-buffered, after it: fewer registers);
//! - a strided input gradient runs one tiled launch per stride phase, each over the taps that
//!   reach its positions.
//!
//! Split results are summed afterwards in split order, so every result is deterministic.

use burn_convpool_kernels::conv::{self, ConvArgsLaunch, GemmArgsLaunch, GemmKind, PhaseLaunch};
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim};

use crate::spec::{ConvGeometry, points};

use super::packing::Packing;
use super::tensor::{
    LaunchError, MAX_CUBES_PER_DIM, accumulator_type, address_type, axes, contiguous, dims5,
    elementwise, empty, entry, float_type, grid, table, zeros,
};

// The register blocks below were sized on CI's CPU Vulkan driver and are provisional: the GPU
// report's rows named in each comment decide them (`benches/REPORT-*.md`), and the tuner
// times Burn's kernels and the spread launch beside them on every device.

/// Below this `n` or `k`, the direct schedule beats a mostly empty tile.
const DIRECT_BELOW: usize = 16;
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
/// Output channels one unit of the direct weight-gradient schedule computes at most.
const DIRECT_WEIGHT_BLOCK: usize = 16;
/// Weights (output channels x input channels x kernel row) one unit of the direct
/// weight-gradient schedule keeps in registers; decided by `resnet50_1x1_reduce` and
/// `resnet_3x3_*` grad_weight.
const DIRECT_WEIGHT_OUTPUTS: usize = 256;
/// Output positions the direct weight-gradient schedule steps along W at a time, sharing their
/// input loads at the cost of live values; decided by `resnet_3x3_28` grad_weight.
const DIRECT_WEIGHT_W: usize = 2;
/// Widest kernel row the direct weight-gradient schedule keeps in registers; wider rows take the
/// split schedule; decided by `audio_conv1d_k9` grad_weight (9 taps).
const DIRECT_WEIGHT_KERNEL_W: usize = 11;
/// Widest kernel row the direct forward and input-gradient schedules keep comptime (the
/// common 1, 3, 5 and 7).
const DIRECT_KERNEL_W: usize = 7;
/// Widest stride along W at which the direct forward and weight gradient share loaded input
/// values between neighbouring positions ([`neighbours_share`]).
const SHARED_ROW_MAX_STRIDE: usize = 2;
/// Weight gradients with at most this many outputs per group use the direct schedule (the
/// split one for kernels wider than [`DIRECT_WEIGHT_KERNEL_W`]).
const SPLIT_MAX_OUTPUTS: usize = 1024;
/// Units a split-schedule launch aims for.
const SPLIT_TARGET_UNITS: usize = 65_536;
/// Shortest `k` range of one unit of the split schedule.
const SPLIT_MIN_K: usize = 256;
/// Cubes a split-k launch aims for: 2048 cubes of the tiled kernel's 64 units fill a large
/// GPU; decided by `resnet_3x3_7` and `resnet50_1x1_reduce` on the H100.
const TARGET_CUBES: usize = 2048;
/// Shortest `k` range worth a split of its own in a weight gradient (`k` = batch x positions).
const MIN_K_PER_SPLIT: usize = 1024;
/// The same for forward and input-gradient GEMMs (`k` = channels x taps): 8 tile steps.
const MIN_K_PER_SPLIT_TILED: usize = 128;
/// Most stride phases a tiled input gradient runs as launches of their own; more (large
/// strides, each phase a launch) run as one launch over every position, which divides by the
/// stride at each load.
const MAX_PHASES: usize = 64;

fn conv_args(geometry: &ConvGeometry) -> ConvArgsLaunch {
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
    )
}

/// `(m, n, k)` of one group's GEMM of `kind` (see the table in `burn_convpool_kernels::conv`).
fn gemm_sizes(geometry: &ConvGeometry, kind: GemmKind) -> (usize, usize, usize) {
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
    n < DIRECT_BELOW || k < DIRECT_BELOW
}

/// The last axis of the side a forward (output) or input-gradient (input) GEMM writes.
fn written_w(geometry: &ConvGeometry, kind: GemmKind) -> usize {
    if kind == GemmKind::Forward {
        geometry.out_size[2]
    } else {
        geometry.in_size[2]
    }
}

/// Whether the GEMM of `kind` runs the tiled schedule by default, whose `prefetch` variant
/// loads the next k step before the current one's products.
pub fn is_tiled(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    match kind {
        GemmKind::Weight => weight_is_tiled(geometry),
        _ => !is_direct(geometry, kind),
    }
}

/// A group's channels along the GEMM's channel side: `n` (output channels of a forward, input
/// channels of an input gradient) or a weight gradient's `m` (its output channels).
fn channel_side(geometry: &ConvGeometry, kind: GemmKind) -> usize {
    let (m, n, _) = gemm_sizes(geometry, kind);
    if kind == GemmKind::Weight { m } else { n }
}

/// How our kernels run a pass; the tuner's candidates among ours differ only here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The untiled schedule also where the tiled one is the default: direct, or for a weight
    /// gradient with kernel rows wider than [`DIRECT_WEIGHT_KERNEL_W`] split.
    pub direct: bool,
    /// The direct schedule's launch.
    pub packing: Packing,
    /// The tiled schedule double-buffered.
    pub prefetch: bool,
}

impl Schedule {
    /// The shape's default schedule, packed and double-buffered.
    pub const DEFAULT: Self = Self {
        direct: false,
        packing: Packing::Packed,
        prefetch: true,
    };
}

/// Whether the untiled schedule is worth timing against the tiled default of the GEMM of
/// `kind`: always for a forward, for an input gradient at unit stride or whose stride phases
/// meet more than one tap of a comptime row, and for a weight gradient whose kernel row the
/// direct schedule keeps in registers, where a unit's loads serve several products; otherwise
/// only where a group's channel side (`n`, or a weight gradient's `m`) is at most one tile,
/// since wider sides share the tiled kernel's gathers among many columns (the case of
/// `resnet50_1x1_proj_s2` grad_input).
pub fn untiled_may_win(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    let always = match kind {
        GemmKind::Forward => true,
        GemmKind::Data => geometry.stride == [1; 3] || row_taps(geometry, kind) > 1,
        GemmKind::Weight => geometry.kernel[2] <= DIRECT_WEIGHT_KERNEL_W,
    };
    is_tiled(geometry, kind) && (always || channel_side(geometry, kind) <= conv::TILE_N)
}

/// Whether [`Packing::Spread`] changes [`gemm`]'s launch: the direct schedule over rows
/// longer than one position (the tiled schedule has one launch shape).
pub fn spreads(geometry: &ConvGeometry, kind: GemmKind) -> bool {
    is_direct(geometry, kind) && written_w(geometry, kind) > 1
}

/// Our forward pass (`kind` `Forward`: `lhs` = x, `rhs` = weight) or input gradient (`Data`:
/// `lhs` = output gradient, `rhs` = weight): `out = lhs (*) rhs [+ bias]`, on the schedule
/// `schedule` picks (spread, a unit of the direct schedule computes one position:
/// [`super::packing`]).
pub fn gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: CubeTensor,
    rhs: CubeTensor,
    bias: Option<CubeTensor>,
    schedule: Schedule,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&lhs)?;
    float_type(&rhs)?;
    let (lhs, rhs) = (contiguous(lhs), contiguous(rhs));
    let bias = bias.map(contiguous);
    let out_dims = if kind == GemmKind::Forward {
        geometry.out_shape()
    } else {
        geometry.in_shape()
    };
    let out = empty(&lhs, &out_dims, lhs.dtype);
    if out.meta.num_elements() == 0 {
        return Ok(out);
    }
    let (m, n, k) = gemm_sizes(geometry, kind);
    if schedule.direct || is_direct(geometry, kind) {
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
        let block_n = match schedule.packing {
            Packing::Packed => {
                n.min((DIRECT_OUTPUTS / phase_w).clamp(DIRECT_BLOCK, DIRECT_SHORT_ROW_BLOCK))
            }
            Packing::Spread => n.min(DIRECT_BLOCK),
        };
        let block_w = match schedule.packing {
            Packing::Packed => phase_w.clamp(1, (DIRECT_OUTPUTS / block_n).min(DIRECT_W)),
            Packing::Spread => 1,
        };
        let row_units = phases * phase_w.div_ceil(block_w);
        let units = geometry.groups * n.div_ceil(block_n) * (m / side_w) * row_units;
        let (cube_count, cube_dim) = elementwise(&out, units);
        conv::conv_gemm_direct::launch(
            &out.client,
            cube_count,
            cube_dim,
            address_type(&[&lhs, &rhs, &out]),
            lhs.into_tensor_arg(),
            rhs.into_tensor_arg(),
            bias.map(|bias| bias.into_tensor_arg()).into(),
            out.clone().into_tensor_arg(),
            conv_args(geometry),
            GemmArgsLaunch::new(m, n, k, k, 0),
            kind,
            block_n,
            block_w,
            geometry.stride == [1; 3],
            row_taps,
            row_stride(geometry, kind, row_taps),
            [dtype, accumulator_type(dtype)],
        );
    } else {
        let parts = match kind {
            GemmKind::Data => data_parts(geometry, &lhs)?,
            _ => {
                let taps: Vec<Vec<usize>> = points(geometry.kernel).map(Vec::from).collect();
                let k_table = table(&lhs, &k_digits(geometry.in_per_group(), &taps)?);
                vec![Part::whole(m, k, k_table, geometry.out_size)]
            }
        };
        tiled(
            geometry,
            kind,
            &lhs,
            &rhs,
            &parts,
            bias,
            &out,
            MIN_K_PER_SPLIT_TILED,
            schedule.prefetch,
        )?;
    }
    Ok(out)
}

/// One tiled launch's share of a GEMM: its rows (`m`), its reduction (`k`, and for the
/// forward and input-gradient GEMMs the digits of each `k` in `k_table`), and the positions
/// an input gradient's rows run over (`first + step * j`, `j < count`; `exact`: one stride
/// phase, its taps' reaches offset by `back`).
struct Part {
    m: usize,
    k: usize,
    k_table: CubeTensor,
    first: [usize; 3],
    step: [usize; 3],
    count: [usize; 3],
    back: [usize; 3],
    exact: bool,
}

impl Part {
    /// The whole GEMM in one part, its rows every position of a side of size `size`.
    fn whole(m: usize, k: usize, k_table: CubeTensor, size: [usize; 3]) -> Self {
        Self {
            m,
            k,
            k_table,
            first: [0; 3],
            step: [1; 3],
            count: size,
            back: [0; 3],
            exact: false,
        }
    }
}

/// The `k` table of a forward or input-gradient GEMM: for each `k` (a group's `channels`
/// times `taps`), the channel then the tap's digits (`[kd, kh, kw]`, and an input gradient's
/// reaches), so the tiled kernel's loads need no divisions.
fn k_digits(channels: usize, taps: &[Vec<usize>]) -> Result<Vec<u32>, LaunchError> {
    let width = 1 + taps.first().map_or(0, Vec::len);
    let mut digits = Vec::with_capacity(width * channels * taps.len());
    for channel in 0..channels {
        for tap in taps {
            digits.push(entry(channel)?);
            for &value in tap {
                digits.push(entry(value)?);
            }
        }
    }
    Ok(digits)
}

/// The input gradient's parts: one per stride phase that holds input positions, over the taps
/// that reach them ([`ConvGeometry::data_phase`]; a phase that no tap reaches is a part with
/// no `k`, which writes zeros or the bias), each loading with no division. More than
/// [`MAX_PHASES`] phases are one part over every position and tap. Each `k`'s digits are
/// `[kd, kh, kw, reach d, reach h, reach w, 0]` after its channel.
fn data_parts(geometry: &ConvGeometry, lhs: &CubeTensor) -> Result<Vec<Part>, LaunchError> {
    let channels = geometry.out_per_group();
    let phases: usize = geometry.stride.iter().product();
    if phases > MAX_PHASES {
        let taps: Vec<Vec<usize>> = points(geometry.kernel)
            .map(|[d, h, w]| vec![d, h, w, 0, 0, 0, 0])
            .collect();
        let k_table = table(lhs, &k_digits(channels, &taps)?);
        let m = geometry.batch * geometry.in_volume();
        return Ok(vec![Part::whole(
            m,
            channels * taps.len(),
            k_table,
            geometry.in_size,
        )]);
    }
    let mut parts = Vec::new();
    for first in points(geometry.stride) {
        let axes: [_; 3] = core::array::from_fn(|axis| geometry.data_phase(axis, first[axis]));
        let count = axes.each_ref().map(|axis| axis.count);
        if count.contains(&0) {
            continue;
        }
        // The smallest offset that makes every reach (`shift + back`) non-negative.
        let back = axes.each_ref().map(|axis| {
            let lowest = axis.taps.iter().map(|&(_, shift)| shift).min().unwrap_or(0);
            usize::try_from(-lowest.min(0)).unwrap_or(usize::MAX)
        });
        // Non-negative by `back`.
        let reach = |axis: usize, shift: i128| (shift + back[axis] as i128) as usize;
        let mut taps = Vec::new();
        for &(d, shift_d) in &axes[0].taps {
            for &(h, shift_h) in &axes[1].taps {
                for &(w, shift_w) in &axes[2].taps {
                    let (rd, rh, rw) = (reach(0, shift_d), reach(1, shift_h), reach(2, shift_w));
                    taps.push(vec![d, h, w, rd, rh, rw, 0]);
                }
            }
        }
        for value in back {
            entry(value)?;
        }
        parts.push(Part {
            m: geometry.batch * count.iter().product::<usize>(),
            k: channels * taps.len(),
            k_table: table(lhs, &k_digits(channels, &taps)?),
            first,
            step: geometry.stride,
            count,
            back,
            exact: true,
        });
    }
    Ok(parts)
}

fn tile_cube_dim() -> CubeDim {
    CubeDim::new_2d(conv::TILE_UNITS, conv::TILE_UNITS)
}

/// Our weight gradient: `weight_grad = out_grad (*) x`.
pub fn weight_gemm(
    geometry: &ConvGeometry,
    out_grad: CubeTensor,
    x: CubeTensor,
    schedule: Schedule,
) -> Result<CubeTensor, LaunchError> {
    float_type(&x)?;
    float_type(&out_grad)?;
    let (out_grad, x) = (contiguous(out_grad), contiguous(x));
    let (m, _, k) = gemm_sizes(geometry, GemmKind::Weight);
    if k == 0 {
        return Ok(zeros(&x, &geometry.weight_shape(), x.dtype));
    }
    let out = empty(&x, &geometry.weight_shape(), x.dtype);
    if schedule.direct || !weight_is_tiled(geometry) {
        if geometry.kernel[2] <= DIRECT_WEIGHT_KERNEL_W {
            weight_direct(geometry, out_grad, x, &out)?;
        } else {
            weight_split(geometry, out_grad, x, &out, false)?;
        }
        return Ok(out);
    }

    let part = Part::whole(m, k, table(&x, &[]), geometry.out_size);
    tiled(
        geometry,
        GemmKind::Weight,
        &out_grad,
        &x,
        &[part],
        None,
        &out,
        MIN_K_PER_SPLIT,
        schedule.prefetch,
    )?;
    Ok(out)
}

/// Whether the weight gradient runs the tiled schedule (more outputs per group than the
/// direct and split schedules take).
fn weight_is_tiled(geometry: &ConvGeometry) -> bool {
    let (m, n, _) = gemm_sizes(geometry, GemmKind::Weight);
    m * n > SPLIT_MAX_OUTPUTS
}

/// The tiled schedule of the GEMM of `kind` into `out`, one part after another (an input
/// gradient's stride phases), `k` split over more cubes when there are few tiles (late, small
/// layers; weight gradients' long reductions), the splits summed in order.
#[allow(clippy::too_many_arguments)]
fn tiled(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: &CubeTensor,
    rhs: &CubeTensor,
    parts: &[Part],
    bias: Option<CubeTensor>,
    out: &CubeTensor,
    min_k_per_split: usize,
    prefetch: bool,
) -> Result<(), LaunchError> {
    let dtype = float_type(out)?;
    let (_, n, _) = gemm_sizes(geometry, kind);
    let narrow = channel_side(geometry, kind) <= conv::NARROW_TILE;
    let (tile_m, tile_n) = conv::tile_shape(kind, narrow);
    let n_tiles = n.div_ceil(tile_n);
    // The longest reduction sets the splits. Every part writes all of them (a shorter part's
    // last splits hold zeros), so each partial result is whole.
    let Some(longest) = parts.iter().max_by_key(|part| part.k) else {
        return Ok(());
    };
    let tiles = longest.m.div_ceil(tile_m) * n_tiles * geometry.groups;
    let splits = split_k(longest.k, tiles, TARGET_CUBES, min_k_per_split);
    with_splits(out, splits, |target| {
        for part in parts {
            let k_per_split = split_len(part.k, splits);
            // Long `m` (batch x positions) runs as several launches over consecutive tile
            // ranges.
            let m_tiles = part.m.div_ceil(tile_m);
            let per_launch = m_tiles_per_launch();
            for first in (0..m_tiles).step_by(per_launch) {
                let cube_count = CubeCount::Static(
                    grid("m tiles", (m_tiles - first).min(per_launch))?,
                    grid("n tiles", n_tiles)?,
                    grid("groups x splits", geometry.groups * splits)?,
                );
                conv::conv_gemm_tiled::launch(
                    &target.client,
                    cube_count,
                    tile_cube_dim(),
                    address_type(&[lhs, rhs, target]),
                    lhs.clone().into_tensor_arg(),
                    rhs.clone().into_tensor_arg(),
                    part.k_table.clone().into_tensor_arg(),
                    bias.clone().map(|bias| bias.into_tensor_arg()).into(),
                    target.clone().into_tensor_arg(),
                    conv_args(geometry),
                    GemmArgsLaunch::new(part.m, n, part.k, k_per_split, first),
                    PhaseLaunch::new(
                        axes(part.first),
                        axes(part.step),
                        axes(part.count),
                        axes(part.back),
                    ),
                    kind,
                    part.exact,
                    prefetch,
                    narrow,
                    [dtype, accumulator_type(dtype)],
                );
            }
        }
        Ok(())
    })
}

/// `m` tiles one tiled launch covers: a grid dimension holds at most [`MAX_CUBES_PER_DIM`]
/// cubes. The unit tests lower it, so the chunked launches run on tensors that fit a CPU
/// Vulkan driver's buffers (wgpu binds at most 128 MiB there, a quarter of what 65,535 tiles
/// of 16 channels take).
fn m_tiles_per_launch() -> usize {
    #[cfg(test)]
    return M_TILES_PER_LAUNCH.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(test))]
    MAX_CUBES_PER_DIM
}

#[cfg(test)]
static M_TILES_PER_LAUNCH: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(MAX_CUBES_PER_DIM);

/// Splits of a `k`-long reduction: enough that `parallel` independent outputs times the
/// splits reach `target`, none shorter than `min_len`, none empty once each is a whole number
/// of tile steps ([`split_len`]).
fn split_k(k: usize, parallel: usize, target: usize, min_len: usize) -> usize {
    let splits = target
        .div_ceil(parallel.max(1))
        .clamp(1, (k / min_len).max(1));
    k.div_ceil(split_len(k, splits)).max(1)
}

/// The length of each of `splits` splits of a `k`-long reduction: a whole number of tile
/// steps, at least one.
fn split_len(k: usize, splits: usize) -> usize {
    k.div_ceil(splits)
        .next_multiple_of(conv::TILE_K)
        .max(conv::TILE_K)
}

/// Run `launch` into `out` directly, or into `splits` stacked partial results that are then
/// summed into `out` in split order (deterministic).
fn with_splits(
    out: &CubeTensor,
    splits: usize,
    launch: impl FnOnce(&CubeTensor) -> Result<(), LaunchError>,
) -> Result<(), LaunchError> {
    if splits == 1 {
        return launch(out);
    }
    let dtype = float_type(out)?;
    let len = out.meta.num_elements();
    let partials = empty(out, &[splits * len], out.dtype);
    launch(&partials)?;
    let (cube_count, cube_dim) = elementwise(out, len);
    conv::sum_splits::launch(
        &out.client,
        cube_count,
        cube_dim,
        address_type(&[&partials, out]),
        partials.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        splits,
        [dtype, accumulator_type(dtype)],
    );
    Ok(())
}

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

/// The split schedule into `out`: whole output rows per split, enough splits to fill the
/// device. With `ones_rhs`, `x` is unused and this is the bias gradient.
fn weight_split(
    geometry: &ConvGeometry,
    out_grad: CubeTensor,
    x: CubeTensor,
    out: &CubeTensor,
    ones_rhs: bool,
) -> Result<(), LaunchError> {
    let dtype = float_type(out)?;
    let (m, n, k) = gemm_sizes(geometry, GemmKind::Weight);
    let outputs = geometry.groups * m * n;
    let (splits, k_per_split) = row_splits(geometry, k, outputs);
    with_splits(out, splits, |target| {
        let (cube_count, cube_dim) = elementwise(target, outputs * splits);
        conv::conv_weight_split::launch(
            &target.client,
            cube_count,
            cube_dim,
            address_type(&[&out_grad, &x, target]),
            out_grad.into_tensor_arg(),
            x.into_tensor_arg(),
            target.clone().into_tensor_arg(),
            conv_args(geometry),
            GemmArgsLaunch::new(m, n, k, k_per_split, 0),
            ones_rhs,
            [dtype, accumulator_type(dtype)],
        );
        Ok(())
    })
}

/// Whether neighbouring positions along W read some of the same input values, at a stride
/// small enough to load them as one run: dilation 1, a kernel row wider than the stride, and
/// a stride of at most [`SHARED_ROW_MAX_STRIDE`] (a 1x1 stride 2 would load values no
/// position reads).
fn neighbours_share(geometry: &ConvGeometry) -> bool {
    let [stride, dilation, width] = [geometry.stride[2], geometry.dilation[2], geometry.kernel[2]];
    dilation == 1 && width > stride && stride <= SHARED_ROW_MAX_STRIDE
}

/// The direct schedule's comptime kernel row, for kernels up to [`DIRECT_KERNEL_W`] wide at
/// dilation 1 along W: the taps one position meets, all of the row for a forward at unit
/// stride or where [`neighbours_share`], every stride-th for an input gradient (0: a run-time
/// row).
fn row_taps(geometry: &ConvGeometry, kind: GemmKind) -> usize {
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

/// The direct weight-gradient schedule into `out`: a unit per block of input channels,
/// kernel row, block of output channels and split of whole output rows, enough splits to fill
/// the device ([`weight_blocks`] sizes the blocks).
fn weight_direct(
    geometry: &ConvGeometry,
    out_grad: CubeTensor,
    x: CubeTensor,
    out: &CubeTensor,
) -> Result<(), LaunchError> {
    let dtype = float_type(out)?;
    let (m, n, k) = gemm_sizes(geometry, GemmKind::Weight);
    let blocks = weight_blocks(geometry);
    let units = geometry.groups
        * geometry.in_per_group().div_ceil(blocks.c)
        * geometry.kernel[0]
        * geometry.kernel[1]
        * m.div_ceil(blocks.m);
    let (splits, k_per_split) = row_splits(geometry, k, units);
    with_splits(out, splits, |target| {
        let (cube_count, cube_dim) = elementwise(target, units * splits);
        conv::conv_weight_direct::launch(
            &target.client,
            cube_count,
            cube_dim,
            address_type(&[&out_grad, &x, target]),
            out_grad.into_tensor_arg(),
            x.into_tensor_arg(),
            target.clone().into_tensor_arg(),
            conv_args(geometry),
            GemmArgsLaunch::new(m, n, k, k_per_split, 0),
            blocks.m,
            blocks.c,
            geometry.kernel[2],
            blocks.w,
            blocks.stride_w,
            [dtype, accumulator_type(dtype)],
        );
        Ok(())
    })
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
    let out_grad = contiguous(out_grad);
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
    weight_split(&geometry, out_grad.clone(), out_grad, &out, true)?;
    Ok(out)
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use crate::{ConvNdOptions, conv2d};

    /// A forward and input gradient whose `m` takes several tiled launches (3 tiles each)
    /// match Flex, with a bias, every position of the last, partial launch included.
    #[test]
    fn long_m_runs_as_several_launches() {
        // Our kernels only: the tuner could pick Burn's, which has no such launches. This is
        // the crate's only test on a CubeCL device, so it is the first to read the pin.
        // SAFETY: set before any thread of this test binary reads the environment.
        unsafe { std::env::set_var("BURN_CONVPOOL_CONV_KERNELS", "ours") };
        super::M_TILES_PER_LAUNCH.store(3, std::sync::atomic::Ordering::Relaxed);
        let values = |n: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * scale)
                .collect()
        };
        // m = 2 x 17 x 19 = 646 positions: 11 tiles of 64, so 4 launches; n = k-side 16+.
        let (x_dims, w_dims) = ([2, 16, 17, 19], [24, 16, 3, 3]);
        let x = values(x_dims.iter().product(), 0.01);
        let weight = values(w_dims.iter().product(), 0.02);
        let bias = values(24, 0.1);
        let run = |device: &Device| {
            let x =
                Tensor::<4>::from_data(TensorData::new(x.clone(), x_dims), device).require_grad();
            let weight = Tensor::<4>::from_data(TensorData::new(weight.clone(), w_dims), device);
            let bias = Tensor::<1>::from_data(TensorData::new(bias.clone(), [24]), device);
            let options = ConvNdOptions::default().with_padding([1, 1]);
            let out = conv2d(x.clone(), weight, Some(bias), options);
            let grads = (out.clone() * out.clone()).sum().backward();
            let x_grad = x.grad(&grads).unwrap();
            [out.into_data(), x_grad.into_data()].map(|d| d.try_to_vec::<f32>().unwrap())
        };
        let expected = run(&Device::flex().autodiff());
        let actual = run(&Device::wgpu(Default::default()).autodiff());
        for (what, (actual, expected)) in ["forward", "x grad"]
            .iter()
            .zip(actual.iter().zip(&expected))
        {
            assert_eq!(actual.len(), expected.len());
            for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
                assert!(
                    (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "{what}[{i}]: wgpu {a} vs flex {e}"
                );
            }
        }
    }
}

//! The tiled schedule's launcher: one launch per part (an input gradient's stride phases), each
//! split along `m` into launches a grid holds and along `k` over more cubes when tiles are few.

use burn_convpool_kernels::conv::{self, GemmArgsLaunch, GemmKind, PhaseLaunch};
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim};

use crate::spec::{ConvGeometry, points};

use super::{
    Sides, SplitRepair, channel_side, conv_args, gemm_sizes, meets_padding, repairs_within,
    with_splits,
};
use crate::cube::choice::{Buffering, ConvSchedule, OurKernels};
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{
    LaunchError, MAX_CUBES_PER_DIM, accumulator_type, address_type, axes, entry, float_type, grid,
    table, table_from_recipe,
};

/// Cubes a split-k launch aims for: 2048 cubes of the tiled kernel's 64 units fill a large
/// GPU; the `resnet_3x3_7` and `resnet50_1x1_reduce` rows of a GPU report decide it.
const TARGET_CUBES: usize = 2048;

/// Shortest `k` range worth a split of its own in a weight gradient (`k` = batch x positions).
const MIN_K_PER_SPLIT: usize = 1024;

/// The same for forward and input-gradient GEMMs (`k` = channels x taps): 8 tile steps.
const MIN_K_PER_SPLIT_TILED: usize = 128;

/// Most stride phases a tiled input gradient runs as launches of their own; more (large
/// strides, each phase a launch) run as one launch over every position, which divides by the
/// stride at each load.
const MAX_PHASES: usize = 64;

/// The tiled schedule of a forward or input gradient into `out` (an input gradient one part
/// per stride phase). Returns whether its kernels repaired the result ([`repairs_within`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: &CubeTensor,
    rhs: &CubeTensor,
    bias: Option<CubeTensor>,
    out: &CubeTensor,
    sides: &Sides,
    ours: OurKernels,
) -> Result<bool, LaunchError> {
    let (m, _, k) = gemm_sizes(geometry, kind);
    let parts = match kind {
        GemmKind::Data => data_parts(geometry, lhs)?,
        _ => {
            let taps: Vec<Vec<usize>> = points(geometry.kernel).map(Vec::from).collect();
            let k_table = k_table(lhs, geometry.in_per_group(), &taps)?;
            vec![Part::whole(m, k, k_table, geometry.out_size)]
        }
    };
    tiled(
        geometry,
        kind,
        lhs,
        rhs,
        &parts,
        bias,
        out,
        sides,
        MIN_K_PER_SPLIT_TILED,
        ours,
    )
}

/// The tiled schedule of a weight gradient into `out`.
pub(super) fn weight(
    geometry: &ConvGeometry,
    out_grad: &CubeTensor,
    x: &CubeTensor,
    out: &CubeTensor,
    sides: &Sides,
    ours: OurKernels,
) -> Result<bool, LaunchError> {
    let (m, _, k) = gemm_sizes(geometry, GemmKind::Weight);
    let part = Part::whole(m, k, table(x, &[]), geometry.out_size);
    tiled(
        geometry,
        GemmKind::Weight,
        out_grad,
        x,
        &[part],
        None,
        out,
        sides,
        MIN_K_PER_SPLIT,
        ours,
    )
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

/// The `k` table of [`k_digits`] on `like`'s device, cached under its channels and taps, so a
/// call of a shape seen before neither rebuilds it nor hashes it whole.
fn k_table(
    like: &CubeTensor,
    channels: usize,
    taps: &[Vec<usize>],
) -> Result<CubeTensor, LaunchError> {
    let mut recipe = vec![entry(channels)?];
    for tap in taps {
        recipe.push(entry(tap.len())?);
        for &value in tap {
            recipe.push(entry(value)?);
        }
    }
    table_from_recipe(like, &recipe, || k_digits(channels, taps))
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
        let k_table = k_table(lhs, channels, &taps)?;
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
            k_table: k_table(lhs, channels, &taps)?,
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

/// The tiled schedule of the GEMM of `kind` into `out`, one part after another (an input
/// gradient's stride phases), `k` split over more cubes when there are few tiles (late, small
/// layers; weight gradients' long reductions), the splits summed in order; `ours` sets the
/// buffering and the launch size.
#[allow(clippy::too_many_arguments)]
fn tiled(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: &CubeTensor,
    rhs: &CubeTensor,
    parts: &[Part],
    bias: Option<CubeTensor>,
    out: &CubeTensor,
    sides: &Sides,
    min_k_per_split: usize,
    ours: OurKernels,
) -> Result<bool, LaunchError> {
    let prefetch = ours.conv != ConvSchedule::Tiled(Buffering::Single);
    let dtype = float_type(out)?;
    let (_, n, _) = gemm_sizes(geometry, kind);
    let narrow = channel_side(geometry, kind) <= conv::NARROW_TILE;
    let (tile_m, tile_n) = conv::tile_shape(kind, narrow);
    let n_tiles = n.div_ceil(tile_n);
    // The longest reduction sets the splits. Every part writes all of them (a shorter part's
    // last splits hold zeros), so each partial result is whole.
    let Some(longest) = parts.iter().max_by_key(|part| part.k) else {
        return Ok(false);
    };
    let tiles = longest.m.div_ceil(tile_m) * n_tiles * geometry.groups;
    let splits = split_k(longest.k, tiles, TARGET_CUBES, min_k_per_split);
    // Where the padding may meet a non-finite operand, a unit repairs what it stores (or the
    // sum of the splits does), if its loop budget allows.
    let meets = meets_padding(geometry, kind);
    let own = longest.k.div_ceil(conv::TILE_K) + 1;
    let elements = tile_m * tile_n / (conv::TILE_UNITS as usize).pow(2);
    let repair = meets && splits == 1 && repairs_within(geometry, kind, own, elements);
    let split_repair = meets.then_some(SplitRepair {
        geometry,
        sides,
        kind,
        lhs,
        rhs,
        bias: bias.as_ref(),
    });
    let summed = with_splits(out, splits, split_repair, |target| {
        for part in parts {
            let k_per_split = split_len(part.k, splits);
            // Long `m` (batch x positions) runs as several launches over consecutive tile
            // ranges: a grid dimension holds at most `MAX_CUBES_PER_DIM` cubes.
            let m_tiles = part.m.div_ceil(tile_m);
            let per_launch = ours.max_tiles_per_launch.clamp(1, MAX_CUBES_PER_DIM);
            for first in (0..m_tiles).step_by(per_launch) {
                let cube_count = CubeCount::Static(
                    grid("m tiles", (m_tiles - first).min(per_launch))?,
                    grid("n tiles", n_tiles)?,
                    grid("groups x splits", geometry.groups * splits)?,
                );
                note(Launch::Kernel("conv_gemm_tiled"));
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
                    conv_args(geometry, sides),
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
                    repair,
                    [dtype, accumulator_type(dtype)],
                );
            }
        }
        Ok(())
    })?;
    Ok(repair || summed)
}

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

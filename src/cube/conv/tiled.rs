//! The tiled schedule's launcher: one launch for the GEMM (an input gradient's stride phases
//! together), split along `m` into launches a grid holds and along `k` over more cubes when
//! tiles are few.

use burn_convpool_kernels::conv::{self, GemmArgsLaunch, GemmKind, Handoff, PHASE_ENTRIES};
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim};

use crate::spec::{Activation, ConvGeometry, points};

use super::{
    Sides, SplitRepair, activation, channel_side, conv_args, gemm_sizes, handoff, meets_padding,
    repairs_within, with_splits,
};
use crate::cube::choice::{Buffering, ConvSchedule, OurKernels};
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{
    LaunchError, MAX_CUBES_PER_DIM, accumulator_type, address_type, arrivals, empty, entry,
    float_type, grid, table, table_from_recipe,
};

/// Cubes a split-k launch aims for: 2048 cubes of the tiled kernel's 64 units fill a large
/// GPU; the `resnet_3x3_7` and `resnet50_1x1_reduce` rows of a GPU report decide it.
const TARGET_CUBES: usize = 2048;

/// Shortest `k` range worth a split of its own in a weight gradient (`k` = batch x positions).
const MIN_K_PER_SPLIT: usize = 1024;

/// The same for forward and input-gradient GEMMs (`k` = channels x taps): 8 tile steps.
const MIN_K_PER_SPLIT_TILED: usize = 128;

/// Most stride phases a tiled input gradient computes as phases of their own, each over the
/// taps that reach it; more (large strides, most phases a few positions) run as one GEMM over
/// every position, which divides by the stride at each load.
const MAX_PHASES: usize = 64;

/// The tiled schedule of a forward or input gradient into `out` (an input gradient one part
/// per stride phase, all in one launch). Returns whether its kernels repaired the result
/// ([`repairs_within`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: &CubeTensor,
    rhs: &CubeTensor,
    (bias, activation): (Option<CubeTensor>, Option<Activation>),
    out: &CubeTensor,
    sides: &Sides,
    ours: OurKernels,
) -> Result<bool, LaunchError> {
    let (m, _, k) = gemm_sizes(geometry, kind);
    let parts = match kind {
        GemmKind::Data => data_parts(geometry, lhs)?,
        _ => {
            let taps: Vec<Vec<usize>> = points(geometry.kernel).map(Vec::from).collect();
            let k_table = k_table(lhs, geometry.in_per_group(), &[taps])?;
            Parts::whole(m, k, k_table)
        }
    };
    tiled(
        geometry,
        kind,
        lhs,
        rhs,
        parts,
        (bias, activation),
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
    tiled(
        geometry,
        GemmKind::Weight,
        out_grad,
        x,
        Parts::whole(m, k, table(x, &[])),
        (None, None),
        out,
        sides,
        MIN_K_PER_SPLIT,
        ours,
    )
}

/// A tiled GEMM's rows and reductions: the whole GEMM, or an exact input gradient's stride
/// phases, which one launch computes together (a phase table tells each cube its phase).
struct Parts {
    /// Rows of the whole GEMM (every input position of an input gradient).
    m: usize,
    /// The whole GEMM's `k`, or each phase's.
    parts: Vec<Part>,
    /// The digits of each `k` (the forward and input-gradient GEMMs), the phases' tables one
    /// after another.
    k_table: CubeTensor,
    /// Whether `parts` are stride phases, each its own positions and taps.
    phased: bool,
}

/// One stride phase of an input gradient (or the whole GEMM): its rows (`m`: the batch times
/// the positions `first + stride * j`, `j < count`, per axis), its reduction (`k`, from
/// `k_base` in the `k` table) and the offset `back` that makes its taps' reaches non-negative.
struct Part {
    m: usize,
    k: usize,
    k_base: usize,
    first: [usize; 3],
    count: [usize; 3],
    back: [usize; 3],
}

impl Parts {
    /// The whole GEMM in one part.
    fn whole(m: usize, k: usize, k_table: CubeTensor) -> Self {
        let part = Part {
            m,
            k,
            k_base: 0,
            first: [0; 3],
            count: [0; 3],
            back: [0; 3],
        };
        Self {
            m,
            parts: vec![part],
            k_table,
            phased: false,
        }
    }

    /// The phase table of `parts` (each [`PHASE_ENTRIES`] wide) for a launch of `splits`
    /// splits of `k`.
    fn phase_table(
        like: &CubeTensor,
        parts: &[Part],
        splits: usize,
    ) -> Result<CubeTensor, LaunchError> {
        let mut values = Vec::with_capacity(parts.len() * PHASE_ENTRIES);
        for part in parts {
            values.push(entry(part.k)?);
            values.push(entry(split_len(part.k, splits))?);
            values.push(entry(part.k_base)?);
            for axis in [part.first, part.count, part.back] {
                for value in axis {
                    values.push(entry(value)?);
                }
            }
        }
        debug_assert_eq!(values.len(), parts.len() * PHASE_ENTRIES);
        Ok(table(like, &values))
    }
}

/// The `k` table of [`k_digits`] for phases of `taps` each, one after another, on `like`'s
/// device, cached under its channels and taps, so a call of a shape seen before neither
/// rebuilds it nor hashes it whole.
fn k_table(
    like: &CubeTensor,
    channels: usize,
    phases: &[Vec<Vec<usize>>],
) -> Result<CubeTensor, LaunchError> {
    let mut recipe = vec![entry(channels)?, entry(phases.len())?];
    for taps in phases {
        recipe.push(entry(taps.len())?);
        for tap in taps {
            recipe.push(entry(tap.len())?);
            for &value in tap {
                recipe.push(entry(value)?);
            }
        }
    }
    table_from_recipe(like, &recipe, || {
        let mut digits = Vec::new();
        for taps in phases {
            digits.extend(k_digits(channels, taps)?);
        }
        Ok(digits)
    })
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
fn data_parts(geometry: &ConvGeometry, lhs: &CubeTensor) -> Result<Parts, LaunchError> {
    let channels = geometry.out_per_group();
    let phases: usize = geometry.stride.iter().product();
    let m = geometry.batch * geometry.in_volume();
    if phases > MAX_PHASES {
        let taps: Vec<Vec<usize>> = points(geometry.kernel)
            .map(|[d, h, w]| vec![d, h, w, 0, 0, 0, 0])
            .collect();
        let k = channels * taps.len();
        let k_table = k_table(lhs, channels, &[taps])?;
        return Ok(Parts::whole(m, k, k_table));
    }
    let mut parts = Vec::new();
    let mut phase_taps = Vec::new();
    let mut k_base = 0;
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
        let k = channels * taps.len();
        parts.push(Part {
            m: geometry.batch * count.iter().product::<usize>(),
            k,
            k_base,
            first,
            count,
            back,
        });
        k_base += k;
        phase_taps.push(taps);
    }
    Ok(Parts {
        m,
        parts,
        k_table: k_table(lhs, channels, &phase_taps)?,
        phased: true,
    })
}

fn tile_cube_dim() -> CubeDim {
    CubeDim::new_2d(conv::TILE_UNITS, conv::TILE_UNITS)
}

/// The tiled schedule of the GEMM of `kind` into `out` (an input gradient's stride phases in
/// one launch), `k` split over more cubes when there are few tiles (late, small layers; weight
/// gradients' long reductions), the splits summed in order; `ours` sets the buffering and the
/// launch size. The activation is applied by the kernel that stores the final result (the
/// tiled kernel, or the sum of the splits) where no repair launch follows.
#[allow(clippy::too_many_arguments)]
fn tiled(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: &CubeTensor,
    rhs: &CubeTensor,
    parts: Parts,
    (bias, activation): (Option<CubeTensor>, Option<Activation>),
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
    // The longest reduction sets the splits and the longest phase the `m` tiles. Every part
    // writes all the splits (a shorter part's last splits hold zeros), so each partial result
    // is whole.
    let (Some(longest), Some(m_tiles)) = (
        parts.parts.iter().map(|part| part.k).max(),
        parts.parts.iter().map(|part| part.m.div_ceil(tile_m)).max(),
    ) else {
        return Ok(false);
    };
    let tiles = m_tiles * n_tiles * geometry.groups;
    let splits = split_k(longest, tiles, TARGET_CUBES, min_k_per_split);
    // Where the padding may meet a non-finite operand, a unit repairs what it stores (or the
    // sum of the splits does), if its loop budget allows.
    let meets = meets_padding(geometry, kind);
    let own = longest.div_ceil(conv::TILE_K) + 1;
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
    // Phases per launch: each is a layer of `groups x splits` cubes along a grid dimension,
    // which holds at most `per_launch` (`MAX_CUBES_PER_DIM`).
    let per_launch = ours.max_tiles_per_launch.clamp(1, MAX_CUBES_PER_DIM);
    let layer = geometry.groups * splits;
    let phases_per_launch = (per_launch / layer.max(1)).max(1);
    // Split partials are not final: their sum applies the activation.
    let (slope, stored) = activation::stored(activation, splits == 1 && (repair || !meets));
    let launch = |target: &CubeTensor, handoff: Option<(&CubeTensor, Handoff, f32)>| {
        // The counters of the most tiles one launch holds.
        let counters = per_launch.min(m_tiles) * n_tiles * layer / splits
            * phases_per_launch.min(parts.parts.len());
        let arrivals = handoff.map(|_| arrivals(target, counters)).transpose()?;
        for chunk in parts.parts.chunks(phases_per_launch) {
            let (gemm_m, k_len, phase_table) = if parts.phased {
                (parts.m, 0, Some(Parts::phase_table(lhs, chunk, splits)?))
            } else {
                (chunk[0].m, chunk[0].k, None)
            };
            let k_per_split = split_len(k_len, splits);
            // Long `m` (batch x positions) runs as several launches over consecutive tile
            // ranges: a grid dimension holds at most `MAX_CUBES_PER_DIM` cubes.
            let m_tiles = chunk.iter().map(|part| part.m.div_ceil(tile_m)).max();
            let m_tiles = m_tiles.unwrap_or(0);
            for first in (0..m_tiles).step_by(per_launch) {
                let cube_count = CubeCount::Static(
                    grid("m tiles", (m_tiles - first).min(per_launch))?,
                    grid("n tiles", n_tiles)?,
                    grid("phases x groups x splits", chunk.len() * layer)?,
                );
                note(Launch::Kernel("conv_gemm_tiled"));
                conv::conv_gemm_tiled::launch(
                    &target.client,
                    cube_count,
                    tile_cube_dim(),
                    address_type(&[lhs, rhs, target, out]),
                    lhs.clone().into_tensor_arg(),
                    rhs.clone().into_tensor_arg(),
                    parts.k_table.clone().into_tensor_arg(),
                    phase_table
                        .clone()
                        .map(|table| table.into_tensor_arg())
                        .into(),
                    bias.clone().map(|bias| bias.into_tensor_arg()).into(),
                    target.clone().into_tensor_arg(),
                    handoff
                        .map(|(summed, _, _)| summed.clone().into_tensor_arg())
                        .into(),
                    arrivals.clone().map(|table| table.into_tensor_arg()).into(),
                    conv_args(geometry, sides),
                    GemmArgsLaunch::new(gemm_m, n, k_len, k_per_split, first),
                    kind,
                    prefetch,
                    narrow,
                    repair,
                    slope,
                    stored,
                    handoff.map_or(0.0, |(_, _, slope)| slope),
                    handoff.map(|(_, rule, _)| rule),
                    [dtype, accumulator_type(dtype)],
                );
            }
        }
        Ok(())
    };
    let summed = if splits > 1 && handoff::runs(out, ours.split_sum)? {
        // The last cube of each tile sums the splits: no second launch.
        let (rule, sum_slope, repaired) =
            handoff::rule(split_repair.as_ref(), activation, splits, own, elements);
        let partials = empty(out, &[splits * out.meta.num_elements()], out.dtype);
        launch(&partials, Some((out, rule, sum_slope)))?;
        repaired
    } else {
        with_splits(out, splits, (split_repair, activation), |target| {
            launch(target, None)
        })?
    };
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

//! Convolution as three implicit GEMMs, `C[m, n] = sum_k A[m, k] * B[k, n]` per group:
//!
//! | kind       | m                   | n                 | k                   | A          | B         |
//! |------------|---------------------|-------------------|---------------------|------------|-----------|
//! | [`Forward`](GemmKind::Forward) | (batch, out pos)    | out channel       | (in channel, tap)   | x (im2col) | weight    |
//! | [`Data`](GemmKind::Data) | (batch, in pos)     | in channel        | (out channel, tap)  | out_grad   | weight    |
//! | [`Weight`](GemmKind::Weight) | out channel         | (in channel, tap) | (batch, out pos)    | out_grad   | x (im2col)|
//!
//! The operands are never materialised: [`lhs_value()`] and [`rhs_value()`] gather them from the
//! contiguous NCDHW tensors, and [`store()`] scatters `C` back, so every schedule below shares one
//! home for the index formulas. `Data` also serves `conv_transpose`'s forward pass.

use cubecl::prelude::*;

use crate::axes::{Index3, flat_index, tap_reader, tap_source, unflatten, volume};

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

/// Rows of a tile of `C`.
pub const TILE_M: usize = 64;
/// Columns of a tile of `C`.
pub const TILE_N: usize = 64;
/// Depth of one step along `k`.
pub const TILE_K: usize = 16;
/// Units along each side of a cube of the tiled kernel, each computing an 8x8 block of `C`:
/// 16 shared-memory reads per 64 multiply-adds, where a 4x4 block over 16x16 units reads 8 per
/// 16; decided by the `resnet_3x3_*` rows.
pub const TILE_UNITS: u32 = 8;
/// [`TILE_UNITS`] as an index.
const UNITS: usize = TILE_UNITS as usize;
/// Rows and columns of `C` each unit computes.
const UNIT_BLOCK: usize = TILE_M / UNITS;
/// Lanes of the vectors the tiled kernel's shared tiles hold.
const LANES: usize = 4;
/// [`LANES`] as a vector size.
type Lanes = Const<4>;
/// Vectors of [`LANES`] along one row of a k-major tile's `TILE_M` values.
const VECTORS_PER_ROW: usize = TILE_M / LANES;
/// Row length of a k-major shared tile, in vectors: a row's 16 and one of padding. The loads
/// that run k-fast (B, and A of the weight gradient) store consecutive `k` from consecutive
/// units: at a row of 16 vectors (64 words) a quarter warp's 8 vector stores would all fall in
/// the same 4 banks; at 17 (68 words) they fill the 32 banks.
const TILE_ROW_VECTORS: usize = VECTORS_PER_ROW + 1;
/// Vectors of each operand one unit loads per k step.
const LOAD_VECTORS: usize = TILE_M * TILE_K / (UNITS * UNITS * LANES);
// The tiled kernel's index arithmetic assumes square tiles that the units cover exactly.
const _: () = assert!(TILE_M == TILE_N && TILE_N == UNITS * UNIT_BLOCK);
const _: () = assert!(LOAD_VECTORS * UNITS * UNITS * LANES == TILE_M * TILE_K);
// A unit's block is two vectors per tile row; the loads tile the units over (k, vector).
const _: () = assert!(UNIT_BLOCK == 2 * LANES && UNITS * LANES * 2 == TILE_M);
const _: () = assert!(UNITS * UNITS == VECTORS_PER_ROW * (TILE_K / LOAD_VECTORS));
const _: () = assert!(UNITS * UNITS == TILE_K * (VECTORS_PER_ROW / LOAD_VECTORS));

/// A tile's channel side when a group has at most this many channels there: each unit then
/// computes 4 of them instead of 8, so a group of 16-32 channels (ResNeXt's later stages)
/// does not leave half of a 64-wide tile's products idle.
pub const NARROW_TILE: usize = UNITS * LANES;

/// `(rows, columns)` of a tile of `C`: [`TILE_M`] x [`TILE_N`], or with `narrow`
/// [`NARROW_TILE`] along the channel side: `n` (forward, input gradient) or `m` (weight
/// gradient), the side each loads k-fast, whose vectors the units then cover in half the
/// steps.
pub fn tile_shape(kind: GemmKind, narrow: bool) -> (usize, usize) {
    match (narrow, kind) {
        (false, _) => (TILE_M, TILE_N),
        (true, GemmKind::Weight) => (NARROW_TILE, TILE_N),
        (true, _) => (TILE_M, NARROW_TILE),
    }
}

/// Geometry of one convolution, rank 3 (1d and 2d have unit leading axes).
#[derive(CubeLaunch, CubeType)]
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
}

/// Sizes of the GEMM of one group, the `k` range of one split (split-k runs one cube layer
/// per split and sums the partial results afterwards, in a fixed order), and the first `m`
/// tile of a tiled launch (a grid dimension holds at most 65,535 cubes, so a long `m` takes
/// several launches).
#[derive(CubeLaunch, CubeType)]
pub struct GemmArgs {
    pub m_len: usize,
    pub n_len: usize,
    pub k_len: usize,
    pub k_per_split: usize,
    pub m_tile_offset: usize,
}

/// The input positions the rows of a tiled input-gradient launch run over: `first + step * j`
/// per axis, `j < count`. A strided conv's input gradient runs one launch per stride phase
/// (positions alike modulo the stride, `step` = stride), each summing only the taps that
/// reach its positions: one launch over every position would multiply zeros for the other
/// taps (3 in 4 of the products at 3x3 stride 2). Unit stride: one phase of every position.
///
/// In a phase every tap meets the output grid, at output `j + reach - back` per axis (the
/// tap's `reach` from the `k` table, `back` making every reach non-negative), so an exact
/// launch loads with no division. Read by `Data` only.
#[derive(CubeLaunch, CubeType)]
pub struct Phase {
    pub first: Index3,
    pub step: Index3,
    pub count: Index3,
    pub back: Index3,
}

/// Entries per `k` of a forward's `k` table: `[channel, kd, kh, kw]`.
pub const FORWARD_DIGITS: usize = 4;
/// Entries per `k` of an input gradient's: `[channel, kd, kh, kw, reach d, reach h, reach w,
/// 0]`.
pub const DATA_DIGITS: usize = 8;

/// Size of the side whose positions are the rows of a forward (the output) or input-gradient
/// (the input) GEMM.
#[cube]
fn written_size(args: &ConvArgs, #[comptime] kind: GemmKind) -> Index3 {
    if comptime![kind == GemmKind::Data] {
        args.in_size.clone()
    } else {
        args.out_size.clone()
    }
}

/// Size of the side the taps of a forward (the input) or input-gradient (the output) GEMM
/// read.
#[cube]
fn read_size(args: &ConvArgs, #[comptime] kind: GemmKind) -> Index3 {
    if comptime![kind == GemmKind::Data] {
        args.out_size.clone()
    } else {
        args.in_size.clone()
    }
}

/// Where one tap reads, along one axis: the index on the read side for position `at` (`reach`
/// = tap x dilation), and whether there is one: [`tap_source`] for a forward,
/// [`tap_reader`] for an input gradient (`unit_stride` skips its division).
#[cube]
pub(crate) fn tap_along(
    at: usize,
    reach: usize,
    stride: usize,
    pad: usize,
    len: usize,
    #[comptime] kind: GemmKind,
    #[comptime] unit_stride: bool,
) -> (usize, bool) {
    if comptime![kind == GemmKind::Forward] {
        tap_source(at, reach, stride, pad, len)
    } else {
        tap_reader(at, reach, stride, pad, len, unit_stride)
    }
}

/// The read-side position that tap `tap` of position `at` reaches in a GEMM of `kind` (the
/// input for `GemmKind::Forward`, the output for `GemmKind::Data`), and whether there is one.
#[cube]
fn tap_position(
    args: &ConvArgs,
    at: &Index3,
    tap: &Index3,
    #[comptime] kind: GemmKind,
) -> (Index3, bool) {
    let len = read_size(args, kind);
    let (d, d_inside) = tap_along(
        at.d,
        tap.d * args.dilation.d,
        args.stride.d,
        args.pad.d,
        len.d,
        kind,
        false,
    );
    let (h, h_inside) = tap_along(
        at.h,
        tap.h * args.dilation.h,
        args.stride.h,
        args.pad.h,
        len.h,
        kind,
        false,
    );
    let (w, w_inside) = tap_along(
        at.w,
        tap.w * args.dilation.w,
        args.stride.w,
        args.pad.w,
        len.w,
        kind,
        false,
    );
    (Index3 { d, h, w }, d_inside && h_inside && w_inside)
}

/// `x[b, channel]` at the tap `tap` of output position `out`; zero in the padding.
#[cube]
fn input_tap<F: Float, A: Float>(
    x: &Tensor<F>,
    args: &ConvArgs,
    batch: usize,
    channel: usize,
    out: &Index3,
    tap: &Index3,
) -> A {
    let (at, inside) = tap_position(args, out, tap, GemmKind::Forward);
    let mut value = A::new(0.0);
    if inside {
        let plane = batch * args.groups * args.in_channels + channel;
        value = A::cast_from(x[flat_index(plane, &args.in_size, &at)]);
    }
    value
}

/// `out_grad[b, channel]` at the output position whose tap `tap` reads input position `at`;
/// zero when no output position does (off the stride grid or outside the output).
#[cube]
fn output_tap<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    args: &ConvArgs,
    batch: usize,
    channel: usize,
    at: &Index3,
    tap: &Index3,
) -> A {
    let (out, inside) = tap_position(args, at, tap, GemmKind::Data);
    let mut value = A::new(0.0);
    if inside {
        let plane = batch * args.groups * args.out_channels + channel;
        value = A::cast_from(out_grad[flat_index(plane, &args.out_size, &out)]);
    }
    value
}

/// Row `m` of `A` with its position decomposed once: `(batch, spatial position)` for the
/// forward and input-gradient GEMMs, whose rows are positions (`local`: an input gradient's
/// position within its phase, `pos` for the others); the channel for the weight gradient's.
#[derive(CubeType, Clone)]
pub struct Row {
    pub index: usize,
    pub batch: usize,
    pub pos: Index3,
    pub local: Index3,
}

/// The size of the box a GEMM's rows run over: the output for the forward GEMM, one phase's
/// positions for the input gradient.
#[cube]
fn row_size(args: &ConvArgs, phase: &Phase, #[comptime] kind: GemmKind) -> Index3 {
    if comptime![kind == GemmKind::Data] {
        phase.count.clone()
    } else {
        args.out_size.clone()
    }
}

#[cube]
pub fn row_of(args: &ConvArgs, phase: &Phase, m: usize, #[comptime] kind: GemmKind) -> Row {
    // The weight gradient's rows need no decomposition.
    let size = row_size(args, phase, kind);
    let len = volume(&size);
    let mut batch = 0;
    let mut index = 0;
    if comptime![kind != GemmKind::Weight] {
        batch = m / len;
        index = m % len;
    }
    let at = unflatten(index, &size);
    let mut d = at.d;
    let mut h = at.h;
    let mut w = at.w;
    if comptime![kind == GemmKind::Data] {
        d = phase.first.d + phase.step.d * d;
        h = phase.first.h + phase.step.h * h;
        w = phase.first.w + phase.step.w * w;
    }
    Row {
        index: m,
        batch,
        pos: Index3 { d, h, w },
        local: at,
    }
}

/// Along one axis, the output that a tap of reach `reach` (from an exact phase's `k` table)
/// meets from position `at` of the phase: `at + reach - back` (the forward's tap rule at unit
/// stride, no division), and whether it is inside the output.
#[cube]
fn phase_tap_along(at: usize, reach: usize, back: usize, len: usize) -> (usize, bool) {
    tap_along(at, reach, 1, back, len, GemmKind::Forward, true)
}

/// `out_grad[b, channel]` at the output that a tap of reach `reach` meets from position
/// `local` of `phase`; zero outside the output.
#[cube]
#[allow(clippy::too_many_arguments)]
fn phase_output_tap<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    args: &ConvArgs,
    phase: &Phase,
    batch: usize,
    channel: usize,
    local: &Index3,
    reach: &Index3,
) -> A {
    let (d, d_inside) = phase_tap_along(local.d, reach.d, phase.back.d, args.out_size.d);
    let (h, h_inside) = phase_tap_along(local.h, reach.h, phase.back.h, args.out_size.h);
    let (w, w_inside) = phase_tap_along(local.w, reach.w, phase.back.w, args.out_size.w);
    let mut value = A::new(0.0);
    if d_inside && h_inside && w_inside {
        let plane = batch * args.groups * args.out_channels + channel;
        value = A::cast_from(out_grad[flat_index(plane, &args.out_size, &Index3 { d, h, w })]);
    }
    value
}

/// One `k` of a GEMM, decoded once for every value of a load that shares it. Forward and
/// input gradient: the reduced channel (counted over every group) and its tap, read from
/// `k_table` (built on the host) so the loads need no divisions, plus an `exact` input
/// gradient's reach of the tap. Weight gradient: the batch (in `channel`) and the output
/// position, flat and as an index. `inside`: whether `k` is before the split's end (past it,
/// the rest are zeros and the loads that share this `k` are masked to zero).
#[derive(CubeType, Clone)]
pub struct Reduced {
    pub inside: bool,
    pub channel: usize,
    pub tap: Index3,
    pub reach: Index3,
    pub flat: usize,
}

/// [`Reduced`] for `k` of group `group`; not `inside`, reading nothing, from `k_end` on.
#[cube]
pub fn reduced_of(
    k_table: &Tensor<u32>,
    args: &ConvArgs,
    group: usize,
    k: usize,
    k_end: usize,
    #[comptime] kind: GemmKind,
    #[comptime] exact: bool,
) -> Reduced {
    let mut channel = 0;
    // Per axis: Index3 values cannot be reassigned in a branch.
    let mut tap_d = 0;
    let mut tap_h = 0;
    let mut tap_w = 0;
    let mut reach_d = 0;
    let mut reach_h = 0;
    let mut reach_w = 0;
    let mut flat = 0;
    let inside = k < k_end;
    if !inside {
        // Past the split: nothing to read.
    } else if comptime![kind == GemmKind::Weight] {
        let out_volume = volume(&args.out_size);
        channel = k / out_volume;
        flat = k % out_volume;
        let at = unflatten(flat, &args.out_size);
        tap_d = at.d;
        tap_h = at.h;
        tap_w = at.w;
    } else {
        let mut at = k * FORWARD_DIGITS;
        let mut channels = args.in_channels;
        if comptime![kind == GemmKind::Data] {
            at = k * DATA_DIGITS;
            channels = args.out_channels;
        }
        channel = group * channels + k_table[at] as usize;
        tap_d = k_table[at + 1] as usize;
        tap_h = k_table[at + 2] as usize;
        tap_w = k_table[at + 3] as usize;
        if comptime![kind == GemmKind::Data && exact] {
            reach_d = k_table[at + 4] as usize;
            reach_h = k_table[at + 5] as usize;
            reach_w = k_table[at + 6] as usize;
        }
    }
    Reduced {
        inside,
        channel,
        tap: Index3 {
            d: tap_d,
            h: tap_h,
            w: tap_w,
        },
        reach: Index3 {
            d: reach_d,
            h: reach_h,
            w: reach_w,
        },
        flat,
    }
}

/// `A[m, k]` of group `group`, for the row `row` of `m` and `reduced` of `k`. An `exact`
/// input gradient (each launch one stride phase) reads its taps' reaches, any other divides
/// by the stride.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn lhs_value<F: Float, A: Float>(
    lhs: &Tensor<F>,
    args: &ConvArgs,
    phase: &Phase,
    group: usize,
    row: &Row,
    reduced: &Reduced,
    #[comptime] kind: GemmKind,
    #[comptime] exact: bool,
) -> A {
    let value: A;
    if comptime![kind == GemmKind::Weight] {
        let out_volume = volume(&args.out_size);
        let plane = reduced.channel * args.groups * args.out_channels
            + group * args.out_channels
            + row.index;
        value = A::cast_from(lhs[plane * out_volume + reduced.flat]);
    } else if comptime![kind == GemmKind::Forward] {
        value = input_tap::<F, A>(
            lhs,
            args,
            row.batch,
            reduced.channel,
            &row.pos,
            &reduced.tap,
        );
    } else if comptime![exact] {
        value = phase_output_tap::<F, A>(
            lhs,
            args,
            phase,
            row.batch,
            reduced.channel,
            &row.local,
            &reduced.reach,
        );
    } else {
        value = output_tap::<F, A>(
            lhs,
            args,
            row.batch,
            reduced.channel,
            &row.pos,
            &reduced.tap,
        );
    }
    value
}

/// Flat index of `weight[out_channel, in_channel (within its group), tap]`.
#[cube]
fn weight_index(args: &ConvArgs, out_channel: usize, in_channel: usize, tap: usize) -> usize {
    (out_channel * args.in_channels + in_channel) * volume(&args.kernel) + tap
}

/// `B[k, n]` of group `group`, `reduced` being `k`'s. The input gradient's taps are those of
/// the launch's phase.
#[cube]
pub fn rhs_value<F: Float, A: Float>(
    rhs: &Tensor<F>,
    args: &ConvArgs,
    group: usize,
    k: usize,
    reduced: &Reduced,
    n: usize,
    #[comptime] kind: GemmKind,
) -> A {
    let kernel_volume = volume(&args.kernel);
    let value: A;
    if comptime![kind == GemmKind::Forward] {
        let out_channel = group * args.out_channels + n;
        value = A::cast_from(rhs[weight_index(args, out_channel, 0, k)]);
    } else if comptime![kind == GemmKind::Data] {
        let tap = flat_index(0, &args.kernel, &reduced.tap);
        value = A::cast_from(rhs[weight_index(args, reduced.channel, n, tap)]);
    } else {
        let tap = unflatten(n % kernel_volume, &args.kernel);
        let channel = group * args.in_channels + n / kernel_volume;
        value = input_tap::<F, A>(rhs, args, reduced.channel, channel, &reduced.tap, &tap);
    }
    value
}

/// Write `C[m, n]` (`row`: `m` as [`row_of()`] decomposes it) of group `group` into the
/// partial result that starts at `split_base` (0 without split-k; a split-k launch writes one
/// result per split, summed afterwards), adding the bias of the output channel to a forward
/// or input-gradient result when there is one (to split 0's only, so it is added once).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store<F: Float, A: Float>(
    out: &mut Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    args: &ConvArgs,
    group: usize,
    split_base: usize,
    row: &Row,
    n: usize,
    value: A,
    #[comptime] kind: GemmKind,
) {
    if comptime![kind == GemmKind::Weight] {
        store_weight::<F, A>(out, args, group, split_base, row.index, n, value);
    } else {
        store_position::<F, A>(
            out,
            bias,
            args,
            group,
            split_base,
            row.batch,
            flat_index(0, &written_size(args, kind), &row.pos),
            n,
            value,
            kind,
        );
    }
}

/// [`store()`] of a weight gradient: `C[m, n]` is the weight of output channel `m` (of group
/// `group`) at the flat (input channel, tap) `n`.
#[cube]
pub fn store_weight<F: Float, A: Float>(
    out: &mut Tensor<F>,
    args: &ConvArgs,
    group: usize,
    split_base: usize,
    m: usize,
    n: usize,
    value: A,
) {
    let row_len = args.in_channels * volume(&args.kernel);
    let row = group * args.out_channels + m;
    out[split_base + row * row_len + n] = F::cast_from(value);
}

/// [`store()`] of a forward or input-gradient result whose row `m` is already split into its
/// batch and its position (flat, within the output or input volume).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store_position<F: Float, A: Float>(
    out: &mut Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    args: &ConvArgs,
    group: usize,
    split_base: usize,
    batch: usize,
    position: usize,
    n: usize,
    value: A,
    #[comptime] kind: GemmKind,
) {
    let mut channels = args.out_channels;
    if comptime![kind == GemmKind::Data] {
        channels = args.in_channels;
    }
    let channel = group * channels + n;
    let plane = batch * args.groups * channels + channel;
    let mut result = F::cast_from(value);
    #[comptime]
    if let ComptimeOption::Some(bias) = bias {
        result += select(split_base == 0, bias[channel], F::new(0.0));
    }
    out[split_base + plane * volume(&written_size(args, kind)) + position] = result;
}

/// The tiled schedule: a cube computes a 64x64 tile of `C` for one group (`CUBE_POS_Z =
/// split * groups + group`), stepping along `k` through 16-deep shared-memory tiles of `A` and
/// `B`; each unit accumulates an 8x8 register block in `A` (f32 for f32 and half types, f64
/// for f64). With `narrow`, the tile is 32 wide along its channel side ([`tile_shape`]) and
/// the blocks 4 wide there.
/// An input gradient's rows are the positions of `phase`; a split-k launch writes `out` as
/// `splits` stacked partial results. With `prefetch`, a unit loads the next k step into
/// registers before the current step's products (double buffering: the loads are in flight
/// while it computes), at the cost of `2 x LOAD_VECTORS x LANES`
/// registers.
///
/// The tiles hold 4-wide vectors along `m` and `n`: a unit's 8 rows are two runs of 4
/// (`block_offset`), so a k step's 16 operands take 4 shared-memory reads instead of 16, and
/// a unit stages and stores whole vectors (4 rows of one `k`, whose `k` table entry it reads
/// once).
#[cube(launch, address_type = "dynamic")]
pub fn conv_gemm_tiled<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    k_table: &Tensor<u32>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    gemm: GemmArgs,
    phase: Phase,
    #[comptime] kind: GemmKind,
    #[comptime] exact: bool,
    #[comptime] prefetch: bool,
    #[comptime] narrow: bool,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let block_m = comptime![tile_shape(kind, narrow).0 / UNITS];
    let block_n = comptime![tile_shape(kind, narrow).1 / UNITS];
    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let unit = ty * UNITS + tx;
    let group = CUBE_POS_Z as usize % args.groups;
    let split = CUBE_POS_Z as usize / args.groups;
    let m0 = (CUBE_POS_X as usize + gemm.m_tile_offset) * comptime![block_m * UNITS];
    let n0 = CUBE_POS_Y as usize * comptime![block_n * UNITS];
    let k_begin = split * gemm.k_per_split;
    let k_end = min(k_begin + gemm.k_per_split, gemm.k_len);
    // An input gradient's phases each cover part of `m`, so a partial result's length is
    // `out`'s over the splits, not this launch's `m x n`.
    let splits = CUBE_COUNT_Z as usize / args.groups;
    let split_base = split * (out.len() / splits);

    // Both tiles are stored k-major (`[k][m]`, `[k][n]`, rows of `TILE_ROW_VECTORS`), so the
    // inner product reads consecutive vectors across a plane.
    let mut lhs_tile = Shared::<[Vector<A, Lanes>]>::new_slice(TILE_K * TILE_ROW_VECTORS);
    let mut rhs_tile = Shared::<[Vector<A, Lanes>]>::new_slice(TILE_K * TILE_ROW_VECTORS);
    let mut acc = Array::<A>::new(comptime![block_m * block_n]);
    let mut a = Array::<A>::new(block_m);
    let mut b = Array::<A>::new(block_n);

    // A is read m-fast (consecutive positions; a unit's 4 rows fixed and decomposed once)
    // except for the weight gradient, whose rows are channels and whose consecutive
    // addresses run along k.
    let first_row = m0 + LANES * load_vector(unit, 0, false);
    let fixed_rows = Rows {
        r0: row_of(&args, &phase, first_row, kind),
        r1: row_of(&args, &phase, first_row + 1, kind),
        r2: row_of(&args, &phase, first_row + 2, kind),
        r3: row_of(&args, &phase, first_row + 3, kind),
    };
    // The unit's share of one k step of each operand, staged in registers: with `prefetch`,
    // the next step's loads are issued before this step's products, so they are in flight
    // while it computes (register double buffering).
    let mut lhs_values = Array::<A>::new(LOAD_VECTORS * LANES);
    let mut rhs_values = Array::<A>::new(LOAD_VECTORS * LANES);
    if comptime![prefetch] {
        load_step::<F, A>(
            lhs,
            rhs,
            k_table,
            &args,
            &gemm,
            &phase,
            group,
            &fixed_rows,
            m0,
            n0,
            k_begin,
            k_end,
            unit,
            &mut lhs_values,
            &mut rhs_values,
            kind,
            exact,
            narrow,
        );
    }
    let mut k0 = k_begin;
    while k0 < k_end {
        if comptime![!prefetch] {
            // Nothing is in flight across the products: load this step just before storing it.
            load_step::<F, A>(
                lhs,
                rhs,
                k_table,
                &args,
                &gemm,
                &phase,
                group,
                &fixed_rows,
                m0,
                n0,
                k0,
                k_end,
                unit,
                &mut lhs_values,
                &mut rhs_values,
                kind,
                exact,
                narrow,
            );
        }
        store_step::<A>(
            unit,
            &lhs_values,
            &rhs_values,
            &mut lhs_tile,
            &mut rhs_tile,
            kind,
            narrow,
        );
        sync_cube();
        // Uniform across the cube: every unit shares `k0` and `k_end`.
        if comptime![prefetch] && k0 + TILE_K < k_end {
            load_step::<F, A>(
                lhs,
                rhs,
                k_table,
                &args,
                &gemm,
                &phase,
                group,
                &fixed_rows,
                m0,
                n0,
                k0 + TILE_K,
                k_end,
                unit,
                &mut lhs_values,
                &mut rhs_values,
                kind,
                exact,
                narrow,
            );
        }

        #[unroll]
        for kk in 0..TILE_K {
            let row = kk * TILE_ROW_VECTORS;
            spill::<A>(&lhs_tile, row + tx, &mut a, block_m);
            spill::<A>(&rhs_tile, row + ty, &mut b, block_n);
            #[unroll]
            for i in 0..block_m {
                #[unroll]
                for j in 0..block_n {
                    acc[i * block_n + j] += a[i] * b[j];
                }
            }
        }
        sync_cube();
        k0 += TILE_K;
    }

    #[unroll]
    for i in 0..block_m {
        let m = m0 + block_offset(tx, i);
        let row = row_of(&args, &phase, m, kind);
        #[unroll]
        for j in 0..block_n {
            let n = n0 + block_offset(ty, j);
            if m < gemm.m_len && n < gemm.n_len {
                store::<F, A>(
                    out,
                    bias,
                    &args,
                    group,
                    split_base,
                    &row,
                    n,
                    acc[i * block_n + j],
                    kind,
                );
            }
        }
    }
}

/// The 4 rows of `A` a unit loads m-fast, decomposed once.
#[derive(CubeType)]
struct Rows {
    r0: Row,
    r1: Row,
    r2: Row,
    r3: Row,
}

/// Offset within the tile of the `i`-th of the 8 rows (or columns) of unit `t`'s block: two
/// runs of [`LANES`], half a tile apart, so the unit's block is two vectors of each tile row
/// and the units of a plane read consecutive vectors (a narrow side's 4: one run, one vector).
#[cube]
fn block_offset(t: usize, i: usize) -> usize {
    LANES * t + i % LANES + UNITS * LANES * (i / LANES)
}

/// A unit's `block` (8 or 4) values of one tile row from the vector at `at` and, for 8, the
/// one half a tile further ([`block_offset`]).
#[cube]
fn spill<A: Float>(
    tile: &Shared<[Vector<A, Lanes>]>,
    at: usize,
    a: &mut Array<A>,
    #[comptime] block: usize,
) {
    let low = tile[at];
    a[0] = low.extract(0usize);
    a[1] = low.extract(1usize);
    a[2] = low.extract(2usize);
    a[3] = low.extract(3usize);
    if comptime![block > LANES] {
        let high = tile[at + UNITS];
        a[4] = high.extract(0usize);
        a[5] = high.extract(1usize);
        a[6] = high.extract(2usize);
        a[7] = high.extract(3usize);
    }
}

/// Vectors of a tile side `side` long one unit loads per k step.
fn load_vectors(side: usize) -> usize {
    side * TILE_K / (UNITS * UNITS * LANES)
}

/// `values[at..at + 4]` as one vector.
#[cube]
fn vector_of<A: Float>(values: &Array<A>, at: usize) -> Vector<A, Lanes> {
    let mut vector = Vector::<A, Lanes>::empty();
    vector.insert(0usize, values[at]);
    vector.insert(1usize, values[at + 1]);
    vector.insert(2usize, values[at + 2]);
    vector.insert(3usize, values[at + 3]);
    vector
}

/// The step (`k`) within the tile of the `j`-th vector a unit loads: k-fast (16 consecutive
/// units along `k`: the addresses of `B`, and of the weight gradient's `A`, run along `k`) or
/// m-fast (16 consecutive units along the vectors of a row).
#[cube]
fn load_k(unit: usize, j: usize, #[comptime] k_fast: bool) -> usize {
    let mut kk = unit / VECTORS_PER_ROW + (TILE_K / LOAD_VECTORS) * j;
    if comptime![k_fast] {
        kk = unit % TILE_K;
    }
    kk
}

/// The vector within its tile row (4 rows of `A` or columns of `B`) of the `j`-th vector a
/// unit loads; see [`load_k`].
#[cube]
fn load_vector(unit: usize, j: usize, #[comptime] k_fast: bool) -> usize {
    let mut vector = unit % VECTORS_PER_ROW;
    if comptime![k_fast] {
        vector = unit / TILE_K + (VECTORS_PER_ROW / LOAD_VECTORS) * j;
    }
    vector
}

/// `A[m, k]`, zero past `m` or the split's end.
#[cube]
#[allow(clippy::too_many_arguments)]
fn lhs_within<F: Float, A: Float>(
    lhs: &Tensor<F>,
    args: &ConvArgs,
    gemm: &GemmArgs,
    phase: &Phase,
    group: usize,
    row: &Row,
    reduced: &Reduced,
    #[comptime] kind: GemmKind,
    #[comptime] exact: bool,
) -> A {
    let mut value = A::new(0.0);
    if row.index < gemm.m_len && reduced.inside {
        value = lhs_value::<F, A>(lhs, args, phase, group, row, reduced, kind, exact);
    }
    value
}

/// Load `unit`'s share of the k step from `k0` of the tile at `(m0, n0)` into registers
/// (up to `LOAD_VECTORS` vectors of A and of B, lane-major: half along a `narrow` side), zero
/// past `m`, `n` or the split's end `k_end`; [`store_step`] moves them into the shared tiles.
/// Each `k` is decoded once: the k-fast loads share one for the whole step, an m-fast vector's
/// 4 rows one per vector.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_step<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    k_table: &Tensor<u32>,
    args: &ConvArgs,
    gemm: &GemmArgs,
    phase: &Phase,
    group: usize,
    fixed_rows: &Rows,
    m0: usize,
    n0: usize,
    k0: usize,
    k_end: usize,
    unit: usize,
    lhs_values: &mut Array<A>,
    rhs_values: &mut Array<A>,
    #[comptime] kind: GemmKind,
    #[comptime] exact: bool,
    #[comptime] narrow: bool,
) {
    let lhs_k_fast = comptime![kind == GemmKind::Weight];
    let fast_k = k0 + load_k(unit, 0, true);
    let fast = reduced_of(k_table, args, group, fast_k, k_end, kind, exact);
    #[unroll]
    for j in 0..comptime![load_vectors(tile_shape(kind, narrow).0)] {
        let at = j * LANES;
        if comptime![lhs_k_fast] {
            let first = m0 + LANES * load_vector(unit, j, true);
            #[unroll]
            for lane in 0..LANES {
                let row = row_of(args, phase, first + lane, kind);
                lhs_values[at + lane] =
                    lhs_within::<F, A>(lhs, args, gemm, phase, group, &row, &fast, kind, exact);
            }
        } else {
            let k = k0 + load_k(unit, j, false);
            let reduced = reduced_of(k_table, args, group, k, k_end, kind, exact);
            lhs_values[at] = lhs_within::<F, A>(
                lhs,
                args,
                gemm,
                phase,
                group,
                &fixed_rows.r0,
                &reduced,
                kind,
                exact,
            );
            lhs_values[at + 1] = lhs_within::<F, A>(
                lhs,
                args,
                gemm,
                phase,
                group,
                &fixed_rows.r1,
                &reduced,
                kind,
                exact,
            );
            lhs_values[at + 2] = lhs_within::<F, A>(
                lhs,
                args,
                gemm,
                phase,
                group,
                &fixed_rows.r2,
                &reduced,
                kind,
                exact,
            );
            lhs_values[at + 3] = lhs_within::<F, A>(
                lhs,
                args,
                gemm,
                phase,
                group,
                &fixed_rows.r3,
                &reduced,
                kind,
                exact,
            );
        }
    }
    #[unroll]
    for j in 0..comptime![load_vectors(tile_shape(kind, narrow).1)] {
        let at = j * LANES;
        let first = n0 + LANES * load_vector(unit, j, true);
        #[unroll]
        for lane in 0..LANES {
            let n = first + lane;
            let mut value = A::new(0.0);
            if n < gemm.n_len && fast.inside {
                value = rhs_value::<F, A>(rhs, args, group, fast_k, &fast, n, kind);
            }
            rhs_values[at + lane] = value;
        }
    }
}

/// Move the vectors [`load_step`] staged in registers into the shared tiles.
#[cube]
fn store_step<A: Float>(
    unit: usize,
    lhs_values: &Array<A>,
    rhs_values: &Array<A>,
    lhs_tile: &mut Shared<[Vector<A, Lanes>]>,
    rhs_tile: &mut Shared<[Vector<A, Lanes>]>,
    #[comptime] kind: GemmKind,
    #[comptime] narrow: bool,
) {
    let lhs_k_fast = comptime![kind == GemmKind::Weight];
    #[unroll]
    for j in 0..comptime![load_vectors(tile_shape(kind, narrow).0)] {
        let lhs_slot =
            load_k(unit, j, lhs_k_fast) * TILE_ROW_VECTORS + load_vector(unit, j, lhs_k_fast);
        lhs_tile[lhs_slot] = vector_of::<A>(lhs_values, j * LANES);
    }
    #[unroll]
    for j in 0..comptime![load_vectors(tile_shape(kind, narrow).1)] {
        let rhs_slot = load_k(unit, j, true) * TILE_ROW_VECTORS + load_vector(unit, j, true);
        rhs_tile[rhs_slot] = vector_of::<A>(rhs_values, j * LANES);
    }
}

/// Which of a direct unit's loaded row values (see [`conv_gemm_direct`]'s `row_taps`) tap
/// `u` of its position `j` reads, `row_stride` apart per position in a forward (and in the
/// weight gradient, which reads the forward's values).
fn row_value(kind: GemmKind, j: usize, u: usize, row_taps: usize, row_stride: usize) -> usize {
    if kind == GemmKind::Data {
        j + (row_taps - 1) - u
    } else {
        row_stride * j + u
    }
}

/// How many row values a direct unit (of any pass) loads: the reach of its `block_w`
/// positions through `row_taps` taps, `row_stride` apart.
fn row_values(block_w: usize, row_taps: usize, row_stride: usize) -> usize {
    row_stride * (block_w - 1) + row_taps
}

/// The weights of tap `tap` for the direct schedule's `block_n` channels from `n0` of group
/// `group`, against reduced channel `c` (forward: `W[n, c]`, input gradient: `W[c, n]`).
/// Channels past `n_len` (a partial block) read channel 0 and are not stored.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_block_weights<F: Float, A: Float>(
    rhs: &Tensor<F>,
    args: &ConvArgs,
    weights: &mut Array<A>,
    group: usize,
    c: usize,
    n0: usize,
    n_len: usize,
    tap: usize,
    #[comptime] kind: GemmKind,
    #[comptime] block_n: usize,
) {
    #[unroll]
    for i in 0..block_n {
        let n = select(n0 + i < n_len, n0 + i, 0);
        let mut index = weight_index(args, group * args.out_channels + n, c, tap);
        if comptime![kind == GemmKind::Data] {
            index = weight_index(args, group * args.out_channels + c, n, tap);
        }
        weights[i] = A::cast_from(rhs[index]);
    }
}

/// The direct schedule, for short reductions where a tile would be mostly padding (grouped
/// and depthwise convs, and their input gradient): a unit computes `block_n` channels of one
/// group at `block_w` positions along the last axis (consecutive, or one stride phase's),
/// summing all of `k` in registers. Each loaded input value serves `block_n` channels and
/// each weight `block_w` positions, a row's bounds are checked once, and the unit's indices
/// are decomposed once (blocks along the last axis; the spread launch, one position per unit,
/// is the variant whose loads coalesce across units). Forward and input gradient only. `row_taps`
/// (non-zero: the taps along W one position meets, at dilation 1 there) makes the kernel row
/// comptime, so a row's read values are loaded once for the whole block: a forward's at the
/// comptime stride `row_stride` along W (neighbours sharing values where the row is wider);
/// a strided input gradient computes the positions of one stride phase, every stride-th,
/// which all meet the same taps (`row_stride` 1).
#[cube(launch, address_type = "dynamic")]
pub fn conv_gemm_direct<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    gemm: GemmArgs,
    #[comptime] kind: GemmKind,
    #[comptime] block_n: usize,
    #[comptime] block_w: usize,
    #[comptime] unit_stride: bool,
    #[comptime] row_taps: usize,
    #[comptime] row_stride: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    // The unit's side (written) and the read side of the GEMM's rows.
    let side = written_size(&args, kind);
    let read = read_size(&args, kind);
    let mut reduced = args.in_channels;
    if comptime![kind == GemmKind::Data] {
        reduced = args.out_channels;
    }
    // A unit's positions along W: `phase + phases * (q0 + j)`. A strided input gradient
    // with a comptime row takes its positions from one stride phase, whose taps are every
    // `phases`-th from `phase_tap` and meet the output at unit stride.
    let mut phases = 1;
    if comptime![kind == GemmKind::Data && row_taps > 0 && !unit_stride] {
        phases = args.stride.w;
    }
    let q_blocks = side.w.div_ceil(phases).div_ceil(block_w);
    let w_blocks = phases * q_blocks;
    let n_blocks = gemm.n_len.div_ceil(block_n);
    let batches = gemm.m_len / volume(&side);
    if ABSOLUTE_POS >= args.groups * n_blocks * batches * side.d * side.h * w_blocks {
        terminate!();
    }
    let mut rest = ABSOLUTE_POS;
    let q0 = (rest % q_blocks) * block_w;
    rest /= q_blocks;
    let phase = rest % phases;
    rest /= phases;
    let h = rest % side.h;
    rest /= side.h;
    let d = rest % side.d;
    rest /= side.d;
    let batch = rest % batches;
    rest /= batches;
    let n0 = (rest % n_blocks) * block_n;
    let group = rest / n_blocks;

    let read_volume = volume(&read);
    let mut acc = Array::<A>::new(comptime![block_n * block_w]);
    #[unroll]
    for i in 0..comptime![block_n * block_w] {
        acc[i] = A::new(0.0);
    }
    let mut weights = Array::<A>::new(block_n);
    // The phase's first tap along W, and the output its first position meets through it
    // (`phase + pad - phase_tap` divides by the stride); a forward's block starts at `q0`.
    let phase_tap = (phase + args.pad.w) % phases;
    let phase_base = (phase + args.pad.w - phase_tap) / phases;
    // With a comptime row, the block's read value `t` is `(q0 + first) * row_stride + t -
    // back`: from input `q0 * stride - pad` for a forward, from output `phase_base + q0 -
    // (row_taps - 1)` for a gradient.
    let mut first = 0;
    let mut back = args.pad.w;
    if comptime![kind == GemmKind::Data] {
        first = phase_base;
        back = comptime![row_taps.saturating_sub(1)];
    }
    for c in 0..reduced {
        let plane = (batch * args.groups * reduced + group * reduced + c) * read_volume;
        for kd in 0..args.kernel.d {
            let (rd, d_inside) = tap_along(
                d,
                kd * args.dilation.d,
                args.stride.d,
                args.pad.d,
                read.d,
                kind,
                unit_stride,
            );
            for kh in 0..args.kernel.h {
                let (rh, h_inside) = tap_along(
                    h,
                    kh * args.dilation.h,
                    args.stride.h,
                    args.pad.h,
                    read.h,
                    kind,
                    unit_stride,
                );
                let row_inside = d_inside && h_inside;
                let row = plane + (rd * read.h + rh) * read.w;
                let tap_row = (kd * args.kernel.h + kh) * args.kernel.w;
                // An input gradient adds only the taps that meet an output (as col2im does),
                // so at a stride it skips the kernel rows off the grid; a forward multiplies
                // the padding's zeros, as im2col does.
                let mut skipped = false;
                if comptime![kind == GemmKind::Data] {
                    skipped = !row_inside;
                }
                if skipped {
                } else if comptime![row_taps > 0] {
                    // Dilation 1 along W: a forward's output `q0 + j` reads input
                    // `(q0 + j) * row_stride + kw - pad`; an input gradient's input
                    // `phase + stride * (q0 + j)` reads, through its phase's tap `u`
                    // (`kw = phase_tap + stride * u`), output `phase_base + q0 + j - u`. So
                    // the block's read values are loaded (and bounds-checked) once and each
                    // serves up to `row_taps` positions. `values[t]` is the one `t` past the
                    // block's first reach (tap 0 for a forward, tap `row_taps - 1` for a
                    // gradient).
                    let mut values =
                        Array::<A>::new(comptime![row_values(block_w, row_taps, row_stride)]);
                    #[unroll]
                    for t in 0..comptime![row_values(block_w, row_taps, row_stride)] {
                        let (rw, w_inside) = tap_along(
                            q0 + first,
                            t,
                            row_stride,
                            back,
                            read.w,
                            GemmKind::Forward,
                            true,
                        );
                        values[t] = A::new(0.0);
                        if row_inside && w_inside {
                            values[t] = A::cast_from(lhs[row + rw]);
                        }
                    }
                    #[unroll]
                    for u in 0..row_taps {
                        // A phase of a strided gradient may have a tap fewer than the most.
                        let kw = phase_tap + phases * u;
                        if kw < args.kernel.w {
                            load_block_weights::<F, A>(
                                rhs,
                                &args,
                                &mut weights,
                                group,
                                c,
                                n0,
                                gemm.n_len,
                                tap_row + kw,
                                kind,
                                block_n,
                            );
                            #[unroll]
                            for j in 0..block_w {
                                let t = comptime![row_value(kind, j, u, row_taps, row_stride)];
                                #[unroll]
                                for i in 0..block_n {
                                    acc[i * block_w + j] += values[t] * weights[i];
                                }
                            }
                        }
                    }
                } else {
                    for kw in 0..args.kernel.w {
                        load_block_weights::<F, A>(
                            rhs,
                            &args,
                            &mut weights,
                            group,
                            c,
                            n0,
                            gemm.n_len,
                            tap_row + kw,
                            kind,
                            block_n,
                        );
                        #[unroll]
                        for j in 0..block_w {
                            let (rw, w_inside) = tap_along(
                                q0 + j,
                                kw * args.dilation.w,
                                args.stride.w,
                                args.pad.w,
                                read.w,
                                kind,
                                unit_stride,
                            );
                            let mut value = A::new(0.0);
                            if row_inside && w_inside {
                                value = A::cast_from(lhs[row + rw]);
                            }
                            #[unroll]
                            for i in 0..block_n {
                                acc[i * block_w + j] += value * weights[i];
                            }
                        }
                    }
                }
            }
        }
    }
    let row_start = (d * side.h + h) * side.w;
    #[unroll]
    for i in 0..block_n {
        #[unroll]
        for j in 0..block_w {
            let w = phase + phases * (q0 + j);
            if n0 + i < gemm.n_len && w < side.w {
                store_position::<F, A>(
                    out,
                    bias,
                    &args,
                    group,
                    0,
                    batch,
                    row_start + w,
                    n0 + i,
                    acc[i * block_w + j],
                    kind,
                );
            }
        }
    }
}

/// The split schedule of the weight gradient: one unit per (element of `C`, range of output
/// rows), summing its rows in a register, with no divisions in the inner loop; the splits are
/// summed afterwards by [`sum_splits()`] in a fixed order (deterministic, and no barriers). For
/// long reductions with few outputs: the weight gradient of depthwise and grouped convs, and
/// (with `ones_rhs`, `B = 1`) the bias gradient. `gemm.k_per_split` is a whole number of
/// output rows (`out_w` positions each).
#[cube(launch, address_type = "dynamic")]
pub fn conv_weight_split<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    x: &Tensor<F>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    gemm: GemmArgs,
    #[comptime] ones_rhs: bool,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let outputs = args.groups * gemm.m_len * gemm.n_len;
    let splits = gemm.k_len.div_ceil(gemm.k_per_split);
    if ABSOLUTE_POS >= outputs * splits {
        terminate!();
    }
    let output = ABSOLUTE_POS % outputs;
    let split = ABSOLUTE_POS / outputs;
    let n = output % gemm.n_len;
    let rest = output / gemm.n_len;
    let m = rest % gemm.m_len;
    let group = rest / gemm.m_len;

    let kernel_volume = volume(&args.kernel);
    let channel = group * args.in_channels + n / kernel_volume;
    let tap = unflatten(n % kernel_volume, &args.kernel);
    let grad_plane_of_batch = group * args.out_channels + m;
    let row_begin = split * gemm.k_per_split / args.out_size.w;
    let row_end = min(gemm.k_len, (split + 1) * gemm.k_per_split) / args.out_size.w;
    let mut acc = A::new(0.0);
    for row in row_begin..row_end {
        let batch = row / (args.out_size.d * args.out_size.h);
        let d = (row / args.out_size.h) % args.out_size.d;
        let h = row % args.out_size.h;
        let plane = batch * args.groups * args.out_channels + grad_plane_of_batch;
        let grad_row = ((plane * args.out_size.d + d) * args.out_size.h + h) * args.out_size.w;
        for w in 0..args.out_size.w {
            let mut value = A::cast_from(out_grad[grad_row + w]);
            if comptime![!ones_rhs] {
                let at = Index3 { d, h, w };
                value *= input_tap::<F, A>(x, &args, batch, channel, &at, &tap);
            }
            acc += value;
        }
    }
    store_weight::<F, A>(out, &args, group, split * outputs, m, n, acc);
}

/// The direct schedule of the weight gradient: a unit owns `block_c` input channels, one
/// kernel row `(kd, kh)`, `block_m` output channels and a range of output rows (a split), and
/// sums their `block_m x block_c x kernel_w` weights in registers. It walks each output row
/// `block_w` positions at a time: the block's input values (`stride_w * (block_w - 1) +
/// kernel_w` per channel, neighbouring positions sharing them where the kernel row is wider
/// than the stride) are loaded and bounds-checked once, then each position's `block_m` output
/// gradients are loaded once and multiplied into every input channel's taps. So a loaded
/// gradient serves `block_c x kernel_w` products and an input value up to `block_m x
/// kernel_w`, where one channel and one position at a time gave `kernel_w` and `block_m`.
/// `block_w > 1` needs dilation 1 and stride `stride_w` along W (the host's choice); with
/// `block_w = 1` the stride and dilation are the run-time ones. Taps in the padding multiply a
/// zero, as the GEMM's do, so an infinite gradient there gives NaN as in PyTorch; positions
/// past the row's end are skipped. Partial sums are laid out as the split schedule's, for
/// [`sum_splits()`]; `gemm.k_per_split` is a whole number of output rows.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn conv_weight_direct<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    x: &Tensor<F>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    gemm: GemmArgs,
    #[comptime] block_m: usize,
    #[comptime] block_c: usize,
    #[comptime] kernel_w: usize,
    #[comptime] block_w: usize,
    #[comptime] stride_w: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let m_blocks = gemm.m_len.div_ceil(block_m);
    let c_blocks = args.in_channels.div_ceil(block_c);
    let kernel_rows = args.kernel.d * args.kernel.h;
    let units_per_split = args.groups * c_blocks * kernel_rows * m_blocks;
    let splits = gemm.k_len.div_ceil(gemm.k_per_split);
    if ABSOLUTE_POS >= units_per_split * splits {
        terminate!();
    }
    let mut rest = ABSOLUTE_POS;
    let m0 = (rest % m_blocks) * block_m;
    rest /= m_blocks;
    let kernel_row = rest % kernel_rows;
    rest /= kernel_rows;
    let c0 = (rest % c_blocks) * block_c;
    rest /= c_blocks;
    let group = rest % args.groups;
    let split = rest / args.groups;
    let kh = kernel_row % args.kernel.h;
    let kd = kernel_row / args.kernel.h;

    let values_per_channel = comptime![row_values(block_w, kernel_w, stride_w)];
    let mut acc = Array::<A>::new(comptime![block_m * block_c * kernel_w]);
    #[unroll]
    for i in 0..comptime![block_m * block_c * kernel_w] {
        acc[i] = A::new(0.0);
    }
    let mut values = Array::<A>::new(comptime![block_c * values_per_channel]);
    let mut grads = Array::<A>::new(block_m);
    // Channels past a partial block read the block's first and are not stored.
    let mut channel_offsets = Array::<usize>::new(block_c);
    let mut grad_offsets = Array::<usize>::new(block_m);
    let in_volume = volume(&args.in_size);
    let plane_len = volume(&args.out_size);
    #[unroll]
    for c in 0..block_c {
        channel_offsets[c] = select(c0 + c < args.in_channels, c, 0) * in_volume;
    }
    #[unroll]
    for i in 0..block_m {
        grad_offsets[i] = select(m0 + i < gemm.m_len, m0 + i, m0) * plane_len;
    }
    let row_begin = split * gemm.k_per_split / args.out_size.w;
    let row_end = min(gemm.k_len, (split + 1) * gemm.k_per_split) / args.out_size.w;
    for row in row_begin..row_end {
        let batch = row / (args.out_size.d * args.out_size.h);
        let d = (row / args.out_size.h) % args.out_size.d;
        let h = row % args.out_size.h;
        let (id, d_inside) = tap_along(
            d,
            kd * args.dilation.d,
            args.stride.d,
            args.pad.d,
            args.in_size.d,
            GemmKind::Forward,
            false,
        );
        let (ih, h_inside) = tap_along(
            h,
            kh * args.dilation.h,
            args.stride.h,
            args.pad.h,
            args.in_size.h,
            GemmKind::Forward,
            false,
        );
        let row_inside = d_inside && h_inside;
        let x_plane = batch * args.groups * args.in_channels + group * args.in_channels + c0;
        let x_row = ((x_plane * args.in_size.d + id) * args.in_size.h + ih) * args.in_size.w;
        let grad_plane = batch * args.groups * args.out_channels + group * args.out_channels;
        let grad_row = grad_plane * plane_len + (d * args.out_size.h + h) * args.out_size.w;
        for w_block in 0..args.out_size.w.div_ceil(block_w) {
            let w0 = w_block * block_w;
            // Value `t` of a channel is input `w0 * stride + t * dilation - pad`: the tap `t`
            // of position `w0`, and so the tap `t - stride_w * j` of position `w0 + j`.
            #[unroll]
            for t in 0..values_per_channel {
                let (iw, w_inside) = tap_along(
                    w0,
                    t * args.dilation.w,
                    args.stride.w,
                    args.pad.w,
                    args.in_size.w,
                    GemmKind::Forward,
                    false,
                );
                #[unroll]
                for c in 0..block_c {
                    let at = comptime![c * values_per_channel + t];
                    values[at] = A::new(0.0);
                    if row_inside && w_inside {
                        values[at] = A::cast_from(x[x_row + channel_offsets[c] + iw]);
                    }
                }
            }
            #[unroll]
            for j in 0..block_w {
                if w0 + j < args.out_size.w {
                    #[unroll]
                    for i in 0..block_m {
                        grads[i] = A::cast_from(out_grad[grad_row + grad_offsets[i] + w0 + j]);
                    }
                    #[unroll]
                    for c in 0..block_c {
                        #[unroll]
                        for kw in 0..kernel_w {
                            let at = comptime![
                                c * values_per_channel
                                    + row_value(GemmKind::Forward, j, kw, kernel_w, stride_w)
                            ];
                            let value = values[at];
                            #[unroll]
                            for i in 0..block_m {
                                acc[comptime![(i * block_c + c) * kernel_w + kw]] +=
                                    grads[i] * value;
                            }
                        }
                    }
                }
            }
        }
    }
    let outputs = args.groups * gemm.m_len * gemm.n_len;
    let kernel_volume = volume(&args.kernel);
    #[unroll]
    for i in 0..block_m {
        #[unroll]
        for c in 0..block_c {
            #[unroll]
            for kw in 0..kernel_w {
                if m0 + i < gemm.m_len && c0 + c < args.in_channels {
                    let tap = kernel_row * args.kernel.w + kw;
                    store_weight::<F, A>(
                        out,
                        &args,
                        group,
                        split * outputs,
                        m0 + i,
                        (c0 + c) * kernel_volume + tap,
                        acc[comptime![(i * block_c + c) * kernel_w + kw]],
                    );
                }
            }
        }
    }
}

/// `out[i] = sum_s partials[s * len + i]`, summed in split order: the deterministic second
/// pass of a split-k GEMM.
#[cube(launch, address_type = "dynamic")]
pub fn sum_splits<F: Float, A: Float>(
    partials: &Tensor<F>,
    out: &mut Tensor<F>,
    splits: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let len = out.len();
    if ABSOLUTE_POS >= len {
        terminate!();
    }
    let mut acc = A::new(0.0);
    for s in 0..splits {
        acc += A::cast_from(partials[s * len + ABSOLUTE_POS]);
    }
    out[ABSOLUTE_POS] = F::cast_from(acc);
}

//! The tiled schedule: shared-memory tiles of `A` and `B`, register blocks of `C`.

use cubecl::prelude::*;

use crate::activation::ActivationKind;
use crate::axes::{Index3, volume};

use super::handoff::{Handoff, finish_sum, last_to_arrive};
use super::operands::{
    Reduced, Row, lhs_value, reduced_of, rhs_value, row_of, store, stored_index,
};
use super::repair::{is_finite, repair_stored};
use super::{ConvArgs, GemmArgs, GemmKind, PHASE_ENTRIES, Phase};

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

/// The tiled schedule: a cube computes a 64x64 tile of `C` for one group (`CUBE_POS_Z =
/// (phase * splits + split) * groups + group`), stepping along `k` through 16-deep
/// shared-memory tiles of `A` and `B`; each unit accumulates an 8x8 register block in `A`
/// (f32 for f32 and half types, f64 for f64). With `narrow`, the tile is 32 wide along its
/// channel side ([`tile_shape`]) and the blocks 4 wide there.
/// An exact input gradient's `phases` table ([`PHASE_ENTRIES`] per stride phase) gives each
/// phase's positions, taps and share of `k`, so one launch computes every phase; without it
/// the rows are every position (an input gradient's divided by the stride at each load). A
/// split-k launch writes `out` as `splits` stacked partial results. With `prefetch`, a unit
/// loads the next k step into registers before the current step's products (double
/// buffering: the loads are in flight while it computes), at the cost of
/// `2 x LOAD_VECTORS x LANES` registers.
///
/// With `handoff`, a split-k launch also sums its partial results: `summed` (the result) and
/// `arrivals` (a zeroed counter per tile of the launch) are given, and the last cube of each
/// tile to arrive sums the splits into `summed` ([`crate::conv::handoff`]), applying the `handoff`'s
/// activation with `sum_slope`.
///
/// The tiles hold 4-wide vectors along `m` and `n`: a unit's 8 rows are two runs of 4
/// (`block_offset`), so a k step's 16 operands take 4 shared-memory reads instead of 16, and
/// a unit stages and stores whole vectors (4 rows of one `k`, whose `k` table entry it reads
/// once).
#[allow(clippy::collapsible_if)]
#[cube(launch, address_type = "dynamic")]
pub fn conv_gemm_tiled<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    k_table: &Tensor<u32>,
    phases: ComptimeOption<&Tensor<u32>>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    summed: ComptimeOption<&mut Tensor<F>>,
    arrivals: ComptimeOption<&mut Tensor<Atomic<u32>>>,
    args: ConvArgs,
    gemm: GemmArgs,
    #[comptime] kind: GemmKind,
    #[comptime] prefetch: bool,
    #[comptime] narrow: bool,
    #[comptime] repair: bool,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    sum_slope: f32,
    #[comptime] handoff: Option<Handoff>,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let block_m = comptime![tile_shape(kind, narrow).0 / UNITS];
    let block_n = comptime![tile_shape(kind, narrow).1 / UNITS];
    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let unit = ty * UNITS + tx;
    let exact = comptime![phases.is_some()];
    let group = CUBE_POS_Z as usize % args.groups;
    let layer = CUBE_POS_Z as usize / args.groups;
    let splits = CUBE_COUNT_Z as usize / (args.groups * phase_count(phases));
    let split = layer % splits;
    let part = layer / splits;
    let phase = phase_of(phases, &args, part);
    let gemm = gemm_of(phases, &args, &gemm, &phase, part);
    let m0 = (CUBE_POS_X as usize + gemm.m_tile_offset) * comptime![block_m * UNITS];
    let n0 = CUBE_POS_Y as usize * comptime![block_n * UNITS];
    if m0 >= gemm.m_len {
        // Past this phase's rows (the launch covers the longest phase); uniform per cube.
        terminate!();
    }
    let k_base = k_base_of(phases, part);
    let k_begin = k_base + split * gemm.k_per_split;
    let k_end = k_base + min(split * gemm.k_per_split + gemm.k_per_split, gemm.k_len);
    // An input gradient's phases each cover part of `m`, so a partial result's length is
    // `out`'s over the splits, not this phase's `m x n`.
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

    // Whether a stored sum is not finite: where the padding met a non-finite operand, it is
    // recomputed below (a split's partial sum is, after the sum, by `sum_splits_exact`).
    let mut suspect = false;
    #[unroll]
    for i in 0..block_m {
        let m = m0 + block_offset(tx, i);
        let row = row_of(&args, &phase, m, kind);
        #[unroll]
        for j in 0..block_n {
            let n = n0 + block_offset(ty, j);
            if m < gemm.m_len && n < gemm.n_len {
                let value = acc[i * block_n + j];
                if comptime![repair] {
                    suspect = suspect || !is_finite::<A>(value);
                }
                store::<F, A>(
                    out, bias, &args, group, split_base, &row, n, value, slope, activation, kind,
                );
            }
        }
    }
    if comptime![repair] {
        if suspect && splits == 1 {
            // Rarely taken, so one copy of the definition's loop, not one per element.
            for i in 0..block_m {
                let m = m0 + block_offset(tx, i);
                for j in 0..block_n {
                    let n = n0 + block_offset(ty, j);
                    if m < gemm.m_len && n < gemm.n_len {
                        repair_stored::<F, A>(
                            lhs, rhs, bias, out, &args, &gemm, &phase, group, m, n, slope,
                            activation, kind,
                        );
                    }
                }
            }
        }
    }
    #[comptime]
    if let ComptimeOption::Some(summed) = summed {
        #[comptime]
        if let ComptimeOption::Some(arrivals) = arrivals {
            // The tile's counter among the launch's: one per (phase, group, n tile, m tile).
            let tile = ((part * args.groups + group) * CUBE_COUNT_Y as usize + CUBE_POS_Y as usize)
                * CUBE_COUNT_X as usize
                + CUBE_POS_X as usize;
            if last_to_arrive(arrivals, tile, splits) {
                let sum_activation = comptime![handoff.and_then(|rule| rule.activation)];
                let sum_repair = comptime![handoff.is_some_and(|rule| rule.repair)];
                // The elements this unit stored, each summed over every split.
                for i in 0..block_m {
                    let m = m0 + block_offset(tx, i);
                    let row = row_of(&args, &phase, m, kind);
                    for j in 0..block_n {
                        let n = n0 + block_offset(ty, j);
                        if m < gemm.m_len && n < gemm.n_len {
                            let index = stored_index(&args, group, &row, n, kind);
                            finish_sum::<F, A>(
                                out,
                                summed,
                                splits,
                                index,
                                sum_slope,
                                sum_activation,
                            );
                            if comptime![sum_repair] {
                                repair_stored::<F, A>(
                                    lhs,
                                    rhs,
                                    bias,
                                    summed,
                                    &args,
                                    &gemm,
                                    &phase,
                                    group,
                                    m,
                                    n,
                                    sum_slope,
                                    sum_activation,
                                    kind,
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Stride phases a launch computes: the rows of its phase table, or one.
#[cube]
// `#[comptime]` marks a statement, so the match is bound before it is returned.
#[allow(clippy::let_and_return)]
fn phase_count(phases: ComptimeOption<&Tensor<u32>>) -> usize {
    #[comptime]
    let count = match phases {
        ComptimeOption::Some(table) => table.len() / PHASE_ENTRIES,
        ComptimeOption::None => 1usize.runtime(),
    };
    count
}

/// The rows of stride phase `part` from the phase table; without one, every position.
#[cube]
// `#[comptime]` marks a statement, so the match is bound before it is returned.
#[allow(clippy::let_and_return)]
fn phase_of(phases: ComptimeOption<&Tensor<u32>>, args: &ConvArgs, part: usize) -> Phase {
    #[comptime]
    let phase = match phases {
        ComptimeOption::Some(table) => {
            let at = part * PHASE_ENTRIES;
            Phase {
                first: table_axes(table, at + 3),
                step: args.stride.clone(),
                count: table_axes(table, at + 6),
                back: table_axes(table, at + 9),
            }
        }
        ComptimeOption::None => Phase {
            first: Index3 { d: 0, h: 0, w: 0 },
            step: Index3 { d: 1, h: 1, w: 1 },
            count: args.in_size.clone(),
            back: Index3 { d: 0, h: 0, w: 0 },
        },
    };
    phase
}

/// Three consecutive entries of `table` from `at`, as D, H, W.
#[cube]
fn table_axes(table: &Tensor<u32>, at: usize) -> Index3 {
    Index3 {
        d: table[at] as usize,
        h: table[at + 1] as usize,
        w: table[at + 2] as usize,
    }
}

/// The GEMM of stride phase `part`: its rows (the batch, `gemm`'s `m` over every input
/// position, times the phase's positions) and its share of `k`; without a phase table,
/// `gemm`.
#[cube]
// `#[comptime]` marks a statement, so the match is bound before it is returned.
#[allow(clippy::let_and_return)]
fn gemm_of(
    phases: ComptimeOption<&Tensor<u32>>,
    args: &ConvArgs,
    gemm: &GemmArgs,
    phase: &Phase,
    part: usize,
) -> GemmArgs {
    #[comptime]
    let part_gemm = match phases {
        ComptimeOption::Some(table) => {
            let at = part * PHASE_ENTRIES;
            GemmArgs {
                m_len: gemm.m_len / volume(&args.in_size) * volume(&phase.count),
                n_len: gemm.n_len,
                k_len: table[at] as usize,
                k_per_split: table[at + 1] as usize,
                m_tile_offset: gemm.m_tile_offset,
            }
        }
        ComptimeOption::None => gemm.clone(),
    };
    part_gemm
}

/// Where stride phase `part`'s `k` table starts, in `k`s: the phases' tables follow one
/// another in one `k` table.
#[cube]
// `#[comptime]` marks a statement, so the match is bound before it is returned.
#[allow(clippy::let_and_return)]
fn k_base_of(phases: ComptimeOption<&Tensor<u32>>, part: usize) -> usize {
    #[comptime]
    let base = match phases {
        ComptimeOption::Some(table) => table[part * PHASE_ENTRIES + 2] as usize,
        ComptimeOption::None => 0usize.runtime(),
    };
    base
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

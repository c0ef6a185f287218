//! Pooling whose one window per plane holds the whole plane (global pooling: adaptive pooling
//! to size 1, or a window as large as the input): `lanes` units reduce one contiguous plane,
//! each in a flat strided loop, with no span walk's three nested loops (the `global_avg_pool`
//! row). One
//! unit per plane leaves a GPU idle when planes are few or long (a 2x64x112x112 global pool
//! is 128 units, each walking 12,544 elements); several lanes per plane read consecutive
//! addresses together and combine their partial results in a fixed tree, so the result does
//! not depend on timing. A channels-last tensor's planes interleave: a unit then takes `N`
//! neighbouring channels as one vector, and neighbouring units neighbouring vectors.

use cubecl::prelude::*;

use crate::axes::volume;
use crate::pairwise::{BLOCK, LEVELS, carry_blocks, pairwise_total};
use crate::pool::{
    Placement, PoolArgs, Reduction, beats, neg_infinity, plane_offset, sum_term, sum_value,
    window_span,
};

/// `lanes` units per `N` planes (`lanes` a power of two dividing the cube's `cube_units`);
/// lane `l` reads elements `l, l + lanes, ...` of the planes' `D x H x W`. Those are contiguous
/// in `x` from a plane's offset (`N` is then 1), or, `channels_last`, one every `C` elements (a
/// dense NDHWC tensor), read for `N` neighbouring channels as one vector. Same semantics as
/// `pool::pool_forward`: `Max` keeps the first maximum (the first element if all are -inf), a
/// NaN wins (the last NaN), and writes its flat index; sums accumulate in `A` and divide or
/// take the norm by `pool::sum_value`, the window's padded volume read from its spans. With one
/// lane the sum runs in order, as on the CPU.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn pool_whole_plane<F: Float, I: Int, A: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    spans: &Tensor<u32>,
    out_grad: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    indices: &mut Tensor<Vector<I, N>>,
    args: PoolArgs,
    #[comptime] reduction: Reduction,
    #[comptime] placement: Placement,
    #[comptime] abs: bool,
    #[comptime] count_include_pad: bool,
    #[comptime] channels_last: bool,
    #[comptime] lanes: usize,
    #[comptime] cube_units: usize,
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    let width = N::value();
    // The unit's `N` planes, as one vector of `out` (whose planes are its elements in order).
    let planes = ABSOLUTE_POS / lanes;
    let unit = UNIT_POS as usize;
    let lane = unit % lanes;
    // Every unit stays to the end when lanes share planes: the tree's barriers are the whole
    // cube's. A unit past the last plane reads nothing.
    let active = planes < out.len();
    if comptime![lanes == 1] && !active {
        terminate!();
    }
    let elements = volume(&args.in_size);
    let mut end = 0usize;
    if active {
        end = elements;
    }
    // Element offsets are multiples of `N` (the launcher's condition for vectors).
    let base = plane_offset(&args, x.stride(0), x.stride(1), planes * width);
    // The lanes' partial results, `N` per unit (one unit's worth when a unit has its planes to
    // itself).
    let shared_len = comptime![if lanes > 1 { cube_units * width } else { width }];
    if comptime![reduction == Reduction::Max] {
        let mut values = Shared::<[F]>::new_slice(shared_len);
        let mut at = Shared::<[u32]>::new_slice(shared_len);
        let mut best = Array::<F>::new(width);
        // A lane with no element holds `elements`, larger than any index, so it loses ties.
        let mut best_index = Array::<usize>::new(width);
        #[unroll]
        for v in 0..width {
            best[v] = neg_infinity::<F>();
            best_index[v] = select(lane < end, lane, elements);
        }
        let mut e = lane;
        // [`BLOCK`] elements per iteration, as the sums below.
        while e < end {
            #[unroll]
            for _ in 0..BLOCK {
                if e < end {
                    let read = x[vector_at(&args, base, e, channels_last, width)];
                    #[unroll]
                    for v in 0..width {
                        let mut value = read.extract(v);
                        if comptime![abs] {
                            value = F::abs(value);
                        }
                        if beats::<F>(value, best[v]) {
                            best[v] = value;
                            best_index[v] = e;
                        }
                    }
                }
                e += lanes;
            }
        }
        if comptime![lanes > 1] {
            #[unroll]
            for v in 0..width {
                values[unit * width + v] = best[v];
                at[unit * width + v] = u32::cast_from(best_index[v]);
            }
            #[unroll]
            for step in 0..comptime![lanes.ilog2() as usize] {
                let half = (lanes / 2) >> step;
                sync_cube();
                if lane < half {
                    #[unroll]
                    for v in 0..width {
                        let (mine, theirs) = (unit * width + v, (unit + half) * width + v);
                        if max_takes::<F>(values[theirs], at[theirs], values[mine], at[mine]) {
                            values[mine] = values[theirs];
                            at[mine] = at[theirs];
                        }
                    }
                }
            }
            #[unroll]
            for v in 0..width {
                best[v] = values[unit * width + v];
                best_index[v] = at[unit * width + v] as usize;
            }
        }
        if active && lane == 0 {
            let mut result = Vector::<F, N>::broadcast(F::new(0.0));
            let mut result_at = Vector::<I, N>::broadcast(I::new(0));
            #[unroll]
            for v in 0..width {
                result.insert(v, best[v]);
                result_at.insert(v, I::cast_from(best_index[v]));
            }
            out[planes] = result;
            indices[planes] = result_at;
        }
    } else {
        let mut partial = Shared::<[A]>::new_slice(shared_len);
        // Sums accumulate in `A` (f32 for half types, as PyTorch does; f64 for f64), pairwise
        // in each lane (a packed launch walks a whole plane in one unit).
        let mut block = Array::<A>::new(width);
        let mut levels = Array::<A>::new(comptime![LEVELS * width]);
        #[unroll]
        for v in 0..width {
            block[v] = A::new(0.0);
        }
        let mut blocks = 0u32;
        let mut e = lane;
        // A block per iteration, its reads unrolled: independent loads in flight, and a
        // sixteenth of the iterations (lavapipe ends a loop after 65535).
        while e < end {
            #[unroll]
            for _ in 0..BLOCK {
                if e < end {
                    let read = x[vector_at(&args, base, e, channels_last, width)];
                    #[unroll]
                    for v in 0..width {
                        block[v] += sum_term::<F, A>(read.extract(v), &args, reduction);
                    }
                }
                e += lanes;
            }
            carry_blocks::<A>(&mut block, &mut levels, blocks, width);
            blocks += 1;
        }
        let mut sums = Array::<A>::new(width);
        #[unroll]
        for v in 0..width {
            sums[v] = pairwise_total::<A>(&block, &levels, blocks, v, width);
        }
        if comptime![lanes > 1] {
            #[unroll]
            for v in 0..width {
                partial[unit * width + v] = sums[v];
            }
            #[unroll]
            for step in 0..comptime![lanes.ilog2() as usize] {
                let half = (lanes / 2) >> step;
                sync_cube();
                if lane < half {
                    #[unroll]
                    for v in 0..width {
                        let mine = partial[unit * width + v];
                        let theirs = partial[(unit + half) * width + v];
                        partial[unit * width + v] = mine + theirs;
                    }
                }
            }
            #[unroll]
            for v in 0..width {
                sums[v] = partial[unit * width + v];
            }
        }
        if active && lane == 0 {
            let sd = window_span(spans, &args, 0, 0usize, placement);
            let sh = window_span(spans, &args, 0, 1usize, placement);
            let sw = window_span(spans, &args, 0, 2usize, placement);
            let padded = sd.padded * sh.padded * sw.padded;
            let mut grads = Vector::<F, N>::broadcast(F::new(0.0));
            if comptime![reduction == Reduction::LpShare] {
                grads = out_grad[planes];
            }
            let mut result = Vector::<F, N>::broadcast(F::new(0.0));
            #[unroll]
            for v in 0..width {
                let value = sum_value::<F, A>(
                    grads.extract(v),
                    &args,
                    sums[v],
                    elements,
                    padded,
                    reduction,
                    count_include_pad,
                );
                result.insert(v, value);
            }
            out[planes] = result;
        }
    }
}

/// The vector of `x` holding element `e` of the planes from element offset `base` (a multiple
/// of `width`): `e` along a contiguous plane, or `e` runs of `C` channels further when
/// `channels_last` (the contiguous case keeps its plain index: no multiply, no divide).
#[cube]
fn vector_at(
    args: &PoolArgs,
    base: usize,
    e: usize,
    #[comptime] channels_last: bool,
    #[comptime] width: usize,
) -> usize {
    let mut at = base + e;
    if comptime![channels_last] {
        at = (base + e * args.channels) / width;
    }
    at
}

/// Whether a lane's maximum `(value, at)` replaces another's `(best, best_at)` when their
/// elements interleave: what one in-order scan of both would keep. The last NaN, else the
/// larger value, else (a tie) the earlier element.
#[cube]
fn max_takes<F: Float>(value: F, at: u32, best: F, best_at: u32) -> bool {
    let value_is_nan = f32::is_nan(f32::cast_from(value));
    let best_is_nan = f32::is_nan(f32::cast_from(best));
    let mut takes = false;
    if value_is_nan && best_is_nan {
        takes = at > best_at;
    } else if value_is_nan || best_is_nan {
        takes = value_is_nan;
    } else if value > best {
        takes = true;
    } else if value == best {
        takes = at < best_at;
    }
    takes
}

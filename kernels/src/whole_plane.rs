//! Pooling whose one window per plane holds the whole plane (global pooling: adaptive pooling
//! to size 1, or a window as large as the input): `lanes` units reduce one contiguous plane,
//! each in a flat strided loop, with no span walk. On lavapipe the span walk's three nested
//! loops took the ResNet head's global average (512 planes of 7x7, batch 8) 1.3x longer. One
//! unit per plane leaves a GPU idle when planes are few or long (a 2x64x112x112 global pool
//! is 128 units, each walking 12,544 elements); several lanes per plane read consecutive
//! addresses together and combine their partial results in a fixed tree, so the result does
//! not depend on timing.

use cubecl::prelude::*;

use crate::axes::volume;
use crate::pool::{
    Placement, PoolArgs, Reduction, beats, neg_infinity, plane_offset, span_of, sum_term, write_sum,
};

/// `lanes` units per plane (a power of two dividing the cube's `cube_units`), whose `D x H x
/// W` elements are contiguous in `x` (from the plane's offset); lane `l` reads elements `l, l +
/// lanes, ...`. Same semantics as `pool::pool_forward`: `Max` keeps the first maximum (the
/// first element if all are -inf), a NaN wins (the last NaN), and writes its flat index; sums
/// accumulate in `A` and divide or take the norm by `pool::write_sum`, the window's padded
/// volume read from its spans. With one lane the sum runs in order, as on the CPU.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn pool_whole_plane<F: Float, I: Int, A: Float>(
    x: &Tensor<F>,
    spans: &Tensor<u32>,
    out_grad: &Tensor<F>,
    out: &mut Tensor<F>,
    indices: &mut Tensor<I>,
    args: PoolArgs,
    #[comptime] reduction: Reduction,
    #[comptime] placement: Placement,
    #[comptime] abs: bool,
    #[comptime] count_include_pad: bool,
    #[comptime] lanes: usize,
    #[comptime] cube_units: usize,
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    let plane = ABSOLUTE_POS / lanes;
    let unit = UNIT_POS as usize;
    let lane = unit % lanes;
    // Every unit stays to the end when lanes share a plane: the tree's barriers are the
    // whole cube's. A unit past the last plane reads nothing.
    let active = plane < out.len();
    if comptime![lanes == 1] && !active {
        terminate!();
    }
    let elements = volume(&args.in_size);
    let mut end = 0usize;
    if active {
        end = elements;
    }
    let base = plane_offset(&args, x.stride(0), x.stride(1), plane);
    // The lanes' partial results (one unit's worth when a unit has a plane to itself).
    let shared_len = comptime![if lanes > 1 { cube_units } else { 1 }];
    if comptime![reduction == Reduction::Max] {
        let mut values = Shared::<[F]>::new_slice(shared_len);
        let mut at = Shared::<[u32]>::new_slice(shared_len);
        let mut best = neg_infinity::<F>();
        // A lane with no element holds `elements`, larger than any index, so it loses ties.
        let mut best_index = elements;
        if lane < end {
            best_index = lane;
        }
        let mut e = lane;
        while e < end {
            let mut value = x[base + e];
            if comptime![abs] {
                value = F::abs(value);
            }
            if beats::<F>(value, best) {
                best = value;
                best_index = e;
            }
            e += lanes;
        }
        if comptime![lanes > 1] {
            values[unit] = best;
            at[unit] = u32::cast_from(best_index);
            #[unroll]
            for step in 0..comptime![lanes.ilog2() as usize] {
                let half = (lanes / 2) >> step;
                sync_cube();
                if lane < half {
                    let other = values[unit + half];
                    let other_at = at[unit + half];
                    let mine = values[unit];
                    let mine_at = at[unit];
                    if max_takes::<F>(other, other_at, mine, mine_at) {
                        values[unit] = other;
                        at[unit] = other_at;
                    }
                }
            }
            best = values[unit];
            best_index = at[unit] as usize;
        }
        if active && lane == 0 {
            out[plane] = best;
            indices[plane] = I::cast_from(best_index);
        }
    } else {
        let mut partial = Shared::<[A]>::new_slice(shared_len);
        // Sums accumulate in `A` (f32 for half types, as PyTorch does; f64 for f64).
        let mut sum = A::new(0.0);
        let mut e = lane;
        while e < end {
            sum += sum_term::<F, A>(x[base + e], &args, reduction);
            e += lanes;
        }
        if comptime![lanes > 1] {
            partial[unit] = sum;
            #[unroll]
            for step in 0..comptime![lanes.ilog2() as usize] {
                let half = (lanes / 2) >> step;
                sync_cube();
                if lane < half {
                    let mine = partial[unit];
                    let theirs = partial[unit + half];
                    partial[unit] = mine + theirs;
                }
            }
            sum = partial[unit];
        }
        if active && lane == 0 {
            let sd = span_of::<F>(spans, x, &args, plane, 0, 0usize, placement);
            let sh = span_of::<F>(spans, x, &args, plane, 0, 1usize, placement);
            let sw = span_of::<F>(spans, x, &args, plane, 0, 2usize, placement);
            write_sum::<F, A>(
                out,
                out_grad,
                &args,
                plane,
                sum,
                elements,
                sd.padded * sh.padded * sw.padded,
                reduction,
                count_include_pad,
            );
        }
    }
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

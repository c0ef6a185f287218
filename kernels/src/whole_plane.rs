//! Pooling whose one window per plane holds the whole plane (global pooling: adaptive pooling
//! to size 1, or a window as large as the input): a unit reduces one contiguous plane in a
//! single flat loop, with no span walk. On lavapipe the span walk's three nested loops took
//! the ResNet head's global average (512 planes of 7x7, batch 8) 1.3x longer.

use cubecl::prelude::*;

use crate::axes::volume;
use crate::pool::{
    Placement, PoolArgs, Reduction, beats, neg_infinity, plane_offset, span_of, sum_term, write_sum,
};

/// One unit per plane, whose `D x H x W` elements are contiguous in `x` (from the plane's
/// offset). Same semantics as `pool::pool_forward`: `Max` keeps the first maximum (the first
/// element if all are -inf), a NaN wins (the last NaN), and writes its flat index; sums add
/// the elements in order and divide or take the norm by `pool::write_sum`, the window's
/// padded volume read from its spans.
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
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    let plane = ABSOLUTE_POS;
    if plane >= out.len() {
        terminate!();
    }
    let base = plane_offset::<F>(x, &args, plane);
    let elements = volume(&args.in_size);
    if comptime![reduction == Reduction::Max] {
        let mut best = neg_infinity::<F>();
        let mut best_index = 0usize;
        for e in 0..elements {
            let mut value = x[base + e];
            if comptime![abs] {
                value = F::abs(value);
            }
            if beats::<F>(value, best) {
                best = value;
                best_index = e;
            }
        }
        out[plane] = best;
        indices[plane] = I::cast_from(best_index);
    } else {
        // Sums accumulate in `A` (f32 for half types, as PyTorch does; f64 for f64).
        let mut sum = A::new(0.0);
        for e in 0..elements {
            sum += sum_term::<F, A>(x[base + e], &args, reduction);
        }
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

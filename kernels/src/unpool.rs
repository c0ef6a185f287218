//! Max-unpool: a bounds-checked scatter forward and a gather backward. Indices are flat offsets
//! inside an `(n, c)` plane; an out-of-range index is skipped (the host validates them first).

use cubecl::prelude::*;

/// `out[plane, indices[i]] = x[i]` for each element `i` of `x`; `out` is zeroed by the caller.
/// Duplicate indices keep one of the written values, as in PyTorch.
#[cube(launch, address_type = "dynamic")]
pub fn max_unpool_scatter<F: Float, I: Int>(
    x: &Tensor<F>,
    indices: &Tensor<I>,
    out: &mut Tensor<F>,
    in_volume: usize,
    out_volume: usize,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= x.len() {
        terminate!();
    }
    let index = indices[ABSOLUTE_POS];
    let plane = ABSOLUTE_POS / in_volume;
    if index >= I::new(0) {
        let index = usize::cast_from(index);
        if index < out_volume {
            out[plane * out_volume + index] = x[ABSOLUTE_POS];
        }
    }
}

/// `x_grad[i] = out_grad[plane, indices[i]]`: the gradient of [`max_unpool_scatter()`].
#[cube(launch, address_type = "dynamic")]
pub fn max_unpool_gather<F: Float, I: Int>(
    out_grad: &Tensor<F>,
    indices: &Tensor<I>,
    x_grad: &mut Tensor<F>,
    in_volume: usize,
    out_volume: usize,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= x_grad.len() {
        terminate!();
    }
    let index = indices[ABSOLUTE_POS];
    let plane = ABSOLUTE_POS / in_volume;
    let mut value = F::new(0.0);
    if index >= I::new(0) {
        let index = usize::cast_from(index);
        if index < out_volume {
            value = out_grad[plane * out_volume + index];
        }
    }
    x_grad[ABSOLUTE_POS] = value;
}

/// `out[i] = 0`: the zero background of max-unpool, written contiguously (Burn's own zeros may
/// come with pitched rows, which the scatter does not index).
#[cube(launch, address_type = "dynamic")]
pub fn fill_zero<F: Float>(out: &mut Tensor<F>, #[define(F)] _dtype: ElemType) {
    if ABSOLUTE_POS >= out.len() {
        terminate!();
    }
    out[ABSOLUTE_POS] = F::new(0.0);
}

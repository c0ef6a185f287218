//! LP pooling for finite `p` and its gradient.

use crate::spec::{Span, Spans};

use super::{box_sum, for_each_box, for_each_tap, per_plane, tap_count};
use crate::cpu::kernels::element::Element;

/// LP pooling for finite `p`: `(sum x^p * K / count)^(1/p)` with `K` the full kernel volume, as
/// PyTorch computes it through `avg_pool(x^p) * K`.
pub fn lp_pool<T: Element>(
    x: &[T],
    in_size: [usize; 3],
    spans: &Spans,
    p: f64,
    kernel_volume: usize,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let planes = x.len().checked_div(in_volume).unwrap_or(0);
    let (p_t, inv_p) = (T::from_f64(p), T::from_f64(1.0 / p));
    let mut out = vec![T::ZERO; planes * out_volume];
    per_plane(
        &mut out,
        out_volume,
        in_volume + out_volume,
        |plane, out_plane| {
            let x_plane = &x[plane * in_volume..][..in_volume];
            for_each_box([&spans[0], &spans[1], &spans[2]], |o, boxed| {
                let total = lp_total(x_plane, in_size, boxed, p_t, kernel_volume);
                out_plane[o] = if total == T::ZERO {
                    T::ZERO
                } else {
                    total.powf(inv_p)
                };
            });
        },
    );
    out
}

/// `K / count`: LP pooling averages a box over its taps inside the input, then multiplies by the
/// full kernel volume `K` (PyTorch's `avg_pool(x^p) * K`).
fn lp_scale<T: Element>(boxed: [&Span; 3], kernel_volume: usize) -> T {
    T::from_f64(kernel_volume as f64 / tap_count(boxed) as f64)
}

/// `sum x^p * K / count` over one box: the value that LP pooling takes the `1/p` root of.
fn lp_total<T: Element>(
    x_plane: &[T],
    in_size: [usize; 3],
    boxed: [&Span; 3],
    p: T,
    kernel_volume: usize,
) -> T {
    box_sum(x_plane, in_size, boxed, |x| x.powf(p)) * lp_scale::<T>(boxed, kernel_volume)
}

/// Gradient of [`lp_pool`]. As in PyTorch's autograd, the chain rule through `x^p` is applied
/// to every element: one outside all windows gets `0 * p * x^(p-1)`, which is NaN for a negative
/// `x` and fractional `p`; a window whose total is 0 passes no gradient. With the forward's
/// `output` (`p >= 1`), a window's `total^(1/p - 1)` is its `y^(1 - p)` and its taps are read
/// once, by the scatter; without, each window is summed again.
pub fn lp_pool_backward<T: Element>(
    x: &[T],
    output: Option<&[T]>,
    out_grad: &[T],
    in_size: [usize; 3],
    spans: &Spans,
    p: f64,
    kernel_volume: usize,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let (p_t, inv_p) = (T::from_f64(p), T::from_f64(1.0 / p));
    let (p_minus_one, inv_p_minus_one) = (T::from_f64(p - 1.0), T::from_f64(1.0 / p - 1.0));
    let one_minus_p = T::from_f64(1.0 - p);
    let mut x_grad = vec![T::ZERO; x.len()];
    per_plane(
        &mut x_grad,
        in_volume,
        in_volume + out_volume,
        |plane, x_grad_plane| {
            let x_plane = &x[plane * in_volume..][..in_volume];
            let grad_plane = &out_grad[plane * out_volume..][..out_volume];
            let output_plane = output.map(|output| &output[plane * out_volume..][..out_volume]);
            for_each_box([&spans[0], &spans[1], &spans[2]], |o, boxed| {
                // `total^(1/p - 1)`, the slope of the root; none for an all-zero window.
                let slope = match output_plane {
                    Some(output_plane) if output_plane[o] == T::ZERO => return,
                    // A NaN total passes NaN (PyTorch's chain through `sign(S) * relu(|S|)`
                    // does), also at p = 1, where `y^(1 - p)` is `NaN^0 = 1`.
                    Some(output_plane)
                        if output_plane[o].partial_cmp(&output_plane[o]).is_none() =>
                    {
                        output_plane[o]
                    }
                    Some(output_plane) => output_plane[o].powf(one_minus_p),
                    None => {
                        let total = lp_total(x_plane, in_size, boxed, p_t, kernel_volume);
                        if total == T::ZERO {
                            return;
                        }
                        total.powf(inv_p_minus_one)
                    }
                };
                let share = grad_plane[o] * inv_p * slope * lp_scale::<T>(boxed, kernel_volume);
                for_each_tap(in_size, boxed, |i| x_grad_plane[i] += share);
            });
            for (grad, value) in x_grad_plane.iter_mut().zip(x_plane) {
                *grad = *grad * p_t * value.powf(p_minus_one);
            }
        },
    );
    x_grad
}

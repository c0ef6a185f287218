//! The convolution's three passes straight from their definitions, in f64, and the checks
//! every algorithm's tests run against them.

use burn::tensor::ops::ConvOptions;

use super::*;
use crate::cpu::kernels::points;

/// Deterministic values in [-1, 1).
pub(in crate::cpu::kernels) fn values(len: usize, seed: u64) -> Vec<f64> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// The convolution straight from its definition, one output at a time.
pub(in crate::cpu::kernels) fn reference(g: &ConvGeometry, x: &[f64], weight: &[f64]) -> Vec<f64> {
    let [out_d, out_h, out_w] = g.out_size;
    let [k_d, k_h, k_w] = g.kernel;
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    // The input position kernel tap `k` of output `o` reads along `axis`, if not padding.
    let at = |o: usize, k: usize, axis: usize| {
        let pos = (o * g.stride[axis] + k * g.dilation[axis]) as isize - g.pad_begin[axis] as isize;
        usize::try_from(pos).ok().filter(|&p| p < g.in_size[axis])
    };
    let mut out = Vec::new();
    for n in 0..g.batch {
        for oc in 0..g.out_channels {
            for (od, oh, ow) in (0..out_d)
                .flat_map(|d| (0..out_h).flat_map(move |h| (0..out_w).map(move |w| (d, h, w))))
            {
                let mut sum = 0.0;
                for c in 0..cin_g {
                    let ic = oc / cout_g * cin_g + c;
                    for (kd, kh, kw) in (0..k_d)
                        .flat_map(|d| (0..k_h).flat_map(move |h| (0..k_w).map(move |w| (d, h, w))))
                    {
                        let (Some(id), Some(ih), Some(iw)) =
                            (at(od, kd, 0), at(oh, kh, 1), at(ow, kw, 2))
                        else {
                            continue;
                        };
                        let [in_d, in_h, in_w] = g.in_size;
                        let x_at = (((n * g.in_channels + ic) * in_d + id) * in_h + ih) * in_w + iw;
                        let w_at = (((oc * cin_g + c) * k_d + kd) * k_h + kh) * k_w + kw;
                        sum += x[x_at] * weight[w_at];
                    }
                }
                out.push(sum);
            }
        }
    }
    out
}

/// Both gradients straight from their definitions: every output's gradient scattered back
/// through every tap that read an input, to that input and to that tap's weight.
pub(in crate::cpu::kernels) fn reference_grads(
    g: &ConvGeometry,
    x: &[f64],
    weight: &[f64],
    out_grad: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let [in_d, in_h, in_w] = g.in_size;
    let [k_d, k_h, k_w] = g.kernel;
    let at = |o: usize, k: usize, axis: usize| {
        let pos = (o * g.stride[axis] + k * g.dilation[axis]) as isize - g.pad_begin[axis] as isize;
        usize::try_from(pos).ok().filter(|&p| p < g.in_size[axis])
    };
    let mut x_grad = vec![0.0; x.len()];
    let mut weight_grad = vec![0.0; weight.len()];
    let mut index = 0;
    for n in 0..g.batch {
        for oc in 0..g.out_channels {
            for [od, oh, ow] in points(g.out_size) {
                let dy = out_grad[index];
                index += 1;
                for c in 0..cin_g {
                    let ic = oc / cout_g * cin_g + c;
                    for [kd, kh, kw] in points(g.kernel) {
                        let (Some(id), Some(ih), Some(iw)) =
                            (at(od, kd, 0), at(oh, kh, 1), at(ow, kw, 2))
                        else {
                            continue;
                        };
                        let w_at = (((oc * cin_g + c) * k_d + kd) * k_h + kh) * k_w + kw;
                        let x_at = (((n * g.in_channels + ic) * in_d + id) * in_h + ih) * in_w + iw;
                        x_grad[x_at] += weight[w_at] * dy;
                        weight_grad[w_at] += x[x_at] * dy;
                    }
                }
            }
        }
    }
    (x_grad, weight_grad)
}

/// A fast path's three passes of `g` in f64 against the definitions, within 1e-10: the
/// forward pass with a bias (`forward(x, weight, bias)`), `x_backward(weight, out_grad)`
/// and `weight_backward(x, out_grad)`, on values drawn from `seed` on.
pub(in crate::cpu::kernels) fn check_passes(
    g: &ConvGeometry,
    seed: u64,
    forward: impl Fn(&[f64], &[f64], &[f64]) -> Vec<f64>,
    x_backward: impl Fn(&[f64], &[f64]) -> Vec<f64>,
    weight_backward: impl Fn(&[f64], &[f64]) -> Vec<f64>,
) {
    let close = |what: &str, got: &[f64], expected: &[f64]| {
        assert_eq!(got.len(), expected.len(), "{what}: length");
        for (i, (a, b)) in got.iter().zip(expected).enumerate() {
            assert!((a - b).abs() < 1e-10, "{what}[{i}]: {a} vs {b} ({g:?})");
        }
    };
    let x = values(g.in_shape().iter().product(), seed);
    let weight = values(g.weight_shape().iter().product(), seed + 1);
    let bias = values(g.out_channels, seed + 2);
    let out = forward(&x, &weight, &bias);
    let mut expected = reference(g, &x, &weight);
    for (i, value) in expected.iter_mut().enumerate() {
        *value += bias[i / g.out_volume() % g.out_channels];
    }
    close("forward", &out, &expected);
    let out_grad = values(out.len(), seed + 3);
    let (expected_x_grad, expected_weight_grad) = reference_grads(g, &x, &weight, &out_grad);
    close(
        "x_backward",
        &x_backward(&weight, &out_grad),
        &expected_x_grad,
    );
    close(
        "weight_backward",
        &weight_backward(&x, &out_grad),
        &expected_weight_grad,
    );
}

/// The geometry of a convolution of `x_shape` into `out_channels` by a `kernel`.
pub(in crate::cpu::kernels) fn geometry(
    x_shape: [usize; 5],
    out_channels: usize,
    kernel: [usize; 3],
    options: &ConvOptions<3>,
) -> ConvGeometry {
    let [k_d, k_h, k_w] = kernel;
    let weight_shape = [out_channels, x_shape[1] / options.groups, k_d, k_h, k_w];
    ConvGeometry::conv(&x_shape, &weight_shape, options)
}

pub(in crate::cpu::kernels) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// Forward against the definition, and both gradients through the adjoint identities
/// `<conv(x, w), y> = <x, x_grad(w, y)> = <w, w_grad(x, y)>`.
pub(in crate::cpu::kernels) fn check(
    x_shape: [usize; 5],
    out_channels: usize,
    kernel: [usize; 3],
    options: ConvOptions<3>,
) {
    let g = geometry(x_shape, out_channels, kernel, &options);
    let weight_shape = g.weight_shape();
    let x = values(x_shape.iter().product(), 1);
    let weight = values(weight_shape.iter().product(), 2);
    let out = forward(&g, &x, &weight, None);
    let expected = reference(&g, &x, &weight);
    assert_eq!(out.len(), expected.len());
    for (i, (a, b)) in out.iter().zip(&expected).enumerate() {
        assert!((a - b).abs() < 1e-9, "forward[{i}]: {a} vs {b} ({g:?})");
    }
    let y = values(out.len(), 3);
    let lhs = dot(&out, &y);
    let x_side = dot(&x, &x_backward(&g, &weight, &y));
    let weight_side = dot(&weight, &weight_backward(&g, &x, &y));
    assert!(
        (lhs - x_side).abs() < 1e-8 * lhs.abs().max(1.0),
        "x_backward: {lhs} vs {x_side}"
    );
    assert!(
        (lhs - weight_side).abs() < 1e-8 * lhs.abs().max(1.0),
        "weight_backward: {lhs} vs {weight_side}"
    );
}

//! Convolution on the CPU: im2col + GEMM for the forward pass, the input gradient (GEMM then
//! col2im) and the weight gradient (GEMM against the patch matrix, summed over the batch).
//! Groups are handled by offsetting into the same buffers: no per-group copies. The patch
//! matrix is built one cache-sized tile of output rows at a time (`row_tiles`), so a large
//! image (video, audio) never streams a patch matrix of tens of megabytes through memory.
//! The depthwise forward pass skips the lowering altogether (`depthwise`).
//!
//! Every routine takes a [`ConvGeometry`] and contiguous NCDHW slices; transposed convolutions
//! reuse them through the adjoint geometry (see `ConvGeometry::transpose`).

use core::ops::Range;

use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::depthwise;
use super::element::{Element, Split};
use super::gemm::{MatMut, MatRef, matmul};
use super::im2col::{col2im, im2col, is_pointwise, row_tiles, tile_columns};

/// Run `body(batch_index, chunk, scratch)` for every batch item, on rayon when `split.outer`,
/// with one scratch buffer per worker.
fn for_each_item<T: Element>(
    out: &mut [T],
    item_len: usize,
    scratch_len: usize,
    split: Split,
    body: impl Fn(usize, &mut [T], &mut Vec<T>) + Sync + Send,
) {
    if item_len == 0 {
        return;
    }
    let init = || vec![T::ZERO; scratch_len];
    if split.outer {
        out.par_chunks_mut(item_len)
            .enumerate()
            .for_each_init(init, |scratch, (n, chunk)| body(n, chunk, scratch));
    } else {
        let mut scratch = init();
        for (n, chunk) in out.chunks_mut(item_len).enumerate() {
            body(n, chunk, &mut scratch);
        }
    }
}

/// Elements of scratch one tile's patch matrix needs (none when the input is its own).
fn col_len<T>(geometry: &ConvGeometry) -> usize {
    if is_pointwise(geometry) {
        return 0;
    }
    let largest = row_tiles(geometry, size_of::<T>()).next().unwrap_or(0..0);
    geometry.patch_len() * tile_columns(geometry, &largest).len()
}

/// Call `body(columns, patches)` for each tile of output positions, with the tile's patch
/// matrix (`patch_len x columns.len()`) lowered from one group's input into `col`, or the input
/// itself, whole, for a pointwise convolution.
fn for_each_patch_tile<T: Element>(
    geometry: &ConvGeometry,
    x_group: &[T],
    col: &mut [T],
    mut body: impl FnMut(Range<usize>, MatRef<'_, T>),
) {
    let patch = geometry.patch_len();
    if is_pointwise(geometry) {
        let out_vol = geometry.out_volume();
        body(0..out_vol, MatRef::rows(x_group, patch, out_vol));
        return;
    }
    for rows in row_tiles(geometry, size_of::<T>()) {
        let columns = tile_columns(geometry, &rows);
        let col = &mut col[..patch * columns.len()];
        im2col(geometry, x_group, rows, col);
        let len = columns.len();
        body(columns, MatRef::rows(col, patch, len));
    }
}

/// `out = conv(x, weight) + bias`, shape `geometry.out_shape()`.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
) -> Vec<T> {
    let g = geometry;
    if depthwise::is_depthwise(g) {
        return depthwise::forward(g, x, weight, bias);
    }
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let mut out = vec![T::ZERO; g.out_shape().iter().product()];
    let split = Split::for_items(g.batch);
    for_each_item(
        &mut out,
        g.out_channels * out_vol,
        col_len::<T>(g),
        split,
        |n, out_n, col| {
            if let Some(bias) = bias {
                for (row, value) in out_n.chunks_mut(out_vol).zip(bias) {
                    row.fill(*value);
                }
            }
            for group in 0..g.groups {
                let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol];
                let weight_group = &weight[group * cout_g * patch..][..cout_g * patch];
                let out_group = &mut out_n[group * cout_g * out_vol..][..cout_g * out_vol];
                for_each_patch_tile(g, x_group, col, |columns, patches| {
                    matmul(
                        MatMut::columns(
                            &mut out_group[columns.start..],
                            cout_g,
                            columns.len(),
                            out_vol,
                        ),
                        MatRef::rows(weight_group, cout_g, patch),
                        patches,
                        bias.is_some(),
                        split.inner,
                    );
                });
            }
        },
    );
    out
}

/// Gradient of `conv` with respect to `x`, shape `geometry.in_shape()`.
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry;
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let mut x_grad = vec![T::ZERO; g.in_shape().iter().product()];
    let split = Split::for_items(g.batch);
    for_each_item(
        &mut x_grad,
        g.in_channels * in_vol,
        col_len::<T>(g),
        split,
        |n, x_grad_n, col| {
            for group in 0..g.groups {
                let weight_group = &weight[group * cout_g * patch..][..cout_g * patch];
                let out_grad_group = &out_grad[(n * g.out_channels + group * cout_g) * out_vol..]
                    [..cout_g * out_vol];
                let x_grad_group = &mut x_grad_n[group * cin_g * in_vol..][..cin_g * in_vol];
                let weight_t = MatRef::transposed(weight_group, patch, cout_g);
                if is_pointwise(g) {
                    matmul(
                        MatMut::rows(x_grad_group, patch, out_vol),
                        weight_t,
                        MatRef::rows(out_grad_group, cout_g, out_vol),
                        false,
                        split.inner,
                    );
                    continue;
                }
                for rows in row_tiles(g, size_of::<T>()) {
                    let columns = tile_columns(g, &rows);
                    let col = &mut col[..patch * columns.len()];
                    matmul(
                        MatMut::rows(col, patch, columns.len()),
                        weight_t,
                        MatRef::columns(
                            &out_grad_group[columns.start..],
                            cout_g,
                            columns.len(),
                            out_vol,
                        ),
                        false,
                        split.inner,
                    );
                    col2im(g, col, rows, x_grad_group);
                }
            }
        },
    );
    x_grad
}

/// Gradient of `conv` with respect to `weight`, shape `geometry.weight_shape()`.
///
/// The batch is cut into one contiguous chunk per thread; each chunk accumulates its own
/// partial gradient and the partials are summed in chunk order, so the result does not depend
/// on scheduling.
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry;
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let weight_len = g.out_channels * patch;
    let chunks = g.batch.clamp(1, rayon::current_num_threads());
    let split = Split::for_items(chunks);
    let per_chunk = g.batch.div_ceil(chunks).max(1);
    let partial = |chunk: usize| {
        let mut weight_grad = vec![T::ZERO; weight_len];
        let mut col = vec![T::ZERO; col_len::<T>(g)];
        let items = (chunk * per_chunk)..((chunk + 1) * per_chunk).min(g.batch);
        for (step, n) in items.enumerate() {
            for group in 0..g.groups {
                let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol];
                let out_grad_group = &out_grad[(n * g.out_channels + group * cout_g) * out_vol..]
                    [..cout_g * out_vol];
                let weight_grad_group =
                    &mut weight_grad[group * cout_g * patch..][..cout_g * patch];
                let mut accumulate = step > 0;
                for_each_patch_tile(g, x_group, &mut col, |columns, patches| {
                    matmul(
                        MatMut::rows(weight_grad_group, cout_g, patch),
                        MatRef::columns(
                            &out_grad_group[columns.start..],
                            cout_g,
                            columns.len(),
                            out_vol,
                        ),
                        patches.transpose(),
                        accumulate,
                        split.inner,
                    );
                    accumulate = true;
                });
            }
        }
        weight_grad
    };
    let partials: Vec<Vec<T>> = if split.outer {
        (0..chunks).into_par_iter().map(partial).collect()
    } else {
        (0..chunks).map(partial).collect()
    };
    let mut partials = partials.into_iter();
    let mut weight_grad = partials.next().unwrap_or_else(|| vec![T::ZERO; weight_len]);
    for other in partials {
        weight_grad
            .iter_mut()
            .zip(&other)
            .for_each(|(a, b)| *a += *b);
    }
    weight_grad
}

/// Gradient of a per-channel bias: `out_grad` summed over batch and space, for a contiguous
/// `(N, C, volume)` gradient.
pub fn bias_backward<T: Element>(out_grad: &[T], batch: usize, channels: usize) -> Vec<T> {
    let volume = out_grad.len().checked_div(batch * channels).unwrap_or(0);
    (0..channels)
        .into_par_iter()
        .map(|c| {
            let mut sum = T::ZERO;
            for n in 0..batch {
                for value in &out_grad[(n * channels + c) * volume..][..volume] {
                    sum += *value;
                }
            }
            sum
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use burn::tensor::ops::ConvOptions;

    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(len: usize, seed: u64) -> Vec<f64> {
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
    fn reference(g: &ConvGeometry, x: &[f64], weight: &[f64]) -> Vec<f64> {
        let [out_d, out_h, out_w] = g.out_size;
        let [k_d, k_h, k_w] = g.kernel;
        let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
        // The input position kernel tap `k` of output `o` reads along `axis`, if not padding.
        let at = |o: usize, k: usize, axis: usize| {
            let pos =
                (o * g.stride[axis] + k * g.dilation[axis]) as isize - g.pad_begin[axis] as isize;
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
                        for (kd, kh, kw) in (0..k_d).flat_map(|d| {
                            (0..k_h).flat_map(move |h| (0..k_w).map(move |w| (d, h, w)))
                        }) {
                            let (Some(id), Some(ih), Some(iw)) =
                                (at(od, kd, 0), at(oh, kh, 1), at(ow, kw, 2))
                            else {
                                continue;
                            };
                            let [in_d, in_h, in_w] = g.in_size;
                            let x_at =
                                (((n * g.in_channels + ic) * in_d + id) * in_h + ih) * in_w + iw;
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

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(a, b)| a * b).sum()
    }

    /// Forward against the definition, and both gradients through the adjoint identities
    /// `<conv(x, w), y> = <x, x_grad(w, y)> = <w, w_grad(x, y)>`.
    fn check(
        x_shape: [usize; 5],
        out_channels: usize,
        kernel: [usize; 3],
        options: ConvOptions<3>,
    ) {
        let weight_shape = [
            out_channels,
            x_shape[1] / options.groups,
            kernel[0],
            kernel[1],
            kernel[2],
        ];
        let g = ConvGeometry::conv(&x_shape, &weight_shape, &options);
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

    #[test]
    fn several_tiles_of_2d_rows() {
        // 144 f64 per column: tiles of 15 rows of 64 (4 full tiles and a remainder); at stride 2,
        // 29 rows of 32.
        let geometry_check = |stride| {
            check(
                [1, 16, 1, 64, 64],
                3,
                [1, 3, 3],
                ConvOptions::new([1, stride, stride], [0, 1, 1], [1; 3], 1),
            )
        };
        geometry_check(1);
        geometry_check(2);
    }

    #[test]
    fn tiles_that_cross_depth_slices() {
        // 216 f64 per column and 20-wide rows: tiles of 31 rows straddle the 20-row depth slices.
        check(
            [2, 8, 6, 20, 20],
            4,
            [3, 3, 3],
            ConvOptions::new([1; 3], [1; 3], [1; 3], 1),
        );
        check(
            [1, 8, 6, 20, 20],
            4,
            [2, 3, 3],
            ConvOptions::new([1, 2, 1], [0, 2, 1], [1, 1, 2], 2),
        );
    }

    /// The depthwise stencil on rows of 3, 5, 7 and 4 taps, on inputs narrower and wider than
    /// the kernel, and dilated.
    #[test]
    fn depthwise_rows_of_every_width() {
        for (k_w, pad_w) in [(3, 1), (5, 2), (7, 3), (4, 1), (5, 0)] {
            for in_w in [3, 9, 17] {
                if in_w + 2 * pad_w < k_w {
                    continue;
                }
                check(
                    [2, 3, 1, 4, in_w],
                    3,
                    [1, 2, k_w],
                    ConvOptions::new([1; 3], [0, 1, pad_w], [1; 3], 3),
                );
            }
        }
        check(
            [1, 2, 1, 5, 12],
            2,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 2], [1, 1, 2], 2),
        );
    }

    /// Depthwise (the stencil) and channel multipliers (still the GEMM) side by side.
    #[test]
    fn depthwise_and_channel_multipliers() {
        check(
            [2, 6, 1, 9, 11],
            6,
            [1, 3, 3],
            ConvOptions::new([1, 1, 1], [0, 1, 1], [1; 3], 6),
        );
        check(
            [1, 3, 1, 9, 11],
            6,
            [1, 3, 2],
            ConvOptions::new([1, 2, 3], [0, 2, 1], [1, 2, 1], 3),
        );
        check(
            [1, 4, 5, 7, 6],
            4,
            [3, 2, 3],
            ConvOptions::new([2, 1, 2], [1, 0, 2], [1, 2, 1], 4),
        );
        check(
            [1, 1, 1, 1, 8],
            2,
            [1, 1, 3],
            ConvOptions::new([1; 3], [0, 0, 5], [1; 3], 1),
        );
    }
}

//! Sliding-window arithmetic shared by every convolution and pooling op (output lengths: plain,
//! transposed and "same"), and the lift of rank-N parameters to the rank-3 form that every
//! backend primitive works in.

/// Effective extent of a dilated kernel: `dilation * (kernel - 1) + 1`, saturating at
/// `usize::MAX`, which is above every padded length validation accepts
/// ([`super::MAX_SIZE`]), so a saturated extent never fits.
pub fn kernel_extent(kernel: usize, dilation: usize) -> usize {
    dilation.saturating_mul(kernel.max(1) - 1).saturating_add(1)
}

/// Every point of a `[d, h, w]` box in row-major order.
pub fn points([d, h, w]: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..d).flat_map(move |i| (0..h).flat_map(move |j| (0..w).map(move |k| [i, j, k])))
}

/// Number of windows along one axis, or `None` if the kernel does not fit in the padded input.
///
/// `(len + pad_begin + pad_end - extent) / stride + 1`, floored, or with `ceil_mode` rounded up
/// under PyTorch's rule: a last window that would start in the right padding is dropped
/// (`Pool.h`, `pooling_output_shape_pad_lr`). Exact for any inputs (computed in 128 bits).
pub fn out_len(
    len: usize,
    (pad_begin, pad_end): (usize, usize),
    kernel: usize,
    stride: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Option<usize> {
    let padded = len as u128 + pad_begin as u128 + pad_end as u128;
    let extent = dilation as u128 * (kernel.max(1) - 1) as u128 + 1;
    let stride = stride.max(1) as u128;
    // In ceil mode PyTorch rounds a negative span up too: a kernel may overhang the padded
    // input by less than a stride.
    let slack = if ceil_mode { stride - 1 } else { 0 };
    let reach = (padded + slack).checked_sub(extent)?;
    let mut out = reach / stride + 1;
    if ceil_mode && out > 1 && (out - 1) * stride >= len as u128 + pad_begin as u128 {
        out -= 1;
    }
    usize::try_from(out).ok()
}

/// The `k` in `0..n` for which `first + k * step` lies in `0..len`: the taps of a window that
/// fall inside the input, or the output positions at which one kernel tap does. `first` is
/// 128-bit so that a window start far in the padding is exact.
pub fn inside(first: i128, step: usize, n: usize, len: usize) -> core::ops::Range<usize> {
    let step = step.max(1) as i128;
    let lo = if first >= 0 {
        0
    } else {
        (-first + step - 1) / step
    };
    let room = len as i128 - first;
    let hi = if room <= 0 {
        0
    } else {
        (room + step - 1) / step
    };
    let clamp = |k: i128| k.min(n as i128) as usize;
    let lo = clamp(lo);
    lo..clamp(hi).max(lo)
}

/// Lift a rank-N per-axis parameter to rank 3 by prepending `fill` (unit axes of size 1).
pub fn lift<T: Copy, const N: usize>(values: [T; N], fill: T) -> [T; 3] {
    assert!(N <= 3, "spatial rank {N} is above 3");
    let mut lifted = [fill; 3];
    lifted[3 - N..].copy_from_slice(&values);
    lifted
}

/// The spatial part `(D, H, W)` of an `(N, C, *spatial)` shape with 1 to 3 spatial axes,
/// lifted as [`lifted_dims`] lifts it.
pub fn spatial(dims: &[usize]) -> [usize; 3] {
    let [_, _, d, h, w] = lifted_dims(dims);
    [d, h, w]
}

/// An `(N, C, *spatial)` shape with 1 to 3 spatial axes as rank 5, `(N, C, D, H, W)`: unit axes
/// before the spatial ones. The backend primitives take their operands at any of these ranks
/// and lift them so, as views, inside each backend.
pub fn lifted_dims(dims: &[usize]) -> [usize; 5] {
    assert!(
        (3..=5).contains(&dims.len()),
        "an (N, C, *spatial) shape has rank 3 to 5, not {}",
        dims.len()
    );
    let mut lifted = [dims[0], dims[1], 1, 1, 1];
    lifted[7 - dims.len()..].copy_from_slice(&dims[2..]);
    lifted
}

/// A rank-5 shape back at `rank` (3 to 5): its leading spatial axes, which the lift added,
/// dropped.
pub fn lowered_dims(dims: [usize; 5], rank: usize) -> Vec<usize> {
    let mut lowered = dims[..2].to_vec();
    lowered.extend_from_slice(&dims[7 - rank..]);
    lowered
}

/// `step` as a computation reads it: a stride over `count == 1` output positions, or a
/// dilation between the taps of a one-tap kernel, multiplies nothing, so it is 1 (validation
/// allows either up to [`MAX_SIZE`](crate::MAX_SIZE), more than narrow kernels can hold).
pub fn used_step(step: usize, count: usize) -> usize {
    if count == 1 { 1 } else { step }
}

/// Output length of a transposed convolution:
/// `(len - 1) * stride - 2 * padding + dilation * (kernel - 1) + padding_out + 1`,
/// or `None` if that is not positive. Exact (128-bit); saturates at `usize::MAX`, which
/// validation rejects ([`transpose_full_len`] is checked first).
pub fn transpose_out_len(
    len: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    padding_out: usize,
    dilation: usize,
) -> Option<usize> {
    let full = transpose_full_len(len, kernel, stride, padding_out, dilation);
    full.checked_sub(2 * padding as u128)
        .filter(|&n| n > 0 && len > 0)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// The transposed output before the padding comes off:
/// `(len - 1) * stride + dilation * (kernel - 1) + padding_out + 1`, the padded length of its
/// adjoint convolution's input.
pub fn transpose_full_len(
    len: usize,
    kernel: usize,
    stride: usize,
    padding_out: usize,
    dilation: usize,
) -> u128 {
    (len.max(1) - 1) as u128 * stride as u128
        + dilation as u128 * (kernel.max(1) - 1) as u128
        + 1
        + padding_out as u128
}

/// `"same"` padding `(begin, end)` for a window of `extent` taps at `stride`: the output has
/// `ceil(len / stride)` elements and the odd element of the total goes last. With stride 1
/// this is PyTorch's `padding="same"`; with a larger stride it is TensorFlow's and Burn's.
pub fn same_padding(len: usize, extent: usize, stride: usize) -> (usize, usize) {
    let out = len.div_ceil(stride.max(1));
    let total = ((out.max(1) - 1) * stride + extent).saturating_sub(len);
    (total / 2, total - total / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_and_ceil_lengths() {
        assert_eq!(out_len(5, (0, 0), 2, 2, 1, false), Some(2));
        assert_eq!(out_len(5, (0, 0), 2, 2, 1, true), Some(3));
        // The ceil window that would start in the right padding is dropped.
        assert_eq!(out_len(4, (1, 1), 2, 3, 1, true), Some(2));
        assert_eq!(out_len(2, (0, 0), 3, 1, 1, false), None);
        assert_eq!(out_len(7, (0, 0), 3, 1, 2, false), Some(3));
        // Ceil mode lets the dilated kernel overhang by less than a stride.
        assert_eq!(out_len(4, (0, 0), 3, 3, 2, true), Some(1));
        assert_eq!(out_len(4, (0, 0), 3, 3, 2, false), None);
    }

    #[test]
    fn lengths_are_exact_at_the_extremes() {
        let max = usize::MAX;
        // A huge stride leaves one window; the sum and the product do not wrap.
        assert_eq!(out_len(5, (0, 0), 2, max / 2, 1, false), Some(1));
        assert_eq!(out_len(5, (0, 0), 2, max / 2, 1, true), Some(1));
        // A huge kernel or dilation never fits a small input.
        assert_eq!(out_len(4, (0, 0), max, 1, 1, false), None);
        assert_eq!(out_len(4, (1, 1), 3, 1, max, true), None);
        assert_eq!(kernel_extent(3, max), max);
        // Huge padding: the exact count, or None past usize.
        assert_eq!(out_len(4, (max / 2, 0), 1, max, 1, false), Some(1));
        assert_eq!(out_len(4, (max, max), 1, 1, 1, false), None);
        assert_eq!(inside(-(1 << 100), 1, 3, 2), 3..3);
    }

    #[test]
    fn progression_inside_the_input() {
        assert_eq!(inside(-1, 1, 5, 5), 1..5);
        assert_eq!(inside(1, 1, 5, 5), 0..4);
        assert_eq!(inside(-1, 2, 3, 5), 1..3);
        assert_eq!(inside(5, 1, 3, 2), 0..0);
    }

    #[test]
    fn lift_prepends_unit_axes() {
        assert_eq!(lift([4, 5], 1), [1, 4, 5]);
        assert_eq!(spatial(&[2, 3, 1, 4, 5]), [1, 4, 5]);
    }
}

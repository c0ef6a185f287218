//! Pooling options and their validation. The window model the pools walk ([`Span`](super::Span)s and
//! their builders and covers) is in `spans.rs`.
//!
//! Index convention (max, adaptive max and fractional max pooling, and max-unpool): an index is
//! the row-major flat offset of the chosen element inside its `(n, c)` plane of the *unpadded*
//! input, `(t * H + h) * W + w` (`h * W + w` in 2d), as in PyTorch.

use burn::tensor::ops::AvgPoolOptions;
pub use burn::tensor::ops::MaxPoolOptions;

use super::check::{check_nonempty, check_nonzero};
use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};
use super::limits::{check_elements, check_padded_len, check_size, check_volume};
use super::spans::sliding_spans;
use super::window::{kernel_extent, lift, out_len};

/// Options of `avg_poolNd`: Burn's [`AvgPoolOptions`] plus PyTorch's `divisor_override`.
///
/// ```
/// use burn_convpool::AvgPoolNdOptions;
/// let options = AvgPoolNdOptions::new([3, 3])
///     .with_stride([2, 2])
///     .with_padding([1, 1])
///     .with_ceil_mode(true)
///     .with_count_include_pad(false)
///     .with_divisor_override(4);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AvgPoolNdOptions<const N: usize> {
    /// Kernel size.
    pub kernel_size: [usize; N],
    /// Stride (defaults to the kernel size).
    pub stride: [usize; N],
    /// `(begin, end)` padding per dim.
    pub padding: [(usize, usize); N],
    /// Count padding in the divisor (default true).
    pub count_include_pad: bool,
    /// Round the output size up.
    pub ceil_mode: bool,
    /// Divide every window by this instead: any nonzero integer, a negative one too, as
    /// PyTorch takes it.
    pub divisor_override: Option<i64>,
}

impl<const N: usize> AvgPoolNdOptions<N> {
    /// Options with stride = kernel, no padding, `count_include_pad`, floor mode.
    pub fn new(kernel_size: [usize; N]) -> Self {
        Self {
            kernel_size,
            stride: kernel_size,
            padding: [(0, 0); N],
            count_include_pad: true,
            ceil_mode: false,
            divisor_override: None,
        }
    }
    /// Set the stride.
    pub fn with_stride(mut self, stride: [usize; N]) -> Self {
        self.stride = stride;
        self
    }
    /// Symmetric padding.
    pub fn with_padding(mut self, padding: [usize; N]) -> Self {
        self.padding = padding.map(|p| (p, p));
        self
    }
    /// `(begin, end)` padding.
    pub fn with_padding_pairs(mut self, padding: [(usize, usize); N]) -> Self {
        self.padding = padding;
        self
    }
    /// Count padding in the divisor.
    pub fn with_count_include_pad(mut self, count_include_pad: bool) -> Self {
        self.count_include_pad = count_include_pad;
        self
    }
    /// Ceil mode.
    pub fn with_ceil_mode(mut self, ceil_mode: bool) -> Self {
        self.ceil_mode = ceil_mode;
        self
    }
    /// Fixed divisor: any nonzero integer, of either sign.
    pub fn with_divisor_override(mut self, divisor: i64) -> Self {
        self.divisor_override = Some(divisor);
        self
    }
}

impl<const N: usize> From<AvgPoolOptions<N>> for AvgPoolNdOptions<N> {
    fn from(options: AvgPoolOptions<N>) -> Self {
        Self {
            kernel_size: options.kernel_size,
            stride: options.stride,
            padding: options.padding,
            count_include_pad: options.count_include_pad,
            ceil_mode: options.ceil_mode,
            divisor_override: None,
        }
    }
}

/// Options of `lp_poolNd`: `(sum x^p)^(1/p)` over each window, PyTorch's formula.
///
/// ```
/// use burn_convpool::LpPoolOptions;
/// let options = LpPoolOptions::new(2.0, [2, 2]).with_stride([1, 1]).with_ceil_mode(true);
/// let max_abs = LpPoolOptions::new(f64::INFINITY, [3]);
/// # let _ = (options, max_abs);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LpPoolOptions<const N: usize> {
    /// `p > 0`; `f64::INFINITY` is the max of `|x|`.
    pub norm_type: f64,
    /// Kernel size.
    pub kernel_size: [usize; N],
    /// Stride (defaults to the kernel size).
    pub stride: [usize; N],
    /// Round the output size up.
    pub ceil_mode: bool,
}

impl<const N: usize> LpPoolOptions<N> {
    /// Options with stride = kernel, floor mode.
    pub fn new(norm_type: f64, kernel_size: [usize; N]) -> Self {
        Self {
            norm_type,
            kernel_size,
            stride: kernel_size,
            ceil_mode: false,
        }
    }
    /// Set the stride.
    pub fn with_stride(mut self, stride: [usize; N]) -> Self {
        self.stride = stride;
        self
    }
    /// Ceil mode.
    pub fn with_ceil_mode(mut self, ceil_mode: bool) -> Self {
        self.ceil_mode = ceil_mode;
        self
    }
    /// Whether the backward takes each window's share from the forward's output `y` instead of
    /// summing the window again: for every finite `p >= 1`, `y^(1 - p)` is the total's
    /// `total^(1/p - 1)` and `y` is 0 exactly when the total is. A smaller `p` can lose the
    /// total's sign in `y` (`p = 1/2` squares it), and `p = inf` needs the arg-max.
    pub(crate) fn backward_reads_output(&self) -> bool {
        self.norm_type >= 1.0 && self.norm_type.is_finite()
    }
    /// The sliding-window form (no padding, no dilation) LP pooling runs on.
    pub fn window(&self) -> MaxPoolOptions<N> {
        MaxPoolOptions {
            kernel_size: self.kernel_size,
            stride: self.stride,
            padding: [(0, 0); N],
            dilation: [1; N],
            ceil_mode: self.ceil_mode,
        }
    }
}

/// How a fractional max pool sizes its output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FractionalOutput<const N: usize> {
    /// An explicit output size.
    Size([usize; N]),
    /// `output = int(input * ratio)`, ratio in `(0, 1)`.
    Ratio([f64; N]),
}

/// Options of `fractional_max_poolNd`.
///
/// ```
/// use burn_convpool::{FractionalMaxPoolOptions, FractionalOutput};
/// let by_size = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Size([5, 5]));
/// let by_ratio = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Ratio([0.5, 0.5]));
/// # let _ = (by_size, by_ratio);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FractionalMaxPoolOptions<const N: usize> {
    /// Kernel size.
    pub kernel_size: [usize; N],
    /// Output size or ratio.
    pub output: FractionalOutput<N>,
}

impl<const N: usize> FractionalMaxPoolOptions<N> {
    /// Options from a kernel and an output size or ratio.
    pub fn new(kernel_size: [usize; N], output: FractionalOutput<N>) -> Self {
        Self {
            kernel_size,
            output,
        }
    }
}

/// Options of `max_unpoolNd`: the max pool it inverts, and optionally the exact output size.
///
/// ```
/// use burn_convpool::MaxUnpoolOptions;
/// let options = MaxUnpoolOptions::new([2, 2]).with_output_size([7, 5]);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaxUnpoolOptions<const N: usize> {
    /// Kernel size of the max pool.
    pub kernel_size: [usize; N],
    /// Its stride (defaults to the kernel size).
    pub stride: [usize; N],
    /// Its padding.
    pub padding: [usize; N],
    /// Spatial output size, within `stride - 1` of `default = (in - 1) * stride - 2 * padding
    /// + kernel` per dim, as PyTorch allows (below it too: the input length of a ceil-mode pool).
    pub output_size: Option<[usize; N]>,
}

impl<const N: usize> MaxUnpoolOptions<N> {
    /// Options with stride = kernel, no padding, default output size.
    pub fn new(kernel_size: [usize; N]) -> Self {
        Self {
            kernel_size,
            stride: kernel_size,
            padding: [0; N],
            output_size: None,
        }
    }
    /// Set the stride.
    pub fn with_stride(mut self, stride: [usize; N]) -> Self {
        self.stride = stride;
        self
    }
    /// Set the padding.
    pub fn with_padding(mut self, padding: [usize; N]) -> Self {
        self.padding = padding;
        self
    }
    /// Ask for an output size.
    pub fn with_output_size(mut self, output_size: [usize; N]) -> Self {
        self.output_size = Some(output_size);
        self
    }
}

/// Validate a sliding window over `x = (N, C, *spatial)` and lift it to rank 3. Padding may be
/// at most half the kernel size, whatever the dilation (PyTorch's `pool2d_shape_check`,
/// `kW / 2 >= padW`), the kernel must fit the padded input, and every window must hold an
/// input tap: a dilated window can step over the whole input and see padding only, where
/// PyTorch returns -inf with an index outside the plane.
pub fn check_window<const N: usize>(
    op: &'static str,
    x: &[usize],
    options: &MaxPoolOptions<N>,
) -> SpecResult<MaxPoolOptions<3>> {
    check_nonzero(op, "kernel_size", &options.kernel_size)?;
    check_nonzero(op, "stride", &options.stride)?;
    check_nonzero(op, "dilation", &options.dilation)?;
    check_size(op, "stride", &options.stride)?;
    check_size(op, "dilation", &options.dilation)?;
    check_volume(op, "kernel volume", &options.kernel_size)?;
    check_nonempty(op, x)?;
    let mut out = [0; N];
    for dim in 0..N {
        let extent = kernel_extent(options.kernel_size[dim], options.dilation[dim]);
        let (begin, end) = options.padding[dim];
        let limit = options.kernel_size[dim] / 2;
        if begin.max(end) > limit {
            return Err(SpecError::new(
                op,
                Kind::PaddingTooLarge {
                    dim,
                    padding: begin.max(end),
                    limit,
                },
            ));
        }
        let len = x[2 + dim];
        let padded_len = check_padded_len(op, dim, len, options.padding[dim])?;
        let size = out_len(
            len,
            options.padding[dim],
            options.kernel_size[dim],
            options.stride[dim],
            options.dilation[dim],
            options.ceil_mode,
        );
        let Some(size) = size else {
            return Err(SpecError::new(
                op,
                Kind::KernelTooLarge {
                    dim,
                    kernel_extent: extent,
                    padded_len,
                },
            ));
        };
        if options.dilation[dim] > 1 {
            let spans = sliding_spans(
                len,
                size,
                options.kernel_size[dim],
                options.stride[dim],
                options.padding[dim],
                options.dilation[dim],
            );
            if let Some(output) = spans.iter().position(|span| span.count == 0) {
                return Err(SpecError::new(op, Kind::WindowInPadding { dim, output }));
            }
        }
        out[dim] = size;
    }
    check_elements(op, &[&x[..2], &out[..]].concat())?;
    Ok(MaxPoolOptions {
        kernel_size: lift(options.kernel_size, 1),
        stride: lift(options.stride, 1),
        padding: lift(options.padding, (0, 0)),
        dilation: lift(options.dilation, 1),
        ceil_mode: options.ceil_mode,
    })
}

/// Validate `avg_poolNd` and lift it to rank 3.
pub fn check_avg_pool<const N: usize>(
    op: &'static str,
    x: &[usize],
    options: &AvgPoolNdOptions<N>,
) -> SpecResult<AvgPoolNdOptions<3>> {
    if options.divisor_override == Some(0) {
        check_nonzero(op, "divisor_override", &[0])?;
    }
    let window = check_window(op, x, &avg_window(options))?;
    Ok(AvgPoolNdOptions {
        kernel_size: window.kernel_size,
        stride: window.stride,
        padding: window.padding,
        count_include_pad: options.count_include_pad,
        ceil_mode: options.ceil_mode,
        divisor_override: options.divisor_override,
    })
}

/// The sliding window an average pool runs on.
pub fn avg_window<const N: usize>(options: &AvgPoolNdOptions<N>) -> MaxPoolOptions<N> {
    MaxPoolOptions {
        kernel_size: options.kernel_size,
        stride: options.stride,
        padding: options.padding,
        dilation: [1; N],
        ceil_mode: options.ceil_mode,
    }
}

/// Validate `lp_poolNd` and lift it to rank 3.
pub fn check_lp_pool<const N: usize>(
    op: &'static str,
    x: &[usize],
    options: &LpPoolOptions<N>,
) -> SpecResult<LpPoolOptions<3>> {
    if options.norm_type.is_nan() || options.norm_type <= 0.0 {
        return Err(SpecError::new(
            op,
            Kind::NormType {
                norm_type: options.norm_type,
            },
        ));
    }
    let window = check_window(op, x, &options.window())?;
    Ok(LpPoolOptions {
        norm_type: options.norm_type,
        kernel_size: window.kernel_size,
        stride: window.stride,
        ceil_mode: options.ceil_mode,
    })
}

/// Resolve adaptive pooling's output size (`None` keeps the input size) and lift it to rank 3.
pub fn check_adaptive<const N: usize>(
    op: &'static str,
    x: &[usize],
    output_size: [Option<usize>; N],
) -> SpecResult<[usize; 3]> {
    check_nonempty(op, x)?;
    let resolved: [usize; N] = core::array::from_fn(|i| output_size[i].unwrap_or(x[2 + i]));
    check_nonzero(op, "output_size", &resolved)?;
    check_elements(op, &[&x[..2], &resolved[..]].concat())?;
    Ok(lift(resolved, 1))
}

/// Validate fractional max pooling; returns the rank-3 kernel and output size.
pub fn check_fractional<const N: usize>(
    op: &'static str,
    x: &[usize],
    options: &FractionalMaxPoolOptions<N>,
) -> SpecResult<([usize; 3], [usize; 3])> {
    check_nonzero(op, "kernel_size", &options.kernel_size)?;
    check_nonempty(op, x)?;
    let mut output = [0; N];
    for dim in 0..N {
        let len = x[2 + dim];
        output[dim] = match options.output {
            FractionalOutput::Size(size) => size[dim],
            FractionalOutput::Ratio(ratio) => {
                let r = ratio[dim];
                let size = (len as f64 * r) as usize;
                if !(r > 0.0 && r < 1.0) || size == 0 {
                    return Err(SpecError::new(op, Kind::OutputRatio { dim, ratio: r }));
                }
                size
            }
        };
        let kernel = options.kernel_size[dim];
        // `output + kernel - 1 <= len`, without the sum.
        if output[dim] == 0 || output[dim] > len || kernel - 1 > len - output[dim] {
            return Err(SpecError::new(
                op,
                Kind::FractionalKernel {
                    dim,
                    kernel,
                    output: output[dim],
                    len,
                },
            ));
        }
    }
    check_elements(op, &[&x[..2], &output[..]].concat())?;
    Ok((lift(options.kernel_size, 1), lift(output, 1)))
}

/// Validate `max_unpoolNd` for `x` and `indices` of the same shape; returns the rank-3 output
/// size.
pub fn check_max_unpool<const N: usize>(
    op: &'static str,
    x: &[usize],
    indices: &[usize],
    options: &MaxUnpoolOptions<N>,
) -> SpecResult<[usize; 3]> {
    check_nonzero(op, "kernel_size", &options.kernel_size)?;
    check_nonzero(op, "stride", &options.stride)?;
    check_size(op, "kernel_size", &options.kernel_size)?;
    check_size(op, "stride", &options.stride)?;
    check_size(op, "padding", &options.padding)?;
    if let Some(output_size) = &options.output_size {
        check_size(op, "output_size", output_size)?;
    }
    if x != indices {
        return Err(SpecError::new(
            op,
            Kind::ShapeMismatch {
                what: "x and indices shapes",
                expected: x.to_vec(),
                actual: indices.to_vec(),
            },
        ));
    }
    check_nonempty(op, x)?;
    let mut output = [0; N];
    for dim in 0..N {
        let (kernel, stride, padding) = (
            options.kernel_size[dim],
            options.stride[dim],
            options.padding[dim],
        );
        // PyTorch's default `(in - 1) * stride - 2 * padding + kernel` may be 0 or negative;
        // an explicit size strictly within `stride` of it still works (`_unpool_output_size`:
        // below the default too, e.g. the input length of a ceil-mode pool). 128-bit: exact.
        let default =
            (x[2 + dim] as i128 - 1) * stride as i128 + kernel as i128 - 2 * padding as i128;
        let size = match options.output_size {
            None => default,
            Some(size) => {
                let requested = size[dim] as i128;
                let reach = stride as i128 - 1;
                if !(default - reach..=default + reach).contains(&requested) {
                    let clamp = |n: i128| n.clamp(0, usize::MAX as i128) as usize;
                    return Err(SpecError::new(
                        op,
                        Kind::OutputSize {
                            dim,
                            requested: size[dim],
                            min: clamp(default - reach),
                            max: clamp(default + reach),
                        },
                    ));
                }
                requested
            }
        };
        if size <= 0 {
            return Err(SpecError::new(op, Kind::EmptyOutput { dim }));
        }
        output[dim] = usize::try_from(size).unwrap_or(usize::MAX);
    }
    check_elements(op, &[&x[..2], &output[..]].concat())?;
    Ok(lift(output, 1))
}

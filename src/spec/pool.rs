//! Pooling options, window bounds and validation.
//!
//! Every pooling op reduces, for each output position, a box of input taps that is the product
//! of one [`Span`] per spatial axis. The three ways of placing windows (sliding, adaptive,
//! fractional) are the span builders here; the compute code only walks spans.
//!
//! Index convention (max, adaptive max and fractional max pooling, and max-unpool): an index is
//! the row-major flat offset of the chosen element inside its `(n, c)` plane of the *unpadded*
//! input, `(t * H + h) * W + w` (`h * W + w` in 2d), as in PyTorch.

use burn::tensor::ops::AvgPoolOptions;
pub use burn::tensor::ops::MaxPoolOptions;

use super::conv::{check_nonempty_from, check_nonzero};
use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};
use super::limits::{check_elements, check_padded_len, check_size, check_volume};
use super::window::{inside, kernel_extent, lift, out_len};

/// The input taps one output position reads along one axis: `start, start + step, ...`
/// (`count` of them, all inside the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First input index.
    pub start: usize,
    /// Number of taps inside the input.
    pub count: usize,
    /// Distance between taps (the dilation).
    pub step: usize,
    /// Window length clipped to the padded input: the `count_include_pad` divisor factor.
    pub padded: usize,
}

impl Span {
    /// The input indices of the taps, in order.
    pub fn taps(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.count).map(|t| self.start + t * self.step)
    }
}

/// The spans of every output position along each of the three (lifted) axes.
pub type Spans = [Vec<Span>; 3];

/// Output sizes of a sliding window over `in_size`.
pub fn window_out_size(in_size: [usize; 3], options: &MaxPoolOptions<3>) -> [usize; 3] {
    core::array::from_fn(|i| {
        out_len(
            in_size[i],
            options.padding[i],
            options.kernel_size[i],
            options.stride[i],
            options.dilation[i],
            options.ceil_mode,
        )
        .unwrap_or(0)
    })
}

/// Spans of a validated sliding window over `in_size`.
pub fn window_spans(in_size: [usize; 3], options: &MaxPoolOptions<3>) -> Spans {
    let out = window_out_size(in_size, options);
    core::array::from_fn(|i| {
        sliding_spans(
            in_size[i],
            out[i],
            options.kernel_size[i],
            options.stride[i],
            options.padding[i],
            options.dilation[i],
        )
    })
}

/// Spans of adaptive pooling from `in_size` to `out_size`.
pub fn adaptive_spans3(in_size: [usize; 3], out_size: [usize; 3]) -> Spans {
    core::array::from_fn(|i| adaptive_spans(in_size[i], out_size[i]))
}

/// Spans of a sliding window (max, avg and LP pooling).
pub fn sliding_spans(
    len: usize,
    out: usize,
    kernel: usize,
    stride: usize,
    (pad_begin, pad_end): (usize, usize),
    dilation: usize,
) -> Vec<Span> {
    (0..out)
        .map(|o| {
            // 128-bit: a start deep in the padding, and its end, are exact.
            let first = o as i128 * stride as i128 - pad_begin as i128;
            let taps = inside(first, dilation, kernel, len);
            let start = first + taps.start as i128 * dilation as i128;
            let end = (first + kernel as i128).min(len as i128 + pad_end as i128);
            Span {
                start: start.max(0) as usize,
                count: taps.len(),
                // One tap has no step: 1 keeps a huge, unused dilation out of the kernels'
                // 32-bit tables.
                step: if taps.len() > 1 { dilation } else { 1 },
                padded: (end - first).max(0) as usize,
            }
        })
        .collect()
}

/// Spans of adaptive pooling: output `i` covers `[floor(i * len / out), ceil((i + 1) * len / out))`.
pub fn adaptive_spans(len: usize, out: usize) -> Vec<Span> {
    // 128-bit products: `(o + 1) * len` may pass usize for a huge output size.
    let (len, out) = (len as u128, out as u128);
    (0..out)
        .map(|o| {
            let start = o * len / out;
            let end = ((o + 1) * len).div_ceil(out);
            Span {
                start: start as usize,
                count: (end - start) as usize,
                step: 1,
                padded: (end - start) as usize,
            }
        })
        .collect()
}

/// Spans of fractional max pooling for one sample `u` in `[0, 1)`, as PyTorch's
/// `generate_intervals`: `alpha = (len - kernel) / (out - 1)`,
/// `start[i] = int((i + u) * alpha) - int(u * alpha)`, and the last window ends at the input's
/// end. The float math runs in f32 when the input is f32, as PyTorch's does.
pub fn fractional_spans(
    len: usize,
    out: usize,
    kernel: usize,
    sample: f64,
    f32_math: bool,
) -> Vec<Span> {
    let start = |i: usize| -> usize {
        if i + 1 == out {
            return len - kernel;
        }
        let position = if f32_math {
            let alpha = (len - kernel) as f32 / (out - 1) as f32;
            let u = sample as f32;
            ((i as f32 + u) * alpha) as i64 - (u * alpha) as i64
        } else {
            let alpha = (len - kernel) as f64 / (out - 1) as f64;
            ((i as f64 + sample) * alpha) as i64 - (sample * alpha) as i64
        };
        (position.max(0) as usize).min(len - kernel)
    };
    (0..out)
        .map(|i| Span {
            start: start(i),
            count: kernel,
            step: 1,
            padded: kernel,
        })
        .collect()
}

/// Where the windows of an index-producing pool (max, adaptive max, fractional max) lie: what
/// a gather-form gradient needs to visit, for each input element, only the outputs whose
/// windows may hold it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IndexWindows {
    /// Sliding windows (max pooling, and LP pooling with `p = inf`).
    Sliding(MaxPoolOptions<3>),
    /// Adaptive windows.
    Adaptive,
    /// Fractional windows of this size (their starts depend on per-plane samples).
    Fractional {
        /// Window size.
        kernel_size: [usize; 3],
    },
}

impl IndexWindows {
    /// Per axis and input position, the outputs `lo..hi` whose windows may hold it.
    pub fn cover(&self, in_size: [usize; 3], out_size: [usize; 3]) -> [Vec<(usize, usize)>; 3] {
        match self {
            Self::Sliding(options) => {
                let spans = window_spans(in_size, options);
                core::array::from_fn(|i| span_cover(in_size[i], &spans[i]))
            }
            Self::Adaptive => {
                let spans = adaptive_spans3(in_size, out_size);
                core::array::from_fn(|i| span_cover(in_size[i], &spans[i]))
            }
            Self::Fractional { kernel_size } => {
                core::array::from_fn(|i| fractional_cover(in_size[i], out_size[i], kernel_size[i]))
            }
        }
    }
}

/// For each input position, the first and one past the last output whose span has it as a tap
/// (`(0, 0)` for none). Windows move forward with the output index, so these ranges are tight
/// up to dilation gaps.
pub fn span_cover(len: usize, spans: &[Span]) -> Vec<(usize, usize)> {
    let mut cover = vec![(usize::MAX, 0); len];
    for (o, span) in spans.iter().enumerate() {
        for tap in span.taps() {
            let (lo, hi) = &mut cover[tap];
            *lo = (*lo).min(o);
            *hi = (*hi).max(o + 1);
        }
    }
    cover
        .into_iter()
        .map(|(lo, hi)| if hi == 0 { (0, 0) } else { (lo, hi) })
        .collect()
}

/// A superset of the fractional windows holding each input position, whatever the sample:
/// window `o` starts within one of `o * alpha`, so it can hold `i` only if
/// `(i - kernel) / alpha - 1 < o < (i + 1) / alpha + 1`.
pub fn fractional_cover(len: usize, out: usize, kernel: usize) -> Vec<(usize, usize)> {
    let alpha = if out > 1 {
        (len - kernel) as f64 / (out - 1) as f64
    } else {
        0.0
    };
    (0..len)
        .map(|i| {
            if alpha <= 0.0 {
                return (0, out);
            }
            let lo = ((i as f64 - kernel as f64) / alpha - 1.0).floor().max(0.0) as usize;
            let hi = ((i as f64 + 1.0) / alpha + 2.0).ceil() as usize;
            (lo.min(out), hi.min(out))
        })
        .collect()
}

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
    /// Divide every window by this instead.
    pub divisor_override: Option<usize>,
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
    /// Fixed divisor.
    pub fn with_divisor_override(mut self, divisor: usize) -> Self {
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
    /// Spatial output size, in `[default, default + stride)` per dim, where
    /// `default = (in - 1) * stride - 2 * padding + kernel`.
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

/// Reject a pool input with an empty channel or spatial dim (`x = (N, C, *spatial)`), as
/// PyTorch does ("with optional 0 dim batch size"): only the batch may be empty.
pub fn check_nonempty(op: &'static str, x: &[usize]) -> SpecResult<()> {
    check_nonempty_from(op, x, 1)
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
    if let Some(divisor) = options.divisor_override {
        check_nonzero(op, "divisor_override", &[divisor])?;
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
        // an explicit size in `[default, default + stride)` still works. 128-bit: exact.
        let default =
            (x[2 + dim] as i128 - 1) * stride as i128 + kernel as i128 - 2 * padding as i128;
        let size = match options.output_size {
            None => default,
            Some(size) => {
                let requested = size[dim] as i128;
                if !(default..default + stride as i128).contains(&requested) {
                    let clamp = |n: i128| n.clamp(0, usize::MAX as i128) as usize;
                    return Err(SpecError::new(
                        op,
                        Kind::OutputSize {
                            dim,
                            requested: size[dim],
                            min: clamp(default),
                            max: clamp(default + stride as i128 - 1),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_spans_clip_padding_and_ceil_overhang() {
        // len 5, k 3, s 2, pad 1, ceil: windows start at -1, 1, 3.
        let spans = sliding_spans(5, 3, 3, 2, (1, 1), 1);
        assert_eq!(
            spans[0],
            Span {
                start: 0,
                count: 2,
                step: 1,
                padded: 3
            }
        );
        assert_eq!(
            spans[2],
            Span {
                start: 3,
                count: 2,
                step: 1,
                padded: 3
            }
        );
        // Ceil overhang past the right padding does not count: len 6, k 3, s 2, pad 1.
        let spans = sliding_spans(6, 4, 3, 2, (1, 1), 1);
        assert_eq!(
            spans[3],
            Span {
                start: 5,
                count: 1,
                step: 1,
                padded: 2
            }
        );
        // Dilation 2 starting in the padding skips to the first tap inside.
        let spans = sliding_spans(7, 1, 3, 1, (1, 1), 2);
        assert_eq!(
            spans[0],
            Span {
                start: 1,
                count: 2,
                step: 2,
                padded: 3
            }
        );
    }

    #[test]
    fn adaptive_windows_overlap() {
        let spans: Vec<(usize, usize)> = adaptive_spans(7, 3)
            .iter()
            .map(|s| (s.start, s.count))
            .collect();
        assert_eq!(spans, [(0, 3), (2, 3), (4, 3)]);
        let spans: Vec<(usize, usize)> = adaptive_spans(2, 3)
            .iter()
            .map(|s| (s.start, s.count))
            .collect();
        assert_eq!(spans, [(0, 1), (0, 2), (1, 1)]);
    }

    #[test]
    fn fractional_starts_follow_pytorch() {
        let starts: Vec<usize> = fractional_spans(8, 4, 2, 0.5, true)
            .iter()
            .map(|s| s.start)
            .collect();
        // alpha = 2: int((i + 0.5) * 2) - int(1) = 2i, last = 6.
        assert_eq!(starts, [0, 2, 4, 6]);
        assert_eq!(fractional_spans(6, 1, 3, 0.3, true)[0].start, 3);
    }

    /// Every tap of every window lies in the cover range of its input position.
    fn assert_covers(spans: &[Span], cover: &[(usize, usize)]) {
        for (o, span) in spans.iter().enumerate() {
            for tap in span.taps() {
                let (lo, hi) = cover[tap];
                assert!(lo <= o && o < hi, "output {o} not in {lo}..{hi} at {tap}");
            }
        }
    }

    #[test]
    fn span_cover_holds_every_tap_tightly() {
        let spans = sliding_spans(9, 5, 3, 2, (1, 1), 1);
        let cover = span_cover(9, &spans);
        assert_covers(&spans, &cover);
        assert_eq!(cover[0], (0, 1));
        assert_eq!(cover[2], (1, 2));
        assert_eq!(cover[3], (1, 3));
        // Dilation 3: windows tap 0, 3 and 3, 6; positions between are in no window.
        let spans = sliding_spans(7, 2, 2, 3, (0, 0), 3);
        let cover = span_cover(7, &spans);
        assert_covers(&spans, &cover);
        assert_eq!(cover[1], (0, 0), "no window taps position 1");
    }

    #[test]
    fn fractional_cover_holds_every_sample() {
        for (len, out, kernel) in [
            (11, 5, 3),
            (13, 6, 2),
            (7, 7, 1),
            (9, 1, 4),
            (5, 3, 5),
            (25, 12, 2),
        ] {
            let cover = fractional_cover(len, out, kernel);
            for step in 0..50 {
                let sample = step as f64 / 50.0;
                assert_covers(&fractional_spans(len, out, kernel, sample, true), &cover);
                assert_covers(&fractional_spans(len, out, kernel, sample, false), &cover);
            }
        }
    }
}

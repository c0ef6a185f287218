//! Convolution and transposed-convolution options, their validation and shape math.
//!
//! The public ops take rank-N options ([`ConvNdOptions`], [`ConvTransposeNdOptions`], or Burn's
//! `ConvOptions` / `ConvTransposeOptions` through `From`), validate them against the tensor
//! shapes here, and hand the backend a rank-3 [`ConvOptions<3>`] / [`ConvTransposeOptions<3>`]
//! (1d and 2d are 3d with leading unit axes). [`ConvGeometry`] is what the compute code reads.

use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};
use super::limits::{MAX_SIZE, check_elements, check_padded_len, check_size};
use super::window::{kernel_extent, lift, out_len, used_step};

/// How a convolution pads its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Padding<const N: usize> {
    /// `(begin, end)` zeros on each spatial dim; may be asymmetric.
    Explicit([(usize, usize); N]),
    /// PyTorch's `padding="same"`: total `dilation * (kernel - 1)`, the odd element at the end.
    /// Needs stride 1.
    Same,
    /// PyTorch's `padding="valid"`: no padding.
    Valid,
}

impl<const N: usize> From<[usize; N]> for Padding<N> {
    fn from(padding: [usize; N]) -> Self {
        Self::Explicit(padding.map(|p| (p, p)))
    }
}

impl<const N: usize> From<[(usize, usize); N]> for Padding<N> {
    fn from(padding: [(usize, usize); N]) -> Self {
        Self::Explicit(padding)
    }
}

/// What a convolution reads outside its input: PyTorch's `padding_mode` of `nn.Conv*d`.
///
/// A mode other than `Zeros` pads the input first (as PyTorch does) and convolves the result
/// without padding, so its gradient flows back into the border values it copied.
#[derive(burn::config::Config, Debug, Copy, PartialEq, Eq, Hash)]
pub enum PaddingMode {
    /// Zeros (the default).
    Zeros,
    /// The mirror image without the edge: `[c b | a b c d | c b]`. Padding must be smaller than
    /// the input length.
    Reflect,
    /// The edge value repeated: `[a a | a b c d | d d]`.
    Replicate,
    /// The input wrapped around: `[c d | a b c d | a b]`. Padding must not exceed the length.
    Circular,
}

impl PaddingMode {
    /// PyTorch's name for the mode.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Zeros => "zeros",
            Self::Reflect => "reflect",
            Self::Replicate => "replicate",
            Self::Circular => "circular",
        }
    }
}

/// Options of `convNd`: Burn's [`ConvOptions`] plus `"same"` / `"valid"` padding and PyTorch's
/// `padding_mode`.
///
/// ```
/// use burn_convpool::{ConvNdOptions, Padding};
/// let options = ConvNdOptions::<2>::default().with_stride([2, 2]).with_padding([1, 1]);
/// let same = ConvNdOptions::<2>::default().with_padding(Padding::Same).with_dilation([2, 2]);
/// # let _ = (options, same);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvNdOptions<const N: usize> {
    /// Stride (non-zero).
    pub stride: [usize; N],
    /// Padding.
    pub padding: Padding<N>,
    /// Dilation (non-zero).
    pub dilation: [usize; N],
    /// Groups (non-zero, divides both channel counts).
    pub groups: usize,
    /// What the padding holds.
    pub padding_mode: PaddingMode,
}

impl<const N: usize> Default for ConvNdOptions<N> {
    fn default() -> Self {
        Self {
            stride: [1; N],
            padding: Padding::Explicit([(0, 0); N]),
            dilation: [1; N],
            groups: 1,
            padding_mode: PaddingMode::Zeros,
        }
    }
}

impl<const N: usize> ConvNdOptions<N> {
    /// Set the stride.
    pub fn with_stride(mut self, stride: [usize; N]) -> Self {
        self.stride = stride;
        self
    }
    /// Set the padding: `[p; N]`, `[(begin, end); N]`, `Padding::Same` or `Padding::Valid`.
    pub fn with_padding(mut self, padding: impl Into<Padding<N>>) -> Self {
        self.padding = padding.into();
        self
    }
    /// Set the dilation.
    pub fn with_dilation(mut self, dilation: [usize; N]) -> Self {
        self.dilation = dilation;
        self
    }
    /// Set the number of groups.
    pub fn with_groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
    /// Set what the padding holds.
    pub fn with_padding_mode(mut self, padding_mode: PaddingMode) -> Self {
        self.padding_mode = padding_mode;
        self
    }
}

impl<const N: usize> From<ConvOptions<N>> for ConvNdOptions<N> {
    fn from(options: ConvOptions<N>) -> Self {
        Self {
            stride: options.stride,
            padding: Padding::Explicit(options.padding),
            dilation: options.dilation,
            groups: options.groups,
            padding_mode: PaddingMode::Zeros,
        }
    }
}

/// Options of `conv_transposeNd`: Burn's [`ConvTransposeOptions`] plus PyTorch's `output_size`,
/// which picks `padding_out` (PyTorch's `output_padding`) for you.
///
/// ```
/// use burn_convpool::ConvTransposeNdOptions;
/// let options = ConvTransposeNdOptions::<2>::default()
///     .with_stride([2, 2])
///     .with_padding([1, 1])
///     .with_output_size([8, 8]);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvTransposeNdOptions<const N: usize> {
    /// Stride (non-zero).
    pub stride: [usize; N],
    /// Padding removed from both sides of the output.
    pub padding: [usize; N],
    /// Extra size added to one side of the output (`output_padding` in PyTorch).
    pub padding_out: [usize; N],
    /// Dilation (non-zero).
    pub dilation: [usize; N],
    /// Groups.
    pub groups: usize,
    /// Requested spatial output size; overrides `padding_out` when set.
    pub output_size: Option<[usize; N]>,
}

impl<const N: usize> Default for ConvTransposeNdOptions<N> {
    fn default() -> Self {
        Self {
            stride: [1; N],
            padding: [0; N],
            padding_out: [0; N],
            dilation: [1; N],
            groups: 1,
            output_size: None,
        }
    }
}

impl<const N: usize> ConvTransposeNdOptions<N> {
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
    /// Set the output padding.
    pub fn with_padding_out(mut self, padding_out: [usize; N]) -> Self {
        self.padding_out = padding_out;
        self
    }
    /// Set the dilation.
    pub fn with_dilation(mut self, dilation: [usize; N]) -> Self {
        self.dilation = dilation;
        self
    }
    /// Set the number of groups.
    pub fn with_groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
    /// Ask for a spatial output size; must lie in `[min, min + stride - 1]` per dim.
    pub fn with_output_size(mut self, output_size: [usize; N]) -> Self {
        self.output_size = Some(output_size);
        self
    }
}

impl<const N: usize> From<ConvTransposeOptions<N>> for ConvTransposeNdOptions<N> {
    fn from(options: ConvTransposeOptions<N>) -> Self {
        Self {
            stride: options.stride,
            padding: options.padding,
            padding_out: options.padding_out,
            dilation: options.dilation,
            groups: options.groups,
            output_size: None,
        }
    }
}

/// Everything a convolution kernel reads, in rank 3.
///
/// For a transposed convolution this is the geometry of its adjoint convolution: `in_*` is the
/// transposed conv's *output* side and `out_*` its *input* side. Sizes are explicit on both
/// sides because `output_padding` makes the big side ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Batch size.
    pub batch: usize,
    /// Groups.
    pub groups: usize,
    /// Channels on the input (big) side.
    pub in_channels: usize,
    /// Channels on the output (small) side.
    pub out_channels: usize,
    /// Spatial size of the input side.
    pub in_size: [usize; 3],
    /// Spatial size of the output side.
    pub out_size: [usize; 3],
    /// Kernel size.
    pub kernel: [usize; 3],
    /// Stride.
    pub stride: [usize; 3],
    /// Dilation.
    pub dilation: [usize; 3],
    /// Zeros before the input on each dim (the end padding is implied by the sizes).
    pub pad_begin: [usize; 3],
}

impl ConvGeometry {
    /// Geometry of `conv(x, weight)` for rank-5 shapes `x = (N, C_in, D, H, W)`,
    /// `weight = (C_out, C_in / groups, kD, kH, kW)`.
    pub fn conv(x: &[usize], weight: &[usize], options: &ConvOptions<3>) -> Self {
        let in_size = [x[2], x[3], x[4]];
        let kernel = [weight[2], weight[3], weight[4]];
        let out_size = core::array::from_fn(|i| {
            out_len(
                in_size[i],
                options.padding[i],
                kernel[i],
                options.stride[i],
                options.dilation[i],
                false,
            )
            .unwrap_or(0)
        });
        Self {
            batch: x[0],
            groups: options.groups,
            in_channels: x[1],
            out_channels: weight[0],
            in_size,
            out_size,
            kernel,
            stride: options.stride,
            dilation: options.dilation,
            pad_begin: options.padding.map(|(begin, _)| begin),
        }
    }

    /// Geometry of the convolution whose adjoint is `conv_transpose(x, weight)`, for rank-5
    /// `x = (N, C_in, D, H, W)` and `weight = (C_in, C_out / groups, kD, kH, kW)`.
    pub fn transpose(x: &[usize], weight: &[usize], options: &ConvTransposeOptions<3>) -> Self {
        let kernel = [weight[2], weight[3], weight[4]];
        let small = [x[2], x[3], x[4]];
        let big = core::array::from_fn(|i| {
            transpose_out_len(
                small[i],
                kernel[i],
                options.stride[i],
                options.padding[i],
                options.padding_out[i],
                options.dilation[i],
            )
            .unwrap_or(0)
        });
        Self {
            batch: x[0],
            groups: options.groups,
            in_channels: weight[1] * options.groups,
            out_channels: x[1],
            in_size: big,
            out_size: small,
            kernel,
            stride: options.stride,
            dilation: options.dilation,
            pad_begin: options.padding,
        }
    }

    /// Shape `(N, C_in, D, H, W)` of the input side.
    pub fn in_shape(&self) -> [usize; 5] {
        let [d, h, w] = self.in_size;
        [self.batch, self.in_channels, d, h, w]
    }

    /// Shape `(N, C_out, D, H, W)` of the output side.
    pub fn out_shape(&self) -> [usize; 5] {
        let [d, h, w] = self.out_size;
        [self.batch, self.out_channels, d, h, w]
    }

    /// Shape of the convolution weight `(C_out, C_in / groups, kD, kH, kW)`.
    pub fn weight_shape(&self) -> [usize; 5] {
        let [d, h, w] = self.kernel;
        [self.out_channels, self.in_channels / self.groups, d, h, w]
    }

    /// Input-side channels per group.
    pub fn in_per_group(&self) -> usize {
        self.in_channels / self.groups
    }

    /// Output-side channels per group.
    pub fn out_per_group(&self) -> usize {
        self.out_channels / self.groups
    }

    /// Elements of one im2col column: `C_in / groups * kD * kH * kW`.
    pub fn patch_len(&self) -> usize {
        self.in_per_group() * self.kernel.iter().product::<usize>()
    }

    /// Spatial elements of the input side.
    pub fn in_volume(&self) -> usize {
        self.in_size.iter().product()
    }

    /// Spatial elements of the output side.
    pub fn out_volume(&self) -> usize {
        self.out_size.iter().product()
    }

    /// The geometry as a computation reads it: strides and dilations through [`used_step`].
    pub fn normalised(&self) -> Self {
        Self {
            stride: core::array::from_fn(|i| used_step(self.stride[i], self.out_size[i])),
            dilation: core::array::from_fn(|i| used_step(self.dilation[i], self.kernel[i])),
            ..*self
        }
    }

    /// Every size and parameter, named: what a kernel with narrow integer arithmetic must be
    /// able to hold.
    pub fn named_values(&self) -> impl Iterator<Item = (&'static str, usize)> {
        let scalars = [
            ("batch", self.batch),
            ("groups", self.groups),
            ("input-side channels", self.in_channels),
            ("output-side channels", self.out_channels),
        ];
        let axes = [
            ("input-side size", self.in_size),
            ("output-side size", self.out_size),
            ("kernel size", self.kernel),
            ("stride", self.stride),
            ("dilation", self.dilation),
            ("padding", self.pad_begin),
        ];
        let per_axis = axes
            .into_iter()
            .flat_map(|(name, values)| values.into_iter().map(move |value| (name, value)));
        scalars.into_iter().chain(per_axis)
    }
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

/// The padding Burn-style options resolve to for a kernel: `"same"` puts
/// `dilation * (kernel - 1) / 2` first and the odd element last.
fn resolve_padding<const N: usize>(
    op: &'static str,
    options: &ConvNdOptions<N>,
    kernel: [usize; N],
) -> SpecResult<[(usize, usize); N]> {
    match options.padding {
        Padding::Explicit(padding) => Ok(padding),
        Padding::Valid => Ok([(0, 0); N]),
        Padding::Same => {
            if options.stride.iter().any(|&s| s != 1) {
                return Err(SpecError::new(
                    op,
                    Kind::SameWithStride {
                        stride: options.stride.to_vec(),
                    },
                ));
            }
            Ok(core::array::from_fn(|i| {
                same_padding(1, kernel_extent(kernel[i].max(1), options.dilation[i]), 1)
            }))
        }
    }
}

/// The padding a mode can copy from an input of length `len`: PyTorch's `F.pad` limits.
fn check_padding_mode(
    op: &'static str,
    mode: PaddingMode,
    dim: usize,
    len: usize,
    padding: usize,
) -> SpecResult<()> {
    let fits = match mode {
        PaddingMode::Zeros => true,
        PaddingMode::Reflect => padding < len,
        PaddingMode::Replicate => len > 0 || padding == 0,
        PaddingMode::Circular => padding <= len,
    };
    if fits {
        return Ok(());
    }
    Err(SpecError::new(
        op,
        Kind::PaddingMode {
            mode: mode.name(),
            dim,
            padding,
            len,
        },
    ))
}

/// `"same"` padding `(begin, end)` for a window of `extent` taps at `stride`: the output has
/// `ceil(len / stride)` elements and the odd element of the total goes last. With stride 1
/// this is PyTorch's `padding="same"`; with a larger stride it is TensorFlow's and Burn's.
pub fn same_padding(len: usize, extent: usize, stride: usize) -> (usize, usize) {
    let out = len.div_ceil(stride.max(1));
    let total = ((out.max(1) - 1) * stride + extent).saturating_sub(len);
    (total / 2, total - total / 2)
}

/// Validate `groups` against a layer's `[in, out]` channel counts, as a module's config must
/// before any input exists.
pub fn check_channel_groups(
    op: &'static str,
    channels: [usize; 2],
    groups: usize,
) -> SpecResult<()> {
    check_nonzero(op, "groups", &[groups])?;
    check_divides(op, "in_channels", channels[0], groups)?;
    check_divides(op, "out_channels", channels[1], groups)
}

/// Validate the size fields of a module's config, each of which must be non-zero (kernel
/// sizes, strides, dilations), as a module must at `init`: `module` names it in the error.
pub fn check_nonzero_fields(
    module: &'static str,
    fields: &[(&'static str, &[usize])],
) -> SpecResult<()> {
    fields
        .iter()
        .try_for_each(|&(field, value)| check_nonzero(module, field, value))
}

pub(super) fn check_nonzero(
    op: &'static str,
    param: &'static str,
    value: &[usize],
) -> SpecResult<()> {
    if value.contains(&0) {
        return Err(SpecError::new(
            op,
            Kind::Zero {
                param,
                value: value.to_vec(),
            },
        ));
    }
    Ok(())
}

fn check_divides(
    op: &'static str,
    what: &'static str,
    channels: usize,
    groups: usize,
) -> SpecResult<()> {
    if !channels.is_multiple_of(groups) {
        return Err(SpecError::new(
            op,
            Kind::GroupsDivide {
                what,
                channels,
                groups,
            },
        ));
    }
    Ok(())
}

fn check_eq(
    op: &'static str,
    what: &'static str,
    expected: usize,
    actual: usize,
) -> SpecResult<()> {
    if expected != actual {
        return Err(SpecError::new(
            op,
            Kind::Mismatch {
                what,
                expected,
                actual,
            },
        ));
    }
    Ok(())
}

/// Check the rank of a spatial-N input: batched `(N, C, *spatial)` or unbatched `(C, *spatial)`.
/// Returns whether it is batched.
pub fn check_input_rank(op: &'static str, spatial: usize, rank: usize) -> SpecResult<bool> {
    if rank == spatial + 2 || rank == spatial + 1 {
        Ok(rank == spatial + 2)
    } else {
        Err(SpecError::new(
            op,
            Kind::Rank {
                arg: "x",
                expected: vec![spatial + 1, spatial + 2],
                actual: rank,
            },
        ))
    }
}

/// Reject an input `x = (N, C, *spatial)` with an empty dim from `first` on: pools take an
/// empty batch only (`first = 1`); convolutions also an empty channel axis (`first = 2`: an
/// empty output, or a bias-only one), since PyTorch's kernel-size check fails on an empty
/// spatial dim.
pub(super) fn check_nonempty_from(op: &'static str, x: &[usize], first: usize) -> SpecResult<()> {
    if x[first..].contains(&0) {
        return Err(SpecError::new(op, Kind::EmptyInput { dims: x.to_vec() }));
    }
    Ok(())
}

/// Validate `convNd(x, weight, bias)` and resolve its options to rank 3.
///
/// `x` is `(N, C_in, *spatial)`, `weight` is `(C_out, C_in / groups, *kernel)`.
pub fn check_conv<const N: usize>(
    op: &'static str,
    x: &[usize],
    weight: &[usize],
    bias: Option<usize>,
    options: &ConvNdOptions<N>,
) -> SpecResult<ConvOptions<3>> {
    check_nonzero(op, "stride", &options.stride)?;
    check_nonzero(op, "dilation", &options.dilation)?;
    check_nonzero(op, "groups", &[options.groups])?;
    let groups = options.groups;
    let out_channels = weight[0];
    // PyTorch: "expected weight to be at least 1 at dimension 0".
    check_nonzero(op, "out_channels (weight.shape[0])", &[out_channels])?;
    check_nonempty_from(op, x, 2)?;
    check_divides(op, "in_channels", x[1], groups)?;
    check_divides(op, "out_channels (weight.shape[0])", out_channels, groups)?;
    check_eq(
        op,
        "in_channels (x.shape[1]) vs weight.shape[1] * groups",
        weight[1].saturating_mul(groups),
        x[1],
    )?;
    if let Some(bias) = bias {
        check_eq(op, "bias length vs out_channels", out_channels, bias)?;
    }
    let kernel: [usize; N] = core::array::from_fn(|i| weight[2 + i]);
    check_nonzero(op, "kernel_size", &kernel)?;
    check_size(op, "stride", &options.stride)?;
    check_size(op, "dilation", &options.dilation)?;
    let padding = resolve_padding(op, options, kernel)?;
    let mut out = [0; N];
    for dim in 0..N {
        let (begin, end) = padding[dim];
        let padded_len = check_padded_len(op, dim, x[2 + dim], padding[dim])?;
        let extent = kernel_extent(kernel[dim], options.dilation[dim]);
        if extent > padded_len {
            return Err(SpecError::new(
                op,
                Kind::KernelTooLarge {
                    dim,
                    kernel_extent: extent,
                    padded_len,
                },
            ));
        }
        check_padding_mode(op, options.padding_mode, dim, x[2 + dim], begin.max(end))?;
        let (stride, dilation) = (options.stride[dim], options.dilation[dim]);
        out[dim] = out_len(
            x[2 + dim],
            padding[dim],
            kernel[dim],
            stride,
            dilation,
            false,
        )
        .unwrap_or(0);
    }
    check_elements(op, &[&[x[0], out_channels][..], &out[..]].concat())?;
    Ok(ConvOptions {
        stride: lift(options.stride, 1),
        padding: lift(padding, (0, 0)),
        dilation: lift(options.dilation, 1),
        groups,
    })
}

/// Validate `conv_transposeNd(x, weight, bias)`, resolve `output_size` into `padding_out`, and
/// lift the options to rank 3.
///
/// `x` is `(N, C_in, *spatial)`, `weight` is `(C_in, C_out / groups, *kernel)`.
pub fn check_conv_transpose<const N: usize>(
    op: &'static str,
    x: &[usize],
    weight: &[usize],
    bias: Option<usize>,
    options: &ConvTransposeNdOptions<N>,
) -> SpecResult<ConvTransposeOptions<3>> {
    check_nonzero(op, "stride", &options.stride)?;
    check_nonzero(op, "dilation", &options.dilation)?;
    check_nonzero(op, "groups", &[options.groups])?;
    let groups = options.groups;
    check_nonempty_from(op, x, 2)?;
    check_divides(op, "in_channels", x[1], groups)?;
    check_eq(
        op,
        "in_channels (x.shape[1]) vs weight.shape[0]",
        weight[0],
        x[1],
    )?;
    if let Some(bias) = bias {
        check_eq(op, "bias length vs out_channels", weight[1] * groups, bias)?;
    }
    let kernel: [usize; N] = core::array::from_fn(|i| weight[2 + i]);
    check_nonzero(op, "kernel_size", &kernel)?;
    check_size(op, "stride", &options.stride)?;
    check_size(op, "dilation", &options.dilation)?;
    check_size(op, "padding", &options.padding)?;
    let mut padding_out = options.padding_out;
    let mut out = [0; N];
    for dim in 0..N {
        let (stride, dilation) = (options.stride[dim], options.dilation[dim]);
        let len = x[2 + dim];
        if let Some(output_size) = options.output_size {
            // PyTorch's `_output_padding`: the size must be reachable with 0 <= pad < stride.
            let min =
                transpose_out_len(len, kernel[dim], stride, options.padding[dim], 0, dilation)
                    .ok_or(SpecError::new(op, Kind::EmptyOutput { dim }))?;
            let max = min.saturating_add(stride - 1);
            let requested = output_size[dim];
            if !(min..=max).contains(&requested) {
                return Err(SpecError::new(
                    op,
                    Kind::OutputSize {
                        dim,
                        requested,
                        min,
                        max,
                    },
                ));
            }
            padding_out[dim] = requested - min;
        } else if padding_out[dim] >= stride.max(dilation) {
            return Err(SpecError::new(
                op,
                Kind::OutputPadding {
                    dim,
                    output_padding: padding_out[dim],
                    limit: stride.max(dilation),
                },
            ));
        }
        // The adjoint convolution indexes its padded input up to here: keep it in range.
        let full = transpose_full_len(len, kernel[dim], stride, padding_out[dim], dilation);
        if full > MAX_SIZE as u128 {
            return Err(SpecError::new(
                op,
                Kind::TooLarge {
                    what: format!("padded output length on spatial dim {dim}"),
                    value: full,
                },
            ));
        }
        let padding = options.padding[dim];
        out[dim] = transpose_out_len(
            len,
            kernel[dim],
            stride,
            padding,
            padding_out[dim],
            dilation,
        )
        .ok_or(SpecError::new(op, Kind::EmptyOutput { dim }))?;
    }
    let out_channels = weight[1].saturating_mul(groups);
    check_elements(op, &[&[x[0], out_channels][..], &out[..]].concat())?;
    Ok(ConvTransposeOptions {
        stride: lift(options.stride, 1),
        padding: lift(options.padding, 0),
        padding_out: lift(padding_out, 0),
        dilation: lift(options.dilation, 1),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_padding_puts_the_odd_element_last() {
        let options = ConvNdOptions::<1>::default().with_padding(Padding::Same);
        let lifted = check_conv("conv1d", &[1, 1, 5], &[1, 1, 4], None, &options).unwrap();
        assert_eq!(lifted.padding, [(0, 0), (0, 0), (1, 2)]);
    }

    #[test]
    fn transpose_geometry_is_the_adjoint_conv() {
        let options = ConvTransposeOptions::new([1, 1, 2], [0, 0, 1], [0, 0, 1], [1, 1, 1], 1);
        let geometry = ConvGeometry::transpose(&[2, 3, 1, 1, 4], &[3, 5, 1, 1, 3], &options);
        assert_eq!(geometry.in_shape(), [2, 5, 1, 1, 8]);
        assert_eq!(geometry.out_shape(), [2, 3, 1, 1, 4]);
        assert_eq!(geometry.weight_shape(), [3, 5, 1, 1, 3]);
    }
}

//! Convolution and transposed-convolution options, their validation and shape math.
//!
//! The public ops take rank-N options ([`ConvNdOptions`], [`ConvTransposeNdOptions`], or Burn's
//! `ConvOptions` / `ConvTransposeOptions` through `From`), validate them against the tensor
//! shapes here, and hand the backend a rank-3 [`ConvOptions<3>`] / [`ConvTransposeOptions<3>`]
//! (1d and 2d are 3d with leading unit axes). [`ConvGeometry`](super::ConvGeometry), in
//! `geometry.rs`, is what the compute code reads.

use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use super::activation::Activation;
use super::bounds::MAX_SIZE;
use super::check::{check_divides, check_eq, check_nonempty_from, check_nonzero};
use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};
use super::limits::{check_elements, check_padded_len, check_size};
use super::window::{
    kernel_extent, lift, out_len, same_padding, transpose_full_len, transpose_out_len,
};

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
    /// The activation applied to the output (bias included) as it is stored; `None` for
    /// none.
    pub activation: Option<Activation>,
}

impl<const N: usize> Default for ConvNdOptions<N> {
    fn default() -> Self {
        Self {
            stride: [1; N],
            padding: Padding::Explicit([(0, 0); N]),
            dilation: [1; N],
            groups: 1,
            padding_mode: PaddingMode::Zeros,
            activation: None,
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
    /// Apply `activation` to the output (bias included) in the convolution's own pass.
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = Some(activation);
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
            activation: None,
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
    /// The activation applied to the output (bias included) as it is stored; `None` for
    /// none.
    pub activation: Option<Activation>,
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
            activation: None,
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
    /// Apply `activation` to the output (bias included) in the convolution's own pass.
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = Some(activation);
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
            activation: None,
        }
    }
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
}

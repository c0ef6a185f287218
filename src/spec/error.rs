//! The one error type of the validation layer: every variant names the offending values, and
//! [`SpecError`] adds the op, so a message reads `conv2d: stride must be non-zero, got [0, 1]`.

use core::fmt;

/// A rejected call: which op, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecError {
    /// The public op that rejected its input, e.g. `"conv2d"`.
    pub op: &'static str,
    /// What was wrong, with the offending values.
    pub kind: SpecErrorKind,
}

/// Why a call was rejected.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SpecErrorKind {
    /// A tensor has a rank the op does not accept.
    Rank {
        /// Which argument, e.g. `"x"`.
        arg: &'static str,
        /// Accepted ranks.
        expected: Vec<usize>,
        /// The rank it had.
        actual: usize,
    },
    /// A parameter that must be positive has a zero entry.
    Zero {
        /// Parameter name, e.g. `"stride"`.
        param: &'static str,
        /// Its value.
        value: Vec<usize>,
    },
    /// `groups` does not divide a channel count.
    GroupsDivide {
        /// Which count, e.g. `"in_channels"`.
        what: &'static str,
        /// The channel count.
        channels: usize,
        /// The groups.
        groups: usize,
    },
    /// Two sizes that must agree do not.
    Mismatch {
        /// What was compared, e.g. `"weight.shape[1] * groups vs in_channels"`.
        what: &'static str,
        /// The size implied by one side.
        expected: usize,
        /// The size found on the other.
        actual: usize,
    },
    /// The (dilated) kernel does not fit in the padded input along one spatial dim.
    KernelTooLarge {
        /// Spatial dimension index (0 is the first spatial dim).
        dim: usize,
        /// Effective kernel extent `dilation * (kernel - 1) + 1`.
        kernel_extent: usize,
        /// Input length plus padding on both sides.
        padded_len: usize,
    },
    /// `padding = "same"` with a stride other than 1, which PyTorch rejects too.
    SameWithStride {
        /// The stride.
        stride: Vec<usize>,
    },
    /// `output_padding` must be smaller than `max(stride, dilation)` on each dim.
    OutputPadding {
        /// Spatial dim.
        dim: usize,
        /// The output padding.
        output_padding: usize,
        /// `max(stride, dilation)` on that dim.
        limit: usize,
    },
    /// A requested output size outside the range the op can produce.
    OutputSize {
        /// Spatial dim.
        dim: usize,
        /// Requested size.
        requested: usize,
        /// Smallest valid size.
        min: usize,
        /// Largest valid size.
        max: usize,
    },
    /// The computed output would be empty (or negative) along a dim.
    EmptyOutput {
        /// Spatial dim.
        dim: usize,
    },
    /// Pool padding wider than half the kernel size (PyTorch's limit, whatever the dilation).
    PaddingTooLarge {
        /// Spatial dim.
        dim: usize,
        /// The padding on the wider side.
        padding: usize,
        /// The largest allowed: `kernel / 2`.
        limit: usize,
    },
    /// A dilated pooling window whose taps all fall in the padding: it has no maximum and no
    /// index (PyTorch returns -inf with an index outside the plane).
    WindowInPadding {
        /// Spatial dim.
        dim: usize,
        /// The output position of the first such window.
        output: usize,
    },
    /// A `padding_mode` that cannot copy that much padding from the input (reflect needs
    /// `padding < len`, circular `padding <= len`).
    PaddingMode {
        /// PyTorch's name of the mode.
        mode: &'static str,
        /// Spatial dim.
        dim: usize,
        /// The padding on the wider side.
        padding: usize,
        /// The input length on that dim.
        len: usize,
    },
    /// A batch norm folded into a convolution that applies an activation before it, which
    /// the fold cannot move the batch norm through.
    FoldAfterActivation {
        /// The activation's name, e.g. `"relu"`.
        activation: &'static str,
    },
    /// A conv's options that apply an activation where a batch norm follows the conv, whose
    /// own options carry the block's activation.
    ActivationBeforeBatchNorm {
        /// The activation's name, e.g. `"relu"`.
        activation: &'static str,
    },
    /// A batch norm's epsilon that is not finite and positive.
    Epsilon {
        /// The epsilon.
        epsilon: f64,
    },
    /// A training-mode batch norm over one value per channel, whose variance is undefined
    /// (PyTorch refuses it too).
    OneValuePerChannel {
        /// The input dims.
        dims: Vec<usize>,
    },
    /// A module setting that burn-nn's module of the same name cannot hold.
    NotInBurnNn {
        /// The setting, e.g. `"divisor_override"`.
        setting: &'static str,
    },
    /// An input with an empty dim other than the batch: PyTorch's pools accept an empty batch
    /// only, and its convolutions reject an empty spatial dim.
    EmptyInput {
        /// The input dims.
        dims: Vec<usize>,
    },
    /// `output_ratio` must lie in `(0, 1)` and give an output of at least 1.
    OutputRatio {
        /// Spatial dim.
        dim: usize,
        /// The ratio.
        ratio: f64,
    },
    /// A fractional pooling kernel does not fit: `output_size + kernel - 1 <= input length`.
    FractionalKernel {
        /// Spatial dim.
        dim: usize,
        /// Kernel size.
        kernel: usize,
        /// Output size.
        output: usize,
        /// Input length.
        len: usize,
    },
    /// A `padding_mode` other than zeros copies the input into a padded tensor first (as
    /// PyTorch's `F.pad` does), and this machine cannot allocate that tensor.
    PaddedInputTooLarge {
        /// PyTorch's name of the mode.
        mode: &'static str,
        /// The padded input's dims.
        dims: Vec<usize>,
    },
    /// A fractional pooling sample outside `[0, 1]` (or NaN). PyTorch draws them from
    /// `[0, 1)` and never checks a given one; further out its windows can leave the input.
    FractionalSample {
        /// The sample.
        value: f64,
        /// Its index in `samples` (batch, channel, axis).
        at: [usize; 3],
    },
    /// An LP-pool `norm_type` that is not positive.
    NormType {
        /// The norm type.
        norm_type: f64,
    },
    /// An index outside the plane it addresses.
    IndexOutOfRange {
        /// The offending index.
        index: i64,
        /// Elements in the plane.
        plane: usize,
    },
    /// Two tensors whose shapes must be equal are not.
    ShapeMismatch {
        /// What was compared.
        what: &'static str,
        /// One shape.
        expected: Vec<usize>,
        /// The other.
        actual: Vec<usize>,
    },
    /// An argument whose dtype differs from the input's (PyTorch rejects these too).
    DtypeMismatch {
        /// Which argument, e.g. `"weight"`.
        arg: &'static str,
        /// The input's dtype.
        expected: String,
        /// The argument's.
        actual: String,
    },
    /// A dtype this device's kernels do not compile for (a CubeCL device computes in the types
    /// it reports).
    DeviceDtype {
        /// The dtype, as Burn prints it.
        dtype: String,
    },
    /// A dtype the op does not compute in.
    Dtype {
        /// The dtype, as Burn prints it.
        dtype: String,
    },
    /// A parameter or derived length above the largest size ([`crate::MAX_SIZE`],
    /// `isize::MAX`): the shape math would overflow.
    TooLarge {
        /// What, e.g. `"stride"` or `"padded length on spatial dim 0"`.
        what: String,
        /// Its exact value.
        value: u128,
    },
    /// An output whose elements cannot be addressed: over [`crate::MAX_SIZE`] bytes at 8 bytes
    /// an element.
    OutputTooLarge {
        /// The output dims.
        dims: Vec<usize>,
    },
    /// An output the host cannot allocate now (a CPU device's allocation probe failed); Rust's
    /// allocator would abort the process.
    OutOfMemory {
        /// The output dims.
        dims: Vec<usize>,
        /// Its size in bytes.
        bytes: usize,
    },
    /// A module parameter (weight or bias) this device cannot allocate, found at `init`.
    ParameterTooLarge {
        /// `"weight"` or `"bias"`.
        param: &'static str,
        /// Its dims.
        dims: Vec<usize>,
    },
    /// A size or parameter above what the device's kernels address: the CubeCL kernels keep
    /// sizes, window tables and parameters in 32 bits.
    DeviceLimit {
        /// What, e.g. `"padding"` or `"divisor_override"`.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The largest the device's kernels hold.
        limit: usize,
    },
    /// Pooling indices (flat in an input plane) that the index dtype cannot hold: they would
    /// wrap.
    IndexDtype {
        /// Elements of one input plane: indices reach `plane - 1`.
        plane: usize,
        /// The index dtype, as Burn prints it.
        dtype: String,
    },
}

impl SpecError {
    /// Attach the op name to a failure.
    pub fn new(op: &'static str, kind: SpecErrorKind) -> Self {
        Self { op, kind }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.kind)
    }
}

impl fmt::Display for SpecErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use SpecErrorKind::*;
        match self {
            Rank {
                arg,
                expected,
                actual,
            } => write!(f, "{arg} must have rank {expected:?}, got rank {actual}"),
            Zero { param, value } => write!(f, "{param} must be non-zero, got {value:?}"),
            GroupsDivide {
                what,
                channels,
                groups,
            } => write!(
                f,
                "{what} ({channels}) must be divisible by groups ({groups})"
            ),
            Mismatch {
                what,
                expected,
                actual,
            } => write!(f, "{what}: expected {expected}, got {actual}"),
            KernelTooLarge {
                dim,
                kernel_extent,
                padded_len,
            } => write!(
                f,
                "kernel extent {kernel_extent} (dilation * (kernel - 1) + 1) is larger than \
                 the padded input {padded_len} on spatial dim {dim}"
            ),
            SameWithStride { stride } => write!(
                f,
                "padding \"same\" needs stride 1 on every dim, got stride {stride:?}"
            ),
            OutputPadding {
                dim,
                output_padding,
                limit,
            } => write!(
                f,
                "output_padding ({output_padding}) must be smaller than max(stride, dilation) \
                 ({limit}) on spatial dim {dim}"
            ),
            OutputSize {
                dim,
                requested,
                min,
                max,
            } => write!(
                f,
                "output_size {requested} on spatial dim {dim} is outside the valid range \
                 [{min}, {max}]"
            ),
            EmptyOutput { dim } => write!(f, "the output would be empty on spatial dim {dim}"),
            DeviceDtype { dtype } => write!(
                f,
                "dtype {dtype} is not supported on this device (its runtime does not report it)"
            ),
            Dtype { dtype } => write!(
                f,
                "dtype {dtype} is not supported (the ops compute in F64, F32, F16 and BF16)"
            ),
            DtypeMismatch {
                arg,
                expected,
                actual,
            } => write!(
                f,
                "{arg} has dtype {actual} but the input has {expected}; cast one of them"
            ),
            TooLarge { what, value } => write!(
                f,
                "{what} {value} is above the largest size {}",
                super::bounds::MAX_SIZE
            ),
            OutputTooLarge { dims } => write!(
                f,
                "the output {dims:?} has more elements than memory can address"
            ),
            OutOfMemory { dims, bytes } => write!(
                f,
                "the output {dims:?} needs {bytes} bytes, more than this machine can allocate"
            ),
            ParameterTooLarge { param, dims } => write!(
                f,
                "the {param} {dims:?} needs more memory than this device can allocate"
            ),
            DeviceLimit { what, value, limit } => write!(
                f,
                "{what} {value} is above {limit}, the largest value this device's kernels hold"
            ),
            IndexDtype { plane, dtype } => write!(
                f,
                "indices into a plane of {plane} elements do not fit in the index dtype \
                 {dtype}; use a wider int dtype (PyTorch's indices are int64)"
            ),
            PaddingTooLarge {
                dim,
                padding,
                limit,
            } => write!(
                f,
                "padding {padding} on spatial dim {dim} is larger than half the kernel size \
                 ({limit})"
            ),
            WindowInPadding { dim, output } => write!(
                f,
                "window {output} on spatial dim {dim} holds padding only: its dilated taps \
                 step over the whole input"
            ),
            PaddingMode {
                mode,
                dim,
                padding,
                len,
            } => write!(
                f,
                "padding_mode \"{mode}\" cannot pad {padding} on spatial dim {dim} of an input \
                 of length {len}"
            ),
            Epsilon { epsilon } => {
                write!(f, "epsilon must be finite and positive, got {epsilon}")
            }
            OneValuePerChannel { dims } => write!(
                f,
                "expected more than 1 value per channel when training, got input {dims:?}"
            ),
            NotInBurnNn { setting } => write!(f, "burn-nn's module has no {setting}"),
            FoldAfterActivation { activation } => write!(
                f,
                "the conv applies {activation} before the batch norm, so the batch norm cannot \
                 fold into it (fuse first, then set the activation on the fused conv)"
            ),
            ActivationBeforeBatchNorm { activation } => write!(
                f,
                "the conv options apply {activation}, but a batch norm follows the conv: set \
                 the activation in the batch norm's options"
            ),
            EmptyInput { dims } => write!(
                f,
                "input {dims:?} has an empty dim other than the batch (only the batch may be 0)"
            ),
            OutputRatio { dim, ratio } => write!(
                f,
                "output_ratio {ratio} on spatial dim {dim} must lie in (0, 1) and give an \
                 output of at least 1"
            ),
            FractionalKernel {
                dim,
                kernel,
                output,
                len,
            } => write!(
                f,
                "kernel {kernel} is too large for output size {output} from input length {len} \
                 on spatial dim {dim} (needs output + kernel - 1 <= input)"
            ),
            PaddedInputTooLarge { mode, dims } => write!(
                f,
                "padding_mode '{mode}' copies the input into {dims:?}, more than this machine \
                 can allocate"
            ),
            FractionalSample { value, at } => write!(
                f,
                "samples must lie in [0, 1], got {value} at samples{at:?}"
            ),
            NormType { norm_type } => write!(f, "norm_type must be positive, got {norm_type}"),
            IndexOutOfRange { index, plane } => write!(
                f,
                "index {index} is out of range for an output plane of {plane} elements"
            ),
            ShapeMismatch {
                what,
                expected,
                actual,
            } => write!(f, "{what}: {expected:?} vs {actual:?}"),
        }
    }
}

impl std::error::Error for SpecError {}

/// Shorthand for the validation layer's results.
pub type SpecResult<T> = Result<T, SpecError>;

//! The one error type of the validation layer: every variant names the offending values, and
//! [`SpecError`] adds the op, so a message reads `conv2d: stride must be non-zero, got [0, 1]`.

use core::fmt;

/// A rejected call: which op, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The public op that rejected its input, e.g. `"conv2d"`.
    pub op: &'static str,
    /// What was wrong, with the offending values.
    pub kind: SpecErrorKind,
}

/// Why a call was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// A dtype the op does not compute in.
    Dtype {
        /// The dtype, as Burn prints it.
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
            Dtype { dtype } => write!(f, "dtype {dtype} is not supported"),
        }
    }
}

impl std::error::Error for SpecError {}

/// Shorthand for the validation layer's results.
pub type SpecResult<T> = Result<T, SpecError>;

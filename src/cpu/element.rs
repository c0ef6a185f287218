//! The float types the CPU kernels compute in, and the batch/GEMM parallelism split.

use gemm::Parallelism;

/// A float the CPU kernels compute in (f32 and f64; f16/bf16 are computed in f32).
pub trait Element:
    burn::tensor::Element
    + bytemuck::Pod
    + Default
    + PartialOrd
    + core::ops::Add<Output = Self>
    + core::ops::AddAssign
    + core::ops::Mul<Output = Self>
    + Send
    + Sync
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// The max-pool padding value.
    const NEG_INFINITY: Self;
    /// From f64 (rounding for f32).
    fn from_f64(value: f64) -> Self;
    /// `self^exponent` with C `pow` semantics (NaN for a negative base and fractional power).
    fn powf(self, exponent: Self) -> Self;
    /// -1, 0 or 1 (0 for 0, NaN for NaN), as `torch.sign`.
    fn sign(self) -> Self;
    /// `self / other`.
    fn div(self, other: Self) -> Self;
}

macro_rules! float_element {
    ($t:ty) => {
        impl Element for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            fn from_f64(value: f64) -> Self {
                value as $t
            }
            fn powf(self, exponent: Self) -> Self {
                <$t>::powf(self, exponent)
            }
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    self * 0.0
                }
            }
            fn div(self, other: Self) -> Self {
                self / other
            }
        }
    };
}
float_element!(f32);
float_element!(f64);

/// Where the threads go: across independent batch items when there are enough of them
/// (each GEMM then runs single-threaded), otherwise inside each GEMM.
#[derive(Debug, Clone, Copy)]
pub struct Split {
    /// Run the outer batch loop on rayon.
    pub outer: bool,
    /// Parallelism handed to each GEMM call.
    pub inner: Parallelism,
}

impl Split {
    /// Choose the split for `items` independent work items.
    pub fn for_items(items: usize) -> Self {
        let threads = rayon::current_num_threads();
        if items >= threads || threads == 1 {
            Self {
                outer: threads > 1,
                inner: Parallelism::None,
            }
        } else {
            Self {
                outer: false,
                inner: Parallelism::Rayon(threads),
            }
        }
    }
}

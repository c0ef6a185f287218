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
}

impl Element for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

impl Element for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

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

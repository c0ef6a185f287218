//! Which algorithm the CPU backends (Flex, NdArray) run a convolution pass with. By default
//! each pass takes the fastest algorithm that serves its shape: on a large pass, the fastest
//! of them timed once on this machine (on its first call with that shape, element type and
//! thread count, then remembered for the process, as PyTorch's `cudnn.benchmark`), on a
//! small one by a fixed rule. Which algorithm wins depends on the CPU (Winograd's transforms
//! pay on an AVX-512 Xeon where a GEMM wins on an AVX2 EPYC), so two machines, or two
//! processes, may sum in different orders. [`with_conv_algorithm`] pins one for the code it
//! runs, to reproduce a result bit for bit across shapes and machines or to check one
//! algorithm on shapes it would not be picked for.
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use burn_convpool::cpu_kernels::{Algorithm, with_conv_algorithm};
//! use burn_convpool::{ConvNdOptions, conv2d};
//!
//! let device = Device::flex();
//! let x = Tensor::<4>::ones([1, 64, 16, 16], &device);
//! let weight = Tensor::<4>::ones([64, 64, 3, 3], &device);
//! let options = ConvNdOptions::<2>::default().with_padding([1, 1]);
//! // Every pass the im2col GEMM: the order of sums of any other 3x3 convolution.
//! let out = with_conv_algorithm(Algorithm::Lowered, || {
//!     conv2d(x.clone(), weight.clone(), None, options.clone())
//! });
//! assert_eq!(out.dims(), [1, 64, 16, 16]);
//! ```

use std::cell::Cell;

/// The CPU's algorithms for a convolution pass (Flex and NdArray). Each is exact to f32
/// roundoff; they differ in speed and in the order of their sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// A vectorised stencil over each channel's plane, no lowering: the forward pass of a
    /// depthwise convolution (one input and one output channel per group), and its weight
    /// gradient where the stride along W is 1.
    Depthwise,
    /// Winograd's F(2, 3) per 3-tap axis: stride-1, undilated convolutions whose kernel axes
    /// have 1 or 3 taps (at least one 3), all three passes.
    Winograd,
    /// Stride-1 taps over the input's stride phases, no patch matrix: strided, undilated
    /// convolutions whose kernel is a whole number of strides on every axis, all three passes.
    Phases,
    /// One packed product per thread over the positions of all its images, in f32 (other
    /// element types take the lowered path): the forward pass and input gradient of a 1x1
    /// convolution at stride 1 without padding.
    Pointwise,
    /// The input gradient of a stride-1 convolution as the forward convolution of the output
    /// gradient with the flipped kernel, by the forward pass's own choice of algorithm: stride-1
    /// convolutions padded no more than the dilated kernel reaches, the input gradient only
    /// (finite weights; else the lowered path).
    Adjoint,
    /// A register-tiled direct convolution over a zero-bordered copy of each image, no patch
    /// matrix, in f32 (other element types take the lowered path): the forward pass and the
    /// weight gradient of every shape whose padding is not far wider than its kernel, and the
    /// input gradient of a strided one, one stride phase of the input at a time, over a copy
    /// of the output gradient (finite weights; else the lowered path). Through
    /// [`Algorithm::Adjoint`] it also computes the input gradient of a stride-1 one.
    Direct,
    /// im2col and a GEMM, a 1x1 convolution's input its own patch matrix: every shape.
    Lowered,
}

thread_local! {
    static PINNED: Cell<Option<Algorithm>> = const { Cell::new(None) };
}

/// Run `f` with `algorithm` computing every CPU convolution pass it serves, on this thread
/// (where Flex and NdArray compute each op, and autodiff its backward); the other passes take
/// the default choice. The previous choice returns when `f` does, or panics. Tensors are
/// computed when their op is called on these backends, so every op `f` calls runs pinned.
///
/// What each algorithm serves is on [`Algorithm`]'s variants: a pinned one runs wherever it
/// serves the shape, also where it is slower than the default.
pub fn with_conv_algorithm<R>(algorithm: Algorithm, f: impl FnOnce() -> R) -> R {
    /// Puts the previous choice back when dropped.
    struct Restore(Option<Algorithm>);
    impl Drop for Restore {
        fn drop(&mut self) {
            PINNED.set(self.0);
        }
    }
    let _restore = Restore(PINNED.replace(Some(algorithm)));
    f()
}

/// The algorithm [`with_conv_algorithm`] pinned on this thread, if any.
pub(crate) fn pinned() -> Option<Algorithm> {
    PINNED.get()
}

//! Which algorithm the CPU backends (Flex, NdArray) run a convolution pass with. By default
//! each pass takes the fastest algorithm that serves its shape: on a large pass, the fastest
//! of them timed once on this machine (on its first call with that shape, element type and
//! thread count, then remembered for the process, as PyTorch's `cudnn.benchmark`), on a
//! small one by a fixed rule. Which algorithm wins depends on the CPU (Winograd's transforms
//! pay on some machines where a GEMM wins on others), so two machines, or two processes, may
//! sum in different orders. [`with_conv_algorithm`] pins one for the code it
//! runs, to reproduce a result bit for bit across shapes and machines or to check one
//! algorithm on shapes it would not be picked for.
//!
//! # Threads
//!
//! The kernels run their parallel loops on Rayon's current pool. Called from outside a pool (a
//! program's main thread), each loop hands its work to a worker and waits, and between ops
//! the workers fall asleep, so every loop first waits for one to wake. Run a CPU training loop
//! inside a pool (`rayon::ThreadPool::install`): each loop then starts on the calling thread
//! and the others join as they wake. The ResNet example (`examples/resnet/main.rs`) trains
//! 1.2x faster so on two cores. [`with_spinning_workers`] keeps the other workers awake
//! between ops, as OpenMP's threads are under PyTorch: each loop then starts on every thread.
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
//! // Every pass the lowered path (im2col and a GEMM): the order of sums of any other 3x3 convolution.
//! let out = with_conv_algorithm(Algorithm::Lowered, || {
//!     conv2d(x.clone(), weight.clone(), None, options.clone())
//! });
//! assert_eq!(out.dims(), [1, 64, 16, 16]);
//! ```

use std::cell::{Cell, RefCell};

pub use super::threads::with_spinning_workers;

/// The CPU's algorithms for a convolution pass (Flex and NdArray). Each is exact to f32
/// roundoff; they differ in speed and in the order of their sums. Each serves the passes its
/// variant names, by their shape, element type and values; where an algorithm multiplied a
/// weight or output gradient that is not finite by the padding's zeros, the elements it
/// spoiled are summed again by the definition, whichever algorithm ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// A vectorised stencil over each channel's plane, no lowering: the forward pass of a
    /// depthwise convolution (one input and one output channel per group), and its weight
    /// gradient where the stride along W is 1.
    Depthwise,
    /// Winograd's F(2, 3) and F(4, 3) per 3-tap axis: stride-1, undilated convolutions whose
    /// kernel axes have 1 or 3 taps (at least one 3), all three passes, where both operands
    /// are below 1e30 in magnitude (its transforms would spread a NaN or overflow).
    Winograd,
    /// Stride-1 taps over the input's stride phases, no patch matrix: strided, undilated
    /// convolutions whose kernel is a whole number of strides on every axis, all three passes
    /// (the weight gradient of a finite input only: its dropped columns multiply the inputs
    /// beside the output by zero).
    Phases,
    /// One packed product per thread over the positions of all its images, f32 only: the
    /// forward pass and input gradient of a 1x1 convolution at stride 1 without padding.
    Pointwise,
    /// The input gradient of a stride-1 convolution as the forward convolution of the output
    /// gradient with the flipped kernel, by the forward pass's own choice of algorithm: stride-1
    /// convolutions padded no more than the dilated kernel reaches, the input gradient only.
    Adjoint,
    /// A register-tiled direct convolution over a zero-bordered copy of each image, no patch
    /// matrix, output channels in the vector lanes (output points, for a layer with fewer
    /// channels than a block holds), f32 only: the forward pass and the weight gradient of
    /// every shape whose padding is not far wider than its kernel, and the input gradient of
    /// a strided one, one stride phase of the input at a time, over a copy of the output
    /// gradient. Through [`Algorithm::Adjoint`] it also computes the input gradient of a
    /// stride-1 one.
    Direct,
    /// im2col and a GEMM, a 1x1 convolution's input its own patch matrix: every pass of every
    /// shape, element type and value.
    Lowered,
}

/// A pass of a convolution: every conv primitive, transposed ones included, runs as passes
/// of one geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// `out = conv(x, weight) + bias`.
    Forward,
    /// The gradient with respect to `x`.
    Data,
    /// The gradient with respect to `weight`.
    Weight,
}

thread_local! {
    static PINNED: Cell<Option<Algorithm>> = const { Cell::new(None) };
    /// What [`record_conv_algorithms`] has taken so far, while one is open on this thread.
    static RECORD: RefCell<Option<Vec<(Pass, Algorithm)>>> = const { RefCell::new(None) };
    /// How many passes are running on this thread, one inside another (the adjoint runs a
    /// forward pass as its input gradient).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Run `f` with `algorithm` computing every CPU convolution pass it serves, on this thread
/// (where Flex and NdArray compute each op, and autodiff its backward); the other passes take
/// the default choice. The previous choice returns when `f` does, or panics. Tensors are
/// computed when their op is called on these backends, so every op `f` calls runs pinned.
///
/// What each algorithm serves is on [`Algorithm`]'s variants: a pinned one runs wherever it
/// serves the shape, the element type and the values, also where it is slower than the
/// default. [`record_conv_algorithms`] tells which algorithm ran each pass.
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

/// Run `f`, and return the algorithm each CPU convolution pass it ran on this thread was
/// computed with, in order. A pass that runs another inside it (the adjoint's forward pass)
/// counts once, as the outer one; a pass timed against its candidates counts once, as the
/// algorithm whose result it returned. Records nest: an inner one takes what happens inside it.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_convpool::cpu_kernels::{Algorithm, Pass, record_conv_algorithms, with_conv_algorithm};
/// use burn_convpool::{ConvNdOptions, conv2d};
///
/// let device = Device::flex();
/// let x = Tensor::<4>::ones([1, 4, 8, 8], &device);
/// let weight = Tensor::<4>::ones([4, 4, 3, 3], &device);
/// let (_, ran) = record_conv_algorithms(|| {
///     with_conv_algorithm(Algorithm::Winograd, || {
///         conv2d(x, weight, None, ConvNdOptions::default())
///     })
/// });
/// assert_eq!(ran, [(Pass::Forward, Algorithm::Winograd)]);
/// ```
pub fn record_conv_algorithms<R>(f: impl FnOnce() -> R) -> (R, Vec<(Pass, Algorithm)>) {
    /// Puts the enclosing record back when dropped.
    struct Restore(Option<Vec<(Pass, Algorithm)>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            RECORD.set(self.0.take());
        }
    }
    let _restore = Restore(RECORD.replace(Some(Vec::new())));
    let out = f();
    let ran = RECORD.with_borrow_mut(|record| record.as_mut().map(core::mem::take));
    (out, ran.unwrap_or_default())
}

/// Run one pass (`run` returns its algorithm and its result) and note the algorithm in the
/// open record, if there is one and the pass is not inside another.
pub(crate) fn run_noted<T>(pass: Pass, run: impl FnOnce() -> (Algorithm, T)) -> T {
    /// Leaves the pass when dropped.
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DEPTH.set(DEPTH.get() - 1);
        }
    }
    DEPTH.set(DEPTH.get() + 1);
    let leave = Leave;
    let (algorithm, out) = run();
    drop(leave);
    if DEPTH.get() == 0 {
        RECORD.with_borrow_mut(|record| {
            if let Some(record) = record {
                record.push((pass, algorithm));
            }
        });
    }
    out
}

/// The algorithm [`with_conv_algorithm`] pinned on this thread, if any.
pub(crate) fn pinned() -> Option<Algorithm> {
    PINNED.get()
}

#![cfg_attr(feature = "ndarray", allow(deprecated))]
//! The backend extension: one primitive per forward pass and per gradient.
//!
//! Every primitive is rank-erased: tensors are `(N, C, *spatial)` with 1 to 3 spatial axes (rank
//! 3 to 5), every tensor operand of a call at the same rank (bias and fractional samples
//! aside), and options rank 3, 1d and 2d lifted by leading unit entries. Each backend lifts
//! the tensors to rank 5 (`N, C, D, H, W`) itself, as views, and returns results at its
//! operands' rank: lifting in `functional` would queue two reshapes per call under `Fusion`,
//! and dropping the axes again copies any tensor that is not contiguous (Burn's convolutions
//! leave channels-last ones). That keeps the signatures non-generic, as the macro's `Fusion`
//! support requires, and gives each backend one implementation per op instead of three.
//! Shapes are validated before a primitive is called; primitives trust them.

use burn::backend::{
    Backend, backend_extension,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::IntDType;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::spec::{Activation, AvgPoolNdOptions, LpPoolOptions, MaxPoolOptions, WindowRule};

/// Output shapes for the `Fusion` impl, which records each op lazily and must know its
/// outputs without running it: `spec::shapes` on `Shape`s.
#[cfg(feature = "cube")]
pub(crate) mod fusion_shapes {
    use burn::tensor::{
        Shape,
        ops::{ConvOptions, ConvTransposeOptions},
    };

    use crate::spec::{
        AvgPoolNdOptions, LpPoolOptions, MaxPoolOptions, lifted_dims, lowered_dims, shapes,
    };

    /// A rank-5 result at the rank of `like`, the operand whose rank it takes.
    fn at_rank_of(dims: [usize; 5], like: &Shape) -> Shape {
        Shape::from(lowered_dims(dims, like.num_dims()))
    }

    pub fn conv(x: &Shape, weight: &Shape, options: &ConvOptions<3>) -> Shape {
        let dims = shapes::conv(&lifted_dims(x), &lifted_dims(weight), options);
        at_rank_of(dims, x)
    }

    pub fn conv_x(weight: &Shape, out_grad: &Shape, x_size: &[usize; 3], groups: usize) -> Shape {
        let (weight5, out_grad5) = (lifted_dims(weight), lifted_dims(out_grad));
        at_rank_of(
            shapes::conv_x(&weight5, &out_grad5, *x_size, groups),
            out_grad,
        )
    }

    pub fn conv_weight(x: &Shape, out_grad: &Shape, kernel: &[usize; 3], groups: usize) -> Shape {
        let (x5, out_grad5) = (lifted_dims(x), lifted_dims(out_grad));
        at_rank_of(shapes::conv_weight(&x5, &out_grad5, *kernel, groups), x)
    }

    pub fn bias(out_grad: &Shape) -> Shape {
        Shape::from(vec![out_grad[1]])
    }

    pub fn conv_transpose(x: &Shape, weight: &Shape, options: &ConvTransposeOptions<3>) -> Shape {
        let dims = shapes::conv_transpose(&lifted_dims(x), &lifted_dims(weight), options);
        at_rank_of(dims, x)
    }

    pub fn conv_transpose_x(weight: &Shape, out_grad: &Shape, x_size: &[usize; 3]) -> Shape {
        let (weight5, out_grad5) = (lifted_dims(weight), lifted_dims(out_grad));
        at_rank_of(
            shapes::conv_transpose_x(&weight5, &out_grad5, *x_size),
            out_grad,
        )
    }

    pub fn conv_transpose_weight(
        x: &Shape,
        out_grad: &Shape,
        kernel: &[usize; 3],
        groups: usize,
    ) -> Shape {
        let (x5, out_grad5) = (lifted_dims(x), lifted_dims(out_grad));
        at_rank_of(
            shapes::conv_transpose_weight(&x5, &out_grad5, *kernel, groups),
            x,
        )
    }

    pub fn with_spatial(x: &Shape, size: &[usize; 3]) -> Shape {
        at_rank_of(shapes::with_spatial(&lifted_dims(x), *size), x)
    }

    pub fn window_pool(x: &Shape, options: &MaxPoolOptions<3>) -> Shape {
        at_rank_of(shapes::window_pool(&lifted_dims(x), options), x)
    }

    pub fn avg_pool(x: &Shape, options: &AvgPoolNdOptions<3>) -> Shape {
        at_rank_of(shapes::avg_pool(&lifted_dims(x), options), x)
    }

    pub fn lp_pool(x: &Shape, options: &LpPoolOptions<3>) -> Shape {
        at_rank_of(shapes::lp_pool(&lifted_dims(x), options), x)
    }

    /// A batch norm's result (the input's shape) and two per-channel vectors.
    pub fn batch_norm(
        x: &burn::backend::fusion::custom::TensorSpec,
    ) -> (
        burn::backend::fusion::custom::TensorSpec,
        burn::backend::fusion::custom::TensorSpec,
        burn::backend::fusion::custom::TensorSpec,
    ) {
        use burn::backend::fusion::custom::TensorSpec;
        let channels = TensorSpec::new(Shape::from(vec![x.shape[1]]), x.dtype);
        (
            TensorSpec::new(x.shape.clone(), x.dtype),
            channels.clone(),
            channels,
        )
    }

    /// A conv's result and two per-channel vectors of its output channels.
    pub fn conv_moments(
        x: &burn::backend::fusion::custom::TensorSpec,
        weight: &burn::backend::fusion::custom::TensorSpec,
        options: &ConvOptions<3>,
    ) -> (
        burn::backend::fusion::custom::TensorSpec,
        burn::backend::fusion::custom::TensorSpec,
        burn::backend::fusion::custom::TensorSpec,
    ) {
        use burn::backend::fusion::custom::TensorSpec;
        let channels = TensorSpec::new(Shape::from(vec![weight.shape[0]]), x.dtype);
        (
            TensorSpec::new(conv(&x.shape, &weight.shape, options), x.dtype),
            channels.clone(),
            channels,
        )
    }

    /// Values and indices of an index-producing pool with output dims `out`.
    pub fn with_indices(
        x: &burn::backend::fusion::custom::TensorSpec,
        out: Shape,
        indices_dtype: &burn::tensor::IntDType,
    ) -> (
        burn::backend::fusion::custom::TensorSpec,
        burn::backend::fusion::custom::TensorSpec,
    ) {
        use burn::backend::fusion::custom::TensorSpec;
        (
            TensorSpec::new(out.clone(), x.dtype),
            TensorSpec::new(out, burn::tensor::DType::from(*indices_dtype)),
        )
    }
}

/// Convolution and pooling primitives, implemented for every CubeCL runtime (`Cube`, through
/// `Fusion`), Flex, NdArray (feature `ndarray`) and `Autodiff<B, C>`.
///
/// # Contract
/// The primitives validate nothing: their caller guarantees shapes, options, dtypes and sizes
/// that the functional API's checks accept (`spec::check_*`), every tensor operand at one
/// rank from 3 to 5 (see the module docs).
/// Given anything else a primitive may return a tensor of the wrong shape or values, or
/// panic. Call the functions at the crate root (or their `try_` twins, which return a
/// [`SpecError`](crate::SpecError)) or the [`nn`](crate::nn) modules instead.
#[backend_extension(
    Cube: cfg(feature = "cube"),
    Fusion: cfg(feature = "cube"),
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Autodiff: cfg(feature = "autodiff"),
)]
pub trait ConvPoolBackend: Backend {
    /// `activation(conv(x, weight))`; `x = (N, C_in, D, H, W)`,
    /// `weight = (C_out, C_in / groups, kD, kH, kW)`, no activation where `None`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::conv(x, weight, options))]
    fn conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self>;

    /// `activation(conv(x, weight) + bias)`, `bias = (C_out)`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::conv(x, weight, options))]
    fn conv_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv` with respect to `x`, whose spatial size is `x_size`.
    #[fusion(dtype = out_grad, shape = crate::backend::fusion_shapes::conv_x(weight, out_grad, x_size, options.groups))]
    fn conv_x_backward(
        weight: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
        options: ConvOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv` with respect to `weight`, whose kernel size is `kernel_size`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::conv_weight(x, out_grad, kernel_size, options.groups))]
    fn conv_weight_backward(
        x: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        kernel_size: [usize; 3],
        options: ConvOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of a per-channel bias (of `conv` and `conv_transpose` alike): `out_grad`
    /// summed over every axis but the channel.
    #[fusion(dtype = out_grad, shape = crate::backend::fusion_shapes::bias(out_grad))]
    fn conv_bias_backward(out_grad: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `activation(conv_transpose(x, weight))`; `x = (N, C_in, D, H, W)`,
    /// `weight = (C_in, C_out / groups, kD, kH, kW)`, no activation where `None`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::conv_transpose(x, weight, options))]
    fn conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self>;

    /// `activation(conv_transpose(x, weight) + bias)`, `bias = (C_out)`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::conv_transpose(x, weight, options))]
    fn conv_transpose_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self>;

    /// `activation(x)` element by element: the activation of a fused convolution whose
    /// backward needs the result before it (SiLU, GELU), applied after it.
    #[fusion(dtype = x, shape = x)]
    fn activate(x: FloatTensor<Self>, activation: Activation) -> FloatTensor<Self>;

    /// The gradient before `activation` from the gradient `out_grad` after it: `out_grad`
    /// times the derivative at `saved`, which is the activation's output where
    /// [`Activation::derivative_from_output`] holds and its input otherwise.
    #[fusion(dtype = out_grad, shape = out_grad)]
    fn activation_backward(
        saved: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        activation: Activation,
    ) -> FloatTensor<Self>;

    /// `activation(batch_norm(x))` over the batch's own statistics, PyTorch's
    /// `F.batch_norm(training=True)`: `(out, mean, variance)`, the per-channel mean and biased
    /// variance of `x` over every axis but the channel (shape `(C)`), and
    /// `out = activation((x - mean) / sqrt(variance + epsilon) * gamma + beta)`.
    #[fusion(meta = |x, _gamma, _beta, _epsilon, _activation| crate::backend::fusion_shapes::batch_norm(x))]
    fn batch_norm_act(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
        activation: Option<Activation>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// Gradients of [`batch_norm_act`](Self::batch_norm_act) with respect to `x`, `gamma` and
    /// `beta`, from its output's gradient and the `mean` and `variance` it returned; the
    /// activation's input is recomputed from `x`.
    #[fusion(meta = |x, _gamma, _beta, _mean, _variance, _out_grad, _epsilon, _activation| crate::backend::fusion_shapes::batch_norm(x))]
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_act_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        epsilon: f64,
        activation: Option<Activation>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// `conv(x, weight)` and the statistics a training batch norm after it takes:
    /// `(out, mean, variance)`, each output channel's mean and biased variance over every axis
    /// but the channel (shape `(C_out)`, untracked), summed where a backend can as the conv
    /// stores its output (cuDNN's "ConvGenStats") rather than read back from memory.
    #[fusion(meta = |x, weight, options| crate::backend::fusion_shapes::conv_moments(x, weight, options))]
    fn conv_moments(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// [`batch_norm_act`](Self::batch_norm_act)'s output from the batch's `mean` and
    /// `variance` already summed (by [`conv_moments`](Self::conv_moments)): one pass. Its
    /// gradients are [`batch_norm_act_backward`](Self::batch_norm_act_backward)'s, the
    /// statistics being `x`'s own.
    #[fusion(dtype = x, shape = x)]
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_act_given(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        epsilon: f64,
        activation: Option<Activation>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv_transpose` with respect to `x`, whose spatial size is `x_size`.
    #[fusion(dtype = out_grad, shape = crate::backend::fusion_shapes::conv_transpose_x(weight, out_grad, x_size))]
    fn conv_transpose_x_backward(
        weight: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv_transpose` with respect to `weight`, whose kernel size is
    /// `kernel_size`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::conv_transpose_weight(x, out_grad, kernel_size, options.groups))]
    fn conv_transpose_weight_backward(
        x: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        kernel_size: [usize; 3],
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self>;

    /// Max pooling with PyTorch's indices (flat per `(n, c)` plane of the unpadded input).
    #[fusion(meta = |x, options, dtype| crate::backend::fusion_shapes::with_indices(x, crate::backend::fusion_shapes::window_pool(&x.shape, options), dtype))]
    fn max_pool_with_indices(
        x: FloatTensor<Self>,
        options: MaxPoolOptions<3>,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>);

    /// Gradient of every index-producing pool (max, adaptive max, fractional max): `out_grad`
    /// added into a zero input of spatial size `x_size` at `indices`. `windows` tells a
    /// gather-form kernel which outputs may point at each input element.
    #[fusion(dtype = out_grad, shape = crate::backend::fusion_shapes::with_spatial(out_grad, x_size))]
    fn max_pool_backward(
        out_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
        x_size: [usize; 3],
        windows: WindowRule,
    ) -> FloatTensor<Self>;

    /// Average pooling with `count_include_pad`, ceil mode and `divisor_override`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::avg_pool(x, options))]
    fn avg_pool(x: FloatTensor<Self>, options: AvgPoolNdOptions<3>) -> FloatTensor<Self>;

    /// Gradient of `avg_pool` for an input of spatial size `x_size`.
    #[fusion(dtype = out_grad, shape = crate::backend::fusion_shapes::with_spatial(out_grad, x_size))]
    fn avg_pool_backward(
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
        options: AvgPoolNdOptions<3>,
    ) -> FloatTensor<Self>;

    /// Adaptive average pooling to `output_size`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::with_spatial(x, output_size))]
    fn adaptive_avg_pool(x: FloatTensor<Self>, output_size: [usize; 3]) -> FloatTensor<Self>;

    /// Gradient of `adaptive_avg_pool` for an input of spatial size `x_size`.
    #[fusion(dtype = out_grad, shape = crate::backend::fusion_shapes::with_spatial(out_grad, x_size))]
    fn adaptive_avg_pool_backward(
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
    ) -> FloatTensor<Self>;

    /// Adaptive max pooling to `output_size`, with indices.
    #[fusion(meta = |x, output_size, dtype| crate::backend::fusion_shapes::with_indices(x, crate::backend::fusion_shapes::with_spatial(&x.shape, output_size), dtype))]
    fn adaptive_max_pool(
        x: FloatTensor<Self>,
        output_size: [usize; 3],
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>);

    /// Fractional max pooling; `samples = (N, C, 3)` in `[0, 1)`, ordered (D, H, W).
    #[fusion(meta = |x, _samples, _kernel, output_size, dtype| crate::backend::fusion_shapes::with_indices(x, crate::backend::fusion_shapes::with_spatial(&x.shape, output_size), dtype))]
    fn fractional_max_pool(
        x: FloatTensor<Self>,
        samples: FloatTensor<Self>,
        kernel_size: [usize; 3],
        output_size: [usize; 3],
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>);

    /// LP pooling, PyTorch's formula (`p = inf` is the max of `|x|`).
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::lp_pool(x, options))]
    fn lp_pool(x: FloatTensor<Self>, options: LpPoolOptions<3>) -> FloatTensor<Self>;

    /// Gradient of `lp_pool`; `output` is its result, which gives each window's share for a
    /// finite `p >= 1` (other `p` sum the windows of `x` again).
    #[fusion(dtype = x, shape = x)]
    fn lp_pool_backward(
        x: FloatTensor<Self>,
        output: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        options: LpPoolOptions<3>,
    ) -> FloatTensor<Self>;

    /// Max-unpool: `x` written at `indices` into a zero output of spatial size `output_size`.
    #[fusion(dtype = x, shape = crate::backend::fusion_shapes::with_spatial(x, output_size))]
    fn max_unpool(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        output_size: [usize; 3],
    ) -> FloatTensor<Self>;

    /// Gradient of `max_unpool`: `out_grad` gathered at `indices`.
    #[fusion(dtype = out_grad, shape = indices)]
    fn max_unpool_backward(
        out_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self>;
}

//! The pooling primitives for any [`HostTensors`] backend.

use std::borrow::Cow;

use burn::tensor::{DType, IntDType};

use crate::spec::{
    AvgPoolNdOptions, LpPoolOptions, MaxPoolOptions, Spans, adaptive_spans3, fractional_spans,
    spatial, window_out_size, window_spans,
};

use super::host::{HostTensors, IntValues, Precision, dims5, with_element, with_indices};
use super::kernels::element::Element;
use super::kernels::pool;

use crate::spec::shapes::with_spatial as out_dims;

/// [`pool::max_pool`] with its indices in the width `index_dtype` stores: i32 written
/// directly for an I32 tensor (Burn's default), i64 otherwise.
fn max_pool_indexed<'a, T: Element>(
    index_dtype: DType,
    x: &[T],
    in_size: [usize; 3],
    out_volume: usize,
    spans_of: impl Fn(usize) -> &'a Spans + Sync,
) -> (Vec<T>, IntValues<'static>) {
    if index_dtype == DType::I32 {
        let (values, indices) = pool::max_pool::<T, i32>(x, in_size, out_volume, spans_of, |v| v);
        (values, IntValues::I32(Cow::Owned(indices)))
    } else {
        let (values, indices) = pool::max_pool::<T, i64>(x, in_size, out_volume, spans_of, |v| v);
        (values, IntValues::I64(Cow::Owned(indices)))
    }
}

/// Max over fixed boxes (sliding or adaptive), with indices.
fn max_over<H: HostTensors>(
    op: &'static str,
    x: H::Tensor,
    spans: Spans,
    indices_dtype: IntDType,
) -> (H::Tensor, H::IntTensor) {
    let dims = dims5::<H>(&x);
    let in_size = spatial(&dims);
    let out_size = spans.each_ref().map(Vec::len);
    let dtype = H::dtype(&x);
    let out = out_dims(&dims, out_size);
    with_element!(op, dtype, |T| {
        let volume = out_size.iter().product();
        let index_dtype = DType::from(indices_dtype);
        let (values, indices) =
            max_pool_indexed::<T>(index_dtype, &H::values(&x), in_size, volume, |_| &spans);
        (
            H::from_values(values, &out, dtype),
            H::int_from_values(indices, &out, index_dtype),
        )
    })
}

/// Max pooling.
pub fn max_pool_with_indices<H: HostTensors>(
    x: H::Tensor,
    options: &MaxPoolOptions<3>,
    indices_dtype: IntDType,
) -> (H::Tensor, H::IntTensor) {
    let in_size = spatial(&dims5::<H>(&x));
    max_over::<H>("max_pool", x, window_spans(in_size, options), indices_dtype)
}

/// Adaptive max pooling.
pub fn adaptive_max_pool<H: HostTensors>(
    x: H::Tensor,
    output_size: [usize; 3],
    indices_dtype: IntDType,
) -> (H::Tensor, H::IntTensor) {
    let in_size = spatial(&dims5::<H>(&x));
    max_over::<H>(
        "adaptive_max_pool",
        x,
        adaptive_spans3(in_size, output_size),
        indices_dtype,
    )
}

/// Fractional max pooling: the boxes of each plane come from its own samples.
pub fn fractional_max_pool<H: HostTensors>(
    x: H::Tensor,
    samples: H::Tensor,
    kernel_size: [usize; 3],
    output_size: [usize; 3],
    indices_dtype: IntDType,
) -> (H::Tensor, H::IntTensor) {
    let dims = dims5::<H>(&x);
    let (planes, in_size) = (dims[0] * dims[1], spatial(&dims));
    let dtype = H::dtype(&x);
    let f32_math = Precision::of("fractional_max_pool", dtype) == Precision::F32;
    let samples = H::values::<f64>(&samples);
    let plane_spans: Vec<Spans> = (0..planes)
        .map(|p| {
            core::array::from_fn(|axis| {
                let sample = samples[p * 3 + axis];
                fractional_spans(
                    in_size[axis],
                    output_size[axis],
                    kernel_size[axis],
                    sample,
                    f32_math,
                )
            })
        })
        .collect();
    let out = out_dims(&dims, output_size);
    with_element!("fractional_max_pool", dtype, |T| {
        let volume = output_size.iter().product();
        let index_dtype = DType::from(indices_dtype);
        let (values, indices) =
            max_pool_indexed::<T>(index_dtype, &H::values(&x), in_size, volume, |p| {
                &plane_spans[p]
            });
        (
            H::from_values(values, &out, dtype),
            H::int_from_values(indices, &out, index_dtype),
        )
    })
}

/// Gradient through indices.
pub fn max_pool_backward<H: HostTensors>(
    out_grad: H::Tensor,
    indices: H::IntTensor,
    x_size: [usize; 3],
) -> H::Tensor {
    let dims = dims5::<H>(&out_grad);
    let out_size = spatial(&dims);
    let dtype = H::dtype(&out_grad);
    with_element!("max_pool_backward", dtype, |T| {
        let x_grad = with_indices!(H::int_slice(&indices), |indices| {
            pool::scatter_by_index::<T, _>(
                "max_pool_backward",
                &H::values(&out_grad),
                &indices,
                out_size.iter().product(),
                x_size.iter().product(),
                true,
            )
        });
        H::from_values(x_grad, &out_dims(&dims, x_size), dtype)
    })
}

/// Average pooling.
pub fn avg_pool<H: HostTensors>(x: H::Tensor, options: &AvgPoolNdOptions<3>) -> H::Tensor {
    let dims = dims5::<H>(&x);
    let in_size = spatial(&dims);
    let spans = window_spans(in_size, &crate::spec::avg_window(options));
    let dtype = H::dtype(&x);
    with_element!("avg_pool", dtype, |T| {
        let out = pool::avg_pool::<T>(&H::values(&x), in_size, &spans, pool::avg_divisor(options));
        H::from_values(out, &out_dims(&dims, spans.each_ref().map(Vec::len)), dtype)
    })
}

/// Gradient of average pooling.
pub fn avg_pool_backward<H: HostTensors>(
    out_grad: H::Tensor,
    x_size: [usize; 3],
    options: &AvgPoolNdOptions<3>,
) -> H::Tensor {
    let dims = dims5::<H>(&out_grad);
    let spans = window_spans(x_size, &crate::spec::avg_window(options));
    let dtype = H::dtype(&out_grad);
    with_element!("avg_pool_backward", dtype, |T| {
        let x_grad = pool::avg_pool_backward::<T>(
            &H::values(&out_grad),
            x_size,
            &spans,
            pool::avg_divisor(options),
        );
        H::from_values(x_grad, &out_dims(&dims, x_size), dtype)
    })
}

/// Adaptive average pooling.
pub fn adaptive_avg_pool<H: HostTensors>(x: H::Tensor, output_size: [usize; 3]) -> H::Tensor {
    let dims = dims5::<H>(&x);
    let in_size = spatial(&dims);
    let spans = adaptive_spans3(in_size, output_size);
    let dtype = H::dtype(&x);
    with_element!("adaptive_avg_pool", dtype, |T| {
        let out = pool::avg_pool::<T>(&H::values(&x), in_size, &spans, pool::tap_divisor);
        H::from_values(out, &out_dims(&dims, output_size), dtype)
    })
}

/// Gradient of adaptive average pooling.
pub fn adaptive_avg_pool_backward<H: HostTensors>(
    out_grad: H::Tensor,
    x_size: [usize; 3],
) -> H::Tensor {
    let dims = dims5::<H>(&out_grad);
    let out_size = spatial(&dims);
    let spans = adaptive_spans3(x_size, out_size);
    let dtype = H::dtype(&out_grad);
    with_element!("adaptive_avg_pool_backward", dtype, |T| {
        let x_grad =
            pool::avg_pool_backward::<T>(&H::values(&out_grad), x_size, &spans, pool::tap_divisor);
        H::from_values(x_grad, &out_dims(&dims, x_size), dtype)
    })
}

/// LP pooling.
pub fn lp_pool<H: HostTensors>(x: H::Tensor, options: &LpPoolOptions<3>) -> H::Tensor {
    let dims = dims5::<H>(&x);
    let in_size = spatial(&dims);
    let window = options.window();
    let spans = window_spans(in_size, &window);
    let out_size = window_out_size(in_size, &window);
    let dtype = H::dtype(&x);
    let p = options.norm_type;
    with_element!("lp_pool", dtype, |T| {
        let x = H::values::<T>(&x);
        let out = if p.is_infinite() {
            pool::max_pool::<T, i64>(
                &x,
                in_size,
                out_size.iter().product(),
                |_| &spans,
                |v: T| v.abs(),
            )
            .0
        } else {
            pool::lp_pool::<T>(&x, in_size, &spans, p, options.kernel_size.iter().product())
        };
        H::from_values(out, &out_dims(&dims, out_size), dtype)
    })
}

/// Gradient of LP pooling; for `p = inf` the gradient of `max(|x|)`, routed to the arg-max
/// with the sign of `x`.
pub fn lp_pool_backward<H: HostTensors>(
    x: H::Tensor,
    output: H::Tensor,
    out_grad: H::Tensor,
    options: &LpPoolOptions<3>,
) -> H::Tensor {
    let dims = dims5::<H>(&x);
    let in_size = spatial(&dims);
    let window = options.window();
    let spans = window_spans(in_size, &window);
    let out_volume: usize = window_out_size(in_size, &window).iter().product();
    let dtype = H::dtype(&x);
    let p = options.norm_type;
    with_element!("lp_pool_backward", dtype, |T| {
        let x = H::values::<T>(&x);
        let out_grad = H::values::<T>(&out_grad);
        let x_grad = if p.is_infinite() {
            let (_, indices) =
                pool::max_pool::<T, i64>(&x, in_size, out_volume, |_| &spans, |v: T| v.abs());
            let in_volume = in_size.iter().product();
            let mut x_grad = pool::scatter_by_index::<T, i64>(
                "lp_pool_backward",
                &out_grad,
                &indices,
                out_volume,
                in_volume,
                true,
            );
            x_grad
                .iter_mut()
                .zip(x.iter())
                .for_each(|(g, v)| *g *= v.sign());
            x_grad
        } else {
            let output = options
                .backward_reads_output()
                .then(|| H::values::<T>(&output));
            pool::lp_pool_backward::<T>(
                &x,
                output.as_deref(),
                &out_grad,
                in_size,
                &spans,
                p,
                options.kernel_size.iter().product(),
            )
        };
        H::from_values(x_grad, &dims, dtype)
    })
}

/// Max-unpool.
pub fn max_unpool<H: HostTensors>(
    x: H::Tensor,
    indices: H::IntTensor,
    output_size: [usize; 3],
) -> H::Tensor {
    let dims = dims5::<H>(&x);
    let in_size = spatial(&dims);
    let dtype = H::dtype(&x);
    with_element!("max_unpool", dtype, |T| {
        let out = with_indices!(H::int_slice(&indices), |indices| {
            pool::scatter_by_index::<T, _>(
                "max_unpool",
                &H::values(&x),
                &indices,
                in_size.iter().product(),
                output_size.iter().product(),
                false,
            )
        });
        H::from_values(out, &out_dims(&dims, output_size), dtype)
    })
}

/// Gradient of max-unpool.
pub fn max_unpool_backward<H: HostTensors>(
    out_grad: H::Tensor,
    indices: H::IntTensor,
) -> H::Tensor {
    let dims = dims5::<H>(&out_grad);
    let out_size = spatial(&dims);
    let index_dims = H::int_dims(&indices);
    assert_eq!(
        index_dims.len(),
        5,
        "expected rank-5 indices, got dims {index_dims:?}"
    );
    let x_size = spatial(&index_dims);
    let dtype = H::dtype(&out_grad);
    with_element!("max_unpool_backward", dtype, |T| {
        let x_grad = with_indices!(H::int_slice(&indices), |indices| {
            pool::gather_by_index::<T, _>(
                "max_unpool_backward",
                &H::values(&out_grad),
                &indices,
                out_size.iter().product(),
                x_size.iter().product(),
            )
        });
        H::from_values(x_grad, &index_dims, dtype)
    })
}

//! The pooling primitives on `CubeBackend`: each builds its windows (span tables, covers, or
//! the sliding-window fast path), picks the kernel's reduction parameters, launches
//! `pool.rs`'s kernels and turns a launcher's error into a panic naming the op and the device.

use burn::tensor::{DType, IntDType};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::{
    AvgPoolNdOptions, IndexWindows, LpPoolOptions, MaxPoolOptions, Spans, adaptive_spans3,
    avg_window, spans_cover, spatial, window_out_size, window_spans,
};

use super::pool::{self, BackwardInputs, Params, Reduction, Windows};
use super::tensor::{dims5, expect};

fn max_params() -> Params {
    Params {
        reduction: Reduction::Max,
        ..Params::default()
    }
}

fn avg_params(options: &AvgPoolNdOptions<3>) -> Params {
    Params {
        reduction: Reduction::Avg,
        count_include_pad: options.count_include_pad,
        divisor_override: options.divisor_override.unwrap_or(0),
        ..Params::default()
    }
}

/// Adaptive average: the divisor is the taps inside the input.
fn adaptive_avg_params() -> Params {
    Params {
        reduction: Reduction::Avg,
        ..Params::default()
    }
}

fn lp_params(options: &LpPoolOptions<3>, reduction: Reduction) -> Params {
    Params {
        reduction,
        abs: options.norm_type.is_infinite(),
        norm: options.norm_type,
        kernel: options.kernel_size,
        ..Params::default()
    }
}

/// A max-family pool with indices.
fn max_pool(
    op: &str,
    x: CubeTensor,
    windows: Windows,
    out_size: [usize; 3],
    params: Params,
    indices_dtype: DType,
) -> (CubeTensor, CubeTensor) {
    let device = x.device.clone();
    expect(
        op,
        &device,
        pool::forward(x, windows, out_size, params, None, indices_dtype),
    )
}

/// A pool without indices.
fn value_pool(op: &str, x: CubeTensor, spans: Spans, params: Params) -> CubeTensor {
    let out_size = spans.each_ref().map(Vec::len);
    let device = x.device.clone();
    let result = pool::forward(x, Windows::Table(spans), out_size, params, None, DType::I32);
    expect(op, &device, result).0
}

/// The gather-form backward of a pool whose windows are a span table (average, adaptive
/// average): each input sums the gradient of the windows its cover names.
fn spans_backward(
    op: &str,
    out_grad: CubeTensor,
    x_size: [usize; 3],
    spans: Spans,
    params: Params,
) -> CubeTensor {
    let device = out_grad.device.clone();
    let inputs = BackwardInputs {
        grad: out_grad,
        indices: None,
        x: None,
        cover: spans_cover(x_size, &spans),
        spans: Some(spans),
    };
    expect(op, &device, pool::backward(inputs, x_size, params, false))
}

pub(super) fn max_pool_with_indices(
    x: CubeTensor,
    options: MaxPoolOptions<3>,
    indices_dtype: IntDType,
) -> (CubeTensor, CubeTensor) {
    let in_size = spatial(&dims5(&x));
    let out_size = window_out_size(in_size, &options);
    if let Some(result) = pool::sliding_max(&x, &options, out_size, indices_dtype.into()) {
        let device = x.device.clone();
        return expect("max_pool", &device, result);
    }
    let windows = Windows::Table(window_spans(in_size, &options));
    max_pool(
        "max_pool",
        x,
        windows,
        out_size,
        max_params(),
        indices_dtype.into(),
    )
}

pub(super) fn max_pool_backward(
    out_grad: CubeTensor,
    indices: CubeTensor,
    x_size: [usize; 3],
    windows: IndexWindows,
) -> CubeTensor {
    let device = out_grad.device.clone();
    let cover = windows.cover(x_size, spatial(&dims5(&out_grad)));
    let inputs = BackwardInputs {
        grad: out_grad,
        indices: Some(indices),
        x: None,
        spans: None,
        cover,
    };
    let result = pool::backward(inputs, x_size, max_params(), false);
    expect("max_pool_backward", &device, result)
}

pub(super) fn avg_pool(x: CubeTensor, options: AvgPoolNdOptions<3>) -> CubeTensor {
    let spans = window_spans(spatial(&dims5(&x)), &avg_window(&options));
    value_pool("avg_pool", x, spans, avg_params(&options))
}

pub(super) fn avg_pool_backward(
    out_grad: CubeTensor,
    x_size: [usize; 3],
    options: AvgPoolNdOptions<3>,
) -> CubeTensor {
    let spans = window_spans(x_size, &avg_window(&options));
    spans_backward(
        "avg_pool_backward",
        out_grad,
        x_size,
        spans,
        avg_params(&options),
    )
}

pub(super) fn adaptive_avg_pool(x: CubeTensor, output_size: [usize; 3]) -> CubeTensor {
    let spans = adaptive_spans3(spatial(&dims5(&x)), output_size);
    value_pool("adaptive_avg_pool", x, spans, adaptive_avg_params())
}

pub(super) fn adaptive_avg_pool_backward(out_grad: CubeTensor, x_size: [usize; 3]) -> CubeTensor {
    let spans = adaptive_spans3(x_size, spatial(&dims5(&out_grad)));
    let params = adaptive_avg_params();
    spans_backward(
        "adaptive_avg_pool_backward",
        out_grad,
        x_size,
        spans,
        params,
    )
}

pub(super) fn adaptive_max_pool(
    x: CubeTensor,
    output_size: [usize; 3],
    indices_dtype: IntDType,
) -> (CubeTensor, CubeTensor) {
    let windows = Windows::Table(adaptive_spans3(spatial(&dims5(&x)), output_size));
    let dtype = indices_dtype.into();
    max_pool(
        "adaptive_max_pool",
        x,
        windows,
        output_size,
        max_params(),
        dtype,
    )
}

pub(super) fn fractional_max_pool(
    x: CubeTensor,
    samples: CubeTensor,
    kernel_size: [usize; 3],
    output_size: [usize; 3],
    indices_dtype: IntDType,
) -> (CubeTensor, CubeTensor) {
    let windows = Windows::Fractional {
        samples: Box::new(samples),
        kernel: kernel_size,
    };
    let dtype = indices_dtype.into();
    max_pool(
        "fractional_max_pool",
        x,
        windows,
        output_size,
        max_params(),
        dtype,
    )
}

pub(super) fn lp_pool(x: CubeTensor, options: LpPoolOptions<3>) -> CubeTensor {
    let window = options.window();
    let in_size = spatial(&dims5(&x));
    let spans = window_spans(in_size, &window);
    if options.norm_type.is_infinite() {
        let out_size = window_out_size(in_size, &window);
        let params = lp_params(&options, Reduction::Max);
        return max_pool(
            "lp_pool",
            x,
            Windows::Table(spans),
            out_size,
            params,
            DType::I32,
        )
        .0;
    }
    value_pool("lp_pool", x, spans, lp_params(&options, Reduction::Lp))
}

pub(super) fn lp_pool_backward(
    x: CubeTensor,
    out_grad: CubeTensor,
    options: LpPoolOptions<3>,
) -> CubeTensor {
    let device = x.device.clone();
    let window = options.window();
    let in_size = spatial(&dims5(&x));
    let spans = window_spans(in_size, &window);
    let out_size = window_out_size(in_size, &window);
    let cover = spans_cover(in_size, &spans);
    let result = if options.norm_type.is_infinite() {
        // The gradient goes to the arg-max of |x|, times sign(x).
        let params = lp_params(&options, Reduction::Max);
        let windows = Windows::Table(spans);
        pool::forward(x.clone(), windows, out_size, params, None, DType::I32).and_then(
            |(_, indices)| {
                let inputs = BackwardInputs {
                    grad: out_grad,
                    indices: Some(indices),
                    x: Some(x),
                    spans: None,
                    cover,
                };
                pool::backward(inputs, in_size, params, true)
            },
        )
    } else {
        // Each window's share of its gradient first, then the gather and `p x^(p-1)`.
        let share_params = lp_params(&options, Reduction::LpShare);
        let windows = Windows::Table(spans.clone());
        pool::forward(
            x.clone(),
            windows,
            out_size,
            share_params,
            Some(out_grad),
            DType::I32,
        )
        .and_then(|(shares, _)| {
            let inputs = BackwardInputs {
                grad: shares,
                indices: None,
                x: Some(x),
                spans: Some(spans),
                cover,
            };
            pool::backward(inputs, in_size, lp_params(&options, Reduction::Lp), false)
        })
    };
    expect("lp_pool_backward", &device, result)
}

pub(super) fn max_unpool(
    x: CubeTensor,
    indices: CubeTensor,
    output_size: [usize; 3],
) -> CubeTensor {
    let device = x.device.clone();
    expect(
        "max_unpool",
        &device,
        pool::max_unpool(x, indices, output_size),
    )
}

pub(super) fn max_unpool_backward(out_grad: CubeTensor, indices: CubeTensor) -> CubeTensor {
    let device = out_grad.device.clone();
    expect(
        "max_unpool_backward",
        &device,
        pool::max_unpool_backward(out_grad, indices),
    )
}

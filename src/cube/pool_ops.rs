//! The pooling primitives on `CubeBackend`: each names its windows (sliding, computed in the
//! kernel; adaptive span tables and covers; fractional samples), picks the kernel's reduction parameters, launches
//! `pool.rs`'s kernels and turns a launcher's error into a panic naming the op and the device.

use burn::tensor::{DType, IntDType};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::{
    AvgPoolNdOptions, LpPoolOptions, MaxPoolOptions, WindowRule, adaptive_spans3, avg_window,
    spans_cover, spatial, window_out_size,
};

use super::pool::{self, Reduction, WindowReduction, WindowSource};
use super::pool_backward::{BackwardInputs, CoveringWindows, backward};
use super::tensor::{dims5, expect};

fn max_params() -> WindowReduction {
    WindowReduction {
        reduction: Reduction::Max,
        ..WindowReduction::default()
    }
}

fn avg_params(options: &AvgPoolNdOptions<3>) -> WindowReduction {
    WindowReduction {
        reduction: Reduction::Avg,
        count_include_pad: options.count_include_pad,
        divisor_override: options.divisor_override.unwrap_or(0),
        ..WindowReduction::default()
    }
}

/// Adaptive average: the divisor is the taps inside the input.
fn adaptive_avg_params() -> WindowReduction {
    WindowReduction {
        reduction: Reduction::Avg,
        ..WindowReduction::default()
    }
}

fn lp_params(options: &LpPoolOptions<3>, reduction: Reduction) -> WindowReduction {
    WindowReduction {
        reduction,
        abs: options.norm_type.is_infinite(),
        norm: options.norm_type,
        kernel: options.kernel_size,
        ..WindowReduction::default()
    }
}

/// A max-family pool with indices.
fn max_pool(
    op: &str,
    x: CubeTensor,
    windows: WindowSource,
    out_size: [usize; 3],
    params: WindowReduction,
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
fn value_pool(
    op: &str,
    x: CubeTensor,
    windows: WindowSource,
    out_size: [usize; 3],
    params: WindowReduction,
) -> CubeTensor {
    let device = x.device.clone();
    let result = pool::forward(x, windows, out_size, params, None, DType::I32);
    expect(op, &device, result).0
}

/// The gather-form backward of an average pool (sliding or adaptive): each input sums the
/// gradient of the windows that hold it.
fn average_backward(
    op: &str,
    out_grad: CubeTensor,
    x_size: [usize; 3],
    windows: CoveringWindows,
    params: WindowReduction,
) -> CubeTensor {
    let device = out_grad.device.clone();
    let inputs = BackwardInputs {
        grad: out_grad,
        indices: None,
        x: None,
        output: None,
        windows,
    };
    expect(op, &device, backward(inputs, x_size, params, false))
}

/// The backward windows of index windows: sliding ones are computed in the kernel, adaptive
/// and fractional ones come as covers (the indices say which output took each input).
fn index_windows(windows: WindowRule, x_size: [usize; 3], out_size: [usize; 3]) -> CoveringWindows {
    match windows {
        WindowRule::Sliding(options) => CoveringWindows::Sliding(options),
        windows => CoveringWindows::Table {
            spans: None,
            cover: windows.cover(x_size, out_size),
        },
    }
}

pub(super) fn max_pool_with_indices(
    x: CubeTensor,
    options: MaxPoolOptions<3>,
    indices_dtype: IntDType,
) -> (CubeTensor, CubeTensor) {
    let out_size = window_out_size(spatial(&dims5(&x)), &options);
    let windows = WindowSource::Sliding(options);
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
    windows: WindowRule,
) -> CubeTensor {
    let device = out_grad.device.clone();
    let windows = index_windows(windows, x_size, spatial(&dims5(&out_grad)));
    let inputs = BackwardInputs {
        grad: out_grad,
        indices: Some(indices),
        x: None,
        output: None,
        windows,
    };
    let result = backward(inputs, x_size, max_params(), false);
    expect("max_pool_backward", &device, result)
}

pub(super) fn avg_pool(x: CubeTensor, options: AvgPoolNdOptions<3>) -> CubeTensor {
    let window = avg_window(&options);
    let out_size = window_out_size(spatial(&dims5(&x)), &window);
    let params = avg_params(&options);
    value_pool(
        "avg_pool",
        x,
        WindowSource::Sliding(window),
        out_size,
        params,
    )
}

pub(super) fn avg_pool_backward(
    out_grad: CubeTensor,
    x_size: [usize; 3],
    options: AvgPoolNdOptions<3>,
) -> CubeTensor {
    average_backward(
        "avg_pool_backward",
        out_grad,
        x_size,
        CoveringWindows::Sliding(avg_window(&options)),
        avg_params(&options),
    )
}

pub(super) fn adaptive_avg_pool(x: CubeTensor, output_size: [usize; 3]) -> CubeTensor {
    let spans = adaptive_spans3(spatial(&dims5(&x)), output_size);
    let params = adaptive_avg_params();
    value_pool(
        "adaptive_avg_pool",
        x,
        WindowSource::Table(spans),
        output_size,
        params,
    )
}

pub(super) fn adaptive_avg_pool_backward(out_grad: CubeTensor, x_size: [usize; 3]) -> CubeTensor {
    let spans = adaptive_spans3(x_size, spatial(&dims5(&out_grad)));
    let windows = CoveringWindows::Table {
        cover: spans_cover(x_size, &spans),
        spans: Some(spans),
    };
    average_backward(
        "adaptive_avg_pool_backward",
        out_grad,
        x_size,
        windows,
        adaptive_avg_params(),
    )
}

pub(super) fn adaptive_max_pool(
    x: CubeTensor,
    output_size: [usize; 3],
    indices_dtype: IntDType,
) -> (CubeTensor, CubeTensor) {
    let windows = WindowSource::Table(adaptive_spans3(spatial(&dims5(&x)), output_size));
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
    let windows = WindowSource::Fractional {
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
    let out_size = window_out_size(spatial(&dims5(&x)), &window);
    if options.norm_type.is_infinite() {
        let params = lp_params(&options, Reduction::Max);
        let windows = WindowSource::Sliding(window);
        return max_pool("lp_pool", x, windows, out_size, params, DType::I32).0;
    }
    let params = lp_params(&options, Reduction::Lp);
    value_pool(
        "lp_pool",
        x,
        WindowSource::Sliding(window),
        out_size,
        params,
    )
}

pub(super) fn lp_pool_backward(
    x: CubeTensor,
    output: CubeTensor,
    out_grad: CubeTensor,
    options: LpPoolOptions<3>,
) -> CubeTensor {
    let device = x.device.clone();
    let window = options.window();
    let in_size = spatial(&dims5(&x));
    let out_size = window_out_size(in_size, &window);
    let sliding = || WindowSource::Sliding(window.clone());
    let lp_inputs = |grad, output| BackwardInputs {
        grad,
        indices: None,
        x: Some(x.clone()),
        output,
        windows: CoveringWindows::Sliding(window.clone()),
    };
    let result = if options.norm_type.is_infinite() {
        // The gradient goes to the arg-max of |x|, times sign(x).
        let params = lp_params(&options, Reduction::Max);
        pool::forward(x.clone(), sliding(), out_size, params, None, DType::I32).and_then(
            |(_, indices)| {
                let inputs = BackwardInputs {
                    indices: Some(indices),
                    ..lp_inputs(out_grad, None)
                };
                backward(inputs, in_size, params, true)
            },
        )
    } else if options.backward_reads_output() {
        // Each window's share from its output, in the gather; `x` only for `p x^(p-1)`.
        let inputs = lp_inputs(out_grad, Some(output));
        backward(inputs, in_size, lp_params(&options, Reduction::Lp), false)
    } else {
        // Each window's share of its gradient first, then the gather and `p x^(p-1)`.
        let share_params = lp_params(&options, Reduction::LpShare);
        pool::forward(
            x.clone(),
            sliding(),
            out_size,
            share_params,
            Some(out_grad),
            DType::I32,
        )
        .and_then(|(shares, _)| {
            let inputs = lp_inputs(shares, None);
            backward(inputs, in_size, lp_params(&options, Reduction::Lp), false)
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

//! Launcher of the pools' gather-form backward: sliding windows computed in the kernel, its
//! walk over the covering outputs unrolled when they are few; adaptive and fractional windows
//! through span and cover tables.

use burn::tensor::DType;
use burn_convpool_kernels::pool::{Placement, Reduction};
use burn_convpool_kernels::pool_backward;
use burn_cubecl::tensor::CubeTensor;

use crate::spec::{MaxPoolOptions, Spans, shapes, spans_cover, spatial, window_spans};

use super::launches::{Launch, note};
use super::packing::{self, PackingKey};
use super::pool::{
    WindowReduction, flat_cover, flat_spans, holds_whole_plane, pool_args, row_blocks,
    sliding_axes, sliding_fits,
};
use super::tensor::{
    LaunchError, accumulator_type, address_type, channels_last, contiguous, dims5, empty,
    empty_channels_last, float_type, int_type, strided, table,
};

/// Inputs of the gather backward.
pub struct BackwardInputs {
    /// Output gradient (`Max`, `Avg`, `Lp` with `output`), or the shares of `LpShare` (`Lp`
    /// without).
    pub grad: CubeTensor,
    /// Indices of `Max`.
    pub indices: Option<CubeTensor>,
    /// Input, for `Lp` and `sign`.
    pub x: Option<CubeTensor>,
    /// The forward's output, from which `Lp` takes each window's share in the gather.
    pub output: Option<CubeTensor>,
    /// The windows.
    pub windows: CoveringWindows,
}

/// Where the backward finds the windows that may hold each input position.
pub enum CoveringWindows {
    /// Sliding windows, computed in the kernel.
    Sliding(MaxPoolOptions<3>),
    /// Tables: per axis and input position, the outputs that may cover it, and the spans that
    /// `Avg` and `Lp` divide by and test coverage with.
    Table {
        /// Spans of `Avg` and `Lp`.
        spans: Option<Spans>,
        /// Outputs `lo..hi` that may cover each input position.
        cover: [Vec<(usize, usize)>; 3],
    },
}

/// Most outputs the backward's unrolled walk visits per unit; a window with more covering
/// outputs (a large kernel at a small stride) walks them in loops.
const MAX_UNROLLED: usize = 32;

/// Per axis, the most outputs of a sliding window that cover one block of the backward (one
/// position along D and H, `block_w` along W): those starting within `(kernel - 1) *
/// dilation + block` consecutive positions, one per stride. All 0 (loops) past
/// [`MAX_UNROLLED`].
fn unrolled_cover(options: &MaxPoolOptions<3>, out_size: [usize; 3], block_w: usize) -> [usize; 3] {
    let [kernel, stride, _, _, dilation] = sliding_axes(Some(options), out_size);
    let bound = |a: usize, block: usize| {
        let span = (kernel[a] - 1) * dilation[a] + block;
        span.div_ceil(stride[a]).min(out_size[a])
    };
    let bounds = [bound(0, 1), bound(1, 1), bound(2, block_w)];
    if bounds.iter().product::<usize>() <= MAX_UNROLLED {
        bounds
    } else {
        [0; 3]
    }
}

/// The tables and comptime choices of one backward launch.
struct Placed {
    spans: CubeTensor,
    cover: CubeTensor,
    sliding: Option<MaxPoolOptions<3>>,
    placement: Placement,
    /// One window holds each whole plane.
    whole_plane: bool,
}

/// Upload what the kernel reads of `windows`: nothing for a sliding window that fits the
/// kernels' arithmetic (and, for a sum, has unit dilation, as average and LP windows do: the
/// kernel's coverage test assumes it), else span and cover tables.
fn place(
    grad: &CubeTensor,
    windows: CoveringWindows,
    x_size: [usize; 3],
    out_size: [usize; 3],
    reduction: Reduction,
) -> Result<Placed, LaunchError> {
    let computable = |options: &MaxPoolOptions<3>| {
        sliding_fits(x_size, options) && (reduction == Reduction::Max || options.dilation == [1; 3])
    };
    let windows = match windows {
        CoveringWindows::Sliding(options) if !computable(&options) => {
            let spans = window_spans(x_size, &options);
            CoveringWindows::Table {
                cover: spans_cover(x_size, &spans),
                // `Max` reads indices, not spans.
                spans: (reduction != Reduction::Max).then_some(spans),
            }
        }
        windows => windows,
    };
    Ok(match windows {
        CoveringWindows::Sliding(options) => Placed {
            spans: table(grad, &[]),
            cover: table(grad, &[]),
            whole_plane: holds_whole_plane(x_size, out_size, Some(&options), None),
            sliding: Some(options),
            placement: Placement::Sliding,
        },
        CoveringWindows::Table { spans, cover } => Placed {
            spans: table(
                grad,
                &spans
                    .as_ref()
                    .map(flat_spans)
                    .transpose()?
                    .unwrap_or_default(),
            ),
            cover: table(grad, &flat_cover(&cover)?),
            whole_plane: holds_whole_plane(x_size, out_size, None, spans.as_ref()),
            sliding: None,
            placement: Placement::Table,
        },
    })
}

/// Run the gather backward for an input of spatial size `x_size`.
pub fn backward(
    inputs: BackwardInputs,
    x_size: [usize; 3],
    params: WindowReduction,
    sign: bool,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&inputs.grad)?;
    let grad = strided(inputs.grad);
    let grad_dims = dims5(&grad);
    let out_size = spatial(&grad_dims);
    let placed = place(&grad, inputs.windows, x_size, out_size, params.reduction)?;
    let whole_plane = params.reduction == Reduction::Avg && !sign && placed.whole_plane;
    // A channels-last gradient (with channels-last indices or output, as the forward leaves
    // them for a channels-last input) keeps its layout, and `x_grad` takes it; else all are
    // made contiguous.
    let channels_last = !whole_plane
        && channels_last(&grad)
        && inputs.indices.as_ref().is_none_or(channels_last)
        && inputs.output.as_ref().is_none_or(channels_last);
    let layout = |tensor| match channels_last {
        true => tensor,
        false => contiguous(tensor),
    };
    let grad = layout(grad);
    let x_grad_dims = shapes::with_spatial(&grad_dims, x_size);
    let x_grad = match channels_last {
        true => empty_channels_last(&grad, x_grad_dims, grad.dtype),
        false => empty(&grad, &x_grad_dims, grad.dtype),
    };
    let indices = match inputs.indices {
        Some(indices) => layout(strided(indices)),
        None => empty(&grad, &[1], DType::I32),
    };
    let index_type = int_type(&indices)?;
    let x = inputs.x.map(strided).unwrap_or_else(|| grad.clone());
    let shares_from_output = inputs.output.is_some();
    let output = inputs
        .output
        .map(|output| layout(strided(output)))
        .unwrap_or_else(|| grad.clone());
    if x_grad.meta.num_elements() == 0 {
        return Ok(x_grad);
    }
    // A whole-plane window walks each plane as one flat row.
    let row = if whole_plane {
        x_size.iter().product()
    } else {
        x_size[2]
    };
    let address = address_type(&[&grad, &indices, &x, &output, &x_grad]);
    let sliding = placed.sliding;
    let (taps, stride) = sliding.as_ref().map_or(([0; 3], [0; 3]), |options| {
        (options.kernel_size, options.stride)
    });
    let code = [
        params.reduction as usize,
        placed.placement as usize,
        sign.into(),
        whole_plane.into(),
        shares_from_output.into(),
        channels_last.into(),
    ];
    let (grad_dtype, sizes) = (grad.dtype, [x_grad.meta.num_elements() / row, row]);
    let key = move || {
        let exact = [&taps[..], &stride, &code].concat();
        PackingKey::of("pool_backward", grad_dtype, &exact, &sizes)
    };
    let (spans, cover, placement) = (placed.spans, placed.cover, placed.placement);
    let out = x_grad.clone();
    packing::run(&out, key, row > 1, move |packing| {
        let (block_w, cube_count, cube_dim) = row_blocks(&x_grad, row, packing, 1);
        let unrolled = sliding
            .as_ref()
            .map_or([0; 3], |options| unrolled_cover(options, out_size, block_w));
        note(Launch::Kernel("pool_backward"));
        pool_backward::pool_backward::launch(
            &x_grad.client,
            cube_count,
            cube_dim,
            address,
            grad.clone().into_tensor_arg(),
            output.clone().into_tensor_arg(),
            indices.clone().into_tensor_arg(),
            x.clone().into_tensor_arg(),
            spans.clone().into_tensor_arg(),
            cover.clone().into_tensor_arg(),
            x_grad.clone().into_tensor_arg(),
            pool_args(
                grad_dims[1],
                x_size,
                out_size,
                params.kernel,
                sliding.as_ref(),
                &params,
            ),
            params.reduction,
            placement,
            unrolled,
            sign,
            params.count_include_pad,
            block_w,
            whole_plane,
            shares_from_output,
            channels_last,
            [dtype, index_type, accumulator_type(dtype)],
        )
    });
    Ok(out)
}

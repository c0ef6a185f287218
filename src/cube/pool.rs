//! Launchers of the forward window kernels (whole-plane, the unrolled sliding one and the span
//! walk, one launcher each after one choice) and max-unpool. Sliding windows are computed in
//! the kernel by `spec::sliding_spans`'s rule; adaptive windows are span and cover tables
//! built on the host by `spec`, the same spans the CPU walks, so both backends place every
//! window identically.

use std::sync::Arc;

use burn::tensor::DType;
use burn_convpool_kernels::pool::{self as kernels, Placement, PoolArgsLaunch};
use burn_convpool_kernels::sliding;
use burn_convpool_kernels::unpool;
use burn_cubecl::tensor::CubeTensor;
use cubecl::ir::{AddressType, ElemType};
use cubecl::{CubeCount, CubeDim};

use crate::spec::{MaxPoolOptions, Spans, shapes, spatial, used_step, window_spans};

use super::choice::Packing;
use super::launches::{Launch, note};
use super::limits::MAX_LOOP_ITERATIONS;
use super::packing::{self, PackingKey};
use super::tensor::{
    LaunchError, accumulator_type, address_type, axes, channels_last, contiguous, dims5,
    elementwise, empty, empty_channels_last, entry, float_type, int_type, strided, table,
    vector_lanes,
};
use super::whole_plane;

pub use kernels::Reduction;

/// Where the windows come from.
pub enum WindowSource {
    /// Sliding windows (max, average and LP pooling), computed in the kernel.
    Sliding(MaxPoolOptions<3>),
    /// Spans per axis (adaptive windows).
    Table(Spans),
    /// Fractional windows of `kernel` over the samples `(N, C, 3)`.
    Fractional {
        /// Per-plane samples.
        samples: Box<CubeTensor>,
        /// Window size.
        kernel: [usize; 3],
    },
}

impl WindowSource {
    /// Taps in the largest window (at most: a sliding or fractional window's kernel, which the
    /// padding or the input's edge may cut).
    fn longest_window(&self) -> usize {
        let product = |sizes: [usize; 3]| sizes.iter().fold(1usize, |n, &s| n.saturating_mul(s));
        match self {
            Self::Sliding(options) => product(options.kernel_size),
            Self::Table(spans) => product(core::array::from_fn(|axis| {
                spans[axis].iter().map(|span| span.count).max().unwrap_or(0)
            })),
            Self::Fractional { kernel, .. } => product(*kernel),
        }
    }
}

/// The scalars of a pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowReduction {
    /// The reduction.
    pub reduction: Reduction,
    /// Max over `|x|` (LP pooling with `p = inf`).
    pub abs: bool,
    /// Average divisor counts the padding.
    pub count_include_pad: bool,
    /// Average divisor override (0 for none).
    pub divisor_override: i64,
    /// LP norm `p`.
    pub norm: f64,
    /// LP kernel size (`K` is its volume).
    pub kernel: [usize; 3],
}

pub(super) fn flat_spans(spans: &Spans) -> Result<Vec<u32>, LaunchError> {
    let mut values = Vec::new();
    for span in spans.iter().flatten() {
        for value in [span.start, span.count, span.step, span.padded] {
            values.push(entry(value)?);
        }
    }
    Ok(values)
}

pub(super) fn flat_cover(cover: &[Vec<(usize, usize)>; 3]) -> Result<Vec<u32>, LaunchError> {
    let mut values = Vec::new();
    for &(lo, hi) in cover.iter().flatten() {
        values.push(entry(lo)?);
        values.push(entry(hi)?);
    }
    Ok(values)
}

/// Whether every position a sliding window's kernel code computes (up to the padded input's
/// end plus a dilated kernel and a stride) stays in 32 bits, the range of the tables' entries
/// too; a window past it is placed by a table instead, whose entries are checked.
pub(super) fn sliding_fits(in_size: [usize; 3], options: &MaxPoolOptions<3>) -> bool {
    (0..3).all(|a| {
        let (begin, end) = options.padding[a];
        let reach = in_size[a] as u128
            + begin as u128
            + end as u128
            + options.kernel_size[a] as u128 * options.dilation[a] as u128
            + options.stride[a] as u128;
        reach <= u32::MAX as u128
    })
}

/// `windows` with a sliding window that does not fit the kernels' arithmetic as a table.
fn placed(windows: WindowSource, in_size: [usize; 3]) -> WindowSource {
    match windows {
        WindowSource::Sliding(options) if !sliding_fits(in_size, &options) => {
            WindowSource::Table(window_spans(in_size, &options))
        }
        windows => windows,
    }
}

/// The sliding window's per-axis kernel, stride, padding before and after, and dilation, as
/// the kernels read them (a step that is never taken is 1, keeping unused huge values out).
pub(super) fn sliding_axes(
    options: Option<&MaxPoolOptions<3>>,
    out_size: [usize; 3],
) -> [[usize; 3]; 5] {
    match options {
        Some(options) => [
            options.kernel_size,
            core::array::from_fn(|a| used_step(options.stride[a], out_size[a])),
            options.padding.map(|(begin, _)| begin),
            options.padding.map(|(_, end)| end),
            core::array::from_fn(|a| used_step(options.dilation[a], options.kernel_size[a])),
        ],
        None => [[1; 3], [1; 3], [0; 3], [0; 3], [1; 3]],
    }
}

pub(super) fn pool_args(
    channels: usize,
    in_size: [usize; 3],
    out_size: [usize; 3],
    kernel: [usize; 3],
    sliding: Option<&MaxPoolOptions<3>>,
    params: &WindowReduction,
) -> PoolArgsLaunch {
    // Fractional pooling's, as the CPU (and PyTorch) compute it: in f32, from the integer
    // sizes (its kernel fits the input; a sliding one may not, and has no alpha).
    let alpha = |i: usize| {
        if out_size[i] > 1 && sliding.is_none() {
            (in_size[i] - kernel[i]) as f32 / (out_size[i] - 1) as f32
        } else {
            0.0
        }
    };
    let [sliding_kernel, stride, padding, padding_end, dilation] = sliding_axes(sliding, out_size);
    let kernel = if sliding.is_some() {
        sliding_kernel
    } else {
        kernel
    };
    let p = params.norm;
    PoolArgsLaunch::new(
        channels,
        axes(in_size),
        axes(out_size),
        axes(kernel),
        axes(stride),
        axes(padding),
        axes(padding_end),
        axes(dilation),
        axes([alpha(0), alpha(1), alpha(2)]),
        params.divisor_override as f32,
        p as f32,
        (1.0 / p) as f32,
        (p - 1.0) as f32,
        (1.0 / p - 1.0) as f32,
    )
}

/// Outputs (forward) or inputs (backward) along the last axis one unit computes.
const BLOCK_W: usize = 8;

/// The launch of a kernel whose unit takes up to [`BLOCK_W`] consecutive elements of a row of
/// `tensor` (rows of `width`), or one when spread, in each of `lanes` rows (the lanes of a
/// vector): the block width and the grid.
pub(super) fn row_blocks(
    tensor: &CubeTensor,
    width: usize,
    packing: Packing,
    lanes: usize,
) -> (usize, CubeCount, CubeDim) {
    let block_w = match packing {
        Packing::Packed => width.min(BLOCK_W),
        Packing::Spread => 1,
    };
    let units = tensor.meta.num_elements() / width / lanes * width.div_ceil(block_w);
    let (cube_count, cube_dim) = elementwise(tensor, units);
    (block_w, cube_count, cube_dim)
}

/// Whether there is one output per plane and its window holds every input position (global
/// pooling), for a sliding window or a span table (a fractional window never is one here).
pub(super) fn holds_whole_plane(
    in_size: [usize; 3],
    out_size: [usize; 3],
    sliding: Option<&MaxPoolOptions<3>>,
    spans: Option<&Spans>,
) -> bool {
    let holds_all = |spans: &Spans| {
        spans
            .iter()
            .zip(in_size)
            .all(|(axis, len)| match axis.as_slice() {
                [span] => span.start == 0 && span.count == len && (span.step == 1 || len == 1),
                _ => false,
            })
    };
    out_size == [1; 3]
        && match (sliding, spans) {
            (Some(options), _) => holds_all(&window_spans(in_size, options)),
            (None, Some(spans)) => holds_all(spans),
            (None, None) => false,
        }
}

/// Whether each `(n, c)` plane of `x` is one contiguous run in D, H, W order.
fn planes_contiguous(x: &CubeTensor) -> bool {
    let dims = dims5(x);
    let strides = x.meta.strides();
    let mut run = 1;
    (2..5).rev().all(|a| {
        let contiguous = dims[a] == 1 || strides[a] == run;
        run *= dims[a];
        contiguous
    })
}

/// Largest kernel side the sliding kernel unrolls.
const SLIDING_KERNEL: usize = 7;

/// The kernel a pool's forward runs.
enum ForwardKernel {
    /// One window holds each whole plane (contiguous, or channels-last with its elements `C`
    /// apart): the flat whole-plane kernel.
    WholePlane,
    /// A sliding window of up to [`SLIDING_KERNEL`] taps per axis: the unrolled sliding
    /// kernel.
    Sliding(MaxPoolOptions<3>),
    /// Any other window: the span walk.
    SpanWalk,
}

/// The kernel for `windows` (already [`placed`]) over `x`.
fn forward_kernel(
    x: &CubeTensor,
    windows: &WindowSource,
    in_size: [usize; 3],
    out_size: [usize; 3],
    channels_last: bool,
) -> ForwardKernel {
    let whole_plane = (channels_last || planes_contiguous(x))
        && match windows {
            WindowSource::Sliding(options) => {
                holds_whole_plane(in_size, out_size, Some(options), None)
            }
            WindowSource::Table(spans) => holds_whole_plane(in_size, out_size, None, Some(spans)),
            WindowSource::Fractional { .. } => false,
        };
    match windows {
        _ if whole_plane => ForwardKernel::WholePlane,
        WindowSource::Sliding(options)
            if options.kernel_size.iter().all(|&k| k <= SLIDING_KERNEL) =>
        {
            ForwardKernel::Sliding(options.clone())
        }
        _ => ForwardKernel::SpanWalk,
    }
}

/// What each forward kernel binds: the tensors, the scalars and the comptime choices.
struct ForwardLaunch {
    x: CubeTensor,
    /// The span table (a dummy unless the windows are a table).
    spans: CubeTensor,
    /// The fractional samples (`x` unless fractional).
    samples: CubeTensor,
    /// Read by `LpShare` only (`x` otherwise).
    out_grad: CubeTensor,
    out: CubeTensor,
    /// Written by `Max` only.
    indices: CubeTensor,
    /// Builds the kernel's scalars (their launch type is not `Clone`).
    args: Arc<dyn Fn() -> PoolArgsLaunch + Send + Sync>,
    params: WindowReduction,
    placement: Placement,
    channels_last: bool,
    /// Channels a unit reads as one vector (channels-last), else 1.
    lanes: usize,
    /// Value, index and accumulator types.
    types: [ElemType; 3],
    address: AddressType,
    out_size: [usize; 3],
    /// Taps in the largest window ([`WindowSource::longest_window`]).
    longest_window: usize,
}

impl ForwardLaunch {
    /// Output rows (what tells launches apart for the tuner, with the row length).
    fn rows(&self) -> usize {
        self.out.meta.num_elements() / self.out_size[2]
    }
}

/// Run the window kernel: values, and indices of `indices_dtype` for `Max` (else a dummy).
/// `out_grad` is read by `LpShare` only. A channels-last input gives a channels-last output;
/// [`forward_kernel`] picks the kernel.
pub fn forward(
    x: CubeTensor,
    windows: WindowSource,
    out_size: [usize; 3],
    params: WindowReduction,
    out_grad: Option<CubeTensor>,
    indices_dtype: DType,
) -> Result<(CubeTensor, CubeTensor), LaunchError> {
    let dtype = float_type(&x)?;
    let x = strided(x);
    let dims = dims5(&x);
    let out_dims = shapes::with_spatial(&dims, out_size);
    // `LpShare` reads `out_grad` as `out`, so its output keeps the planes' layout.
    let channels_last = channels_last(&x) && out_grad.is_none();
    // Channels-last, the sliding kernel reads and writes runs of channels as vectors.
    let lanes = if channels_last { vector_lanes(&x) } else { 1 };
    let allocate = |dtype| match channels_last {
        true => empty_channels_last(&x, out_dims, dtype),
        false => empty(&x, &out_dims, dtype),
    };
    let out = allocate(x.dtype);
    let indices = match params.reduction {
        Reduction::Max => allocate(indices_dtype),
        // Bound as a vector of `lanes` even where nothing reads it.
        _ => empty(&x, &[lanes], indices_dtype),
    };
    let index_type = int_type(&indices)?;
    let in_size = spatial(&dims);
    let windows = placed(windows, in_size);
    let kernel = forward_kernel(&x, &windows, in_size, out_size, channels_last);
    let longest_window = windows.longest_window();
    let sliding = match &windows {
        WindowSource::Sliding(options) => Some(options.clone()),
        _ => None,
    };
    let (spans, samples, window_kernel, placement) = match windows {
        WindowSource::Sliding(_) => (table(&x, &[]), x.clone(), params.kernel, Placement::Sliding),
        WindowSource::Table(spans) => (
            table(&x, &flat_spans(&spans)?),
            x.clone(),
            params.kernel,
            Placement::Table,
        ),
        WindowSource::Fractional { samples, kernel } => (
            table(&x, &[]),
            contiguous(*samples),
            kernel,
            Placement::Fractional,
        ),
    };
    let out_grad = out_grad.map(contiguous).unwrap_or_else(|| x.clone());
    if out.meta.num_elements() == 0 {
        return Ok((out, indices));
    }
    let channels = dims[1];
    let args = move || {
        pool_args(
            channels,
            in_size,
            out_size,
            window_kernel,
            sliding.as_ref(),
            &params,
        )
    };
    let launch = ForwardLaunch {
        address: address_type(&[&x, &out, &out_grad]),
        x,
        spans,
        samples,
        out_grad,
        out: out.clone(),
        indices: indices.clone(),
        args: Arc::new(args),
        params,
        placement,
        channels_last,
        lanes,
        types: [dtype, index_type, accumulator_type(dtype)],
        out_size,
        longest_window,
    };
    match kernel {
        ForwardKernel::WholePlane => launch_whole_plane(launch, in_size),
        ForwardKernel::Sliding(options) => launch_sliding(launch, options),
        ForwardKernel::SpanWalk => launch_span_walk(launch),
    }
    Ok((out, indices))
}

/// The flat whole-plane kernel over planes of `in_size`.
fn launch_whole_plane(launch: ForwardLaunch, in_size: [usize; 3]) {
    whole_plane::run(whole_plane::WholePlane {
        x: launch.x,
        spans: launch.spans,
        out_grad: launch.out_grad,
        out: launch.out,
        indices: launch.indices,
        args: launch.args,
        reduction: launch.params.reduction,
        placement: launch.placement,
        abs: launch.params.abs,
        count_include_pad: launch.params.count_include_pad,
        channels_last: launch.channels_last,
        width: launch.lanes,
        types: launch.types,
        elements: in_size.iter().product(),
    })
}

/// The unrolled sliding kernel, packed or spread as [`packing`] chooses.
fn launch_sliding(launch: ForwardLaunch, options: MaxPoolOptions<3>) {
    let (taps, stride) = (options.kernel_size, options.stride);
    let out_size = launch.out_size;
    let exact = [
        &taps[..],
        &stride,
        &[
            launch.params.reduction as usize,
            launch.channels_last.into(),
            launch.lanes,
        ],
    ]
    .concat();
    let (dtype, rows) = (launch.x.dtype, launch.rows());
    let key = move || PackingKey::of("pool_sliding", dtype, &exact, &[rows, out_size[2]]);
    let out = launch.out.clone();
    packing::run(&out, key, out_size[2] > 1, move |packing| {
        let l = &launch;
        let (block_w, cube_count, cube_dim) = row_blocks(&l.out, out_size[2], packing, l.lanes);
        note(Launch::Kernel("pool_sliding"));
        sliding::pool_sliding::launch(
            &l.out.client,
            cube_count,
            cube_dim,
            l.address,
            l.lanes,
            l.x.clone().into_tensor_arg(),
            l.out_grad.clone().into_tensor_arg(),
            l.out.clone().into_tensor_arg(),
            l.indices.clone().into_tensor_arg(),
            (l.args)(),
            taps,
            l.params.reduction,
            l.params.abs,
            l.params.count_include_pad,
            block_w,
            l.channels_last,
            l.types,
        )
    })
}

/// Whether a span-walk unit may take [`BLOCK_W`] windows of up to `taps` taps and stay within
/// [`MAX_LOOP_ITERATIONS`] (its taps walked [`kernels::TAPS_PER_ITERATION`] at a time).
fn packs_windows_of(taps: usize) -> bool {
    taps.div_ceil(kernels::TAPS_PER_ITERATION)
        .saturating_add(1)
        .saturating_mul(BLOCK_W)
        <= MAX_LOOP_ITERATIONS
}

/// The span walk, packed or spread as [`packing`] chooses (spread for windows too long to
/// pack, [`packs_windows_of`]).
fn launch_span_walk(launch: ForwardLaunch) {
    let out_size = launch.out_size;
    let exact = [
        launch.params.reduction as usize,
        launch.placement as usize,
        launch.channels_last.into(),
    ];
    let (dtype, rows) = (launch.x.dtype, launch.rows());
    let key = move || PackingKey::of("pool_forward", dtype, &exact, &[rows, out_size[2]]);
    let out = launch.out.clone();
    let packs = packs_windows_of(launch.longest_window);
    let run = move |packing| {
        let l = &launch;
        let (block_w, cube_count, cube_dim) = row_blocks(&l.out, out_size[2], packing, 1);
        note(Launch::Kernel("pool_forward"));
        kernels::pool_forward::launch(
            &l.out.client,
            cube_count,
            cube_dim,
            l.address,
            l.x.clone().into_tensor_arg(),
            l.spans.clone().into_tensor_arg(),
            l.samples.clone().into_tensor_arg(),
            l.out_grad.clone().into_tensor_arg(),
            l.out.clone().into_tensor_arg(),
            l.indices.clone().into_tensor_arg(),
            (l.args)(),
            l.params.reduction,
            l.placement,
            l.params.abs,
            l.params.count_include_pad,
            block_w,
            l.channels_last,
            l.types,
        )
    };
    if packs {
        packing::run(&out, key, out_size[2] > 1, run);
    } else {
        run(Packing::Spread);
    }
}

/// Max-unpool: `x` scattered at `indices` into zeros of spatial size `output_size`.
pub fn max_unpool(
    x: CubeTensor,
    indices: CubeTensor,
    output_size: [usize; 3],
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&x)?;
    let index_type = int_type(&indices)?;
    let (x, indices) = (contiguous(x), contiguous(indices));
    let dims = dims5(&x);
    let out = empty(&x, &shapes::with_spatial(&dims, output_size), x.dtype);
    let client = out.client.clone();
    let (cube_count, cube_dim) = elementwise(&out, out.meta.num_elements());
    note(Launch::Kernel("fill_zero"));
    unpool::fill_zero::launch(
        &client,
        cube_count,
        cube_dim,
        address_type(&[&out]),
        out.clone().into_tensor_arg(),
        dtype,
    );
    let units = x.meta.num_elements();
    if units > 0 {
        let (cube_count, cube_dim) = elementwise(&x, units);
        note(Launch::Kernel("max_unpool_scatter"));
        unpool::max_unpool_scatter::launch(
            &client,
            cube_count,
            cube_dim,
            address_type(&[&x, &indices, &out]),
            x.into_tensor_arg(),
            indices.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            spatial(&dims).iter().product(),
            output_size.iter().product(),
            [dtype, index_type],
        );
    }
    Ok(out)
}

/// Gradient of max-unpool: `out_grad` gathered at `indices`.
pub fn max_unpool_backward(
    out_grad: CubeTensor,
    indices: CubeTensor,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&out_grad)?;
    let index_type = int_type(&indices)?;
    let (out_grad, indices) = (contiguous(out_grad), contiguous(indices));
    let index_dims = dims5(&indices);
    let x_grad = empty(&out_grad, &index_dims, out_grad.dtype);
    let units = x_grad.meta.num_elements();
    if units > 0 {
        let (cube_count, cube_dim) = elementwise(&x_grad, units);
        note(Launch::Kernel("max_unpool_gather"));
        unpool::max_unpool_gather::launch(
            &x_grad.client.clone(),
            cube_count,
            cube_dim,
            address_type(&[&out_grad, &indices, &x_grad]),
            out_grad.clone().into_tensor_arg(),
            indices.into_tensor_arg(),
            x_grad.clone().into_tensor_arg(),
            spatial(&index_dims).iter().product(),
            spatial(&dims5(&out_grad)).iter().product(),
            [dtype, index_type],
        );
    }
    Ok(x_grad)
}

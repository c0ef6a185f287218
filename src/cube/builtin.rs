//! Burn's own convolution kernels (`burn_cubecl::kernel::conv`) run on a [`ConvGeometry`], so
//! the tuner can offer them beside ours: Burn's autotune picks among its tensor-core implicit
//! GEMMs, its depthwise and 1x1 kernels and its direct kernel, which is what a Burn user gets.
//!
//! Burn takes NCHW tensors of the geometry's true spatial rank and `(begin, end)` padding, so
//! each call drops the unit axes of the rank-5 lift and states the end padding the sizes imply.
//! A geometry Burn cannot express declines with a reason (the tuner then skips the candidate).
//! Each result comes back as Burn's own call returns it (an NCHW view of NHWC memory, no copy),
//! so the candidate costs what calling Burn directly costs; our kernels read any layout.

use burn::tensor::Shape;
use burn::tensor::ops::ConvOptions;
use burn_cubecl::kernel::conv::{
    ConvStrategy, conv_data_backward, conv_forward, conv_weight_backward,
};
use burn_cubecl::ops::{numeric, reshape};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::{ConvGeometry, kernel_extent, lowered_dims, out_len};

use super::launches::{Launch, note};
use super::tensor::{with_unit_axes, without_unit_axes};

/// `$op::<N>($args.., options, strategy)` at the geometry's spatial rank `N`, lifted back to
/// rank 5 (a view); Burn's error as a string.
macro_rules! at_rank {
    ($rank:expr, $geometry:expr, $op:ident($($arg:expr),*)) => {{
        note(Launch::Burn(stringify!($op)));
        let out = match $rank {
            1 => $op::<1>($($arg),*, options($geometry)?, strategy()),
            2 => $op::<2>($($arg),*, options($geometry)?, strategy()),
            _ => $op::<3>($($arg),*, options($geometry)?, strategy()),
        };
        out.map(with_unit_axes).map_err(|err| format!("{err:?}"))
    }};
}

/// `conv(x, weight) [+ bias]` with Burn's kernels.
pub fn forward(
    geometry: &ConvGeometry,
    x: CubeTensor,
    weight: CubeTensor,
    bias: Option<CubeTensor>,
) -> Result<CubeTensor, String> {
    let rank = spatial_rank(geometry);
    let x = without_unit_axes(x, rank);
    let weight = without_unit_axes(weight, rank);
    at_rank!(rank, geometry, conv_forward(x, weight, bias))
}

/// The input-side gradient `[+ bias]` with Burn's `conv_data_backward`, what Burn's own
/// autodiff runs: its tuner (`dgrad_autotune`) times Burn's implicit GEMMs beside its
/// transposed conv, so this candidate covers both.
pub fn data(
    geometry: &ConvGeometry,
    weight: CubeTensor,
    out_grad: CubeTensor,
    bias: Option<CubeTensor>,
) -> Result<CubeTensor, String> {
    let rank = spatial_rank(geometry);
    if rank == 3 && skips_taps(geometry) {
        return Err(format!(
            "Burn's 3D input gradient (its conv_transpose3d kernel) misses every tap where \
             kernel x dilation < stride: {geometry:?}"
        ));
    }
    let in_shape = Shape::from(lowered_dims(geometry.in_shape(), 2 + rank));
    let weight = without_unit_axes(weight, rank);
    let out_grad = without_unit_axes(out_grad, rank);
    let out = at_rank!(
        rank,
        geometry,
        conv_data_backward(out_grad, weight, in_shape)
    )?;
    Ok(match bias {
        // Broadcast over batch and positions.
        Some(bias) => {
            let channels = bias.meta.shape()[0];
            numeric::add(out, reshape(bias, Shape::from(vec![1, channels, 1, 1, 1])))
        }
        None => out,
    })
}

/// The weight gradient with Burn's kernels.
pub fn weight(
    geometry: &ConvGeometry,
    x: CubeTensor,
    out_grad: CubeTensor,
) -> Result<CubeTensor, String> {
    let rank = spatial_rank(geometry);
    let weight_shape = Shape::from(lowered_dims(geometry.weight_shape(), 2 + rank));
    let x = without_unit_axes(x, rank);
    let out_grad = without_unit_axes(out_grad, rank);
    at_rank!(
        rank,
        geometry,
        conv_weight_backward(x, out_grad, weight_shape)
    )
}

/// Whether an axis has `kernel * dilation < stride`. burn-cubecl 0.22.1's `conv_transpose3d`
/// bounds its tap loop by `kernel * dilation - stride`, which is then negative, and computes
/// zeros there (PyTorch's conv3d golden cases `nonsquare`, `fuzz_00/02/05/07` on a GPU).
fn skips_taps(geometry: &ConvGeometry) -> bool {
    (0..3).any(|a| geometry.kernel[a] * geometry.dilation[a] < geometry.stride[a])
}

/// Burn's autotuned choice where its `autotune` feature is on, its direct kernel otherwise:
/// the strategy Burn's own `ModuleOps` use.
fn strategy() -> ConvStrategy {
    ConvStrategy::default()
}

/// The spatial rank the caller meant: leading spatial axes that are all ones (size, kernel,
/// padding) are the lift's, not the op's.
fn spatial_rank(geometry: &ConvGeometry) -> usize {
    let lifted = |axis: usize| {
        geometry.in_size[axis] == 1
            && geometry.out_size[axis] == 1
            && geometry.kernel[axis] == 1
            && geometry.pad_begin[axis] == 0
    };
    match (lifted(0), lifted(1)) {
        (true, true) => 1,
        (true, false) => 2,
        _ => 3,
    }
}

/// Along axis `a`, the padded input the geometry's windows span, from the first one's start
/// to the last one's end.
fn windows_span(geometry: &ConvGeometry, a: usize) -> usize {
    (geometry.out_size[a].max(1) - 1) * geometry.stride[a]
        + kernel_extent(geometry.kernel[a], geometry.dilation[a])
}

/// Burn's options for the last `N` axes of the geometry, with the end padding that makes
/// Burn's output length equal ours; an error where none does (a transposed conv whose
/// `output_padding` leaves a stride's worth of input that no window reaches).
fn options<const N: usize>(geometry: &ConvGeometry) -> Result<ConvOptions<N>, String> {
    let axis = |i: usize| 3 - N + i;
    let mut padding = [(0, 0); N];
    for (i, pad) in padding.iter_mut().enumerate() {
        let a = axis(i);
        let (len, out, begin) = (
            geometry.in_size[a],
            geometry.out_size[a],
            geometry.pad_begin[a],
        );
        let (kernel, stride, dilation) =
            (geometry.kernel[a], geometry.stride[a], geometry.dilation[a]);
        let fits =
            |end: usize| out_len(len, (begin, end), kernel, stride, dilation, false) == Some(out);
        // Symmetric padding where it gives our length: what a user hands Burn's own ops, so
        // Burn runs its usual path rather than its pad-and-slice route for uneven pairs.
        // Otherwise the end padding up to where the last window ends.
        let end = [begin, windows_span(geometry, a).saturating_sub(len + begin)]
            .into_iter()
            .find(|&end| fits(end))
            .ok_or_else(|| format!("axis {a}: no end padding gives {out} outputs"))?;
        *pad = (begin, end);
    }
    Ok(ConvOptions {
        stride: core::array::from_fn(|i| geometry.stride[axis(i)]),
        padding,
        dilation: core::array::from_fn(|i| geometry.dilation[axis(i)]),
        groups: geometry.groups,
    })
}

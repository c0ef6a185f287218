//! The input gradient of a stride-1 convolution as a forward convolution: the output gradient
//! convolved with the kernel flipped on every axis and its channel roles swapped, under the
//! padding `dilation * (kernel - 1) - padding` on each side. The forward pass then picks its
//! own algorithm (Winograd, the depthwise stencil, or im2col and a GEMM whose product is the
//! gradient itself), where the lowered input gradient runs a GEMM into a patch-sized buffer and
//! scatters it back with col2im.

#[cfg(test)]
mod tests;

use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::direct;
use super::element::{Element, min_items_per_task};
use super::transpose::transpose;

/// Whether the input gradient of `geometry` is a forward convolution: stride 1 on every axis,
/// and neither side padded past the dilated kernel's reach (else the adjoint would crop).
pub fn serves(geometry: &ConvGeometry) -> bool {
    let g = geometry.normalised();
    (0..3).all(|a| {
        let reach = g.dilation[a] * (g.kernel[a] - 1);
        // With stride 1, `out = in + pad_begin + pad_end - reach` exactly.
        let pad_end = (g.out_size[a] + reach).checked_sub(g.in_size[a] + g.pad_begin[a]);
        g.stride[a] == 1
            && g.kernel[a] > 0
            && g.pad_begin[a] <= reach
            && pad_end.is_some_and(|pad_end| pad_end <= reach)
    }) && g.out_volume() > 0
        && g.in_volume() > 0
}

/// Output channels per group below which the lowered input gradient's GEMM, as deep as the
/// output channels, writes its patch-sized product faster than it can sum into it: there the
/// adjoint's GEMM, `taps` times deeper, wins where it has as many rows (input channels). The
/// `example_resnet_3x3_*` input-gradient rows decide it: the adjoint wins at 16 channels,
/// the two tie at 32, and the lowered path wins at 64.
const SHALLOW_DEPTH: usize = 32;

/// Whether, by rule, the adjoint beats the lowered input gradient of `geometry`: it
/// [`serves`] it, and either its forward pass takes the direct path by rule (no patch matrix
/// on either side: the `example_resnet_3x3_7` input-gradient row), or the lowered GEMM would be shallower than [`SHALLOW_DEPTH`] with at least
/// as many input channels as output channels (else the adjoint lowers more patches per
/// multiply-add than the lowered path scatters: a one-channel stem's adjoint is 3x slower).
pub fn pays(geometry: &ConvGeometry) -> bool {
    let (cin_g, cout_g) = (geometry.in_per_group(), geometry.out_per_group());
    let shallow = cout_g < SHALLOW_DEPTH && cin_g >= cout_g;
    serves(geometry) && (shallow || direct::pays(&self::geometry(geometry)))
}

/// The forward geometry whose output is `geometry`'s input gradient, for a shape it
/// [`serves`]: input and output sides swapped, padding mirrored.
pub fn geometry(geometry: &ConvGeometry) -> ConvGeometry {
    let g = geometry.normalised();
    ConvGeometry {
        in_channels: g.out_channels,
        out_channels: g.in_channels,
        in_size: g.out_size,
        out_size: g.in_size,
        pad_begin: core::array::from_fn(|a| g.dilation[a] * (g.kernel[a] - 1) - g.pad_begin[a]),
        ..g
    }
}

/// `weight` (`(C_out, C_in / groups, kD, kH, kW)`) as the adjoint's weight
/// (`(C_in, C_out / groups, kD, kH, kW)`): each group's channel roles swapped, every axis
/// flipped.
pub fn weight<T: Element>(geometry: &ConvGeometry, weight: &[T]) -> Vec<T> {
    /// Output channels moved per sweep over a task's input channels (as many): their source
    /// rows stay in L1 while every destination row is written in runs of this many kernels.
    const BLOCK: usize = 16;
    let g = geometry;
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let taps: usize = g.kernel.iter().product();
    let mut flipped = vec![T::ZERO; weight.len()];
    for group in 0..g.groups {
        let source = &weight[group * cout_g * cin_g * taps..][..cout_g * cin_g * taps];
        let target = &mut flipped[group * cout_g * cin_g * taps..][..cout_g * cin_g * taps];
        // A pointwise kernel only swaps channel roles: a plain transpose, where the loop below
        // slices per kernel (5% of `resnet50_1x1_reduce` grad_input's samples).
        if taps == 1 {
            transpose(source, cout_g, cin_g, target);
            continue;
        }
        // Runs of [`BLOCK`] input channels' rows per task: a wide layer's weights are
        // megabytes, which one thread moved in a fifth of `resnet_3x3_7`'s input gradient.
        let row_len = cout_g * taps;
        target
            .par_chunks_mut(BLOCK * row_len)
            .enumerate()
            .with_min_len(min_items_per_task(BLOCK * row_len))
            .for_each(|(chunk, rows)| {
                for first in (0..cout_g).step_by(BLOCK) {
                    let block = first..(first + BLOCK).min(cout_g);
                    for (r, row) in rows.chunks_exact_mut(row_len).enumerate() {
                        let ci = chunk * BLOCK + r;
                        let row = &mut row[block.start * taps..][..block.len() * taps];
                        for (co, kernel) in block.clone().zip(row.chunks_exact_mut(taps)) {
                            let src = &source[(co * cin_g + ci) * taps..][..taps];
                            for (slot, value) in kernel.iter_mut().zip(src.iter().rev()) {
                                *slot = *value;
                            }
                        }
                    }
                }
            });
    }
    flipped
}

//! The three moves of a [`Plan`] as `pulp` ops, compiled for the CPU's widest vectors: inputs
//! to transformed tiles, products back to outputs, output gradients to transformed tiles.
//!
//! Each works tile by tile on [`LANES`] channels at once ([`in_lanes`]). The transformed domain
//! keeps a tile's channels contiguous (`[point][tile][channel]`), so its loads and stores are
//! whole vectors; so is every load from the channels-last padded input. The output's scatter
//! transposes runs of tiles into a vector per channel; only the output gradient's gather,
//! channel-planar, moves one element at a time.

use core::ops::Range;

use pulp::{Simd, WithSimd};

use super::{Plan, Tile, point_stride};
use crate::cpu::kernels::element::Element;
use crate::cpu::kernels::points;
use crate::cpu::kernels::transpose::Transposer;
use crate::cpu::kernels::winograd::lanes::{MAX_POINTS, add, buffers, in_lanes};

/// Channels moved together: one 256-bit vector of f32.
const LANES: usize = 8;

/// The most rows (positions along D and H) an output tile has: 2 x 2 for F(2, 3) in 3D, 4 for
/// F(4, 3) in 2D.
const MAX_OUTPUT_ROWS: usize = 16;

impl<T: Element> Plan<'_, T> {
    /// The transformed inputs of group `group` for the block `tiles`, `[point][tile][cin_g]`
    /// (points [`point_stride`] apart), from the channels-last copy [`Plan::pad`] made of this
    /// chunk's images.
    pub fn transform_inputs(
        &self,
        padded: &[T],
        group: usize,
        tiles: Range<usize>,
        transformed: &mut [T],
    ) {
        pulp::Arch::new().dispatch(Inputs {
            plan: self,
            padded,
            group,
            tiles,
            transformed,
        });
    }

    /// The products of group `group` for the block `tiles` (`[point][tile][cout_g]`, points
    /// [`point_stride`] apart) brought back to outputs, plus `bias`, written into `out` (the
    /// images of this chunk).
    pub fn transform_outputs(
        &self,
        products: &[T],
        group: usize,
        tiles: Range<usize>,
        bias: Option<&[T]>,
        out: &mut [T],
    ) {
        pulp::Arch::new().dispatch(Outputs {
            plan: self,
            products,
            group,
            tiles,
            bias,
            out,
        });
    }

    /// The output gradients of group `group` for the block `tiles` taken to the transformed
    /// domain, `[point][tile][cout_g]`, points [`point_stride`] apart (the adjoint of
    /// [`Plan::transform_outputs`]; positions past the output's edge read as zero). `out_grad`
    /// holds this chunk's images.
    pub fn transform_out_grads(
        &self,
        out_grad: &[T],
        group: usize,
        tiles: Range<usize>,
        transformed: &mut [T],
    ) {
        pulp::Arch::new().dispatch(OutGrads {
            plan: self,
            out_grad,
            group,
            tiles,
            transformed,
        });
    }

    /// Where the output positions of `tile` that lie inside the output are, as (index among
    /// the tile's output points, offset in a channel plane of its image): what the gather of
    /// [`Plan::transform_out_grads`] reads and the element-by-element scatter of
    /// [`Plan::transform_outputs`] (one channel at a time) writes.
    fn landings(&self, tile: &Tile, landings: &mut Vec<(usize, usize)>) {
        let [_, out_h, out_w] = self.geometry.out_size;
        let out_size = self.geometry.out_size;
        landings.clear();
        for (q, offset) in points(self.axes.map(|a| a.m)).enumerate() {
            let at: [usize; 3] = core::array::from_fn(|a| tile.first[a] + offset[a]);
            if (0..3).all(|a| at[a] < out_size[a]) {
                landings.push((q, (at[0] * out_h + at[1]) * out_w + at[2]));
            }
        }
    }
}

/// The first channel of each group of `L` among `channels` (at least `L`): the last group ends
/// at the last channel, overlapping its neighbour where `L` does not divide `channels` (its
/// values are computed twice, identically).
fn channel_groups<const L: usize>(channels: usize) -> impl Iterator<Item = usize> + Clone {
    (0..channels.div_ceil(L)).map(move |i| (i * L).min(channels - L))
}

/// `move_tiles::<LANES>` over `channels` channels, or one channel at a time where there are
/// fewer than [`LANES`].
macro_rules! in_channel_groups {
    ($channels:expr, $move_tiles:ident($op:expr)) => {{
        let channels = $channels;
        if channels >= LANES {
            $move_tiles::<_, LANES>($op, channel_groups::<LANES>(channels))
        } else {
            $move_tiles::<_, 1>($op, channel_groups::<1>(channels))
        }
    }};
}

/// `L` values from `src`.
#[inline(always)]
fn lanes<T: Element, const L: usize>(src: &[T]) -> [T; L] {
    src[..L].try_into().expect("L values")
}

/// [`Plan::transform_inputs`] as a `pulp` op.
struct Inputs<'p, 's, T> {
    plan: &'p Plan<'p, T>,
    padded: &'s [T],
    group: usize,
    tiles: Range<usize>,
    transformed: &'s mut [T],
}

impl<T: Element> WithSimd for Inputs<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        in_channel_groups!(self.plan.geometry.in_per_group(), inputs(self));
    }
}

#[inline(always)]
fn inputs<T: Element, const L: usize>(
    op: Inputs<'_, '_, T>,
    groups: impl Iterator<Item = usize> + Clone,
) {
    let Inputs {
        plan,
        padded,
        group,
        tiles,
        transformed,
    } = op;
    let g = plan.geometry;
    let (channels, cin_g) = (g.in_channels, g.in_per_group());
    let stride = point_stride(tiles.len(), cin_g);
    let [_, ph, pw] = plan.axes.map(|a| a.padded);
    let alphas = plan.axes.map(|a| a.alpha);
    let offsets: Vec<usize> = points(alphas)
        .map(|[d, h, w]| ((d * ph + h) * pw + w) * channels)
        .collect();
    let volume = plan.padded_volume() * channels;
    let mut buffers = buffers();
    for (column, index) in tiles.enumerate() {
        let tile = plan.tile(index);
        let [d, h, w] = tile.first;
        let origin = tile.image * volume + ((d * ph + h) * pw + w) * channels + group * cin_g;
        for first in groups.clone() {
            let window = &padded[origin + first..];
            let dst = &mut transformed[column * cin_g + first..];
            in_lanes(
                &plan.input,
                alphas,
                |position| lanes(&window[offsets[position]..]),
                |point, value: [T; L]| dst[point * stride..][..L].copy_from_slice(&value),
                &mut buffers,
            );
        }
    }
}

/// [`Plan::transform_outputs`] as a `pulp` op.
struct Outputs<'p, 's, T> {
    plan: &'p Plan<'p, T>,
    products: &'s [T],
    group: usize,
    tiles: Range<usize>,
    bias: Option<&'s [T]>,
    out: &'s mut [T],
}

impl<T: Element> WithSimd for Outputs<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        in_channel_groups!(self.plan.geometry.out_per_group(), outputs(self));
    }
}

#[inline(always)]
fn outputs<T: Element, const L: usize>(
    op: Outputs<'_, '_, T>,
    groups: impl Iterator<Item = usize> + Clone,
) {
    let Outputs {
        plan,
        products,
        group,
        tiles,
        bias,
        out,
    } = op;
    let g = plan.geometry;
    let (cout_g, out_volume) = (g.out_per_group(), g.out_volume());
    let [out_d, out_h, out_w] = g.out_size;
    let stride = point_stride(tiles.len(), cout_g);
    let alphas = plan.axes.map(|a| a.alpha);
    let [md, mh, mw] = plan.axes.map(|a| a.m);
    // Runs of tiles along W whose outputs along W fill one vector (`mw` is 1, 2 or 4): the
    // transform leaves each output row of a run as `L` positions of `L` channels, transposed
    // into a vector per channel and stored whole. Where `mw` does not divide `L` (one channel
    // at a time), runs are single tiles, scattered element by element.
    let by_rows = L.is_multiple_of(mw);
    let run_len = if by_rows { L / mw } else { 1 };
    let (rows_per_tile, along_shift) = (md * mh, mw.trailing_zeros());
    assert!(
        rows_per_tile <= MAX_OUTPUT_ROWS,
        "output tile of {rows_per_tile} rows"
    );
    let mut buffers = buffers();
    let transposer = Transposer::new();
    // A row holds `L` positions on the vector path, `mw` (at most 4) on the scattered one.
    let mut rows = [[[T::ZERO; L]; LANES]; MAX_OUTPUT_ROWS];
    let mut landings = Vec::new();
    let mut index = tiles.start;
    while index < tiles.end {
        let tile = plan.tile(index);
        let tiles_left_in_row = plan.axes[2].tiles - tile.first[2] / mw;
        let count = run_len.min(tiles_left_in_row).min(tiles.end - index);
        let column = index - tiles.start;
        if !by_rows {
            plan.landings(&tile, &mut landings);
        }
        for first in groups.clone() {
            let channel = group * cout_g + first;
            let shift: [T; L] = bias.map_or([T::ZERO; L], |bias| lanes(&bias[channel..]));
            let planes = &mut out[(tile.image * g.out_channels + channel) * out_volume..];
            for t in 0..count {
                let src = &products[(column + t) * cout_g + first..];
                // Output `q` of tile `t`: row `q / mw`, position `t * mw + q % mw` along it.
                in_lanes(
                    &plan.output,
                    alphas,
                    |point| lanes(&src[point * stride..]),
                    |q, value| {
                        let at = (t << along_shift) + (q & (mw - 1));
                        rows[q >> along_shift][at] = add(value, shift);
                    },
                    &mut buffers,
                );
            }
            if !by_rows {
                for &(q, offset) in &landings {
                    let values = rows[q >> along_shift][q & (mw - 1)];
                    for (lane, value) in values.into_iter().enumerate() {
                        planes[lane * out_volume + offset] = value;
                    }
                }
                continue;
            }
            let along = (count * mw).min(out_w - tile.first[2]);
            for (row, positions) in rows[..rows_per_tile].iter().enumerate() {
                let (od, oh) = (tile.first[0] + row / mh, tile.first[1] + row % mh);
                if od >= out_d || oh >= out_h {
                    continue;
                }
                let offset = (od * out_h + oh) * out_w + tile.first[2];
                let positions: [[T; L]; L] = positions[..L].try_into().expect("L positions");
                for (lane, values) in transposer.transpose(positions).iter().enumerate() {
                    let dst = &mut planes[lane * out_volume + offset..];
                    // The same copy either way; a length known at compile time is one store.
                    if along == L {
                        dst[..L].copy_from_slice(values);
                    } else {
                        dst[..along].copy_from_slice(&values[..along]);
                    }
                }
            }
        }
        index += count;
    }
}

/// [`Plan::transform_out_grads`] as a `pulp` op.
struct OutGrads<'p, 's, T> {
    plan: &'p Plan<'p, T>,
    out_grad: &'s [T],
    group: usize,
    tiles: Range<usize>,
    transformed: &'s mut [T],
}

impl<T: Element> WithSimd for OutGrads<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        in_channel_groups!(self.plan.geometry.out_per_group(), out_grads(self));
    }
}

#[inline(always)]
fn out_grads<T: Element, const L: usize>(
    op: OutGrads<'_, '_, T>,
    groups: impl Iterator<Item = usize> + Clone,
) {
    let OutGrads {
        plan,
        out_grad,
        group,
        tiles,
        transformed,
    } = op;
    let g = plan.geometry;
    let (cout_g, out_volume) = (g.out_per_group(), g.out_volume());
    let stride = point_stride(tiles.len(), cout_g);
    let ms = plan.axes.map(|a| a.m);
    let outputs: usize = ms.iter().product();
    let mut buffers = buffers();
    let mut values = [[T::ZERO; L]; MAX_POINTS];
    let mut landings = Vec::new();
    for (column, index) in tiles.enumerate() {
        let tile = plan.tile(index);
        plan.landings(&tile, &mut landings);
        for first in groups.clone() {
            let channel = group * cout_g + first;
            let planes = &out_grad[(tile.image * g.out_channels + channel) * out_volume..];
            values[..outputs].fill([T::ZERO; L]);
            for &(q, offset) in &landings {
                for (lane, value) in values[q].iter_mut().enumerate() {
                    *value = planes[lane * out_volume + offset];
                }
            }
            let dst = &mut transformed[column * cout_g + first..];
            in_lanes(
                &plan.output_adjoint,
                ms,
                |q| values[q],
                |point, value: [T; L]| dst[point * stride..][..L].copy_from_slice(&value),
                &mut buffers,
            );
        }
    }
}

//! The three moves of a [`Plan`] as `pulp` ops, compiled for the CPU's widest vectors: inputs
//! to transformed tiles, products back to outputs, output gradients to transformed tiles.

use core::ops::Range;

use pulp::{Simd, WithSimd};

use super::super::super::element::Element;
use super::super::super::points;
use super::super::transform::Rows;
use super::{Plan, transform};

impl<T: Element> Plan<'_, T> {
    /// The transformed inputs of group `group` for the block `tiles`, `[point][cin_g][len]`.
    pub fn transform_inputs(
        &self,
        padded: &[T],
        group: usize,
        tiles: Range<usize>,
        transformed: &mut [T],
        scratch: &mut [T],
    ) {
        pulp::Arch::new().dispatch(Inputs {
            plan: self,
            padded,
            group,
            tiles,
            transformed,
            scratch,
        });
    }

    /// The products of group `group` for the block `tiles` (`[point][cout_g][len]`) brought
    /// back to outputs, plus `bias`, written into `out` (the images of this chunk).
    pub fn transform_outputs(
        &self,
        products: &[T],
        group: usize,
        tiles: Range<usize>,
        bias: Option<&[T]>,
        out: &mut [T],
        scratch: &mut [T],
    ) {
        pulp::Arch::new().dispatch(Outputs {
            plan: self,
            products,
            group,
            tiles,
            bias,
            out,
            scratch,
        });
    }

    /// The output gradients of group `group` for the block `tiles` taken to the transformed
    /// domain, `[point][cout_g][len]` (the adjoint of [`Plan::transform_outputs`]; positions
    /// past the output's edge read as zero). `out_grad` holds this chunk's images.
    pub fn transform_out_grads(
        &self,
        out_grad: &[T],
        group: usize,
        tiles: Range<usize>,
        transformed: &mut [T],
        scratch: &mut [T],
    ) {
        pulp::Arch::new().dispatch(OutGrads {
            plan: self,
            out_grad,
            group,
            tiles,
            transformed,
            scratch,
        });
    }
}

/// [`Plan::transform_inputs`] as a `pulp` op.
struct Inputs<'p, 's, T> {
    plan: &'p Plan<'p, T>,
    padded: &'s [T],
    group: usize,
    tiles: Range<usize>,
    transformed: &'s mut [T],
    scratch: &'s mut [T],
}

impl<T: Element> WithSimd for Inputs<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            plan,
            padded,
            group,
            tiles,
            transformed,
            scratch,
        } = self;
        let g = plan.geometry;
        let len = tiles.len();
        let cin_g = g.in_per_group();
        let ph = plan.axes[1].padded;
        let (phase_len, row_len) = (plan.phase_len, plan.row_len());
        let [md, mh, mw] = plan.axes.map(|a| a.m);
        let alphas = plan.axes.map(|a| a.alpha);
        let offsets: Vec<usize> = points(alphas)
            .map(|[d, h, w]| (d * ph + h) * row_len + (w % mw) * phase_len + w / mw)
            .collect();
        let volume = plan.padded_volume();
        let (gathered, temp) = scratch.split_at_mut(plan.points() * len);
        for c in 0..cin_g {
            let channel = group * cin_g + c;
            for run in plan.runs(tiles.clone()) {
                let [td, th, tw] = run.tile;
                let plane = &padded[(run.image * g.in_channels + channel) * volume..][..volume];
                let origin = (td * md * ph + th * mh) * row_len + tw;
                for (point, &offset) in offsets.iter().enumerate() {
                    // A loop, not `copy_from_slice`: runs are a few tiles long, too short
                    // for a `memcpy` call to pay.
                    let dst = &mut gathered[point * len + run.column..][..run.count];
                    for (slot, &value) in dst.iter_mut().zip(&plane[origin + offset..]) {
                        *slot = value;
                    }
                }
            }
            let dst = Rows {
                base: c * len,
                stride: cin_g * len,
            };
            transform(
                &plan.input,
                alphas,
                len,
                gathered,
                Rows::packed(len),
                transformed,
                dst,
                temp,
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
    scratch: &'s mut [T],
}

impl<T: Element> WithSimd for Outputs<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            plan,
            products,
            group,
            tiles,
            bias,
            out,
            scratch,
        } = self;
        let g = plan.geometry;
        let len = tiles.len();
        let cout_g = g.out_per_group();
        let step = plan.axes[2].m;
        let alphas = plan.axes.map(|a| a.alpha);
        let out_vol = g.out_volume();
        let (values, temp) = scratch.split_at_mut(plan.points() * len);
        for k in 0..cout_g {
            let channel = group * cout_g + k;
            let src = Rows {
                base: k * len,
                stride: cout_g * len,
            };
            transform(
                &plan.output,
                alphas,
                len,
                products,
                src,
                values,
                Rows::packed(len),
                temp,
            );
            let shift = bias.map_or(T::ZERO, |bias| bias[channel]);
            for run in plan.runs(tiles.clone()) {
                let plane = &mut out[(run.image * g.out_channels + channel) * out_vol..][..out_vol];
                for (q, point) in plan.output_points(&run).enumerate() {
                    if point.count == 0 {
                        continue;
                    }
                    let src = &values[q * len + run.column..][..point.count];
                    let dst = plane[point.row + point.first..].iter_mut().step_by(step);
                    for (slot, &value) in dst.zip(src) {
                        *slot = value + shift;
                    }
                }
            }
        }
    }
}

/// [`Plan::transform_out_grads`] as a `pulp` op.
struct OutGrads<'p, 's, T> {
    plan: &'p Plan<'p, T>,
    out_grad: &'s [T],
    group: usize,
    tiles: Range<usize>,
    transformed: &'s mut [T],
    scratch: &'s mut [T],
}

impl<T: Element> WithSimd for OutGrads<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            plan,
            out_grad,
            group,
            tiles,
            transformed,
            scratch,
        } = self;
        let g = plan.geometry;
        let len = tiles.len();
        let cout_g = g.out_per_group();
        let ms = plan.axes.map(|a| a.m);
        let out_vol = g.out_volume();
        let (gathered, temp) = scratch.split_at_mut(plan.points() * len);
        for k in 0..cout_g {
            let channel = group * cout_g + k;
            for run in plan.runs(tiles.clone()) {
                let plane =
                    &out_grad[(run.image * g.out_channels + channel) * out_vol..][..out_vol];
                for (q, point) in plan.output_points(&run).enumerate() {
                    let dst = &mut gathered[q * len + run.column..][..run.count];
                    let (inside, outside) = dst.split_at_mut(point.count);
                    outside.fill(T::ZERO);
                    if point.count == 0 {
                        continue;
                    }
                    let src = plane[point.row + point.first..].iter().step_by(ms[2]);
                    for (slot, &value) in inside.iter_mut().zip(src) {
                        *slot = value;
                    }
                }
            }
            let dst = Rows {
                base: k * len,
                stride: cout_g * len,
            };
            let packed = Rows::packed(len);
            let adjoint = &plan.output_adjoint;
            transform(adjoint, ms, len, gathered, packed, transformed, dst, temp);
        }
    }
}

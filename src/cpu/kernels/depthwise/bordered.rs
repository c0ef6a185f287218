//! A depthwise plane copied into a zero border, and the unit-W-stride forward pass over the
//! copy: runs of output columns accumulated in registers, with no edge cases.

use pulp::{Simd, WithSimd};

use crate::spec::ConvGeometry;

use super::super::element::Element;

/// The extent of a plane copied into a zero border: just the region the taps read, the
/// padding included. The copy costs one pass over the plane (which the taps then read from
/// cache), and the padding then multiplies like the GEMM path's zero-filled patches.
pub(super) struct Bordered {
    size: [usize; 3],
    /// Each tap's offset in the copy from an output row's origin, in weight order.
    offsets: Vec<usize>,
}

impl Bordered {
    /// `None` where the stride along W is not 1 (the row runs would gather), the output is
    /// empty, or the border would make the copy much larger than the plane (padding far wider
    /// than the kernel).
    pub(super) fn new(g: &ConvGeometry) -> Option<Self> {
        if g.stride[2] != 1 {
            return None;
        }
        // An empty output reads nothing: no copy (and no `out - 1` below).
        let mut size = [0; 3];
        for (axis, size) in size.iter_mut().enumerate() {
            let reach = (g.out_size[axis].checked_sub(1)?)
                .checked_mul(g.stride[axis])?
                .checked_add(
                    g.kernel[axis]
                        .checked_sub(1)?
                        .checked_mul(g.dilation[axis])?,
                )?;
            *size = reach.checked_add(1)?;
        }
        let volume = size
            .iter()
            .try_fold(1usize, |volume, &len| volume.checked_mul(len))?;
        let bound = g.in_volume().saturating_mul(2).saturating_add(4096);
        if volume > bound {
            return None;
        }
        let [_, size_h, size_w] = size;
        let [k_d, k_h, k_w] = g.kernel;
        let [d_d, d_h, d_w] = g.dilation;
        let offsets = (0..k_d)
            .flat_map(|kd| (0..k_h).flat_map(move |kh| (0..k_w).map(move |kw| (kd, kh, kw))))
            .map(|(kd, kh, kw)| (kd * d_d * size_h + kh * d_h) * size_w + kw * d_w)
            .collect();
        Some(Self { size, offsets })
    }

    /// Where output row `row` (of a plane's `D_out * H_out` rows) reads its first tap in the
    /// copy: its column 0 with every tap index 0.
    pub(super) fn row_origin(&self, g: &ConvGeometry, row: usize) -> usize {
        let [_, size_h, size_w] = self.size;
        let (od, oh) = (row / g.out_size[1], row % g.out_size[1]);
        (od * g.stride[0] * size_h + oh * g.stride[1]) * size_w
    }

    /// Each tap's offset in the copy from a row origin, in weight order.
    pub(super) fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Copy `x_plane` into `copy`, zeros wherever the copy's position is outside the input.
    /// A `copy` already of the copy's size was filled for this geometry before: its zeros are
    /// where they belong, so only the input is written again.
    pub(super) fn fill<T: Element>(&self, g: &ConvGeometry, x_plane: &[T], copy: &mut Vec<T>) {
        let [size_d, size_h, size_w] = self.size;
        let [in_d, in_h, in_w] = g.in_size;
        let [pad_d, pad_h, pad_w] = g.pad_begin;
        if copy.len() != size_d * size_h * size_w {
            copy.clear();
            copy.resize(size_d * size_h * size_w, T::ZERO);
        }
        // The copy's columns that hold input columns, and the first of those input columns.
        let columns = pad_w.min(size_w)..(pad_w + in_w).min(size_w);
        for (row, copy_row) in copy.chunks_mut(size_w).enumerate() {
            let (d, h) = (row / size_h, row % size_h);
            let (Some(id), Some(ih)) = (d.checked_sub(pad_d), h.checked_sub(pad_h)) else {
                continue;
            };
            if id < in_d && ih < in_h && !columns.is_empty() {
                let x_row = &x_plane[(id * in_h + ih) * in_w..][..columns.len()];
                copy_row[columns.clone()].copy_from_slice(x_row);
            }
        }
    }
}

/// One output plane from its bordered copy `x_copy` (filled by [`Bordered::fill`]).
pub(super) fn forward_plane<T: Element>(
    arch: &pulp::Arch,
    geometry: &ConvGeometry,
    bordered: &Bordered,
    x_copy: &[T],
    taps: &[T],
    bias: T,
    out_plane: &mut [T],
) {
    arch.dispatch(BorderedPlane {
        geometry,
        bordered,
        x_plane: x_copy,
        taps,
        bias,
        out_plane,
    });
}

/// Output columns per register run of [`BorderedPlane`]: enough independent accumulators
/// that the adds of successive taps do not wait on each other (four AVX2 or two AVX-512
/// registers of f32).
const RUN: usize = 32;

/// One output plane of a unit-W-stride depthwise convolution, read from its bordered copy.
/// A [`WithSimd`] op, so that the runs use the widest vectors the CPU has.
struct BorderedPlane<'a, T> {
    geometry: &'a ConvGeometry,
    bordered: &'a Bordered,
    x_plane: &'a [T],
    taps: &'a [T],
    bias: T,
    out_plane: &'a mut [T],
}

impl<T: Element> WithSimd for BorderedPlane<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let g = self.geometry;
        for (row, out_row) in self.out_plane.chunks_mut(g.out_size[2]).enumerate() {
            let rows = TapRows {
                origin: self.bordered.row_origin(g, row),
                offsets: self.bordered.offsets(),
                x_plane: self.x_plane,
                taps: self.taps,
                bias: self.bias,
            };
            rows.accumulate_row(out_row);
        }
    }
}

/// The taps of one output row, over the bordered copy.
struct TapRows<'a, T> {
    origin: usize,
    offsets: &'a [usize],
    x_plane: &'a [T],
    taps: &'a [T],
    bias: T,
}

impl<T: Element> TapRows<'_, T> {
    /// The whole output row: runs of [`RUN`] columns, then the rest in one run of a multiple of
    /// 8 that ends flush with the row, overlapping the run before it by under 8 columns (a row
    /// narrower than [`RUN`] runs 8 at a time, the last run again flush with its end). Each
    /// column's sum is the same whichever run computes it, and the copy has no edge, so an
    /// overlap only recomputes: a 56-wide row is runs of 32 and 24, where runs of 8 would each
    /// wait on every tap's add in their single accumulator.
    #[inline(always)]
    fn accumulate_row(&self, out_row: &mut [T]) {
        let width = out_row.len();
        if width < 8 {
            return (0..width).for_each(|column| self.run::<1>(out_row, column));
        }
        // Index loops, not `step_by(..).for_each`: its fold is an outlined function, compiled
        // without the target features of the `WithSimd` op (SSE runs, at half the AVX2 rate).
        if width < RUN {
            for run in 0..(width - 8).div_ceil(8) {
                self.run::<8>(out_row, run * 8);
            }
            return self.run::<8>(out_row, width - 8);
        }
        for run in 0..width / RUN {
            self.run::<RUN>(out_row, run * RUN);
        }
        match (width % RUN).next_multiple_of(8) {
            0 => {}
            8 => self.run::<8>(out_row, width - 8),
            16 => self.run::<16>(out_row, width - 16),
            24 => self.run::<24>(out_row, width - 24),
            _ => self.run::<RUN>(out_row, width - RUN),
        }
    }

    /// The run of `L` columns from `column`.
    #[inline(always)]
    fn run<const L: usize>(&self, out_row: &mut [T], column: usize) {
        let run = (&mut out_row[column..column + L])
            .try_into()
            .expect("L columns");
        self.accumulate::<L>(column, run);
    }

    /// `out[i] = bias + sum over taps of tap * x[column + i + tap's offset]`, the taps in weight
    /// order (as the stencil and the GEMM add them), accumulated in registers.
    #[inline(always)]
    fn accumulate<const L: usize>(&self, column: usize, out: &mut [T; L]) {
        let mut acc = [self.bias; L];
        for (&tap, &offset) in self.taps.iter().zip(self.offsets) {
            let x: &[T; L] = self.x_plane[self.origin + column + offset..][..L]
                .try_into()
                .expect("L inputs");
            for (slot, &value) in acc.iter_mut().zip(x) {
                *slot += tap * value;
            }
        }
        *out = acc;
    }
}

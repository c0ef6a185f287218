//! The unit-W-stride depthwise forward pass over a plane's bordered copy: runs of output
//! columns accumulated in registers, with no edge cases.

use pulp::{Simd, WithSimd};

use crate::spec::ConvGeometry;

use crate::cpu::kernels::bordered::Bordered;
use crate::cpu::kernels::element::Element;

/// The bordered copy of a depthwise plane where the runs over it are contiguous: `None` where
/// the stride along W is not 1 (the runs would gather) or [`Bordered::new`] declines.
pub(super) fn unit_w_stride(g: &ConvGeometry) -> Option<Bordered> {
    if g.stride[2] == 1 {
        Bordered::new(g)
    } else {
        None
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

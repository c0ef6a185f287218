//! The weight gradient of a depthwise convolution with unit stride along W: for each channel
//! and tap, the sum over the batch and every output position of `out_grad * x` at the tap's
//! offset, read from each image's bordered copy (as the forward pass reads it). Lowered to a
//! GEMM, each image would first be copied once per tap.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::is_depthwise;
use super::runs::unit_w_stride;
use crate::cpu::kernels::bordered::Bordered;
use crate::cpu::kernels::element::{Element, min_items_per_task};
use crate::cpu::kernels::sum::PairwiseSum;

/// Columns a tap's products are summed in at once, one partial sum per lane: a register of
/// f32 on AVX2, and 56-wide rows (MobileNet's) split into whole runs.
const LANES: usize = 8;

/// Products per tap summed in the lanes before the lanes are folded into the tap's pairwise
/// sum: at most `2 * LEAF / LANES` terms per lane, so a long reduction (a big batch, a long
/// signal) rounds like a pairwise sum, not a running one.
const LEAF: usize = LANES * 16;

/// Whether [`weight_backward`] computes this geometry: depthwise, with a bordered copy (unit
/// stride along W, a non-empty output, padding not far wider than the kernel).
pub fn serves_weight(geometry: &ConvGeometry) -> bool {
    is_depthwise(geometry) && unit_w_stride(geometry).is_some()
}

/// Gradient of a depthwise convolution's weight, shape `geometry.weight_shape()`, for a
/// geometry [`serves_weight`] accepts. Each channel is one task, its images summed in batch
/// order, so the result does not depend on scheduling.
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry;
    let bordered = unit_w_stride(g).expect("a depthwise geometry with a bordered copy");
    let (in_vol, out_vol, taps) = (g.in_volume(), g.out_volume(), g.patch_len());
    let mut grad = vec![T::ZERO; g.out_channels * taps];
    let arch = pulp::Arch::new();
    grad.par_chunks_mut(taps)
        .enumerate()
        .with_min_len(min_items_per_task((g.batch * out_vol).saturating_mul(taps)))
        .for_each_init(Vec::new, |copy, (channel, grad)| {
            let mut sums = TapSums::new(taps);
            for n in 0..g.batch {
                let plane = n * g.in_channels + channel;
                bordered.fill(g, &x[plane * in_vol..][..in_vol], 1, copy);
                arch.dispatch(PlaneProducts {
                    geometry: g,
                    bordered: &bordered,
                    x_copy: copy,
                    out_grad: &out_grad[plane * out_vol..][..out_vol],
                    sums: &mut sums,
                });
            }
            sums.flush();
            for (slot, sum) in grad.iter_mut().zip(&sums.totals) {
                *slot = sum.total();
            }
        });
    grad
}

/// Every tap's sum of products: [`LANES`] partial sums and a remainder per tap, folded into
/// the tap's [`PairwiseSum`] every [`LEAF`] products.
struct TapSums<T> {
    lanes: Vec<[T; LANES]>,
    rest: Vec<T>,
    pending: usize,
    totals: Vec<PairwiseSum<T>>,
}

impl<T: Element> TapSums<T> {
    fn new(taps: usize) -> Self {
        Self {
            lanes: vec![[T::ZERO; LANES]; taps],
            rest: vec![T::ZERO; taps],
            pending: 0,
            totals: (0..taps).map(|_| PairwiseSum::new()).collect(),
        }
    }

    /// Fold each tap's lanes (in lane order) and remainder into its pairwise sum.
    fn flush(&mut self) {
        if self.pending == 0 {
            return;
        }
        for ((lanes, rest), total) in self
            .lanes
            .iter_mut()
            .zip(&mut self.rest)
            .zip(&mut self.totals)
        {
            let leaf = lanes.iter().fold(T::ZERO, |sum, &lane| sum + lane);
            total.add(leaf + *rest);
            *lanes = [T::ZERO; LANES];
            *rest = T::ZERO;
        }
        self.pending = 0;
    }
}

/// Taps whose lanes one pass over a row segment accumulates: each tap's lanes are a chain of
/// dependent adds, so several taps side by side keep the vector units busy, and their lanes
/// stay in registers for the whole segment.
const TAP_BLOCK: usize = 4;

/// One image's products for every tap of one channel. A [`WithSimd`] op, so that the lane
/// loops use the widest vectors the CPU has.
struct PlaneProducts<'a, T> {
    geometry: &'a ConvGeometry,
    bordered: &'a Bordered,
    x_copy: &'a [T],
    out_grad: &'a [T],
    sums: &'a mut TapSums<T>,
}

impl<T: Element> WithSimd for PlaneProducts<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let (g, bordered) = (self.geometry, self.bordered);
        let offsets = bordered.offsets();
        let sums = self.sums;
        for (row, grad_row) in self.out_grad.chunks(g.out_size[2]).enumerate() {
            let first = bordered.row_origin(g, row);
            for (segment, grads) in grad_row.chunks(LEAF).enumerate() {
                let segment = Segment {
                    start: first + segment * LEAF,
                    grads,
                    x_copy: self.x_copy,
                };
                let mut lanes = sums.lanes.chunks_exact_mut(TAP_BLOCK);
                let mut offset_blocks = offsets.chunks_exact(TAP_BLOCK);
                for (lanes, offsets) in (&mut lanes).zip(&mut offset_blocks) {
                    segment.accumulate::<TAP_BLOCK>(lanes, offsets);
                }
                for (lanes, &offset) in lanes
                    .into_remainder()
                    .iter_mut()
                    .zip(offset_blocks.remainder())
                {
                    segment.accumulate::<1>(core::slice::from_mut(lanes), &[offset]);
                }
                let whole = grads.len() - grads.len() % LANES;
                let (column, tail) = (segment.start + whole, &grads[whole..]);
                for (rest, &offset) in sums.rest.iter_mut().zip(offsets) {
                    let x = &self.x_copy[column + offset..][..tail.len()];
                    for (&grad, &x) in tail.iter().zip(x) {
                        *rest += grad * x;
                    }
                }
                sums.pending += grads.len();
                if sums.pending >= LEAF {
                    sums.flush();
                }
            }
        }
    }
}

/// Up to [`LEAF`] output-gradient columns of one row, starting at `start` in the copy.
struct Segment<'a, T> {
    start: usize,
    grads: &'a [T],
    x_copy: &'a [T],
}

impl<T: Element> Segment<'_, T> {
    /// Add the segment's whole runs of [`LANES`] products to `B` taps' lanes (their offsets in
    /// `offsets`), held in registers across the runs; the lanes' sums are those of a
    /// tap-at-a-time loop, column `c` always in lane `c % LANES`.
    #[inline(always)]
    fn accumulate<const B: usize>(&self, lanes: &mut [[T; LANES]], offsets: &[usize]) {
        let mut acc: [[T; LANES]; B] = core::array::from_fn(|tap| lanes[tap]);
        for (run, grads) in self.grads.chunks_exact(LANES).enumerate() {
            let grads: &[T; LANES] = grads.try_into().expect("LANES columns");
            let column = self.start + run * LANES;
            for (acc, &offset) in acc.iter_mut().zip(offsets) {
                let x: &[T; LANES] = self.x_copy[column + offset..][..LANES]
                    .try_into()
                    .expect("LANES inputs");
                for ((lane, &grad), &x) in acc.iter_mut().zip(grads).zip(x) {
                    *lane += grad * x;
                }
            }
        }
        for (lanes, acc) in lanes.iter_mut().zip(acc) {
            *lanes = acc;
        }
    }
}

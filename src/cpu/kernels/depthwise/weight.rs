//! The weight gradient of a depthwise convolution with unit stride along W: for each channel
//! and tap, the sum over the batch and every output position of `out_grad * x` at the tap's
//! offset, read from each image's bordered copy (as the forward pass reads it). Lowered to a
//! GEMM, each image would first be copied once per tap.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::super::element::Element;
use super::super::sum::PairwiseSum;
use super::bordered::Bordered;
use super::is_depthwise;

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
    is_depthwise(geometry) && Bordered::new(geometry).is_some()
}

/// Gradient of a depthwise convolution's weight, shape `geometry.weight_shape()`, for a
/// geometry [`serves_weight`] accepts. Each channel is one task, its images summed in batch
/// order, so the result does not depend on scheduling.
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry;
    let bordered = Bordered::new(g).expect("a depthwise geometry with a bordered copy");
    let (in_vol, out_vol, taps) = (g.in_volume(), g.out_volume(), g.patch_len());
    let mut grad = vec![T::ZERO; g.out_channels * taps];
    let arch = pulp::Arch::new();
    grad.par_chunks_mut(taps)
        .enumerate()
        .for_each_init(Vec::new, |copy, (channel, grad)| {
            let mut sums = TapSums::new(taps);
            for n in 0..g.batch {
                let plane = n * g.in_channels + channel;
                bordered.fill(g, &x[plane * in_vol..][..in_vol], copy);
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
                let start = first + segment * LEAF;
                let runs = grads.chunks_exact(LANES);
                let tail = runs.remainder();
                for (run, grads) in runs.enumerate() {
                    let grads: &[T; LANES] = grads.try_into().expect("LANES columns");
                    let column = start + run * LANES;
                    for (lanes, &offset) in sums.lanes.iter_mut().zip(offsets) {
                        let x: &[T; LANES] = self.x_copy[column + offset..][..LANES]
                            .try_into()
                            .expect("LANES inputs");
                        for ((lane, &grad), &x) in lanes.iter_mut().zip(grads).zip(x) {
                            *lane += grad * x;
                        }
                    }
                }
                let column = start + (grads.len() - tail.len());
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

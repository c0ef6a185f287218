//! The depthwise forward pass for any geometry: every output row accumulates its
//! `kD * kH * kW` shifted input rows in place (strided along W where the stride is).

use core::ops::Range;

use pulp::{Simd, WithSimd};

use crate::spec::{ConvGeometry, inside};

use crate::cpu::kernels::element::Element;

/// For each `kw`: the output columns whose tap lands inside the input row, and the input
/// column of the first of them. The same for every row, so computed once.
pub(super) fn column_runs(g: &ConvGeometry) -> Vec<(Range<usize>, usize)> {
    let (out_w, in_w, s_w) = (g.out_size[2], g.in_size[2], g.stride[2]);
    (0..g.kernel[2])
        .map(|kw| {
            let offset = (kw * g.dilation[2]) as isize - g.pad_begin[2] as isize;
            let columns = inside(offset as i128, s_w, out_w, in_w);
            let first = (columns.start * s_w) as isize + offset;
            (columns, first.max(0) as usize)
        })
        .collect()
}

/// Add one output plane's taps into `out_plane` (which holds the bias).
pub(super) fn forward_plane<T: Element>(
    arch: &pulp::Arch,
    geometry: &ConvGeometry,
    runs: &[(Range<usize>, usize)],
    x_plane: &[T],
    taps: &[T],
    out_plane: &mut [T],
) {
    arch.dispatch(PlaneStencil {
        geometry,
        runs,
        x_plane,
        taps,
        out_plane,
    });
}

/// One output plane's stencil. A [`WithSimd`] op so that `pulp` compiles it once per
/// instruction set and picks at run time: the row updates then use the widest vectors the CPU
/// has, though the crate is built for baseline x86-64.
struct PlaneStencil<'a, T> {
    geometry: &'a ConvGeometry,
    runs: &'a [(Range<usize>, usize)],
    x_plane: &'a [T],
    taps: &'a [T],
    out_plane: &'a mut [T],
}

impl<T: Element> WithSimd for PlaneStencil<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let g = self.geometry;
        let [in_d, in_h, in_w] = g.in_size;
        let [_, out_h, out_w] = g.out_size;
        let [k_d, k_h, k_w] = g.kernel;
        let [s_d, s_h, s_w] = g.stride;
        let [d_d, d_h, _] = g.dilation;
        let [p_d, p_h, _] = g.pad_begin.map(|p| p as isize);
        for (row, out_row) in self.out_plane.chunks_mut(out_w).enumerate() {
            let (od, oh) = (row / out_h, row % out_h);
            for kd in 0..k_d {
                let id = (od * s_d + kd * d_d) as isize - p_d;
                if !(0..in_d as isize).contains(&id) {
                    continue;
                }
                for kh in 0..k_h {
                    let ih = (oh * s_h + kh * d_h) as isize - p_h;
                    if !(0..in_h as isize).contains(&ih) {
                        continue;
                    }
                    let x_row = &self.x_plane[(id as usize * in_h + ih as usize) * in_w..][..in_w];
                    let row_taps = &self.taps[(kd * k_h + kh) * k_w..][..k_w];
                    for ((columns, first), &tap) in self.runs.iter().zip(row_taps) {
                        if !columns.is_empty() {
                            add_scaled(&mut out_row[columns.clone()], &x_row[*first..], s_w, tap);
                        }
                    }
                }
            }
        }
    }
}

/// `dst[i] += tap * src[i * step]`.
#[inline(always)]
fn add_scaled<T: Element>(dst: &mut [T], src: &[T], step: usize, tap: T) {
    if step == 1 {
        for (slot, value) in dst.iter_mut().zip(src) {
            *slot += tap * *value;
        }
    } else {
        for (slot, value) in dst.iter_mut().zip(src.iter().step_by(step)) {
            *slot += tap * *value;
        }
    }
}

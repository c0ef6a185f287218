//! The phase grids of one strided convolution and the moves into and out of them: an image's
//! input split into its stride phases, the weights folded to one matrix per tap of the folded
//! kernel, and the output-side grids whose rows are wide enough for every tap to be a shifted
//! view.

use crate::spec::ConvGeometry;

use crate::cpu::kernels::element::Element;
use crate::cpu::kernels::gemm::MatRef;
use crate::cpu::kernels::{flat, points};

/// Taps per axis of the folded kernel: `kernel / stride`.
pub fn taps(g: &ConvGeometry) -> [usize; 3] {
    core::array::from_fn(|a| g.kernel[a] / g.stride[a])
}

/// Rows per axis of one channel and phase's input grid: `out + taps - 1`.
pub fn grid(g: &ConvGeometry) -> [usize; 3] {
    let taps = taps(g);
    core::array::from_fn(|a| g.out_size[a] + taps[a] - 1)
}

/// One strided convolution seen through its stride phases (`geometry` normalised, dilation 1,
/// every kernel axis a multiple of its stride).
///
/// Along an axis of stride `s` and kernel `s * t`, output `o`'s tap `s * a + phase` reads
/// padded input `s * (o + a) + phase`: row `o + a` of that phase's grid, which holds every
/// `s`-th padded input from `phase`. So in the grids (`out + t - 1` rows per axis) the
/// convolution is `t` taps of stride 1 over `channels x phases` inputs, and with the output's
/// rows as wide as the grid's, each tap is one GEMM over a shifted view of the grids.
pub struct Plan<'a> {
    geometry: &'a ConvGeometry,
    stride: [usize; 3],
    taps: [usize; 3],
    /// The phased input grid of one channel and phase: `out + taps - 1` per axis.
    grid: [usize; 3],
    /// Per phase of the first two axes (`p_d * s_h + p_h`), the input row each grid row
    /// holds, as its offset in an input plane, or `None` for a padding row.
    rows: Vec<Vec<Option<usize>>>,
    /// Per phase of the last axis, the grid columns inside the input row.
    columns: Vec<Columns>,
}

/// The grid columns `first..first + len` of one last-axis phase that hold inputs, the first
/// of them input `start` of its row (the next ones each a stride further).
#[derive(Clone, Copy)]
struct Columns {
    first: usize,
    len: usize,
    start: usize,
}

/// `dst[j] = src[j * step]` for every `j` of `dst`, the common steps spelled out so each
/// compiles to its own loop.
fn copy_strided<T: Copy>(dst: &mut [T], src: &[T], step: usize) {
    match step {
        1 => dst.copy_from_slice(&src[..dst.len()]),
        2 => dst
            .iter_mut()
            .zip(src.chunks(2))
            .for_each(|(d, s)| *d = s[0]),
        _ => dst
            .iter_mut()
            .zip(src.iter().step_by(step))
            .for_each(|(d, s)| *d = *s),
    }
}

/// `dst[j * step] = src[j]` for every `j` of `src`.
fn scatter_strided<T: Copy>(dst: &mut [T], src: &[T], step: usize) {
    match step {
        1 => dst[..src.len()].copy_from_slice(src),
        2 => dst.chunks_mut(2).zip(src).for_each(|(d, s)| d[0] = *s),
        _ => dst
            .iter_mut()
            .step_by(step)
            .zip(src)
            .for_each(|(d, s)| *d = *s),
    }
}

impl<'a> Plan<'a> {
    /// The plan of a normalised geometry that `super::serves` accepted.
    pub fn new(geometry: &'a ConvGeometry) -> Self {
        let g = geometry;
        let (taps, grid) = (taps(g), grid(g));
        // The input grid row `row` of phase `phase` holds along `axis`, if not padding.
        let source = |axis: usize, phase: usize, row: usize| {
            (g.stride[axis] * row + phase)
                .checked_sub(g.pad_begin[axis])
                .filter(|&i| i < g.in_size[axis])
        };
        let [_, in_h, in_w] = g.in_size;
        let rows = points([1, g.stride[0], g.stride[1]])
            .map(|[_, p_d, p_h]| {
                points([1, grid[0], grid[1]])
                    .map(|[_, r_d, r_h]| {
                        let (d, h) = (source(0, p_d, r_d)?, source(1, p_h, r_h)?);
                        Some((d * in_h + h) * in_w)
                    })
                    .collect()
            })
            .collect();
        let columns = (0..g.stride[2])
            .map(|p_w| {
                let first = g.pad_begin[2].saturating_sub(p_w).div_ceil(g.stride[2]);
                let len = (first..grid[2])
                    .take_while(|&c| source(2, p_w, c).is_some())
                    .count();
                let start = source(2, p_w, first).unwrap_or(0);
                Columns { first, len, start }
            })
            .collect();
        Self {
            geometry: g,
            stride: g.stride,
            taps,
            grid,
            rows,
            columns,
        }
    }

    /// Phases per channel: the product of the strides.
    pub fn phases(&self) -> usize {
        self.stride.iter().product()
    }

    /// Taps of the folded kernel.
    pub fn taps(&self) -> impl Iterator<Item = [usize; 3]> {
        points(self.taps)
    }

    /// Rows of each tap's GEMM operand: every (channel of a group, phase) pair.
    pub fn depth(&self) -> usize {
        self.geometry.in_per_group() * self.phases()
    }

    /// Elements of one channel-phase grid.
    pub fn plane_len(&self) -> usize {
        self.grid.iter().product()
    }

    /// Columns of one output slice (a fixed first axis) on the grid's rows: `out_h` rows of
    /// the grid's width; those past `out_w` in a row are computed and dropped.
    pub fn slice_len(&self) -> usize {
        self.geometry.out_size[1] * self.grid[2]
    }

    /// Elements of one image's phased input for one group, with room for the last grid's
    /// shifted views to run past its end (into columns that are dropped).
    pub fn input_len(&self) -> usize {
        self.depth() * self.plane_len() + self.grid[2]
    }

    /// Tap `tap`'s view of output slice `slice` in the phased input `grids` (`depth x
    /// slice_len`, each row a grid): one GEMM operand.
    pub fn input_view<'g, T>(
        &self,
        grids: &'g [T],
        slice: usize,
        tap: [usize; 3],
    ) -> MatRef<'g, T> {
        let offset = flat([slice + tap[0], tap[1], tap[2]], self.grid);
        MatRef::columns(
            &grids[offset..],
            self.depth(),
            self.slice_len(),
            self.plane_len(),
        )
    }

    /// Group `group`'s weights for the folded kernel's tap number `tap` (`C_out/groups x
    /// depth`) in [`Plan::fold_weights`]'s order.
    pub fn tap_weights<'w, T>(&self, folded: &'w [T], group: usize, tap: usize) -> &'w [T] {
        &folded[self.tap_range(group, tap)]
    }

    /// [`Plan::tap_weights`], for writing a folded weight gradient.
    pub fn tap_weights_mut<'w, T>(
        &self,
        folded: &'w mut [T],
        group: usize,
        tap: usize,
    ) -> &'w mut [T] {
        &mut folded[self.tap_range(group, tap)]
    }

    fn tap_range(&self, group: usize, tap: usize) -> core::ops::Range<usize> {
        let len = self.geometry.out_per_group() * self.depth();
        let taps: usize = self.taps.iter().product();
        let start = (group * taps + tap) * len;
        start..start + len
    }

    /// Gather one group's channels of one image (`x_group`, `in_per_group` planes) into their
    /// phase grids (`dst`, channel-major then phase), zero where a grid point is padding.
    pub fn gather_input<T: Element>(&self, x_group: &[T], dst: &mut [T]) {
        let (in_vol, plane_len) = (self.geometry.in_volume(), self.plane_len());
        let (s_w, grid_w) = (self.stride[2], self.grid[2]);
        let grids = dst[..self.depth() * plane_len].chunks_exact_mut(plane_len);
        let phases = self
            .rows
            .iter()
            .flat_map(|rows| self.columns.iter().map(move |c| (rows, c)));
        let planes = x_group
            .chunks_exact(in_vol)
            .flat_map(|x| phases.clone().map(move |p| (x, p)));
        for (grid, (x_plane, (rows, columns))) in grids.zip(planes) {
            let Columns { first, len, start } = *columns;
            for (row, source) in grid.chunks_exact_mut(grid_w).zip(rows) {
                let Some(source) = source.filter(|_| len > 0) else {
                    row.fill(T::ZERO);
                    continue;
                };
                row[..first].fill(T::ZERO);
                copy_strided(
                    &mut row[first..first + len],
                    &x_plane[source + start..],
                    s_w,
                );
                row[first + len..].fill(T::ZERO);
            }
        }
        dst[self.depth() * plane_len..].fill(T::ZERO);
    }

    /// The weights (`C_out x C_in/groups x kernel`) as one `C_out/groups x depth` matrix per
    /// group and tap of the folded kernel: `[group][tap][out channel][channel, phase]`.
    pub fn fold_weights<T: Element>(&self, weight: &[T]) -> Vec<T> {
        let mut folded = vec![T::ZERO; weight.len()];
        self.for_each_weight(|at, folded_at| folded[folded_at] = weight[at]);
        folded
    }

    /// The inverse of [`Plan::fold_weights`]: a weight gradient in folded order back in the
    /// weights' layout.
    pub fn unfold_weights<T: Element>(&self, folded: &[T]) -> Vec<T> {
        let mut weight = vec![T::ZERO; folded.len()];
        self.for_each_weight(|at, folded_at| weight[at] = folded[folded_at]);
        weight
    }

    /// `visit(index in the weights, index in the folded weights)` for every weight, in the
    /// weights' order.
    fn for_each_weight(&self, mut visit: impl FnMut(usize, usize)) {
        let g = self.geometry;
        let (cin_g, cout_g, depth) = (g.in_per_group(), g.out_per_group(), self.depth());
        let taps_len: usize = self.taps.iter().product();
        // Per kernel tap, its place among a folded row's: `(tap, phase)` of the folded kernel.
        let places: Vec<usize> = points(g.kernel)
            .map(|k| {
                let tap = core::array::from_fn(|a| k[a] / self.stride[a]);
                let phase = core::array::from_fn(|a| k[a] % self.stride[a]);
                flat(tap, self.taps) * cout_g * depth + flat(phase, self.stride)
            })
            .collect();
        let mut at = 0;
        for oc in 0..g.out_channels {
            let row = (oc / cout_g * taps_len * cout_g + oc % cout_g) * depth;
            for c in 0..cin_g {
                let base = row + c * self.phases();
                for place in &places {
                    visit(at, base + place);
                    at += 1;
                }
            }
        }
    }

    /// Write one output slice computed on the grid's rows (`wide`, `C_out/groups x
    /// slice_len`) into the output planes of one image's group (`out_group`), plus the bias.
    pub fn store_slice<T: Element>(
        &self,
        wide: &[T],
        slice: usize,
        bias: Option<&[T]>,
        out_group: &mut [T],
    ) {
        let g = self.geometry;
        let [_, out_h, out_w] = g.out_size;
        let (out_vol, slice_len, width) = (g.out_volume(), self.slice_len(), self.grid[2]);
        for (oc, out_plane) in out_group.chunks_mut(out_vol).enumerate() {
            let shift = bias.map_or(T::ZERO, |bias| bias[oc]);
            let src = &wide[oc * slice_len..][..slice_len];
            let dst = &mut out_plane[slice * out_h * out_w..][..out_h * out_w];
            for (dst_row, src_row) in dst.chunks_mut(out_w).zip(src.chunks(width)) {
                for (slot, value) in dst_row.iter_mut().zip(src_row) {
                    *slot = *value + shift;
                }
            }
        }
    }

    /// Lay one group's output gradient of one image (`C_out/groups` planes) on rows of the
    /// grid's width, zero in the columns past `out_w` (`dst`, `C_out/groups x out_d x
    /// slice_len`): the left operand of the weight gradient, whose dropped columns must add
    /// nothing.
    pub fn widen_out_grad<T: Element>(&self, out_grad_group: &[T], dst: &mut [T]) {
        let g = self.geometry;
        let out_w = g.out_size[2];
        let width = self.grid[2];
        let out_rows = out_grad_group.chunks(out_w);
        for (dst_row, src_row) in dst.chunks_mut(width).zip(out_rows) {
            dst_row[..out_w].copy_from_slice(src_row);
            dst_row[out_w..].fill(T::ZERO);
        }
    }

    /// Elements of one image's output gradient on the gradient grids, for one group, with a
    /// grid of zeros after the last for the shifted views to run into.
    ///
    /// A gradient grid has the input grid's size, the gradient at `taps - 1` on each axis and
    /// zeros before it. Grid row `r` of tap `a` reads output `r - a`, at `r - a + taps - 1`:
    /// past a row's end (up to `taps - 1` beyond it) it runs into the next row's leading
    /// zeros, which stand for the trailing zeros the definition has there; the same holds
    /// for the other axes, and for the last grid, the zeros after it.
    pub fn grad_len(&self) -> usize {
        (self.geometry.out_per_group() + 1) * self.plane_len()
    }

    /// Columns of one input-gradient slice (a fixed first grid axis): every row of the grid.
    pub fn grad_slice_len(&self) -> usize {
        self.grid[1] * self.grid[2]
    }

    /// Slices of the phased input gradient (the grid's first axis).
    pub fn grid_slices(&self) -> usize {
        self.grid[0]
    }

    /// Output slices (the output's first axis).
    pub fn out_slices(&self) -> usize {
        self.geometry.out_size[0]
    }

    /// Where tap `tap`'s view for grid slice `slice` starts in each gradient grid.
    pub fn grad_offset(&self, slice: usize, tap: [usize; 3]) -> usize {
        let at = [
            slice + self.taps[0] - 1 - tap[0],
            self.taps[1] - 1 - tap[1],
            self.taps[2] - 1 - tap[2],
        ];
        flat(at, self.grid)
    }

    /// Place one group's output gradient of one image into its gradient grids (`dst`, of
    /// [`Plan::grad_len`]). The zeros are never written here: `dst` holds them on entry
    /// (zeroed once, then only ever written by this).
    pub fn pad_out_grad<T: Element>(&self, out_grad_group: &[T], dst: &mut [T]) {
        let g = self.geometry;
        let [out_d, out_h, out_w] = g.out_size;
        let grids = dst.chunks_exact_mut(self.plane_len());
        for (src, grid) in out_grad_group.chunks_exact(g.out_volume()).zip(grids) {
            let rows = src.chunks_exact(out_w);
            let at = |o_d: usize, o_h: usize| {
                let at = [
                    o_d + self.taps[0] - 1,
                    o_h + self.taps[1] - 1,
                    self.taps[2] - 1,
                ];
                flat(at, self.grid)
            };
            let positions = (0..out_d).flat_map(|o_d| (0..out_h).map(move |o_h| (o_d, o_h)));
            for (row, (o_d, o_h)) in rows.zip(positions) {
                grid[at(o_d, o_h)..][..out_w].copy_from_slice(row);
            }
        }
    }

    /// Scatter the phased input gradient of one image's group (`phased`, a grid per channel
    /// and phase) to the input planes (`x_grad_group`, zero on entry):
    /// each grid point that holds an input sends it back; inputs no tap reads stay zero.
    pub fn scatter_x_grad<T: Element>(&self, phased: &[T], x_grad_group: &mut [T]) {
        let in_vol = self.geometry.in_volume();
        let row_len = self.plane_len();
        let (s_w, width) = (self.stride[2], self.grid[2]);
        let phases = self
            .rows
            .iter()
            .flat_map(|rows| self.columns.iter().map(move |c| (rows, c)));
        for (c, x_plane) in x_grad_group.chunks_exact_mut(in_vol).enumerate() {
            for (index, (rows, columns)) in phases.clone().enumerate() {
                let Columns { first, len, start } = *columns;
                let grid = &phased[(c * self.phases() + index) * row_len..][..row_len];
                for (src, source) in grid.chunks_exact(width).zip(rows) {
                    if let Some(source) = source.filter(|_| len > 0) {
                        let dst = &mut x_plane[source + start..];
                        scatter_strided(dst, &src[first..first + len], s_w);
                    }
                }
            }
        }
    }
}

//! A convolution's input plane copied into a zero border: just the region the taps read, the
//! padding included, so every tap of every output reads inside the copy with no edge cases.
//! The copy costs one pass over the plane (which the taps then read from cache), and the
//! padding then multiplies like the lowered path's zero-filled patches.

use crate::spec::ConvGeometry;

use super::element::Element;

/// The extent of a plane's bordered copy, and where each tap reads in it.
pub struct Bordered {
    size: [usize; 3],
    /// Each tap's offset in the copy from an output row's origin, in weight order.
    offsets: Vec<usize>,
}

impl Bordered {
    /// `None` where the output is empty or the border would make the copy much larger than
    /// the plane (padding far wider than the kernel).
    pub fn new(g: &ConvGeometry) -> Option<Self> {
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
    pub fn row_origin(&self, g: &ConvGeometry, row: usize) -> usize {
        let [_, size_h, size_w] = self.size;
        let (od, oh) = (row / g.out_size[1], row % g.out_size[1]);
        (od * g.stride[0] * size_h + oh * g.stride[1]) * size_w
    }

    /// Each tap's offset in the copy from a row origin, in weight order.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Elements of one plane's copy.
    pub fn plane_len(&self) -> usize {
        self.size.iter().product()
    }

    /// Copy the `planes` planes of `x` into `copy` (each [`Bordered::plane_len`] long), zeros
    /// wherever a copy's position is outside the input. A `copy` already of that size was
    /// filled for this geometry before: its zeros are where they belong, so only the input is
    /// written again.
    pub fn fill<T: Element>(&self, g: &ConvGeometry, x: &[T], planes: usize, copy: &mut Vec<T>) {
        let plane_len = self.plane_len();
        if copy.len() != planes * plane_len {
            copy.clear();
            copy.resize(planes * plane_len, T::ZERO);
        }
        self.fill_planes(g, x, copy);
    }

    /// [`Bordered::fill`] into a slice of as many planes as `x` has, which holds zeros
    /// wherever a copy's position is outside the input (zeroed once, then only ever written
    /// by this for the same geometry).
    pub fn fill_planes<T: Element>(&self, g: &ConvGeometry, x: &[T], copy: &mut [T]) {
        let (plane_len, in_vol) = (self.plane_len(), g.in_volume());
        if in_vol == 0 {
            return;
        }
        for (x_plane, copy_plane) in x.chunks_exact(in_vol).zip(copy.chunks_exact_mut(plane_len)) {
            self.fill_plane(g, x_plane, copy_plane);
        }
    }

    /// One plane of [`Bordered::fill`]: only the input's positions are written.
    fn fill_plane<T: Element>(&self, g: &ConvGeometry, x_plane: &[T], copy: &mut [T]) {
        let [_, size_h, size_w] = self.size;
        let [in_d, in_h, in_w] = g.in_size;
        let [pad_d, pad_h, pad_w] = g.pad_begin;
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

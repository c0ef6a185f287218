//! The lowering of a small "same" convolution (stride 1, output shaped as the input): the patch
//! row of each tap is the input volume shifted by a constant, with the positions where the tap
//! reads the padding masked to zero. One select per element over the whole volume, vectorized,
//! instead of one short copy per output row: what small late-stage planes (14x14 down to 4x4)
//! need, where the row copies cost more than the GEMM.

use core::ops::Range;

use pulp::{Simd, WithSimd};

use crate::spec::ConvGeometry;

use crate::cpu::kernels::element::Element;

/// Mask elements above which a volume lowers by rows instead (its rows are long enough).
const MAX_MASK_LEN: usize = 1 << 16;

/// Per tap `(kd, kh, kw)`: its offset in the input and, per output position, whether it reads
/// the input (else the padding).
pub struct TapMasks {
    shifts: Vec<isize>,
    masks: Vec<bool>,
    volume: usize,
}

impl TapMasks {
    /// The masks of `geometry`, if its output is shaped as its input at stride 1 and they are
    /// small.
    pub fn new(geometry: &ConvGeometry) -> Option<Self> {
        Self::side_by_side(geometry, 1)
    }

    /// The masks of `images` volumes of `geometry` laid side by side, each tap's mask repeated
    /// per volume (a tap's shift never carries a read it keeps into the neighbouring volume),
    /// for input staged channel by channel, the images of each channel side by side.
    pub fn side_by_side(geometry: &ConvGeometry, images: usize) -> Option<Self> {
        let taps: usize = geometry.kernel.iter().product();
        let plane = geometry.out_volume();
        let volume = plane.checked_mul(images)?;
        if geometry.stride != [1; 3]
            || geometry.out_size != geometry.in_size
            || volume.saturating_mul(taps) > MAX_MASK_LEN
        {
            return None;
        }
        let size = geometry.in_size;
        let [k_d, k_h, k_w] = geometry.kernel;
        let mut shifts = Vec::with_capacity(taps);
        let mut masks = Vec::with_capacity(taps * volume);
        for tap in
            (0..k_d).flat_map(|d| (0..k_h).flat_map(move |h| (0..k_w).map(move |w| [d, h, w])))
        {
            let shift: [isize; 3] = core::array::from_fn(|axis| {
                (tap[axis] * geometry.dilation[axis]) as isize - geometry.pad_begin[axis] as isize
            });
            shifts.push((shift[0] * size[1] as isize + shift[1]) * size[2] as isize + shift[2]);
            let reads = |position: usize, axis: usize| {
                (0..size[axis] as isize).contains(&(position as isize + shift[axis]))
            };
            let first = masks.len();
            for d in 0..size[0] {
                for h in 0..size[1] {
                    for w in 0..size[2] {
                        let inside = reads(d, 0) && reads(h, 1) && reads(w, 2);
                        masks.push(inside);
                    }
                }
            }
            for _ in 1..images {
                masks.extend_from_within(first..first + plane);
            }
        }
        Some(Self {
            shifts,
            masks,
            volume,
        })
    }

    /// Each tap's shift and mask, in weight order `(kd, kh, kw)`.
    pub fn taps(&self) -> impl Iterator<Item = (isize, &[bool])> {
        self.shifts
            .iter()
            .copied()
            .zip(self.masks.chunks_exact(self.volume.max(1)))
    }

    /// For each patch row `(channel, tap)`: its number, the channel's first input element plus
    /// the tap's shift, and the tap's mask.
    fn rows(&self, channels: usize) -> impl Iterator<Item = (usize, isize, &[bool])> {
        let (volume, taps) = (self.volume, self.shifts.len());
        (0..channels).flat_map(move |channel| {
            self.taps().enumerate().map(move |(tap, (shift, mask))| {
                let row = channel * taps + tap;
                (row, (channel * volume) as isize + shift, mask)
            })
        })
    }

    /// [`super::im2col::Lowering::im2col`] for the output positions `positions`.
    pub fn im2col<T: Element>(
        &self,
        x: &[T],
        positions: Range<usize>,
        col: &mut [T],
        row_stride: usize,
    ) {
        pulp::Arch::new().dispatch(Lower {
            masks: self,
            x,
            positions,
            col,
            row_stride,
        });
    }

    /// [`super::im2col::Lowering::col2im`] for the output positions `positions`.
    pub fn col2im<T: Element>(
        &self,
        col: &[T],
        row_stride: usize,
        positions: Range<usize>,
        x: &mut [T],
    ) {
        pulp::Arch::new().dispatch(Scatter {
            masks: self,
            col,
            row_stride,
            positions,
            x,
        });
    }
}

/// [`TapMasks::im2col`] as a `pulp` op, so the masked copies use the CPU's widest vectors.
struct Lower<'a, T> {
    masks: &'a TapMasks,
    x: &'a [T],
    positions: Range<usize>,
    col: &'a mut [T],
    row_stride: usize,
}

impl<T: Element> WithSimd for Lower<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            masks,
            x,
            positions,
            col,
            row_stride,
        } = self;
        let channels = x.len() / masks.volume.max(1);
        for (row, shift, mask) in masks.rows(channels) {
            let dst = &mut col[row * row_stride..][..positions.len()];
            let live = readable(shift, &positions, x.len());
            dst[..live.start - positions.start].fill(T::ZERO);
            dst[live.end - positions.start..].fill(T::ZERO);
            if live.is_empty() {
                continue;
            }
            let src = &x[(live.start as isize + shift) as usize..][..live.len()];
            let dst = &mut dst[live.start - positions.start..live.end - positions.start];
            for ((slot, &value), &keep) in dst.iter_mut().zip(src).zip(&mask[live]) {
                *slot = if keep { value } else { T::ZERO };
            }
        }
    }
}

/// [`TapMasks::col2im`] as a `pulp` op.
struct Scatter<'a, T> {
    masks: &'a TapMasks,
    col: &'a [T],
    row_stride: usize,
    positions: Range<usize>,
    x: &'a mut [T],
}

impl<T: Element> WithSimd for Scatter<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            masks,
            col,
            row_stride,
            positions,
            x,
        } = self;
        let channels = x.len() / masks.volume.max(1);
        for (row, shift, mask) in masks.rows(channels) {
            let live = readable(shift, &positions, x.len());
            if live.is_empty() {
                continue;
            }
            let src = &col[row * row_stride + live.start - positions.start..][..live.len()];
            let dst = &mut x[(live.start as isize + shift) as usize..][..live.len()];
            for ((slot, &value), &keep) in dst.iter_mut().zip(src).zip(&mask[live]) {
                *slot += if keep { value } else { T::ZERO };
            }
        }
    }
}

/// The positions `p` of `positions` whose element `p + shift` lies inside `0..len` (the others
/// are masked: they read the padding). When empty, `start + shift` may lie outside `0..len`:
/// callers skip an empty range rather than slice at it.
pub fn readable(shift: isize, positions: &Range<usize>, len: usize) -> Range<usize> {
    let clamp = |p: isize| p.clamp(positions.start as isize, positions.end as isize) as usize;
    let start = clamp(-shift);
    start..clamp(len as isize - shift).max(start)
}

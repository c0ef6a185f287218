//! The lowering of a small output of any stride and dilation, by table: per kernel tap and
//! output position, the input element it reads, or none in the padding. Small outputs (7x7,
//! 4x4) sit several images to a tile; lowered by rows, a strided one hands out runs of 4 to 7
//! elements whose setup costs more than their copy, where the table costs one look-up each.

use crate::spec::ConvGeometry;

use crate::cpu::kernels::element::Element;
use crate::cpu::kernels::points;

/// Table entries above which an output lowers by rows instead.
const MAX_TABLE_LEN: usize = 1 << 16;

/// Output rows at least this long lower by rows instead: one strided copy per row beats a
/// look-up per element there; decided by `example_resnet_3x3s2_7` (short rows, the table)
/// against `audio_conv1d_k9` (long rows).
const MAX_ROW: usize = 32;

/// Per tap `(kd, kh, kw)` and output position, the offset in an input channel's volume that
/// the tap reads there, or an offset past the volume for the padding.
pub struct TapTable {
    sources: Vec<u32>,
    taps: usize,
    out_volume: usize,
    in_volume: usize,
}

impl TapTable {
    /// The table of `geometry`, if its rows are short, it is small and every offset fits 32
    /// bits.
    pub fn new(geometry: &ConvGeometry) -> Option<Self> {
        let g = geometry;
        let (out_volume, in_volume) = (g.out_volume(), g.in_volume());
        let taps: usize = g.kernel.iter().product();
        if g.out_size[2] >= MAX_ROW
            || taps.checked_mul(out_volume)? > MAX_TABLE_LEN
            || in_volume >= u32::MAX as usize
        {
            return None;
        }
        let padding = in_volume as u32;
        let source = |tap: [usize; 3], out: [usize; 3]| {
            let mut offset = 0u64;
            for axis in 0..3 {
                let at = out[axis] as i128 * g.stride[axis] as i128
                    + tap[axis] as i128 * g.dilation[axis] as i128
                    - g.pad_begin[axis] as i128;
                if !(0..g.in_size[axis] as i128).contains(&at) {
                    return padding;
                }
                offset = offset * g.in_size[axis] as u64 + at as u64;
            }
            offset as u32
        };
        let sources = points(g.kernel)
            .flat_map(|tap| points(g.out_size).map(move |out| source(tap, out)))
            .collect();
        Some(Self {
            sources,
            taps,
            out_volume,
            in_volume,
        })
    }

    /// Each patch row `(channel, tap)` of one image's group channels `x` (`channels x
    /// in_volume`) with the tap's sources.
    fn rows(&self, channels: usize) -> impl Iterator<Item = (usize, usize, &[u32])> {
        let per_tap = self.sources.chunks_exact(self.out_volume.max(1));
        (0..channels).flat_map(move |channel| {
            per_tap
                .clone()
                .enumerate()
                .map(move |(tap, sources)| (channel * self.taps + tap, channel, sources))
        })
    }

    /// The patch matrix of one image's group channels `x` at every output position: row `r`
    /// at `col[r * row_stride..]`, `out_volume` long.
    pub fn im2col<T: Element>(&self, x: &[T], col: &mut [T], row_stride: usize) {
        let channels = x.len() / self.in_volume.max(1);
        for (row, channel, sources) in self.rows(channels) {
            let plane = &x[channel * self.in_volume..][..self.in_volume];
            let dst = &mut col[row * row_stride..][..self.out_volume];
            for (slot, &source) in dst.iter_mut().zip(sources) {
                *slot = plane.get(source as usize).copied().unwrap_or(T::ZERO);
            }
        }
    }

    /// Add the patch matrix laid out as [`Self::im2col`] writes it back into one image's group
    /// channels `x`.
    pub fn col2im<T: Element>(&self, col: &[T], row_stride: usize, x: &mut [T]) {
        let channels = x.len() / self.in_volume.max(1);
        for (row, channel, sources) in self.rows(channels) {
            let plane = &mut x[channel * self.in_volume..][..self.in_volume];
            let src = &col[row * row_stride..][..self.out_volume];
            for (&value, &source) in src.iter().zip(sources) {
                if let Some(slot) = plane.get_mut(source as usize) {
                    *slot += value;
                }
            }
        }
    }
}

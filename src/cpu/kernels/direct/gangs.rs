//! How a direct weight gradient cuts the batch into chunks and gangs of images.

use crate::spec::ConvGeometry;

use crate::cpu::kernels::element::items_per_thread;

/// Elements of a gang's bordered copies up to which the gang grows (1 MiB of f32, within L2
/// with the panel).
const MAX_GANG_COPY: usize = 1 << 18;

/// How a direct weight gradient cuts the batch: one contiguous chunk of images per thread,
/// whose partial gradients are summed in chunk order (so the result does not depend on
/// scheduling), each chunk's images in gangs whose copies lie side by side.
pub(super) struct Gangs {
    /// Images per chunk (the last may hold fewer).
    pub per_chunk: usize,
    /// Chunks of the batch.
    pub chunks: usize,
    /// Images per gang: enough for `points` output points, their copies (`image_len`
    /// elements each) within [`MAX_GANG_COPY`], at least one and at most a chunk.
    pub gang: usize,
}

impl Gangs {
    /// The gangs of `g`'s batch for gangs of at least `points` output points.
    pub fn new(g: &ConvGeometry, points: usize, image_len: usize) -> Self {
        let per_chunk = items_per_thread(g.batch);
        let gang = points
            .div_ceil(g.out_volume().max(1))
            .min(MAX_GANG_COPY / image_len.max(1))
            .clamp(1, per_chunk);
        Self {
            per_chunk,
            chunks: g.batch.div_ceil(per_chunk),
            gang,
        }
    }

    /// The images of chunk `chunk`.
    pub fn images(&self, g: &ConvGeometry, chunk: usize) -> core::ops::Range<usize> {
        chunk * self.per_chunk..((chunk + 1) * self.per_chunk).min(g.batch)
    }
}

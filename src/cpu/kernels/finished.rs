//! What a convolution's forward pass hands on as it finishes its output: runs of whole
//! `(n, c)` planes, each while the task that wrote it still holds it in cache. A batch norm
//! after the conv sums its statistics there (`plane_moments.rs`), instead of reading the whole
//! output back from memory in a pass of its own.

use super::element::Element;

/// Takes runs of whole output planes the moment a pass has finished them. Calls come from
/// the pass's tasks, so from several threads at once, each about planes of its own.
pub trait FinishedPlanes<T>: Sync {
    /// `values` holds whole planes of the output, final, starting `offset` values into it.
    fn finished(&self, offset: usize, values: &[T]);
}

/// A pass that hands nothing on: the plain forward pass.
pub struct Unwatched;

impl<T> FinishedPlanes<T> for Unwatched {
    #[inline(always)]
    fn finished(&self, _: usize, _: &[T]) {}
}

/// An f32 kernel's planes handed to a receiver of the call's element type, which is f32 (the
/// f32-only kernels check that before they run).
pub struct AsElement<'a, T>(pub &'a dyn FinishedPlanes<T>);

impl<T: Element> FinishedPlanes<f32> for AsElement<'_, T> {
    fn finished(&self, offset: usize, values: &[f32]) {
        self.0.finished(offset, bytemuck::cast_slice(values));
    }
}

//! Values routed by index within each plane: max-unpooling and its gradient, and the gradient
//! of max pooling.

use super::per_plane;
use crate::cpu::kernels::element::{Element, zeroed_per_plane};

/// Gradient routed through indices: `x_grad[index[o]] += out_grad[o]` in every plane. Also the
/// forward pass of max-unpool (with `x` as `out_grad`), where duplicate indices carry equal
/// values.
///
/// # Panics
/// On an index outside the plane, naming `op`.
pub fn scatter_by_index<T: Element, I: Copy + Into<i64> + Sync>(
    op: &str,
    values: &[T],
    indices: &[I],
    value_volume: usize,
    target_volume: usize,
    accumulate: bool,
) -> Vec<T> {
    let planes = values.len().checked_div(value_volume).unwrap_or(0);
    zeroed_per_plane(
        planes,
        target_volume,
        value_volume + target_volume,
        || (),
        |_, p, target_plane| {
            let value_plane = &values[p * value_volume..][..value_volume];
            let index_plane = &indices[p * value_volume..][..value_volume];
            for (value, &index) in value_plane.iter().zip(index_plane) {
                let Some(slot) = plane_slot(index.into(), target_volume) else {
                    bad_index(op, index.into(), target_volume)
                };
                if accumulate {
                    target_plane[slot] += *value;
                } else {
                    target_plane[slot] = *value;
                }
            }
        },
    )
}

/// `out[o] = source[index[o]]` in every plane: the gradient of max-unpool.
///
/// # Panics
/// On an index outside the plane, naming `op`.
pub fn gather_by_index<T: Element, I: Copy + Into<i64> + Sync>(
    op: &str,
    source: &[T],
    indices: &[I],
    source_volume: usize,
    out_volume: usize,
) -> Vec<T> {
    let mut out = vec![T::ZERO; indices.len()];
    per_plane(&mut out, out_volume, out_volume, |p, out_plane| {
        let source_plane = &source[p * source_volume..][..source_volume];
        let index_plane = &indices[p * out_volume..][..out_volume];
        for (slot, &index) in out_plane.iter_mut().zip(index_plane) {
            let Some(at) = plane_slot(index.into(), source_volume) else {
                bad_index(op, index.into(), source_volume)
            };
            *slot = source_plane[at];
        }
    });
    out
}

/// `index` as a position in a plane of `plane` elements, if it is one.
#[inline(always)]
fn plane_slot(index: i64, plane: usize) -> Option<usize> {
    usize::try_from(index).ok().filter(|&i| i < plane)
}

/// The panic of an index outside its plane; out of line, so the loops that check keep their
/// values in registers.
#[cold]
#[inline(never)]
fn bad_index(op: &str, index: i64, plane: usize) -> ! {
    panic!("{op}: index {index} is out of range for a plane of {plane} elements")
}

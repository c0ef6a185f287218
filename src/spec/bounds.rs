//! The largest values the crate computes with: sizes, kernel values and element widths. A leaf
//! of the spec layer, so the checks (`limits.rs`) and the error messages (`error.rs`) both
//! read it.

/// The largest size, padded length, extent or byte count: `isize::MAX`, Rust's largest
/// allocation, and PyTorch's largest int64 size, so no valid PyTorch call is refused.
pub const MAX_SIZE: usize = isize::MAX as usize;

/// The largest size, window-table entry or parameter the CubeCL kernels hold: they compute in
/// 32 bits. Every device holds values up to this; a CubeCL device refuses larger ones
/// ([`SpecErrorKind::DeviceLimit`](super::SpecErrorKind::DeviceLimit)).
pub const MAX_KERNEL_VALUE: usize = u32::MAX as usize;

/// The widest element the ops write (f64, and i64 pooling indices). Output element counts are
/// checked at this width, so an output of any dtype fits in [`MAX_SIZE`] bytes.
pub const MAX_ELEMENT_BYTES: usize = 8;

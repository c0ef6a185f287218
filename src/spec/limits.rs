//! The checks that keep every later product, sum and cast of the shape math in range: what
//! validation accepts, the compute code can index without overflow.

use super::bounds::{MAX_ELEMENT_BYTES, MAX_SIZE};
use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};

/// Reject a parameter with an entry above [`MAX_SIZE`] (which PyTorch cannot even express).
pub fn check_size(op: &'static str, param: &'static str, values: &[usize]) -> SpecResult<()> {
    match values.iter().find(|&&value| value > MAX_SIZE) {
        Some(&value) => Err(too_large(op, param.to_string(), value as u128)),
        None => Ok(()),
    }
}

/// `len + pad_begin + pad_end` on spatial dim `dim`, rejected above [`MAX_SIZE`]: every index
/// into the padded input then fits an `isize`.
pub fn check_padded_len(
    op: &'static str,
    dim: usize,
    len: usize,
    (pad_begin, pad_end): (usize, usize),
) -> SpecResult<usize> {
    let padded = len as u128 + pad_begin as u128 + pad_end as u128;
    at_most_max_size(padded)
        .ok_or_else(|| too_large(op, format!("padded length on spatial dim {dim}"), padded))
}

/// The product of `values` (a kernel's volume, say), rejected above [`MAX_SIZE`]: a pool's
/// divisor, the window volume, is then a plain `usize` product.
pub fn check_volume(op: &'static str, what: &'static str, values: &[usize]) -> SpecResult<usize> {
    let volume = product(values.iter().copied()).unwrap_or(u128::MAX);
    at_most_max_size(volume).ok_or_else(|| too_large(op, what.to_string(), volume))
}

/// Reject an output of `dims` whose elements would not fit in [`MAX_SIZE`] bytes at
/// [`MAX_ELEMENT_BYTES`] each: no allocator can return it, and Rust's aborts the process
/// rather than fail when asked. An empty output's other dims must fit too, since its strides
/// are their products. Returns the element count.
pub fn check_elements(op: &'static str, dims: &[usize]) -> SpecResult<usize> {
    let strides = product(dims.iter().map(|&dim| dim.max(1)));
    let limit = (MAX_SIZE / MAX_ELEMENT_BYTES) as u128;
    match strides {
        Some(strides) if strides <= limit => Ok(dims.iter().product()),
        _ => Err(SpecError::new(
            op,
            Kind::OutputTooLarge {
                dims: dims.to_vec(),
            },
        )),
    }
}

/// The exact product, `None` past `u128`.
fn product(mut values: impl Iterator<Item = usize>) -> Option<u128> {
    values.try_fold(1u128, |product, value| product.checked_mul(value as u128))
}

/// `value` as a `usize` if it is at most [`MAX_SIZE`].
fn at_most_max_size(value: u128) -> Option<usize> {
    usize::try_from(value)
        .ok()
        .filter(|&value| value <= MAX_SIZE)
}

fn too_large(op: &'static str, what: String, value: u128) -> SpecError {
    SpecError::new(op, Kind::TooLarge { what, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_stop_at_isize_max() {
        assert!(check_size("conv1d", "stride", &[MAX_SIZE]).is_ok());
        let error = check_size("conv1d", "stride", &[1, MAX_SIZE + 1]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "conv1d: stride 9223372036854775808 is above the largest size 9223372036854775807"
        );
        assert_eq!(check_padded_len("max_pool1d", 0, 4, (1, 2)), Ok(7));
        assert!(check_padded_len("max_pool1d", 0, 4, (usize::MAX, usize::MAX)).is_err());
        assert_eq!(
            check_volume("avg_pool3d", "kernel volume", &[2, 3, 4]),
            Ok(24)
        );
        assert!(check_volume("avg_pool3d", "kernel volume", &[1 << 40, 1 << 40, 1]).is_err());
    }

    #[test]
    fn element_counts_fit_eight_byte_elements() {
        assert_eq!(check_elements("conv2d", &[2, 3, 4]), Ok(24));
        assert!(check_elements("conv2d", &[1 << 30, 1 << 30, 8]).is_err());
        assert!(check_elements("conv2d", &[1 << 30, 1 << 29, 1]).is_ok());
        assert_eq!(check_elements("conv2d", &[0, 3, 1 << 40]), Ok(0));
        // An empty output's strides are the products of its other dims.
        assert!(check_elements("conv2d", &[0, usize::MAX, 2]).is_err());
    }
}

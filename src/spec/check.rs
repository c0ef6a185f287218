//! The validators every op shares: non-zero sizes, groups that divide the channels, matching
//! counts, the input's rank, non-empty inputs. Each names the op and the offending values in
//! its typed error.

use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};

/// Validate `groups` against a layer's `[in, out]` channel counts, as a module's config must
/// before any input exists.
pub fn check_channel_groups(
    op: &'static str,
    channels: [usize; 2],
    groups: usize,
) -> SpecResult<()> {
    check_nonzero(op, "groups", &[groups])?;
    check_divides(op, "in_channels", channels[0], groups)?;
    check_divides(op, "out_channels", channels[1], groups)
}

/// Validate the size fields of a module's config, each of which must be non-zero (kernel
/// sizes, strides, dilations), as a module must at `init`: `module` names it in the error.
pub fn check_nonzero_fields(
    module: &'static str,
    fields: &[(&'static str, &[usize])],
) -> SpecResult<()> {
    fields
        .iter()
        .try_for_each(|&(field, value)| check_nonzero(module, field, value))
}

pub(super) fn check_nonzero(
    op: &'static str,
    param: &'static str,
    value: &[usize],
) -> SpecResult<()> {
    if value.contains(&0) {
        return Err(SpecError::new(
            op,
            Kind::Zero {
                param,
                value: value.to_vec(),
            },
        ));
    }
    Ok(())
}

pub(super) fn check_divides(
    op: &'static str,
    what: &'static str,
    channels: usize,
    groups: usize,
) -> SpecResult<()> {
    if !channels.is_multiple_of(groups) {
        return Err(SpecError::new(
            op,
            Kind::GroupsDivide {
                what,
                channels,
                groups,
            },
        ));
    }
    Ok(())
}

pub(super) fn check_eq(
    op: &'static str,
    what: &'static str,
    expected: usize,
    actual: usize,
) -> SpecResult<()> {
    if expected != actual {
        return Err(SpecError::new(
            op,
            Kind::Mismatch {
                what,
                expected,
                actual,
            },
        ));
    }
    Ok(())
}

/// Check the rank of a spatial-N input: batched `(N, C, *spatial)` or unbatched `(C, *spatial)`.
/// Returns whether it is batched.
pub fn check_input_rank(op: &'static str, spatial: usize, rank: usize) -> SpecResult<bool> {
    if rank == spatial + 2 || rank == spatial + 1 {
        Ok(rank == spatial + 2)
    } else {
        Err(SpecError::new(
            op,
            Kind::Rank {
                arg: "x",
                expected: vec![spatial + 1, spatial + 2],
                actual: rank,
            },
        ))
    }
}

/// Reject an input `x = (N, C, *spatial)` with an empty dim from `first` on: pools take an
/// empty batch only (`first = 1`); convolutions also an empty channel axis (`first = 2`: an
/// empty output, or a bias-only one), since PyTorch's kernel-size check fails on an empty
/// spatial dim.
pub(super) fn check_nonempty_from(op: &'static str, x: &[usize], first: usize) -> SpecResult<()> {
    if x[first..].contains(&0) {
        return Err(SpecError::new(op, Kind::EmptyInput { dims: x.to_vec() }));
    }
    Ok(())
}

/// Reject a pool input with an empty channel or spatial dim (`x = (N, C, *spatial)`), as
/// PyTorch does ("with optional 0 dim batch size"): only the batch may be empty.
pub fn check_nonempty(op: &'static str, x: &[usize]) -> SpecResult<()> {
    check_nonempty_from(op, x, 1)
}

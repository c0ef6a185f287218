//! Config checks at `init`: a bad field panics there, with a message naming the module and the
//! field, rather than at the first forward with a message that names neither. Modules built
//! another way (loaded records, `From` burn-nn) are still validated by every forward.

use burn::tensor::Device;

use crate::functional::check_parameter_memory;
use crate::spec::{check_channel_groups, check_nonzero_fields};

/// Panic with the module's name unless `groups` divides both channel counts (as burn-nn does
/// at `init`, before any input exists).
pub(crate) fn check_groups(module: &'static str, channels: [usize; 2], groups: usize) {
    check_channel_groups(module, channels, groups).unwrap_or_else(|error| panic!("{error}"));
}

/// Panic with the module's name if a size field (kernel, stride, dilation) has a zero entry.
pub(crate) fn check_sizes(module: &'static str, fields: &[(&'static str, &[usize])]) {
    check_nonzero_fields(module, fields).unwrap_or_else(|error| panic!("{error}"));
}

/// Panic with the module's name unless `device` can hold its parameter `param` of `dims`: Burn
/// draws parameters lazily, so the first forward would otherwise abort the process.
pub(crate) fn check_parameter(
    module: &'static str,
    param: &'static str,
    dims: &[usize],
    device: &Device,
) {
    check_parameter_memory(module, param, dims, device).unwrap_or_else(|error| panic!("{error}"));
}

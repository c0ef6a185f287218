//! Conversions between burn-nn's modules and configs and ours. burn-nn to ours is always
//! lossless. Ours to burn-nn is `From` where burn-nn can hold everything, and `TryFrom` where we
//! have a setting it lacks (a conv's `padding_mode` or fused activation, avg-pool
//! `divisor_override`, an adaptive pool's `None` size): converting a module that uses it fails
//! instead of silently changing what it computes.
//!
//! Module conversions move the parameters, so their ids (and optimizer state keyed on them)
//! carry over.

use burn::nn::conv as burn_conv;
use burn::nn::pool as burn_pool;

use super::*;
use crate::spec::{PaddingMode, SpecError, SpecErrorKind};

/// Field-by-field conversions of one type pair. `extra` lists our fields burn-nn lacks, each
/// with the value a burn-nn item means and the name of the setting burn-nn cannot hold.
macro_rules! convert {
    ($ours:ident <=> $theirs:path { $($field:ident),* }) => {
        impl From<$theirs> for $ours {
            fn from(item: $theirs) -> Self {
                Self { $($field: item.$field),* }
            }
        }
        impl From<$ours> for $theirs {
            fn from(item: $ours) -> Self {
                Self { $($field: item.$field),* }
            }
        }
    };
    (
        $ours:ident <=> $theirs:path { $($field:ident),* }
        extra { $($extra:ident: $default:expr => $setting:literal),* }
    ) => {
        impl From<$theirs> for $ours {
            fn from(item: $theirs) -> Self {
                Self { $($field: item.$field,)* $($extra: $default),* }
            }
        }
        impl TryFrom<$ours> for $theirs {
            type Error = SpecError;
            fn try_from(item: $ours) -> Result<Self, SpecError> {
                $(if item.$extra != $default {
                    let kind = SpecErrorKind::NotInBurnNn { setting: $setting };
                    return Err(SpecError::new(stringify!($ours), kind));
                })*
                Ok(Self { $($field: item.$field),* })
            }
        }
    };
}

macro_rules! convert_conv {
    ($($ours:ident, $config:ident, { $($config_field:ident),* };)*) => {$(
        convert!(
            $ours <=> burn_conv::$ours { weight, bias, stride, kernel_size, dilation, groups, padding }
            extra {
                padding_mode: PaddingMode::Zeros => "padding_mode other than zeros",
                activation: None => "fused activation"
            }
        );
        convert!(
            $config <=> burn_conv::$config {
                $($config_field,)* kernel_size, stride, dilation, groups, padding, bias, initializer
            }
            extra {
                padding_mode: PaddingMode::Zeros => "padding_mode other than zeros",
                activation: None => "fused activation"
            }
        );
    )*};
}

convert_conv! {
    Conv1d, Conv1dConfig, { channels_in, channels_out };
    Conv2d, Conv2dConfig, { channels };
    Conv3d, Conv3dConfig, { channels };
}

macro_rules! convert_conv_transpose {
    ($($ours:ident, $config:ident;)*) => {$(
        convert!(
            $ours <=> burn_conv::$ours {
                weight, bias, stride, kernel_size, dilation, groups, padding, padding_out, channels
            }
            extra { activation: None => "fused activation" }
        );
        convert!(
            $config <=> burn_conv::$config {
                channels, kernel_size, stride, dilation, groups, padding, padding_out, bias,
                initializer
            }
            extra { activation: None => "fused activation" }
        );
    )*};
}

convert_conv_transpose! {
    ConvTranspose1d, ConvTranspose1dConfig;
    ConvTranspose2d, ConvTranspose2dConfig;
    ConvTranspose3d, ConvTranspose3dConfig;
}

convert!(MaxPool1d <=> burn_pool::MaxPool1d { stride, kernel_size, padding, dilation, ceil_mode });
convert!(MaxPool2d <=> burn_pool::MaxPool2d { stride, kernel_size, padding, dilation, ceil_mode });
convert!(MaxPool1dConfig <=> burn_pool::MaxPool1dConfig {
    kernel_size, stride, padding, dilation, ceil_mode
});
convert!(MaxPool2dConfig <=> burn_pool::MaxPool2dConfig {
    kernel_size, strides, padding, dilation, ceil_mode
});

macro_rules! convert_avg_pool {
    ($($ours:ident, $config:ident, $stride:ident;)*) => {$(
        convert!(
            $ours <=> burn_pool::$ours { stride, kernel_size, padding, count_include_pad, ceil_mode }
            extra { divisor_override: None => "divisor_override" }
        );
        convert!(
            $config <=> burn_pool::$config {
                kernel_size, $stride, padding, count_include_pad, ceil_mode
            }
            extra { divisor_override: None => "divisor_override" }
        );
    )*};
}

convert_avg_pool! {
    AvgPool1d, AvgPool1dConfig, stride;
    AvgPool2d, AvgPool2dConfig, strides;
}

convert!(AdaptiveAvgPool1d <=> burn_pool::AdaptiveAvgPool1d { output_size });
convert!(AdaptiveAvgPool1dConfig <=> burn_pool::AdaptiveAvgPool1dConfig { output_size });

/// burn-nn's 2D and 3D adaptive pools hold plain sizes: ours convert back unless a size is
/// `None` (keep the input's), which burn-nn cannot hold.
macro_rules! convert_adaptive_avg {
    ($($ours:ident),*) => {$(
        impl From<burn_pool::$ours> for $ours {
            fn from(item: burn_pool::$ours) -> Self {
                Self { output_size: item.output_size.map(Some) }
            }
        }
        impl TryFrom<$ours> for burn_pool::$ours {
            type Error = SpecError;
            fn try_from(item: $ours) -> Result<Self, SpecError> {
                let output_size = every_size(stringify!($ours), item.output_size)?;
                Ok(Self { output_size })
            }
        }
    )*};
}

convert_adaptive_avg!(
    AdaptiveAvgPool2d,
    AdaptiveAvgPool2dConfig,
    AdaptiveAvgPool3d,
    AdaptiveAvgPool3dConfig
);

/// Each output size, or the error that one is `None`.
fn every_size<const N: usize>(
    op: &'static str,
    output_size: [Option<usize>; N],
) -> Result<[usize; N], SpecError> {
    let mut sizes = [0; N];
    for (size, given) in sizes.iter_mut().zip(output_size) {
        *size = given.ok_or_else(|| {
            let setting = "output_size of None (keep the input size)";
            SpecError::new(op, SpecErrorKind::NotInBurnNn { setting })
        })?;
    }
    Ok(sizes)
}

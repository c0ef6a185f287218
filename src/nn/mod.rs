//! Drop-in `Module`s for every operator, in the style of `burn::nn`.
//!
//! Burn 0.22 routes `burn::nn` modules straight to its built-in ops, so this crate brings its own
//! modules. Where burn-nn has the module, ours has the same config fields, defaults,
//! initializers and parameter names and shapes (`weight`, `bias`), so a record saved from one
//! loads into the other, and `From` converts between them. On top of burn-nn: conv
//! `padding_mode` and a fused `activation` (not part of the record), pooling
//! `forward_with_indices`, `divisor_override`, 3D pools, and the adaptive-max, fractional, LP
//! and unpool modules. Every `forward` also accepts an unbatched
//! input, as PyTorch's modules do.
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use burn::nn::PaddingConfig2d;
//! use burn_convpool::PaddingMode;
//! use burn_convpool::nn::{Conv2dConfig, MaxPool2dConfig};
//!
//! let device = Device::flex();
//! let conv = Conv2dConfig::new([3, 8], [3, 3])
//!     .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
//!     .with_padding_mode(PaddingMode::Reflect)
//!     .init(&device);
//! let pool = MaxPool2dConfig::new([2, 2]).init();
//! let x = Tensor::<4>::ones([2, 3, 16, 16], &device);
//! let (out, indices) = pool.forward_with_indices(conv.forward(x));
//! assert_eq!(out.dims(), [2, 8, 8, 8]);
//! assert_eq!(indices.dims(), [2, 8, 8, 8]);
//! ```
//!
//! # Porting from PyTorch
//!
//! A PyTorch module's arguments map onto our config's fields as below (2D shown; 1D takes
//! scalars where 2D takes `[usize; 2]`, 3D takes `[usize; 3]`). The names that differ come
//! from burn-nn, whose modules ours stay compatible with.
//!
//! | PyTorch | burn-convpool |
//! | --- | --- |
//! | `nn.Conv2d(in, out, k)` | `Conv2dConfig::new([in, out], [k, k])`; 1D: `Conv1dConfig::new(in, out, k)` |
//! | `stride=s`, `dilation=d`, `groups=g`, `bias=False` | `.with_stride([s, s])`, `.with_dilation([d, d])`, `.with_groups(g)`, `.with_bias(false)` |
//! | `padding=p` (conv, max and avg pool) | `.with_padding(PaddingConfig2d::Explicit(p, p, p, p))`: top, left, bottom, right; 1D `PaddingConfig1d::Explicit(left, right)`; 3D `PaddingConfig3d::Explicit(d, h, w)` |
//! | `padding="same"`, `padding="valid"` | `PaddingConfig2d::Same` (PyTorch's split: the odd element last, dilation counted), `PaddingConfig2d::Valid` |
//! | `padding_mode="reflect"` (`"replicate"`, `"circular"`) | `.with_padding_mode(PaddingMode::Reflect)` |
//! | `nn.ConvTranspose2d(in, out, k, padding=p, output_padding=q)` | `ConvTranspose2dConfig::new([in, out], [k, k]).with_padding([p, p]).with_padding_out([q, q])` |
//! | `nn.MaxPool2d(k, stride=s, ceil_mode=True)` | `MaxPool2dConfig::new([k, k]).with_strides([s, s]).with_ceil_mode(true)`: `strides` in 2D and 3D, `stride` in 1D, as burn-nn |
//! | `return_indices=True` | `forward_with_indices` (flat indices in each `(n, c)` plane, as PyTorch's) |
//! | `nn.AvgPool2d(k, count_include_pad=False, divisor_override=d)` | `AvgPool2dConfig::new([k, k]).with_count_include_pad(false).with_divisor_override(Some(d))` |
//! | `nn.LPPool2d(p, k, stride=s)` | `LpPool2dConfig::new(p, [k, k]).with_stride([s, s])` |
//! | `nn.AdaptiveAvgPool2d((None, 7))`, `nn.AdaptiveMaxPool2d(3)` | `AdaptiveAvgPool2dConfig::new([None, Some(7)])`, `AdaptiveMaxPool2dConfig::new([3, 3])` |
//! | `nn.MaxUnpool2d(k, stride=s, padding=p)`, `unpool(x, indices, output_size=...)` | `MaxUnpool2dConfig::new([k, k]).with_stride([s, s]).with_padding([p, p])`, `forward_with_output_size(x, indices, [h, w])` |
//! | `nn.FractionalMaxPool2d(k, output_size=o)` (`output_ratio=r`) | `FractionalMaxPool2dConfig::new([k, k]).with_output_size(Some([o, o]))` (`.with_output_ratio(Some([r, r]))`) |
//! | `nn.Sequential(nn.Conv2d(...), nn.ReLU())` (`nn.LeakyReLU(a)`, `nn.SiLU()`, `nn.GELU()`, `nn.GELU(approximate="tanh")`) | `Conv2dConfig::new(...).with_activation(Some(Activation::Relu))` (`LeakyRelu { negative_slope: a }`, `Silu`, `Gelu`, `GeluTanh`): both in one pass |
//! | `torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)` | [`fuse_conv_bn`]`(conv, &bn)` |
//! | state_dict keys | the module's field names, then `weight` and `bias`; load them with burn-store (`burn::store`, features `safetensors`, `pytorch`): `SafetensorsStore::from_file(path).with_from_adapter(PyTorchToBurnAdapter)`, or `PytorchStore::from_file(path)` for a `torch.save` file; the adapter renames batch norms' `weight`/`bias` to `gamma`/`beta` and transposes `Linear` weights, and `.with_key_remapping(from, to)` renames the rest |
//!
//! `examples/port_pytorch/` ports a network with every family this way; its test checks the
//! outputs and every gradient against PyTorch's.
//!
//! Models generated from ONNX by burn-onnx hold `burn::nn` modules; `From` turns each into
//! ours (and `TryFrom` back), keeping the parameters:
//!
//! ```
//! use burn::nn::conv::Conv2dConfig as BurnConv2dConfig;
//! use burn::nn::pool::AdaptiveAvgPool2dConfig as BurnAdaptiveAvgPool2dConfig;
//! use burn::tensor::{Device, Tensor};
//! use burn_convpool::nn::{AdaptiveAvgPool2d, Conv2d};
//!
//! let device = Device::flex();
//! // Two layers of an imported model, as burn-onnx writes them.
//! let imported_conv = BurnConv2dConfig::new([3, 8], [3, 3]).init(&device);
//! let imported_pool = BurnAdaptiveAvgPool2dConfig::new([1, 1]).init();
//! let x = Tensor::<4>::ones([1, 3, 8, 8], &device);
//! let expected = imported_pool.forward(imported_conv.forward(x.clone()));
//!
//! let conv = Conv2d::from(imported_conv);
//! let pool = AdaptiveAvgPool2d::from(imported_pool);
//! let ours = pool.forward(conv.forward(x));
//! ours.to_data().assert_approx_eq::<f32>(&expected.into_data(), Default::default());
//!
//! // And back, for code that expects burn-nn's types.
//! let conv = burn::nn::conv::Conv2d::try_from(conv).expect("zeros padding");
//! assert_eq!(conv.weight.dims(), [8, 3, 3, 3]);
//! ```

mod adaptive;
mod conv;
mod conv_bn_act;
mod conv_transpose;
mod convert;
mod dims;
mod fractional;
mod fuse;
mod lp_pool;
mod max_unpool;
mod pool;
mod validate;

pub use adaptive::*;
pub use conv::*;
pub use conv_bn_act::*;
pub use conv_transpose::*;
pub use dims::{Dims, PaddingConfigNd};
pub use fractional::*;
pub use fuse::{FuseBatchNorm, fuse_conv_bn, try_fuse_conv_bn};
pub use lp_pool::*;
pub use max_unpool::*;
pub use pool::*;

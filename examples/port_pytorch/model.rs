//! `PortNet` of `make_checkpoint.py`, built from burn-convpool's modules (and Burn's `BatchNorm`
//! and `Linear`), field for field, so PyTorch's state_dict keys name its parameters.

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::nn::{PaddingConfig1d, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use burn_convpool::PaddingMode;
use burn_convpool::nn::*;

/// The network; each field's comment is its PyTorch line.
#[derive(Module, Debug)]
pub struct PortNet {
    /// `nn.Conv2d(1, 8, 3, padding=1, padding_mode="reflect")`
    pub stem: Conv2d,
    /// `nn.BatchNorm2d(8)`
    pub norm: BatchNorm,
    /// `nn.Conv2d(8, 8, 3, padding="same", dilation=2, groups=2)`
    pub grouped: Conv2d,
    /// `nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)`
    pub depthwise: Conv2d,
    /// `nn.MaxPool2d(3, stride=2, ceil_mode=True, return_indices=True)`
    pub max_pool: MaxPool2d,
    /// `nn.MaxUnpool2d(3, stride=2)`
    pub unpool: MaxUnpool2d,
    /// `nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)`
    pub avg_pool: AvgPool2d,
    /// `nn.LPPool2d(2, 2, stride=1)`
    pub lp_pool: LpPool2d,
    /// `nn.AdaptiveMaxPool2d((3, 3))`
    pub adaptive_max: AdaptiveMaxPool2d,
    /// `nn.AdaptiveAvgPool2d((None, 3))`
    pub adaptive_avg: AdaptiveAvgPool2d,
    /// `nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2)`
    pub up: ConvTranspose2d,
    /// `nn.Conv1d(4, 4, 4, padding="same", padding_mode="replicate")`
    pub sequence: Conv1d,
    /// `nn.Linear(4 * 36 + 8 * 7 * 3, 10)`, PyTorch's `fc` (the loader remaps the keys).
    pub head: Linear,
}

impl PortNet {
    /// A freshly initialized network, for the weights to be loaded into.
    pub fn new(device: &Device) -> Self {
        let one = PaddingConfig2d::Explicit(1, 1, 1, 1);
        Self {
            stem: Conv2dConfig::new([1, 8], [3, 3])
                .with_padding(one.clone())
                .with_padding_mode(PaddingMode::Reflect)
                .init(device),
            norm: BatchNormConfig::new(8).init(device),
            grouped: Conv2dConfig::new([8, 8], [3, 3])
                .with_padding(PaddingConfig2d::Same)
                .with_dilation([2, 2])
                .with_groups(2)
                .init(device),
            depthwise: Conv2dConfig::new([8, 8], [3, 3])
                .with_stride([2, 2])
                .with_padding(one.clone())
                .with_groups(8)
                .init(device),
            max_pool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_ceil_mode(true)
                .init(),
            unpool: MaxUnpool2dConfig::new([3, 3]).with_stride([2, 2]).init(),
            avg_pool: AvgPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(one)
                .with_ceil_mode(true)
                .with_count_include_pad(false)
                .init(),
            lp_pool: LpPool2dConfig::new(2.0, [2, 2]).with_stride([1, 1]).init(),
            adaptive_max: AdaptiveMaxPool2dConfig::new([3, 3]).init(),
            adaptive_avg: AdaptiveAvgPool2dConfig::new([None, Some(3)]).init(),
            up: ConvTranspose2dConfig::new([8, 4], [3, 3])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .with_padding_out([1, 1])
                .with_groups(2)
                .init(device),
            sequence: Conv1dConfig::new(4, 4, 4)
                .with_padding(PaddingConfig1d::Same)
                .with_padding_mode(PaddingMode::Replicate)
                .init(device),
            head: LinearConfig::new(4 * 36 + 8 * 7 * 3, 10).init(device),
        }
    }

    /// Logits of `(batch, 1, 16, 16)` images, as `PortNet.forward`.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let x = relu(self.norm.forward(self.stem.forward(x)));
        let x = relu(self.grouped.forward(x));
        let x = self.depthwise.forward(x);
        let (pooled, indices) = self.max_pool.forward_with_indices(x.clone());
        let [_, _, height, width] = x.dims();
        let sparse = self
            .unpool
            .forward_with_output_size(pooled, indices, [height, width]);
        let coarse = self.adaptive_max.forward(self.avg_pool.forward(sparse));
        let up = self.up.forward(coarse);
        let sequence = self.sequence.forward(up.flatten::<3>(2, 3));
        let energy = self.adaptive_avg.forward(self.lp_pool.forward(x));
        let features = Tensor::cat(
            vec![sequence.flatten::<2>(1, 2), energy.flatten::<2>(1, 3)],
            1,
        );
        self.head.forward(features)
    }
}

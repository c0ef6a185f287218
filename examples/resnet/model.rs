//! A small ResNet: a conv-batchnorm-relu stem with a max pool, three stages of basic blocks
//! (the first block of stages 2 and 3 downsamples, with a strided 1x1 conv-batchnorm shortcut),
//! global average pooling and a linear classifier.
//!
//! Every conv and pool comes from `burn_convpool::nn`. [`ResNet::into_builtin`] converts each of
//! them to burn-nn's module (the crate's `TryFrom`/`From`, parameters moved), so `--ops builtin`
//! trains the same network from the same initial weights and only the operators differ.
//! BatchNorm and Linear are Burn's in both. [`ResNet::into_fused`] keeps our convs and runs
//! each conv with the batch norm (and ReLU) after it as one block (`ConvBnAct2d::forward_pair`),
//! what `--fused` trains.

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use burn_convpool::Activation;
use burn_convpool::nn::{AdaptiveAvgPool2dConfig, Conv2dConfig, ConvBnAct2d, MaxPool2dConfig};

/// A conv layer on either set of operators; every one has a batch norm after it.
#[derive(Module, Debug)]
pub enum Conv {
    Ours(burn_convpool::nn::Conv2d),
    Builtin(burn::nn::conv::Conv2d),
    /// Ours, run with its batch norm and activation as one block.
    Fused(burn_convpool::nn::Conv2d),
}

impl Conv {
    /// `activation(bn(conv(x)))`, ReLU where `relu`.
    fn forward_bn(&self, bn: &BatchNorm, relu_after: bool, x: Tensor<4>) -> Tensor<4> {
        let out = match self {
            Self::Ours(conv) => bn.forward(conv.forward(x)),
            Self::Builtin(conv) => bn.forward(conv.forward(x)),
            Self::Fused(conv) => {
                let activation = relu_after.then_some(Activation::Relu);
                return ConvBnAct2d::forward_pair(conv, bn, activation, x);
            }
        };
        if relu_after { relu(out) } else { out }
    }

    /// The same layer, parameters moved, on burn-nn's conv.
    fn into_builtin(self) -> Self {
        match self {
            Self::Ours(conv) | Self::Fused(conv) => {
                Self::Builtin(conv.try_into().expect("zero padding"))
            }
            builtin => builtin,
        }
    }

    /// The same layer run with its batch norm as one block.
    fn into_fused(self) -> Self {
        match self {
            Self::Ours(conv) => Self::Fused(conv),
            other => other,
        }
    }
}

/// The stem's max pool on either set of operators.
#[derive(Module, Debug)]
pub enum MaxPool {
    Ours(burn_convpool::nn::MaxPool2d),
    Builtin(burn::nn::pool::MaxPool2d),
}

/// The head's global average pool on either set of operators.
#[derive(Module, Debug)]
pub enum GlobalPool {
    Ours(burn_convpool::nn::AdaptiveAvgPool2d),
    Builtin(burn::nn::pool::AdaptiveAvgPool2d),
}

/// `kernel x kernel` conv without bias (batchnorm follows), "same" padding for odd kernels.
fn conv(channels: [usize; 2], kernel: usize, stride: usize, device: &Device) -> Conv {
    let pad = kernel / 2;
    let config = Conv2dConfig::new(channels, [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false);
    Conv::Ours(config.init(device))
}

/// conv-bn-relu-conv-bn plus the shortcut, then relu.
#[derive(Module, Debug)]
pub struct BasicBlock {
    conv1: Conv,
    bn1: BatchNorm,
    conv2: Conv,
    bn2: BatchNorm,
    shortcut: Option<(Conv, BatchNorm)>,
}

impl BasicBlock {
    fn new(channels: [usize; 2], stride: usize, device: &Device) -> Self {
        let [_, out] = channels;
        let shortcut = (stride != 1 || channels[0] != out).then(|| {
            (
                conv(channels, 1, stride, device),
                BatchNormConfig::new(out).init(device),
            )
        });
        Self {
            conv1: conv(channels, 3, stride, device),
            bn1: BatchNormConfig::new(out).init(device),
            conv2: conv([out, out], 3, 1, device),
            bn2: BatchNormConfig::new(out).init(device),
            shortcut,
        }
    }

    fn into_builtin(self) -> Self {
        Self {
            conv1: self.conv1.into_builtin(),
            conv2: self.conv2.into_builtin(),
            shortcut: self.shortcut.map(|(conv, bn)| (conv.into_builtin(), bn)),
            ..self
        }
    }

    fn into_fused(self) -> Self {
        Self {
            conv1: self.conv1.into_fused(),
            conv2: self.conv2.into_fused(),
            shortcut: self.shortcut.map(|(conv, bn)| (conv.into_fused(), bn)),
            ..self
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let identity = match &self.shortcut {
            Some((conv, bn)) => conv.forward_bn(bn, false, x.clone()),
            None => x.clone(),
        };
        let out = self.conv1.forward_bn(&self.bn1, true, x);
        let out = self.conv2.forward_bn(&self.bn2, false, out);
        relu(out + identity)
    }
}

/// The network's shape: input channels, stem width, blocks per stage, classes.
#[derive(Debug, Clone, Copy)]
pub struct ResNetConfig {
    pub in_channels: usize,
    pub width: usize,
    pub blocks: usize,
    pub classes: usize,
}

/// Stem, three stages (width, 2 width, 4 width), head.
#[derive(Module, Debug)]
pub struct ResNet {
    stem: Conv,
    stem_bn: BatchNorm,
    stem_pool: MaxPool,
    stages: Vec<BasicBlock>,
    pool: GlobalPool,
    fc: Linear,
}

impl ResNet {
    pub fn new(config: ResNetConfig, device: &Device) -> Self {
        let width = config.width;
        let pool_config = MaxPool2dConfig::new([3, 3])
            .with_strides([2, 2])
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1));
        let mut stages = Vec::new();
        let mut channels = width;
        for (stage, stage_width) in [width, 2 * width, 4 * width].into_iter().enumerate() {
            for block in 0..config.blocks {
                let stride = if stage > 0 && block == 0 { 2 } else { 1 };
                stages.push(BasicBlock::new([channels, stage_width], stride, device));
                channels = stage_width;
            }
        }
        Self {
            stem: conv([config.in_channels, width], 3, 1, device),
            stem_bn: BatchNormConfig::new(width).init(device),
            stem_pool: MaxPool::Ours(pool_config.init()),
            stages,
            pool: GlobalPool::Ours(AdaptiveAvgPool2dConfig::new([1, 1]).init()),
            fc: LinearConfig::new(channels, config.classes).init(device),
        }
    }

    /// The same network, parameters moved, on burn-nn's modules (what `--ops builtin` trains).
    pub fn into_builtin(self) -> Self {
        let stem_pool = match self.stem_pool {
            MaxPool::Ours(pool) => MaxPool::Builtin(pool.into()),
            builtin => builtin,
        };
        let pool = match self.pool {
            GlobalPool::Ours(pool) => {
                GlobalPool::Builtin(pool.try_into().expect("the head pools to a fixed 1x1"))
            }
            builtin => builtin,
        };
        Self {
            stem: self.stem.into_builtin(),
            stem_pool,
            stages: self
                .stages
                .into_iter()
                .map(BasicBlock::into_builtin)
                .collect(),
            pool,
            ..self
        }
    }

    /// The same network, parameters kept, with each conv and its batch norm run as one block
    /// (what `--fused` trains).
    pub fn into_fused(self) -> Self {
        Self {
            stem: self.stem.into_fused(),
            stages: self
                .stages
                .into_iter()
                .map(BasicBlock::into_fused)
                .collect(),
            ..self
        }
    }

    /// Logits `(batch, classes)` of images `(batch, channels, height, width)`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = self.stem.forward_bn(&self.stem_bn, true, images);
        let mut x = match &self.stem_pool {
            MaxPool::Ours(pool) => pool.forward(x),
            MaxPool::Builtin(pool) => pool.forward(x),
        };
        for block in &self.stages {
            x = block.forward(x);
        }
        let x = match &self.pool {
            GlobalPool::Ours(pool) => pool.forward(x),
            GlobalPool::Builtin(pool) => pool.forward(x),
        };
        self.fc.forward(x.flatten(1, 3))
    }
}

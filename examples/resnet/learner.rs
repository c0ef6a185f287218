//! The ResNet under burn-train's `Learner`: the digit splits as data loaders, the model's train
//! and inference steps, and one call that runs `SupervisedTraining` with Adam, a cosine learning
//! rate, loss and accuracy metrics and a checkpoint per epoch (`<dir>/checkpoint/model-N.bpk`).
//!
//! Nothing here is specific to this crate's modules: a model built from them is an ordinary
//! Burn `Module`, so burn-train trains it as it would one built from `burn::nn`.

use std::path::Path;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::AdamConfig;
use burn::tensor::{Device, Int, Tensor};
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, LearningResult,
    MultiDeviceOptim, SupervisedTraining, TrainOutput, TrainStep, TrainingStrategy,
};

use super::data::Split;
use super::model::ResNet;

/// Images `(batch, 1, height, width)` and their labels.
#[derive(Clone, Debug)]
pub struct DigitBatch {
    pub images: Tensor<4>,
    pub labels: Tensor<1, Int>,
}

/// Gathers a batch of a split from the indices the data loader hands it.
#[derive(Clone)]
struct SplitBatcher {
    split: Arc<Split>,
}

impl Batcher<usize, DigitBatch> for SplitBatcher {
    fn batch(&self, items: Vec<usize>, device: &Device) -> DigitBatch {
        let (images, labels) = self.split.batch(&items, device);
        DigitBatch { images, labels }
    }
}

/// A data loader over every image of `split`, reshuffled each epoch when `shuffle` holds a seed.
fn loader(
    split: &Arc<Split>,
    batch_size: usize,
    shuffle: Option<u64>,
) -> Arc<dyn DataLoader<DigitBatch>> {
    let builder = DataLoaderBuilder::new(SplitBatcher {
        split: split.clone(),
    })
    .batch_size(batch_size);
    let builder = match shuffle {
        Some(seed) => builder.shuffle(seed),
        None => builder,
    };
    builder.build(InMemDataset::new((0..split.len()).collect()))
}

impl ResNet {
    /// Logits, their cross-entropy loss against the labels, and the labels: what the metrics read.
    pub fn classify(&self, batch: DigitBatch) -> ClassificationOutput {
        let logits = self.forward(batch.images);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.labels.clone());
        ClassificationOutput::new(loss, logits, batch.labels)
    }
}

impl TrainStep for ResNet {
    type Input = DigitBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: DigitBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.classify(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for ResNet {
    type Input = DigitBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: DigitBatch) -> ClassificationOutput {
        self.classify(batch)
    }
}

/// How to train: where checkpoints and metric logs go, for how long, and on which devices (the
/// model's own when empty; several run burn-train's data-parallel strategy, gradients summed on
/// the first).
pub struct Fit<'a> {
    pub dir: &'a Path,
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub seed: u64,
    pub devices: Vec<Device>,
    /// Burn's experiment log (`<dir>/experiment.log`) installs a global tracing subscriber; a
    /// process that trains more than once (the tests) leaves it off.
    pub experiment_log: bool,
}

/// Train `model` on `train`, validating on `valid` after every epoch, with Adam and a cosine
/// learning rate from `fit.lr` to zero. The result holds the trained model in inference mode.
pub fn fit(
    model: ResNet,
    train: &Arc<Split>,
    valid: &Arc<Split>,
    fit: &Fit,
) -> LearningResult<ResNet> {
    let steps = train.len().div_ceil(fit.batch_size) * fit.epochs;
    let scheduler = CosineAnnealingLrSchedulerConfig::new(fit.lr, steps)
        .init()
        .expect("a learning rate in (0, 1] and at least one step");
    let mut training = SupervisedTraining::new(
        fit.dir,
        loader(train, fit.batch_size, Some(fit.seed)),
        loader(valid, fit.batch_size, None),
    )
    .num_epochs(fit.epochs)
    .with_default_checkpointers()
    .metrics((LossMetric::new(), AccuracyMetric::new()))
    .summary();
    if !fit.experiment_log {
        training = training.with_application_logger(None);
    }
    if !fit.devices.is_empty() {
        training = training.with_training_strategy(TrainingStrategy::Default(
            ExecutionStrategy::multi(fit.devices.clone(), MultiDeviceOptim::OptimMainDevice),
        ));
    }
    training.launch(Learner::new(model, AdamConfig::new().init(), scheduler))
}

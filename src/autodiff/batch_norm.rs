//! The backward of a training-mode batch norm with its activation (`batch_norm_act`, and
//! `batch_norm_act_given` over a conv's statistics): one step for `x`, `gamma` and `beta` together, as Burn's own `batch_norm_train` records. It keeps `x`
//! (the activation's input is recomputed from it), the parameters and the batch statistics.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;

use crate::backend::ConvPoolBackend;
use crate::spec::Activation;

/// What the backward reads: `x`, `gamma`, `beta`, the mean and variance, epsilon and the
/// activation.
type State<B> = ([FloatTensor<B>; 5], f64, Option<Activation>);

/// Backward of a batch norm; its parents are `x`, `gamma` and `beta`.
#[derive(Debug)]
struct BatchNormActBackward;

impl<B: ConvPoolBackend> Backward<B, 3> for BatchNormActBackward {
    type State = State<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let ([x, gamma, beta, mean, variance], epsilon, activation) = ops.state;
        let out_grad = grads.consume::<B>(&ops.node);
        let (x_grad, gamma_grad, beta_grad) = B::batch_norm_act_backward(
            x, gamma, beta, mean, variance, out_grad, epsilon, activation,
        );
        for (parent, grad) in ops.parents.iter().zip([x_grad, gamma_grad, beta_grad]) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// Record `batch_norm_act` on the tape and compute it: `[out, mean, variance]`, the
/// statistics untracked.
pub(crate) fn record<B: ConvPoolBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    gamma: FloatTensor<Autodiff<B, C>>,
    beta: FloatTensor<Autodiff<B, C>>,
    epsilon: f64,
    activation: Option<Activation>,
) -> [FloatTensor<Autodiff<B, C>>; 3] {
    let prepared = BatchNormActBackward
        .prepare::<C>([x.node(), gamma.node(), beta.node()])
        .compute_bound()
        .stateful();
    let (x, gamma, beta) = (
        x.into_primitive(),
        gamma.into_primitive(),
        beta.into_primitive(),
    );
    match prepared {
        OpsKind::Tracked(prep) => {
            let (out, mean, variance) =
                B::batch_norm_act(x.clone(), gamma.clone(), beta.clone(), epsilon, activation);
            let state = (
                [x, gamma, beta, mean.clone(), variance.clone()],
                epsilon,
                activation,
            );
            [
                prep.finish(state, out),
                FloatTensor::<Autodiff<B, C>>::new(mean),
                FloatTensor::<Autodiff<B, C>>::new(variance),
            ]
        }
        OpsKind::UnTracked(prep) => {
            let (out, mean, variance) = B::batch_norm_act(x, gamma, beta, epsilon, activation);
            [
                prep.finish(out),
                FloatTensor::<Autodiff<B, C>>::new(mean),
                FloatTensor::<Autodiff<B, C>>::new(variance),
            ]
        }
    }
}

/// Record `batch_norm_act_given` on the tape and compute it: the same step as
/// [`record`]'s, over statistics that a conv summed (they are `x`'s, so the batch norm's
/// backward holds as it is).
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_given<B: ConvPoolBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    gamma: FloatTensor<Autodiff<B, C>>,
    beta: FloatTensor<Autodiff<B, C>>,
    mean: FloatTensor<Autodiff<B, C>>,
    variance: FloatTensor<Autodiff<B, C>>,
    epsilon: f64,
    activation: Option<Activation>,
) -> FloatTensor<Autodiff<B, C>> {
    let prepared = BatchNormActBackward
        .prepare::<C>([x.node(), gamma.node(), beta.node()])
        .compute_bound()
        .stateful();
    let [x, gamma, beta, mean, variance] =
        [x, gamma, beta, mean, variance].map(FloatTensor::<Autodiff<B, C>>::into_primitive);
    match prepared {
        OpsKind::Tracked(prep) => {
            let out = B::batch_norm_act_given(
                x.clone(),
                gamma.clone(),
                beta.clone(),
                mean.clone(),
                variance.clone(),
                epsilon,
                activation,
            );
            prep.finish(([x, gamma, beta, mean, variance], epsilon, activation), out)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::batch_norm_act_given(
            x, gamma, beta, mean, variance, epsilon, activation,
        )),
    }
}

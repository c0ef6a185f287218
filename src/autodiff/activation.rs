//! The backward of a stand-alone [`Activation`] (`ConvPoolBackend::activate`): its input is
//! kept, and the gradient before it is the output gradient times the derivative there.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;

use crate::backend::ConvPoolBackend;
use crate::spec::Activation;

/// Backward of an activation; its one parent is the input.
#[derive(Debug)]
pub(crate) struct ActivationBackward;

impl<B: ConvPoolBackend> Backward<B, 1> for ActivationBackward {
    type State = (Activation, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (activation, x) = ops.state;
        let out_grad = grads.consume::<B>(&ops.node);
        if let Some(node) = &ops.parents[0] {
            // The derivative's test of the ReLUs (`> 0`) holds on the input as on the output.
            grads.register::<B>(node.id, B::activation_backward(x, out_grad, activation));
        }
    }
}

/// Record `activation(x)` on the tape and compute it.
pub(crate) fn record<B: ConvPoolBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    activation: Activation,
) -> FloatTensor<Autodiff<B, C>> {
    match ActivationBackward
        .prepare::<C>([x.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let x = x.into_primitive();
            let out = B::activate(x.clone(), activation);
            prep.finish((activation, x), out)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::activate(x.into_primitive(), activation)),
    }
}

//! Backward steps of `conv` and `conv_transpose`, with or without bias: one [`ConvBackward`]
//! for all four, generic over its number of parents (2 without bias, 3 with).

use burn::backend::autodiff::{
    Autodiff, NodeId,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, NodeGuard, Ops, OpsKind},
};
use burn::backend::{TensorMetadata, tensor::FloatTensor};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::backend::ConvPoolBackend;
use crate::spec::spatial;

/// Which convolution a node recorded, with its options.
#[derive(Debug, Clone)]
pub(crate) enum ConvKind {
    Conv(ConvOptions<3>),
    Transpose(ConvTransposeOptions<3>),
}

impl ConvKind {
    fn forward<B: ConvPoolBackend>(
        &self,
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        bias: Option<FloatTensor<B>>,
    ) -> FloatTensor<B> {
        match (self, bias) {
            (Self::Conv(o), None) => B::conv(x, weight, o.clone()),
            (Self::Conv(o), Some(bias)) => B::conv_with_bias(x, weight, bias, o.clone()),
            (Self::Transpose(o), None) => B::conv_transpose(x, weight, o.clone()),
            (Self::Transpose(o), Some(bias)) => {
                B::conv_transpose_with_bias(x, weight, bias, o.clone())
            }
        }
    }

    fn x_backward<B: ConvPoolBackend>(
        &self,
        weight: FloatTensor<B>,
        out_grad: FloatTensor<B>,
        x_size: [usize; 3],
    ) -> FloatTensor<B> {
        match self {
            Self::Conv(o) => B::conv_x_backward(weight, out_grad, x_size, o.clone()),
            Self::Transpose(o) => B::conv_transpose_x_backward(weight, out_grad, x_size, o.clone()),
        }
    }

    fn weight_backward<B: ConvPoolBackend>(
        &self,
        x: FloatTensor<B>,
        out_grad: FloatTensor<B>,
        kernel_size: [usize; 3],
    ) -> FloatTensor<B> {
        match self {
            Self::Conv(o) => B::conv_weight_backward(x, out_grad, kernel_size, o.clone()),
            Self::Transpose(o) => {
                B::conv_transpose_weight_backward(x, out_grad, kernel_size, o.clone())
            }
        }
    }
}

/// What the backward step needs: checkpointed `x` and `weight`, their spatial sizes, the op.
#[derive(Debug, Clone)]
pub(crate) struct ConvState {
    kind: ConvKind,
    x: NodeId,
    weight: NodeId,
    x_size: [usize; 3],
    kernel_size: [usize; 3],
}

/// Backward of a (transposed) convolution; parents are `[x, weight]` or `[x, weight, bias]`.
#[derive(Debug)]
pub(crate) struct ConvBackward;

impl<B: ConvPoolBackend, const N: usize> Backward<B, N> for ConvBackward {
    type State = ConvState;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let out_grad = grads.consume::<B>(&ops.node);
        let state = ops.state;
        let [node_x, node_weight] = [&ops.parents[0], &ops.parents[1]];
        if let Some(node) = node_x {
            let weight = checkpointer.retrieve_node_output::<FloatTensor<B>>(state.weight);
            let x_grad = state
                .kind
                .x_backward::<B>(weight, out_grad.clone(), state.x_size);
            grads.register::<B>(node.id, x_grad);
        }
        if let Some(node) = node_weight {
            let x = checkpointer.retrieve_node_output::<FloatTensor<B>>(state.x);
            let weight_grad =
                state
                    .kind
                    .weight_backward::<B>(x, out_grad.clone(), state.kernel_size);
            grads.register::<B>(node.id, weight_grad);
        }
        if let Some(Some(node)) = ops.parents.get(2) {
            grads.register::<B>(node.id, B::conv_bias_backward(out_grad));
        }
    }
}

/// Record a (transposed) convolution on the tape and run its forward pass.
pub(crate) fn record<B: ConvPoolBackend, C: CheckpointStrategy>(
    kind: ConvKind,
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
    bias: Option<FloatTensor<Autodiff<B, C>>>,
) -> FloatTensor<Autodiff<B, C>> {
    match bias {
        None => record_with_parents::<B, C, 2>([x.node(), weight.node()], kind, x, weight, None),
        Some(bias) => {
            let parents = [x.node(), weight.node(), bias.node()];
            record_with_parents::<B, C, 3>(parents, kind, x, weight, Some(bias.into_primitive()))
        }
    }
}

/// [`record`] for `N` parents: `[x, weight]` or `[x, weight, bias]`.
fn record_with_parents<B: ConvPoolBackend, C: CheckpointStrategy, const N: usize>(
    parents: [NodeGuard; N],
    kind: ConvKind,
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
    bias: Option<FloatTensor<B>>,
) -> FloatTensor<Autodiff<B, C>> {
    match ConvBackward
        .prepare::<C>(parents)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let state = ConvState {
                x_size: spatial(&x.primitive().shape()),
                kernel_size: spatial(&weight.primitive().shape()),
                x: prep.checkpoint(&x),
                weight: prep.checkpoint(&weight),
                kind: kind.clone(),
            };
            let out = kind.forward::<B>(x.into_primitive(), weight.into_primitive(), bias);
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => {
            prep.finish(kind.forward::<B>(x.into_primitive(), weight.into_primitive(), bias))
        }
    }
}

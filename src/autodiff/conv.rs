//! Backward steps of `conv` and `conv_transpose`, with or without bias and a fused activation:
//! one [`ConvBackward`] for all, generic over its number of parents (2 without bias, 3 with).
//! An activation's backward turns the output gradient into the gradient before it first.

use burn::backend::autodiff::{
    Autodiff, NodeId,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, NodeGuard, Ops, OpsKind, OpsPrep, Tracked},
};
use burn::backend::{TensorMetadata, tensor::FloatTensor};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::backend::ConvPoolBackend;
use crate::spec::{Activation, spatial};

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
        activation: Option<Activation>,
    ) -> FloatTensor<B> {
        match (self, bias) {
            (Self::Conv(o), None) => B::conv(x, weight, o.clone(), activation),
            (Self::Conv(o), Some(bias)) => {
                B::conv_with_bias(x, weight, bias, o.clone(), activation)
            }
            (Self::Transpose(o), None) => B::conv_transpose(x, weight, o.clone(), activation),
            (Self::Transpose(o), Some(bias)) => {
                B::conv_transpose_with_bias(x, weight, bias, o.clone(), activation)
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

/// What the backward step needs: checkpointed `x` and `weight`, their spatial sizes, the op,
/// and for a fused activation, the value its derivative is taken at.
#[derive(Debug, Clone)]
pub(crate) struct ConvState<B: ConvPoolBackend> {
    kind: ConvKind,
    x: NodeId,
    weight: NodeId,
    x_size: [usize; 3],
    kernel_size: [usize; 3],
    activation: Option<Saved<B>>,
}

impl<B: ConvPoolBackend> ConvState<B> {
    /// The state of a `kind` node over `x` and `weight`, both checkpointed, with no activation
    /// yet, and the two operands' primitives.
    fn checkpointed<C: CheckpointStrategy, const N: usize>(
        kind: ConvKind,
        prep: &mut OpsPrep<ConvBackward, B, Self, C, N, Tracked>,
        x: FloatTensor<Autodiff<B, C>>,
        weight: FloatTensor<Autodiff<B, C>>,
    ) -> (Self, FloatTensor<B>, FloatTensor<B>) {
        let state = Self {
            kind,
            x: prep.checkpoint(&x),
            weight: prep.checkpoint(&weight),
            x_size: spatial(&x.primitive().shape()),
            kernel_size: spatial(&weight.primitive().shape()),
            activation: None,
        };
        (state, x.into_primitive(), weight.into_primitive())
    }
}

/// A fused activation and the value its backward reads
/// ([`Activation::derivative_from_output`]): the convolution's output, or its result before
/// the activation.
#[derive(Debug, Clone)]
pub(crate) struct Saved<B: ConvPoolBackend> {
    activation: Activation,
    value: FloatTensor<B>,
}

/// Backward of a (transposed) convolution; parents are `[x, weight]` or `[x, weight, bias]`.
#[derive(Debug)]
pub(crate) struct ConvBackward;

impl<B: ConvPoolBackend, const N: usize> Backward<B, N> for ConvBackward {
    type State = ConvState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let state = ops.state;
        let out_grad = match state.activation {
            None => grads.consume::<B>(&ops.node),
            Some(saved) => {
                B::activation_backward(saved.value, grads.consume::<B>(&ops.node), saved.activation)
            }
        };
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
    activation: Option<Activation>,
) -> FloatTensor<Autodiff<B, C>> {
    match bias {
        None => {
            let parents = [x.node(), weight.node()];
            record_with_parents::<B, C, 2>(parents, (kind, activation), x, weight, None)
        }
        Some(bias) => {
            let parents = [x.node(), weight.node(), bias.node()];
            let bias = Some(bias.into_primitive());
            record_with_parents::<B, C, 3>(parents, (kind, activation), x, weight, bias)
        }
    }
}

/// [`record`] for `N` parents: `[x, weight]` or `[x, weight, bias]`.
fn record_with_parents<B: ConvPoolBackend, C: CheckpointStrategy, const N: usize>(
    parents: [NodeGuard; N],
    (kind, activation): (ConvKind, Option<Activation>),
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
            let (mut state, x, weight) = ConvState::checkpointed(kind, &mut prep, x, weight);
            let (out, activation) = match activation {
                None => (state.kind.forward::<B>(x, weight, bias, None), None),
                // The activation fused, its output kept for the backward.
                Some(activation) if activation.derivative_from_output() => {
                    let out = state.kind.forward::<B>(x, weight, bias, Some(activation));
                    let value = out.clone();
                    (out, Some(Saved { activation, value }))
                }
                // The backward needs the value before the activation, which the fused pass
                // does not keep: the activation runs as a pass of its own.
                Some(activation) => {
                    let value = state.kind.forward::<B>(x, weight, bias, None);
                    let out = B::activate(value.clone(), activation);
                    (out, Some(Saved { activation, value }))
                }
            };
            state.activation = activation;
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => {
            let (x, weight) = (x.into_primitive(), weight.into_primitive());
            prep.finish(kind.forward::<B>(x, weight, bias, activation))
        }
    }
}

/// Record `conv_moments` on the tape and run it: the output's node is a `conv`'s, the
/// statistics are untracked (a batch norm's backward accounts for them, see
/// `batch_norm::record_given`).
pub(crate) fn record_moments<B: ConvPoolBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
    options: ConvOptions<3>,
) -> [FloatTensor<Autodiff<B, C>>; 3] {
    let untracked = FloatTensor::<Autodiff<B, C>>::new;
    match ConvBackward
        .prepare::<C>([x.node(), weight.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let kind = ConvKind::Conv(options.clone());
            let (state, x, weight) = ConvState::checkpointed(kind, &mut prep, x, weight);
            let (out, mean, variance) = B::conv_moments(x, weight, options);
            [
                prep.finish(state, out),
                untracked(mean),
                untracked(variance),
            ]
        }
        OpsKind::UnTracked(prep) => {
            let (x, weight) = (x.into_primitive(), weight.into_primitive());
            let (out, mean, variance) = B::conv_moments(x, weight, options);
            [prep.finish(out), untracked(mean), untracked(variance)]
        }
    }
}

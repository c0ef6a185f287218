//! Backward steps of the pooling ops. Each stores only what its gradient primitive needs:
//! indices for the max family and unpool, the input size (and options) for the averages, the
//! checkpointed input for LP pooling.

use burn::backend::autodiff::{
    Autodiff, NodeId,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind, unary},
};
use burn::backend::{
    TensorMetadata,
    tensor::{FloatTensor, IntTensor},
};

use crate::backend::ConvPoolBackend;
use crate::spec::spatial;
use crate::spec::{AvgPoolNdOptions, LpPoolOptions, WindowRule};

/// Record a one-input op whose backward state is derived from the forward's extra output.
pub(crate) fn record<B, C, Bw, R>(
    backward: Bw,
    x: FloatTensor<Autodiff<B, C>>,
    forward: impl FnOnce(FloatTensor<B>) -> (FloatTensor<B>, R),
    state: impl FnOnce(&R, [usize; 3]) -> Bw::State,
) -> (FloatTensor<Autodiff<B, C>>, R)
where
    B: ConvPoolBackend,
    C: CheckpointStrategy,
    Bw: Backward<B, 1>,
{
    match backward.prepare::<C>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let x_size = spatial(&x.primitive().shape());
            let (out, extra) = forward(x.into_primitive());
            let state = state(&extra, x_size);
            (prep.finish(state, out), extra)
        }
        OpsKind::UnTracked(prep) => {
            let (out, extra) = forward(x.into_primitive());
            (prep.finish(out), extra)
        }
    }
}

/// Max, adaptive max and fractional max pooling: the gradient goes to the recorded indices.
#[derive(Debug)]
pub(crate) struct IndexBackward;

impl<B: ConvPoolBackend> Backward<B, 1> for IndexBackward {
    type State = (IntTensor<B>, [usize; 3], WindowRule);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (indices, x_size, windows) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::max_pool_backward(grad, indices, x_size, windows)
        });
    }
}

/// Average pooling.
#[derive(Debug)]
pub(crate) struct AvgBackward;

impl<B: ConvPoolBackend> Backward<B, 1> for AvgBackward {
    type State = ([usize; 3], AvgPoolNdOptions<3>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (x_size, options) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::avg_pool_backward(grad, x_size, options)
        });
    }
}

/// Adaptive average pooling.
#[derive(Debug)]
pub(crate) struct AdaptiveAvgBackward;

impl<B: ConvPoolBackend> Backward<B, 1> for AdaptiveAvgBackward {
    type State = [usize; 3];

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let x_size = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::adaptive_avg_pool_backward(grad, x_size)
        });
    }
}

/// Max-unpool: the gradient is gathered back at the indices.
#[derive(Debug)]
pub(crate) struct UnpoolBackward;

impl<B: ConvPoolBackend> Backward<B, 1> for UnpoolBackward {
    type State = IntTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let indices = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::max_unpool_backward(grad, indices)
        });
    }
}

/// LP pooling: the gradient needs the input again, and the output (each window's share).
#[derive(Debug)]
pub(crate) struct LpBackward;

impl<B: ConvPoolBackend> Backward<B, 1> for LpBackward {
    type State = (NodeId, FloatTensor<B>, LpPoolOptions<3>);

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let (x_id, output, options) = ops.state;
        let x = checkpointer.retrieve_node_output::<FloatTensor<B>>(x_id);
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::lp_pool_backward(x, output, grad, options)
        });
    }
}

/// Record LP pooling, checkpointing its input and keeping its output.
pub(crate) fn record_lp<B: ConvPoolBackend, C: CheckpointStrategy>(
    x: FloatTensor<Autodiff<B, C>>,
    options: LpPoolOptions<3>,
) -> FloatTensor<Autodiff<B, C>> {
    match LpBackward
        .prepare::<C>([x.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let x_id = prep.checkpoint(&x);
            let out = B::lp_pool(x.into_primitive(), options.clone());
            prep.finish((x_id, out.clone(), options), out)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::lp_pool(x.into_primitive(), options)),
    }
}

//! How much work one unit of a kernel takes, packed or spread, tuned per shape.
//!
//! The window kernels' unit computes a run of up to 8 consecutive outputs (forward) or inputs
//! (backward) along the last axis, sharing its index arithmetic and loads, and the direct
//! convolution's unit up to 128 outputs (a few channels at a run of positions); spread, a unit
//! computes one position, and consecutive units touch consecutive addresses, which a GPU's
//! memory system merges into few transactions. The whole-plane kernel (global pooling) gives a
//! plane one unit, summing in order, or spreads it over up to 256 lanes that combine partial
//! results in a fixed tree, which a GPU needs when planes are few or long. Packed suits a
//! device whose units are few wide SIMD lanes (a CPU driver) and any device given planes or
//! rows that fill it alone; the `global_avg_pool` and `resnet_stem_maxpool` rows decide it
//! per device.
//!
//! With the `autotune` feature CubeCL's tuner times both once per kernel, bucketed shape and
//! device, and keeps the faster for the process (a convolution's choice is one more candidate
//! of its tuner, `tune.rs`); without it, packed. Only the whole-plane sums round differently
//! between the two. A device whose kernels are pinned to ours ([`super::choice`]) runs their
//! packing.

use std::sync::Arc;

use burn::tensor::DType;
use burn_cubecl::{CubeTuneId, tensor::CubeTensor};
use cubecl::AutotuneKey;
use cubecl::tune::{LocalTuner, Tunable, TunableSet, anchor, local_tuner};
use serde::{Deserialize, Serialize};

use super::choice::{CubeKernels, Packing, kernels_of};

/// What a tuning result is cached under: the kernel, the values that change its code (kernel
/// sizes, strides), and its sizes, bucketed.
#[derive(Hash, Eq, PartialEq, Debug, Clone, Serialize, Deserialize, AutotuneKey)]
pub struct PackingKey {
    kernel: String,
    dtype: DType,
    exact: Vec<usize>,
    sizes: Vec<usize>,
}

impl PackingKey {
    /// The key of `kernel` on `dtype`: `exact` as given, `sizes` bucketed as CubeCL's
    /// `anchor` does (`CUBECL_AUTOTUNE_LEVEL` sets how finely).
    pub(super) fn of(kernel: &str, dtype: DType, exact: &[usize], sizes: &[usize]) -> Self {
        Self {
            kernel: kernel.to_string(),
            dtype,
            exact: exact.to_vec(),
            sizes: sizes
                .iter()
                .map(|&size| anchor(size, None, None, None))
                .collect(),
        }
    }
}

/// One call: its key and the kernel's launch for either choice.
#[derive(Clone)]
struct Call {
    key: PackingKey,
    launch: Arc<dyn Fn(Packing) + Send + Sync>,
}

static TUNER: LocalTuner<PackingKey, CubeTuneId> = local_tuner!("pool-packing");

/// Run the pool kernel `launch` on `like`'s device with the choice the module docs describe;
/// `spreads`: whether spreading changes the launch at all (a row of one output does not).
/// `key` is built only when the tuner is asked.
pub(super) fn run(
    like: &CubeTensor,
    key: impl FnOnce() -> PackingKey,
    spreads: bool,
    launch: impl Fn(Packing) + Send + Sync + 'static,
) {
    if !spreads {
        return launch(Packing::Packed);
    }
    match kernels_of(&like.device) {
        CubeKernels::Ours(ours) => launch(ours.packing),
        CubeKernels::Tuned | CubeKernels::Burn if cfg!(feature = "autotune") => {
            let client = like.client.clone();
            let id = CubeTuneId::new(&client, &like.device);
            let set = TUNER.init(&id, || {
                [Packing::Packed, Packing::Spread].into_iter().fold(
                    TunableSet::<PackingKey, Call, (), Packing>::new_cloning_inputs(
                        |call: &Call| call.key.clone(),
                    ),
                    |set, packing| {
                        set.with(Tunable::identified(packing, move |call: Call| {
                            (call.launch)(packing);
                            Ok::<(), String>(())
                        }))
                    },
                )
            });
            let call = Call {
                key: key(),
                launch: Arc::new(launch),
            };
            TUNER.execute(&id, &client, set, call);
        }
        CubeKernels::Tuned | CubeKernels::Burn => launch(Packing::Packed),
    }
}

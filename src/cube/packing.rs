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
//! between the two. `BURN_CONVPOOL_PACKING=packed|spread` pins the choice of the pools and of
//! convolutions pinned to our kernels, to reproduce those sums bitwise across processes or to
//! test one launch.

use std::sync::{Arc, OnceLock};

use burn::tensor::DType;
use burn_cubecl::{CubeTuneId, tensor::CubeTensor};
use cubecl::AutotuneKey;
use cubecl::tune::{LocalTuner, Tunable, TunableSet, anchor, local_tuner};
use serde::{Deserialize, Serialize};

/// The two ways a kernel shares its work among units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Packing {
    /// A run of positions (or a whole plane) per unit.
    Packed,
    /// One position per unit (or many lanes per plane).
    Spread,
}

impl core::fmt::Display for Packing {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Packed => "packed",
            Self::Spread => "spread",
        })
    }
}

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

/// `BURN_CONVPOOL_PACKING` = `tuned` (or unset) | `packed` | `spread`, read once.
pub(super) fn pinned() -> Option<Packing> {
    static CHOICE: OnceLock<Option<Packing>> = OnceLock::new();
    *CHOICE.get_or_init(|| match std::env::var("BURN_CONVPOOL_PACKING").as_deref() {
        Ok("packed") => Some(Packing::Packed),
        Ok("spread") => Some(Packing::Spread),
        Ok("tuned") | Err(_) => None,
        Ok(other) => {
            panic!("BURN_CONVPOOL_PACKING={other}: expected tuned, packed or spread")
        }
    })
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
    match pinned() {
        Some(packing) => launch(packing),
        None if cfg!(feature = "autotune") => {
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
        None => launch(Packing::Packed),
    }
}

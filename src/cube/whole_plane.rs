//! How many units share a plane in the whole-plane pool kernel (global pooling).
//!
//! One lane per plane sums in order and needs no barrier: the fastest choice where the planes
//! alone fill the device, and on lavapipe, whose units are SIMD lanes of a few CPU cores (the
//! ResNet head, 8x512 planes of 7x7, took 1.1 ms spread over 8 lanes against 0.6 ms with one).
//! A GPU given few or long planes needs several lanes per plane to keep enough loads in flight
//! (a 2x64x112x112 global pool is 128 units walking 12,544 elements each). With the
//! `autotune` feature the choice is CubeCL's tuner's, per bucketed shape and device, then fixed
//! for the process; without it, spreading wherever it applies. The two sum in different
//! orders, so `BURN_CONVPOOL_POOL_LANES=one|spread` pins the choice, e.g. to reproduce sums
//! bitwise across processes or to test one kernel.

use burn::tensor::DType;
use burn_convpool_kernels::pool::{Placement, PoolArgsLaunch, Reduction};
use burn_convpool_kernels::whole_plane::pool_whole_plane;
use burn_cubecl::{CubeTuneId, tensor::CubeTensor};
use cubecl::tune::{LocalTuner, Tunable, TunableSet, anchor, local_tuner};
use cubecl::{AutotuneKey, CubeCount, CubeDim, calculate_cube_count_elemwise, ir::ElemType};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::tensor::address_type;

/// Units a GPU needs in flight to hide memory latency: spreading further than this only adds
/// reduction steps.
const TARGET_UNITS: usize = 1 << 18;
/// Fewest elements a lane walks: below it the tree's barriers cost more than the loads they
/// spread.
const MIN_PER_LANE: usize = 4;
/// Largest cube (WebGPU's default limit on units per workgroup).
const MAX_CUBE: usize = 256;

/// One launch of the whole-plane kernel: its tensors (written in place: `out`, and `indices`
/// for `Max`) and scalars.
#[derive(Clone)]
pub(super) struct WholePlane {
    pub x: CubeTensor,
    pub spans: CubeTensor,
    pub out_grad: CubeTensor,
    pub out: CubeTensor,
    pub indices: CubeTensor,
    /// Builds the kernel's scalars (their launch type is not `Clone`).
    pub args: Arc<dyn Fn() -> PoolArgsLaunch + Send + Sync>,
    pub reduction: Reduction,
    pub placement: Placement,
    pub abs: bool,
    pub count_include_pad: bool,
    /// Value, index and accumulator types.
    pub types: [ElemType; 3],
    /// Elements per plane.
    pub elements: usize,
}

/// Launch `launch` with the lanes per plane chosen as the module docs say.
pub(super) fn run(launch: WholePlane) {
    let spread = spread_lanes(&launch);
    if spread == 1 {
        return run_with(launch, 1);
    }
    match pinned() {
        Some(Lanes::One) => run_with(launch, 1),
        Some(Lanes::Spread) => run_with(launch, spread),
        None if cfg!(feature = "autotune") => tuned(launch),
        None => run_with(launch, spread),
    }
}

/// The candidates: one lane per plane, or as many as [`spread_lanes`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lanes {
    One,
    Spread,
}

impl core::fmt::Display for Lanes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::One => "whole_plane_one_lane",
            Self::Spread => "whole_plane_spread",
        })
    }
}

/// `BURN_CONVPOOL_POOL_LANES` = `tuned` (or unset) | `one` | `spread`, read once.
fn pinned() -> Option<Lanes> {
    static CHOICE: std::sync::OnceLock<Option<Lanes>> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(
        || match std::env::var("BURN_CONVPOOL_POOL_LANES").as_deref() {
            Ok("one") => Some(Lanes::One),
            Ok("spread") => Some(Lanes::Spread),
            Ok("tuned") | Err(_) => None,
            Ok(other) => panic!("BURN_CONVPOOL_POOL_LANES={other}: expected tuned, one or spread"),
        },
    )
}

/// What a tuning result is cached under: the reduction's kind and the sizes, bucketed.
#[derive(Hash, Eq, PartialEq, Debug, Clone, Serialize, Deserialize, AutotuneKey)]
pub struct WholePlaneKey {
    /// A max (value and index in the tree) rather than a sum.
    max: bool,
    dtype: DType,
    planes: usize,
    elements: usize,
}

static TUNER: LocalTuner<WholePlaneKey, CubeTuneId> = local_tuner!("whole-plane");

fn tuned(launch: WholePlane) {
    let client = launch.out.client.clone();
    let id = CubeTuneId::new(&client, &launch.out.device);
    let set = TUNER.init(&id, || {
        let key = |launch: &WholePlane| WholePlaneKey {
            max: launch.reduction == Reduction::Max,
            dtype: launch.x.dtype,
            planes: anchor(launch.out.meta.num_elements(), None, None, None),
            elements: anchor(launch.elements, None, None, None),
        };
        [Lanes::One, Lanes::Spread].into_iter().fold(
            TunableSet::<WholePlaneKey, WholePlane, (), Lanes>::new_cloning_inputs(key),
            |set, lanes| {
                set.with(Tunable::identified(lanes, move |launch: WholePlane| {
                    let count = match lanes {
                        Lanes::One => 1,
                        Lanes::Spread => spread_lanes(&launch),
                    };
                    run_with(launch, count);
                    Ok::<(), String>(())
                }))
            },
        )
    });
    TUNER.execute(&id, &client, set, launch);
}

/// Units per cube of the kernel on this device.
fn cube_units(launch: &WholePlane) -> usize {
    let max_units = launch.out.client.properties().hardware.max_units_per_cube as usize;
    prev_power_of_two(MAX_CUBE.min(max_units).max(1))
}

/// Lanes per plane when spread: a power of two, enough units to keep a GPU busy, each lane
/// walking at least [`MIN_PER_LANE`] elements, at most a cube. One where a plane's indices
/// pass 32 bits (a lane's maximum is kept as a u32 index in shared memory).
fn spread_lanes(launch: &WholePlane) -> usize {
    if u32::try_from(launch.elements).is_err() {
        return 1;
    }
    let planes = launch.out.meta.num_elements().max(1);
    let wanted = TARGET_UNITS.div_ceil(planes);
    let by_work = launch.elements / MIN_PER_LANE;
    prev_power_of_two(wanted.min(by_work).clamp(1, cube_units(launch)))
}

/// The largest power of two not above `n` (`n >= 1`).
fn prev_power_of_two(n: usize) -> usize {
    1 << n.ilog2()
}

/// The launch with `lanes` units per plane.
fn run_with(launch: WholePlane, lanes: usize) {
    let cube_units = cube_units(&launch);
    let cube_dim = CubeDim::new_1d(cube_units as u32);
    let units = (launch.out.meta.num_elements() * lanes).max(1);
    let cube_count: CubeCount = calculate_cube_count_elemwise(&launch.out.client, units, cube_dim);
    let address = address_type(&[&launch.x, &launch.out, &launch.out_grad]);
    pool_whole_plane::launch(
        &launch.out.client.clone(),
        cube_count,
        cube_dim,
        address,
        launch.x.into_tensor_arg(),
        launch.spans.into_tensor_arg(),
        launch.out_grad.into_tensor_arg(),
        launch.out.into_tensor_arg(),
        launch.indices.into_tensor_arg(),
        (launch.args)(),
        launch.reduction,
        launch.placement,
        launch.abs,
        launch.count_include_pad,
        lanes,
        cube_units,
        launch.types,
    );
}

//! The whole-plane pool kernel's launch (global pooling): one lane per plane, or as many as
//! keep a GPU busy ([`packing`](super::packing) chooses), over contiguous planes or a dense
//! channels-last tensor.

use burn_convpool_kernels::pool::{Placement, PoolArgsLaunch, Reduction};
use burn_convpool_kernels::whole_plane::pool_whole_plane;
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise, ir::ElemType};
use std::sync::Arc;

use super::choice::Packing;
use super::launches::{Launch, note};
use super::packing::{self, PackingKey};
use super::tensor::address_type;

/// Units a GPU needs in flight to hide memory latency: spreading further than this only adds
/// reduction steps.
const TARGET_UNITS: usize = 1 << 18;
/// Fewest elements a lane walks: below it the tree's barriers cost more than the loads they
/// spread.
const MIN_PER_LANE: usize = 4;
/// Largest cube (WebGPU's default limit on units per workgroup).
const MAX_CUBE: usize = 256;
/// Most elements a lane walks: 2^15 iterations of the kernel's 16-element blocks. Mesa's
/// lavapipe (CI's device) ends a loop after 65535 iterations, so a lane walking more would
/// silently skip the rest of its plane; planes beyond `MAX_PER_LANE` per lane spread.
const MAX_PER_LANE: usize = 1 << 19;

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
    /// `x` is dense channels-last: a plane's elements lie `C` apart.
    pub channels_last: bool,
    /// Planes (neighbouring channels, channels-last) a unit reads as one vector.
    pub width: usize,
    /// Value, index and accumulator types.
    pub types: [ElemType; 3],
    /// Elements per plane.
    pub elements: usize,
}

/// Launch `launch` with one lane per plane (packed) or [`spread_lanes`] (spread), as
/// [`packing`](super::packing) chooses.
pub(super) fn run(launch: WholePlane) {
    let spread = spread_lanes(&launch);
    let (dtype, max) = (launch.x.dtype, launch.reduction == Reduction::Max);
    let sizes = [launch.out.meta.num_elements(), launch.elements];
    let exact = [
        usize::from(max),
        usize::from(launch.channels_last),
        launch.width,
    ];
    let key = move || PackingKey::of("whole_plane", dtype, &exact, &sizes);
    let out = launch.out.clone();
    let fewest = fewest_lanes(&launch);
    packing::run(&out, key, spread > fewest, move |packing| {
        let lanes = match packing {
            Packing::Packed => fewest,
            Packing::Spread => spread,
        };
        run_with(launch.clone(), lanes);
    });
}

/// Units per cube of the kernel on this device.
fn cube_units(launch: &WholePlane) -> usize {
    let max_units = launch.out.client.properties().hardware.max_units_per_cube as usize;
    prev_power_of_two(MAX_CUBE.min(max_units).max(1))
}

/// Whether lanes may share a plane: a lane's maximum is kept as a u32 index in shared memory,
/// so a plane whose indices pass 32 bits is walked by one lane.
fn lanes_can_share(launch: &WholePlane) -> bool {
    u32::try_from(launch.elements).is_ok()
}

/// Lanes per plane when packed: one, or as many as keep each lane within [`MAX_PER_LANE`]
/// elements (at most a cube).
fn fewest_lanes(launch: &WholePlane) -> usize {
    if !lanes_can_share(launch) {
        return 1;
    }
    let needed = launch.elements.div_ceil(MAX_PER_LANE).max(1);
    needed.next_power_of_two().min(cube_units(launch))
}

/// Lanes per plane (per vector of planes) when spread: a power of two, enough units to keep a
/// GPU busy, each lane walking at least [`MIN_PER_LANE`] elements, at most a cube, and never
/// fewer than [`fewest_lanes`].
fn spread_lanes(launch: &WholePlane) -> usize {
    if !lanes_can_share(launch) {
        return 1;
    }
    let groups = (launch.out.meta.num_elements() / launch.width).max(1);
    let wanted = TARGET_UNITS.div_ceil(groups);
    let by_work = launch.elements / MIN_PER_LANE;
    let spread = prev_power_of_two(wanted.min(by_work).clamp(1, cube_units(launch)));
    spread.max(fewest_lanes(launch))
}

/// The largest power of two not above `n` (`n >= 1`).
fn prev_power_of_two(n: usize) -> usize {
    1 << n.ilog2()
}

/// The launch with `lanes` units per plane.
fn run_with(launch: WholePlane, lanes: usize) {
    let cube_units = cube_units(&launch);
    let cube_dim = CubeDim::new_1d(cube_units as u32);
    let units = (launch.out.meta.num_elements() / launch.width * lanes).max(1);
    let cube_count: CubeCount = calculate_cube_count_elemwise(&launch.out.client, units, cube_dim);
    let address = address_type(&[&launch.x, &launch.out, &launch.out_grad]);
    note(Launch::Kernel("pool_whole_plane"));
    pool_whole_plane::launch(
        &launch.out.client.clone(),
        cube_count,
        cube_dim,
        address,
        launch.width,
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
        launch.channels_last,
        lanes,
        cube_units,
        launch.types,
    );
}

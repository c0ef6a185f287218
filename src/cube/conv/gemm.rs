//! Our passes on cubek-matmul's multi-level GEMM routines, reading and writing our tensors in
//! place through the layouts of `burn_convpool_kernels::conv::gemm`: the routines Burn's
//! implicit GEMMs run on, with our groups, layouts and exact semantics. The unit routine with
//! register tiles and the plane routine with interleaved tiles run on every device (CI's
//! lavapipe included), so they check the layouts and the plane routine that the tensor-core
//! tiles share. Each result is repaired as Burn's are (`repair.rs`): the GEMM multiplies the
//! padding's zeros like any other value. cubek has no split-k, so a weight gradient's long
//! reduction runs in one cube per output tile.

use burn_convpool_kernels::conv::GemmKind;
use burn_convpool_kernels::conv::gemm::{
    GemmBias, GemmBiasLaunch, GemmLhs, GemmLhsLaunch, GemmOut, GemmOutLaunch, GemmRhs,
    GemmRhsLaunch, WeightLhs, WeightLhsLaunch, WeightOut, WeightOutLaunch, WeightRhs,
    WeightRhsLaunch,
};
use burn_convpool_kernels::cubek_matmul::definition::{
    AccumulatorOperand, MatmulGlobalElems, MatmulProblem, MatmulVectorSizes,
};
use burn_convpool_kernels::cubek_matmul::multi_level::args::{
    BatchedCoords, InputRuntimeArg, TensorArgs, TensorInputsLaunch, TensorOutputLaunch,
};
use burn_convpool_kernels::cubek_matmul::multi_level::components::global::memory::{
    NoopLayout, NoopLayoutLaunch,
};
use burn_convpool_kernels::cubek_matmul::multi_level::components::stage::PartitionBuffering;
use burn_convpool_kernels::cubek_matmul::multi_level::components::tile::TileMatmulKind;
use burn_convpool_kernels::cubek_matmul::multi_level::definition::{
    BatchMatmulBlueprint, TilingScheme,
};
use burn_convpool_kernels::cubek_matmul::multi_level::routines::batch::simple::{
    SimpleAlgorithm, SimpleArgs,
};
use burn_convpool_kernels::cubek_matmul::multi_level::routines::batch::simple_unit::SimpleUnitAlgorithm;
use burn_convpool_kernels::cubek_matmul::multi_level::{BatchMatmulRoutine, launch_kernel_virtual};
use burn_convpool_kernels::cubek_matmul::routine::BlueprintStrategy;
use burn_convpool_kernels::cubek_std::MatrixLayout;
use burn_cubecl::tensor::CubeTensor;
use cubecl::std::tensor::launch::ViewArg;
use cubecl::std::tensor::layout::{Coords1d, VirtualLayoutLaunch};

use crate::spec::ConvGeometry;

use super::repair::{repair_gemm, repair_weight};
use super::{Sides, conv_args, empty_like_layout, gemm_sizes};
use crate::cube::choice::GemmTile;
use crate::cube::launches::{Launch, note};
use crate::cube::precision::{excludes_tensor_cores, precision_of};
use crate::cube::tensor::{
    LaunchError, address_type, channels_last, contiguous, dims5, empty, float_type, strided,
    strides5, zeros,
};

type Inputs = InputRuntimeArg<TensorArgs>;

/// Our forward pass (`kind` `Forward`: `lhs` = x, `rhs` = weight) or input gradient (`Data`:
/// `lhs` = output gradient, `rhs` = weight), `out = lhs (*) rhs [+ bias]`, on cubek's routine
/// for `tile`; a strided input gradient reads the output gradient only where the stride
/// divides (the rest is out of bounds).
pub fn gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    tile: GemmTile,
    (lhs, rhs, bias): (CubeTensor, CubeTensor, Option<CubeTensor>),
) -> Result<CubeTensor, LaunchError> {
    let (lhs, rhs, bias) = (strided(lhs), contiguous(rhs), bias.map(contiguous));
    let out_dims = match kind {
        GemmKind::Data => geometry.in_shape(),
        _ => geometry.out_shape(),
    };
    let out = empty_like_layout(&lhs, out_dims);
    if out.meta.num_elements() == 0 {
        return Ok(out);
    }
    let sides = Sides::of_gemm(kind, &lhs, &out);
    let (m, n, k) = sizes(geometry, kind)?;
    let (read_channels, written_channels) = match kind {
        GemmKind::Data => (geometry.out_per_group(), geometry.in_per_group()),
        _ => (geometry.in_per_group(), geometry.out_per_group()),
    };
    let lhs_vector = channel_vector(&lhs, read_channels);
    let out_vector = match &bias {
        Some(bias) => channel_vector(&out, written_channels).min(aligned_vector(bias)),
        None => channel_vector(&out, written_channels),
    };
    let vectors = MatmulVectorSizes {
        lhs: lhs_vector,
        rhs: 1,
        out: out_vector,
    };
    let inputs = TensorInputsLaunch::new(
        noop(),
        ViewArg::new_tensor::<GemmLhs>(
            lhs.clone().into_tensor_arg(),
            GemmLhsLaunch::new(conv_args(geometry, &sides), m, k, kind, lhs_vector),
        ),
        noop(),
        ViewArg::new_tensor::<GemmRhs>(
            rhs.clone().into_tensor_arg(),
            GemmRhsLaunch::new(conv_args(geometry, &sides), k, n, kind),
        ),
        bias.as_ref().map(|_| noop()).into(),
        bias.clone()
            .map(|bias| {
                let layout = GemmBiasLaunch::new(m, n, out_vector);
                ViewArg::new_tensor::<GemmBias>(bias.into_tensor_arg(), layout)
            })
            .into(),
    );
    let output = ViewArg::new_tensor::<GemmOut>(
        out.clone().into_tensor_arg(),
        GemmOutLaunch::new(conv_args(geometry, &sides), m, n, kind, out_vector),
    );
    let operands = [&lhs, &rhs, &out];
    // The activation is read along `k` (channels, where it is channels-last), the weight
    // along `k` too.
    let layouts = (MatrixLayout::RowMajor, MatrixLayout::ColMajor);
    let problem = problem(
        geometry.groups,
        (m, n, k),
        layouts,
        &operands,
        bias.is_some(),
    )?;
    launch(tile, (problem, vectors), &operands, inputs, output)?;
    repair_gemm(geometry, kind, (lhs, rhs, bias), out)
}

/// Our weight gradient, `weight_grad = out_grad (*) x`, on cubek's routine for `tile`.
pub fn weight(
    geometry: &ConvGeometry,
    tile: GemmTile,
    out_grad: CubeTensor,
    x: CubeTensor,
) -> Result<CubeTensor, LaunchError> {
    let (out_grad, x) = (strided(out_grad), strided(x));
    let (m, n, k) = sizes(geometry, GemmKind::Weight)?;
    if k == 0 {
        return Ok(zeros(&x, &geometry.weight_shape(), x.dtype));
    }
    let out = empty(&x, &geometry.weight_shape(), x.dtype);
    let sides = Sides::new(&x, &out_grad);
    // Channels-last operands run along channels: the output gradient down `m`, `x` along `n`.
    let lhs_vector = channel_vector(&out_grad, geometry.out_per_group());
    let rhs_vector = channel_vector(&x, geometry.in_per_group());
    let vectors = MatmulVectorSizes {
        lhs: lhs_vector,
        rhs: rhs_vector,
        out: 1,
    };
    let layouts = (
        along(channels_last(&out_grad), MatrixLayout::ColMajor),
        along(channels_last(&x), MatrixLayout::RowMajor),
    );
    let inputs = TensorInputsLaunch::new(
        noop(),
        ViewArg::new_tensor::<WeightLhs>(
            out_grad.clone().into_tensor_arg(),
            WeightLhsLaunch::new(conv_args(geometry, &sides), m, k, lhs_vector),
        ),
        noop(),
        ViewArg::new_tensor::<WeightRhs>(
            x.clone().into_tensor_arg(),
            WeightRhsLaunch::new(conv_args(geometry, &sides), k, n, rhs_vector),
        ),
        None.into(),
        None.into(),
    );
    let output = ViewArg::new_tensor::<WeightOut>(
        out.clone().into_tensor_arg(),
        WeightOutLaunch::new(conv_args(geometry, &sides), m, n),
    );
    let operands = [&out_grad, &x, &out];
    let problem = problem(geometry.groups, (m, n, k), layouts, &operands, false)?;
    launch(tile, (problem, vectors), &operands, inputs, output)?;
    repair_weight(geometry, x, out_grad, out)
}

/// `(m, n, k)` of one group's GEMM of `kind`, each within cubek's 32-bit coordinates.
fn sizes(geometry: &ConvGeometry, kind: GemmKind) -> Result<(u32, u32, u32), LaunchError> {
    let (m, n, k) = gemm_sizes(geometry, kind);
    let fit = |value: usize| u32::try_from(value).map_err(|_| LaunchError::Table { value });
    Ok((fit(m)?, fit(n)?, fit(k)?))
}

/// The batch layout of every view: a GEMM's batch is its group.
fn noop() -> VirtualLayoutLaunch<Coords1d, Coords1d> {
    VirtualLayoutLaunch::new::<NoopLayout>(NoopLayoutLaunch::new())
}

/// The layout cubek's loaders walk an operand in: along its channels (`channels`) where they
/// lie side by side, else the other way.
fn along(channels_side_by_side: bool, channels: MatrixLayout) -> MatrixLayout {
    match (channels_side_by_side, channels) {
        (true, layout) => layout,
        (false, MatrixLayout::RowMajor) => MatrixLayout::ColMajor,
        (false, MatrixLayout::ColMajor) => MatrixLayout::RowMajor,
    }
}

/// The problem of `groups` GEMMs of `(m, n, k)` (cubek's batch axis) over `operands`, the
/// first one's dtype the GEMM's (the caller checked them), whose lhs and rhs the loaders walk
/// as `layouts` say, with a bias where `has_bias`.
fn problem(
    groups: usize,
    (m, n, k): (u32, u32, u32),
    (lhs_layout, rhs_layout): (MatrixLayout, MatrixLayout),
    operands: &[&CubeTensor],
    has_bias: bool,
) -> Result<MatmulProblem, LaunchError> {
    let dtype = float_type(operands[0])?;
    let [m, n, k] = [m, n, k].map(|size| size as usize);
    let mut problem = MatmulProblem::from_parameters(
        m,
        n,
        k,
        [groups].into(),
        [groups].into(),
        lhs_layout,
        rhs_layout,
        MatrixLayout::RowMajor,
        None,
        None,
        MatmulGlobalElems {
            lhs: dtype,
            rhs: dtype,
            out: dtype,
        },
        address_type(operands),
    );
    if has_bias {
        problem.accumulator = AccumulatorOperand::Present;
    }
    Ok(problem)
}

/// cubek's plane routine: planes of a cube share staged operands, each multiplying its tiles.
type PlaneRoutine = SimpleAlgorithm;

/// How many channels at a time a GEMM reads from or writes to the activation `tensor`, whose
/// groups hold `per_group` channels each: the widest vector the device moves fast (16 bytes on
/// most) where the channels lie side by side (channels-last) and every vector starts aligned
/// (each group's channels and every other stride a multiple of it), else one.
fn channel_vector(tensor: &CubeTensor, per_group: usize) -> usize {
    let (dims, strides) = (dims5(tensor), strides5(tensor));
    if strides[1] != 1 {
        return 1;
    }
    let fits = |vector: usize| {
        per_group.is_multiple_of(vector)
            && (0..5).all(|axis| axis == 1 || dims[axis] == 1 || strides[axis] % vector == 0)
    };
    let widest = aligned_vector(tensor);
    let sizes = tensor.client.io_optimized_vector_sizes(tensor.dtype.size());
    sizes
        .filter(|&size| size <= widest)
        .find(|&size| fits(size))
        .unwrap_or(1)
}

/// The widest vector `tensor`'s first element is aligned to (its buffer may start inside a
/// larger allocation).
fn aligned_vector(tensor: &CubeTensor) -> usize {
    let bytes = tensor.handle.offset_start.unwrap_or(0) as usize;
    let elements = bytes / tensor.dtype.size();
    match elements {
        0 => usize::MAX,
        elements => 1 << elements.trailing_zeros(),
    }
}

/// Launch `problem` reading `inputs` and writing `output` on cubek's routine for `tile`: the
/// unit routine for register tiles, the plane routine for the others; `operands` are the
/// tensors the launch addresses. A tensor-core tile first asks the device's precision whether
/// it may take the operands.
fn launch(
    tile: GemmTile,
    (problem, vectors): (MatmulProblem, MatmulVectorSizes),
    operands: &[&CubeTensor],
    inputs: Inputs,
    output: ViewArg<BatchedCoords>,
) -> Result<(), LaunchError> {
    let client = &operands[0].client;
    let output = TensorOutputLaunch::new(output, noop());
    let tile = match tile {
        // cubek's interleaved tile loads no accumulator ("Interleaved acc load from shared").
        GemmTile::Interleaved if problem.accumulator == AccumulatorOperand::Present => {
            GemmTile::Register
        }
        tile => tile,
    };
    let launched = match tile {
        GemmTile::Register => launch_kernel_virtual::<TensorArgs, SimpleUnitAlgorithm>(
            client,
            inputs,
            output,
            (),
            problem,
            vectors,
            &BlueprintStrategy::Inferred(Default::default()),
        ),
        _ => {
            let strategy = plane_strategy(tile, operands[0], &problem, vectors)?;
            launch_kernel_virtual::<TensorArgs, PlaneRoutine>(
                client,
                inputs,
                output,
                (),
                problem,
                vectors,
                &strategy,
            )
        }
    };
    launched.map_err(|err| LaunchError::Routine {
        reason: match tile.uses_tensor_cores() {
            true => format!("the device's tensor cores take no tile of this pass: {err:?}"),
            false => format!("{err:?}"),
        },
    })?;
    note(Launch::Kernel(match tile {
        GemmTile::Register => "cubek_gemm_unit",
        GemmTile::Interleaved => "cubek_gemm_interleaved",
        GemmTile::Cmma => "cubek_gemm_cmma",
        GemmTile::Mma => "cubek_gemm_mma",
    }));
    Ok(())
}

/// How cubek's plane routine runs `problem` on `tile` (not `Register`) for operands like
/// `first`: a blueprint of ours for interleaved tiles; for tensor-core tiles, cubek's selector,
/// once the device's precision lets them take the operands.
fn plane_strategy(
    tile: GemmTile,
    first: &CubeTensor,
    problem: &MatmulProblem,
    vectors: MatmulVectorSizes,
) -> Result<BlueprintStrategy<(), PlaneRoutine>, LaunchError> {
    let client = &first.client;
    let tile_matmul = match tile {
        GemmTile::Cmma => TileMatmulKind::Cmma,
        GemmTile::Mma => TileMatmulKind::Mma,
        _ => {
            let settings = <PlaneRoutine as BatchMatmulRoutine<()>>::device_settings;
            let plane_dim = settings(client, vectors).plane_dim;
            let blueprint = interleaved_blueprint(plane_dim, vectors.lhs as u32, problem)?;
            return Ok(BlueprintStrategy::Forced(blueprint));
        }
    };
    let precision = precision_of(&first.device);
    if let Some(reason) = excludes_tensor_cores(precision, client.properties(), first.dtype) {
        return Err(LaunchError::Routine { reason });
    }
    Ok(BlueprintStrategy::Inferred(SimpleArgs {
        tile_matmul,
        multi_rows: false,
    }))
}

/// The plane routine's blueprint for interleaved tiles: each plane's units split a tile's `k`
/// into one lhs vector each, so a tile is `plane_dim * lhs_vector` deep; four planes per cube,
/// each owning a 16x16 partition of four 8x8 tiles (cubek's selector sizes only tensor-core
/// tiles).
fn interleaved_blueprint(
    plane_dim: u32,
    lhs_vector: u32,
    problem: &MatmulProblem,
) -> Result<BatchMatmulBlueprint, LaunchError> {
    let scheme = TilingScheme::builder()
        .with_tile_size((8, 8, plane_dim * lhs_vector).into())
        .with_partition_size((2, 2, 1).into())
        .with_stage_size((2, 2, 1).into())
        .build()
        .map_err(|reason| LaunchError::Routine {
            reason: reason.into(),
        })?;
    Ok(
        BatchMatmulBlueprint::builder(TileMatmulKind::Interleaved, scheme, plane_dim, problem)
            .partition_buffering(PartitionBuffering::Single)
            .build(),
    )
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use burn::backend::ops::FloatTensorOps;
    use burn::tensor::ops::ConvOptions;
    use burn::tensor::{Device, TensorData};
    use burn_convpool_kernels::conv::GemmKind;
    use burn_cubecl::CubeBackend;

    use super::{GemmTile, gemm};
    use crate::cube::per_device::cube_device;
    use crate::cube::tensor::LaunchError;
    use crate::spec::ConvGeometry;

    /// Channels-last activations are read and written four f32 channels at a time (16 bytes)
    /// where each group's channels allow it, fewer where they do not; contiguous (NCHW) ones
    /// one element at a time.
    #[test]
    fn channels_last_activations_move_as_vectors() {
        use burn_cubecl::ops::permute;

        use super::channel_vector;
        use crate::cube::tensor::{contiguous, dims5};

        let device = cube_device(&Device::wgpu(Default::default())).expect("a CubeCL device");
        let nchw = CubeBackend::float_from_data(
            TensorData::new(vec![0f32; 2 * 8 * 3 * 5], [2, 8, 1, 3, 5]),
            &device,
        );
        let ndhwc = contiguous(permute(nchw.clone(), &[0, 2, 3, 4, 1]));
        let channels_last = permute(ndhwc, &[0, 4, 1, 2, 3]);
        assert_eq!(dims5(&channels_last), [2, 8, 1, 3, 5]);
        assert_eq!(channel_vector(&channels_last, 8), 4);
        assert_eq!(channel_vector(&channels_last, 4), 4);
        assert_eq!(channel_vector(&channels_last, 2), 2);
        assert_eq!(channel_vector(&channels_last, 1), 1);
        assert_eq!(channel_vector(&nchw, 8), 1);
    }

    /// A tensor-core tile pinned on f32 operands under the default `ConvPrecision::Exact`
    /// (lavapipe has no tensor cores either) refuses with the precision's reason before cubek
    /// selects or compiles anything.
    #[test]
    fn tensor_core_tiles_refuse_f32_under_exact() {
        let device = cube_device(&Device::wgpu(Default::default())).expect("a CubeCL device");
        let tensor = |dims: [usize; 5]| {
            let values = vec![1f32; dims.iter().product()];
            CubeBackend::float_from_data(TensorData::new(values, dims), &device)
        };
        let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
        let geometry =
            ConvGeometry::conv(&[1, 2, 1, 4, 4], &[3, 2, 1, 3, 3], &options).normalised();
        for tile in [GemmTile::Cmma, GemmTile::Mma] {
            let operands = (tensor([1, 2, 1, 4, 4]), tensor([3, 2, 1, 3, 3]), None);
            match gemm(&geometry, GemmKind::Forward, tile, operands) {
                Err(LaunchError::Routine { reason }) => {
                    assert!(
                        reason.contains("ConvPrecision::Exact"),
                        "{tile:?}: {reason}"
                    )
                }
                other => panic!("{tile:?} ran f32 under Exact: {:?}", other.map(|_| ())),
            }
        }
    }
}

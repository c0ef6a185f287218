//! Our passes on cubek-matmul's multi-level GEMM routines, reading and writing our tensors in
//! place through the layouts of `burn_convpool_kernels::conv::gemm`: the routines Burn's
//! implicit GEMMs run on, with our groups, layouts and exact semantics. The unit routine with
//! register tiles runs on every device (CI's lavapipe included), so it checks the layouts that
//! the tensor-core tiles share. Each result is repaired as Burn's are (`repair.rs`): the GEMM
//! multiplies the padding's zeros like any other value. cubek has no split-k, so a weight
//! gradient's long reduction runs in one cube per output tile.

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
use burn_convpool_kernels::cubek_matmul::multi_level::launch_kernel_virtual;
use burn_convpool_kernels::cubek_matmul::multi_level::routines::batch::simple_unit::SimpleUnitAlgorithm;
use burn_convpool_kernels::cubek_matmul::routine::BlueprintStrategy;
use burn_convpool_kernels::cubek_std::MatrixLayout;
use burn_cubecl::tensor::CubeTensor;
use cubecl::std::tensor::launch::ViewArg;
use cubecl::std::tensor::layout::{Coords1d, VirtualLayoutLaunch};

use crate::spec::ConvGeometry;

use super::repair::{repair_gemm, repair_weight};
use super::{Sides, conv_args, empty_like_layout, gemm_sizes};
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{
    LaunchError, address_type, contiguous, empty, float_type, strided, zeros,
};

type Inputs = InputRuntimeArg<TensorArgs>;

/// Our forward pass (`kind` `Forward`: `lhs` = x, `rhs` = weight) or input gradient (`Data`:
/// `lhs` = output gradient, `rhs` = weight), `out = lhs (*) rhs [+ bias]`, on cubek's unit
/// routine with register tiles; a strided input gradient reads the output gradient only where
/// the stride divides (the rest is out of bounds).
pub fn gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: CubeTensor,
    rhs: CubeTensor,
    bias: Option<CubeTensor>,
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
    let inputs = TensorInputsLaunch::new(
        noop(),
        ViewArg::new_tensor::<GemmLhs>(
            lhs.clone().into_tensor_arg(),
            GemmLhsLaunch::new(conv_args(geometry, &sides), m, k, kind),
        ),
        noop(),
        ViewArg::new_tensor::<GemmRhs>(
            rhs.clone().into_tensor_arg(),
            GemmRhsLaunch::new(conv_args(geometry, &sides), k, n, kind),
        ),
        bias.as_ref().map(|_| noop()).into(),
        bias.clone()
            .map(|bias| {
                ViewArg::new_tensor::<GemmBias>(bias.into_tensor_arg(), GemmBiasLaunch::new(m, n))
            })
            .into(),
    );
    let output = ViewArg::new_tensor::<GemmOut>(
        out.clone().into_tensor_arg(),
        GemmOutLaunch::new(conv_args(geometry, &sides), m, n, kind),
    );
    let operands = [&lhs, &rhs, &out];
    launch(
        geometry.groups,
        (m, n, k),
        &operands,
        bias.is_some(),
        inputs,
        output,
    )?;
    repair_gemm(geometry, kind, (lhs, rhs, bias), out)
}

/// Our weight gradient, `weight_grad = out_grad (*) x`, on cubek's unit routine with register
/// tiles.
pub fn weight(
    geometry: &ConvGeometry,
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
    let inputs = TensorInputsLaunch::new(
        noop(),
        ViewArg::new_tensor::<WeightLhs>(
            out_grad.clone().into_tensor_arg(),
            WeightLhsLaunch::new(conv_args(geometry, &sides), m, k),
        ),
        noop(),
        ViewArg::new_tensor::<WeightRhs>(
            x.clone().into_tensor_arg(),
            WeightRhsLaunch::new(conv_args(geometry, &sides), k, n),
        ),
        None.into(),
        None.into(),
    );
    let output = ViewArg::new_tensor::<WeightOut>(
        out.clone().into_tensor_arg(),
        WeightOutLaunch::new(conv_args(geometry, &sides), m, n),
    );
    let operands = [&out_grad, &x, &out];
    launch(geometry.groups, (m, n, k), &operands, false, inputs, output)?;
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

/// Launch cubek's unit routine on `groups` GEMMs of `(m, n, k)` (its batch axis), reading
/// `inputs` and writing `output`; `operands` are the tensors the launch addresses, the first
/// one's dtype the GEMM's (the caller checked them).
fn launch(
    groups: usize,
    (m, n, k): (u32, u32, u32),
    operands: &[&CubeTensor],
    has_bias: bool,
    inputs: Inputs,
    output: ViewArg<BatchedCoords>,
) -> Result<(), LaunchError> {
    let dtype = float_type(operands[0])?;
    let [m, n, k] = [m, n, k].map(|size| size as usize);
    let mut problem = MatmulProblem::from_parameters(
        m,
        n,
        k,
        [groups].into(),
        [groups].into(),
        MatrixLayout::RowMajor,
        MatrixLayout::ColMajor,
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
    note(Launch::Kernel("cubek_gemm_unit"));
    launch_kernel_virtual::<TensorArgs, SimpleUnitAlgorithm>(
        &operands[0].client,
        inputs,
        TensorOutputLaunch::new(output, noop()),
        (),
        problem,
        // One element per load: our layouts gather along every axis.
        MatmulVectorSizes {
            lhs: 1,
            rhs: 1,
            out: 1,
        },
        &BlueprintStrategy::Inferred(Default::default()),
    )
    .map_err(|err| LaunchError::Routine {
        reason: format!("{err:?}"),
    })
}

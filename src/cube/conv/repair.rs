//! The repair launchers: after any kernel (ours or Burn's) has computed a pass, recompute by the
//! definition the elements a non-finite operand met with the padding (see
//! `burn_convpool_kernels::conv::repair`), so every kernel the tuner may pick gives the
//! definition's result, as the CPU does.

use burn_convpool_kernels::conv::{self, GemmKind};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::ConvGeometry;

use super::{Sides, conv_args};
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{
    LaunchError, accumulator_type, address_type, contiguous, elementwise, float_type, strided,
};

/// Recompute in place every non-finite element of `out`, the result of the forward (`kind`
/// `Forward`: `lhs` = x) or input-gradient (`Data`: `lhs` = output gradient) GEMM of
/// `geometry` over `lhs` and the weight `rhs`, plus `bias`.
pub fn repair_gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    lhs: CubeTensor,
    rhs: CubeTensor,
    bias: Option<CubeTensor>,
    out: &CubeTensor,
) -> Result<(), LaunchError> {
    let dtype = float_type(out)?;
    let elements = out.meta.num_elements();
    if elements == 0 {
        return Ok(());
    }
    let (lhs, rhs, bias) = (strided(lhs), contiguous(rhs), bias.map(contiguous));
    let sides = Sides::of_gemm(kind, &lhs, out);
    let (cube_count, cube_dim) = elementwise(out, elements);
    note(Launch::Kernel("repair_gemm"));
    conv::repair_gemm::launch(
        &out.client,
        cube_count,
        cube_dim,
        address_type(&[&lhs, &rhs, out]),
        lhs.into_tensor_arg(),
        rhs.into_tensor_arg(),
        bias.map(|bias| bias.into_tensor_arg()).into(),
        out.clone().into_tensor_arg(),
        conv_args(geometry, &sides),
        elements,
        kind,
        [dtype, accumulator_type(dtype)],
    );
    Ok(())
}

/// Recompute in place every non-finite element of the contiguous `weight_grad`, the weight
/// gradient of `geometry` over `x` and `out_grad`.
pub fn repair_weight(
    geometry: &ConvGeometry,
    x: CubeTensor,
    out_grad: CubeTensor,
    weight_grad: &CubeTensor,
) -> Result<(), LaunchError> {
    let dtype = float_type(weight_grad)?;
    // An empty batch sums nothing: its gradient is zeros.
    if geometry.batch == 0 || weight_grad.meta.num_elements() == 0 {
        return Ok(());
    }
    let (x, out_grad) = (strided(x), strided(out_grad));
    let (cube_count, cube_dim) = elementwise(weight_grad, weight_grad.meta.num_elements());
    note(Launch::Kernel("repair_weight"));
    conv::repair_weight::launch(
        &weight_grad.client,
        cube_count,
        cube_dim,
        address_type(&[&x, &out_grad, weight_grad]),
        x.clone().into_tensor_arg(),
        out_grad.clone().into_tensor_arg(),
        weight_grad.clone().into_tensor_arg(),
        conv_args(geometry, &Sides::new(&x, &out_grad)),
        geometry.batch,
        [dtype, accumulator_type(dtype)],
    );
    Ok(())
}

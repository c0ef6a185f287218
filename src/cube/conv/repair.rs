//! The repair launchers for results of Burn's kernels: recompute by the definition the elements
//! a non-finite operand met with the padding (see `burn_convpool_kernels::conv::repair`), so
//! every kernel the tuner may pick gives the definition's result, as the CPU does (ours repair
//! their results as they store them). Only a non-finite weight (forward, input gradient) or
//! output gradient (weight gradient) meets the padding's zeros with a non-zero product, and
//! only where some window or input meets the padding ([`meets_padding`]); elsewhere nothing
//! launches. A forward or input gradient first tests the weight on the device
//! ([`conv::nonfinite_flags`]), so a finite one costs no pass over the result, and the call no
//! more than Burn's own but two small launches.

use burn::tensor::DType;
use burn_convpool_kernels::conv::{self, GemmKind};
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim};

use crate::spec::ConvGeometry;

use super::{Sides, conv_args, layout, meets_padding};
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{
    LaunchError, accumulator_type, address_type, contiguous, elementwise, empty, float_type,
    strided, strides5,
};

/// Most cubes of the weight's finiteness test: enough to read a large weight at full speed,
/// few enough that each repair unit reads every cube's flag.
const FLAG_CUBES: usize = 32;

/// Cubes of a repair gated by the weight's flags: one wave of a large GPU, so a skipped repair
/// costs one wave of units that read the flags and exit; a needed one strides over the result.
const GATED_REPAIR_CUBES: usize = 1024;

/// `out`, the result of the forward (`kind` `Forward`: `lhs` = x) or input-gradient (`Data`:
/// `lhs` = output gradient) GEMM of `geometry` over `lhs` and the weight `rhs`, plus `bias`,
/// with every non-finite element recomputed in place where the GEMM meets the padding and the
/// weight is not finite.
pub fn repair_gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    (lhs, rhs, bias): (CubeTensor, CubeTensor, Option<CubeTensor>),
    out: CubeTensor,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&out)?;
    let elements = out.meta.num_elements();
    if !meets_padding(geometry, kind) || elements == 0 {
        return Ok(out);
    }
    let out = strided(out);
    let (lhs, rhs, bias) = (strided(lhs), contiguous(rhs), bias.map(contiguous));
    let sides = Sides::of_gemm(kind, &lhs, &out);
    let flags = nonfinite_flags(&rhs)?;
    let cubes = elements.div_ceil(conv::SCAN_UNITS).min(GATED_REPAIR_CUBES);
    let cube_count = CubeCount::Static(cubes as u32, 1, 1);
    let cube_dim = CubeDim::new_1d(conv::SCAN_UNITS as u32);
    note(Launch::Kernel("repair_gemm"));
    conv::repair_gemm::launch(
        &out.client,
        cube_count,
        cube_dim,
        address_type(&[&lhs, &rhs, &out]),
        lhs.into_tensor_arg(),
        rhs.into_tensor_arg(),
        bias.map(|bias| bias.into_tensor_arg()).into(),
        out.clone().into_tensor_arg(),
        flags.into_tensor_arg(),
        conv_args(geometry, &sides),
        elements,
        kind,
        [dtype, accumulator_type(dtype)],
    );
    Ok(out)
}

/// One flag per cube of [`conv::nonfinite_flags`] over the contiguous `values`: whether that
/// cube met a non-finite value.
fn nonfinite_flags(values: &CubeTensor) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(values)?;
    let cubes = values
        .meta
        .num_elements()
        .div_ceil(conv::SCAN_UNITS)
        .clamp(1, FLAG_CUBES);
    let flags = empty(values, &[cubes], DType::U32);
    note(Launch::Kernel("nonfinite_flags"));
    conv::nonfinite_flags::launch(
        &values.client,
        CubeCount::Static(cubes as u32, 1, 1),
        CubeDim::new_1d(conv::SCAN_UNITS as u32),
        address_type(&[values]),
        values.clone().into_tensor_arg(),
        flags.clone().into_tensor_arg(),
        dtype,
    );
    Ok(flags)
}

/// `weight_grad` (in any layout), the weight gradient of `geometry` over `x` and `out_grad`,
/// with every non-finite element recomputed in place where some window meets the padding.
/// Its units each test one weight, so the pass costs a read of the weight gradient.
pub fn repair_weight(
    geometry: &ConvGeometry,
    x: CubeTensor,
    out_grad: CubeTensor,
    weight_grad: CubeTensor,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&weight_grad)?;
    // An empty batch sums nothing: its gradient is zeros.
    if !meets_padding(geometry, GemmKind::Weight)
        || geometry.batch == 0
        || weight_grad.meta.num_elements() == 0
    {
        return Ok(weight_grad);
    }
    let (x, out_grad, weight_grad) = (strided(x), strided(out_grad), strided(weight_grad));
    let (cube_count, cube_dim) = elementwise(&weight_grad, weight_grad.meta.num_elements());
    note(Launch::Kernel("repair_weight"));
    conv::repair_weight::launch(
        &weight_grad.client,
        cube_count,
        cube_dim,
        address_type(&[&x, &out_grad, &weight_grad]),
        x.clone().into_tensor_arg(),
        out_grad.clone().into_tensor_arg(),
        weight_grad.clone().into_tensor_arg(),
        conv_args(geometry, &Sides::new(&x, &out_grad)),
        layout(strides5(&weight_grad)),
        geometry.batch,
        [dtype, accumulator_type(dtype)],
    );
    Ok(weight_grad)
}

//! The repair launchers: after any kernel (ours or Burn's) has computed a pass, recompute by the
//! definition the elements a non-finite operand met with the padding (see
//! `burn_convpool_kernels::conv::repair`), so every kernel the tuner may pick gives the
//! definition's result, as the CPU does. Only a non-finite weight (forward, input gradient) or
//! output gradient (weight gradient) meets the padding's zeros with a non-zero product, and
//! only where some window or input meets the padding; elsewhere nothing launches.

use burn::tensor::DType;
use burn_convpool_kernels::conv::{self, GemmKind};
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim};

use crate::spec::ConvGeometry;

use super::{Sides, conv_args, layout};
use crate::cube::launches::{Launch, note};
use crate::cube::tensor::{
    LaunchError, accumulator_type, address_type, contiguous, elementwise, empty, float_type,
    strided, strides5,
};

/// Which kernels computed the result a repair checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Computed {
    /// Ours: the repair tests each element of the result, in the pass's own launch.
    ByOurs,
    /// Burn's: the repair first tests the weight on the device ([`conv::nonfinite_flags`]), so
    /// a finite weight costs no pass over the result, and the call no more than Burn's own.
    ByBurn,
}

/// Most cubes of the weight's finiteness test: enough to read a large weight at full speed,
/// few enough that each repair unit reads every cube's flag.
const FLAG_CUBES: usize = 32;

/// Cubes of a repair gated by the weight's flags: one wave of a large GPU, so a skipped repair
/// costs one wave of units that read the flags and exit; a needed one strides over the result.
const GATED_REPAIR_CUBES: usize = 1024;

/// `out`, the result of the forward (`kind` `Forward`: `lhs` = x) or input-gradient (`Data`:
/// `lhs` = output gradient) GEMM of `geometry` over `lhs` and the weight `rhs`, plus `bias`,
/// with every non-finite element recomputed in place where some window (forward) or input
/// (input gradient) meets the padding.
pub fn repair_gemm(
    geometry: &ConvGeometry,
    kind: GemmKind,
    (lhs, rhs, bias): (CubeTensor, CubeTensor, Option<CubeTensor>),
    out: CubeTensor,
    computed: Computed,
) -> Result<CubeTensor, LaunchError> {
    let meets = match kind {
        GemmKind::Data => geometry.inputs_meet_padding(),
        _ => geometry.windows_meet_padding(),
    };
    let dtype = float_type(&out)?;
    let elements = out.meta.num_elements();
    if !meets || elements == 0 {
        return Ok(out);
    }
    let out = strided(out);
    let (lhs, rhs, bias) = (strided(lhs), contiguous(rhs), bias.map(contiguous));
    let sides = Sides::of_gemm(kind, &lhs, &out);
    let (flags, cube_count, cube_dim) = match computed {
        Computed::ByOurs => {
            let (cube_count, cube_dim) = elementwise(&out, elements);
            (None, cube_count, cube_dim)
        }
        Computed::ByBurn => {
            let flags = nonfinite_flags(&rhs)?;
            let cube_dim = CubeDim::new_1d(conv::SCAN_UNITS as u32);
            let cubes = elements.div_ceil(conv::SCAN_UNITS).min(GATED_REPAIR_CUBES);
            (Some(flags), CubeCount::Static(cubes as u32, 1, 1), cube_dim)
        }
    };
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
        flags.map(|flags| flags.into_tensor_arg()).into(),
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
    if !geometry.windows_meet_padding()
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

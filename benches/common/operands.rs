//! Random primitives of any rank in the dtype `BENCH_DTYPE` names, and the rank-5 lift of a
//! case's sizes that the primitives take.

use burn::backend::Dispatch;
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::tensor::{DType, Device, Distribution, Shape, Tensor};

/// A random `U(0, 1)` float primitive of shape `dims`, any rank, in `dtype`.
pub fn random(dims: &[usize], device: &Device, dtype: DType) -> FloatTensor<Dispatch> {
    let numel: usize = dims.iter().product();
    let flat = Tensor::<1>::random([numel], Distribution::Default, device).cast(dtype);
    let flat = flat.into_dispatch();
    Dispatch::float_reshape(flat, Shape::from(dims.to_vec()))
}

/// `(N, C, *spatial)` with unit axes in front of the spatial ones, to rank 5.
pub fn lifted(dims: &[usize]) -> [usize; 5] {
    let mut out = [1; 5];
    out[..2].copy_from_slice(&dims[..2]);
    let spatial = &dims[2..];
    out[5 - spatial.len()..].copy_from_slice(spatial);
    out
}

/// The last three of [`lifted`]: a rank-N size as the rank-3 size the primitives take.
pub fn lifted3(values: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - values.len()..].copy_from_slice(values);
    out
}

/// A rank-N array from a slice.
pub fn array<const N: usize>(values: &[usize]) -> [usize; N] {
    core::array::from_fn(|i| values[i])
}

/// `BENCH_DTYPE` = `f32` (or unset) | `f16` | `bf16`: the dtype of the conv and pool benches'
/// operands on the device named `device_name` (Flex always computes f32).
pub fn operand_dtype(device_name: &str) -> DType {
    if device_name == "flex" {
        return DType::F32;
    }
    match std::env::var("BENCH_DTYPE").as_deref() {
        Err(_) | Ok("f32") => DType::F32,
        Ok("f16") => DType::F16,
        Ok("bf16") => DType::BF16,
        Ok(other) => panic!("BENCH_DTYPE={other}: expected f32, f16 or bf16"),
    }
}

/// The device part of a conv or pool bench id: `device_name`, suffixed `-f16` or `-bf16` for
/// half operands, so the report lists those rows beside the f32 ones as a device of their own.
pub fn labelled(device_name: &str) -> String {
    match operand_dtype(device_name) {
        DType::F16 => format!("{device_name}-f16"),
        DType::BF16 => format!("{device_name}-bf16"),
        _ => device_name.to_string(),
    }
}

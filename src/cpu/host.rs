//! Moving tensors between a CPU backend and the plain slices the kernels compute on.
//!
//! [`HostTensors`] is the one thing a CPU backend must provide; everything else in `cpu/` is
//! shared. f32 and f64 are computed natively, f16 and bf16 in f32 and rounded back.

use std::borrow::Cow;

use burn::tensor::{DType, TensorData};

use super::kernels::element::Element;

/// The precision a dtype is computed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 (also used for f16 and bf16).
    F32,
    /// f64.
    F64,
}

impl Precision {
    /// The compute precision of a float dtype.
    ///
    /// # Panics
    /// On a non-float dtype, which the public API cannot produce for a float tensor.
    pub fn of(op: &str, dtype: DType) -> Self {
        match dtype {
            DType::F64 => Self::F64,
            DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => Self::F32,
            other => panic!("{op}: dtype {other:?} is not supported (expected a float dtype)"),
        }
    }
}

/// A CPU backend's float tensors, seen as contiguous row-major host slices.
pub trait HostTensors {
    /// The backend's float tensor primitive.
    type Tensor;

    /// Dims of a tensor.
    fn dims(tensor: &Self::Tensor) -> Vec<usize>;

    /// Dtype of a tensor.
    fn dtype(tensor: &Self::Tensor) -> DType;

    /// Contiguous values as `T`, borrowed when the tensor already is contiguous `T`.
    fn values<T: Element>(tensor: &Self::Tensor) -> Cow<'_, [T]>;

    /// A tensor of `dtype` from computed values.
    fn from_values<T: Element>(values: Vec<T>, dims: &[usize], dtype: DType) -> Self::Tensor;

    /// The backend's int tensor primitive.
    type IntTensor;

    /// Dims of an int tensor.
    fn int_dims(tensor: &Self::IntTensor) -> Vec<usize>;

    /// Contiguous values of an int tensor in its own width (borrowed when possible), so index
    /// kernels need no widening copy.
    fn int_slice(tensor: &Self::IntTensor) -> IntValues<'_>;

    /// An int tensor of `dtype` from i32 or i64 values.
    fn int_from_values(values: IntValues<'static>, dims: &[usize], dtype: DType)
    -> Self::IntTensor;
}

/// Dims of a rank-5 backend tensor.
pub fn dims5<H: HostTensors>(tensor: &H::Tensor) -> [usize; 5] {
    H::dims(tensor)
        .try_into()
        .unwrap_or_else(|dims: Vec<usize>| panic!("expected a rank-5 tensor, got dims {dims:?}"))
}

/// Int tensor values as stored: i32 (Burn's default index dtype) or i64 (anything else widened).
pub enum IntValues<'a> {
    /// 32-bit values.
    I32(Cow<'a, [i32]>),
    /// 64-bit values.
    I64(Cow<'a, [i64]>),
}

/// Run `$body` with `$values` bound to the index slice, whatever its width.
macro_rules! with_indices {
    ($int_values:expr, |$values:ident| $body:expr) => {
        match $int_values {
            $crate::cpu::host::IntValues::I32($values) => $body,
            $crate::cpu::host::IntValues::I64($values) => $body,
        }
    };
}
pub(crate) use with_indices;

/// Values through `TensorData`, for backends without a zero-copy path.
pub fn data_values<T: Element>(data: TensorData) -> Vec<T> {
    data.convert::<T>()
        .try_into_vec::<T>()
        .expect("converted tensor data has the requested element type")
}

/// `TensorData` of `dtype` from computed values.
pub fn data_from_values<T: Element>(values: Vec<T>, dims: &[usize], dtype: DType) -> TensorData {
    let data = TensorData::new(values, dims.to_vec());
    if data.dtype() == dtype {
        data
    } else {
        data.convert_dtype(dtype)
    }
}

/// Int values widened to i64 (a plain loop for i32 and i64; `TensorData` conversion otherwise).
pub fn int_data_values(data: TensorData) -> Vec<i64> {
    match data.dtype() {
        DType::I64 => data.try_into_vec::<i64>().expect("i64 data"),
        DType::I32 => data
            .as_slice::<i32>()
            .expect("i32 data")
            .iter()
            .map(|&v| v as i64)
            .collect(),
        _ => data
            .convert::<i64>()
            .try_into_vec::<i64>()
            .expect("converted tensor data is i64"),
    }
}

/// `TensorData` of int `dtype` from i64 values (narrowed with a plain loop for i32).
pub fn int_data_from_values(values: IntValues<'_>, dims: &[usize], dtype: DType) -> TensorData {
    let dims = dims.to_vec();
    match (values, dtype) {
        (IntValues::I32(values), DType::I32) => TensorData::new(values.into_owned(), dims),
        (IntValues::I64(values), DType::I64) => TensorData::new(values.into_owned(), dims),
        (IntValues::I64(values), DType::I32) => TensorData::new(
            // The ops check that indices fit (`check_index_dtype`); never wrap regardless.
            values
                .iter()
                .map(|&v| {
                    i32::try_from(v).unwrap_or_else(|_| panic!("index {v} does not fit in I32"))
                })
                .collect::<Vec<i32>>(),
            dims,
        ),
        (IntValues::I32(values), dtype) => {
            TensorData::new(values.into_owned(), dims).convert_dtype(dtype)
        }
        (IntValues::I64(values), dtype) => {
            TensorData::new(values.into_owned(), dims).convert_dtype(dtype)
        }
    }
}

/// Run `$body` with `$T` bound to the compute element of `$dtype`.
macro_rules! with_element {
    ($op:expr, $dtype:expr, |$T:ident| $body:expr) => {
        match $crate::cpu::host::Precision::of($op, $dtype) {
            $crate::cpu::host::Precision::F32 => {
                type $T = f32;
                $body
            }
            $crate::cpu::host::Precision::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_element;

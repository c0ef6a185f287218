//! The Flex backend: zero-copy reads of contiguous tensors, everything else shared.

use std::borrow::Cow;

use burn::backend::{Flex, TensorMetadata};
use burn::tensor::DType;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn_flex::FlexTensor;

use super::backend::{impl_cpu_backend, lift, lift_int, lower, lower_int};
use super::host::{
    HostTensors, IntValues, data_from_values, data_values, int_data_from_values, int_data_values,
};
use super::kernels::element::Element;

impl HostTensors for Flex {
    type Tensor = FlexTensor;

    fn dims(tensor: &FlexTensor) -> Vec<usize> {
        tensor.shape().to_vec()
    }

    fn dtype(tensor: &FlexTensor) -> DType {
        tensor.dtype()
    }

    fn values<T: Element>(tensor: &FlexTensor) -> Cow<'_, [T]> {
        match tensor.as_slice::<T>() {
            Some(values) => Cow::Borrowed(values),
            None => Cow::Owned(data_values(tensor.clone().into_data())),
        }
    }

    fn from_values<T: Element>(values: Vec<T>, dims: &[usize], dtype: DType) -> FlexTensor {
        FlexTensor::from_data(data_from_values(values, dims, dtype))
    }

    type IntTensor = FlexTensor;

    fn int_dims(tensor: &FlexTensor) -> Vec<usize> {
        tensor.shape().to_vec()
    }

    fn int_slice(tensor: &FlexTensor) -> IntValues<'_> {
        if let Some(values) = tensor.as_slice::<i32>() {
            return IntValues::I32(Cow::Borrowed(values));
        }
        if let Some(values) = tensor.as_slice::<i64>() {
            return IntValues::I64(Cow::Borrowed(values));
        }
        IntValues::I64(Cow::Owned(int_data_values(tensor.clone().into_data())))
    }

    fn int_from_values(values: IntValues<'static>, dims: &[usize], dtype: DType) -> FlexTensor {
        FlexTensor::from_data(int_data_from_values(values, dims, dtype))
    }
}

impl_cpu_backend!(Flex);

//! The (deprecated, still used) NdArray backend: values through `TensorData`, everything else
//! shared with Flex.
#![allow(deprecated)]

use std::borrow::Cow;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use burn::backend::{NdArray, TensorMetadata};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{DType, TensorData};
use burn_ndarray::NdArrayTensor;

use super::backend::{impl_cpu_backend, lift, lift_int, lower, lower_int};
use super::host::{
    HostTensors, IntValues, data_from_values, data_values, int_data_from_values, int_data_values,
};
use super::kernels::element::Element;

/// NdArray computes on the calling thread, so its data futures are ready when first polled.
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("NdArray returned a pending read"),
    }
}

impl HostTensors for NdArray {
    type Tensor = NdArrayTensor;

    fn dims(tensor: &NdArrayTensor) -> Vec<usize> {
        tensor.shape().to_vec()
    }

    fn dtype(tensor: &NdArrayTensor) -> DType {
        tensor.dtype()
    }

    fn values<T: Element>(tensor: &NdArrayTensor) -> Cow<'_, [T]> {
        let data: TensorData = ready(NdArray::float_into_data(tensor.clone()))
            .unwrap_or_else(|error| panic!("reading an NdArray tensor failed: {error:?}"));
        Cow::Owned(data_values(data))
    }

    fn from_values<T: Element>(values: Vec<T>, dims: &[usize], dtype: DType) -> NdArrayTensor {
        NdArrayTensor::from_data(data_from_values(values, dims, dtype))
    }

    type IntTensor = NdArrayTensor;

    fn int_dims(tensor: &NdArrayTensor) -> Vec<usize> {
        tensor.shape().to_vec()
    }

    fn int_slice(tensor: &NdArrayTensor) -> IntValues<'_> {
        let data = ready(NdArray::int_into_data(tensor.clone()))
            .unwrap_or_else(|error| panic!("reading an NdArray tensor failed: {error:?}"));
        IntValues::I64(Cow::Owned(int_data_values(data)))
    }

    fn int_from_values(values: IntValues<'static>, dims: &[usize], dtype: DType) -> NdArrayTensor {
        NdArrayTensor::from_data(int_data_from_values(values, dims, dtype))
    }
}

impl_cpu_backend!(NdArray);

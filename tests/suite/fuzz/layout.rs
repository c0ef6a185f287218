//! Memory layouts the fuzz cases lay their tensors out in. The values and logical dims stay
//! the case's; only the strides (and the buffer's offset) change, so the reference applies
//! unchanged. Burn's convolutions hand on channels-last views, slicing hands on views that
//! start inside a buffer, and any permute hands on strides of its own: every op must read them
//! as it reads a contiguous tensor.

use burn::tensor::{DType, Device, Tensor, TensorData};
use proptest::prelude::*;

/// Where a tensor's elements lie in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Row-major in the logical dims.
    Contiguous,
    /// Channels innermost: `(N, *spatial, C)` in memory, as Burn's convolutions leave their
    /// outputs on a GPU.
    ChannelsLast,
    /// Channels-last, as a view that skips a leading batch of NaN in its buffer (a kernel that
    /// ignores the view's offset reads them).
    ChannelsLastView,
    /// Every axis's order reversed in memory: strides no fast path recognises.
    Reversed,
}

/// A layout, contiguous twice as often as each other one.
pub fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        2 => Just(Layout::Contiguous),
        1 => Just(Layout::ChannelsLast),
        1 => Just(Layout::ChannelsLastView),
        1 => Just(Layout::Reversed),
    ]
}

impl Layout {
    /// The logical axes from outermost to innermost in memory (a tensor of rank below 3 has no
    /// channels and spatial axes to move, and stays row-major unless reversed).
    fn order(self, rank: usize) -> Vec<usize> {
        match self {
            Layout::Contiguous => (0..rank).collect(),
            Layout::ChannelsLast | Layout::ChannelsLastView if rank >= 3 => {
                [0].into_iter().chain(2..rank).chain([1]).collect()
            }
            Layout::ChannelsLast | Layout::ChannelsLastView => (0..rank).collect(),
            Layout::Reversed => (0..rank).rev().collect(),
        }
    }
}

/// A tensor of `values` (row-major in the logical `dims`) laid out as `layout` says, in `dtype`
/// (the values are f32's, so F64 holds them exactly).
pub fn tensor_in<const D: usize>(
    layout: Layout,
    values: &[f64],
    dims: &[usize],
    device: &Device,
    dtype: DType,
) -> Tensor<D> {
    let order = layout.order(D);
    let mut memory_dims: Vec<usize> = order.iter().map(|&axis| dims[axis]).collect();
    let mut memory = in_memory_order(values, dims, &order);
    // The view's leading batch of NaN (none to skip in an empty tensor: `narrow` needs a length).
    let skip = layout == Layout::ChannelsLastView && D >= 3 && !memory.is_empty();
    if skip {
        let batch_len = memory.len() / dims[0];
        memory.splice(0..0, std::iter::repeat_n(f32::NAN, batch_len));
        memory_dims[0] += 1;
    }
    let data = TensorData::new(memory, memory_dims);
    let mut tensor = Tensor::<D>::from_data(data, (device, dtype));
    if skip {
        tensor = tensor.narrow(0, 1, dims[0]);
    }
    // Logical axis `a` is memory axis `order.position(a)`.
    let axes: [usize; D] =
        core::array::from_fn(|a| order.iter().position(|&axis| axis == a).expect("an axis"));
    tensor.permute(axes)
}

/// `values` (row-major in `dims`) rearranged row-major in the dims `order` lists, as f32.
fn in_memory_order(values: &[f64], dims: &[usize], order: &[usize]) -> Vec<f32> {
    let logical_strides: Vec<usize> = (0..dims.len())
        .map(|a| dims[a + 1..].iter().product())
        .collect();
    let mut index = vec![0usize; dims.len()];
    (0..values.len())
        .map(|_| {
            let at: usize = index
                .iter()
                .zip(order)
                .map(|(&i, &axis)| i * logical_strides[axis])
                .sum();
            // Step the memory-order index, innermost first.
            for slot in (0..order.len()).rev() {
                index[slot] += 1;
                if index[slot] < dims[order[slot]] {
                    break;
                }
                index[slot] = 0;
            }
            values[at] as f32
        })
        .collect()
}

/// Every layout holds the case's values in the case's logical order (what the reference reads),
/// in either dtype the cases run in.
#[test]
fn layouts_keep_the_values() {
    let device = Device::flex();
    let dims = [2, 3, 4, 5];
    let values: Vec<f64> = (0..120).map(f64::from).collect();
    for layout in [
        Layout::Contiguous,
        Layout::ChannelsLast,
        Layout::ChannelsLastView,
        Layout::Reversed,
    ] {
        for dtype in [DType::F32, DType::F64] {
            let tensor = tensor_in::<4>(layout, &values, &dims, &device, dtype);
            assert_eq!((tensor.dims(), tensor.dtype()), (dims, dtype), "{layout:?}");
            let got = tensor
                .into_data()
                .convert::<f64>()
                .try_to_vec::<f64>()
                .unwrap();
            assert_eq!(got, values, "{layout:?} {dtype:?}");
        }
    }
}

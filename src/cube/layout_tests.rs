//! Our conv passes and pools at the backend level, on channels-last operands (as Burn's
//! convolutions leave their outputs) and contiguous ones, at rank 4 and 5: values as Flex's,
//! each result in its operand's layout and at its rank, no layout copy, and the kernel
//! launches each conv pass takes (pinned to our kernels, so the tuner's trial runs are not
//! counted).

use burn::backend::ops::FloatTensorOps;
use burn::backend::{Flex, TensorMetadata};
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, IntDType, TensorData};
use burn_cubecl::ops::into_data_sync;
use burn_cubecl::{CubeBackend, tensor::CubeTensor};
use burn_flex::FlexTensor;
use std::sync::{Mutex, MutexGuard};

use crate::backend::ConvPoolBackend;
use crate::spec::{AvgPoolNdOptions, MaxPoolOptions, WindowRule, spatial};

use super::choice::{CubeKernels, OurKernels, set_cube_kernels};
use super::launches::{Launch, record};
use super::per_device::cube_device;
use burn_cubecl::ops::permute;

use super::tensor::{channels_last, contiguous, dims5, with_unit_axes, without_unit_axes};

/// One conv: its input and weight dims (same rank), stride, padding and groups per spatial
/// axis, and the kernels each pass launches: forward, input gradient, weight gradient, bias
/// gradient.
struct Case {
    name: &'static str,
    x: Vec<usize>,
    weight: Vec<usize>,
    stride: usize,
    padding: usize,
    groups: usize,
    launches: [&'static [&'static str]; 4],
}

// Each pass is one launch: its kernel repairs what a non-finite operand met in the padding.
const TILED: &[&str] = &["conv_gemm_tiled"];
const DIRECT: &[&str] = &["conv_gemm_direct"];
const DIRECT_WEIGHT: &[&str] = &["conv_weight_direct"];
const BIAS: &[&str] = &["conv_weight_split"];

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "3x3, 16 channels (tiled)",
            x: vec![2, 16, 6, 7],
            weight: vec![16, 16, 3, 3],
            stride: 1,
            padding: 1,
            groups: 1,
            launches: [TILED, TILED, TILED, BIAS],
        },
        Case {
            // The input gradient runs its 4 stride phases in one launch.
            name: "3x3 stride 2 (tiled, phases)",
            x: vec![2, 16, 9, 8],
            weight: vec![24, 16, 3, 3],
            stride: 2,
            padding: 1,
            groups: 1,
            launches: [TILED, TILED, TILED, BIAS],
        },
        Case {
            name: "depthwise 3x3 (direct)",
            x: vec![2, 8, 7, 6],
            weight: vec![8, 1, 3, 3],
            stride: 1,
            padding: 1,
            groups: 8,
            launches: [DIRECT, DIRECT, DIRECT_WEIGHT, BIAS],
        },
        Case {
            name: "3D, 4 to 6 channels (direct)",
            x: vec![1, 4, 3, 4, 5],
            weight: vec![6, 4, 2, 2, 2],
            stride: 1,
            padding: 0,
            groups: 1,
            launches: [DIRECT, DIRECT, DIRECT_WEIGHT, BIAS],
        },
    ]
}

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 + seed * 104_729) % 2000) as f32 / 1000.0 - 1.0)
        .collect()
}

fn data(dims: &[usize], seed: usize) -> TensorData {
    TensorData::new(values(dims.iter().product(), seed), dims.to_vec())
}

/// `dims` of `data` on the device, channels-last in memory or contiguous.
fn on_device(data: TensorData, laid_last: bool) -> CubeTensor {
    let device = cube_device(&gpu()).expect("wgpu is a CubeCL device");
    let tensor = CubeBackend::float_from_data(data, &device);
    let rank = tensor.meta.num_dims();
    without_unit_axes(in_layout(with_unit_axes(tensor), laid_last), rank - 2)
}

/// A rank-5 activation channels-last in memory or contiguous, as `laid_last` asks (copied only
/// when it is not already).
fn in_layout(tensor: CubeTensor, laid_last: bool) -> CubeTensor {
    match (laid_last, channels_last(&tensor)) {
        (true, true) => tensor,
        (true, false) => {
            let ndhwc = contiguous(permute(tensor, &[0, 2, 3, 4, 1]));
            permute(ndhwc, &[0, 4, 1, 2, 3])
        }
        (false, _) => contiguous(tensor),
    }
}

fn on_flex(data: TensorData) -> FlexTensor {
    FlexTensor::from_data(data)
}

fn gpu() -> Device {
    Device::wgpu(Default::default())
}

/// Our kernels pinned on the wgpu device until dropped; one test at a time holds the pin (the
/// choice is per device, and the tests run in parallel).
struct Pinned(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Pinned {
    fn ours() -> Self {
        Self::to(CubeKernels::Ours(OurKernels::default()))
    }

    fn burn() -> Self {
        Self::to(CubeKernels::Burn)
    }

    fn to(kernels: CubeKernels) -> Self {
        static PIN: Mutex<()> = Mutex::new(());
        let guard = PIN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        set_cube_kernels(&gpu(), kernels);
        Self(guard)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        set_cube_kernels(&gpu(), CubeKernels::default());
    }
}

/// Whether an `(N, C, *spatial)` result is channels-last in memory.
fn is_channels_last(tensor: &CubeTensor) -> bool {
    channels_last(&with_unit_axes(tensor.clone()))
}

/// `tensor`'s values in logical order.
fn read(tensor: CubeTensor) -> Vec<f32> {
    into_data_sync(contiguous(tensor))
        .try_to_vec::<f32>()
        .unwrap()
}

fn assert_close(what: &str, got: Vec<f32>, expected: FlexTensor) {
    let expected = expected.into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(got.len(), expected.len(), "{what}: lengths");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        let same = g == e || (g.is_nan() && e.is_nan());
        assert!(
            same || (g - e).abs() <= 1e-4 + 1e-4 * e.abs(),
            "{what}: element {i} is {g}, Flex gives {e}"
        );
    }
}

/// The kernels a record holds, after checking that it made no layout copy.
fn kernels(what: &str, launches: Vec<Launch>) -> Vec<&'static str> {
    assert!(
        !launches.contains(&Launch::LayoutCopy),
        "{what}: copies an operand: {launches:?}"
    );
    launches
        .into_iter()
        .map(|launch| match launch {
            Launch::Kernel(name) => name,
            other => panic!("{what}: expected our kernels only, got {other:?}"),
        })
        .collect()
}

/// Flex's results of the four passes on a case's values.
struct Expected {
    out_dims: Vec<usize>,
    passes: [FlexTensor; 4],
}

impl Expected {
    fn of(case: &Case, options: &ConvOptions<3>) -> Self {
        let x = || on_flex(data(&case.x, 1));
        let weight = || on_flex(data(&case.weight, 2));
        let forward = Flex::conv(x(), weight(), options.clone(), None);
        let out_dims = forward.shape().to_vec();
        let out_grad = || on_flex(data(&out_dims, 3));
        let (x_size, kernel) = (spatial(&case.x), spatial(&case.weight));
        let passes = [
            forward,
            Flex::conv_x_backward(weight(), out_grad(), x_size, options.clone()),
            Flex::conv_weight_backward(x(), out_grad(), kernel, options.clone()),
            Flex::conv_bias_backward(out_grad()),
        ];
        Self { out_dims, passes }
    }
}

const PASSES: [&str; 4] = [
    "forward",
    "input gradient",
    "weight gradient",
    "bias gradient",
];

#[test]
fn conv_passes_keep_the_operands_layout_without_copies() {
    let _pinned = Pinned::ours();
    for case in cases() {
        let n = case.x.len() - 2;
        let stride = lift_axes(&vec![case.stride; n], 1);
        let padding = lift_axes(&vec![case.padding; n], 0);
        let options = ConvOptions::new(stride, padding, [1; 3], case.groups);
        let expected = Expected::of(&case, &options);
        for laid_last in [false, true] {
            check_case(&case, &options, &expected, laid_last);
        }
    }
}

/// Every pass of `case` on operands laid out channels-last or contiguous: the launches, the
/// result's rank and layout, and its values.
fn check_case(case: &Case, options: &ConvOptions<3>, expected: &Expected, laid_last: bool) {
    let layout = if laid_last {
        "channels-last"
    } else {
        "contiguous"
    };
    let x = on_device(data(&case.x, 1), laid_last);
    let weight = on_device(data(&case.weight, 2), false);
    let out_grad = on_device(data(&expected.out_dims, 3), laid_last);
    let (x_size, kernel) = (spatial(&case.x), spatial(&case.weight));
    let passes: [Box<dyn Fn() -> CubeTensor>; 4] = [
        Box::new(|| CubeBackend::conv(x.clone(), weight.clone(), options.clone(), None)),
        Box::new(|| {
            CubeBackend::conv_x_backward(weight.clone(), out_grad.clone(), x_size, options.clone())
        }),
        Box::new(|| {
            CubeBackend::conv_weight_backward(x.clone(), out_grad.clone(), kernel, options.clone())
        }),
        Box::new(|| CubeBackend::conv_bias_backward(out_grad.clone())),
    ];
    for (i, pass) in passes.iter().enumerate() {
        let what = format!("{} ({layout}), {}", case.name, PASSES[i]);
        let (result, launches) = record(pass);
        assert_eq!(kernels(&what, launches), case.launches[i], "{what}");
        match i {
            // Activations keep the layout; the weight gradient is contiguous like the weight.
            0 | 1 => check_layout(&what, &result, case.x.len(), laid_last),
            2 => check_layout(&what, &result, case.x.len(), false),
            _ => {}
        }
        assert_close(&what, read(result), expected.passes[i].clone());
    }
}

/// Pinned to cubek's GEMM routines (the unit routine's register tiles, the plane routine's
/// interleaved ones), each pass reads channels-last operands (as vectors of channels) and
/// contiguous ones, and writes its result in their layout (the weight gradient contiguous),
/// with Flex's values.
#[test]
fn gemm_pins_read_and_write_each_layout() {
    use super::choice::{ConvSchedule, GemmTile};
    for tile in [GemmTile::Register, GemmTile::Interleaved] {
        let gemm = OurKernels::default().with_conv(ConvSchedule::Gemm(tile));
        let _pinned = Pinned::to(CubeKernels::Ours(gemm));
        for case in cases().iter().take(2) {
            let options = ConvOptions::new([1, case.stride, case.stride], [0, 1, 1], [1; 3], 1);
            let expected = Expected::of(case, &options);
            for laid_last in [false, true] {
                let x = on_device(data(&case.x, 1), laid_last);
                let weight = on_device(data(&case.weight, 2), false);
                let out_grad = on_device(data(&expected.out_dims, 3), laid_last);
                let (x_size, kernel) = (spatial(&case.x), spatial(&case.weight));
                let results = [
                    CubeBackend::conv(x.clone(), weight.clone(), options.clone(), None),
                    CubeBackend::conv_x_backward(weight, out_grad.clone(), x_size, options.clone()),
                    CubeBackend::conv_weight_backward(x, out_grad, kernel, options.clone()),
                ];
                for (i, result) in results.into_iter().enumerate() {
                    let what = format!(
                        "{tile:?}: {}, channels-last {laid_last}, {}",
                        case.name, PASSES[i]
                    );
                    // The weight gradient is contiguous like the weight.
                    check_layout(&what, &result, case.x.len(), laid_last && i < 2);
                    assert_close(&what, read(result), expected.passes[i].clone());
                }
            }
        }
    }
}

/// A result at its operands' rank, channels-last exactly when `laid_last`, else contiguous.
fn check_layout(what: &str, tensor: &CubeTensor, rank: usize, laid_last: bool) {
    assert_eq!(tensor.meta.num_dims(), rank, "{what}: rank");
    let strides = tensor.meta.strides();
    assert_eq!(is_channels_last(tensor), laid_last, "{what}: {strides:?}");
    assert!(laid_last || tensor.is_contiguous(), "{what}: {strides:?}");
}

/// Pinned to Burn's kernels, each pass of a padded 3x3 conv calls exactly Burn's kernel for it,
/// as Burn's own autodiff does (`conv_data_backward` for the input gradient), takes its result
/// as Burn returns it (no layout copy), and adds only the repair's test on the device: of the
/// weight (forward and input gradient: a finite one skips the repair's work) or of each weight
/// gradient element. A non-finite weight or output gradient still gives the definition's
/// result, as Flex's: the padding contributes no product.
#[test]
fn burn_kernels_run_as_burn_calls_them_and_stay_exact() {
    use Launch::{Burn, Kernel};
    let _pinned = Pinned::burn();
    let case = &cases()[1];
    let gated = |burn| vec![Burn(burn), Kernel("nonfinite_flags"), Kernel("repair_gemm")];
    let expected_launches = [
        gated("conv_forward"),
        gated("conv_data_backward"),
        vec![Burn("conv_weight_backward"), Kernel("repair_weight")],
    ];
    let options = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    for non_finite in [false, true] {
        let mut weight = data(&case.weight, 2);
        if non_finite {
            weight = with_infinity(weight, 0);
        }
        let x = || on_flex(data(&case.x, 1));
        let flex_weight = || on_flex(weight.clone());
        let forward = Flex::conv(x(), flex_weight(), options.clone(), None);
        let mut grad = data(forward.shape().as_slice(), 3);
        if non_finite {
            grad = with_infinity(grad, 0);
        }
        let out_grad = || on_flex(grad.clone());
        let (x_size, kernel) = (spatial(&case.x), spatial(&case.weight));
        let expected = [
            forward,
            Flex::conv_x_backward(flex_weight(), out_grad(), x_size, options.clone()),
            Flex::conv_weight_backward(x(), out_grad(), kernel, options.clone()),
        ];
        for laid_last in [false, true] {
            let what = |pass: &str| format!("{pass}, channels-last {laid_last}, inf {non_finite}");
            let x = on_device(data(&case.x, 1), laid_last);
            let weight = on_device(weight.clone(), false);
            let out_grad = on_device(grad.clone(), laid_last);
            let passes: [Box<dyn Fn() -> CubeTensor>; 3] = [
                Box::new(|| CubeBackend::conv(x.clone(), weight.clone(), options.clone(), None)),
                Box::new(|| {
                    let (weight, out_grad) = (weight.clone(), out_grad.clone());
                    CubeBackend::conv_x_backward(weight, out_grad, x_size, options.clone())
                }),
                Box::new(|| {
                    let (x, out_grad) = (x.clone(), out_grad.clone());
                    CubeBackend::conv_weight_backward(x, out_grad, kernel, options.clone())
                }),
            ];
            for (i, pass) in passes.iter().enumerate() {
                let what = what(PASSES[i]);
                let (result, launches) = record(pass);
                assert_eq!(launches, expected_launches[i], "{what}");
                assert_eq!(result.meta.num_dims(), case.x.len(), "{what}: rank");
                assert_close(&what, read(result), expected[i].clone());
            }
        }
    }
}

/// The repair a result of Burn's gets is gated on the device by the weight's finiteness test:
/// given a result with NaN where padding met an infinite weight (as a kernel that multiplies
/// the padding's zeros leaves it), it restores Flex's values; given the same NaN beside a
/// finite weight, it leaves the result alone (no test passes, no unit recomputes).
#[test]
fn the_gated_repair_runs_only_for_a_non_finite_weight() {
    use super::conv::repair_gemm;
    use burn_convpool_kernels::conv::GemmKind;
    let _pinned = Pinned::ours();
    let case = &cases()[1];
    let options = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    let x = data(&case.x, 1);
    let lift = |data: TensorData| with_unit_axes(on_device(data, false));
    for infinite in [true, false] {
        let mut weight = data(&case.weight, 2);
        if infinite {
            weight = with_infinity(weight, 0);
        }
        let forward = Flex::conv(
            on_flex(x.clone()),
            on_flex(weight.clone()),
            options.clone(),
            None,
        );
        let out_grad = data(forward.shape().as_slice(), 3);
        let data_grad = Flex::conv_x_backward(
            on_flex(weight.clone()),
            on_flex(out_grad.clone()),
            spatial(&case.x),
            options.clone(),
        );
        let geometry = crate::spec::ConvGeometry::conv(
            &dims5(&lift(x.clone())),
            &dims5(&lift(weight.clone())),
            &options,
        );
        for (kind, lhs, expected) in [
            (GemmKind::Forward, x.clone(), forward),
            (GemmKind::Data, out_grad, data_grad),
        ] {
            let what = format!("{kind:?}, infinite weight {infinite}");
            // Element 0 is at the first position, whose windows (and taps) meet the padding.
            let poisoned = with_value(expected.clone().into_data(), 0, f32::NAN);
            let (lhs, rhs) = (lift(lhs), lift(weight.clone()));
            let (repaired, launches) =
                record(|| repair_gemm(&geometry, kind, (lhs, rhs, None), lift(poisoned)).unwrap());
            assert_eq!(kernels(&what, launches), ["nonfinite_flags", "repair_gemm"]);
            let repaired = read(repaired);
            if infinite {
                assert_close(&what, repaired, expected);
            } else {
                assert!(
                    repaired[0].is_nan(),
                    "{what}: repaired with a finite weight"
                );
                assert_close(&what, repaired[1..].to_vec(), on_flex(tail(expected)));
            }
        }
    }
}

/// `data` flattened, without its first element.
fn tail(tensor: FlexTensor) -> TensorData {
    let values = tensor.into_data().try_to_vec::<f32>().unwrap();
    let len = values.len() - 1;
    TensorData::new(values[1..].to_vec(), [len])
}

/// `data` with its element `at` set to `value`.
fn with_value(data: TensorData, at: usize, value: f32) -> TensorData {
    let shape = data.shape().to_vec();
    let mut values = data.try_to_vec::<f32>().unwrap();
    values[at] = value;
    TensorData::new(values, shape)
}

/// `data` with its element `at` set to infinity.
fn with_infinity(data: TensorData, at: usize) -> TensorData {
    with_value(data, at, f32::INFINITY)
}

/// Per-axis values of the last spatial axes, lifted to rank 3 with `fill`.
fn lift_axes(values: &[usize], fill: usize) -> [usize; 3] {
    let mut lifted = [fill; 3];
    lifted[3 - values.len()..].copy_from_slice(values);
    lifted
}

/// A pool of `(2, 8, 9, 8)` as its forward and backward primitives on one backend.
trait PoolPasses<B: ConvPoolBackend> {
    fn forward(&self, x: B::FloatTensorPrimitive) -> (B::FloatTensorPrimitive, Saved<B>);
    fn backward(
        &self,
        out_grad: B::FloatTensorPrimitive,
        saved: Saved<B>,
    ) -> B::FloatTensorPrimitive;
}

/// What a pool's backward needs from its forward: max pooling's indices.
type Saved<B> = Option<<B as burn::backend::BackendTypes>::IntTensorPrimitive>;

const POOL_X: [usize; 4] = [2, 8, 9, 8];

fn max_options() -> MaxPoolOptions<3> {
    MaxPoolOptions::new([1, 3, 3])
        .with_stride([1, 2, 2])
        .with_padding([0, 1, 1])
}

fn avg_options() -> AvgPoolNdOptions<3> {
    AvgPoolNdOptions::new([1, 3, 2]).with_stride([1, 2, 1])
}

/// The pools whose layout the backend keeps: max (sliding windows, indices), average, and
/// adaptive average.
#[derive(Clone, Copy, Debug)]
enum Pool {
    Max,
    Avg,
    Adaptive,
}

impl<B: ConvPoolBackend> PoolPasses<B> for Pool {
    fn forward(&self, x: B::FloatTensorPrimitive) -> (B::FloatTensorPrimitive, Saved<B>) {
        match self {
            Self::Max => {
                let (out, indices) = B::max_pool_with_indices(x, max_options(), IntDType::I32);
                (out, Some(indices))
            }
            Self::Avg => (B::avg_pool(x, avg_options()), None),
            Self::Adaptive => (B::adaptive_avg_pool(x, [1, 4, 3]), None),
        }
    }

    fn backward(
        &self,
        out_grad: B::FloatTensorPrimitive,
        saved: Saved<B>,
    ) -> B::FloatTensorPrimitive {
        let x_size = spatial(&POOL_X);
        match self {
            Self::Max => {
                let indices = saved.expect("max pooling saves its indices");
                let rule = WindowRule::Sliding(max_options());
                B::max_pool_backward(out_grad, indices, x_size, rule)
            }
            Self::Avg => B::avg_pool_backward(out_grad, x_size, avg_options()),
            Self::Adaptive => B::adaptive_avg_pool_backward(out_grad, x_size),
        }
    }
}

/// Pools keep their operand's layout too: channels-last in, channels-last out (values,
/// indices and the input gradient), contiguous in, contiguous out, with no copy.
#[test]
fn pools_keep_the_operands_layout_without_copies() {
    let _pinned = Pinned::ours();
    for pool in [Pool::Max, Pool::Avg, Pool::Adaptive] {
        let (expected, flex_saved) = PoolPasses::<Flex>::forward(&pool, on_flex(data(&POOL_X, 4)));
        let out_dims = expected.shape().to_vec();
        let expected_grad =
            PoolPasses::<Flex>::backward(&pool, on_flex(data(&out_dims, 5)), flex_saved);
        for laid_last in [false, true] {
            let layout = if laid_last {
                "channels-last"
            } else {
                "contiguous"
            };
            let what = |pass: &str| format!("{pool:?} pool ({layout}), {pass}");
            let x = on_device(data(&POOL_X, 4), laid_last);
            let ((out, saved), launches) = record(|| PoolPasses::<CubeBackend>::forward(&pool, x));
            kernels(&what("forward"), launches);
            check_layout(&what("forward"), &out, 4, laid_last);
            if let Some(indices) = &saved {
                check_layout(&what("indices"), indices, 4, laid_last);
            }
            assert_close(&what("forward"), read(out), expected.clone());
            let out_grad = on_device(data(&out_dims, 5), laid_last);
            let (x_grad, launches) =
                record(|| PoolPasses::<CubeBackend>::backward(&pool, out_grad, saved));
            kernels(&what("backward"), launches);
            check_layout(&what("backward"), &x_grad, 4, laid_last);
            assert_close(&what("backward"), read(x_grad), expected_grad.clone());
        }
    }
}

//! Pools on the CubeCL kernels against Flex, on permuted inputs: every kind and rank, and
//! max-pool indices with ties, NaN and -inf.

use burn::tensor::{Device, Tensor, TensorData};
use burn_convpool::*;

use super::{Leaf, assert_close, cross_pool, rng, values_and_indices, wgpu};
use crate::common;

fn pool_case<const O: usize>(name: &str, dims: [usize; 4], op: impl Fn(Tensor<4>) -> Tensor<O>) {
    let mut rng = rng(name);
    cross_pool(name, &[Leaf::random(&mut rng, dims).permuted()], |t| {
        op(t[0].clone())
    });
}

#[test]
fn pools_match_cpu() {
    pool_case("max", [2, 3, 9, 8], |x| {
        max_pool2d(
            x,
            MaxPoolOptions::new([3, 2])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .with_dilation([1, 2])
                .with_ceil_mode(true),
        )
    });
    pool_case("avg_pad", [2, 3, 9, 8], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([3, 3])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .with_ceil_mode(true),
        )
    });
    pool_case("avg_nopad", [1, 2, 7, 10], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([3, 2])
                .with_stride([2, 3])
                .with_padding([1, 1])
                .with_count_include_pad(false)
                .with_ceil_mode(true),
        )
    });
    pool_case("avg_divisor", [1, 2, 7, 7], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([2, 3])
                .with_padding([1, 1])
                .with_divisor_override(5),
        )
    });
    // Windows with more covering outputs than the backward unrolls walk them in loops; a
    // max window over 7 taps runs the general forward.
    pool_case("avg_7x7_s1", [1, 2, 12, 11], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([7, 7])
                .with_stride([1, 1])
                .with_padding([3, 3])
                .with_count_include_pad(false),
        )
    });
    pool_case("max_9x9", [1, 2, 12, 11], |x| {
        max_pool2d(
            x,
            MaxPoolOptions::new([9, 9])
                .with_stride([1, 2])
                .with_padding([4, 4]),
        )
    });
    pool_case("adaptive_avg", [2, 3, 11, 7], |x| {
        adaptive_avg_pool2d(x, [4, 3])
    });
    // Global averages take the whole-plane backward; 91 elements leave a partial block.
    pool_case("global_avg", [2, 3, 13, 7], |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    pool_case("avg_whole_divisor", [1, 2, 5, 6], |x| {
        avg_pool2d(x, AvgPoolNdOptions::new([5, 6]).with_divisor_override(7))
    });
    pool_case("adaptive_max", [2, 3, 11, 7], |x| {
        adaptive_max_pool2d(x, [5, 4])
    });
    pool_case("lp2", [1, 3, 9, 8], |x| {
        lp_pool2d(
            x,
            LpPoolOptions::new(2.0, [3, 2])
                .with_stride([2, 2])
                .with_ceil_mode(true),
        )
    });
    pool_case("lp3", [1, 2, 8, 8], |x| {
        lp_pool2d(x, LpPoolOptions::new(3.0, [2, 2]))
    });
    pool_case("lp_inf", [1, 2, 8, 7], |x| {
        lp_pool2d(
            x,
            LpPoolOptions::new(f64::INFINITY, [3, 3]).with_stride([2, 2]),
        )
    });
    pool_case("lp_frac", [1, 2, 8, 8], |x| {
        lp_pool2d(x.abs() + 0.1, LpPoolOptions::new(1.5, [2, 3]))
    });
    // Below p = 1 the backward sums the windows again (the output may not give the total's
    // sign); overlapping and partial windows.
    pool_case("lp_root", [1, 2, 9, 8], |x| {
        lp_pool2d(
            x.abs() + 0.1,
            LpPoolOptions::new(0.5, [3, 2])
                .with_stride([2, 1])
                .with_ceil_mode(true),
        )
    });
}

#[test]
fn pools_3d_1d_fractional_and_unpool_match_cpu() {
    let mut rng = rng("pool-others");
    let x = Leaf::random(&mut rng, [1, 2, 5, 6, 7]);
    cross_pool("max3d", &[x.permuted()], |t| {
        max_pool3d(
            t[0].clone(),
            MaxPoolOptions::new([2, 3, 2])
                .with_stride([1, 2, 2])
                .with_padding([1, 1, 0]),
        )
    });
    let x = Leaf::random(&mut rng, [1, 2, 5, 6, 7]);
    cross_pool("avg3d", &[x], |t| {
        avg_pool3d(
            t[0].clone(),
            AvgPoolNdOptions::new([2, 2, 3])
                .with_padding([1, 0, 1])
                .with_ceil_mode(true),
        )
    });
    let x = Leaf::random(&mut rng, [2, 3, 3, 4, 5]);
    cross_pool("global_avg3d", &[x.permuted()], |t| {
        adaptive_avg_pool3d(t[0].clone(), [1, 1, 1])
    });
    let x = Leaf::random(&mut rng, [2, 3, 17]);
    cross_pool("max1d", &[x], |t| {
        max_pool1d(t[0].clone(), MaxPoolOptions::new([4]).with_stride([3]))
    });
    let x = Leaf::random(&mut rng, [2, 3, 11, 13]);
    let samples: Vec<f32> = rng
        .values(2 * 3 * 2)
        .iter()
        .map(|v| v.abs() as f32)
        .collect();
    cross_pool("fractional", &[x], |t| {
        let samples =
            Tensor::<3>::from_data(TensorData::new(samples.clone(), [2, 3, 2]), &t[0].device());
        let options = FractionalMaxPoolOptions::new([3, 2], FractionalOutput::Size([5, 6]));
        fractional_max_pool2d(t[0].clone(), options, Some(samples))
    });
    let x = Leaf::random(&mut rng, [2, 3, 8, 10]);
    cross_pool("unpool", &[x], |t| {
        let options = MaxPoolOptions::new([2, 2]).with_stride([2, 2]);
        let (values, indices) = max_pool2d_with_indices(t[0].clone(), options);
        max_unpool2d(
            values,
            indices,
            MaxUnpoolOptions::new([2, 2]).with_output_size([8, 10]),
        )
    });
}

#[test]
fn indices_match_cpu() {
    let mut rng = rng("indices");
    let mut values: Vec<f32> = rng
        .values(2 * 3 * 9 * 10)
        .iter()
        .map(|&v| v as f32)
        .collect();
    // Ties, NaN and -inf: first max wins, NaN wins, an all -inf window keeps its first tap.
    // Rows 3 to 5 of the first plane are -inf: output row 2's windows hold nothing else.
    values[..12].fill(0.5);
    values[20] = f32::NAN;
    values[30..60].fill(f32::NEG_INFINITY);
    let indices_on = |device: &Device| -> (Vec<f32>, Vec<i64>) {
        let x = Tensor::<4>::from_data(TensorData::new(values.clone(), [2, 3, 9, 10]), device);
        let options = MaxPoolOptions::new([3, 3])
            .with_stride([2, 2])
            .with_padding([1, 1]);
        let (out, indices) = max_pool2d_with_indices(x, options);
        values_and_indices(out, indices)
    };
    let (cpu_values, cpu_indices) = indices_on(&Device::flex());
    common::each_packing_pinned(|kernels| {
        let (gpu_values, gpu_indices) = indices_on(&wgpu());
        assert_eq!(gpu_indices, cpu_indices, "{kernels}");
        assert_close(&format!("max values, {kernels}"), &gpu_values, &cpu_values);
    });
}

/// Windows of 90,000 taps, two to a row (what a unit packs) and in adaptive tables: Mesa's
/// lavapipe (CI's device) ends a shader loop after 65535 iterations, and the span walk once
/// stopped there (a max of 0 where Flex gives 0.99998, an average of 0.000296 against
/// 0.000435).
#[test]
fn long_windows_match_cpu() {
    pool_case("long_max", [1, 1, 300, 400], |x| {
        max_pool2d(x, MaxPoolOptions::new([300, 300]).with_stride([1, 100]))
    });
    pool_case("long_avg", [1, 1, 300, 400], |x| {
        avg_pool2d(x, AvgPoolNdOptions::new([300, 300]).with_stride([1, 100]))
    });
    pool_case("long_lp", [1, 1, 300, 400], |x| {
        lp_pool2d(x, LpPoolOptions::new(2.0, [300, 300]).with_stride([1, 100]))
    });
    pool_case("long_adaptive_avg", [1, 2, 600, 300], |x| {
        adaptive_avg_pool2d(x, [2, 1])
    });
    pool_case("long_adaptive_max", [1, 2, 600, 300], |x| {
        adaptive_max_pool2d(x, [2, 1])
    });
}

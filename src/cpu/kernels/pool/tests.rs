use super::average::whole_plane;
use super::max::max_of_box;
use super::slide::{SlidePlan, regular_run};
use super::*;
use crate::spec::{Spans, adaptive_spans3};

/// The global average (one window over the whole plane, a vector sum or a pairwise one) against
/// a plain sum in f64, in f32 and f64, for plane counts that fill tasks unevenly, planes shorter
/// and longer than a vector and than a leaf, and inputs on both sides of the thread cut-off;
/// its gradient is the same share everywhere.
#[test]
fn global_average_of_every_plane() {
    fn check<T: Element + Into<f64>>(tolerance: f64) {
        for (in_size, planes) in [
            ([1, 7, 5], 1),
            ([1, 7, 5], 65),
            ([2, 3, 2], 200),
            ([1, 1, 3], 9),
            ([1, 2, 4], 5),
            ([1, 4, 4], 3),
            ([1, 17, 19], 3),
            ([1, 16, 16], 2100),
        ] {
            let volume: usize = in_size.iter().product();
            let x: Vec<T> = (0..planes * volume)
                .map(|i| T::from_f64(((i * 7919 % 1000) as f64 - 500.0) / 37.0))
                .collect();
            let spans = adaptive_spans3(in_size, [1, 1, 1]);
            assert!(whole_plane(in_size, &spans).is_some());
            let out = avg_pool(&x, in_size, &spans, tap_divisor);
            assert_eq!(out.len(), planes);
            let expected = x
                .chunks(volume)
                .map(|plane| plane.iter().map(|&v| v.into()).sum::<f64>() / volume as f64);
            for (p, (&got, expected)) in out.iter().zip(expected).enumerate() {
                let got: f64 = got.into();
                assert!(
                    (got - expected).abs() < tolerance,
                    "{in_size:?} x {planes}, plane {p}: {got} vs {expected}"
                );
            }
            let grad = avg_pool_backward(&out, in_size, &spans, tap_divisor);
            let divisor = T::from_f64(volume as f64);
            for (plane, &share) in grad.chunks(volume).zip(&out) {
                assert!(plane.iter().all(|&v| v == share.div(divisor)));
            }
        }
    }
    check::<f32>(1e-5);
    check::<f64>(1e-12);
    // A window short of the plane takes the general walk.
    let in_size = [1, 4, 4];
    assert!(whole_plane(in_size, &adaptive_spans3(in_size, [1, 2, 1])).is_none());
}

/// Every plane of `x` through `max_pool` against the scalar scan of each box, bit for bit.
fn check_against_box_scan(in_size: [usize; 3], spans: &Spans, what: &str) {
    let volume: usize = in_size.iter().product();
    // The last plane all -inf: each box's index is its first tap.
    let planes = 4;
    let x: Vec<f32> = (0..planes * volume)
        .map(|i| match i * 7919 % 23 {
            _ if i / volume == planes - 1 => f32::NEG_INFINITY,
            0 => f32::NAN,
            1 | 2 => f32::NEG_INFINITY,
            v => (v % 5) as f32,
        })
        .collect();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let (out, indices) = max_pool::<f32, i64>(&x, in_size, out_volume, |_| spans, |v| v);
    let (_, indices32) = max_pool::<f32, i32>(&x, in_size, out_volume, |_| spans, |v| v);
    for p in 0..planes {
        let plane = &x[p * volume..][..volume];
        for_each_box([&spans[0], &spans[1], &spans[2]], |o, boxed| {
            let (best, index) = max_of_box(plane, in_size, boxed, &|v| v);
            let at = p * out_volume + o;
            assert_eq!(out[at].to_bits(), best.to_bits(), "{what} value {at}");
            assert_eq!(indices[at], index as i64, "{what} index {at}");
            assert_eq!(indices32[at], index as i32, "{what} i32 index {at}");
        });
    }
}

/// The spans of a sliding max pool, one case a line: (input size, kernel, stride, padding,
/// dilation, ceil mode).
type WindowCase = (
    [usize; 3],
    [usize; 3],
    [usize; 3],
    [usize; 3],
    [usize; 3],
    bool,
);

fn sliding(case: WindowCase) -> Spans {
    use crate::spec::{MaxPoolOptions, window_spans};
    let (in_size, kernel, stride, padding, dilation, ceil_mode) = case;
    let options = MaxPoolOptions::new(kernel)
        .with_stride(stride)
        .with_padding(padding)
        .with_dilation(dilation)
        .with_ceil_mode(ceil_mode);
    window_spans(in_size, &options)
}

/// The row scan's vectorized runs (phase-split rows, selects, winning tap numbers) against
/// the scalar scan of each box, bit for bit, on inputs full of ties, NaN and -inf: a 3D
/// window, a plane too large for the slide, and uneven adaptive windows.
#[test]
fn vectorized_runs_match_the_box_scan() {
    #[rustfmt::skip]
    let cases: [WindowCase; 3] = [
        ([4, 6, 22], [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], false),
        ([2, 9, 30], [1, 2, 3], [1, 1, 1], [0, 0, 1], [1, 1, 1], false),
        ([1, 70, 70], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], false),
    ];
    let adaptive = adaptive_spans3([1, 11, 29], [1, 4, 9]);
    let spans = cases.map(|case| {
        let spans = sliding(case);
        assert!(regular_run(&spans[2]).is_some(), "{spans:?} has no run");
        (case.0, spans)
    });
    for (in_size, spans) in spans.into_iter().chain([([1, 11, 29], adaptive)]) {
        assert!(
            SlidePlan::<i64>::new(&spans, in_size).is_none(),
            "{in_size:?} slides"
        );
        check_against_box_scan(in_size, &spans, &format!("{in_size:?}"));
    }
}

/// The slide (bordered, phase-split planes, one select loop per tap) against the scalar scan
/// of each box, bit for bit, on inputs full of ties, NaN and -inf: strides 1 to 3 (2 has its
/// own split), dilation, padding, ceil mode, windows wider than the input, one output row,
/// a 1D pool and evenly spaced adaptive windows.
#[test]
fn slid_planes_match_the_box_scan() {
    #[rustfmt::skip]
    let cases: [WindowCase; 8] = [
        ([1, 13, 29], [1, 3, 3], [1, 2, 2], [0, 1, 1], [1, 1, 1], false),
        ([1, 9, 30], [1, 2, 3], [1, 1, 1], [0, 0, 1], [1, 1, 1], false),
        ([1, 11, 31], [1, 3, 2], [1, 3, 3], [0, 1, 1], [1, 1, 2], true),
        ([1, 8, 40], [1, 2, 3], [1, 2, 2], [0, 1, 0], [1, 2, 3], true),
        ([1, 28, 28], [1, 3, 3], [1, 2, 2], [0, 1, 1], [1, 1, 1], false),
        ([1, 4, 6], [1, 3, 5], [1, 1, 1], [0, 1, 2], [1, 1, 1], false),
        ([1, 3, 17], [1, 3, 3], [1, 1, 2], [0, 0, 1], [1, 1, 1], true),
        ([1, 1, 29], [1, 1, 4], [1, 1, 3], [0, 0, 2], [1, 1, 1], true),
    ];
    let adaptive = adaptive_spans3([1, 12, 30], [1, 6, 10]);
    let spans = cases.map(|case| (case.0, sliding(case))).into_iter();
    for (in_size, spans) in spans.chain([([1, 12, 30], adaptive)]) {
        assert!(
            SlidePlan::<i64>::new(&spans, in_size).is_some(),
            "{in_size:?}: {spans:?} does not slide"
        );
        check_against_box_scan(in_size, &spans, &format!("{in_size:?}"));
    }
}

//! The window model every pool walks: for each output position, a box of input taps that is the
//! product of one [`Span`] per spatial axis. The three ways of placing windows (sliding,
//! adaptive, fractional) are the span builders here, and the covers (for each input position,
//! the outputs whose windows may hold it) serve the gather-form gradients.

use burn::tensor::ops::MaxPoolOptions;

use super::window::{inside, out_len};

/// The input taps one output position reads along one axis: `start, start + step, ...`
/// (`count` of them, all inside the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First input index.
    pub start: usize,
    /// Number of taps inside the input.
    pub count: usize,
    /// Distance between taps (the dilation).
    pub step: usize,
    /// Window length clipped to the padded input: the `count_include_pad` divisor factor.
    pub padded: usize,
}

impl Span {
    /// The input indices of the taps, in order.
    pub fn taps(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.count).map(|t| self.start + t * self.step)
    }
}

/// The spans of every output position along each of the three (lifted) axes.
pub type Spans = [Vec<Span>; 3];

/// Output sizes of a sliding window over `in_size`.
pub fn window_out_size(in_size: [usize; 3], options: &MaxPoolOptions<3>) -> [usize; 3] {
    core::array::from_fn(|i| {
        out_len(
            in_size[i],
            options.padding[i],
            options.kernel_size[i],
            options.stride[i],
            options.dilation[i],
            options.ceil_mode,
        )
        .unwrap_or(0)
    })
}

/// Spans of a validated sliding window over `in_size`.
pub fn window_spans(in_size: [usize; 3], options: &MaxPoolOptions<3>) -> Spans {
    let out = window_out_size(in_size, options);
    core::array::from_fn(|i| {
        sliding_spans(
            in_size[i],
            out[i],
            options.kernel_size[i],
            options.stride[i],
            options.padding[i],
            options.dilation[i],
        )
    })
}

/// Spans of adaptive pooling from `in_size` to `out_size`.
pub fn adaptive_spans3(in_size: [usize; 3], out_size: [usize; 3]) -> Spans {
    core::array::from_fn(|i| adaptive_spans(in_size[i], out_size[i]))
}

/// Spans of a sliding window (max, avg and LP pooling).
pub fn sliding_spans(
    len: usize,
    out: usize,
    kernel: usize,
    stride: usize,
    (pad_begin, pad_end): (usize, usize),
    dilation: usize,
) -> Vec<Span> {
    (0..out)
        .map(|o| {
            // 128-bit: a start deep in the padding, and its end, are exact.
            let first = o as i128 * stride as i128 - pad_begin as i128;
            let taps = inside(first, dilation, kernel, len);
            let start = first + taps.start as i128 * dilation as i128;
            let end = (first + kernel as i128).min(len as i128 + pad_end as i128);
            Span {
                start: start.max(0) as usize,
                count: taps.len(),
                // One tap has no step: 1 keeps a huge, unused dilation out of the kernels'
                // 32-bit tables.
                step: if taps.len() > 1 { dilation } else { 1 },
                padded: (end - first).max(0) as usize,
            }
        })
        .collect()
}

/// Spans of adaptive pooling: output `i` covers `[floor(i * len / out), ceil((i + 1) * len / out))`.
pub fn adaptive_spans(len: usize, out: usize) -> Vec<Span> {
    // 128-bit products: `(o + 1) * len` may pass usize for a huge output size.
    let (len, out) = (len as u128, out as u128);
    (0..out)
        .map(|o| {
            let start = o * len / out;
            let end = ((o + 1) * len).div_ceil(out);
            Span {
                start: start as usize,
                count: (end - start) as usize,
                step: 1,
                padded: (end - start) as usize,
            }
        })
        .collect()
}

/// Spans of fractional max pooling for one sample `u` in `[0, 1)`, as PyTorch's
/// `generate_intervals`: `alpha = (len - kernel) / (out - 1)`,
/// `start[i] = int((i + u) * alpha) - int(u * alpha)`, and the last window ends at the input's
/// end. The float math runs in f32 when the input is f32, as PyTorch's does.
pub fn fractional_spans(
    len: usize,
    out: usize,
    kernel: usize,
    sample: f64,
    f32_math: bool,
) -> Vec<Span> {
    let start = |i: usize| -> usize {
        if i + 1 == out {
            return len - kernel;
        }
        let position = if f32_math {
            let alpha = (len - kernel) as f32 / (out - 1) as f32;
            let u = sample as f32;
            ((i as f32 + u) * alpha) as i64 - (u * alpha) as i64
        } else {
            let alpha = (len - kernel) as f64 / (out - 1) as f64;
            ((i as f64 + sample) * alpha) as i64 - (sample * alpha) as i64
        };
        (position.max(0) as usize).min(len - kernel)
    };
    (0..out)
        .map(|i| Span {
            start: start(i),
            count: kernel,
            step: 1,
            padded: kernel,
        })
        .collect()
}

/// Where the windows of an index-producing pool (max, adaptive max, fractional max) lie: what
/// a gather-form gradient needs to visit, for each input element, only the outputs whose
/// windows may hold it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WindowRule {
    /// Sliding windows (max pooling, and LP pooling with `p = inf`).
    Sliding(MaxPoolOptions<3>),
    /// Adaptive windows.
    Adaptive,
    /// Fractional windows of this size (their starts depend on per-plane samples).
    Fractional {
        /// Window size.
        kernel_size: [usize; 3],
    },
}

/// The former name of [`WindowRule`].
#[deprecated(note = "renamed `WindowRule`")]
pub type IndexWindows = WindowRule;

impl WindowRule {
    /// Per axis and input position, the outputs `lo..hi` whose windows may hold it.
    pub fn cover(&self, in_size: [usize; 3], out_size: [usize; 3]) -> [Vec<(usize, usize)>; 3] {
        match self {
            Self::Sliding(options) => spans_cover(in_size, &window_spans(in_size, options)),
            Self::Adaptive => spans_cover(in_size, &adaptive_spans3(in_size, out_size)),
            Self::Fractional { kernel_size } => {
                core::array::from_fn(|i| fractional_cover(in_size[i], out_size[i], kernel_size[i]))
            }
        }
    }
}

/// For each input position, the first and one past the last output whose span has it as a tap
/// (`(0, 0)` for none). Windows move forward with the output index, so these ranges are tight
/// up to dilation gaps.
pub fn span_cover(len: usize, spans: &[Span]) -> Vec<(usize, usize)> {
    let mut cover = vec![(usize::MAX, 0); len];
    for (o, span) in spans.iter().enumerate() {
        for tap in span.taps() {
            let (lo, hi) = &mut cover[tap];
            *lo = (*lo).min(o);
            *hi = (*hi).max(o + 1);
        }
    }
    cover
        .into_iter()
        .map(|(lo, hi)| if hi == 0 { (0, 0) } else { (lo, hi) })
        .collect()
}

/// [`span_cover`] of every axis.
pub fn spans_cover(in_size: [usize; 3], spans: &Spans) -> [Vec<(usize, usize)>; 3] {
    core::array::from_fn(|i| span_cover(in_size[i], &spans[i]))
}

/// A superset of the fractional windows holding each input position, whatever the sample:
/// window `o` starts within one of `o * alpha`, so it can hold `i` only if
/// `(i - kernel) / alpha - 1 < o < (i + 1) / alpha + 1`.
pub fn fractional_cover(len: usize, out: usize, kernel: usize) -> Vec<(usize, usize)> {
    let alpha = if out > 1 {
        (len - kernel) as f64 / (out - 1) as f64
    } else {
        0.0
    };
    (0..len)
        .map(|i| {
            if alpha <= 0.0 {
                return (0, out);
            }
            let lo = ((i as f64 - kernel as f64) / alpha - 1.0).floor().max(0.0) as usize;
            let hi = ((i as f64 + 1.0) / alpha + 2.0).ceil() as usize;
            (lo.min(out), hi.min(out))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_spans_clip_padding_and_ceil_overhang() {
        // len 5, k 3, s 2, pad 1, ceil: windows start at -1, 1, 3.
        let spans = sliding_spans(5, 3, 3, 2, (1, 1), 1);
        assert_eq!(
            spans[0],
            Span {
                start: 0,
                count: 2,
                step: 1,
                padded: 3
            }
        );
        assert_eq!(
            spans[2],
            Span {
                start: 3,
                count: 2,
                step: 1,
                padded: 3
            }
        );
        // Ceil overhang past the right padding does not count: len 6, k 3, s 2, pad 1.
        let spans = sliding_spans(6, 4, 3, 2, (1, 1), 1);
        assert_eq!(
            spans[3],
            Span {
                start: 5,
                count: 1,
                step: 1,
                padded: 2
            }
        );
        // Dilation 2 starting in the padding skips to the first tap inside.
        let spans = sliding_spans(7, 1, 3, 1, (1, 1), 2);
        assert_eq!(
            spans[0],
            Span {
                start: 1,
                count: 2,
                step: 2,
                padded: 3
            }
        );
    }

    #[test]
    fn adaptive_windows_overlap() {
        let spans: Vec<(usize, usize)> = adaptive_spans(7, 3)
            .iter()
            .map(|s| (s.start, s.count))
            .collect();
        assert_eq!(spans, [(0, 3), (2, 3), (4, 3)]);
        let spans: Vec<(usize, usize)> = adaptive_spans(2, 3)
            .iter()
            .map(|s| (s.start, s.count))
            .collect();
        assert_eq!(spans, [(0, 1), (0, 2), (1, 1)]);
    }

    #[test]
    fn fractional_starts_follow_pytorch() {
        let starts: Vec<usize> = fractional_spans(8, 4, 2, 0.5, true)
            .iter()
            .map(|s| s.start)
            .collect();
        // alpha = 2: int((i + 0.5) * 2) - int(1) = 2i, last = 6.
        assert_eq!(starts, [0, 2, 4, 6]);
        assert_eq!(fractional_spans(6, 1, 3, 0.3, true)[0].start, 3);
    }

    /// Every tap of every window lies in the cover range of its input position.
    fn assert_covers(spans: &[Span], cover: &[(usize, usize)]) {
        for (o, span) in spans.iter().enumerate() {
            for tap in span.taps() {
                let (lo, hi) = cover[tap];
                assert!(lo <= o && o < hi, "output {o} not in {lo}..{hi} at {tap}");
            }
        }
    }

    #[test]
    fn span_cover_holds_every_tap_tightly() {
        let spans = sliding_spans(9, 5, 3, 2, (1, 1), 1);
        let cover = span_cover(9, &spans);
        assert_covers(&spans, &cover);
        assert_eq!(cover[0], (0, 1));
        assert_eq!(cover[2], (1, 2));
        assert_eq!(cover[3], (1, 3));
        // Dilation 3: windows tap 0, 3 and 3, 6; positions between are in no window.
        let spans = sliding_spans(7, 2, 2, 3, (0, 0), 3);
        let cover = span_cover(7, &spans);
        assert_covers(&spans, &cover);
        assert_eq!(cover[1], (0, 0), "no window taps position 1");
    }

    #[test]
    fn fractional_cover_holds_every_sample() {
        for (len, out, kernel) in [
            (11, 5, 3),
            (13, 6, 2),
            (7, 7, 1),
            (9, 1, 4),
            (5, 3, 5),
            (25, 12, 2),
        ] {
            let cover = fractional_cover(len, out, kernel);
            // Samples in [0, 1], the ends included (given samples are checked against it).
            for step in 0..=50 {
                let sample = step as f64 / 50.0;
                assert_covers(&fractional_spans(len, out, kernel, sample, true), &cover);
                assert_covers(&fractional_spans(len, out, kernel, sample, false), &cover);
            }
        }
    }
}

//! The independent reference: PyTorch's definitions as direct f64 loops over the lifted
//! `(N, C, D, H, W)` form, with PyTorch's validity rules (and the crate's documented stricter
//! ones, noted where they differ). Every length is computed in `i128`, so a huge parameter is
//! exact here whatever the crate does with it. Nothing here calls the crate.

use burn_convpool::Activation;

/// A reference result: output values and dims, and the gradients of `sum(out * g)` with
/// respect to each differentiable input, in argument order.
pub struct Expected {
    pub out: Vec<f64>,
    pub dims: [usize; 5],
    /// Flat indices of the maxima, for max pools.
    pub indices: Option<Vec<i64>>,
    pub grads: Vec<Vec<f64>>,
    /// For `out`, then each gradient (none: nothing), how far each value may be off beyond the
    /// flat tolerance, in roundoffs of the inputs' dtype: a window's LP sum of signed powers may
    /// cancel, and its gradient takes that sum to the power `1/p - 1`, so the value's magnitude
    /// times the window's `count * sum |term| / |sum term|`.
    pub roundoff: Vec<Vec<f64>>,
}

/// Row-major offset in a rank-5 tensor.
fn at(dims: [usize; 5], [a, b, c, d, e]: [usize; 5]) -> usize {
    (((a * dims[1] + b) * dims[2] + c) * dims[3] + d) * dims[4] + e
}

fn volume(dims: [usize; 5]) -> usize {
    dims.iter().product()
}

/// Outputs above this many elements come only from the huge parameters (2^40 elements and
/// more): no machine holds them, so the op must reject them (typed), and the reference treats
/// them as invalid.
const MOST_ELEMENTS: u128 = 1 << 24;

/// Whether an output is too big to hold. An empty one is fine unless its strides (the
/// products of its other dims) pass the crate's limit, `isize::MAX` bytes at 8 bytes an
/// element.
fn too_big(dims: [usize; 5]) -> bool {
    let product = |of: &dyn Fn(usize) -> usize| {
        dims.iter()
            .try_fold(1u128, |product, &d| product.checked_mul(of(d) as u128))
    };
    if dims.contains(&0) {
        return product(&|d| d.max(1)).is_none_or(|strides| strides > (i64::MAX / 8) as u128);
    }
    product(&|d| d).is_none_or(|elements| elements > MOST_ELEMENTS)
}

/// The crate's documented size limit, PyTorch's int64: every parameter, padded length and
/// window volume at most `i64::MAX` (PyTorch cannot even express more).
const LARGEST: i128 = i64::MAX as i128;

fn within(values: &[usize]) -> bool {
    values.iter().all(|&v| v as i128 <= LARGEST)
}

/// Every index of a rank-5 box, row-major.
fn each(dims: [usize; 5]) -> impl Iterator<Item = [usize; 5]> {
    let total = volume(dims);
    (0..total).map(move |mut flat| {
        let mut index = [0; 5];
        for axis in (0..5).rev() {
            index[axis] = flat % dims[axis];
            flat /= dims[axis];
        }
        index
    })
}

/// Geometry of a sliding window on the three lifted axes.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub dilation: [usize; 3],
    pub padding: [(usize, usize); 3],
}

/// Where tap `k` of the window at output `o` lands, `o * stride + k * dilation - pad_begin` per
/// axis, if inside `bound` (the input of a conv, the output of a transposed conv).
fn tap(o: [usize; 5], k: [usize; 5], window: &Window, bound: [usize; 3]) -> Option<[usize; 3]> {
    let mut position = [0; 3];
    for a in 0..3 {
        let p = o[2 + a] as i128 * window.stride[a] as i128
            + k[2 + a] as i128 * window.dilation[a] as i128
            - window.padding[a].0 as i128;
        if !(0..bound[a] as i128).contains(&p) {
            return None;
        }
        position[a] = p as usize;
    }
    Some(position)
}

/// A pool's output, indices and input gradient, filled one window at a time.
struct Reduction<'a> {
    x: &'a [f64],
    x_dims: [usize; 5],
    g: Vec<f64>,
    out: Vec<f64>,
    indices: Vec<i64>,
    gx: Vec<f64>,
    /// See [`Expected::roundoff`].
    roundoff_out: Vec<f64>,
    roundoff_gx: Vec<f64>,
}

impl<'a> Reduction<'a> {
    fn new(x: &'a [f64], x_dims: [usize; 5], dims: [usize; 5], g: Vec<f64>) -> Self {
        Self {
            x,
            x_dims,
            g,
            out: vec![0.0; volume(dims)],
            indices: vec![0; volume(dims)],
            gx: vec![0.0; x.len()],
            roundoff_out: vec![0.0; volume(dims)],
            roundoff_gx: vec![0.0; x.len()],
        }
    }

    /// The output, indices (for max pools) and gradient.
    fn expected(self, dims: [usize; 5], max: bool) -> Expected {
        Expected {
            out: self.out,
            dims,
            indices: max.then_some(self.indices),
            grads: vec![self.gx],
            roundoff: vec![self.roundoff_out, self.roundoff_gx],
        }
    }

    /// Output `oi` is PyTorch's LP pool of `taps`: `(sign(S) * relu(|S|) * K)^(1/p)` with `S`
    /// the mean of `x^p` over the taps. Its gradient, through autograd's chain, reaches `S` as
    /// `g / p * base^(1/p - 1) * K` times `sign(S) * [relu(|S|) > 0] * sgn(S)`: NaN for a NaN
    /// `S`, nothing for `S = 0` (`relu`'s backward selects 0), the whole for any other. Each
    /// tap gets its `1 / count` share; [`Self::lp_chain`] then applies `x^p`'s derivative.
    fn lp(&mut self, oi: usize, taps: &[[usize; 5]], p: f64, kernel_volume: usize) {
        let terms: Vec<f64> = taps.iter().map(|&t| self.value(t).powf(p)).collect();
        let s = terms.iter().sum::<f64>() / taps.len() as f64;
        let magnitude = terms.iter().map(|term| term.abs()).sum::<f64>();
        // A zero or non-finite sum has no roundoff to amplify (its gradient is 0 or NaN).
        let cancellation = if s != 0.0 && s.is_finite() {
            magnitude / s.abs()
        } else {
            0.0
        };
        let base = s.signum() * s.abs().max(0.0) * kernel_volume as f64;
        self.out[oi] = base.powf(1.0 / p);
        let to_s = if s.is_nan() {
            f64::NAN
        } else if s == 0.0 {
            0.0
        } else {
            self.g[oi] / p * base.powf(1.0 / p - 1.0) * kernel_volume as f64
        };
        for &t in taps {
            self.gx[at(self.x_dims, t)] += to_s / taps.len() as f64;
        }
        if cancellation > 0.0 {
            self.roundoff_out[oi] = (self.out[oi] * cancellation).abs();
            for &t in taps {
                self.roundoff_gx[at(self.x_dims, t)] +=
                    (to_s / taps.len() as f64 * cancellation).abs();
            }
        }
    }

    /// `x^p`'s derivative on every element, in a window or not (`0 * p * x^(p - 1)` is NaN
    /// where `x^(p - 1)` is infinite or NaN, as in PyTorch).
    fn lp_chain(&mut self, p: f64) {
        for ((grad, roundoff), &x) in self.gx.iter_mut().zip(&mut self.roundoff_gx).zip(self.x) {
            let derivative = p * x.powf(p - 1.0);
            *grad *= derivative;
            if *roundoff != 0.0 {
                *roundoff *= derivative.abs();
            }
        }
    }

    fn value(&self, tap: [usize; 5]) -> f64 {
        self.x[at(self.x_dims, tap)]
    }

    /// Output `oi` is the first maximum of `taps` in window order, or the last NaN (PyTorch's
    /// `val > maxval || isnan(val)`), or the first tap if all are -inf; its index the flat
    /// offset in the input plane; the gradient goes to it.
    fn max(&mut self, oi: usize, taps: &[[usize; 5]]) {
        let mut best = taps[0];
        for &tap in &taps[1..] {
            let (v, b) = (self.value(tap), self.value(best));
            if v > b || v.is_nan() {
                best = tap;
            }
        }
        let [.., h, w] = self.x_dims;
        self.out[oi] = self.value(best);
        self.indices[oi] = ((best[2] * h + best[3]) * w + best[4]) as i64;
        self.gx[at(self.x_dims, best)] += self.g[oi];
    }

    /// Output `oi` is the sum of `taps` over `divisor`; the gradient spreads back evenly.
    fn mean(&mut self, oi: usize, taps: &[[usize; 5]], divisor: f64) {
        self.out[oi] = taps.iter().map(|&t| self.value(t)).sum::<f64>() / divisor;
        for &t in taps {
            self.gx[at(self.x_dims, t)] += self.g[oi] / divisor;
        }
    }
}

/// Convolution output length, `None` if the dilated kernel does not fit the padded input.
fn conv_len(
    len: usize,
    (begin, end): (usize, usize),
    k: usize,
    s: usize,
    d: usize,
) -> Option<usize> {
    let padded = len as i128 + begin as i128 + end as i128;
    let extent = (d as i128).checked_mul(k as i128 - 1)? + 1;
    (extent <= padded).then(|| ((padded - extent) / s as i128 + 1) as usize)
}

/// `conv(x, w, b)` with `x = (N, C_in, *)`, `w = (C_out, C_in / groups, *kernel)`, its
/// padding holding what `mode` says. A mode other than zeros is PyTorch's `padding_mode`:
/// `conv(pad(x, padding, mode), w, b)` with no further padding, the input gradient summed over
/// the positions each value was copied to.
#[allow(clippy::too_many_arguments)]
pub fn conv(
    x: &[f64],
    x_dims: [usize; 5],
    w: &[f64],
    w_dims: [usize; 5],
    bias: Option<&[f64]>,
    window: &Window,
    groups: usize,
    mode: Mode,
    g: impl Fn([usize; 5]) -> Vec<f64>,
) -> Option<Expected> {
    if mode != Mode::Zeros {
        let (padded, padded_dims, sources) = pad_input(x, x_dims, window.padding, mode)?;
        let unpadded = Window {
            padding: [(0, 0); 3],
            ..*window
        };
        let zeros = Mode::Zeros;
        let mut expected = conv(
            &padded,
            padded_dims,
            w,
            w_dims,
            bias,
            &unpadded,
            groups,
            zeros,
            g,
        )?;
        let mut gx = vec![0.0; x.len()];
        for (&source, grad) in sources.iter().zip(&expected.grads[0]) {
            gx[source] += grad;
        }
        expected.grads[0] = gx;
        return Some(expected);
    }
    let Window {
        kernel,
        stride,
        dilation,
        padding,
    } = *window;
    let [batch, c_in, ..] = x_dims;
    let c_out = w_dims[0];
    if stride.contains(&0) || dilation.contains(&0) || kernel.contains(&0) || groups == 0 {
        return None;
    }
    // PyTorch: non-empty spatial dims and output channels, groups dividing both counts.
    if x_dims[2..].contains(&0)
        || c_out == 0
        || !c_in.is_multiple_of(groups)
        || !c_out.is_multiple_of(groups)
    {
        return None;
    }
    if w_dims[1] * groups != c_in || !within(&stride) || !within(&dilation) {
        return None;
    }
    let mut size = [0; 3];
    for a in 0..3 {
        let (begin, end) = padding[a];
        if x_dims[2 + a] as i128 + begin as i128 + end as i128 > LARGEST {
            return None;
        }
        size[a] = conv_len(x_dims[2 + a], padding[a], kernel[a], stride[a], dilation[a])?;
    }
    let dims = [batch, c_out, size[0], size[1], size[2]];
    if too_big(dims) {
        return None;
    }
    let g = g(dims);
    let (per_in, per_out) = (c_in / groups, c_out / groups);
    let mut out = vec![0.0; volume(dims)];
    let mut gx = vec![0.0; x.len()];
    let mut gw = vec![0.0; w.len()];
    let mut gb = vec![0.0; c_out];
    for o in each(dims) {
        let [n, co, ..] = o;
        let group = co / per_out;
        let mut sum = bias.map_or(0.0, |b| b[co]);
        for ci in 0..per_in {
            for k in each([1, 1, kernel[0], kernel[1], kernel[2]]) {
                let bound = [x_dims[2], x_dims[3], x_dims[4]];
                if let Some([pd, ph, pw]) = tap(o, k, window, bound) {
                    let xi = at(x_dims, [n, group * per_in + ci, pd, ph, pw]);
                    let wi = at(w_dims, [co, ci, k[2], k[3], k[4]]);
                    sum += x[xi] * w[wi];
                    gx[xi] += g[at(dims, o)] * w[wi];
                    gw[wi] += g[at(dims, o)] * x[xi];
                }
            }
        }
        gb[co] += g[at(dims, o)];
        out[at(dims, o)] = sum;
    }
    let mut grads = vec![gx, gw];
    if bias.is_some() {
        grads.push(gb);
    }
    Some(Expected {
        out,
        dims,
        indices: None,
        grads,
        roundoff: Vec::new(),
    })
}

/// `conv_transpose(x, w, b)` with `x = (N, C_in, *)`, `w = (C_in, C_out / groups, *kernel)`;
/// `output_size` (PyTorch's) replaces `output_padding` when given.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose(
    x: &[f64],
    x_dims: [usize; 5],
    w: &[f64],
    w_dims: [usize; 5],
    bias: Option<&[f64]>,
    window: &Window,
    output_padding: [usize; 3],
    output_size: Option<[usize; 3]>,
    groups: usize,
    g: impl Fn([usize; 5]) -> Vec<f64>,
) -> Option<Expected> {
    let Window {
        kernel,
        stride,
        dilation,
        padding,
    } = *window;
    let [batch, c_in, ..] = x_dims;
    if stride.contains(&0) || dilation.contains(&0) || kernel.contains(&0) || groups == 0 {
        return None;
    }
    if x_dims[2..].contains(&0) || !c_in.is_multiple_of(groups) || w_dims[0] != c_in {
        return None;
    }
    let pads = padding.map(|(p, _)| p);
    if !within(&stride) || !within(&dilation) || !within(&pads) {
        return None;
    }
    let c_out = w_dims[1] * groups;
    let mut size = [0; 3];
    for a in 0..3 {
        let (s, d) = (stride[a] as i128, dilation[a] as i128);
        let min = (x_dims[2 + a] as i128 - 1) * s - 2 * padding[a].0 as i128
            + d * (kernel[a] as i128 - 1)
            + 1;
        let len = match output_size {
            // PyTorch's `_output_padding`: reachable with 0 <= output_padding < stride.
            Some(requested) => {
                let requested = requested[a] as i128;
                if min <= 0 || requested < min || requested > min + s - 1 {
                    return None;
                }
                requested
            }
            None => {
                if output_padding[a] as i128 >= s.max(d) {
                    return None;
                }
                min + output_padding[a] as i128
            }
        };
        // The output before its padding comes off must fit too.
        if len <= 0 || len + 2 * padding[a].0 as i128 > LARGEST {
            return None;
        }
        size[a] = len as usize;
    }
    let dims = [batch, c_out, size[0], size[1], size[2]];
    if too_big(dims) {
        return None;
    }
    let g = g(dims);
    let (per_in, per_out) = (c_in / groups, c_out / groups);
    let mut out = vec![0.0; volume(dims)];
    for o in each(dims) {
        out[at(dims, o)] = bias.map_or(0.0, |b| b[o[1]]);
    }
    let mut gx = vec![0.0; x.len()];
    let mut gw = vec![0.0; w.len()];
    let mut gb = vec![0.0; c_out];
    for o in each(dims) {
        gb[o[1]] += g[at(dims, o)];
    }
    for i in each(x_dims) {
        let [n, ci, ..] = i;
        let group = ci / per_in;
        for co in 0..per_out {
            for k in each([1, 1, kernel[0], kernel[1], kernel[2]]) {
                if let Some([pd, ph, pw]) = tap(i, k, window, size) {
                    let (xi, oi) = (
                        at(x_dims, i),
                        at(dims, [n, group * per_out + co, pd, ph, pw]),
                    );
                    let wi = at(w_dims, [ci, co, k[2], k[3], k[4]]);
                    out[oi] += x[xi] * w[wi];
                    gx[xi] += g[oi] * w[wi];
                    gw[wi] += g[oi] * x[xi];
                }
            }
        }
    }
    let mut grads = vec![gx, gw];
    if bias.is_some() {
        grads.push(gb);
    }
    Some(Expected {
        out,
        dims,
        indices: None,
        grads,
        roundoff: Vec::new(),
    })
}

/// Pooling output length with PyTorch's ceil rule (`pooling_output_shape_pad_lr`): floor
/// division rounding toward -inf, and in ceil mode a last window starting in the right
/// padding dropped. `None` below 1.
fn pool_len(
    len: usize,
    (begin, end): (usize, usize),
    k: usize,
    s: usize,
    d: usize,
    ceil: bool,
) -> Option<usize> {
    let (s, begin) = (s as i128, begin as i128);
    let extent = (d as i128).checked_mul(k as i128 - 1)? + 1;
    let numerator = len as i128 + begin + end as i128 - extent + if ceil { s - 1 } else { 0 };
    let mut out = numerator.div_euclid(s) + 1;
    if ceil && (out - 1) * s >= len as i128 + begin {
        out -= 1;
    }
    (out >= 1).then_some(out as usize)
}

/// The kind of a sliding-window pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sliding {
    Max,
    Avg {
        count_include_pad: bool,
        divisor_override: Option<i64>,
    },
    /// PyTorch's `lp_pool`: `(sign(s) * relu(|s|) * K)^(1/p)` of the average `s` of `x^p`
    /// over a window clipped to the input (no padding).
    Lp {
        norm_type: f64,
    },
}

/// A window along one axis: its first position (maybe in the padding) and its taps inside.
type Placed = (i128, Vec<usize>);

/// The windows of a sliding pool per axis: `(first, taps inside)` of each output; `None`
/// when PyTorch rejects the options.
fn sliding_windows(x_dims: [usize; 5], window: &Window, ceil: bool) -> Option<[Vec<Placed>; 3]> {
    let Window {
        kernel,
        stride,
        dilation,
        padding,
    } = *window;
    if stride.contains(&0) || dilation.contains(&0) || kernel.contains(&0) {
        return None;
    }
    // Only the batch may be empty.
    if x_dims[1..].contains(&0) || !within(&stride) || !within(&dilation) {
        return None;
    }
    let kernel_volume = kernel
        .iter()
        .map(|&k| k as i128)
        .try_fold(1i128, i128::checked_mul);
    if kernel_volume.is_none_or(|volume| volume > LARGEST) {
        return None;
    }
    let mut windows: [Vec<Placed>; 3] = Default::default();
    for a in 0..3 {
        // "pad should be at most half of kernel size", whatever the dilation.
        if padding[a].0.max(padding[a].1) > kernel[a] / 2 {
            return None;
        }
        let len = x_dims[2 + a];
        if len as i128 + padding[a].0 as i128 + padding[a].1 as i128 > LARGEST {
            return None;
        }
        let out = pool_len(len, padding[a], kernel[a], stride[a], dilation[a], ceil)?;
        for o in 0..out {
            let first = o as i128 * stride[a] as i128 - padding[a].0 as i128;
            // The input positions `first + k * dilation` with `k < kernel` (the kernel may be
            // huge, the input is small).
            let step = dilation[a] as i128;
            let taps: Vec<usize> = (0..len)
                .filter(|&p| {
                    let offset = p as i128 - first;
                    offset >= 0 && offset % step == 0 && offset / step < kernel[a] as i128
                })
                .collect();
            // The crate's stricter rule: a window of padding only has no maximum (PyTorch
            // returns -inf with an index outside the plane), so it is an error.
            if taps.is_empty() {
                return None;
            }
            windows[a].push((first, taps));
        }
    }
    Some(windows)
}

/// A sliding-window pool of `x = (N, C, *)`.
pub fn sliding_pool(
    x: &[f64],
    x_dims: [usize; 5],
    window: &Window,
    ceil: bool,
    kind: Sliding,
    g: impl Fn([usize; 5]) -> Vec<f64>,
) -> Option<Expected> {
    if let Sliding::Lp { norm_type } = kind
        && (norm_type.is_nan()
            || norm_type <= 0.0
            || window.padding != [(0, 0); 3]
            || window.dilation != [1; 3])
    {
        return None;
    }
    if let Sliding::Avg {
        divisor_override: Some(0),
        ..
    } = kind
    {
        return None;
    }
    let windows = sliding_windows(x_dims, window, ceil)?;
    let [n, c, ..] = x_dims;
    let dims = [n, c, windows[0].len(), windows[1].len(), windows[2].len()];
    let mut reduction = Reduction::new(x, x_dims, dims, g(dims));
    for o in each(dims) {
        let axes: [&Placed; 3] = core::array::from_fn(|a| &windows[a][o[2 + a]]);
        let taps: Vec<[usize; 5]> = each([1, 1, axes[0].1.len(), axes[1].1.len(), axes[2].1.len()])
            .map(|t| {
                [
                    o[0],
                    o[1],
                    axes[0].1[t[2]],
                    axes[1].1[t[3]],
                    axes[2].1[t[4]],
                ]
            })
            .collect();
        let oi = at(dims, o);
        match kind {
            Sliding::Max => reduction.max(oi, &taps),
            Sliding::Avg {
                count_include_pad,
                divisor_override,
            } => {
                // PyTorch: the window clipped to the padded input, then to the input.
                let padded: i128 = (0..3)
                    .map(|a| {
                        let first = axes[a].0;
                        let end = (first + window.kernel[a] as i128)
                            .min(x_dims[2 + a] as i128 + window.padding[a].1 as i128);
                        end - first
                    })
                    .product();
                let divisor = match divisor_override {
                    Some(divisor) => divisor as f64,
                    None if count_include_pad => padded as f64,
                    None => taps.len() as f64,
                };
                reduction.mean(oi, &taps, divisor);
            }
            Sliding::Lp { norm_type } => {
                reduction.lp(oi, &taps, norm_type, window.kernel.iter().product());
            }
        }
    }
    if let Sliding::Lp { norm_type } = kind {
        reduction.lp_chain(norm_type);
    }
    Some(reduction.expected(dims, kind == Sliding::Max))
}

/// Adaptive average (or max) pooling of `x = (N, C, *)` to `size`: output `i` covers
/// `[floor(i * len / out), ceil((i + 1) * len / out))`.
pub fn adaptive_pool(
    x: &[f64],
    x_dims: [usize; 5],
    size: [usize; 3],
    max: bool,
    g: impl Fn([usize; 5]) -> Vec<f64>,
) -> Option<Expected> {
    if x_dims[1..].contains(&0) || size.contains(&0) {
        return None;
    }
    let [n, c, ..] = x_dims;
    let dims = [n, c, size[0], size[1], size[2]];
    if too_big(dims) {
        return None;
    }
    let mut reduction = Reduction::new(x, x_dims, dims, g(dims));
    for o in each(dims) {
        let range = |a: usize| {
            let (i, len, out) = (o[2 + a], x_dims[2 + a], size[a]);
            (i * len / out)..((i + 1) * len).div_ceil(out)
        };
        let (r0, r1, r2) = (range(0), range(1), range(2));
        let taps: Vec<[usize; 5]> = each([1, 1, r0.len(), r1.len(), r2.len()])
            .map(|t| {
                [
                    o[0],
                    o[1],
                    r0.start + t[2],
                    r1.start + t[3],
                    r2.start + t[4],
                ]
            })
            .collect();
        let oi = at(dims, o);
        if max {
            reduction.max(oi, &taps);
        } else {
            reduction.mean(oi, &taps, taps.len() as f64);
        }
    }
    Some(reduction.expected(dims, max))
}

/// Fractional max pooling of `x = (N, C, *)` of spatial rank `rank` (2 or 3): along each axis
/// PyTorch's `generate_intervals` in the input's float type (f32 when `f32_math`, else f64),
/// `start[i] = int((i + u) * alpha) - int(u * alpha)` with `alpha = (len - k) / (out - 1)`,
/// the last window flush with the end; `samples` is
/// `(N, C, rank)`, `[.., 0]` driving W and `[.., 1]` H in 2D, (T, H, W) in 3D. The crate's
/// stricter rule: every sample lies in `[0, 1]`.
#[allow(clippy::too_many_arguments)]
pub fn fractional_pool(
    x: &[f64],
    x_dims: [usize; 5],
    kernel: [usize; 3],
    size: [usize; 3],
    samples: &[f64],
    rank: usize,
    f32_math: bool,
    g: impl Fn([usize; 5]) -> Vec<f64>,
) -> Option<Expected> {
    if x_dims[1..].contains(&0) || kernel.contains(&0) || size.contains(&0) {
        return None;
    }
    // PyTorch: `output + kernel - 1 <= len` per axis.
    if (0..3).any(|a| size[a] as u128 + kernel[a] as u128 - 1 > x_dims[2 + a] as u128) {
        return None;
    }
    if !samples.iter().all(|u| (0.0..=1.0).contains(u)) {
        return None;
    }
    let [n, c, ..] = x_dims;
    let dims = [n, c, size[0], size[1], size[2]];
    if too_big(dims) {
        return None;
    }
    // The sample driving lifted axis `a`.
    let sample = |image: usize, channel: usize, a: usize| -> Option<f64> {
        let index = match rank {
            2 => (a > 0).then(|| 2 - a)?,
            _ => a,
        };
        Some(samples[(image * c + channel) * rank + index])
    };
    let start = |a: usize, i: usize, u: Option<f64>| -> usize {
        let (len, k, out) = (x_dims[2 + a], kernel[a], size[a]);
        match u {
            Some(u) if i + 1 < out && f32_math => {
                let (u, alpha) = (u as f32, (len - k) as f32 / (out - 1) as f32);
                (((i as f32 + u) * alpha) as i64 - (u * alpha) as i64) as usize
            }
            Some(u) if i + 1 < out => {
                let alpha = (len - k) as f64 / (out - 1) as f64;
                (((i as f64 + u) * alpha) as i64 - (u * alpha) as i64) as usize
            }
            _ => len - k,
        }
    };
    let mut reduction = Reduction::new(x, x_dims, dims, g(dims));
    for o in each(dims) {
        let first: [usize; 3] = core::array::from_fn(|a| start(a, o[2 + a], sample(o[0], o[1], a)));
        let taps: Vec<[usize; 5]> = each([1, 1, kernel[0], kernel[1], kernel[2]])
            .map(|t| {
                [
                    o[0],
                    o[1],
                    first[0] + t[2],
                    first[1] + t[3],
                    first[2] + t[4],
                ]
            })
            .collect();
        reduction.max(at(dims, o), &taps);
    }
    Some(reduction.expected(dims, true))
}

/// PyTorch's default max-unpool length per lifted axis, `(in - 1) * stride - 2 * padding +
/// kernel` (it may be 0 or negative).
pub fn unpool_default(x_dims: [usize; 5], window: &Window) -> [i128; 3] {
    core::array::from_fn(|a| {
        (x_dims[2 + a] as i128 - 1) * window.stride[a] as i128 - 2 * window.padding[a].0 as i128
            + window.kernel[a] as i128
    })
}

/// Max-unpool output dims: the default, or the default plus `offsets`, each strictly within
/// `stride` of it (PyTorch's `_unpool_output_size`); `None` when invalid or empty.
pub fn unpool_dims(
    x_dims: [usize; 5],
    window: &Window,
    offsets: Option<[i64; 3]>,
) -> Option<[usize; 5]> {
    if window.kernel.contains(&0) || window.stride.contains(&0) || x_dims[1..].contains(&0) {
        return None;
    }
    let pads = window.padding.map(|(p, _)| p);
    if !within(&window.kernel) || !within(&window.stride) || !within(&pads) {
        return None;
    }
    let default = unpool_default(x_dims, window);
    let mut dims = [x_dims[0], x_dims[1], 0, 0, 0];
    for a in 0..3 {
        let offset = offsets.map_or(0, |offsets| offsets[a] as i128);
        let len = default[a] + offset;
        if offset.abs() >= window.stride[a] as i128 || !(1..=LARGEST).contains(&len) {
            return None;
        }
        dims[2 + a] = len as usize;
    }
    (!too_big(dims)).then_some(dims)
}

/// `max_unpool(x, indices)`: every output zero but `out[plane, indices[i]] = x[i]`; its
/// gradient gathers the output gradient at the indices. Every index must lie in its plane.
pub fn max_unpool(
    x: &[f64],
    x_dims: [usize; 5],
    indices: &[i64],
    window: &Window,
    offsets: Option<[i64; 3]>,
    g: impl Fn([usize; 5]) -> Vec<f64>,
) -> Option<Expected> {
    let dims = unpool_dims(x_dims, window, offsets)?;
    let plane: usize = dims[2..].iter().product();
    if indices.iter().any(|&i| i < 0 || i as usize >= plane) {
        return None;
    }
    let in_volume: usize = x_dims[2..].iter().product();
    let g = g(dims);
    let mut out = vec![0.0; volume(dims)];
    let mut gx = vec![0.0; x.len()];
    for (i, &index) in indices.iter().enumerate() {
        let o = i / in_volume * plane + index as usize;
        out[o] = x[i];
        gx[i] = g[o];
    }
    Some(Expected {
        out,
        dims,
        indices: None,
        grads: vec![gx],
        roundoff: Vec::new(),
    })
}

/// What a convolution reads outside its input: PyTorch's `padding_mode` of `nn.Conv*d`,
/// which pads with `F.pad` and then convolves without padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Zeros,
    Reflect,
    Replicate,
    Circular,
}

/// PyTorch's `padding="same"`: `dilation * (kernel - 1)` in all, the odd element at the end;
/// only for stride 1.
pub fn same_padding(window: &Window) -> Option<[(usize, usize); 3]> {
    if window.stride.iter().any(|&s| s != 1) || window.kernel.contains(&0) {
        return None;
    }
    let mut padding = [(0, 0); 3];
    for (side, (&d, &k)) in padding
        .iter_mut()
        .zip(window.dilation.iter().zip(&window.kernel))
    {
        let total = d as i128 * (k as i128 - 1);
        if total > LARGEST {
            return None;
        }
        let total = total as usize;
        *side = (total / 2, total - total / 2);
    }
    Some(padding)
}

/// The input position padded position `p` copies along an axis of length `len` padded by
/// `begin` in `mode` (`F.pad`'s reflect, replicate and circular; zeros copy nothing).
fn pad_source(p: usize, len: usize, begin: usize, mode: Mode) -> usize {
    let i = p as i128 - begin as i128;
    let len = len as i128;
    let source = match mode {
        Mode::Zeros => unreachable!("zero padding is the convolution's own"),
        Mode::Reflect if i < 0 => -i,
        Mode::Reflect if i >= len => 2 * (len - 1) - i,
        Mode::Replicate => i.clamp(0, len - 1),
        Mode::Circular => i.rem_euclid(len),
        Mode::Reflect => i,
    };
    source as usize
}

/// `x` padded by `padding` in `mode` (not zeros), as `F.pad` does, with its dims and, for
/// each padded element, the input element it copies; `None` past `F.pad`'s limits (reflect
/// needs each padding below the length, circular at most it) or past what a machine holds.
fn pad_input(
    x: &[f64],
    x_dims: [usize; 5],
    padding: [(usize, usize); 3],
    mode: Mode,
) -> Option<(Vec<f64>, [usize; 5], Vec<usize>)> {
    let mut padded_dims = x_dims;
    for a in 0..3 {
        let (len, (begin, end)) = (x_dims[2 + a], padding[a]);
        let fits = match mode {
            Mode::Reflect => begin < len && end < len,
            Mode::Circular => begin <= len && end <= len,
            _ => len > 0,
        };
        let padded = len as i128 + begin as i128 + end as i128;
        if !fits || padded > LARGEST {
            return None;
        }
        padded_dims[2 + a] = padded as usize;
    }
    // A padded copy no machine holds (an empty batch's is empty, whatever its length).
    if too_big(padded_dims) {
        return None;
    }
    let sources: Vec<usize> = each(padded_dims)
        .map(|[n, c, d, h, w]| {
            let [d, h, w] = [(0, d), (1, h), (2, w)]
                .map(|(a, p)| pad_source(p, x_dims[2 + a], padding[a].0, mode));
            at(x_dims, [n, c, d, h, w])
        })
        .collect();
    let padded = sources.iter().map(|&i| x[i]).collect();
    Some((padded, padded_dims, sources))
}

/// `activation(x)` in f64, written apart from the crate's kernels: the sigmoid through `tanh`,
/// GELU through `erf`, its tanh form as PyTorch states it.
pub fn activation(activation: Activation, x: f64) -> f64 {
    match activation {
        Activation::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        Activation::LeakyRelu { negative_slope } => {
            if x > 0.0 {
                x
            } else {
                negative_slope * x
            }
        }
        Activation::Silu => x * 0.5 * (1.0 + (0.5 * x).tanh()),
        Activation::Gelu => x * 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2),
        Activation::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x.powi(3))).tanh())
        }
    }
}

/// The derivative of `activation` at `x`, the value before it (PyTorch's backward: 0 for ReLU
/// and the slope for a leaky ReLU at 0 and at NaN).
pub fn activation_derivative(activation: Activation, x: f64) -> f64 {
    match activation {
        Activation::Relu => f64::from(u8::from(x > 0.0)),
        Activation::LeakyRelu { negative_slope } => {
            if x > 0.0 {
                1.0
            } else {
                negative_slope
            }
        }
        Activation::Silu => {
            let sigmoid = 0.5 * (1.0 + (0.5 * x).tanh());
            sigmoid + x * sigmoid * (1.0 - sigmoid)
        }
        Activation::Gelu => {
            let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            0.5 * libm::erfc(-x / std::f64::consts::SQRT_2) + x * density
        }
        Activation::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let t = (k * (x + 0.044715 * x.powi(3))).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x)
        }
    }
}

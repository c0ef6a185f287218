//! The report's tables of fused epilogues (`benches/epilogue.rs`): per device and ResNet row,
//! the fused `conv2d + bias + ReLU` against its two compositions, and the training step of the
//! conv, batch norm and ReLU block against its composition.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Markdown for the `conv_epilogue/{device}/{case}/{unfused|builtin}` ids of `means` (id to
/// ours and burn, seconds), or nothing when none ran. `pytorch(device, case)` is PyTorch's
/// time for the same conv, bias and ReLU, where it ran on that device's kind; `duration`
/// formats a time.
pub fn section(
    means: &BTreeMap<String, (Option<f64>, Option<f64>)>,
    pytorch: impl Fn(&str, &str) -> Option<f64>,
    duration: impl Fn(Option<f64>) -> String,
) -> String {
    // (device, case) to each comparison's (fused, composition): against the unfused, against
    // the built-in. Each ratio divides the two times of one comparison.
    type Pair = (Option<f64>, Option<f64>);
    let mut rows: BTreeMap<(String, String), [Pair; 2]> = BTreeMap::new();
    for (id, &pair) in means {
        let parts: Vec<&str> = id.split('/').collect();
        let ["conv_epilogue", device, case, against] = parts[..] else {
            continue;
        };
        let row = rows.entry((device.into(), case.into())).or_default();
        match against {
            "unfused" => row[0] = pair,
            "builtin" => row[1] = pair,
            _ => {}
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\n## Fused epilogues: conv2d + bias + ReLU\n\n`benches/epilogue.rs`, forward. Fused: \
         this crate's conv with `with_activation(Activation::Relu)`, one call. Unfused: this \
         crate's conv, then Burn's add and ReLU. Built-in: Burn's conv with its bias, then \
         Burn's ReLU. Each ratio divides the two times of one comparison; fused is the faster \
         of its two. PyTorch: `F.relu(F.conv2d(x, weight, bias, ...))` as a PyTorch user writes \
         it (`benches/pytorch_bench.py`, f32, contiguous), the fastest of its processes. \
         **Below 1, the fused call is faster.**\n\n\
         | device | case | fused | unfused | fused / unfused | built-in | fused / built-in | \
         PyTorch | fused / PyTorch |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for ((device, case), [(fused_u, unfused), (fused_b, builtin)]) in &rows {
        // The fused call was timed in both comparisons: its faster time.
        let fused = match (fused_u, fused_b) {
            (Some(a), Some(b)) => Some(a.min(*b)),
            (a, b) => a.or(*b),
        };
        let torch = pytorch(device, case);
        let _ = writeln!(
            md,
            "| {device} | {case} | {} | {} | {} | {} | {} | {} | {} |",
            duration(fused),
            duration(*unfused),
            ratio(*fused_u, *unfused),
            duration(*builtin),
            ratio(*fused_b, *builtin),
            duration(torch),
            ratio(fused, torch),
        );
    }
    md
}

/// `a / b` to two decimals, or a dash where either is missing.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

/// Markdown for the `conv_bn_act/{device}/{case}/unfused` ids of `means` (id to ours and burn,
/// seconds), or nothing when none ran. `pytorch(device, case)` is PyTorch's time for the same
/// training step, where it ran on that device's kind; `duration` formats a time.
pub fn block_section(
    means: &BTreeMap<String, (Option<f64>, Option<f64>)>,
    pytorch: impl Fn(&str, &str) -> Option<f64>,
    duration: impl Fn(Option<f64>) -> String,
) -> String {
    let rows: Vec<(&str, &str, (Option<f64>, Option<f64>))> = means
        .iter()
        .filter_map(|(id, &pair)| {
            let parts: Vec<&str> = id.split('/').collect();
            let ["conv_bn_act", device, case, "unfused"] = parts[..] else {
                return None;
            };
            Some((device, case, pair))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\n## Conv, batch norm and ReLU: a training step\n\n`benches/epilogue.rs`, forward and \
         backward of a batch (the sum of the output as the loss). Block: `nn::ConvBnAct2d` with \
         ReLU, the batch norm in training mode. Unfused: this crate's conv, then burn-nn's \
         `BatchNorm` and Burn's ReLU. PyTorch: `relu(bn(conv(x)))`, `Conv2d` without bias and \
         `BatchNorm2d` in training mode, then `torch.autograd.grad` of the sum for the three \
         parameters (`benches/pytorch_bench.py`, f32, contiguous), the fastest of its \
         processes. **Below 1, the block is faster.**\n\n\
         | device | case | block | unfused | block / unfused | PyTorch | block / PyTorch |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (device, case, (block, unfused)) in rows {
        let torch = pytorch(device, case);
        let _ = writeln!(
            md,
            "| {device} | {case} | {} | {} | {} | {} | {} |",
            duration(block),
            duration(unfused),
            ratio(block, unfused),
            duration(torch),
            ratio(block, torch),
        );
    }
    md
}

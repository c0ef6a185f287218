//! Turns the criterion results of `benches/conv.rs`, `benches/pool.rs`, `benches/network.rs`
//! and `benches/epilogue.rs` (and, when present,
//! `benches/pytorch.json` from `benches/pytorch_bench.py`) into `benches/REPORT.md` and
//! `benches/report.png`. Run through `bash benches/report.sh`, which runs the benches first.
//!
//! Only results written after `REPORT_SINCE` (seconds since the epoch, set by the script) are
//! used, PyTorch's included, so a case that did not run this time never shows an old number.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plotters::prelude::*;
use plotters::style::FontStyle;
use serde::Deserialize;

mod common {
    pub mod catalogue;
    pub mod conv_case;
    pub mod devices;
    pub mod epilogue_table;
    pub mod machine;
    pub mod peak;
    pub mod pool_case;
    pub mod pytorch;
}
use common::catalogue::load;
use common::conv_case::ConvCase;
use common::machine::machine;
use common::peak::Peaks;
use common::pool_case::PoolCase;
use common::pytorch::PyTorchResults;

const FONT: &[u8] = include_bytes!("../examples/assets/DejaVuSansMono.ttf");

/// One measured id: mean seconds of `ours` and of `burn` (if Burn has the op), each side's
/// fastest round.
#[derive(Default, Clone, Copy)]
struct Timing {
    ours: Option<f64>,
    burn: Option<f64>,
    /// Our slowest round over our fastest.
    ours_spread: Option<f64>,
    /// Rounds that timed ours.
    rounds: usize,
}

/// What one call of a row does, for its throughput.
#[derive(Clone, Copy)]
enum Work {
    /// A convolution's FLOPs.
    Flops(f64),
    /// A pool's bytes.
    Bytes(f64),
    /// A whole network step: its time is the measure.
    Step,
}

/// A report row.
struct Row {
    device: String,
    case: String,
    op: String,
    pass: String,
    timing: Timing,
    work: Work,
    pytorch: Option<f64>,
    /// PyTorch's slowest process over its fastest.
    pytorch_spread: Option<f64>,
}

impl Row {
    /// PyTorch's time over ours: above 1 means ours is faster.
    fn pytorch_ratio(&self) -> Option<f64> {
        Some(self.pytorch? / self.timing.ours?)
    }
}

#[derive(Deserialize)]
struct Benchmark {
    group_id: String,
    function_id: String,
}

#[derive(Deserialize)]
struct Estimates {
    mean: Estimate,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
}

/// The criterion results newer than `since` in each of `dirs` (one per round of
/// `benches/report.sh`), by group id: each side's fastest round, and its spread.
fn criterion_results(dirs: &[PathBuf], since: SystemTime) -> BTreeMap<String, Timing> {
    let mut rounds: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for dir in dirs {
        for (group, function, seconds) in fresh_means(dir, since) {
            rounds.entry((group, function)).or_default().push(seconds);
        }
    }
    let mut timings: BTreeMap<String, Timing> = BTreeMap::new();
    for ((group, function), seconds) in rounds {
        let fastest = seconds.iter().copied().fold(f64::INFINITY, f64::min);
        let slowest = seconds.iter().copied().fold(0.0, f64::max);
        let timing = timings.entry(group).or_default();
        match function.as_str() {
            "ours" => {
                timing.ours = Some(fastest);
                timing.ours_spread = Some(slowest / fastest);
                timing.rounds = seconds.len();
            }
            "burn" => timing.burn = Some(fastest),
            _ => {}
        }
    }
    timings
}

/// `(group id, function id, mean seconds)` of every criterion result under `dir` written
/// after `since`.
fn fresh_means(dir: &Path, since: SystemTime) -> Vec<(String, String, f64)> {
    let mut means = Vec::new();
    let Ok(groups) = std::fs::read_dir(dir) else {
        return means;
    };
    for group in groups.flatten() {
        for function in std::fs::read_dir(group.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let new = function.path().join("new");
            let fresh = std::fs::metadata(new.join("estimates.json"))
                .and_then(|meta| meta.modified())
                .is_ok_and(|modified| modified >= since);
            let (true, Ok(benchmark), Ok(estimates)) = (
                fresh,
                std::fs::read_to_string(new.join("benchmark.json")),
                std::fs::read(new.join("estimates.json")),
            ) else {
                continue;
            };
            let (Ok(benchmark), Ok(estimates)) = (
                serde_json::from_str::<Benchmark>(&benchmark),
                serde_json::from_slice::<Estimates>(&estimates),
            ) else {
                continue;
            };
            means.push((
                benchmark.group_id,
                benchmark.function_id,
                estimates.mean.point_estimate * 1e-9,
            ));
        }
    }
    means
}

fn rows(timings: &BTreeMap<String, Timing>, pytorch: Option<&PyTorchResults>) -> Vec<Row> {
    let convs: Vec<ConvCase> = load("conv", true);
    let transposed: Vec<ConvCase> = load("conv_transpose", true);
    let pools: Vec<PoolCase> = load("pool", true);
    let mut devices: Vec<String> = timings
        .keys()
        .filter_map(|id| id.split('/').nth(1).map(str::to_string))
        .collect();
    devices.sort();
    devices.dedup();
    let pytorch_for = |device: &str, key: String| {
        pytorch.map_or((None, None), |torch| torch.for_device(device, &key))
    };
    let mut rows = Vec::new();
    for device in &devices {
        let conv_families = [
            ("conv", &convs, false),
            ("conv_transpose", &transposed, true),
        ];
        for (family, cases, transposed) in conv_families {
            for case in cases {
                for pass in ["forward", "grad_input", "grad_weight"] {
                    let Some(&timing) =
                        timings.get(&format!("{family}/{device}/{}/{pass}", case.name))
                    else {
                        continue;
                    };
                    let (pytorch, pytorch_spread) =
                        pytorch_for(device, format!("{family}/{}/{pass}", case.name));
                    rows.push(Row {
                        device: device.clone(),
                        case: case.name.clone(),
                        op: format!("{family}{}d", case.spatial()),
                        pass: pass.into(),
                        timing,
                        work: Work::Flops(conv_flops(case, transposed)),
                        pytorch,
                        pytorch_spread,
                    });
                }
            }
        }
        for case in &pools {
            for pass in ["forward", "backward"] {
                let Some(&timing) = timings.get(&format!("pool/{device}/{}/{pass}", case.name))
                else {
                    continue;
                };
                let (pytorch, pytorch_spread) =
                    pytorch_for(device, format!("pool/{}/{pass}", case.name));
                rows.push(Row {
                    device: device.clone(),
                    case: case.name.clone(),
                    op: format!("{}{}d", case.op, case.spatial()),
                    pass: pass.into(),
                    timing,
                    work: Work::Bytes(pool_bytes(case)),
                    pytorch,
                    pytorch_spread,
                });
            }
        }
        for case in NETWORK_CASES {
            let Some(&timing) = timings.get(&format!("network/{device}/{case}/step")) else {
                continue;
            };
            rows.push(Row {
                device: device.clone(),
                case: case.into(),
                op: "network".into(),
                pass: "step".into(),
                timing,
                work: Work::Step,
                pytorch: None,
                pytorch_spread: None,
            });
        }
    }
    rows
}

/// The whole-step cases of `benches/network.rs`.
const NETWORK_CASES: [&str; 2] = ["chain_conv_pool_conv", "network_resnet_example"];

fn duration(seconds: Option<f64>) -> String {
    match seconds {
        None => "—".into(),
        Some(s) if s >= 1.0 => format!("{s:.2} s"),
        Some(s) if s >= 1e-3 => format!("{:.2} ms", s * 1e3),
        Some(s) => format!("{:.1} µs", s * 1e6),
    }
}

/// Which kernels the CubeCL rows compare: with the `autotune` feature, Burn's built-in convs
/// pick their kernels per shape (as with Burn's default features) and ours tunes between its
/// own kernels and Burn's; without it, both run fixed kernels.
fn autotune() -> String {
    if cfg!(feature = "autotune") {
        let level = std::env::var("CUBECL_AUTOTUNE_LEVEL").unwrap_or_else(|_| "default".into());
        format!(
            "CubeCL rows: autotune on (feature `autotune`, as Burn's default features; \
             `CUBECL_AUTOTUNE_LEVEL` {level}), for the built-in and for ours."
        )
    } else {
        "CubeCL rows: autotune off (Burn's built-in convs run their direct kernel).".into()
    }
}

/// How each side's time was chosen among the rounds of `benches/report.sh`.
fn rounds(rows: &[Row]) -> String {
    let most = rows.iter().map(|row| row.timing.rounds).max().unwrap_or(0);
    let widest = rows
        .iter()
        .filter_map(|row| Some((row, row.timing.ours_spread?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    match (most, widest) {
        (0 | 1, _) | (_, None) => "one round".into(),
        (n, Some((row, spread))) => format!(
            "the fastest of {n} rounds for ours and for the built-in, the rounds alternating \
             with PyTorch's processes (spread: slowest round over fastest, ours up to \
             {spread:.2}x, `{} {} {}`)",
            row.device, row.case, row.pass
        ),
    }
}

/// The measured ceilings of every device the rows name (none for Flex).
fn device_peaks(rows: &[Row]) -> BTreeMap<String, Peaks> {
    common::devices::devices()
        .into_iter()
        .filter(|(name, _)| rows.iter().any(|row| row.device == *name))
        .map(|(name, device)| (name.to_string(), Peaks::measure(&device)))
        .collect()
}

fn write_markdown(
    rows: &[Row],
    peaks: &BTreeMap<String, Peaks>,
    pytorch: Option<&PyTorchResults>,
    (epilogues, png): (&str, &str),
    path: &Path,
) -> std::io::Result<()> {
    let mut md = String::new();
    let profile = if common::catalogue::full_profile() {
        "full"
    } else {
        "quick"
    };
    if rows.is_empty() {
        // The epilogue bench run alone.
        let _ = writeln!(
            md,
            "# Benchmarks: fused epilogues\n\nWritten by `benches/report.rs` from \
             `cargo bench --bench epilogue` rounds (profile `{profile}`). Machine: {}. f32, \
             criterion mean of 10 samples per round, each side's fastest round.",
            common::machine::machine()
        );
        md.push_str(epilogues);
        return std::fs::write(path, md);
    }
    let _ = writeln!(
        md,
        "# Benchmarks: burn-convpool against Burn's built-in operators\n"
    );
    let _ = writeln!(
        md,
        "Written by `bash benches/report.sh` (profile `{profile}`; shapes in \
         `benches/catalogue.json`). Machine: {}. f32, criterion mean of 10 samples, each a batch of \
         calls queued back to back with one device sync at its end; {}. **ratio = built-in / \
         ours: above 1 means ours is faster.** Throughput is ours: GFLOP/s for convolutions \
         (2 x the direct algorithm's multiply-adds, so Winograd rows show an effective rate; \
         every pass does the same work), GB/s for pools (bytes read and written at least). {}\n",
        machine(),
        rounds(rows),
        autotune()
    );
    if let Some(torch) = pytorch {
        let spread = torch
            .spread
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(String::new(), |(row, spread)| {
                format!(" (the widest spread between them: {spread:.2}x, `{row}`)")
            });
        // A file without `processes` predates the fair method: one process, gradients through
        // `torch.nn.grad`.
        let method = match torch.processes {
            1 => "one process".to_string(),
            n => format!(
                "the fastest of {n} separate processes per row{spread}; gradients through \
                 `aten.convolution_backward` on the real tensors, as training runs them"
            ),
        };
        let _ = writeln!(
            md,
            "PyTorch column: `benches/pytorch_bench.py`, torch {} on {} ({}), same shapes, mean \
             seconds, {method} (on CUDA, cuDNN may run f32 convolutions in TF32, PyTorch's \
             default).\n",
            torch.torch_version, torch.device, torch.device_name
        );
    }
    let mut device = "";
    for row in rows {
        if row.device != device {
            device = &row.device;
            let _ = writeln!(md, "\n## Device `{device}`\n");
            if let Some(line) = peaks.get(device).and_then(Peaks::describe) {
                let _ = writeln!(
                    md,
                    "Measured peaks (CubeCL's throughput probes, this machine, after the \
                     benches): {line}. % of peak: convolutions against the f32 fma peak (a \
                     tensor-core kernel can pass 100%), pools against the copy bandwidth, \
                     which the probe measures streaming 512 MiB buffers (a pool whose data \
                     stays in cache can pass 100%).\n"
                );
            }
            let _ = writeln!(
                md,
                "| case | op | pass | ours | built-in | ratio | ours throughput | % of peak | \
                 PyTorch | PyTorch / ours | spread: ours, PyTorch |"
            );
            let _ = writeln!(
                md,
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
            );
        }
        let ratio = match (row.timing.burn, row.timing.ours) {
            (Some(burn), Some(ours)) => format!("{:.2}x", burn / ours),
            (None, Some(_)) => "no built-in".into(),
            _ => "—".into(),
        };
        let throughput = row
            .timing
            .ours
            .and_then(|seconds| match row.work {
                Work::Flops(flops) => Some(format!("{:.1} GFLOP/s", flops / seconds * 1e-9)),
                Work::Bytes(bytes) => Some(format!("{:.1} GB/s", bytes / seconds * 1e-9)),
                Work::Step => None,
            })
            .unwrap_or_else(|| "—".into());
        let share = row
            .timing
            .ours
            .and_then(|seconds| {
                let (rate, is_conv) = match row.work {
                    Work::Flops(flops) => (flops / seconds, true),
                    Work::Bytes(bytes) => (bytes / seconds, false),
                    Work::Step => return None,
                };
                peaks.get(device)?.share(rate, is_conv)
            })
            .map_or("—".into(), |share| format!("{:.1}%", share * 100.0));
        let versus_pytorch = row
            .pytorch_ratio()
            .map_or("—".into(), |r| format!("{r:.2}x"));
        let spread = |spread: Option<f64>| spread.map_or("—".into(), |s| format!("{s:.2}x"));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}, {} |",
            row.case,
            row.op,
            row.pass,
            duration(row.timing.ours),
            duration(row.timing.burn),
            ratio,
            throughput,
            share,
            duration(row.pytorch),
            versus_pytorch,
            spread(row.timing.ours_spread),
            spread(row.pytorch_spread)
        );
    }
    let ratios: Vec<f64> = rows
        .iter()
        .filter_map(|row| Some(row.timing.burn? / row.timing.ours?))
        .collect();
    if !ratios.is_empty() {
        let geomean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let faster = ratios.iter().filter(|&&r| r > 1.0).count();
        let _ = writeln!(
            md,
            "\nGeometric mean ratio {geomean:.2}x over {} comparisons; ours is faster in {faster}.",
            ratios.len()
        );
    }
    let versus_pytorch: Vec<(&Row, f64)> = rows
        .iter()
        .filter_map(|row| Some((row, row.pytorch_ratio()?)))
        .collect();
    if !versus_pytorch.is_empty() {
        let n = versus_pytorch.len() as f64;
        let geomean = (versus_pytorch.iter().map(|(_, r)| r.ln()).sum::<f64>() / n).exp();
        let faster = versus_pytorch.iter().filter(|(_, r)| *r > 1.0).count();
        let (slowest, lowest) = versus_pytorch
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("non-empty");
        let _ = writeln!(
            md,
            "PyTorch / ours (PyTorch's time over ours, same machine, same run): geometric mean \
             {geomean:.2}x over {} rows; ours is faster in {faster}; lowest {lowest:.2}x \
             ({} {} {}).",
            versus_pytorch.len(),
            slowest.device,
            slowest.case,
            slowest.pass
        );
    }
    md.push_str(epilogues);
    if !rows.is_empty() {
        let _ = writeln!(md, "\n![ratios]({png})");
    }
    std::fs::write(path, md)
}

fn write_png(rows: &[Row], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "invalid embedded font")?;
    // Per row: built-in / ours and PyTorch / ours, where measured.
    let bars: Vec<(String, Option<f64>, Option<f64>)> = rows
        .iter()
        .filter_map(|row| {
            let builtin = row.timing.burn.zip(row.timing.ours).map(|(b, o)| b / o);
            let pytorch = row.pytorch_ratio();
            (builtin.is_some() || pytorch.is_some()).then(|| {
                let label = format!("{} {} {}", row.device, row.case, row.pass);
                (label, builtin, pytorch)
            })
        })
        .collect();
    let height = 80 + 22 * bars.len() as u32;
    let root = BitMapBackend::new(path, (1200, height.max(200))).into_drawing_area();
    root.fill(&WHITE)?;
    let limit = bars
        .iter()
        .flat_map(|(_, b, p)| [*b, *p])
        .flatten()
        .map(|r| r.log2().abs())
        .fold(1.0f64, f64::max)
        .ceil();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "time ratios, log2 scale, right of 0 = ours faster: built-in / ours (upper bar, \
             green/red), PyTorch / ours (lower bar, blue/orange)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(30)
        .build_cartesian_2d(-limit - 6.0..limit, 0f64..bars.len() as f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_label_formatter(&|x| {
            if *x >= -limit {
                format!("{:.2}x", 2f64.powf(*x))
            } else {
                String::new()
            }
        })
        .draw()?;
    let top = bars.len() as f64;
    let bar = |y: f64, ratio: f64, [good, bad]: [RGBColor; 2]| {
        let color = if ratio >= 1.0 { good } else { bad };
        Rectangle::new(
            [(0.0, y), (ratio.log2(), y + 0.35)],
            color.mix(0.75).filled(),
        )
    };
    let orange = RGBColor(230, 140, 20);
    chart.draw_series(
        bars.iter()
            .enumerate()
            .flat_map(|(i, (_, builtin, pytorch))| {
                let y = top - i as f64;
                let upper = builtin.map(|r| bar(y - 0.45, r, [GREEN, RED]));
                let lower = pytorch.map(|r| bar(y - 0.85, r, [BLUE, orange]));
                upper.into_iter().chain(lower)
            }),
    )?;
    let show = |name: &str, ratio: &Option<f64>| {
        ratio.map_or(String::new(), |r| format!("  {name} {r:.2}x"))
    };
    chart.draw_series(
        bars.iter()
            .enumerate()
            .map(|(i, (label, builtin, pytorch))| {
                let y = top - i as f64 - 0.3;
                Text::new(
                    format!(
                        "{label}{}{}",
                        show("built-in", builtin),
                        show("PyTorch", pytorch)
                    ),
                    (-limit - 6.0, y),
                    ("sans-serif", 12),
                )
            }),
    )?;
    chart.draw_series(std::iter::once(PathElement::new(
        [(0.0, 0.0), (0.0, top)],
        BLACK,
    )))?;
    root.present()?;
    Ok(())
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let since = std::env::var("REPORT_SINCE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(UNIX_EPOCH, |s| UNIX_EPOCH + Duration::from_secs(s));
    let target =
        std::env::var("CARGO_TARGET_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
    // `benches/report.sh` gives each round its own directory; a plain `cargo bench` writes one.
    let mut round_dirs: Vec<PathBuf> = std::fs::read_dir(target.join("criterion-rounds"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|round| round.path())
        .collect();
    if round_dirs.is_empty() {
        round_dirs.push(target.join("criterion"));
    }
    let timings = criterion_results(&round_dirs, since);
    // PyTorch's timings count only when written by this run of the script (this machine).
    let pytorch_path = root.join("benches/pytorch.json");
    let pytorch_fresh = std::fs::metadata(&pytorch_path)
        .and_then(|meta| meta.modified())
        .is_ok_and(|modified| modified >= since);
    let pytorch: Option<PyTorchResults> = pytorch_fresh
        .then(|| std::fs::read_to_string(&pytorch_path).ok())
        .flatten()
        .and_then(|text| serde_json::from_str(&text).ok());
    let rows = rows(&timings, pytorch.as_ref());
    let means = timings
        .iter()
        .map(|(id, timing)| (id.clone(), (timing.ours, timing.burn)))
        .collect();
    // PyTorch's time of row `{family}/{case}/{pass}` on the device's kind.
    let pytorch_row = |device: &str, family: &str, case: &str, pass: &str| {
        let key = format!("{family}/{case}/{pass}");
        pytorch
            .as_ref()
            .and_then(|torch| torch.for_device(device, &key).0)
    };
    let epilogue_pytorch =
        |device: &str, case: &str| pytorch_row(device, "conv_epilogue", case, "forward");
    let block_pytorch = |device: &str, case: &str| pytorch_row(device, "conv_bn_act", case, "step");
    let epilogues = common::epilogue_table::section(&means, epilogue_pytorch, duration)
        + &common::epilogue_table::block_section(&means, block_pytorch, duration);
    if rows.is_empty() && epilogues.is_empty() {
        eprintln!(
            "no fresh results under {}: run `bash benches/report.sh`",
            target.display()
        );
        std::process::exit(1);
    }
    // `REPORT_NAME` names a report of another machine or device (e.g. `REPORT-lavapipe-wgpu`)
    // so it does not replace the main one.
    let name = std::env::var("REPORT_NAME").unwrap_or_else(|_| "REPORT".into());
    let png = format!("{}.png", name.to_lowercase());
    let peaks = device_peaks(&rows);
    write_markdown(
        &rows,
        &peaks,
        pytorch.as_ref(),
        (&epilogues, &png),
        &root.join(format!("benches/{name}.md")),
    )
    .expect("write the report");
    // A run of the epilogue bench alone has no rows to chart.
    if !rows.is_empty() {
        write_png(&rows, &root.join("benches").join(&png)).expect("write the chart");
    }
    println!("wrote benches/{name}.md ({} rows)", rows.len());
}

/// Multiply-adds times two of one pass; forward, input gradient and weight gradient each do
/// the same work. A transposed conv does the work of the conv it is the adjoint of.
fn conv_flops(case: &ConvCase, transposed: bool) -> f64 {
    let taps: usize = case.kernel.iter().product();
    let (positions, channels_in) = if transposed {
        (case.x[2..].iter().product::<usize>(), case.out_channels)
    } else {
        (case.out_size(false).iter().product::<usize>(), case.x[1])
    };
    let outputs = case.x[0]
        * if transposed {
            case.x[1]
        } else {
            case.out_channels
        }
        * positions;
    2.0 * (outputs * channels_in / case.groups * taps) as f64
}

/// Bytes a pass must move at least, the same both ways: forward reads x and writes the
/// output (and, for max, the indices); backward reads those and writes x's gradient. f32
/// values, 32-bit indices.
fn pool_bytes(case: &PoolCase) -> f64 {
    let input: usize = case.x.iter().product();
    let output: usize = case.out_dims().iter().product();
    let indices = if case.op == "max_pool" { output } else { 0 };
    4.0 * (input + output + indices) as f64
}

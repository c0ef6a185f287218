//! The training curves as a PNG: train loss (every step, and the epoch mean) and test accuracy.

use std::error::Error;
use std::ops::Range;
use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf32;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// DejaVu Sans Mono (free license, `examples/assets/DejaVu-LICENSE`): plotters' bitmap backend
/// draws text with a font it is given, so the plot needs no system fonts.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

/// What one run measured: the loss of every step (x in epochs) and per-epoch results.
pub struct History {
    pub title: String,
    pub step_loss: Vec<(f32, f32)>,
    pub epoch_loss: Vec<(f32, f32)>,
    pub test_accuracy: Vec<(f32, f32)>,
}

type Panel<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf32, RangedCoordf32>>;

/// A captioned chart over `epochs` on x and `y`, with its grid drawn.
fn panel<'a, 'b>(
    area: &'a DrawingArea<BitMapBackend<'b>, Shift>,
    caption: &str,
    epochs: f32,
    y: Range<f32>,
) -> Result<Panel<'a, 'b>, Box<dyn Error>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(48)
        .build_cartesian_2d(0f32..epochs, y)?;
    chart.configure_mesh().x_desc("epoch").draw()?;
    Ok(chart)
}

pub fn write_png(history: &History, path: &Path) -> Result<(), Box<dyn Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "the embedded font is not a valid TrueType font")?;
    let epochs = history.epoch_loss.len().max(1) as f32;
    let root = BitMapBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&history.title, ("sans-serif", 20))?;
    let (left, right) = root.split_horizontally(500);

    let max_loss = history
        .step_loss
        .iter()
        .map(|&(_, loss)| loss)
        .fold(0.1f32, f32::max)
        .min(5.0);
    let mut chart = panel(&left, "train loss (cross-entropy)", epochs, 0f32..max_loss)?;
    chart
        .draw_series(LineSeries::new(
            history.step_loss.iter().copied(),
            &BLUE.mix(0.3),
        ))?
        .label("step")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE.mix(0.3)));
    chart
        .draw_series(LineSeries::new(
            history.epoch_loss.iter().copied(),
            BLUE.stroke_width(2),
        ))?
        .label("epoch mean")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE.stroke_width(2)));
    chart.configure_series_labels().border_style(BLACK).draw()?;

    let low = history
        .test_accuracy
        .iter()
        .map(|&(_, accuracy)| accuracy)
        .fold(100f32, f32::min)
        .min(90.0);
    let mut chart = panel(
        &right,
        "test accuracy (%)",
        epochs,
        (low.floor() - 1.0)..100f32,
    )?;
    chart.draw_series(LineSeries::new(
        history.test_accuracy.iter().copied(),
        RED.stroke_width(2),
    ))?;
    chart.draw_series(
        history
            .test_accuracy
            .iter()
            .map(|&point| Circle::new(point, 3, RED.filled())),
    )?;
    root.present()?;
    Ok(())
}

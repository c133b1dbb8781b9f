//! The benchmark plot: microseconds per seam against T, log-log, one panel per hidden size, with
//! the fused path, the unfused baseline, eager calls and the floor (SVG and PNG).

use super::BenchRow;
use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Invalid(format!("plot: {e}"))
}

fn series(rows: &[BenchRow], h: usize, path: &str, mode: &str, pdl: bool) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| {
            r.op == "seam" && r.hidden == h && r.path == path && r.mode == mode && r.pdl == pdl
        })
        .map(|r| (r.tokens as f64, r.us_per_seam))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[BenchRow],
    h: usize,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let mut floor: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.op == "seam" && r.hidden == h && r.mode == "graph")
        .map(|r| (r.tokens as f64, r.floor_us))
        .collect();
    floor.sort_by(|a, b| a.0.total_cmp(&b.0));
    floor.dedup_by(|a, b| a.0 == b.0);
    let lines = [
        (
            "fused (CUDA graph)",
            series(rows, h, "fused", "graph", false),
            RGBColor(0, 102, 204),
        ),
        (
            "fused (CUDA graph, programmatic dependent launch)",
            series(rows, h, "fused", "graph", true),
            RGBColor(0, 153, 76),
        ),
        (
            "fused (eager calls)",
            {
                let mut v = series(rows, h, "fused", "eager", false);
                v.extend(series(rows, h, "fused", "eager", true));
                v
            },
            RGBColor(120, 170, 230),
        ),
        (
            "unfused baseline (CUDA graph)",
            series(rows, h, "unfused", "graph", false),
            RGBColor(204, 51, 0),
        ),
        (
            "CPU reference",
            series(rows, h, "cpu", "host", false),
            RGBColor(120, 120, 120),
        ),
        ("floor (bytes / copy bandwidth)", floor, RGBColor(0, 0, 0)),
    ];
    let pts: Vec<(f64, f64)> = lines.iter().flat_map(|l| l.1.iter().copied()).collect();
    if pts.is_empty() {
        return Ok(());
    }
    let (xmin, xmax) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ymin, ymax) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let gpu = rows
        .iter()
        .find(|r| r.hidden == h)
        .map(|r| r.gpu.clone())
        .unwrap_or_default();
    let mut chart = ChartBuilder::on(area)
        .caption(format!("mHC seam, H = {h} ({gpu})"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (xmin * 0.8..xmax * 1.25).log_scale(),
            (ymin * 0.7..ymax * 1.4).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("tokens T")
        .y_desc("microseconds per seam")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    for (name, data, color) in lines {
        if data.is_empty() {
            continue;
        }
        let style = ShapeStyle::from(&color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(data.clone(), style))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart
            .draw_series(data.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    rows: &[BenchRow],
    hs: &[usize],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((1, hs.len().max(1)));
    for (a, h) in areas.iter().zip(hs) {
        panel(a, rows, *h)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes `<stem>.svg` and `<stem>.png` for the seam rows of every hidden size in `rows`.
pub fn write(rows: &[BenchRow], stem: &Path) -> Result<()> {
    // Registering twice is harmless; a bad font is our bug, reported as an error.
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| err("font"))?;
    let mut hs: Vec<usize> = rows
        .iter()
        .filter(|r| r.op == "seam")
        .map(|r| r.hidden)
        .collect();
    hs.sort();
    hs.dedup();
    let size = (560 * hs.len().max(1) as u32, 460);
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    draw(SVGBackend::new(&svg, size).into_drawing_area(), rows, &hs)?;
    draw(
        BitMapBackend::new(&png, size).into_drawing_area(),
        rows,
        &hs,
    )?;
    Ok(())
}

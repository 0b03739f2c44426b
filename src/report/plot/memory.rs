//! Memory per GPU by component: one stacked bar per system or variant.

use super::backend::{render, Chart};
use super::style::{font, legend, XyChart, SERIES, WIDTH};
use super::PlotError;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One bar group: a system (or variant) and its memory terms (component, bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySeries {
    pub label: String,
    pub terms: Vec<(String, f64)>,
    pub total_bytes: f64,
}

pub struct MemoryChart<'a> {
    pub title: &'a str,
    pub series: &'a [MemorySeries],
}

/// Memory per GPU by component: one horizontal bar per component (grouped by series), each
/// labelled with its size, so small terms stay readable beside the weights.
pub fn plot_memory(chart: &MemoryChart, path: &Path) -> Result<(), PlotError> {
    if chart.series.iter().all(|s| s.terms.is_empty()) {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
            message: "no memory terms".into(),
        });
    }
    let rows = chart.series.first().map_or(0, |s| s.terms.len()) as u32;
    let per = chart.series.len().max(1) as u32;
    let height = (140 + rows * (12 + 22 * per)).clamp(360, 1400);
    render(chart, path, (WIDTH, height))
}

pub(super) fn gib_text(b: f64) -> String {
    let g = b / (1u64 << 30) as f64;
    if g >= 10.0 {
        format!("{g:.1} GiB")
    } else if g >= 0.1 {
        format!("{g:.2} GiB")
    } else {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    }
}

impl Chart for MemoryChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        root.fill(&WHITE).map_err(e)?;
        let names: Vec<String> = self
            .series
            .first()
            .map(|s| s.terms.iter().map(|t| t.0.clone()).collect())
            .unwrap_or_default();
        let n = names.len().max(1) as f64;
        let gib = (1u64 << 30) as f64;
        let xmax = self
            .series
            .iter()
            .flat_map(|s| s.terms.iter().map(|t| t.1))
            .fold(1.0f64, f64::max)
            / gib
            * 1.22;
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 19))
            .margin(16)
            .x_label_area_size(46)
            .y_label_area_size(150)
            .build_cartesian_2d(0f64..xmax, 0f64..n)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("GiB per GPU")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(e)?;
        let per = self.series.len().max(1) as f64;
        let band = 0.8 / per;
        for (k, s) in self.series.iter().enumerate() {
            let color = SERIES[k % SERIES.len()];
            for (i, (_, bytes)) in s.terms.iter().enumerate() {
                // Row 0 at the top.
                let top = n - i as f64 - 0.1 - k as f64 * band;
                let v = bytes / gib;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, top - band), (v, top)],
                        color.filled(),
                    )))
                    .map_err(e)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        gib_text(*bytes),
                        (v, top - band / 2.0),
                        font(13).pos(Pos::new(HPos::Left, VPos::Center)),
                    )))
                    .map_err(e)?;
            }
            if self.series.len() > 1 {
                chart
                    .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                    .map_err(e)?
                    .label(format!("{} (total {})", s.label, gib_text(s.total_bytes)))
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
                    });
            }
        }
        row_names(root, &chart, &names, n)?;
        if self.series.len() > 1 {
            legend(&mut chart, SeriesLabelPosition::LowerRight, 14).map_err(e)?;
        }
        Ok(())
    }
}

/// The terms' names left of their rows, row 0 at the top of `n` rows.
fn row_names<'a, DB: DrawingBackend + 'a>(
    root: &DrawingArea<DB, Shift>,
    chart: &XyChart<'a, DB>,
    names: &[String],
    n: f64,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    for (i, name) in names.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(0.0, n - i as f64 - 0.5));
        root.draw(&Text::new(
            name.replace('_', " "),
            (px - 8, py),
            font(14).pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(e)?;
    }
    Ok(())
}

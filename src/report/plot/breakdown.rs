//! The category breakdown across batch sizes: one stacked bar per batch.

use super::backend::{render, Chart};
use super::style::{legend, tag, COLORS, HEIGHT, OTHER, SMALL_SHARE, WIDTH};
use super::PlotError;
use crate::category::Category;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

pub struct BreakdownChart<'a> {
    pub title: &'a str,
    pub batches: &'a [u32],
    /// Exclusive µs per category ([`Category::ALL`] order) at each batch.
    pub times_us: &'a [[f64; Category::COUNT]],
}

/// The step's time by category at each batch size, as a stacked area (ms per step); categories
/// under [`SMALL_SHARE`] at every batch are grouped into "other".
pub fn plot_breakdown(chart: &BreakdownChart, path: &Path) -> Result<(), PlotError> {
    if chart.batches.is_empty() || chart.batches.len() != chart.times_us.len() {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
            message: "no batch sizes".into(),
        });
    }
    render(chart, path, (WIDTH, HEIGHT))
}

impl Chart for BreakdownChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        root.fill(&WHITE).map_err(e)?;
        let totals: Vec<f64> = self.times_us.iter().map(|r| r.iter().sum()).collect();
        let layers = self.layers(&totals);
        let n = self.batches.len();
        let ymax = totals.iter().fold(0.0f64, |a, &b| a.max(b)) / 1e3 * 1.12;
        let xmax = (n.max(2) - 1) as f64;
        let mut chart = ChartBuilder::on(root)
            .caption(
                self.title,
                ("sans-serif", if self.title.len() > 60 { 17 } else { 20 }),
            )
            .margin(18)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.05f64..xmax + 0.05, 0f64..ymax.max(1e-9))
            .map_err(e)?;
        let batches = self.batches;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.max(2))
            .x_label_formatter(&|v| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < batches.len() {
                    batches[i as usize].to_string()
                } else {
                    String::new()
                }
            })
            .x_desc("batch (sequences per step; evenly spaced)")
            .y_desc("ms per decode step")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(e)?;
        let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let mut base = vec![0.0f64; n];
        let mut spans: Vec<(String, f64, f64)> = Vec::new();
        for (name, color, vals) in &layers {
            let top: Vec<f64> = base.iter().zip(vals).map(|(b, v)| b + v).collect();
            let mut poly: Vec<(f64, f64)> = xs.iter().copied().zip(top.iter().copied()).collect();
            poly.extend(xs.iter().rev().copied().zip(base.iter().rev().copied()));
            let c = *color;
            chart
                .draw_series(std::iter::once(Polygon::new(poly, c.filled())))
                .map_err(e)?
                .label(name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
            spans.push((name.clone(), base[n - 1], top[n - 1]));
            base = top;
        }
        // Each area's share of the step at the largest batch, where the area is tall enough.
        let last = totals.last().copied().unwrap_or(0.0) / 1e3;
        for (name, lo, hi) in &spans {
            let (_, py0) = chart.backend_coord(&(xmax, *lo));
            let (px, py1) = chart.backend_coord(&(xmax, *hi));
            if py0 - py1 >= 16 && last > 0.0 {
                share_tag(root, (px, py0, py1), name, (hi - lo) / last)?;
            }
        }
        // Step time above each batch.
        for (i, t) in totals.iter().enumerate() {
            let px = chart.backend_coord(&(i as f64, t / 1e3));
            step_time_tag(root, px, i, n, *t)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft, 14).map_err(e)?;
        Ok(())
    }
}

impl BreakdownChart<'_> {
    /// The stacked areas, bottom first, in ms per step: each category above [`SMALL_SHARE`] of
    /// its step at some batch, and "other" for the rest; `totals` is each batch's step (µs).
    fn layers(&self, totals: &[f64]) -> Vec<(String, RGBColor, Vec<f64>)> {
        let keep: Vec<bool> = (0..Category::COUNT)
            .map(|c| {
                self.times_us
                    .iter()
                    .zip(totals)
                    .any(|(r, t)| *t > 0.0 && r[c] >= SMALL_SHARE * t)
            })
            .collect();
        let mut layers: Vec<(String, RGBColor, Vec<f64>)> = Vec::new();
        for (c, cat) in Category::ALL.iter().enumerate() {
            if keep[c] {
                layers.push((
                    cat.name().to_string(),
                    COLORS[c],
                    self.times_us.iter().map(|r| r[c] / 1e3).collect(),
                ));
            }
        }
        let small: Vec<usize> = (0..Category::COUNT).filter(|&c| !keep[c]).collect();
        let other: Vec<f64> = self
            .times_us
            .iter()
            .map(|r| small.iter().map(|&c| r[c]).sum::<f64>() / 1e3)
            .collect();
        if other.iter().any(|&v| v > 0.0) {
            let names: Vec<&str> = small
                .iter()
                .filter(|&&c| self.times_us.iter().any(|r| r[c] > 0.0))
                .map(|&c| Category::ALL[c].name())
                .collect();
            layers.push((format!("other ({})", names.join(", ")), OTHER, other));
        }
        layers
    }
}

/// An area's share of the step at the largest batch, left of the area's middle: `span` is the
/// area's x and its bottom and top pixels.
fn share_tag<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    span: (i32, i32, i32),
    name: &str,
    share: f64,
) -> Result<(), String> {
    let (px, py0, py1) = span;
    tag(
        root,
        (px, (py0 + py1) / 2),
        (-8, 0),
        &format!(
            "{} {:.0}%",
            name.split(' ').next().unwrap_or(name),
            share * 100.0
        ),
        BLACK,
        Pos::new(HPos::Right, VPos::Center),
    )
}

/// Batch `i`'s step time (`t` µs) above its bar, kept inside the chart at either end.
fn step_time_tag<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    px: (i32, i32),
    i: usize,
    n: usize,
    t: f64,
) -> Result<(), String> {
    let h = if i == 0 {
        HPos::Left
    } else if i + 1 == n {
        HPos::Right
    } else {
        HPos::Center
    };
    tag(
        root,
        px,
        (0, -6),
        &format!("{:.1} ms", t / 1e3),
        BLACK,
        Pos::new(h, VPos::Bottom),
    )
}

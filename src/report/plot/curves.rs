//! Throughput and TPOT against concurrency: one line per system or variant, measured points
//! and limits.

use super::backend::{render, Chart};
use super::style::{int, legend, stroke, XyChart, HEIGHT, SERIES, WIDTH};
use super::PlotError;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Which quantity a curve chart shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurveMetric {
    TokensPerS,
    TpotMs,
}

/// One system's (or variant's) curve.
#[derive(Debug, Clone, PartialEq)]
pub struct CurveSeries {
    pub label: String,
    /// (concurrency, tokens/s, TPOT ms).
    pub points: Vec<(f64, f64, f64)>,
    pub knee: Option<u32>,
    pub plateau: Option<u32>,
}

/// A measured point: concurrency, tokens/s, TPOT (ms) when measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredPoint {
    pub concurrency: f64,
    pub tokens_per_s: f64,
    pub tpot_ms: Option<f64>,
}

pub struct CurveChart<'a> {
    pub title: &'a str,
    pub metric: CurveMetric,
    pub series: &'a [CurveSeries],
    pub measured: &'a [MeasuredPoint],
    /// A horizontal limit line (the TPOT limit), with its label.
    pub limit: Option<(f64, String)>,
}

/// Throughput or TPOT against concurrency, several series on one chart, measured points
/// overlaid.
pub fn plot_curves(chart: &CurveChart, path: &Path) -> Result<(), PlotError> {
    if chart.series.iter().all(|s| s.points.is_empty()) {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
            message: "no curve points".into(),
        });
    }
    render(chart, path, (WIDTH, HEIGHT))
}

/// The legend text of a series: its label, then knee (▲) and plateau (◆).
pub(super) fn series_label(s: &CurveSeries) -> String {
    let mut marks = Vec::new();
    if let Some(k) = s.knee {
        marks.push(format!("knee ▲ {k}"));
    }
    if let Some(p) = s.plateau {
        marks.push(format!("plateau ◆ {p}"));
    }
    if marks.is_empty() {
        s.label.clone()
    } else {
        format!("{}; {}", s.label, marks.join(", "))
    }
}

impl CurveChart<'_> {
    fn y(&self, p: &(f64, f64, f64)) -> f64 {
        match self.metric {
            CurveMetric::TokensPerS => p.1,
            CurveMetric::TpotMs => p.2,
        }
    }
    fn measured_y(&self, m: &MeasuredPoint) -> Option<f64> {
        match self.metric {
            CurveMetric::TokensPerS => Some(m.tokens_per_s),
            CurveMetric::TpotMs => m.tpot_ms,
        }
    }
}

impl Chart for CurveChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        root.fill(&WHITE).map_err(e)?;
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.measured.iter().map(|m| m.concurrency));
        let xmax = xs.fold(1.0f64, f64::max) * 1.05;
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| self.y(p)))
            .chain(self.measured.iter().filter_map(|m| self.measured_y(m)))
            .chain(self.limit.iter().map(|l| l.0));
        let ymax = ys.fold(0.0f64, f64::max).max(1e-9) * 1.12;
        let ydesc = match self.metric {
            CurveMetric::TokensPerS => "output tokens/s (all users)",
            CurveMetric::TpotMs => "TPOT (ms per output token)",
        };
        let mut chart = ChartBuilder::on(root)
            .caption(
                self.title,
                ("sans-serif", if self.title.len() > 60 { 17 } else { 20 }),
            )
            .margin(18)
            .x_label_area_size(50)
            .y_label_area_size(78)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("concurrent users (sequences decoded per step)")
            .y_desc(ydesc)
            .x_label_formatter(&|v| int(*v))
            .y_label_formatter(&|v| match self.metric {
                CurveMetric::TokensPerS => int(*v),
                CurveMetric::TpotMs => format!("{v:.0}"),
            })
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(e)?;
        for (k, s) in self.series.iter().enumerate() {
            let color = SERIES[k % SERIES.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.0, self.y(p))).collect();
            chart
                .draw_series(std::iter::once(PathElement::new(
                    pts.clone(),
                    stroke(color, 2),
                )))
                .map_err(e)?
                .label(series_label(s))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], stroke(color, 2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
            marks(root, &mut chart, s, &pts, color)?;
        }
        self.overlays(&mut chart, xmax)?;
        // Lower right: throughput curves rise and TPOT curves of large systems stay low
        // there, so the legend covers no data in either chart.
        legend(&mut chart, SeriesLabelPosition::LowerRight, 14).map_err(e)?;
        Ok(())
    }
}

impl CurveChart<'_> {
    /// The measured points and the limit line, over the curves.
    fn overlays<'a, DB: DrawingBackend + 'a>(
        &self,
        chart: &mut XyChart<'a, DB>,
        xmax: f64,
    ) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        let measured: Vec<(f64, f64)> = self
            .measured
            .iter()
            .filter_map(|m| self.measured_y(m).map(|y| (m.concurrency, y)))
            .collect();
        if !measured.is_empty() {
            chart
                .draw_series(measured.iter().map(|&p| Cross::new(p, 6, stroke(BLACK, 2))))
                .map_err(e)?
                .label("measured")
                .legend(|(x, y)| Cross::new((x + 11, y), 5, stroke(BLACK, 2)));
        }
        if let Some((v, label)) = &self.limit {
            let red = RGBColor(200, 0, 0);
            chart
                .draw_series(dashes(xmax, *v).map(|seg| PathElement::new(seg, stroke(red, 1))))
                .map_err(e)?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], red));
        }
        Ok(())
    }
}

/// A series' knee and plateau markers.
fn marks<'a, DB: DrawingBackend + 'a>(
    root: &DrawingArea<DB, Shift>,
    chart: &mut XyChart<'a, DB>,
    s: &CurveSeries,
    pts: &[(f64, f64)],
    color: RGBColor,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    // Knee and plateau as markers (a triangle up, a diamond); the numbers are in the
    // legend, where labels cannot collide with curves or each other.
    for (mark, at) in [("knee", s.knee), ("plateau", s.plateau)] {
        let Some(c) = at else { continue };
        let Some(&(x, y)) = pts.iter().find(|p| p.0 == c as f64) else {
            continue;
        };
        if mark == "knee" {
            chart
                .draw_series(std::iter::once(TriangleMarker::new(
                    (x, y),
                    8,
                    color.filled(),
                )))
                .map_err(e)?;
        } else {
            let (px, py) = chart.backend_coord(&(x, y));
            root.draw(&Polygon::new(
                vec![(px, py - 8), (px + 7, py), (px, py + 8), (px - 7, py)],
                color.filled(),
            ))
            .map_err(e)?;
        }
    }
    Ok(())
}

/// A dashed horizontal line at `y` from 0 to `xmax`, as 60 dashes.
pub(super) fn dashes(xmax: f64, y: f64) -> impl Iterator<Item = Vec<(f64, f64)>> {
    let step = xmax / 60.0;
    (0..60).map(move |i| vec![(i as f64 * step, y), ((i as f64 + 0.6) * step, y)])
}

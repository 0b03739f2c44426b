//! Speculative decoding: speedup over no speculation against batch, one panel per acceptance,
//! one line per draft length (the heat map of the same data is [`super::speedup_heatmap`]).

use super::backend::{render_with, Chart};
use super::style::{font, legend, stroke, XyChart, HEIGHT, SERIES, WIDTH};
use super::PlotError;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One acceptance's speedups: `speedup[k index][batch index]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedupPanel {
    /// What the panel shows (an acceptance), and a short note (best k, crossover).
    pub label: String,
    pub note: String,
    pub speedup: Vec<Vec<f64>>,
}

/// Pixels above the panels: title and two subtitle lines.
pub(super) const HEADER: u32 = 80;

pub struct SpeedupChart<'a> {
    pub title: &'a str,
    /// Scenario and which engine priced the steps: up to two lines.
    pub subtitle: &'a str,
    pub batches: &'a [u32],
    pub draft_tokens: &'a [u32],
    /// One panel per acceptance (a 2-column grid when there are several).
    pub panels: &'a [SpeedupPanel],
}

impl SpeedupChart<'_> {
    fn check(&self, path: &Path) -> Result<(), PlotError> {
        let empty = |m: &str| {
            Err(PlotError::Empty {
                path: path.to_path_buf(),
                message: m.into(),
            })
        };
        if self.batches.is_empty() || self.draft_tokens.is_empty() || self.panels.is_empty() {
            return empty("no batches, draft-token counts or acceptances");
        }
        let shape_ok = self.panels.iter().all(|p| {
            p.speedup.len() == self.draft_tokens.len()
                && p.speedup.iter().all(|r| {
                    r.len() == self.batches.len() && r.iter().all(|v| v.is_finite() && *v > 0.0)
                })
        });
        if !shape_ok || self.batches.contains(&0) {
            return empty("speedups missing, not positive, or not one per k and batch");
        }
        Ok(())
    }
    fn grid(&self) -> (u32, u32) {
        let n = self.panels.len() as u32;
        let cols = if n == 1 { 1 } else { 2 };
        (cols, n.div_ceil(cols))
    }
    fn size(&self, cell: (u32, u32)) -> (u32, u32) {
        let (cols, rows) = self.grid();
        (cols * cell.0, HEADER + rows * cell.1)
    }
}

/// Speedup against batch (log2 axis), one line per k and one panel per acceptance, with the
/// break-even line at 1.0.
pub fn plot_speedup(chart: &SpeedupChart, path: &Path) -> Result<(), PlotError> {
    chart.check(path)?;
    let cell = if chart.panels.len() == 1 {
        (WIDTH, HEIGHT - HEADER)
    } else {
        (560, 380)
    };
    render_with(&SpeedupLines(chart), path, chart.size(cell), true)
}

/// The same numbers as a k × batch heatmap per acceptance, the speedup written in each cell;
/// colours diverge around 1.0 (red: slower than no speculation, blue: faster).
pub fn plot_speedup_heatmap(chart: &SpeedupChart, path: &Path) -> Result<(), PlotError> {
    chart.check(path)?;
    let cell = (
        (130 + 62 * chart.batches.len() as u32).clamp(480, 1000),
        110 + 34 * chart.draft_tokens.len() as u32,
    );
    render_with(&SpeedupHeat(chart), path, chart.size(cell), true)
}

pub(super) struct SpeedupLines<'a, 'b>(pub(super) &'a SpeedupChart<'b>);
pub(super) struct SpeedupHeat<'a, 'b>(pub(super) &'a SpeedupChart<'b>);

/// Title and subtitle on top; the panel areas below, row-major.
pub(super) fn titled_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &SpeedupChart,
) -> Result<Vec<DrawingArea<DB, Shift>>, String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (w, _) = root.dim_in_pixel();
    root.draw(&Text::new(
        c.title.to_string(),
        (w as i32 / 2, 10),
        font(19).pos(Pos::new(HPos::Center, VPos::Top)),
    ))
    .map_err(e)?;
    for (i, line) in c.subtitle.lines().take(2).enumerate() {
        root.draw(&Text::new(
            line.to_string(),
            (w as i32 / 2, 36 + 18 * i as i32),
            font(13)
                .color(&RGBColor(80, 80, 80))
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(e)?;
    }
    let body = root.margin(HEADER as i32, 0, 0, 0);
    let (cols, rows) = c.grid();
    Ok(body.split_evenly((rows as usize, cols as usize)))
}

pub(super) fn speedup_text(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}x")
    } else {
        format!("{v:.2}x")
    }
}

impl Chart for SpeedupLines<'_, '_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let c = self.0;
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        let areas = titled_panels(root, c)?;
        // One y range for every panel, so panels compare at a glance; 1.0 always shown.
        let all = c.panels.iter().flat_map(|p| p.speedup.iter().flatten());
        let (lo, hi) = all.fold((1.0f64, 1.0f64), |(l, h), &v| (l.min(v), h.max(v)));
        let pad = (hi - lo).max(0.1) * 0.08;
        let (ylo, yhi) = ((lo - pad).max(0.0), hi + pad * 2.0);
        let lx = |b: u32| (b as f64).log2();
        let (xlo, xhi) = (lx(c.batches[0]), lx(*c.batches.last().unwrap_or(&1)));
        let xpad = ((xhi - xlo) * 0.04).max(0.2);
        let many = c.panels.len() > 1;
        for (area, panel) in areas.iter().zip(c.panels) {
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!("{}   {}", panel.label, panel.note),
                    ("sans-serif", if many { 14 } else { 16 }),
                )
                .margin(12)
                .x_label_area_size(46)
                .y_label_area_size(62)
                .build_cartesian_2d(xlo - xpad..xhi + xpad, ylo..yhi)
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_labels(0)
                .disable_x_mesh()
                .y_desc("speedup (tokens/s vs no speculation)")
                .y_label_formatter(&|v| format!("{v:.1}x"))
                .label_style(("sans-serif", 13))
                .axis_desc_style(("sans-serif", 13))
                .light_line_style(TRANSPARENT)
                .draw()
                .map_err(e)?;
            batch_axis(root, &chart, c.batches, (xlo - xpad, xhi + xpad), ylo)?;
            break_even(&mut chart, xlo - xpad, xhi - xlo + 2.0 * xpad)?;
            for (ki, (&k, ys)) in c.draft_tokens.iter().zip(&panel.speedup).enumerate() {
                let color = SERIES[ki % SERIES.len()];
                let pts: Vec<(f64, f64)> = c
                    .batches
                    .iter()
                    .zip(ys)
                    .map(|(&b, &y)| (lx(b), y))
                    .collect();
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        pts.clone(),
                        stroke(color, 2),
                    )))
                    .map_err(e)?
                    .label(format!("k = {k}"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 22, y)], stroke(color, 2))
                    });
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(e)?;
            }
            // Speedup falls with batch: the upper right is free of lines. One legend serves
            // every panel (the colours are the same k everywhere).
            if !std::ptr::eq(panel, &c.panels[0]) {
                continue;
            }
            legend(
                &mut chart,
                SeriesLabelPosition::UpperRight,
                if many { 12 } else { 14 },
            )
            .map_err(e)?;
        }
        Ok(())
    }
}

/// The batch axis of one panel: ticks and labels at the batches' log2 positions under the x
/// range `x`, and the axis title.
fn batch_axis<'a, DB: DrawingBackend + 'a>(
    root: &DrawingArea<DB, Shift>,
    chart: &XyChart<'a, DB>,
    batches: &[u32],
    x: (f64, f64),
    ylo: f64,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let lx = |b: u32| (b as f64).log2();
    // Batch labels at their own (log2) positions, skipping any that would touch the
    // previous one; the axis title in pixels under them.
    let mut last_px: Option<i32> = None;
    for &b in batches {
        let (px, py) = chart.backend_coord(&(lx(b), ylo));
        if last_px.is_some_and(|l| px - l < 26) {
            continue;
        }
        last_px = Some(px);
        root.draw(&PathElement::new(vec![(px, py), (px, py + 4)], BLACK))
            .map_err(e)?;
        root.draw(&Text::new(
            b.to_string(),
            (px, py + 7),
            font(13).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(e)?;
    }
    let (x0, py) = chart.backend_coord(&(x.0, ylo));
    let (x1, _) = chart.backend_coord(&(x.1, ylo));
    root.draw(&Text::new(
        "batch (sequences per step; log2 axis)".to_string(),
        ((x0 + x1) / 2, py + 26),
        font(13).pos(Pos::new(HPos::Center, VPos::Top)),
    ))
    .map_err(e)?;
    Ok(())
}

/// The dashed 1.0x line across `span` from `x0`, with its legend entry.
fn break_even<'a, DB: DrawingBackend + 'a>(
    chart: &mut XyChart<'a, DB>,
    x0: f64,
    span: f64,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    // Break-even, named in the legend (a label on the line would cross the curves).
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series((0..60).map(|i| {
            let a = x0 + span * i as f64 / 60.0;
            PathElement::new(
                vec![(a, 1.0), (a + span * 0.6 / 60.0, 1.0)],
                stroke(grey, 1),
            )
        }))
        .map_err(e)?
        .label("1.0x = no speculation")
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (8, 0)], stroke(grey, 1))
                + PathElement::new(vec![(14, 0), (22, 0)], stroke(grey, 1))
        });
    Ok(())
}

//! Predicted vs measured: two stacked bars by category, small categories grouped as "other".

use super::backend::{render, Chart};
use super::style::{font, int, text_color, COLORS, HEIGHT, OTHER, SMALL_SHARE, WIDTH};
use super::PlotError;
use crate::accounting::compare::Comparison;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// Draws `cmp` to `path` (.svg or .png). `title` goes on top, with the step-time error.
pub fn plot_comparison(cmp: &Comparison, path: &Path, title: &str) -> Result<(), PlotError> {
    render(&ComparisonChart { cmp, title }, path, (WIDTH, HEIGHT))
}

pub(super) struct ComparisonChart<'a> {
    cmp: &'a Comparison,
    title: &'a str,
}

/// A stacked segment: label, colour, µs.
pub(super) type Segment = (String, RGBColor, f64);

/// The segments of both bars: categories below [`SMALL_SHARE`] of both steps are grouped into
/// "other", so no segment is a sliver.
pub(super) fn comparison_segments(cmp: &Comparison) -> (Vec<Segment>, Vec<Segment>) {
    let mut pred = Vec::new();
    let mut meas = Vec::new();
    let (mut op, mut om) = (0.0, 0.0);
    let mut grouped = Vec::new();
    for (i, r) in cmp.rows.iter().enumerate() {
        let small = r.predicted_us < SMALL_SHARE * cmp.predicted_step_us
            && r.measured_us < SMALL_SHARE * cmp.measured_step_us;
        if small {
            op += r.predicted_us;
            om += r.measured_us;
            if r.predicted_us > 0.0 || r.measured_us > 0.0 {
                grouped.push(r.category.name());
            }
        } else {
            pred.push((r.category.name().to_string(), COLORS[i], r.predicted_us));
            meas.push((r.category.name().to_string(), COLORS[i], r.measured_us));
        }
    }
    if op > 0.0 || om > 0.0 {
        let label = format!("other ({})", grouped.join(", "));
        pred.push((label.clone(), OTHER, op));
        meas.push((label, OTHER, om));
    }
    (pred, meas)
}

impl Chart for ComparisonChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let cmp = self.cmp;
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        root.fill(&WHITE).map_err(e)?;
        let ymax = cmp.predicted_step_us.max(cmp.measured_step_us).max(1e-9) * 1.08;
        let err = match cmp.step_error_pct() {
            Some(p) => format!("step-time error {p:+.1}%"),
            None => "no measured step".into(),
        };
        let caption = format!("{} ({err})", self.title);
        let mut chart = ChartBuilder::on(root)
            .caption(
                caption,
                ("sans-serif", if self.title.len() > 50 { 17 } else { 20 }),
            )
            .margin(16)
            .x_label_area_size(46)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..4.2f64, 0f64..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("µs per step")
            .y_label_formatter(&|v| int(*v))
            .label_style(("sans-serif", 14))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(e)?;
        let (pred, meas) = comparison_segments(cmp);
        let bars = [
            (0.25, "predicted", cmp.predicted_step_us, &pred),
            (1.45, "measured", cmp.measured_step_us, &meas),
        ];
        let px_per_us = {
            let (_, y0) = chart.backend_coord(&(0.0, 0.0));
            let (_, y1) = chart.backend_coord(&(0.0, ymax));
            (y0 - y1) as f64 / ymax
        };
        for &(x0, _, total, segs) in &bars {
            stacked_bar(&mut chart, x0, total, segs, px_per_us)?;
        }
        legend_values(root, &chart, ymax, &pred, &meas)?;
        // Bar names under the axis, placed in pixels so they sit in the label area.
        for &(x0, label, total, _) in &bars {
            let (px, py) = chart.backend_coord(&(x0 + 0.475, 0.0));
            root.draw(&Text::new(
                format!("{label}: {} µs", int(total)),
                (px, py + 10),
                font(15).pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(e)?;
        }
        Ok(())
    }
}

/// The chart's coordinates: bar positions across, µs up.
type Bars<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One bar's segments stacked from the axis at `x0`, each labelled with its µs and share of
/// `total` where it is tall enough to hold a line of text.
fn stacked_bar<DB: DrawingBackend>(
    chart: &mut Bars<'_, DB>,
    x0: f64,
    total: f64,
    segs: &[Segment],
    px_per_us: f64,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let mut below = 0.0;
    for (name, color, us) in segs.iter() {
        if *us <= 0.0 {
            continue;
        }
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, below), (x0 + 0.95, below + us)],
                color.filled(),
            )))
            .map_err(e)?;
        // A value label where the segment is tall enough to hold one line of text.
        if us * px_per_us >= 15.0 {
            let share = if total > 0.0 { us / total } else { 0.0 };
            let label = format!(
                "{} {} µs ({:.0}%)",
                name.split(' ').next().unwrap_or(name),
                int(*us),
                share * 100.0
            );
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (x0 + 0.475, below + us / 2.0),
                    font(13)
                        .color(&text_color(*color))
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                )))
                .map_err(e)?;
        }
        below += us;
    }
    Ok(())
}

/// Legend with the values of every segment, predicted / measured, in stacking order (top
/// first): the small ones carry no label inside their bars.
fn legend_values<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Bars<'_, DB>,
    ymax: f64,
    pred: &[Segment],
    meas: &[Segment],
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let (lx, ly) = chart.backend_coord(&(2.55, ymax));
    let member_lines: i32 = pred
        .iter()
        .filter_map(|(n, _, _)| n.split_once(" (").map(|(_, r)| r))
        .map(|r| crate::report::table::wrap_text(r, 38).len() as i32 * 16 + 4)
        .sum();
    let (rx, _) = chart.backend_coord(&(4.2, ymax));
    root.draw(&Rectangle::new(
        [
            (lx - 6, ly),
            (rx - 2, ly + 32 + pred.len() as i32 * 22 + member_lines),
        ],
        WHITE.filled(),
    ))
    .map_err(e)?;
    root.draw(&Text::new(
        "µs per step: predicted / measured".to_string(),
        (lx, ly + 4),
        font(13).pos(Pos::new(HPos::Left, VPos::Top)),
    ))
    .map_err(e)?;
    let mut y = ly + 28;
    for ((name, color, p), (_, _, m)) in pred.iter().zip(meas.iter()).rev() {
        root.draw(&Rectangle::new(
            [(lx, y), (lx + 14, y + 14)],
            color.filled(),
        ))
        .map_err(e)?;
        let (head, members) = match name.split_once(" (") {
            Some((h, rest)) => (h, Some(rest.trim_end_matches(')'))),
            None => (name.as_str(), None),
        };
        root.draw(&Text::new(
            format!("{head}: {} / {}", int(*p), int(*m)),
            (lx + 20, y + 7),
            font(14).pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(e)?;
        y += 22;
        if let Some(list) = members {
            for line in crate::report::table::wrap_text(list, 38) {
                root.draw(&Text::new(
                    line,
                    (lx + 20, y + 4),
                    font(12).pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(e)?;
                y += 16;
            }
            y += 4;
        }
    }
    Ok(())
}

//! Tokens/s per GPU against TPOT: one line per deployment layout (its concurrency curve), and
//! the Pareto front across all of them, the points no other layout beats on both axes.

use super::backend::{render, Chart};
use super::curves::dashes;
use super::style::{int, legend, stroke, XyChart, HEIGHT, SERIES, WIDTH};
use super::PlotError;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One layout's curve: (TPOT ms, tokens/s per GPU) at each concurrency, in concurrency order.
#[derive(Debug, Clone, PartialEq)]
pub struct ParetoSeries {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

pub struct ParetoChart<'a> {
    pub title: &'a str,
    pub series: &'a [ParetoSeries],
    /// A vertical TPOT limit (ms), drawn dashed.
    pub tpot_limit_ms: Option<f64>,
}

/// The points of `series` that no other point dominates (no other point has a TPOT at most as
/// high and tokens/s per GPU at least as high, one of them strictly), by rising TPOT, each with
/// the index of its series.
pub fn pareto_front(series: &[ParetoSeries]) -> Vec<(usize, (f64, f64))> {
    let mut all: Vec<(usize, (f64, f64))> = series
        .iter()
        .enumerate()
        .flat_map(|(k, s)| s.points.iter().map(move |&p| (k, p)))
        .filter(|(_, (x, y))| x.is_finite() && y.is_finite())
        .collect();
    // By rising TPOT, then falling throughput: a point is on the front when it beats the best
    // throughput seen at any lower TPOT.
    all.sort_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then(b.1 .1.total_cmp(&a.1 .1)));
    let mut front: Vec<(usize, (f64, f64))> = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for p in all {
        if p.1 .1 > best {
            best = p.1 .1;
            front.push(p);
        }
    }
    front
}

/// Draws the chart to `path` (SVG or PNG by extension).
pub fn plot_pareto(chart: &ParetoChart, path: &Path) -> Result<(), PlotError> {
    if chart.series.iter().all(|s| s.points.is_empty()) {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
            message: "no layout has a curve point (none fits in memory)".into(),
        });
    }
    render(chart, path, (WIDTH, HEIGHT))
}

impl Chart for ParetoChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        root.fill(&WHITE).map_err(e)?;
        // With a TPOT limit the chart shows up to 2.5 times it: a layout whose curve runs on to
        // seconds per token would otherwise squeeze every curve into the left edge.
        let all_x = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0))
        };
        let xmax = match self.tpot_limit_ms {
            Some(l) => all_x().fold(l, f64::max).min(2.5 * l),
            None => all_x().fold(1e-9f64, f64::max),
        } * 1.08;
        let series: Vec<ParetoSeries> = self
            .series
            .iter()
            .map(|s| ParetoSeries {
                label: s.label.clone(),
                points: s.points.iter().copied().filter(|p| p.0 <= xmax).collect(),
            })
            .collect();
        let ymax = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(1e-9f64, f64::max)
            * 1.12;
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
            .x_desc("TPOT (ms per output token)")
            .y_desc("output tokens/s per GPU")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| int(*v))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(e)?;
        for (k, s) in series.iter().enumerate() {
            let color = SERIES[k % SERIES.len()];
            chart
                .draw_series(std::iter::once(PathElement::new(
                    s.points.clone(),
                    stroke(color, 2),
                )))
                .map_err(e)?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], stroke(color, 2))
                });
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
        }
        front_and_limit(&mut chart, &series, self.tpot_limit_ms, ymax)?;
        // Lower right: curves rise steeply from the lower left (low TPOT, low throughput per
        // GPU) and flatten high up as TPOT grows, so that corner is the emptiest.
        legend(&mut chart, SeriesLabelPosition::LowerRight, 13).map_err(e)?;
        Ok(())
    }
}

/// The Pareto front over every series, and the TPOT limit as a vertical dashed line.
fn front_and_limit<'a, DB: DrawingBackend + 'a>(
    chart: &mut XyChart<'a, DB>,
    series: &[ParetoSeries],
    tpot_limit_ms: Option<f64>,
    ymax: f64,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let front: Vec<(f64, f64)> = pareto_front(series).into_iter().map(|(_, p)| p).collect();
    chart
        .draw_series(std::iter::once(PathElement::new(
            front.clone(),
            ShapeStyle {
                color: BLACK.mix(0.55),
                filled: false,
                stroke_width: 1,
            },
        )))
        .map_err(e)?
        .label("Pareto front")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], BLACK.mix(0.55)));
    chart
        .draw_series(front.iter().map(|&p| Circle::new(p, 6, stroke(BLACK, 1))))
        .map_err(e)?;
    if let Some(limit) = tpot_limit_ms {
        let red = RGBColor(200, 0, 0);
        // The limit is a TPOT, so the dashes run vertically: the dashes of a horizontal line
        // at `limit` with the axes swapped.
        chart
            .draw_series(
                dashes(ymax, limit)
                    .map(|seg| seg.into_iter().map(|(y, x)| (x, y)).collect::<Vec<_>>())
                    .map(|seg| PathElement::new(seg, stroke(red, 1))),
            )
            .map_err(e)?
            .label(format!("TPOT limit {limit} ms"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], red));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(label: &str, points: &[(f64, f64)]) -> ParetoSeries {
        ParetoSeries {
            label: label.into(),
            points: points.to_vec(),
        }
    }

    #[test]
    fn the_front_keeps_only_undominated_points() {
        let series = [
            s("a", &[(10.0, 50.0), (20.0, 80.0), (40.0, 90.0)]),
            s("b", &[(12.0, 70.0), (30.0, 120.0), (60.0, 110.0)]),
        ];
        let front = pareto_front(&series);
        let pts: Vec<(usize, (f64, f64))> = front;
        // (20, 80) is beaten by none at lower TPOT with more throughput? (12, 70) has less, so
        // it stays; (40, 90) is beaten by (30, 120); (60, 110) by (30, 120).
        assert_eq!(
            pts,
            vec![
                (0, (10.0, 50.0)),
                (1, (12.0, 70.0)),
                (0, (20.0, 80.0)),
                (1, (30.0, 120.0))
            ]
        );
    }

    #[test]
    fn equal_tpot_keeps_the_higher_throughput_only() {
        let series = [s("a", &[(10.0, 50.0)]), s("b", &[(10.0, 60.0)])];
        assert_eq!(pareto_front(&series), vec![(1, (10.0, 60.0))]);
    }
}

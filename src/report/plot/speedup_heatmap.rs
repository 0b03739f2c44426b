//! The speedup heat map: draft length × batch per acceptance panel, coloured around 1.0.

use super::backend::Chart;
use super::speedup::{speedup_text, titled_panels, SpeedupHeat};
use super::style::{font, stroke, text_color, XyChart};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
/// Diverging colour around 1.0 on a log scale: red below, white at 1.0, blue above; `span` is
/// the |log2 speedup| that gets the full colour.
pub(super) fn diverging(v: f64, span: f64) -> RGBColor {
    let t = (v.log2() / span).clamp(-1.0, 1.0);
    let (end, t) = if t < 0.0 {
        ((202.0, 0.0, 32.0), -t)
    } else {
        ((5.0, 113.0, 176.0), t)
    };
    let mix = |a: f64| (255.0 + (a - 255.0) * t).round() as u8;
    RGBColor(mix(end.0), mix(end.1), mix(end.2))
}

impl Chart for SpeedupHeat<'_, '_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let c = self.0;
        let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
        let areas = titled_panels(root, c)?;
        let span = c
            .panels
            .iter()
            .flat_map(|p| p.speedup.iter().flatten())
            .fold(0.05f64, |m, v| m.max(v.log2().abs()));
        let (nb, nk) = (c.batches.len() as f64, c.draft_tokens.len() as f64);
        for (area, panel) in areas.iter().zip(c.panels) {
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!("{}   {}", panel.label, panel.note),
                    ("sans-serif", 14),
                )
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..nb, 0f64..nk)
                .map_err(e)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_labels(0)
                .y_labels(0)
                .draw()
                .map_err(e)?;
            for (ki, row) in panel.speedup.iter().enumerate() {
                // k = first at the top.
                let y0 = nk - ki as f64 - 1.0;
                for (bi, &v) in row.iter().enumerate() {
                    let fill = diverging(v, span);
                    let x0 = bi as f64;
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(x0, y0), (x0 + 1.0, y0 + 1.0)],
                            fill.filled(),
                        )))
                        .map_err(e)?;
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(x0, y0), (x0 + 1.0, y0 + 1.0)],
                            stroke(WHITE, 1),
                        )))
                        .map_err(e)?;
                    chart
                        .draw_series(std::iter::once(Text::new(
                            speedup_text(v),
                            (x0 + 0.5, y0 + 0.5),
                            font(12)
                                .color(&text_color(fill))
                                .pos(Pos::new(HPos::Center, VPos::Center)),
                        )))
                        .map_err(e)?;
                }
            }
            axis_labels(root, &chart, c.batches, c.draft_tokens)?;
        }
        Ok(())
    }
}

/// A panel's batch labels and axis title below it, and the k labels left of its rows.
fn axis_labels<'a, DB: DrawingBackend + 'a>(
    root: &DrawingArea<DB, Shift>,
    chart: &XyChart<'a, DB>,
    batches: &[u32],
    draft_tokens: &[u32],
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let (nb, nk) = (batches.len() as f64, draft_tokens.len() as f64);
    for (bi, b) in batches.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(bi as f64 + 0.5, 0.0));
        root.draw(&Text::new(
            b.to_string(),
            (px, py + 6),
            font(13).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(e)?;
    }
    let (x0, py) = chart.backend_coord(&(0.0, 0.0));
    let (x1, _) = chart.backend_coord(&(nb, 0.0));
    root.draw(&Text::new(
        "batch (sequences per step)".to_string(),
        ((x0 + x1) / 2, py + 24),
        font(13).pos(Pos::new(HPos::Center, VPos::Top)),
    ))
    .map_err(e)?;
    for (ki, k) in draft_tokens.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(0.0, nk - ki as f64 - 0.5));
        root.draw(&Text::new(
            format!("k = {k}"),
            (px - 6, py),
            font(13).pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(e)?;
    }
    Ok(())
}

//! What every chart shares: the canvas size, one colour per category, series colours, the
//! "small share" threshold, strokes, fonts, label tags and number text.

use crate::category::Category;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(super) const WIDTH: u32 = 900;
pub(super) const HEIGHT: u32 = 600;

/// One colour per category, in [`Category::ALL`] order (idle is grey).
pub(super) const COLORS: [RGBColor; Category::COUNT] = [
    RGBColor(31, 119, 180),  // moe
    RGBColor(255, 127, 14),  // gemm
    RGBColor(44, 160, 44),   // attention
    RGBColor(148, 103, 189), // norm
    RGBColor(140, 86, 75),   // elementwise
    RGBColor(227, 119, 194), // router
    RGBColor(188, 189, 34),  // sampling
    RGBColor(214, 39, 40),   // communication
    RGBColor(23, 190, 207),  // memcpy
    RGBColor(199, 199, 199), // idle
];
/// The "other" group of small categories.
pub(super) const OTHER: RGBColor = RGBColor(120, 120, 120);
/// Series colours of line charts (systems or variants).
pub(super) const SERIES: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];
/// A category below this share of both bars (or every batch) joins "other".
pub(super) const SMALL_SHARE: f64 = 0.03;

pub(super) fn stroke(c: RGBColor, width: u32) -> ShapeStyle {
    ShapeStyle {
        color: c.to_rgba(),
        filled: false,
        stroke_width: width,
    }
}

/// A chart on two f64 axes, as the line charts draw them.
pub(super) type XyChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The legend every chart draws: a light box with grey border, labels at `size` points.
pub(super) fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
    size: u32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(150, 150, 150))
        .label_font(("sans-serif", size))
        .draw()
}

pub(super) fn font(size: u32) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&BLACK)
}

pub(super) fn text_color(fill: RGBColor) -> RGBColor {
    // Dark text on light fills, white on dark ones (perceived luminance).
    let l = 0.299 * fill.0 as f64 + 0.587 * fill.1 as f64 + 0.114 * fill.2 as f64;
    if l > 150.0 {
        BLACK
    } else {
        WHITE
    }
}

/// A small label on a white box at pixel `at` + `offset`, anchored at `pos`, so lines behind it
/// do not cross the letters.
pub(super) fn tag<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    offset: (i32, i32),
    text: &str,
    color: RGBColor,
    pos: Pos,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let style = font(12).color(&color).pos(pos);
    let (w, h) = root.estimate_text_size(text, &style).map_err(e)?;
    let (w, h) = (w as i32, h as i32);
    let (x, y) = (at.0 + offset.0, at.1 + offset.1);
    let x0 = match pos.h_pos {
        HPos::Left => x,
        HPos::Center => x - w / 2,
        HPos::Right => x - w,
    };
    let y0 = match pos.v_pos {
        VPos::Top => y,
        VPos::Center => y - h / 2,
        VPos::Bottom => y - h,
    };
    root.draw(&Rectangle::new(
        [(x0 - 2, y0 - 1), (x0 + w + 2, y0 + h + 1)],
        WHITE.mix(0.85).filled(),
    ))
    .map_err(e)?;
    root.draw(&Text::new(text.to_string(), (x, y), style))
        .map_err(e)
}

/// Thousands separators, no decimals.
pub(super) fn int(v: f64) -> String {
    crate::units::grouped(v, 0)
}

//! Charts as SVG or PNG (chosen by the file extension): predicted-vs-measured bars, throughput
//! and TPOT against concurrency, memory per GPU by component, and the category breakdown across
//! batch sizes. Files are written atomically ([`crate::files::write_atomic_bytes`]: temporary
//! name, then rename; folders created).
//!
//! Text: SVG carries `<text>` elements the viewer lays out. PNG text is rasterised here with
//! ab_glyph and the embedded DejaVu Sans ([`GlyphBackend`]), because plotters' own bitmap text
//! drops each glyph's left bearing (it places the glyph's bitmap at the pen position), which
//! spaces letters unevenly; no system font library is needed either way.

use crate::accounting::compare::Comparison;
use crate::category::Category;
use ab_glyph::{Font, FontRef, ScaleFont};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};
use std::path::Path;
use std::sync::OnceLock;

pub use crate::error::plot::PlotError;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 600;

/// One colour per category, in [`Category::ALL`] order (idle is grey).
const COLORS: [RGBColor; Category::COUNT] = [
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
const OTHER: RGBColor = RGBColor(120, 120, 120);
/// Series colours of line charts (systems or variants).
const SERIES: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];
/// A category below this share of both bars (or every batch) joins "other".
const SMALL_SHARE: f64 = 0.03;

fn register_font() -> Result<(), PlotError> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "DejaVu Sans".to_string())
    })
    .clone()
    .map_err(PlotError::Font)
}

/// A bitmap backend whose text is laid out with ab_glyph, bearings and kerning included.
pub struct GlyphBackend<'a> {
    inner: BitMapBackend<'a>,
    font: FontRef<'static>,
}

impl<'a> GlyphBackend<'a> {
    fn new(path: &'a Path, size: (u32, u32)) -> Result<Self, PlotError> {
        let font = FontRef::try_from_slice(dejavu::sans::regular())
            .map_err(|e| PlotError::Font(e.to_string()))?;
        Ok(GlyphBackend {
            inner: BitMapBackend::new(path, size),
            font,
        })
    }

    /// Width and height of `text` at `px` pixels, and the glyph outlines to draw, positioned
    /// with the pen at x = 0 and the ascent at y = 0.
    fn layout(&self, text: &str, px: f32) -> (f32, f32, Vec<ab_glyph::OutlinedGlyph>) {
        let font = self.font.as_scaled(px);
        let mut caret = 0.0f32;
        let mut prev: Option<ab_glyph::GlyphId> = None;
        let mut glyphs = Vec::new();
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                caret += font.kern(p, id);
            }
            let g = id.with_scale_and_position(px, ab_glyph::point(caret, font.ascent()));
            if let Some(o) = self.font.outline_glyph(g) {
                glyphs.push(o);
            }
            caret += font.h_advance(id);
            prev = Some(id);
        }
        (caret, font.ascent() - font.descent(), glyphs)
    }
}

impl DrawingBackend for GlyphBackend<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.present()
    }
    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let (w, h, glyphs) = self.layout(text, style.size() as f32);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Right => -w,
            HPos::Center => -w / 2.0,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0.0,
            VPos::Center => -h / 2.0,
            VPos::Bottom => -h,
        };
        let trans = style.transform();
        for g in glyphs {
            let b = g.px_bounds();
            let mut pixels = Vec::new();
            g.draw(|x, y, cov| pixels.push((x, y, cov)));
            for (x, y, cov) in pixels {
                if cov <= 0.0 {
                    continue;
                }
                let gx = (b.min.x + x as f32 + dx).round() as i32;
                let gy = (b.min.y + y as f32 + dy).round() as i32;
                let (tx, ty) = trans.transform(gx, gy);
                self.inner.draw_pixel(
                    (pos.0 + tx, pos.1 + ty),
                    BackendColor {
                        alpha: color.alpha * cov.min(1.0) as f64,
                        rgb: color.rgb,
                    },
                )?;
            }
        }
        Ok(())
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let (w, h, _) = self.layout(text, style.size() as f32);
        Ok((w.ceil() as u32, h.ceil() as u32))
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.blit_bitmap(pos, size, src)
    }
}

/// Something drawable on any backend.
trait Chart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Draws `chart` to `path` (.svg or .png) at `size` pixels.
fn render<C: Chart>(chart: &C, path: &Path, size: (u32, u32)) -> Result<(), PlotError> {
    render_with(chart, path, size, false)
}

/// Re-encodes an RGB(A) PNG with a palette of at most 256 colours (NeuQuant): charts are flat
/// colours and their anti-aliased edges, so they look the same at about a third of the bytes.
fn palette_png(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => return Err(format!("unexpected PNG colour type {other:?}")),
    };
    let rgba: Vec<u8> = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .flat_map(|p| [p[0], p[1], p[2], 255])
        .collect();
    let nq = color_quant::NeuQuant::new(10, 256, &rgba);
    let indices: Vec<u8> = rgba.chunks_exact(4).map(|p| nq.index_of(p) as u8).collect();
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, info.width, info.height);
        enc.set_color(png::ColorType::Indexed);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_palette(nq.color_map_rgb());
        enc.set_compression(png::Compression::Best);
        let mut w = enc.write_header().map_err(|e| e.to_string())?;
        w.write_image_data(&indices).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// [`render`], with PNGs re-encoded to a palette when `palette` is set.
fn render_with<C: Chart>(
    chart: &C,
    path: &Path,
    size: (u32, u32),
    palette: bool,
) -> Result<(), PlotError> {
    register_font()?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let draw_err = |e: String| PlotError::Draw {
        path: path.to_path_buf(),
        message: e,
    };
    let write_err = |e: crate::error::Error| PlotError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    match ext.as_deref() {
        Some("svg") => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                chart.draw(&root).map_err(draw_err)?;
                root.present().map_err(|e| draw_err(e.to_string()))?;
            }
            crate::files::write_atomic_bytes(path, svg.as_bytes()).map_err(write_err)
        }
        Some("png") => {
            // The PNG encoder writes to a path: draw to a private temporary file, then move its
            // bytes into place atomically.
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let tmp = std::env::temp_dir().join(format!(
                "decodesim-plot-{}-{}.png",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            let drawn = (|| {
                let root = GlyphBackend::new(&tmp, size)?.into_drawing_area();
                chart.draw(&root).map_err(draw_err)?;
                root.present().map_err(|e| draw_err(e.to_string()))
            })();
            let bytes = drawn.and_then(|()| {
                std::fs::read(&tmp).map_err(|e| PlotError::Write {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })
            });
            let _ = std::fs::remove_file(&tmp);
            let bytes = match (bytes, palette) {
                (Ok(b), true) => palette_png(&b).map_err(draw_err),
                (b, _) => b,
            };
            crate::files::write_atomic_bytes(path, &bytes?).map_err(write_err)
        }
        _ => Err(PlotError::Format {
            path: path.to_path_buf(),
        }),
    }
}

fn stroke(c: RGBColor, width: u32) -> ShapeStyle {
    ShapeStyle {
        color: c.to_rgba(),
        filled: false,
        stroke_width: width,
    }
}

fn font(size: u32) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&BLACK)
}

fn text_color(fill: RGBColor) -> RGBColor {
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
fn tag<DB: DrawingBackend>(
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
fn int(v: f64) -> String {
    crate::units::grouped(v, 0)
}

// ---------------------------------------------------------------------------------------------
// Predicted vs measured.

/// Draws `cmp` to `path` (.svg or .png). `title` goes on top, with the step-time error.
pub fn plot_comparison(cmp: &Comparison, path: &Path, title: &str) -> Result<(), PlotError> {
    render(&ComparisonChart { cmp, title }, path, (WIDTH, HEIGHT))
}

struct ComparisonChart<'a> {
    cmp: &'a Comparison,
    title: &'a str,
}

/// A stacked segment: label, colour, µs.
type Segment = (String, RGBColor, f64);

/// The segments of both bars: categories below [`SMALL_SHARE`] of both steps are grouped into
/// "other", so no segment is a sliver.
fn comparison_segments(cmp: &Comparison) -> (Vec<Segment>, Vec<Segment>) {
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
        }
        // Legend with the values of every segment, predicted / measured, in stacking order
        // (top first): the small ones carry no label inside their bars.
        let (lx, ly) = chart.backend_coord(&(2.55, ymax));
        let member_lines: i32 = pred
            .iter()
            .filter_map(|(n, _, _)| n.split_once(" (").map(|(_, r)| r))
            .map(|r| super::table::wrap_text(r, 38).len() as i32 * 16 + 4)
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
                for line in super::table::wrap_text(list, 38) {
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

// ---------------------------------------------------------------------------------------------
// Throughput and TPOT against concurrency.

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
fn series_label(s: &CurveSeries) -> String {
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
        }
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
        chart
            .configure_series_labels()
            // Lower right: throughput curves rise and TPOT curves of large systems stay low
            // there, so the legend covers no data in either chart.
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(150, 150, 150))
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(e)?;
        Ok(())
    }
}

/// A dashed horizontal line at `y` from 0 to `xmax`, as 60 dashes.
fn dashes(xmax: f64, y: f64) -> impl Iterator<Item = Vec<(f64, f64)>> {
    let step = xmax / 60.0;
    (0..60).map(move |i| vec![(i as f64 * step, y), ((i as f64 + 0.6) * step, y)])
}

// ---------------------------------------------------------------------------------------------
// Memory per GPU by component.

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

fn gib_text(b: f64) -> String {
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
        for (i, name) in names.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(0.0, n - i as f64 - 0.5));
            root.draw(&Text::new(
                name.replace('_', " "),
                (px - 8, py),
                font(14).pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(e)?;
        }
        if self.series.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.9))
                .border_style(RGBColor(150, 150, 150))
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(e)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Category breakdown across batch sizes.

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
        let keep: Vec<bool> = (0..Category::COUNT)
            .map(|c| {
                self.times_us
                    .iter()
                    .zip(&totals)
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
                tag(
                    root,
                    (px, (py0 + py1) / 2),
                    (-8, 0),
                    &format!(
                        "{} {:.0}%",
                        name.split(' ').next().unwrap_or(name),
                        (hi - lo) / last * 100.0
                    ),
                    BLACK,
                    Pos::new(HPos::Right, VPos::Center),
                )?;
            }
        }
        // Step time above each batch.
        for (i, t) in totals.iter().enumerate() {
            let px = chart.backend_coord(&(i as f64, t / 1e3));
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
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(150, 150, 150))
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(e)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Speculative decoding: speedup over no speculation against batch.

/// One acceptance's speedups: `speedup[k index][batch index]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedupPanel {
    /// What the panel shows (an acceptance), and a short note (best k, crossover).
    pub label: String,
    pub note: String,
    pub speedup: Vec<Vec<f64>>,
}

/// Pixels above the panels: title and two subtitle lines.
const HEADER: u32 = 80;

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

struct SpeedupLines<'a, 'b>(&'a SpeedupChart<'b>);
struct SpeedupHeat<'a, 'b>(&'a SpeedupChart<'b>);

/// Title and subtitle on top; the panel areas below, row-major.
fn titled_panels<DB: DrawingBackend>(
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

fn speedup_text(v: f64) -> String {
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
            // Batch labels at their own (log2) positions, skipping any that would touch the
            // previous one; the axis title in pixels under them.
            let mut last_px: Option<i32> = None;
            for &b in c.batches {
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
            let (x0, py) = chart.backend_coord(&(xlo - xpad, ylo));
            let (x1, _) = chart.backend_coord(&(xhi + xpad, ylo));
            root.draw(&Text::new(
                "batch (sequences per step; log2 axis)".to_string(),
                ((x0 + x1) / 2, py + 26),
                font(13).pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(e)?;
            // Break-even, named in the legend (a label on the line would cross the curves).
            let grey = RGBColor(90, 90, 90);
            let span = xhi - xlo + 2.0 * xpad;
            chart
                .draw_series((0..60).map(|i| {
                    let a = xlo - xpad + span * i as f64 / 60.0;
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
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.9))
                .border_style(RGBColor(150, 150, 150))
                .label_font(("sans-serif", if many { 12 } else { 14 }))
                .draw()
                .map_err(e)?;
        }
        Ok(())
    }
}

/// Diverging colour around 1.0 on a log scale: red below, white at 1.0, blue above; `span` is
/// the |log2 speedup| that gets the full colour.
fn diverging(v: f64, span: f64) -> RGBColor {
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
            for (bi, b) in c.batches.iter().enumerate() {
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
            for (ki, k) in c.draft_tokens.iter().enumerate() {
                let (px, py) = chart.backend_coord(&(0.0, nk - ki as f64 - 0.5));
                root.draw(&Text::new(
                    format!("k = {k}"),
                    (px - 6, py),
                    font(13).pos(Pos::new(HPos::Right, VPos::Center)),
                ))
                .map_err(e)?;
            }
        }
        Ok(())
    }
}

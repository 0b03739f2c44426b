//! Rendering: the [`Chart`] trait every chart implements, the file format chosen by the
//! extension (SVG, or PNG re-encoded with a palette), the atomic write, and [`GlyphBackend`],
//! the bitmap backend whose text ab_glyph lays out with the embedded DejaVu Sans.

use super::PlotError;
use ab_glyph::{Font, FontRef, ScaleFont};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};
use std::path::Path;
use std::sync::OnceLock;

pub(super) fn register_font() -> Result<(), PlotError> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "DejaVu Sans".to_string())
    })
    .clone()
    .map_err(PlotError::Font)
}

/// A bitmap backend whose text is laid out with ab_glyph, bearings and kerning included.
struct GlyphBackend<'a> {
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
pub(super) trait Chart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Draws `chart` to `path` (.svg or .png) at `size` pixels.
pub(super) fn render<C: Chart>(chart: &C, path: &Path, size: (u32, u32)) -> Result<(), PlotError> {
    render_with(chart, path, size, false)
}

/// Re-encodes an RGB(A) PNG with a palette of at most 256 colours (NeuQuant): charts are flat
/// colours and their anti-aliased edges, so they look the same at about a third of the bytes.
pub(super) fn palette_png(bytes: &[u8]) -> Result<Vec<u8>, String> {
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
pub(super) fn render_with<C: Chart>(
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

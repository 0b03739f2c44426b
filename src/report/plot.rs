//! Stacked bars of a step's time by category, predicted beside measured, as SVG or PNG
//! (chosen by the file extension). Text is drawn with an embedded DejaVu Sans font, so no
//! system font library is needed. The file is written atomically
//! ([`crate::files::write_atomic_bytes`]: temporary name, then rename; folders created).

use crate::accounting::compare::Comparison;
use crate::category::Category;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: unsupported plot format; expected a file name ending in .svg or .png")]
    Format { path: PathBuf },
    #[error("{path}: cannot draw the plot: {message}")]
    Draw { path: PathBuf, message: String },
    #[error("the embedded font could not be loaded: {0}")]
    Font(String),
    #[error("{path}: cannot write the plot: {message}")]
    Write { path: PathBuf, message: String },
}

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

fn register_font() -> Result<(), PlotError> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "DejaVu Sans".to_string())
    })
    .clone()
    .map_err(PlotError::Font)
}

/// Draws `cmp` to `path` (.svg or .png). `title` goes on top, with the step-time error.
pub fn plot_comparison(cmp: &Comparison, path: &Path, title: &str) -> Result<(), PlotError> {
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
                let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
                draw(&root, cmp, title).map_err(draw_err)?;
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
                let root = BitMapBackend::new(&tmp, (WIDTH, HEIGHT)).into_drawing_area();
                draw(&root, cmp, title).map_err(draw_err)?;
                root.present().map_err(|e| draw_err(e.to_string()))
            })();
            let bytes = drawn.and_then(|()| {
                std::fs::read(&tmp).map_err(|e| PlotError::Write {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })
            });
            let _ = std::fs::remove_file(&tmp);
            crate::files::write_atomic_bytes(path, &bytes?).map_err(write_err)
        }
        _ => Err(PlotError::Format {
            path: path.to_path_buf(),
        }),
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    cmp: &Comparison,
    title: &str,
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let ymax = cmp.predicted_step_us.max(cmp.measured_step_us).max(1e-9) * 1.08;
    let err = match cmp.step_error_pct() {
        Some(p) => format!("step-time error {p:+.1}%"),
        None => "no measured step".into(),
    };
    let caption = format!("{title} ({err})");
    let mut chart = ChartBuilder::on(root)
        .caption(
            caption,
            ("sans-serif", if title.len() > 50 { 17 } else { 21 }),
        )
        .margin(16)
        .x_label_area_size(46)
        .y_label_area_size(85)
        .build_cartesian_2d(0f64..3.6f64, 0f64..ymax)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("µs per step")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    let bars = [
        (0.3, "predicted", cmp.predicted_step_us, true),
        (1.5, "measured", cmp.measured_step_us, false),
    ];
    for (ci, c) in Category::ALL.iter().enumerate() {
        let mut rects = Vec::new();
        for &(x0, _, _, predicted) in &bars {
            let below: f64 = cmp.rows[..ci]
                .iter()
                .map(|r| {
                    if predicted {
                        r.predicted_us
                    } else {
                        r.measured_us
                    }
                })
                .sum();
            let h = if predicted {
                cmp.rows[ci].predicted_us
            } else {
                cmp.rows[ci].measured_us
            };
            if h > 0.0 {
                rects.push(Rectangle::new(
                    [(x0, below), (x0 + 0.9, below + h)],
                    COLORS[ci].filled(),
                ));
            }
        }
        let color = COLORS[ci];
        chart
            .draw_series(rects)
            .map_err(e)?
            .label(c.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled()));
    }
    // Bar names under the axis, placed in pixels so they sit in the label area.
    for &(x0, label, total, _) in &bars {
        let (px, py) = chart.backend_coord(&(x0 + 0.45, 0.0));
        let style = ("sans-serif", 16)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(
            format!("{label}: {total:.0} µs"),
            (px, py + 10),
            style,
        ))
        .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    Ok(())
}

//! Charts as SVG or PNG (chosen by the file extension): predicted-vs-measured bars, throughput
//! and TPOT against concurrency, memory per GPU by component, and the category breakdown across
//! batch sizes. Files are written atomically ([`crate::files::write_atomic_bytes`]: temporary
//! name, then rename; folders created).
//!
//! Text: SVG carries `<text>` elements the viewer lays out. PNG text is rasterised here with
//! ab_glyph and the embedded DejaVu Sans ([`GlyphBackend`]), because plotters' own bitmap text
//! drops each glyph's left bearing (it places the glyph's bitmap at the pen position), which
//! spaces letters unevenly; no system font library is needed either way.
//!
//! One file per chart ([`comparison`], [`curves`], [`memory`], [`breakdown`], [`pareto`], [`speedup`],
//! [`speedup_heatmap`]); what they share is in [`style`] (sizes, colours, fonts, labels) and
//! [`backend`] (the `Chart` trait, format by extension, PNG text, atomic write).

mod backend;
mod breakdown;
mod comparison;
mod curves;
mod memory;
mod pareto;
mod speedup;
mod speedup_heatmap;
mod style;

pub use crate::error::plot::PlotError;
pub use breakdown::{plot_breakdown, BreakdownChart};
pub use comparison::plot_comparison;
pub use curves::{plot_curves, CurveChart, CurveMetric, CurveSeries, MeasuredPoint};
pub use memory::{plot_memory, MemoryChart, MemorySeries};
pub use pareto::{pareto_front, plot_pareto, ParetoChart, ParetoSeries};
pub use speedup::{plot_speedup, plot_speedup_heatmap, SpeedupChart, SpeedupPanel};

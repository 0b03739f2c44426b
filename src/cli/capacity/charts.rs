//! `capacity`'s charts: the curves' series and labels, and the memory, breakdown and Pareto
//! plots (`--plot-memory`, `--plot-breakdown`, `--plot-pareto`).

use super::{per_user_binds, CapacityArgs};
use crate::capacity::{self, Capacity, CapacityRequest};
use crate::error::Result;
use crate::report::plot::{
    self, BreakdownChart, CurveChart, CurveMetric, CurveSeries, MeasuredPoint, MemoryChart,
    MemorySeries,
};
use crate::report::units;
use std::path::{Path, PathBuf};

pub(super) fn series_of(label: String, c: &Capacity) -> CurveSeries {
    CurveSeries {
        label,
        points: c
            .curve
            .points
            .iter()
            .map(|p| (p.concurrency as f64, p.tokens_per_s, p.tpot_ms))
            .collect(),
        knee: c.curve.knee,
        plateau: c.curve.plateau,
    }
}

/// `TP=8`, `TP=8 PP=2`, `TP=1 DP=32 EP=32`: the parallel layout a chart names.
pub(super) fn layout_text(s: &crate::scenario::Scenario) -> String {
    let mut t = format!("TP={}", s.layout.tp);
    if s.layout.pp_size() > 1 {
        t += &format!(" PP={}", s.layout.pp_size());
    }
    if s.layout.dp_size() > 1 {
        t += &format!(" DP={} EP={}", s.layout.dp_size(), s.layout.ep_size());
    }
    t
}

pub(super) fn label_of(c: &Capacity) -> String {
    let s = &c.reference.scenario;
    format!(
        "{} {}{} (max {} users)",
        s.system.name,
        layout_text(s),
        if c.memory.dcp > 1 {
            format!(" DCP={}", c.memory.dcp)
        } else {
            String::new()
        },
        c.max_concurrency
    )
}

/// `--plot-memory`: memory per GPU of each system as vLLM accounts it.
pub(super) fn memory_plot(all: &[&Capacity], cap: &Capacity, model: &str, p: &Path) -> Result<()> {
    let mem: Vec<MemorySeries> = all
        .iter()
        .map(|c| MemorySeries {
            label: label_of(c),
            terms: c
                .memory
                .terms
                .iter()
                .map(|t| (t.component.to_string(), t.bytes))
                .collect(),
            total_bytes: c.memory.total_bytes,
        })
        .collect();
    let title = if all.len() == 1 {
        format!(
            "{model} on {}: memory per GPU ({} KV tokens)",
            label_of(cap),
            units::grouped(cap.memory.kv_cache_tokens as f64, 0)
        )
    } else {
        format!("{model}: memory per GPU as vLLM accounts it")
    };
    plot::plot_memory(
        &MemoryChart {
            title: &title,
            series: &mem,
        },
        p,
    )?;
    Ok(())
}

/// `--plot-pareto`: tokens/s per GPU against TPOT, one line per candidate layout (up to the
/// users that fit), and the front across them.
pub(super) fn pareto_plot(
    cap: &Capacity,
    max_tpot_ms: Option<f64>,
    model: &str,
    p: &Path,
) -> Result<()> {
    let series: Vec<plot::ParetoSeries> = cap
        .candidates
        .iter()
        .filter(|c| c.max_concurrency > 0)
        .map(|c| plot::ParetoSeries {
            label: format!(
                "{} {} (max {} users)",
                c.system,
                c.layout.label(),
                c.max_concurrency
            ),
            points: c
                .curve
                .iter()
                .filter(|pt| pt.concurrency as u64 <= c.max_concurrency)
                .map(|pt| (pt.tpot_ms, pt.tokens_per_s / c.layout.gpus().max(1) as f64))
                .collect(),
        })
        .collect();
    plot::plot_pareto(
        &plot::ParetoChart {
            title: &format!(
                "{model}: tokens/s per GPU vs TPOT by layout ({})",
                cap.demand.described
            ),
            series: &series,
            tpot_limit_ms: max_tpot_ms,
        },
        p,
    )?;
    Ok(())
}

/// `--plot-breakdown`: the decode step by category at each of `batches`.
pub(super) fn breakdown_plot(
    req: &CapacityRequest,
    cap: &Capacity,
    batches: &[u32],
    model: &str,
    p: &Path,
) -> Result<()> {
    let sims = capacity::breakdown_by_batch(&req.scenario, cap.demand.decode_context, batches)?;
    let times: Vec<[f64; crate::category::Category::COUNT]> =
        sims.iter().map(|s| s.mean.exclusive_us).collect();
    let s = &cap.reference.scenario;
    plot::plot_breakdown(
        &BreakdownChart {
            title: &format!(
                "{model} on {} {}: decode step by category (context {})",
                s.system.name,
                layout_text(s),
                cap.demand.decode_context
            ),
            batches,
            times_us: &times,
        },
        p,
    )?;
    Ok(())
}

/// Writes each plot asked for, of `cap` and the other systems' in `all` (`cap` first), with the
/// `measured` points on the curves; returns the files written.
pub(super) fn write_plots(
    a: &CapacityArgs,
    req: &CapacityRequest,
    cap: &Capacity,
    all: &[&Capacity],
    measured: &[MeasuredPoint],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let model = &cap.reference.scenario.model.name;
    let series: Vec<CurveSeries> = all.iter().map(|c| series_of(label_of(c), c)).collect();
    let demand = &cap.demand.described;
    if let Some(p) = &a.plot_throughput {
        plot::plot_curves(
            &CurveChart {
                title: &format!("{model}: throughput vs concurrency ({demand})"),
                metric: CurveMetric::TokensPerS,
                series: &series,
                measured,
                limit: None,
            },
            p,
        )?;
        written.push(p.clone());
    }
    if let Some(p) = &a.plot_tpot {
        plot::plot_curves(
            &CurveChart {
                title: &format!("{model}: TPOT vs concurrency ({demand})"),
                metric: CurveMetric::TpotMs,
                series: &series,
                measured,
                limit: a.max_tpot_ms.map(|m| (m, tpot_limit_label(a, m))),
            },
            p,
        )?;
        written.push(p.clone());
    }
    if let Some(p) = &a.plot_memory {
        memory_plot(all, cap, model, p)?;
        written.push(p.clone());
    }
    if let Some(p) = &a.plot_breakdown {
        breakdown_plot(req, cap, &a.batches, model, p)?;
        written.push(p.clone());
    }
    if let Some(p) = &a.plot_pareto {
        pareto_plot(cap, a.max_tpot_ms, model, p)?;
        written.push(p.clone());
    }
    Ok(written)
}

/// The TPOT limit line's label: the flag that set `m` ms.
fn tpot_limit_label(a: &CapacityArgs, m: f64) -> String {
    match per_user_binds(a) {
        Some(n) => format!(
            "TPOT limit {} ms (--min-tokens-per-s-per-user {n})",
            crate::units::grouped(m, 2)
        ),
        None => format!("TPOT limit {m} ms (--max-tpot-ms)"),
    }
}

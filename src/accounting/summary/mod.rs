//! Per-rank and overall summaries of traces: the steps found, step-time statistics, the
//! category breakdown of each step (by [`crate::accounting::attribute`], the same accounting as
//! the simulator), idle and launch gaps, communication wait/transfer and exposed/overlapped
//! time, and the kernels no rule classified.

mod inputs;
mod per_rank;

use super::align::{split_wait_transfer, Alignment};
use super::Breakdown;
use crate::trace::classify::Classifier;
use crate::trace::error::{Result, TraceError};
use crate::trace::model::{EventCounts, ParsedTrace};
use crate::trace::parse::{parse_file, ParseOptions};
use crate::trace::rank::{assign_ranks, check_complete, check_one_run, RankPolicy, RankSource};
use crate::trace::steps::{StepKind, StepSource, WindowSource};
use inputs::expand_inputs;
pub(crate) use per_rank::STALL_FACTOR;
use per_rank::{summarize_rank, top_n};
use regex::Regex;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;

pub struct SummaryOptions<'a> {
    pub classifier: &'a Classifier,
    /// `--step-marker`: steps are the annotations matching this instead of the known markers.
    pub step_marker: Option<&'a Regex>,
    /// How many unclassified kernel names to keep (by time).
    pub top_unclassified: usize,
    /// What is allowed of the rank files beyond one complete run.
    pub ranks: RankPolicy,
}

/// Order statistics of step times, µs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub(crate) p10: f64,
    pub(crate) p90: f64,
    mean: f64,
    min: f64,
    max: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Stats {
        if values.is_empty() {
            return Stats::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        // Linear interpolation between closest ranks (numpy's default).
        let q = |p: f64| {
            let x = p * (v.len() - 1) as f64;
            let (i, f) = (x.floor() as usize, x.fract());
            if i + 1 < v.len() {
                v[i] + f * (v[i + 1] - v[i])
            } else {
                v[i]
            }
        };
        Stats {
            n: v.len(),
            median: q(0.5),
            p10: q(0.1),
            p90: q(0.9),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            max: v[v.len() - 1],
        }
    }
}

/// Time in a step window when no GPU work ran, split by cause.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub(crate) struct GapStats {
    pub(crate) count: usize,
    pub(crate) idle_us: f64,
    /// Gaps closed by an op whose launch call started after the GPU had gone idle: the GPU was
    /// waiting for the CPU to launch (HTA's "host wait").
    pub(crate) launch_gap_us: f64,
    /// All other gaps (dependencies, synchronisation, the tail of the window).
    pub(crate) other_gap_us: f64,
    pub(crate) largest_us: f64,
}

impl GapStats {
    fn add(&mut self, o: &GapStats) {
        self.count += o.count;
        self.idle_us += o.idle_us;
        self.launch_gap_us += o.launch_gap_us;
        self.other_gap_us += o.other_gap_us;
        self.largest_us = self.largest_us.max(o.largest_us);
    }
    fn scale(&mut self, k: f64) {
        self.idle_us *= k;
        self.launch_gap_us *= k;
        self.other_gap_us *= k;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnclassifiedKernel {
    pub(crate) name: String,
    /// Summed duration in the analysed steps.
    pub(crate) time_us: f64,
    pub(crate) count: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepSummary {
    pub(crate) index: usize,
    pub(crate) name: String,
    pub kind: StepKind,
    /// Counted in the rank's statistics (decode steps when there are any, else all steps).
    pub selected: bool,
    pub start_us: f64,
    pub end_us: f64,
    pub window: WindowSource,
    pub linked_ops: usize,
    pub graph_ops: usize,
    pub breakdown: Breakdown,
    pub(crate) gaps: GapStats,
    pub(crate) collectives: usize,
    /// Idle time cut from the window as a stall (see [`STALL_FACTOR`]).
    pub stall_us: f64,
}

#[derive(Debug, Clone)]
pub struct RankSummary {
    pub rank: u32,
    pub rank_source: RankSource,
    pub(crate) path: PathBuf,
    pub(crate) device: Option<String>,
    pub(crate) world_size: Option<i64>,
    pub events: EventCounts,
    pub step_source: StepSource,
    pub(crate) marker_side: &'static str,
    pub empty_markers: usize,
    /// A correlation id two launches of the steps' windows share (`steps::StepFinding`).
    pub(crate) shared_correlation: Option<u64>,
    pub steps: Vec<StepSummary>,
    /// "decode" when decode steps were found and only they are counted, else "all".
    pub selection: &'static str,
    pub step_time: Stats,
    /// Mean over the selected steps.
    pub breakdown: Breakdown,
    /// Mean per selected step.
    pub(crate) gaps: GapStats,
    /// Summed kernel durations in the selected steps.
    pub(crate) kernel_time_us: f64,
    pub(crate) unclassified_us: f64,
    pub unclassified: Vec<UnclassifiedKernel>,
    pub(crate) warnings: Vec<String>,
}

impl RankSummary {
    pub fn selected_steps(&self) -> impl Iterator<Item = &StepSummary> {
        self.steps.iter().filter(|s| s.selected)
    }
    pub fn unclassified_share(&self) -> f64 {
        ratio(self.unclassified_us, self.kernel_time_us)
    }
}

#[derive(Debug, Clone)]
pub struct TraceSummary {
    pub ranks: Vec<RankSummary>,
    /// Over the selected steps of all ranks.
    pub(crate) step_time: Stats,
    /// Mean over ranks of each rank's mean selected step.
    pub breakdown: Breakdown,
    pub alignment: Alignment,
    pub kernel_time_us: f64,
    pub unclassified_us: f64,
    /// Merged over ranks, by time.
    pub unclassified: Vec<UnclassifiedKernel>,
    pub(crate) rules: String,
}

impl TraceSummary {
    pub fn unclassified_share(&self) -> f64 {
        ratio(self.unclassified_us, self.kernel_time_us)
    }
    pub fn selected_steps(&self) -> usize {
        self.ranks.iter().map(|r| r.step_time.n).sum()
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Reads and summarizes trace files (one per rank; directories are expanded).
pub fn summarize(paths: &[PathBuf], opts: &SummaryOptions) -> Result<TraceSummary> {
    let files = expand_inputs(paths)?;
    let popts = ParseOptions {
        step_marker: opts.step_marker,
    };
    let traces = files
        .iter()
        .map(|f| parse_file(f, &popts))
        .collect::<Result<Vec<_>>>()?;
    summarize_parsed(traces, opts)
}

/// A decodesim timeline (`--timeline`) holds every simulated rank in one file, each rank its
/// own process and device: split it into one trace per device, read as that rank, as if each
/// had its own file (true where it was split). Profiler traces pass unchanged.
fn split_simulated_ranks(traces: Vec<ParsedTrace>) -> (Vec<ParsedTrace>, Vec<bool>) {
    let mut out = Vec::with_capacity(traces.len());
    let mut split = Vec::with_capacity(traces.len());
    for mut t in traces {
        let mut devices: Vec<i64> = t.gpu_ops.iter().map(|o| o.device).collect();
        devices.sort_unstable();
        devices.dedup();
        if !t.meta.declares_categories || devices.len() < 2 {
            out.push(t);
            split.push(false);
            continue;
        }
        let ops = std::mem::take(&mut t.gpu_ops);
        for d in devices {
            let mut meta = t.meta.clone();
            meta.rank = Some(d);
            out.push(ParsedTrace {
                path: t.path.clone(),
                meta,
                gpu_ops: ops.iter().filter(|o| o.device == d).copied().collect(),
                annotations: t.annotations.clone(),
                launches: t.launches.clone(),
                names: t.names.clone(),
                counts: t.counts,
                warnings: t.warnings.clone(),
            });
            split.push(true);
        }
    }
    (out, split)
}

/// Summarizes traces already parsed (one per rank).
pub fn summarize_parsed(traces: Vec<ParsedTrace>, opts: &SummaryOptions) -> Result<TraceSummary> {
    let (mut traces, split) = split_simulated_ranks(traces);
    let ranks = checked_ranks(&traces, &split, opts)?;
    let mut order: Vec<usize> = (0..traces.len()).collect();
    order.sort_by_key(|&i| ranks[i].0);

    let mut rank_out = Vec::new();
    let mut comm_lists = Vec::new();
    for i in order {
        let (rank, src) = ranks[i];
        let (summary, comm) = summarize_rank(&mut traces[i], rank, src, opts);
        rank_out.push(summary);
        comm_lists.push(comm);
    }
    check_steps_found(&rank_out, &traces, opts)?;

    // Wait/transfer over the selected steps, aligned across ranks.
    let alignment = split_wait_transfer(&comm_lists);
    for (r, rs) in rank_out.iter_mut().enumerate() {
        for (k, step) in rs.steps.iter_mut().filter(|s| s.selected).enumerate() {
            let (w, t) = alignment.per_rank[r][k];
            step.breakdown.comm_wait_us = w;
            step.breakdown.comm_transfer_us = t;
        }
        rs.breakdown =
            Breakdown::mean(rs.steps.iter().filter(|s| s.selected).map(|s| &s.breakdown));
    }

    let with_steps: Vec<&RankSummary> = rank_out.iter().filter(|r| r.step_time.n > 0).collect();
    let breakdown = Breakdown::mean(with_steps.iter().map(|r| &r.breakdown));
    let times: Vec<f64> = rank_out
        .iter()
        .flat_map(|r| r.selected_steps().map(|s| s.breakdown.step_time_us))
        .collect();
    Ok(TraceSummary {
        step_time: Stats::of(&times),
        breakdown,
        alignment,
        kernel_time_us: rank_out.iter().map(|r| r.kernel_time_us).sum(),
        unclassified_us: rank_out.iter().map(|r| r.unclassified_us).sum(),
        unclassified: merged_unclassified(&rank_out, opts.top_unclassified),
        rules: opts.classifier.source.clone(),
        ranks: rank_out,
    })
}

/// Each trace's rank and where it came from, the traces checked to be one run (unless
/// allowed) and complete (unless partial runs are allowed); `split` marks the ranks taken
/// from one simulated timeline.
fn checked_ranks(
    traces: &[ParsedTrace],
    split: &[bool],
    opts: &SummaryOptions,
) -> Result<Vec<(u32, RankSource)>> {
    let paths: Vec<PathBuf> = traces.iter().map(|t| t.path.clone()).collect();
    let meta: Vec<Option<i64>> = traces.iter().map(|t| t.meta.rank).collect();
    let metas: Vec<&crate::trace::model::TraceMeta> = traces.iter().map(|t| &t.meta).collect();
    if !opts.ranks.allow_mixed_runs && !traces.is_empty() {
        check_one_run(&paths, &metas)?;
    }
    let mut ranks = assign_ranks(&paths, &meta)?;
    for (r, s) in ranks.iter_mut().zip(split) {
        if *s {
            r.1 = RankSource::SimulatedTimeline;
        }
    }
    if !opts.ranks.allow_partial {
        check_complete(&paths, &metas, &ranks)?;
    }
    Ok(ranks)
}

/// Refuses a summary without steps to trust: no GPU activity, correlation ids shared between
/// launches, step markers that launched nothing, or a `--step-marker` that matched no step.
fn check_steps_found(
    rank_out: &[RankSummary],
    traces: &[ParsedTrace],
    opts: &SummaryOptions,
) -> Result<()> {
    if rank_out.iter().all(|r| r.steps.is_empty()) {
        return Err(TraceError::NoGpuActivity);
    }
    if let Some((r, id)) = rank_out
        .iter()
        .find_map(|r| r.shared_correlation.map(|id| (r, id)))
    {
        return Err(TraceError::SharedCorrelation {
            path: r.path.clone(),
            id,
        });
    }
    if let Some(r) = rank_out
        .iter()
        .find(|r| r.step_source == StepSource::WholeTrace && r.empty_markers > 0)
    {
        return Err(TraceError::EmptyStepMarkers {
            path: r.path.clone(),
            count: r.empty_markers,
        });
    }
    // A marker the user named that found no step anywhere is a mistake, not one whole-trace step.
    match opts.step_marker {
        Some(re) if rank_out.iter().all(|r| r.step_source != StepSource::Custom) => {
            Err(unmatched_marker(re, traces))
        }
        _ => Ok(()),
    }
}

/// `--step-marker` found no step: how many of the traces' annotation names it matches, and
/// some of them.
fn unmatched_marker(re: &regex::Regex, traces: &[ParsedTrace]) -> TraceError {
    let mut names: Vec<&str> = traces
        .iter()
        .flat_map(|t| t.annotations.iter().map(|a| a.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let matching = names.iter().filter(|n| re.is_match(n)).count();
    let shown: Vec<String> = names
        .iter()
        .take(5)
        .map(|n| format!("'{}'", crate::units::clip(n, 60)))
        .collect();
    let found = if names.is_empty() {
        "the traces hold no annotations".to_string()
    } else {
        format!(
            "{matching} of {} distinct annotation names match{}; some: {}",
            names.len(),
            if matching > 0 {
                ", but their windows hold no GPU work"
            } else {
                ""
            },
            shown.join(", ")
        )
    };
    TraceError::StepMarkerUnmatched {
        pattern: re.as_str().to_string(),
        found,
    }
}

/// The unclassified kernels of every rank merged by name, the `n` with the most time.
fn merged_unclassified(rank_out: &[RankSummary], n: usize) -> Vec<UnclassifiedKernel> {
    let mut merged: HashMap<&str, (f64, usize)> = HashMap::new();
    for r in rank_out {
        for u in &r.unclassified {
            let e = merged.entry(u.name.as_str()).or_default();
            e.0 += u.time_us;
            e.1 += u.count;
        }
    }
    top_n(
        merged
            .into_iter()
            .map(|(n, (t, c))| UnclassifiedKernel {
                name: n.to_string(),
                time_us: t,
                count: c,
            })
            .collect(),
        n,
    )
}

#[cfg(test)]
mod tests {
    use super::per_rank::{gap_stats, trim_stalls};
    use super::*;
    use crate::trace::model::GpuOp;

    #[test]
    fn percentiles_interpolate() {
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 5));
        assert!((s.p10 - 1.4).abs() < 1e-12 && (s.p90 - 4.6).abs() < 1e-12);
        assert_eq!(Stats::of(&[]).n, 0);
    }

    fn kop(s: f64, e: f64) -> GpuOp {
        GpuOp {
            start_us: s,
            end_us: e,
            kind: crate::trace::model::GpuKind::Kernel,
            name: 0,
            device: 0,
            correlation: None,
            graph: false,
            collective: false,
            declared: None,
        }
    }

    #[test]
    fn stalls_are_cut_and_normal_gaps_kept() {
        // 4 µs of prep, a 1000 µs stall, then 100 µs of forward pass.
        let ops = [kop(0.0, 4.0), kop(1004.0, 1054.0), kop(1060.0, 1110.0)];
        assert_eq!(
            trim_stalls(&ops, &[0, 1, 2], 0.0, 1110.0),
            (1004.0, 1110.0, 1004.0)
        );
        // A 6 µs gap in 100 µs of work stays.
        assert_eq!(
            trim_stalls(&ops, &[1, 2], 1004.0, 1110.0),
            (1004.0, 1110.0, 0.0)
        );
    }

    #[test]
    fn gaps_blame_the_launch_only_until_the_launch_call() {
        let mut a = kop(0.0, 10.0);
        a.correlation = Some(1);
        let mut b = kop(30.0, 40.0);
        b.correlation = Some(2);
        let launch_at: HashMap<u64, f64> = [(1, -5.0), (2, 25.0)].into_iter().collect();
        let g = gap_stats(&[a, b], &[0, 1], 0.0, 45.0, &launch_at);
        assert_eq!(
            (g.count, g.idle_us, g.launch_gap_us, g.other_gap_us),
            (2, 25.0, 15.0, 10.0)
        );
        assert_eq!(g.largest_us, 20.0);
    }

    #[test]
    fn expand_rejects_missing_paths() {
        assert!(matches!(
            expand_inputs(&[PathBuf::from("/nonexistent/x.json")]),
            Err(TraceError::NotATrace { .. })
        ));
    }
}

//! One rank's summary: its steps, time per category, idle gaps and stalls, and the kernels no
//! rule classifies.

use super::{GapStats, RankSummary, Stats, StepSummary, SummaryOptions, UnclassifiedKernel};
use crate::accounting::{attribute, Breakdown, Interval};
use crate::category::Category;
use crate::trace::classify::Verdict;
use crate::trace::model::{GpuOp, ParsedTrace};
use crate::trace::rank::RankSource;
use crate::trace::steps::{find_steps, Step, StepKind};
use std::collections::HashMap;

pub(super) fn top_n(mut v: Vec<UnclassifiedKernel>, n: usize) -> Vec<UnclassifiedKernel> {
    v.sort_by(|a, b| b.time_us.total_cmp(&a.time_us).then(a.name.cmp(&b.name)));
    v.truncate(n);
    v
}

/// The device with the most GPU ops: a rank's trace normally has one, and mixing two GPUs'
/// timelines would make the union meaningless.
pub(super) fn main_device(ops: &[GpuOp]) -> Option<i64> {
    let mut count: HashMap<i64, usize> = HashMap::new();
    for o in ops {
        *count.entry(o.device).or_default() += 1;
    }
    count
        .into_iter()
        .max_by_key(|&(d, n)| (n, -d))
        .map(|(d, _)| d)
}

/// One rank's summary, and the (start, end) of its collectives in each selected step. The
/// trace's GPU ops and launches are taken out of it, filtered and sorted in place, and dropped
/// at the end: copies of them were most of a large trace's peak memory.
pub(super) fn summarize_rank(
    trace: &mut ParsedTrace,
    rank: u32,
    rank_source: RankSource,
    opts: &SummaryOptions,
) -> (RankSummary, Vec<Vec<(f64, f64)>>) {
    let mut warnings = trace.warnings.clone();
    let device = main_device(&trace.gpu_ops);
    let ops = device_ops(trace, device, &mut warnings);
    let mut launches = std::mem::take(&mut trace.launches);
    launches.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let trace = &*trace;
    let launch_at: HashMap<u64, f64> = launches
        .iter()
        .map(|l| (l.correlation, l.start_us))
        .collect();

    let finding = find_steps(&trace.annotations, &ops, &launches, opts.step_marker);
    let any_decode = finding.steps.iter().any(|s| s.kind == StepKind::Decode);

    let mut cache = Vec::new();
    let classes: Vec<(Category, Verdict)> = ops
        .iter()
        .map(|o| opts.classifier.classify(o, trace, &mut cache))
        .collect();
    let rank_ops = RankOps {
        ops: &ops,
        classes: &classes,
        max_dur: ops
            .iter()
            .map(|o| o.end_us - o.start_us)
            .fold(0.0, f64::max),
        launch_at: &launch_at,
    };
    let mut walk = StepWalk::default();
    let mut steps = Vec::new();
    let mut comm = Vec::new();
    for (index, st) in finding.steps.iter().enumerate() {
        let selected = !any_decode || st.kind == StepKind::Decode;
        let (step, coll) = rank_ops.step(index, st, selected, &mut walk);
        if selected {
            comm.push(coll);
        }
        steps.push(step);
    }

    let (step_time, breakdown, gaps) = selected_means(&steps);
    (
        RankSummary {
            rank,
            rank_source,
            path: trace.path.clone(),
            device: device_name(trace, device),
            world_size: trace.meta.world_size,
            events: trace.counts,
            step_source: finding.source,
            marker_side: finding.marker_side,
            empty_markers: finding.empty_markers,
            shared_correlation: finding.shared_correlation,
            selection: if any_decode { "decode" } else { "all" },
            step_time,
            breakdown,
            gaps,
            kernel_time_us: walk.kernel_time,
            unclassified_us: walk.unclassified_time,
            unclassified: walk.top_unclassified(trace, opts.top_unclassified),
            warnings,
            steps,
        },
        comm,
    )
}

/// Over the selected steps: the step time's statistics, the mean breakdown and mean gaps.
fn selected_means(steps: &[StepSummary]) -> (Stats, Breakdown, GapStats) {
    let sel: Vec<&StepSummary> = steps.iter().filter(|s| s.selected).collect();
    let step_time = Stats::of(
        &sel.iter()
            .map(|s| s.breakdown.step_time_us)
            .collect::<Vec<_>>(),
    );
    let mut gaps = GapStats::default();
    for s in &sel {
        gaps.add(&s.gaps);
    }
    if !sel.is_empty() {
        gaps.scale(1.0 / sel.len() as f64);
    }
    (
        step_time,
        Breakdown::mean(sel.iter().map(|s| &s.breakdown)),
        gaps,
    )
}

/// The analysed device's name from the trace's metadata (else the first it names).
fn device_name(trace: &ParsedTrace, device: Option<i64>) -> Option<String> {
    device
        .and_then(|d| usize::try_from(d).ok())
        .and_then(|d| trace.meta.device_names.get(d).cloned())
        .or_else(|| trace.meta.device_names.first().cloned())
}

/// The trace's GPU ops on `device`, in start order (taken out of the trace); a warning names
/// the ops of other devices left out, or an empty trace.
fn device_ops(
    trace: &mut ParsedTrace,
    device: Option<i64>,
    warnings: &mut Vec<String>,
) -> Vec<GpuOp> {
    let mut ops = std::mem::take(&mut trace.gpu_ops);
    let all = ops.len();
    ops.retain(|o| Some(o.device) == device);
    if ops.len() < all {
        warnings.push(format!(
            "{} GPU ops on other devices ignored; analysed device {} (the one with the most ops)",
            all - ops.len(),
            device.unwrap_or(0)
        ));
    }
    if ops.is_empty() {
        warnings.push("no GPU kernels, memcpy or memset in this trace".into());
    }
    ops.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    ops
}

/// A rank's GPU ops in start order with their categories, the longest op's duration (how far
/// back a window's search starts) and each launch's start by correlation id.
struct RankOps<'a> {
    ops: &'a [GpuOp],
    classes: &'a [(Category, Verdict)],
    max_dur: f64,
    launch_at: &'a HashMap<u64, f64>,
}

/// What the walk over a rank's steps carries from one to the next: the buffers it reuses and
/// the selected steps' kernel time, with the unclassified kernels' by name.
#[derive(Default)]
struct StepWalk {
    intervals: Vec<Interval>,
    members: Vec<usize>,
    scratch: Vec<(f64, i32, u8)>,
    kernel_time: f64,
    unclassified_time: f64,
    /// Name id → (time, calls).
    unclassified: HashMap<u32, (f64, usize)>,
}

impl StepWalk {
    /// The unclassified kernels with the most time, at most `n`.
    fn top_unclassified(&self, trace: &ParsedTrace, n: usize) -> Vec<UnclassifiedKernel> {
        top_n(
            self.unclassified
                .iter()
                .map(|(&name, &(t, c))| UnclassifiedKernel {
                    name: trace.name(name).to_string(),
                    time_us: t,
                    count: c,
                })
                .collect(),
            n,
        )
    }
}

impl RankOps<'_> {
    /// Sets `members` to the ops overlapping the window: sorted by start, so the search begins
    /// early enough for long ops.
    fn overlapping(&self, ws: f64, we: f64, members: &mut Vec<usize>) {
        let ops = self.ops;
        members.clear();
        let lo = ops.partition_point(|o| o.start_us < ws - self.max_dur);
        let hi = ops.partition_point(|o| o.start_us < we);
        members.extend((lo..hi).filter(|&i| ops[i].end_us > ws));
    }

    /// Step `index`: its window trimmed of stalls, its breakdown and gaps, and its collectives'
    /// (start, end); a `selected` step's kernels count towards the rank's kernel time.
    fn step(
        &self,
        index: usize,
        st: &Step,
        selected: bool,
        walk: &mut StepWalk,
    ) -> (StepSummary, Vec<(f64, f64)>) {
        let ops = self.ops;
        self.overlapping(st.start_us, st.end_us, &mut walk.members);
        let (ws, we, stall_us) = trim_stalls(ops, &walk.members, st.start_us, st.end_us);
        if stall_us > 0.0 {
            self.overlapping(ws, we, &mut walk.members);
        }
        walk.intervals.clear();
        walk.intervals
            .extend(walk.members.iter().map(|&i| Interval {
                start_us: ops[i].start_us,
                end_us: ops[i].end_us,
                category: self.classes[i].0,
            }));
        let breakdown = Breakdown::from_attribution(
            we - ws,
            attribute(&walk.intervals, ws, we, &mut walk.scratch),
        );
        let gaps = gap_stats(ops, &walk.members, ws, we, self.launch_at);
        let mut coll = Vec::new();
        for &i in &walk.members {
            let o = &ops[i];
            if self.classes[i].0 == Category::Communication && o.start_us >= ws {
                coll.push((o.start_us, o.end_us));
            }
            if selected && o.kind == crate::trace::model::GpuKind::Kernel {
                let d = o.end_us.min(we) - o.start_us.max(ws);
                walk.kernel_time += d;
                if self.classes[i].1 == Verdict::Unclassified {
                    walk.unclassified_time += d;
                    let e = walk.unclassified.entry(o.name).or_default();
                    e.0 += d;
                    e.1 += 1;
                }
            }
        }
        let step = StepSummary {
            index,
            name: st.name.clone(),
            kind: st.kind,
            selected,
            start_us: ws,
            end_us: we,
            window: st.window,
            linked_ops: st.linked_ops,
            graph_ops: st.graph_ops,
            breakdown,
            gaps,
            collectives: coll.len(),
            stall_us,
        };
        (step, coll)
    }
}

/// Gaps in the union of the window's GPU ops, each blamed on the launch or on something else.
pub(super) fn gap_stats(
    ops: &[GpuOp],
    members: &[usize],
    ws: f64,
    we: f64,
    launch_at: &HashMap<u64, f64>,
) -> GapStats {
    let mut g = GapStats::default();
    let mut covered = ws;
    let gap = |g: &mut GapStats, from: f64, to: f64, launched: Option<f64>| {
        if to <= from {
            return;
        }
        // The part of the gap before the op's launch call was made is the GPU waiting for the
        // CPU; the rest is waiting for something else (a dependency, an event, the window end).
        let split = launched.map_or(from, |l| l.clamp(from, to));
        g.count += 1;
        g.idle_us += to - from;
        g.largest_us = g.largest_us.max(to - from);
        g.launch_gap_us += split - from;
        g.other_gap_us += to - split;
    };
    // `members` are in start order because `ops` is.
    for &i in members {
        let o = &ops[i];
        let launched = o.correlation.and_then(|c| launch_at.get(&c)).copied();
        gap(&mut g, covered, o.start_us.min(we), launched);
        covered = covered.max(o.end_us);
    }
    gap(&mut g, covered, we, None);
    g
}

/// A step's GPU window can contain a stall that is not part of the step: SGLang's overlap
/// scheduler, for example, launches a few kernels, then the stream waits hundreds of
/// milliseconds on an event before the forward pass runs. An idle gap longer than
/// `STALL_FACTOR` times the step's whole GPU busy time is such a stall: the window is cut there
/// and the piece with the most GPU work is kept.
pub(crate) const STALL_FACTOR: f64 = 5.0;

/// Returns the trimmed window and the time cut from it.
pub(super) fn trim_stalls(ops: &[GpuOp], members: &[usize], ws: f64, we: f64) -> (f64, f64, f64) {
    // Union segments of the members, clipped to the window (members are in start order).
    let mut segs: Vec<(f64, f64)> = Vec::new();
    for &i in members {
        let (s, e) = (ops[i].start_us.max(ws), ops[i].end_us.min(we));
        if e <= s {
            continue;
        }
        match segs.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => segs.push((s, e)),
        }
    }
    let busy: f64 = segs.iter().map(|(s, e)| e - s).sum();
    if segs.len() < 2 || busy <= 0.0 {
        return (ws, we, 0.0);
    }
    // Pieces between stalls: (first segment, last segment, busy time).
    let mut pieces = vec![(0usize, 0usize, segs[0].1 - segs[0].0)];
    for k in 1..segs.len() {
        if segs[k].0 - segs[k - 1].1 > STALL_FACTOR * busy {
            pieces.push((k, k, 0.0));
        }
        let n = pieces.len();
        let p = &mut pieces[n - 1];
        p.1 = k;
        p.2 += segs[k].1 - segs[k].0;
    }
    if pieces.len() == 1 {
        return (ws, we, 0.0);
    }
    let mut best = pieces[0];
    for &p in &pieces[1..] {
        if p.2 > best.2 {
            best = p;
        }
    }
    let start = if best.0 == 0 { ws } else { segs[best.0].0 };
    let end = if best.1 == segs.len() - 1 {
        we
    } else {
        segs[best.1].1
    };
    (start, end, (we - ws) - (end - start))
}

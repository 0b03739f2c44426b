//! Where the steps are. A step is named by a CPU-side annotation (vLLM
//! `execute_context_*_generation_*`, SGLang `step[DECODE ...]`, ATOM `decode[...]`,
//! `ProfilerStep#N`, or the user's `--step-marker`), but its *window* is taken on the GPU: the
//! span of the GPU work the annotation launched, found by correlation id (launch calls inside
//! the annotation → the kernels carrying their correlation ids). That handles CUDA-graph replay,
//! where one `cudaGraphLaunch` correlation id covers hundreds of kernels, and CPU annotations
//! that last much longer (or much shorter) than the GPU work. When no launch can be linked, the
//! annotation's GPU-side twin (`gpu_user_annotation` of the same name) gives the window. Traces
//! with only GPU-side annotations use those directly; traces with no markers at all are one
//! step spanning all GPU work (reported as such).

use super::model::{Annotation, GpuOp, Launch, Side};
use regex::Regex;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Decode,
    Prefill,
    Mixed,
    /// The marker does not say (ProfilerStep, user markers).
    Unknown,
}

/// Which family of markers the steps came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    Custom,
    VllmExecute,
    SglangStep,
    AtomStep,
    ProfilerStep,
    WholeTrace,
}

impl StepSource {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            StepSource::Custom => "--step-marker annotations",
            StepSource::VllmExecute => "vLLM execute_context_*_generation_* annotations",
            StepSource::SglangStep => "SGLang step[...] annotations",
            StepSource::AtomStep => "ATOM prefill[...]/decode[...] annotations",
            StepSource::ProfilerStep => "ProfilerStep#N annotations",
            StepSource::WholeTrace => "no step markers: the whole trace is one step",
        }
    }
}

/// How a step's GPU window was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// Launch calls inside the CPU annotation → kernels with their correlation ids.
    Correlation,
    /// The `gpu_user_annotation` twin of the CPU annotation.
    GpuAnnotation,
    /// All GPU work of the trace.
    WholeTrace,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Step {
    pub(crate) name: String,
    pub(crate) kind: StepKind,
    /// GPU window, µs on the trace's clock.
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    pub(crate) window: WindowSource,
    /// GPU ops linked to the step by correlation.
    pub(crate) linked_ops: usize,
    /// Of those, ops replayed from a CUDA graph (one launch → many kernels, or `graph id`).
    pub(crate) graph_ops: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StepFinding {
    pub(crate) source: StepSource,
    /// Which side the markers were on (CPU, or GPU-only traces).
    pub(crate) marker_side: &'static str,
    pub(crate) steps: Vec<Step>,
    /// Markers that matched but launched no GPU work (e.g. the last, unfinished ProfilerStep).
    pub(crate) empty_markers: usize,
    /// A correlation id carried by two launches in the steps' windows: the profiler gives each
    /// launch its own, so the trace's ids cannot match GPU work to its steps.
    pub(crate) shared_correlation: Option<u64>,
}

fn family_regexes() -> &'static [(StepSource, Regex)] {
    static R: OnceLock<Vec<(StepSource, Regex)>> = OnceLock::new();
    R.get_or_init(|| {
        let re = |s: &str| Regex::new(s).unwrap_or_else(|e| unreachable!("fixed regex: {e}"));
        vec![
            (
                StepSource::VllmExecute,
                re(r"^execute_(?:\d+_)?context_(\d+)\([^)]*\)_generation_(\d+)\("),
            ),
            (
                StepSource::SglangStep,
                re(r"^step\[(?i:(EXTEND|DECODE|MIXED|PREFILL|IDLE))\b"),
            ),
            (StepSource::AtomStep, re(r"^(?i:(prefill|decode))\[")),
            (StepSource::ProfilerStep, re(r"^ProfilerStep#\d+$")),
        ]
    })
}

/// Decode, prefill or mixed, from the marker's own words.
fn step_kind(source: StepSource, name: &str) -> StepKind {
    let caps = family_regexes()
        .iter()
        .find(|(s, _)| *s == source)
        .and_then(|(_, re)| re.captures(name));
    let Some(caps) = caps else {
        return StepKind::Unknown;
    };
    let word = |i: usize| caps.get(i).map(|m| m.as_str().to_ascii_lowercase());
    match source {
        StepSource::VllmExecute => {
            let n = |i| word(i).and_then(|w| w.parse::<u64>().ok()).unwrap_or(0);
            match (n(1), n(2)) {
                (0, g) if g > 0 => StepKind::Decode,
                (_, 0) => StepKind::Prefill,
                _ => StepKind::Mixed,
            }
        }
        StepSource::SglangStep | StepSource::AtomStep => match word(1).as_deref() {
            Some("decode") => StepKind::Decode,
            Some("extend") | Some("prefill") => StepKind::Prefill,
            Some("mixed") => StepKind::Mixed,
            _ => StepKind::Unknown,
        },
        _ => StepKind::Unknown,
    }
}

/// Finds the steps of one rank. `ops` are that rank's GPU ops (one device), `launches` its
/// runtime calls sorted by start time.
pub(crate) fn find_steps(
    annotations: &[Annotation],
    ops: &[GpuOp],
    launches: &[Launch],
    custom: Option<&Regex>,
) -> StepFinding {
    // Correlation id → (first start, last end, ops, graph ops) of the GPU work it launched.
    let mut by_corr: HashMap<u64, (f64, f64, usize, usize)> = HashMap::new();
    let graph_corr: std::collections::HashSet<u64> = launches
        .iter()
        .filter(|l| l.graph)
        .map(|l| l.correlation)
        .collect();
    for op in ops {
        if let Some(c) = op.correlation {
            let e = by_corr
                .entry(c)
                .or_insert((f64::INFINITY, f64::NEG_INFINITY, 0, 0));
            e.0 = e.0.min(op.start_us);
            e.1 = e.1.max(op.end_us);
            e.2 += 1;
            if op.graph || graph_corr.contains(&c) {
                e.3 += 1;
            }
        }
    }

    let families: Vec<(StepSource, &Regex)> = match custom {
        Some(re) => vec![(StepSource::Custom, re)],
        None => family_regexes().iter().map(|(s, r)| (*s, r)).collect(),
    };
    let mut empty = 0;
    for side in [Side::Cpu, Side::Gpu] {
        for &(source, re) in &families {
            let marks: Vec<&Annotation> = annotations
                .iter()
                .filter(|a| a.side == side && re.is_match(&a.name))
                .collect();
            if marks.is_empty() {
                continue;
            }
            let found = windows(source, side, &marks, annotations, launches, &by_corr);
            // Markers that cover no GPU work (zero length, nothing launched inside) make no
            // step: the next markers are tried, and the whole trace says how many were empty.
            if found.steps.is_empty() {
                if empty == 0 {
                    empty = found.empty_markers;
                }
                continue;
            }
            return found;
        }
    }
    StepFinding {
        empty_markers: empty,
        ..whole_trace(ops)
    }
}

fn windows(
    source: StepSource,
    side: Side,
    marks: &[&Annotation],
    annotations: &[Annotation],
    launches: &[Launch],
    by_corr: &HashMap<u64, (f64, f64, usize, usize)>,
) -> StepFinding {
    // GPU twins by name, in time order, consumed as CPU marks find them.
    let twins = if side == Side::Cpu {
        gpu_twins(annotations)
    } else {
        HashMap::new()
    };
    let mut twin_next: HashMap<&str, usize> = HashMap::new();
    let mut sorted: Vec<&Annotation> = marks.to_vec();
    sorted.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));

    let mut steps = Vec::new();
    let mut empty = 0;
    let mut seen = std::collections::HashSet::new();
    let mut shared = None;
    // A step's marker ends at the latest where the next one starts: markers of one family are
    // sequential, and one whose end overruns (a corrupt `dur`) would take the next steps' work.
    let next_start: Vec<f64> = next_starts(&sorted);
    for (m, &next) in sorted.into_iter().zip(&next_start) {
        let kind = marker_kind(source, &m.name);
        let make = |start_us, end_us, window, linked_ops, graph_ops| Step {
            name: m.name.clone(),
            kind,
            start_us,
            end_us,
            window,
            linked_ops,
            graph_ops,
        };
        if side == Side::Gpu {
            if m.end_us > m.start_us {
                steps.push(make(
                    m.start_us,
                    m.end_us,
                    WindowSource::GpuAnnotation,
                    0,
                    0,
                ));
            } else {
                empty += 1;
            }
            continue;
        }
        // Launch calls that start inside the CPU annotation.
        let lo = launches.partition_point(|l| l.start_us < m.start_us);
        let end = m.end_us.min(next);
        let hi = launches.partition_point(|l| l.start_us <= end && l.start_us < next);
        let (s, e, n, g) = launched_work(&launches[lo..hi], by_corr, &mut seen, &mut shared);
        if n > 0 {
            steps.push(make(s, e, WindowSource::Correlation, n, g));
            continue;
        }
        match take_twin(&twins, &mut twin_next, m) {
            Some(t) => steps.push(make(
                t.start_us,
                t.end_us,
                WindowSource::GpuAnnotation,
                0,
                0,
            )),
            None => empty += 1,
        }
    }
    StepFinding {
        source,
        marker_side: if side == Side::Cpu { "cpu" } else { "gpu" },
        steps,
        empty_markers: empty,
        shared_correlation: shared,
    }
}

/// Where each marker's window ends at the latest: where the next one starts (the last one:
/// never).
fn next_starts(sorted: &[&Annotation]) -> Vec<f64> {
    sorted
        .iter()
        .skip(1)
        .map(|n| n.start_us)
        .chain(std::iter::once(f64::INFINITY))
        .collect()
}

/// The kind of step a marker of `source` named `name` marks (a custom marker's: unknown).
fn marker_kind(source: StepSource, name: &str) -> StepKind {
    if source == StepSource::Custom {
        StepKind::Unknown
    } else {
        step_kind(source, name)
    }
}

/// The GPU annotations by name, each name's in time order.
fn gpu_twins(annotations: &[Annotation]) -> HashMap<&str, Vec<&Annotation>> {
    let mut twins: HashMap<&str, Vec<&Annotation>> = HashMap::new();
    for a in annotations.iter().filter(|a| a.side == Side::Gpu) {
        twins.entry(a.name.as_str()).or_default().push(a);
    }
    for v in twins.values_mut() {
        v.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    }
    twins
}

/// The GPU work of a CPU marker's `launches` through their correlations: (start, end, ops,
/// graph ops). A correlation another marker already took is kept in `shared` (the first).
fn launched_work(
    launches: &[Launch],
    by_corr: &HashMap<u64, (f64, f64, usize, usize)>,
    seen: &mut std::collections::HashSet<u64>,
    shared: &mut Option<u64>,
) -> (f64, f64, usize, usize) {
    let (mut s, mut e, mut n, mut g) = (f64::INFINITY, f64::NEG_INFINITY, 0, 0);
    for l in launches {
        if let Some(&(cs, ce, cn, cg)) = by_corr.get(&l.correlation) {
            if !seen.insert(l.correlation) {
                *shared = shared.or(Some(l.correlation));
            }
            s = s.min(cs);
            e = e.max(ce);
            n += cn;
            g += cg;
        }
    }
    (s, e, n, g)
}

/// A CPU marker's GPU twin: the first GPU annotation of its name not yet taken that ends after
/// the marker starts, taken now; none when there is none or it covers no time.
fn take_twin<'a>(
    twins: &HashMap<&'a str, Vec<&'a Annotation>>,
    twin_next: &mut HashMap<&'a str, usize>,
    m: &'a Annotation,
) -> Option<&'a Annotation> {
    let k = twin_next.entry(m.name.as_str()).or_insert(0);
    let v = twins.get(m.name.as_str())?;
    let p = v[*k..].iter().position(|t| t.end_us >= m.start_us)?;
    let t = v[*k + p];
    *k += p + 1;
    (t.end_us > t.start_us).then_some(t)
}

fn whole_trace(ops: &[GpuOp]) -> StepFinding {
    let s = ops.iter().map(|o| o.start_us).fold(f64::INFINITY, f64::min);
    let e = ops
        .iter()
        .map(|o| o.end_us)
        .fold(f64::NEG_INFINITY, f64::max);
    let steps = if ops.is_empty() {
        Vec::new()
    } else {
        vec![Step {
            name: "whole trace".into(),
            kind: StepKind::Unknown,
            start_us: s,
            end_us: e,
            window: WindowSource::WholeTrace,
            linked_ops: ops.len(),
            graph_ops: ops.iter().filter(|o| o.graph).count(),
        }]
    };
    StepFinding {
        source: StepSource::WholeTrace,
        marker_side: "none",
        steps,
        empty_markers: 0,
        shared_correlation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::model::GpuKind;

    #[test]
    fn kinds_from_names() {
        let k = step_kind;
        assert_eq!(
            k(
                StepSource::VllmExecute,
                "execute_context_0(0)_generation_8(8)"
            ),
            StepKind::Decode
        );
        assert_eq!(
            k(
                StepSource::VllmExecute,
                "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785)"
            ),
            StepKind::Decode
        );
        assert_eq!(
            k(
                StepSource::VllmExecute,
                "execute_context_2(900)_generation_0(0)"
            ),
            StepKind::Prefill
        );
        assert_eq!(
            k(
                StepSource::VllmExecute,
                "execute_8192_context_9(sq8155)_generation_37(sq37)"
            ),
            StepKind::Mixed
        );
        assert_eq!(
            k(StepSource::SglangStep, "step[DECODE bs=32]"),
            StepKind::Decode
        );
        assert_eq!(
            k(StepSource::SglangStep, "step[EXTEND bs=15 toks=15360]"),
            StepKind::Prefill
        );
        assert_eq!(
            k(StepSource::ProfilerStep, "ProfilerStep#3"),
            StepKind::Unknown
        );
    }

    fn ann(name: &str, side: Side, s: f64, e: f64) -> Annotation {
        Annotation {
            name: name.into(),
            side,
            start_us: s,
            end_us: e,
            pid: 1,
            tid: 1,
        }
    }
    fn op(s: f64, e: f64, corr: u64) -> GpuOp {
        GpuOp {
            start_us: s,
            end_us: e,
            kind: GpuKind::Kernel,
            name: 0,
            device: 0,
            correlation: Some(corr),
            graph: false,
            collective: false,
            declared: None,
        }
    }

    #[test]
    fn graph_replay_window_comes_from_the_gpu() {
        // A 1000 µs CPU annotation whose single graph launch runs 3 kernels much later.
        let anns = [ann(
            "execute_context_0(0)_generation_4(4)",
            Side::Cpu,
            0.0,
            1000.0,
        )];
        let launches = [Launch {
            start_us: 990.0,
            end_us: 995.0,
            correlation: 5,
            graph: true,
        }];
        let ops = [
            op(1200.0, 1210.0, 5),
            op(1210.0, 1250.0, 5),
            op(1260.0, 1300.0, 5),
            op(5.0, 6.0, 9),
        ];
        let f = find_steps(&anns, &ops, &launches, None);
        assert_eq!(f.source, StepSource::VllmExecute);
        assert_eq!(f.steps.len(), 1);
        let s = &f.steps[0];
        assert_eq!(
            (s.start_us, s.end_us, s.linked_ops, s.graph_ops),
            (1200.0, 1300.0, 3, 3)
        );
        assert_eq!(s.kind, StepKind::Decode);
    }

    #[test]
    fn twin_then_whole_trace_fallbacks() {
        let anns = [
            ann("ProfilerStep#1", Side::Cpu, 0.0, 10.0),
            ann("ProfilerStep#1", Side::Gpu, 20.0, 40.0),
            ann("ProfilerStep#2", Side::Cpu, 50.0, 60.0),
        ];
        let f = find_steps(&anns, &[op(20.0, 40.0, 1)], &[], None);
        assert_eq!(f.steps.len(), 1);
        assert_eq!(f.steps[0].window, WindowSource::GpuAnnotation);
        assert_eq!(f.empty_markers, 1);
        let f = find_steps(&[], &[op(20.0, 40.0, 1), op(50.0, 60.0, 2)], &[], None);
        assert_eq!(f.source, StepSource::WholeTrace);
        assert_eq!((f.steps[0].start_us, f.steps[0].end_us), (20.0, 60.0));
    }

    #[test]
    fn custom_marker_wins() {
        let anns = [
            ann("ProfilerStep#1", Side::Cpu, 0.0, 10.0),
            ann("my_step", Side::Cpu, 0.0, 10.0),
        ];
        let launches = [Launch {
            start_us: 1.0,
            end_us: 2.0,
            correlation: 1,
            graph: false,
        }];
        let re = Regex::new("^my_step$").unwrap();
        let f = find_steps(&anns, &[op(3.0, 4.0, 1)], &launches, Some(&re));
        assert_eq!(f.source, StepSource::Custom);
        assert_eq!(f.steps[0].name, "my_step");
    }
}

//! `decodesim trace summarize` output: a terminal table, JSON and CSV of a [`TraceSummary`].

use crate::accounting::align::AlignMethod;
use crate::accounting::summary::{GapStats, RankSummary, StepSummary};
use crate::accounting::Breakdown;
use crate::accounting::TraceSummary;
use crate::category::Category;
use crate::trace::steps::WindowSource;
use crate::units::{path, us};
use serde_json::{json, Value};
use std::fmt::Write;

fn breakdown_json(b: &Breakdown) -> Value {
    json!(b.entries())
}

fn comm_json(b: &Breakdown) -> Value {
    let c = Category::Communication.index();
    json!({
        "busy_us": b.busy_us[c],
        "exposed_us": b.exclusive_us[c],
        "overlapped_us": b.comm_overlapped_us(),
        "wait_us": b.comm_wait_us,
        "transfer_us": b.comm_transfer_us,
    })
}

fn step_json(rank: u32, s: &StepSummary) -> Value {
    json!({
        "rank": rank,
        "index": s.index,
        "name": s.name,
        "kind": s.kind,
        "selected": s.selected,
        "start_us": s.start_us,
        "end_us": s.end_us,
        "step_time_us": s.breakdown.step_time_us,
        "window": s.window,
        "linked_ops": s.linked_ops,
        "graph_ops": s.graph_ops,
        "collectives": s.collectives,
        "stall_us": s.stall_us,
        "breakdown": breakdown_json(&s.breakdown),
        "comm": comm_json(&s.breakdown),
        "gaps": s.gaps,
    })
}

fn rank_json(r: &RankSummary) -> Value {
    json!({
        "rank": r.rank,
        "rank_source": r.rank_source,
        "path": r.path.display().to_string(),
        "device": r.device,
        "world_size": r.world_size,
        "events": {
            "total": r.events.total,
            "skipped_early": r.events.skipped_early,
            "malformed": r.events.malformed,
            "lossy_utf8": r.events.lossy_utf8,
        },
        "step_source": r.step_source,
        "step_source_text": r.step_source.describe(),
        "marker_side": r.marker_side,
        "empty_markers": r.empty_markers,
        "steps_found": r.steps.len(),
        "selection": r.selection,
        "step_time_us": r.step_time,
        "breakdown": breakdown_json(&r.breakdown),
        "comm": comm_json(&r.breakdown),
        "gaps": r.gaps,
        "kernel_time_us": r.kernel_time_us,
        "unclassified_us": r.unclassified_us,
        "unclassified_share": r.unclassified_share(),
        "unclassified": r.unclassified,
        "warnings": r.warnings,
    })
}

/// The JSON document (schema in docs/data-formats.md).
pub fn to_json(s: &TraceSummary) -> Value {
    let steps: Vec<Value> = s
        .ranks
        .iter()
        .flat_map(|r| r.steps.iter().map(move |st| step_json(r.rank, st)))
        .collect();
    let mut comm = comm_json(&s.breakdown);
    comm["alignment"] = json!(s.alignment);
    json!({
        "ranks": s.ranks.iter().map(rank_json).collect::<Vec<_>>(),
        "steps": steps,
        "step_time_us": s.step_time,
        "breakdown": breakdown_json(&s.breakdown),
        "comm": comm,
        "gaps": mean_gaps(s),
        "kernel_time_us": s.kernel_time_us,
        "unclassified_us": s.unclassified_us,
        "unclassified_share": s.unclassified_share(),
        "unclassified": s.unclassified,
        "rules": s.rules,
    })
}

fn mean_gaps(s: &TraceSummary) -> GapStats {
    let ranks: Vec<&RankSummary> = s.ranks.iter().filter(|r| r.step_time.n > 0).collect();
    let n = ranks.len().max(1) as f64;
    let mut g = GapStats::default();
    for r in &ranks {
        g.count += r.gaps.count;
        g.idle_us += r.gaps.idle_us / n;
        g.launch_gap_us += r.gaps.launch_gap_us / n;
        g.other_gap_us += r.gaps.other_gap_us / n;
        g.largest_us = g.largest_us.max(r.gaps.largest_us);
    }
    g
}

/// Long-format CSV: one row per (rank, step, category); rank "all" and step "mean" rows carry
/// the means the table shows. Raw numbers; written with the csv crate (quoting names with
/// commas, quotes or newlines).
pub(crate) fn to_csv(s: &TraceSummary) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    // Writing to a Vec cannot fail, and every record has the header's length.
    let _ = w.write_record([
        "rank",
        "step",
        "name",
        "kind",
        "selected",
        "step_time_us",
        "category",
        "time_us",
        "share",
        "busy_us",
        "comm_wait_us",
        "comm_transfer_us",
    ]);
    let mut rows =
        |rank: &str, step: &str, name: &str, kind: &str, selected: &str, b: &Breakdown| {
            for e in b.entries() {
                let _ = w.write_record([
                    rank,
                    step,
                    name,
                    kind,
                    selected,
                    &b.step_time_us.to_string(),
                    e.category.name(),
                    &e.time_us.to_string(),
                    &e.share.to_string(),
                    &e.busy_us.to_string(),
                    &b.comm_wait_us.to_string(),
                    &b.comm_transfer_us.to_string(),
                ]);
            }
        };
    rows("all", "mean", "", "", "", &s.breakdown);
    for r in &s.ranks {
        let rank = r.rank.to_string();
        rows(&rank, "mean", "", r.selection, "", &r.breakdown);
        for st in &r.steps {
            let kind = serde_json::to_value(st.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            rows(
                &rank,
                &st.index.to_string(),
                &st.name,
                &kind,
                if st.selected { "true" } else { "false" },
                &st.breakdown,
            );
        }
    }
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn file_name(r: &RankSummary) -> String {
    r.path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| r.path.display().to_string())
}

/// The terminal table: the files and their steps, time per category, then communication,
/// idle and unclassified kernels.
pub(crate) fn to_table(s: &TraceSummary) -> String {
    let mut o = String::new();
    let rules = if s.rules.ends_with("(built in)") {
        s.rules.clone()
    } else {
        path(std::path::Path::new(&s.rules))
    };
    let _ = writeln!(
        o,
        "Traces: {} rank(s); kernel rules: {rules}",
        s.ranks.len()
    );
    let _ = writeln!(o);
    rank_section(&mut o, s);
    let _ = writeln!(o);
    category_section(&mut o, s);
    let _ = writeln!(o);
    totals_section(&mut o, s);
    o
}

/// One line per rank file (steps and step-time statistics), then how its steps were found.
fn rank_section(o: &mut String, s: &TraceSummary) {
    let _ = writeln!(
        o,
        "{:<5} {:<44} {:<24} {:>7} {:>7} {:>11} {:>11} {:>11}",
        "rank", "file", "device", "steps", "used", "median µs", "p10 µs", "p90 µs"
    );
    for r in &s.ranks {
        let _ = writeln!(
            o,
            "{:<5} {:<44} {:<24} {:>7} {:>7} {:>11} {:>11} {:>11}",
            r.rank,
            super::units::clip(&file_name(r), 44),
            super::units::clip(r.device.as_deref().unwrap_or("-"), 24),
            r.steps.len(),
            format!(
                "{} {}",
                r.step_time.n,
                if r.selection == "decode" {
                    "dec"
                } else {
                    "all"
                }
            ),
            us(r.step_time.median),
            us(r.step_time.p10),
            us(r.step_time.p90)
        );
        rank_details(o, r);
    }
}

/// How a rank's steps, windows and rank number were found, and what was cut or skipped.
fn rank_details(o: &mut String, r: &RankSummary) {
    let graph: usize = r.selected_steps().map(|x| x.graph_ops).sum();
    let mut windows: Vec<&str> = r
        .steps
        .iter()
        .map(|x| match x.window {
            WindowSource::Correlation => "launch correlation",
            WindowSource::GpuAnnotation => "gpu_user_annotation",
            WindowSource::WholeTrace => "all GPU work",
        })
        .collect();
    windows.dedup();
    let _ = writeln!(
        o,
        "      steps: {} ({} side), GPU window from {}{}",
        r.step_source.describe(),
        r.marker_side,
        windows.join(" / "),
        if graph > 0 {
            format!("; {graph} CUDA-graph-replayed ops in the used steps")
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        o,
        "      rank from {}; {} events read, {} skipped early, {} malformed skipped",
        r.rank_source.describe(),
        r.events.total,
        r.events.skipped_early,
        r.events.malformed
    );
    let stalls: Vec<f64> = r
        .selected_steps()
        .map(|x| x.stall_us)
        .filter(|&t| t > 0.0)
        .collect();
    if !stalls.is_empty() {
        let _ = writeln!(
            o,
            "      {} step window(s) had a GPU stall cut out ({} µs in all): an idle gap over {}× the step's GPU busy time",
            stalls.len(),
            us(stalls.iter().sum::<f64>()),
            crate::accounting::summary::STALL_FACTOR
        );
    }
    if r.empty_markers > 0 {
        let _ = writeln!(
            o,
            "      {} marker(s) launched no GPU work and were skipped",
            r.empty_markers
        );
    }
    for w in &r.warnings {
        let _ = writeln!(o, "      warning: {w}");
    }
}

/// Time per category (mean step), with one column per rank when there are several.
fn category_section(o: &mut String, s: &TraceSummary) {
    let multi = s.ranks.len() > 1;
    let per_rank = |o: &mut String, f: &dyn Fn(&Breakdown) -> f64| {
        if multi {
            for r in &s.ranks {
                let _ = write!(o, " {:>11}", us(f(&r.breakdown)));
            }
        }
        let _ = writeln!(o);
    };
    let _ = write!(
        o,
        "{:<14} {:>11} {:>7} {:>11}",
        "category", "time µs", "share", "busy µs"
    );
    if multi {
        for r in &s.ranks {
            let _ = write!(o, " {:>11}", format!("rank {} µs", r.rank));
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{}",
        "-".repeat(46 + if multi { 12 * s.ranks.len() } else { 0 })
    );
    for e in s.breakdown.entries() {
        let _ = write!(
            o,
            "{:<14} {:>11} {:>6.1}% {:>11}",
            e.category.name(),
            us(e.time_us),
            e.share * 100.0,
            us(e.busy_us)
        );
        per_rank(o, &|b| b.time(e.category));
    }
    let _ = write!(
        o,
        "{:<14} {:>11} {:>6.1}% {:>11}",
        "step (mean)",
        us(s.breakdown.step_time_us),
        100.0,
        ""
    );
    per_rank(o, &|b| b.step_time_us);
    if multi {
        for (label, f) in [
            (
                "comm wait",
                (|b: &Breakdown| b.comm_wait_us) as fn(&Breakdown) -> f64,
            ),
            ("comm transfer", |b: &Breakdown| b.comm_transfer_us),
        ] {
            let _ = write!(
                o,
                "{:<14} {:>11} {:>7} {:>11}",
                label,
                us(f(&s.breakdown)),
                "",
                ""
            );
            per_rank(o, &f);
        }
    }
    let _ = writeln!(o, "(exclusive time per step: overlapping kernels go to the first category in this list; busy = union of the category's kernels)");
}

/// Communication (busy, exposed, wait, transfer), GPU idle and the unclassified kernels.
fn totals_section(o: &mut String, s: &TraceSummary) {
    let b = &s.breakdown;
    let c = Category::Communication.index();
    let how = match s.alignment.method {
        AlignMethod::SingleRank => "one rank: not split, all counted as transfer".to_string(),
        m => format!(
            "{} collectives aligned across {} ranks ({}){}",
            s.alignment.aligned,
            s.ranks.len(),
            if m == AlignMethod::PerStep {
                "n-th of each step"
            } else {
                "n-th of the trace"
            },
            if s.alignment.unmatched > 0 {
                format!(", {} unmatched", s.alignment.unmatched)
            } else {
                String::new()
            }
        ),
    };
    let _ = writeln!(
        o,
        "Communication per step: {} µs busy = {} exposed + {} overlapped with compute; wait {} µs, transfer {} µs ({how})",
        us(b.busy_us[c]),
        us(b.exclusive_us[c]),
        us(b.comm_overlapped_us()),
        us(b.comm_wait_us),
        us(b.comm_transfer_us)
    );
    let g = mean_gaps(s);
    let _ = writeln!(
        o,
        "GPU idle per step: {} µs = {} launch gaps (GPU waited for the CPU) + {} other; largest gap {} µs",
        us(g.idle_us),
        us(g.launch_gap_us),
        us(g.other_gap_us),
        us(g.largest_us)
    );
    let _ = writeln!(
        o,
        "Unclassified kernels: {:.2}% of kernel time ({} µs; counted as the rules' fallback category)",
        s.unclassified_share() * 100.0,
        us(s.unclassified_us)
    );
    for u in &s.unclassified {
        let _ = writeln!(
            o,
            "  {:>11} µs {:>6}×  {}",
            us(u.time_us),
            u.count,
            super::units::clip(&u.name, 110)
        );
    }
}

//! Reports of `decodesim sweep`: one CSV row per scenario, JSON, or a short summary.

use super::units::{grouped, us};
use crate::category::Category;
use crate::whatif::sweep::{Row, Sweep};
use rayon::prelude::*;
use std::fmt::Write;

pub fn csv_header() -> String {
    let mut h = String::from("model,system,calibration,batch,context,nccl_proto,nccl_algo,cuda_graphs,draft_tokens,mean_acceptance_length,step_time_us,tokens_per_s,tokens_per_s_per_user,pareto");
    for c in Category::ALL {
        let _ = write!(h, ",{}_busy_us", c.name());
    }
    h.push('\n');
    h
}

fn csv_row(out: &mut String, s: &Sweep, r: &Row) {
    let _ = write!(
        out,
        "{},{},{},{},{},{},{},{},{},{:.4},{:.3},{:.3},{:.4},{}",
        s.model,
        s.system,
        s.calibration,
        r.batch,
        r.context,
        r.proto.name(),
        r.algo.name(),
        if r.cuda_graphs { "on" } else { "off" },
        r.draft_tokens,
        r.mean_acceptance_length,
        r.step_time_us,
        r.tokens_per_s,
        r.tokens_per_s_per_user,
        r.pareto
    );
    for b in r.busy_us {
        let _ = write!(out, ",{b:.3}");
    }
    out.push('\n');
}

/// The CSV, built in parallel chunks.
pub fn to_csv(s: &Sweep, pareto_only: bool) -> String {
    let parts: Vec<String> = s
        .rows
        .par_chunks(1024)
        .map(|chunk| {
            let mut out = String::with_capacity(chunk.len() * 220);
            for r in chunk.iter().filter(|r| !pareto_only || r.pareto) {
                csv_row(&mut out, s, r);
            }
            out
        })
        .collect();
    let mut out = csv_header();
    out.reserve(parts.iter().map(String::len).sum());
    for p in parts {
        out.push_str(&p);
    }
    out
}

pub fn to_json(s: &Sweep, pareto_only: bool) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = s
        .rows
        .iter()
        .filter(|r| !pareto_only || r.pareto)
        .map(|r| {
            let mut busy = serde_json::Map::new();
            for c in Category::ALL {
                busy.insert(c.name().into(), r.busy_us[c.index()].into());
            }
            serde_json::json!({
                "batch": r.batch, "context": r.context, "nccl_proto": r.proto.name(),
                "nccl_algo": r.algo.name(), "cuda_graphs": r.cuda_graphs,
                "draft_tokens": r.draft_tokens, "mean_acceptance_length": r.mean_acceptance_length,
                "step_time_us": r.step_time_us, "tokens_per_s": r.tokens_per_s,
                "tokens_per_s_per_user": r.tokens_per_s_per_user, "pareto": r.pareto,
                "busy_us": busy,
            })
        })
        .collect();
    serde_json::json!({
        "model": s.model, "system": s.system, "calibration": s.calibration, "rows": rows,
    })
}

fn describe(r: &Row) -> String {
    format!(
        "batch {} ctx {} {}/{} graphs {} k {}",
        r.batch,
        r.context,
        r.proto.name(),
        r.algo.name(),
        if r.cuda_graphs { "on" } else { "off" },
        r.draft_tokens
    )
}

/// A short summary instead of one line per scenario.
pub fn summary(s: &Sweep, wall_s: f64) -> String {
    let n = s.rows.len();
    let mut out = format!(
        "sweep: {} scenarios of {} on {} (calibration {}) in {:.3} s ({} scenarios/s)\n",
        grouped(n as f64, 0),
        s.model,
        s.system,
        s.calibration,
        wall_s,
        grouped(n as f64 / wall_s.max(1e-9), 0)
    );
    let best =
        |f: &dyn Fn(&Row) -> f64| s.rows.iter().max_by(|a, b| f(a).total_cmp(&f(b))).copied();
    if let Some(r) = best(&|r| r.tokens_per_s) {
        let _ = writeln!(
            out,
            "most tokens/s in total:  {} tok/s ({} per user), step {} us: {}",
            grouped(r.tokens_per_s, 1),
            grouped(r.tokens_per_s_per_user, 1),
            us(r.step_time_us),
            describe(&r)
        );
    }
    if let Some(r) = best(&|r| r.tokens_per_s_per_user) {
        let _ = writeln!(
            out,
            "most tokens/s per user:  {} tok/s per user ({} in total), step {} us: {}",
            grouped(r.tokens_per_s_per_user, 1),
            grouped(r.tokens_per_s, 1),
            us(r.step_time_us),
            describe(&r)
        );
    }
    let mut front: Vec<&Row> = s.rows.iter().filter(|r| r.pareto).collect();
    front.sort_by(|a, b| b.tokens_per_s_per_user.total_cmp(&a.tokens_per_s_per_user));
    let _ = writeln!(
        out,
        "pareto front (total vs per-user tokens/s): {} scenarios; one in {} shown",
        front.len(),
        front.len().div_ceil(12).max(1)
    );
    let _ = writeln!(
        out,
        "  {:>12}  {:>12}  scenario",
        "tok/s/user", "tok/s total"
    );
    for r in front.iter().step_by(front.len().div_ceil(12).max(1)) {
        let _ = writeln!(
            out,
            "  {:>12}  {:>12}  {}",
            grouped(r.tokens_per_s_per_user, 1),
            grouped(r.tokens_per_s, 1),
            describe(r)
        );
    }
    out.push_str("(--format csv|json for every row, --pareto for the front only)\n");
    out
}

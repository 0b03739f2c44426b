//! The text summary of a sweep: what was swept, the best rows, the Pareto front, and with
//! `--intervals` the decision rows' ranges.

use super::csv_header;
use super::digits::onoff;
use super::rows::Listed;
use crate::report::units::{grouped, us};
use crate::whatif::sweep::{Meta, Row, Summary};
use crate::whatif::uncertainty::Interval;

/// The CSV header of `--pareto --intervals`: the rows' columns, then tokens/s p5 and p95.
pub fn csv_header_with_intervals() -> String {
    let mut h = csv_header();
    h.pop();
    h.push_str(",tokens_per_s_p5,tokens_per_s_p95\n");
    h
}

/// The decisions' intervals under the summary: tokens/s p5–p95 of the best rows and the front.
pub(super) fn summary_intervals(
    s: &Summary,
    listed: &Listed,
    interval_of: &dyn Fn(&Row) -> Option<Interval>,
) -> String {
    use std::fmt::Write;
    let mut out =
        String::from("tokens/s p5 .. p95 (Monte Carlo over the calibration's uncertainty):\n");
    let mut line = |label: &str, r: &Row| {
        if let Some(i) = interval_of(r) {
            let _ = writeln!(
                out,
                "  {label:<22} {} .. {} tok/s (p50 {}): {}",
                grouped(i.p5, 1),
                grouped(i.p95, 1),
                grouped(i.p50, 1),
                describe(r, listed)
            );
        }
    };
    if let Some(r) = &s.best_total {
        line("most tokens/s in total", r);
    }
    if let Some(r) = &s.best_per_user {
        line("most tokens/s per user", r);
    }
    for r in &s.front {
        line("pareto front", r);
    }
    out
}

/// A row's settings as the summary names them; `listed` the grid's layout settings.
pub(super) fn describe(r: &Row, listed: &Listed) -> String {
    let mut pp = if r.pp > 1 {
        format!("pp {} ", r.pp)
    } else {
        String::new()
    };
    if r.dp > 1 {
        pp.push_str(&format!("dp {} ", r.dp));
    }
    pp.push_str(listed.words(r));
    format!(
        "{pp}batch {} ctx {} {}/{} graphs {} k {}",
        r.batch,
        r.context,
        r.proto.name(),
        r.algo.name(),
        onoff(r.cuda_graphs),
        r.draft_tokens
    )
}

/// A short summary instead of one line per scenario.
pub fn summary(meta: &Meta, s: &Summary, wall_s: f64) -> String {
    let listed = Listed::of(meta);
    let mut out = summary_head(meta, s, wall_s);
    summary_best(&mut out, s, &listed);
    summary_front(&mut out, s, &listed);
    out.push_str("(--format csv|json for every row, --pareto for the front only)\n");
    out
}

/// The suffix of a row that was ranked although it does not fit.
fn fit_note(r: &Row) -> &'static str {
    if r.fits {
        ""
    } else {
        " (does NOT fit in memory)"
    }
}

/// The summary's first lines: what ran, how many scenarios fit, how many could not be priced.
fn summary_head(meta: &Meta, s: &Summary, wall_s: f64) -> String {
    use std::fmt::Write;
    let n = s.scenarios;
    let mut out = format!(
        "sweep: {} scenarios of {} on {} (calibration {}) in {:.3} s ({} scenarios/s)\n",
        grouped(n as f64, 0),
        meta.model,
        meta.system,
        meta.calibration,
        wall_s,
        grouped(n as f64 / wall_s.max(1e-9), 0)
    );
    let _ = writeln!(
        out,
        "memory: {} of {} scenarios fit (--gpu-memory-utilization; vLLM's KV accounting){}",
        grouped(s.fitting as f64, 0),
        grouped(n as f64, 0),
        if meta.include_infeasible {
            "; --include-infeasible: scenarios that do not fit are ranked too"
        } else {
            "; only those are ranked"
        }
    );
    if s.unpriced > 0 {
        let _ = writeln!(
            out,
            "warning: {} scenarios could not be priced (step time NaN in the rows)",
            grouped(s.unpriced as f64, 0)
        );
    }
    out
}

/// The best scenario by total tokens/s and the best per user.
fn summary_best(out: &mut String, s: &Summary, listed: &Listed) {
    use std::fmt::Write;
    match s.best_total {
        Some(r) => {
            let _ = writeln!(
                out,
                "most tokens/s in total:  {} tok/s ({} per user), step {} µs: {}{}",
                grouped(r.tokens_per_s, 1),
                grouped(r.tokens_per_s_per_user, 1),
                us(r.step_time_us),
                describe(&r, listed),
                fit_note(&r)
            );
        }
        None => out.push_str(
            "no scenario fits in memory: nothing to rank (a larger --gpu-memory-utilization, smaller batches or contexts, FP8 KV; --include-infeasible ranks them anyway)\n",
        ),
    }
    if let Some(r) = s.best_per_user {
        let _ = writeln!(
            out,
            "most tokens/s per user:  {} tok/s per user ({} in total), step {} µs: {}{}",
            grouped(r.tokens_per_s_per_user, 1),
            grouped(r.tokens_per_s, 1),
            us(r.step_time_us),
            describe(&r, listed),
            fit_note(&r)
        );
    }
}

/// The Pareto front of total against per-user tokens/s, at most about a dozen rows of it.
fn summary_front(out: &mut String, s: &Summary, listed: &Listed) {
    use std::fmt::Write;
    let front = &s.front;
    let every = front.len().div_ceil(12).max(1);
    let _ = writeln!(
        out,
        "pareto front (total vs per-user tokens/s): {} scenarios; one in {} shown",
        front.len(),
        every
    );
    let _ = writeln!(
        out,
        "  {:>12}  {:>12}  scenario",
        "tok/s/user", "tok/s total"
    );
    for r in front.iter().step_by(every) {
        let _ = writeln!(
            out,
            "  {:>12}  {:>12}  {}{}",
            grouped(r.tokens_per_s_per_user, 1),
            grouped(r.tokens_per_s, 1),
            describe(r, listed),
            fit_note(r)
        );
    }
}

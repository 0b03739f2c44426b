//! The reports of `decodesim calibrate`: the fit table, and the single-anchor adjustment.

use super::table::{pct, Table};
use crate::calibrate::from_trace::TraceCalibration;
use crate::calibrate::CalibrationResult;
use std::path::Path;

pub(crate) fn render_fit(r: &CalibrationResult, out: &Path, verbose: bool) -> String {
    let mut t = Table::new(&[
        "section",
        "points",
        "R²",
        "median |err|",
        "max |err|",
        "estimates (± 95% CI)",
    ]);
    for q in &r.quality {
        let est: Vec<String> = q
            .params
            .iter()
            .map(|(n, v, ci)| {
                if ci.is_finite() && *ci > 0.0 {
                    format!("{n} {v:.4} ± {ci:.4}")
                } else {
                    format!("{n} {v:.4}")
                }
            })
            .collect();
        t.row(vec![
            q.section.clone(),
            q.points.to_string(),
            format!("{:.4}", q.r2),
            pct(q.median_abs_rel_err),
            pct(q.max_abs_rel_err),
            est.join("; "),
        ]);
    }
    let p = &r.profile.profile;
    let mut out_text = String::new();
    for mark in &p.poor_fit {
        out_text.push_str(&format!(
            "POOR FIT (written because of --allow-poor-fit): {mark}\n"
        ));
    }
    out_text.push_str(&format!("calibration '{}' for {}\n", p.name, p.gpu));
    out_text.push_str(&t.render());
    for q in &r.quality {
        for n in &q.notes {
            out_text.push_str(&format!("note: {}: {n}\n", q.section));
        }
    }
    for w in &r.warnings {
        out_text.push_str(&format!("warning: {}\n", crate::units::one_line(w)));
    }
    out_text.push_str(&provenance_line(&p.provenance, verbose));
    out_text.push_str(&format!(
        "\nprofile written to {}\n",
        super::units::path(out)
    ));
    out_text
}

/// The single-anchor report: the step before and after, the factors, the per-category table.
pub(crate) fn render_from_trace(r: &TraceCalibration, excluded: usize, notes: &[String]) -> String {
    let mut text = String::new();
    if let Some(why) = &r.poor {
        text.push_str(&format!(
            "POOR FIT (written because of --allow-poor-fit): {why}\n"
        ));
    }
    text.push_str(&format!(
        "single-anchor calibration of '{}' to {}\n",
        r.base, r.anchor_name
    ));
    for n in notes {
        text.push_str(&format!("{n}\n"));
    }
    if excluded > 0 {
        text.push_str(&format!(
            "{excluded} start-up step(s) longer than twice the median step left out\n"
        ));
    }
    text.push_str(&format!(
        "step time: measured {} µs, predicted before {} µs ({:+.1}%), after {} µs ({:+.1}%)\nfactors applied (time multipliers, or values set):\n",
        super::units::us(r.measured.step_time_us),
        super::units::us(r.fit.before.step_time_us()),
        r.before.step_error_pct().unwrap_or(f64::NAN),
        super::units::us(r.fit.after.step_time_us()),
        r.after.step_error_pct().unwrap_or(f64::NAN),
    ));
    for (k, f) in &r.fit.factors {
        if k.ends_with("_us") {
            text.push_str(&format!("  {k:<26} = {f:.1} µs\n"));
        } else {
            text.push_str(&format!("  {k:<26} x{f:.3}\n"));
        }
    }
    text.push_str(&super::comparison::to_table(&r.after));
    for n in &r.fit.notes {
        text.push_str(&format!("note: {n}\n"));
    }
    for w in &r.fit.warnings {
        text.push_str(&format!("warning: {w}\n"));
    }
    text.push_str(&format!(
        "\nprofile written to {}\n",
        super::units::path(&r.out)
    ));
    text
}

/// The `provenance:` line of a calibration report: its one-line summary, or with `verbose` the
/// full text (every table, every fallback section).
pub(crate) fn provenance_line(provenance: &str, verbose: bool) -> String {
    if verbose {
        format!("provenance: {}\n", crate::units::one_line(provenance))
    } else {
        format!(
            "provenance: {} (--verbose for the full provenance)\n",
            crate::units::provenance_summary(provenance)
        )
    }
}

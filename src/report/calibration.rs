//! The fit report of `decodesim calibrate`.

use super::table::{pct, Table};
use crate::calibrate::CalibrationResult;

pub fn render_fit(r: &CalibrationResult) -> String {
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
    let mut out = format!(
        "calibration '{}' for {}\n",
        r.profile.profile.name, r.profile.profile.gpu
    );
    out.push_str(&t.render());
    for q in &r.quality {
        for n in &q.notes {
            out.push_str(&format!("note: {}: {n}\n", q.section));
        }
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&format!("provenance: {}\n", r.profile.profile.provenance));
    out
}

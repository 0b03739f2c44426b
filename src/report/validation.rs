//! The report of `decodesim validate`.

use super::table::{num, pct, Table};
use crate::validate::{Summary, Validation};

fn signed_pct(e: f64) -> String {
    format!("{:+.1}%", e * 100.0)
}

fn summary_line(label: &str, s: &Summary) -> String {
    format!(
        "{label}: {} configurations; |step error| median {} worst {} ({}); per-category share error median {:.1} pp\n",
        s.cases,
        pct(s.median_abs_step_error),
        pct(s.worst_abs_step_error),
        s.worst_case,
        s.median_share_error * 100.0
    )
}

pub fn render(v: &Validation) -> String {
    let mut out = format!(
        "validation against captured traces, calibration {}\n\n",
        v.profile
    );
    let mut t = Table::new(&[
        "configuration",
        "ranks",
        "layers",
        "measured (us)",
        "predicted (us)",
        "error",
        "share err mean",
        "share err max",
        "wait share meas/pred",
    ]);
    for r in &v.results {
        t.row(vec![
            r.case.name.clone(),
            r.ranks.to_string(),
            r.layers.to_string(),
            num(r.measured_step_us, 1),
            num(r.predicted_step_us, 1),
            signed_pct(r.step_error),
            format!("{:.1} pp", r.mean_share_error * 100.0),
            format!(
                "{:.1} pp ({})",
                r.max_share_error * 100.0,
                r.max_share_category
            ),
            format!(
                "{} / {}",
                pct(r.measured_wait_share),
                pct(r.predicted_wait_share)
            ),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    out.push_str(&summary_line("summary", &v.summary));
    if let Some(a) = &v.anchor {
        out.push_str(&format!(
            "\nsingle anchor: calibrated from {} only, then predicted\n",
            a.anchor
        ));
        let mut t = Table::new(&[
            "configuration",
            "batch",
            "measured (us)",
            "predicted (us)",
            "error",
        ]);
        for (name, batch, m, p, e) in &a.results {
            t.row(vec![
                name.clone(),
                batch.to_string(),
                num(*m, 1),
                num(*p, 1),
                signed_pct(*e),
            ]);
        }
        out.push_str(&t.render());
        out.push('\n');
        if let Some(b) = &a.band {
            out.push_str(&summary_line(
                "anchor, same context and setting, batch within 16x",
                b,
            ));
        }
        out.push_str(&summary_line("anchor, all configurations", &a.all));
    }
    out
}

//! The report of `decodesim validate`: a terminal table, and CSV (JSON is the serialized
//! [`Validation`]).

use super::table::{pct, Table};
use crate::error::{Error, Result};
use crate::units::{path, us};
use crate::validate::{IntervalCheck, Summary, Validation};
use std::collections::BTreeMap;

fn signed_pct(e: f64) -> String {
    if e.is_finite() {
        format!("{:+.1}%", e * 100.0)
    } else {
        "-".into()
    }
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

/// What the traces showed of their scenarios, each distinct line once with its count.
fn checks(v: &Validation) -> String {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &v.results {
        for c in &r.checks {
            *seen.entry(c.as_str()).or_default() += 1;
        }
    }
    let mut out =
        String::from("the traces show (checked against each configuration's scenario):\n");
    for (line, n) in seen {
        out.push_str(&format!("  {line} [{n} of {}]\n", v.results.len()));
    }
    out
}

pub(crate) fn render(v: &Validation) -> String {
    let mut out = format!(
        "validation against captured traces, calibration {}\n\n",
        path(std::path::Path::new(&v.profile))
    );
    out.push_str(&checks(v));
    out.push_str(&measured_line(v));
    out.push('\n');
    out.push_str(&results_table(v).render());
    out.push('\n');
    out.push_str(&summary_line("summary", &v.summary));
    if let Some(iv) = &v.intervals {
        out.push_str(&intervals(iv));
    }
    if let Some(a) = &v.anchor {
        out.push_str(&format!(
            "\nsingle anchor: calibrated from {} only, then predicted\n",
            a.anchor
        ));
        let mut t = Table::new(&[
            "configuration",
            "batch",
            "measured (µs)",
            "predicted (µs)",
            "error",
        ]);
        for (name, batch, m, p, e) in &a.results {
            t.row(vec![
                name.clone(),
                batch.to_string(),
                us(*m),
                us(*p),
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

/// One row per configuration: its step measured (and profiled, where replays give the
/// measured one), predicted, the error, the categories' share errors and the waiting.
fn results_table(v: &Validation) -> Table {
    let replays = v.results.iter().any(|r| r.from_replays);
    let mut head = vec!["configuration", "ranks", "layers", "measured (µs)"];
    if replays {
        head.push("profiled (µs)");
    }
    head.extend([
        "predicted (µs)",
        "error",
        "share err mean",
        "share err max",
        "wait share meas/pred",
    ]);
    let mut t = Table::new(&head);
    for r in &v.results {
        let mut row = vec![
            r.case.name.clone(),
            r.ranks.to_string(),
            r.layers.to_string(),
            us(r.measured_step_us),
        ];
        if replays {
            row.push(us(r.profiled_step_us));
        }
        t.row(
            row.into_iter()
                .chain([
                    us(r.predicted_step_us),
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
                ])
                .collect(),
        );
    }
    t
}

/// Which step each prediction is held against: unprofiled replays where the step-times file
/// gives them, else the trace's profiled step.
fn measured_line(v: &Validation) -> String {
    let n = v.results.iter().filter(|r| r.from_replays).count();
    match &v.step_times {
        Some(f) => {
            let mut line = format!(
                "measured: the unprofiled step of {f} ({n} of {} configurations; the rest their trace's); profiled: the trace's step, which the profiler lengthens (the categories' shares come from it)\n",
                v.results.len()
            );
            if !v.step_times_unmatched.is_empty() {
                line += &format!(
                    "  {f} names configurations with no traces here (misspelt?): {}\n",
                    v.step_times_unmatched.join(", ")
                );
            }
            line
        }
        None => "measured: each trace's profiled step (no step_times.csv beside the traces: the profiler lengthens short steps)\n".into(),
    }
}

/// The intervals against the measured steps: one row per configuration, then coverage and width.
fn intervals(iv: &IntervalCheck) -> String {
    let mut out = format!(
        "\nintervals: p5 / p50 / p95 of each predicted step over {} draws (the profile's sources, and the model-form error of the other {} configurations: leave-one-out)\n",
        iv.draws,
        iv.cases.len().saturating_sub(1)
    );
    let mut t = Table::new(&[
        "configuration",
        "measured (µs)",
        "p5 (µs)",
        "p50 (µs)",
        "p95 (µs)",
        "width",
        "inside",
    ]);
    for c in &iv.cases {
        t.row(vec![
            c.configuration.clone(),
            us(c.measured),
            us(c.p5),
            us(c.p50),
            us(c.p95),
            pct(c.width),
            if c.inside { "yes" } else { "no" }.into(),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    let inside = iv.cases.iter().filter(|c| c.inside).count();
    out.push_str(&format!(
        "coverage: {inside} of {} measured steps inside p5–p95 ({}); median width (p95 − p5) / p50 {}\n",
        iv.cases.len(),
        pct(iv.coverage),
        pct(iv.median_width)
    ));
    let m = &iv.model_error;
    let fams: Vec<String> = m
        .families
        .iter()
        .map(|(n, rms, _, _)| format!("{n} {rms:.3}"))
        .collect();
    out.push_str(&format!(
        "model-form error over all {} configurations (σ of ln(measured / predicted)): {}; idle σ {:.1} µs per step\n",
        m.points,
        fams.join(", "),
        m.idle_rms_us
    ));
    out
}

/// The CSV's columns (`to_csv`).
const CSV_COLUMNS: [&str; 23] = [
    "configuration",
    "batch",
    "context",
    "setting",
    "ranks",
    "layers",
    "excluded_steps",
    "measured_step_us",
    "measured_from",
    "profiled_step_us",
    "predicted_step_us",
    "step_error",
    "mean_share_error",
    "max_share_error",
    "max_share_category",
    "measured_wait_share",
    "predicted_wait_share",
    "anchor_predicted_step_us",
    "anchor_step_error",
    "interval_p5_us",
    "interval_p50_us",
    "interval_p95_us",
    "inside_interval",
];

/// One row per configuration, raw numbers (µs, fractions); the single-anchor prediction when
/// there is one, then the step's interval and whether the measured step lies in it (empty with
/// `--draws 0`).
pub(crate) fn to_csv(v: &Validation) -> Result<String> {
    let anchor: BTreeMap<&str, (f64, f64)> = v
        .anchor
        .iter()
        .flat_map(|a| a.results.iter())
        .map(|(n, _, _, p, e)| (n.as_str(), (*p, *e)))
        .collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let err = |e: csv::Error| Error::WriteReport {
        what: "CSV report",
        message: e.to_string(),
    };
    w.write_record(CSV_COLUMNS).map_err(err)?;
    let intervals: BTreeMap<&str, &crate::validate::CaseInterval> = v
        .intervals
        .iter()
        .flat_map(|iv| iv.cases.iter())
        .map(|c| (c.configuration.as_str(), c))
        .collect();
    for r in &v.results {
        let (ap, ae) = anchor
            .get(r.case.name.as_str())
            .map(|&(p, e)| (p.to_string(), e.to_string()))
            .unwrap_or_default();
        let [p5, p50, p95, inside] = intervals
            .get(r.case.name.as_str())
            .map(|c| {
                [
                    c.p5.to_string(),
                    c.p50.to_string(),
                    c.p95.to_string(),
                    c.inside.to_string(),
                ]
            })
            .unwrap_or_default();
        w.write_record([
            r.case.name.clone(),
            r.case.batch.to_string(),
            r.case.context.to_string(),
            r.case.setting.clone(),
            r.ranks.to_string(),
            r.layers.to_string(),
            r.excluded_steps.to_string(),
            r.measured_step_us.to_string(),
            if r.from_replays { "replays" } else { "trace" }.to_string(),
            r.profiled_step_us.to_string(),
            r.predicted_step_us.to_string(),
            r.step_error.to_string(),
            r.mean_share_error.to_string(),
            r.max_share_error.to_string(),
            r.max_share_category.to_string(),
            r.measured_wait_share.to_string(),
            r.predicted_wait_share.to_string(),
            ap,
            ae,
            p5,
            p50,
            p95,
            inside,
        ])
        .map_err(err)?;
    }
    let bytes = w.into_inner().map_err(|e| Error::WriteReport {
        what: "CSV report",
        message: e.to_string(),
    })?;
    String::from_utf8(bytes).map_err(|e| Error::Encoding {
        what: "CSV report",
        message: e.to_string(),
    })
}

//! Predicted vs measured output (`decodesim compare`): terminal table, JSON and CSV.

use crate::accounting::compare::Comparison;
use crate::units::us;
use serde_json::{json, Value};
use std::fmt::Write;

fn pct(x: Option<f64>) -> String {
    match x {
        Some(v) => format!("{:+.1}%", v * 100.0),
        None => "-".into(),
    }
}

/// `us` with an explicit sign, for errors.
fn signed_us(v: f64) -> String {
    if v > 0.0 {
        format!("+{}", us(v))
    } else {
        us(v)
    }
}

pub(crate) fn to_table(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<14} {:>12} {:>12} {:>8} {:>8} {:>11} {:>9}",
        "category", "predicted µs", "measured µs", "pred %", "meas %", "error µs", "error %"
    );
    let _ = writeln!(o, "{}", "-".repeat(80));
    for r in &c.rows {
        let _ = writeln!(
            o,
            "{:<14} {:>12} {:>12} {:>7.1}% {:>7.1}% {:>11} {:>9}",
            r.category.name(),
            us(r.predicted_us),
            us(r.measured_us),
            r.predicted_share * 100.0,
            r.measured_share * 100.0,
            signed_us(r.abs_error_us),
            pct(r.rel_error)
        );
    }
    let _ = writeln!(o, "{}", "-".repeat(80));
    let _ = writeln!(
        o,
        "{:<14} {:>12} {:>12} {:>8} {:>8} {:>11} {:>9}",
        "step",
        us(c.predicted_step_us),
        us(c.measured_step_us),
        "",
        "",
        signed_us(c.step_abs_error_us),
        pct(c.step_rel_error)
    );
    let _ = writeln!(
        o,
        "communication wait: predicted {} µs, measured {} µs; transfer: predicted {} µs, measured {} µs",
        us(c.predicted_comm_wait_us),
        us(c.measured_comm_wait_us),
        us(c.predicted_comm_transfer_us),
        us(c.measured_comm_transfer_us)
    );
    o
}

pub(crate) fn to_json(c: &Comparison) -> Value {
    json!({
        "step_time_us": {
            "predicted": c.predicted_step_us,
            "measured": c.measured_step_us,
            "abs_error": c.step_abs_error_us,
            "rel_error": c.step_rel_error,
        },
        "breakdown": c.rows,
        "comm": {
            "predicted_wait_us": c.predicted_comm_wait_us,
            "measured_wait_us": c.measured_comm_wait_us,
            "predicted_transfer_us": c.predicted_comm_transfer_us,
            "measured_transfer_us": c.measured_comm_transfer_us,
        },
    })
}

/// One row per category and a last `step` row; raw numbers, `rel_error` empty when nothing
/// was measured.
pub(crate) fn to_csv(c: &Comparison) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let rel = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
    // Writing to a Vec cannot fail, and every record has the header's length.
    let mut put = |rec: [String; 7]| {
        let _ = w.write_record(&rec);
    };
    put([
        "category",
        "predicted_us",
        "measured_us",
        "predicted_share",
        "measured_share",
        "abs_error_us",
        "rel_error",
    ]
    .map(String::from));
    for r in &c.rows {
        put([
            r.category.to_string(),
            r.predicted_us.to_string(),
            r.measured_us.to_string(),
            r.predicted_share.to_string(),
            r.measured_share.to_string(),
            r.abs_error_us.to_string(),
            rel(r.rel_error),
        ]);
    }
    put([
        "step".into(),
        c.predicted_step_us.to_string(),
        c.measured_step_us.to_string(),
        "1".into(),
        "1".into(),
        c.step_abs_error_us.to_string(),
        rel(c.step_rel_error),
    ]);
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

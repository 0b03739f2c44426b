//! Predicted vs measured output (`decodesim compare`): terminal table, JSON and CSV.

use crate::accounting::compare::Comparison;
use serde_json::{json, Value};
use std::fmt::Write;

fn pct(x: Option<f64>) -> String {
    match x {
        Some(v) => format!("{:+.1}%", v * 100.0),
        None => "-".into(),
    }
}

pub fn to_table(c: &Comparison) -> String {
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
            "{:<14} {:>12.1} {:>12.1} {:>7.1}% {:>7.1}% {:>+11.1} {:>9}",
            r.category.name(),
            r.predicted_us,
            r.measured_us,
            r.predicted_share * 100.0,
            r.measured_share * 100.0,
            r.abs_error_us,
            pct(r.rel_error)
        );
    }
    let _ = writeln!(o, "{}", "-".repeat(80));
    let _ = writeln!(
        o,
        "{:<14} {:>12.1} {:>12.1} {:>8} {:>8} {:>+11.1} {:>9}",
        "step",
        c.predicted_step_us,
        c.measured_step_us,
        "",
        "",
        c.step_abs_error_us,
        pct(c.step_rel_error)
    );
    let _ = writeln!(
        o,
        "communication wait: predicted {:.1} µs, measured {:.1} µs; transfer: predicted {:.1} µs, measured {:.1} µs",
        c.predicted_comm_wait_us,
        c.measured_comm_wait_us,
        c.predicted_comm_transfer_us,
        c.measured_comm_transfer_us
    );
    o
}

pub fn to_json(c: &Comparison) -> Value {
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

pub fn to_csv(c: &Comparison) -> String {
    let mut o = String::from(
        "category,predicted_us,measured_us,predicted_share,measured_share,abs_error_us,rel_error\n",
    );
    let rel = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
    for r in &c.rows {
        let _ = writeln!(
            o,
            "{},{:.3},{:.3},{:.6},{:.6},{:.3},{}",
            r.category,
            r.predicted_us,
            r.measured_us,
            r.predicted_share,
            r.measured_share,
            r.abs_error_us,
            rel(r.rel_error)
        );
    }
    let _ = writeln!(
        o,
        "step,{:.3},{:.3},1,1,{:.3},{}",
        c.predicted_step_us,
        c.measured_step_us,
        c.step_abs_error_us,
        rel(c.step_rel_error)
    );
    o
}

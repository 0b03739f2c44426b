//! Intervals in text: p5/p50/p95 lines and columns, and what-if verdicts.

use crate::units::us;
use crate::whatif::uncertainty::{ArmIntervals, Intervals, Uncertainty};

/// What was drawn, in one line ("nothing uncertain" when the intervals are the point).
fn sources_line(u: &Uncertainty) -> String {
    if u.is_empty() {
        return "nothing uncertain in this profile and scenario: the interval is the point".into();
    }
    let names: Vec<String> = u
        .sources
        .iter()
        .map(|s| match s.target {
            crate::whatif::uncertainty::Target::Idle => {
                format!("{} (σ {:.1} µs)", s.name, s.sigma)
            }
            _ => format!("{} (σ {:.3})", s.name, s.sigma),
        })
        .collect();
    format!("drawn: {}", names.join(", "))
}

/// The lines `simulate` adds under its table.
pub(crate) fn simulate_lines(iv: &Intervals, draws: usize, u: &Uncertainty) -> String {
    let (s, t) = (&iv.step_time_us, &iv.tokens_per_s);
    format!(
        "interval (p5 / p50 / p95 over {draws} draws): step {} / {} / {} µs, {:.1} / {:.1} / {:.1} tokens/s\n  {}\n",
        us(s.p5),
        us(s.p50),
        us(s.p95),
        t.p5,
        t.p50,
        t.p95,
        sources_line(u)
    )
}

/// One row per arm: tokens/s and speedup p5/p50/p95, and the verdict.
pub(crate) fn arms_table(
    title: &str,
    labels: &[String],
    arms: &[ArmIntervals],
    draws: usize,
) -> String {
    let w = labels.iter().map(|l| l.len()).max().unwrap_or(7).max(7);
    let mut o = format!(
        "\n{title} (p5 / p50 / p95 over {draws} paired draws; helps: speedup p5 > 1, hurts: p95 < 1):\n"
    );
    o.push_str(&format!(
        "{:<w$}  {:>9} {:>9} {:>9}  {:>7} {:>7} {:>7}  verdict\n",
        "variant", "tok/s p5", "p50", "p95", "x p5", "p50", "p95"
    ));
    for (l, a) in labels.iter().zip(arms) {
        let (t, x) = (&a.intervals.tokens_per_s, &a.speedup);
        o.push_str(&format!(
            "{:<w$}  {:>9.1} {:>9.1} {:>9.1}  {:>7.3} {:>7.3} {:>7.3}  {}\n",
            l,
            t.p5,
            t.p50,
            t.p95,
            x.p5,
            x.p50,
            x.p95,
            a.verdict().name()
        ));
    }
    o
}

//! Reports of `decodesim whatif`: the speculative-decoding study as a table, JSON or CSV.

use super::table::Table;
use super::units::{grouped, us};
use crate::whatif::spec_decode::{Crossover, SpecDecodeStudy};
use serde_json::{json, Value};

/// The JSON bars and notebooks read: `baseline`, `variants`, `best`, `scenario`,
/// `calibration` (as `simulate` writes them), `crossover`, and what was studied (`method`,
/// `draft`, `acceptance`, `acceptance_rate`: null unless given as a rate).
pub(crate) fn spec_decode_json(s: &SpecDecodeStudy) -> Value {
    let variants: Vec<Value> = s
        .variants
        .iter()
        .map(|v| {
            json!({
                "draft_tokens": v.draft_tokens,
                "draft_time_us": v.draft_time_us,
                "verify_time_us": v.verify_time_us,
                "step_time_us": v.step_time_us,
                "mean_acceptance_length": v.mean_acceptance_length,
                "tokens_per_s": v.tokens_per_s,
                "speedup": v.speedup,
                "fits": s.fits,
                "tpot_ms": {"p50": v.tpot_ms[0], "p90": v.tpot_ms[1], "p99": v.tpot_ms[2]},
            })
        })
        .collect();
    let best = s
        .best()
        .map(|b| json!({"draft_tokens": b.draft_tokens, "speedup": b.speedup, "fits": s.fits}))
        .unwrap_or(Value::Null);
    let crossover = s
        .crossover
        .as_ref()
        .map(|c| {
            json!({
                "last_paying_batch": c.last_paying_batch,
                "first_losing_batch": c.first_losing_batch,
                "max_fitting_batch": c.max_fitting_batch,
                "grid": c.grid.iter().zip(&c.speedups).zip(&c.fits).map(|(((b, k, sp), all), fits)| json!({
                    "batch": b,
                    "best_draft_tokens": k,
                    "speedup": sp,
                    "fits": fits,
                    "speedup_by_draft_tokens": c.draft_tokens.iter().zip(all)
                        .map(|(k, x)| json!({"draft_tokens": k, "speedup": x}))
                        .collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .unwrap_or(Value::Null);
    json!({
        "baseline": {
            "step_time_us": s.baseline_step_us(),
            "tokens_per_s": s.baseline_tokens_per_s(),
        },
        "method": s.method.name(),
        "draft": s.draft_source,
        "acceptance": s.acceptance,
        "acceptance_rate": s.acceptance_rate,
        "fits": s.fits,
        "max_fitting_batch": s.max_fitting_batch,
        "variants": variants,
        "best": best,
        "crossover": crossover,
        "scenario": super::simulation::scenario_json(&s.baseline),
        "calibration": super::simulation::calibration_json(&s.baseline),
    })
}

/// [`spec_decode_csv`] of one study; of several (a list of acceptance rates), the rows of each
/// under one header with a leading `acceptance` column.
pub(crate) fn spec_decode_csv_many(studies: &[SpecDecodeStudy]) -> String {
    if studies.len() == 1 {
        return spec_decode_csv(&studies[0]);
    }
    let mut out = String::new();
    for (i, s) in studies.iter().enumerate() {
        let label = s.acceptance.replace(',', ";");
        for (j, line) in spec_decode_csv(s).lines().enumerate() {
            match (i, j) {
                (0, 0) => out.push_str(&format!("acceptance,{line}\n")),
                (_, 0) => {}
                _ => out.push_str(&format!("\"{label}\",{line}\n")),
            }
        }
    }
    out
}

/// Speedup against the crossover grid: lines per k (`heatmap` false) or a k × batch heatmap,
/// one panel per study (acceptance). The steps were played on the full timeline.
pub fn plot_speedup(
    studies: &[SpecDecodeStudy],
    path: &std::path::Path,
    heatmap: bool,
) -> Result<(), super::plot::PlotError> {
    use super::plot::{PlotError, SpeedupChart, SpeedupPanel};
    let empty = || PlotError::Empty {
        path: path.to_path_buf(),
        message: "no crossover grid (give --crossover-batches)".into(),
    };
    let first = studies.first().ok_or_else(empty)?;
    let c0 = first.crossover.as_ref().ok_or_else(empty)?;
    let batches: Vec<u32> = c0.grid.iter().map(|g| g.0).collect();
    let mut panels = Vec::new();
    for s in studies {
        let c = s.crossover.as_ref().ok_or_else(empty)?;
        // speedups are [batch][k]; the chart wants [k][batch].
        let speedup = (0..c.draft_tokens.len())
            .map(|ki| c.speedups.iter().map(|row| row[ki]).collect())
            .collect();
        let best = c.grid.iter().max_by(|a, b| a.2.total_cmp(&b.2));
        let mut note = match best {
            Some((b, k, sp)) if *sp > 1.0 => format!("best {sp:.2}x (k = {k}, batch {b})"),
            _ => "pays at no batch".into(),
        };
        match (c.last_paying_batch, c.first_losing_batch) {
            (Some(b), Some(l)) => note.push_str(&format!("; pays up to batch {b}, not at {l}")),
            (Some(_), None) => note.push_str("; pays at every batch"),
            _ => {}
        }
        if c.fits.iter().any(|f| !f) {
            match c.max_fitting_batch {
                Some(m) => note.push_str(&format!("; above batch {m} does not fit")),
                None => note.push_str("; no batch fits"),
            }
        }
        let label = match s.acceptance.split_once(" (") {
            Some((head, _)) => head.to_string(),
            None => s.acceptance.clone(),
        };
        panels.push(SpeedupPanel {
            label,
            note,
            speedup,
        });
    }
    let sc = &first.baseline.scenario;
    let title = format!(
        "Speculative decoding ({}): {} on {}, TP={}",
        first.method.name(),
        sc.model.name,
        sc.system.name,
        sc.layout.tp,
    );
    let subtitle = format!(
        "{}x {} | context {} | CUDA graphs {} | NCCL {}/{} | calibration {}\nspeedup = tokens/s over the plain step at the same batch; every step played on the full {}-rank timeline (seed {})",
        sc.system.gpu_count,
        sc.system.gpu.display_name,
        sc.context,
        if sc.cuda_graphs { "on" } else { "off" },
        sc.nccl.algo,
        sc.nccl.proto,
        first.baseline.profile.profile.name,
        sc.layout.tp,
        sc.seed,
    );
    let chart = SpeedupChart {
        title: &title,
        subtitle: &subtitle,
        batches: &batches,
        draft_tokens: &c0.draft_tokens,
        panels: &panels,
    };
    if heatmap {
        super::plot::plot_speedup_heatmap(&chart, path)
    } else {
        super::plot::plot_speedup(&chart, path)
    }
}

/// One row per k (and a `k = 0` row for the baseline).
fn spec_decode_csv(s: &SpecDecodeStudy) -> String {
    let mut out = String::from("draft_tokens,draft_time_us,verify_time_us,host_time_us,step_time_us,mean_acceptance_length,tokens_per_s,tokens_per_s_per_user,speedup,tpot_p50_ms,tpot_p90_ms,tpot_p99_ms\n");
    let b = s.baseline_step_us();
    let batch = s.baseline.scenario.batch as f64;
    out.push_str(&format!(
        "0,0,{b},0,{b},1,{},{},1,{},{},{}\n",
        s.baseline_tokens_per_s(),
        s.baseline_tokens_per_s() / batch,
        b / 1e3,
        b / 1e3,
        b / 1e3
    ));
    for v in &s.variants {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{}\n",
            v.draft_tokens,
            v.draft_time_us,
            v.verify_time_us,
            v.host_time_us,
            v.step_time_us,
            v.mean_acceptance_length,
            v.tokens_per_s,
            v.tokens_per_s_per_user,
            v.speedup,
            v.tpot_ms[0],
            v.tpot_ms[1],
            v.tpot_ms[2]
        ));
    }
    out
}

pub(crate) fn spec_decode_table(s: &SpecDecodeStudy) -> String {
    let sc = &s.baseline.scenario;
    let mut out = format!(
        "speculative decoding: {} on {} ({}x {}), TP={}\nbatch {} x context {} | CUDA graphs {} | NCCL {}/{}\nmethod {} | draft {} | {}\ncalibration: {} ({})\n\n",
        sc.model.name,
        sc.system.name,
        sc.system.gpu_count,
        sc.system.gpu.display_name,
        sc.layout.tp,
        sc.batch,
        sc.context,
        if sc.cuda_graphs { "on" } else { "off" },
        sc.nccl.algo,
        sc.nccl.proto,
        s.method.name(),
        s.draft_source,
        s.acceptance,
        s.baseline.profile.profile.name,
        super::units::path(&s.baseline.profile.path),
    );
    out.push_str(&variants_table(s));
    out.push_str(&best_line(s));
    if let Some(c) = &s.crossover {
        out.push_str(&crossover_text(c));
    }
    if !s.warnings.is_empty() {
        out.push_str("\nwarnings\n");
        for w in &s.warnings {
            out.push_str(&format!("  - {}\n", crate::units::one_line(w)));
        }
    }
    out
}

/// The baseline and each k's draft, verify, host and step times, acceptance, tokens/s and
/// TPOT percentiles.
fn variants_table(s: &SpecDecodeStudy) -> String {
    let sc = &s.baseline.scenario;
    let mut t = Table::new(&[
        "k",
        "draft (µs)",
        "verify (µs)",
        "host (µs)",
        "step (µs)",
        "accept len",
        "tok/s/user",
        "tok/s total",
        "speedup",
        "TPOT p50 (ms)",
        "p90",
        "p99",
    ]);
    let batch = sc.batch as f64;
    let b = s.baseline_step_us();
    t.row(vec![
        "none".into(),
        "-".into(),
        us(b),
        "-".into(),
        us(b),
        "1.00".into(),
        grouped(s.baseline_tokens_per_s() / batch, 1),
        grouped(s.baseline_tokens_per_s(), 1),
        "1.00x".into(),
        grouped(b / 1e3, 2),
        grouped(b / 1e3, 2),
        grouped(b / 1e3, 2),
    ]);
    for v in &s.variants {
        t.row(vec![
            v.draft_tokens.to_string(),
            us(v.draft_time_us),
            us(v.verify_time_us),
            us(v.host_time_us),
            us(v.step_time_us),
            format!("{:.2}", v.mean_acceptance_length),
            grouped(v.tokens_per_s_per_user, 1),
            grouped(v.tokens_per_s, 1),
            format!("{:.2}x", v.speedup),
            grouped(v.tpot_ms[0], 2),
            grouped(v.tpot_ms[1], 2),
            grouped(v.tpot_ms[2], 2),
        ]);
    }
    t.render()
}

/// The best k and whether speculation pays (and fits) at the study's batch.
fn best_line(s: &SpecDecodeStudy) -> String {
    let Some(best) = s.best() else {
        return String::new();
    };
    let sc = &s.baseline.scenario;
    let fit = if s.fits {
        String::new()
    } else {
        format!(
            "; DOES NOT FIT: batch {} needs more memory than vLLM may use, {}",
            sc.batch,
            match s.max_fitting_batch {
                Some(m) => format!("at most {m} fit"),
                None => "not even batch 1 fits".into(),
            }
        )
    };
    format!(
        "\nbest: k = {} at {:.2}x ({}{fit})\n",
        best.draft_tokens,
        best.speedup,
        if best.speedup > 1.0 {
            "speculation pays"
        } else {
            "speculation does not pay at this batch"
        }
    )
}

/// Up to which batch speculation pays, with the best k at each batch simulated.
fn crossover_text(c: &Crossover) -> String {
    let mut out: String = match (c.last_paying_batch, c.first_losing_batch) {
        (Some(b), Some(l)) => {
            format!("crossover: speculation pays up to batch {b} and stops paying by batch {l}")
        }
        (Some(b), None) if c.fits.iter().any(|f| !f) => {
            format!("crossover: speculation pays at every batch simulated that fits (up to {b})")
        }
        (Some(b), None) => {
            format!("crossover: speculation pays at every batch simulated (up to {b})")
        }
        (None, Some(l)) => {
            format!("crossover: speculation does not pay at any batch simulated (from {l})")
        }
        (None, None) if !c.grid.is_empty() => "crossover: no batch simulated fits in memory".into(),
        (None, None) => "crossover: no batch simulated".into(),
    };
    if c.fits.iter().any(|f| !f) {
        match c.max_fitting_batch {
            Some(m) => out.push_str(&format!(
                "; batches above {m} do not fit in memory and are not counted"
            )),
            None => out.push_str("; not even batch 1 fits in memory"),
        }
    }
    out.push('\n');
    out.push_str("  batch  best k  speedup\n");
    for ((b, k, sp), fits) in c.grid.iter().zip(&c.fits) {
        let mark = if *fits { "" } else { "  does not fit" };
        out.push_str(&format!("  {b:>5}  {k:>6}  {sp:>6.2}x{mark}\n"));
    }
    out
}

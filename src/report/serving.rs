//! `decodesim serve`: the serving run's metrics as `vllm bench serve` prints them, one row
//! per concurrency, and a measured result's numbers beside the prediction (table, JSON, CSV).

use super::table::Table;
use super::units::{grouped, path};
use crate::calibrate::serving::{MeasuredServe, MeasuredStat};
use crate::cost::CalibrationProfile;
use crate::scenario::Scenario;
use crate::sim::serving::{ServeResult, Summary};
use crate::whatif::uncertainty::{Interval, ServeIntervals};
use serde_json::{json, Value};

/// One predicted run, with the measured result it replays when there is one.
#[derive(Debug, Clone)]
pub struct ServeRow {
    pub result: ServeResult,
    /// Where the result came from (`file line N`) and what it measured.
    pub measured: Option<(String, MeasuredServe)>,
    /// p5 / p50 / p95 of the headline metrics over draws of the prices (`--draws`).
    pub intervals: Option<ServeIntervals>,
}

/// Everything the report shows.
#[derive(Debug, Clone)]
pub struct ServeReport<'a> {
    pub scenario: &'a Scenario,
    pub profile: &'a CalibrationProfile,
    pub rows: Vec<ServeRow>,
}

fn ms(v: f64) -> String {
    grouped(v, if v < 100.0 { 2 } else { 1 })
}

fn stat_cells(s: &Summary) -> Vec<String> {
    vec![ms(s.mean_ms), ms(s.median_ms), ms(s.p99_ms)]
}

fn measured_cells(s: &Option<MeasuredStat>) -> Vec<String> {
    match s {
        Some(m) => vec![
            ms(m.mean_ms),
            ms(m.median_ms),
            m.p99_ms.map_or("-".into(), ms),
        ],
        None => vec!["-".into(); 3],
    }
}

pub fn render_table(r: &ServeReport) -> String {
    header(r) + &runs_table(r).render() + &interval_lines(r) + &steps_and_warnings(r)
}

/// One line per run with intervals: p5 – p95 of output tokens/s, mean TPOT and mean TTFT, and
/// whether a measured run's figures lie inside.
fn interval_lines(r: &ServeReport) -> String {
    let Some(n) = r.rows.iter().find_map(|x| x.intervals.map(|i| i.draws)) else {
        return String::new();
    };
    let mut out = format!(
        "
intervals: p5 – p95 over {n} draws of the step prices, the run's own steps replayed under each
"
    );
    let band =
        |i: &Interval, digits| format!("{} – {}", grouped(i.p5, digits), grouped(i.p95, digits));
    for row in &r.rows {
        let Some(iv) = &row.intervals else { continue };
        let inside = |i: &Interval, v: Option<f64>| match v {
            Some(v) if (i.p5..=i.p95).contains(&v) => " (measured inside)",
            Some(_) => " (measured outside)",
            None => "",
        };
        let m = row.measured.as_ref().map(|(_, m)| m);
        out += &format!(
            "  {} users{}: out tok/s {}{}; TPOT mean ms {}{}; TTFT mean ms {}{}{}\n",
            row.result.options.concurrency,
            row.measured
                .as_ref()
                .map_or(String::new(), |(o, _)| format!(" ({o})")),
            band(&iv.output_throughput, 1),
            inside(&iv.output_throughput, m.map(|m| m.output_throughput)),
            band(&iv.tpot_mean_ms, 2),
            inside(&iv.tpot_mean_ms, m.and_then(|m| m.tpot.map(|t| t.mean_ms))),
            band(&iv.ttft_mean_ms, 2),
            inside(&iv.ttft_mean_ms, m.and_then(|m| m.ttft.map(|t| t.mean_ms))),
            if iv.from_mean_step {
                " [every step drawn as the run's mean decode step]"
            } else {
                ""
            }
        );
    }
    out
}

/// The scenario, the run's settings and the profile.
fn header(r: &ServeReport) -> String {
    let s = r.scenario;
    let mut out = format!("decodesim serve: {}\n", super::simulation::headline(s));
    if let Some(first) = r.rows.first() {
        let o = &first.result.options;
        out += &format!(
            "random dataset: {} prompts{} | max_num_batched_tokens {} | max_num_seqs {} | CUDA graphs {} (FULL_AND_PIECEWISE) | NCCL {}/{} | seed {}\n",
            grouped(o.num_prompts as f64, 0),
            if r.rows.iter().any(|x| x.measured.is_some()) {
                String::new()
            } else {
                format!(
                    ", input {} + output {} tokens, range ratio {}",
                    o.input_len, o.output_len, o.range_ratio
                )
            },
            o.max_num_batched_tokens,
            o.max_num_seqs,
            if s.cuda_graphs { "on" } else { "off" },
            s.nccl.algo,
            s.nccl.proto,
            o.seed
        );
        out += &format!(
            "KV cache {} tokens | prices of {} bucketed step shapes (within {:.1}% of each step's own shape)\n",
            grouped(first.result.kv_cache_tokens as f64, 0),
            grouped(r.rows.iter().map(|x| x.result.shapes_priced).sum::<usize>() as f64, 0),
            100.0 / (2u64 << o.bucket_bits) as f64
        );
    }
    out += &format!(
        "calibration: {} ({})\n\n",
        r.profile.profile.name,
        path(&r.profile.path)
    );
    out
}

/// One row per run (and the measured and error rows of a replayed result).
fn runs_table(r: &ServeReport) -> Table {
    let mut t = Table::new(&[
        "users",
        "",
        "ISL",
        "OSL",
        "TTFT ms mean",
        "median",
        "p99",
        "TPOT ms mean",
        "median",
        "p99",
        "ITL ms mean",
        "median",
        "p99",
        "out tok/s",
        "per GPU",
        "req/s",
        "duration s",
    ])
    .align_left(&[1]);
    for row in &r.rows {
        let x = &row.result;
        let o = &x.options;
        let mut cells = vec![
            o.concurrency.to_string(),
            if row.measured.is_some() {
                "predicted"
            } else {
                ""
            }
            .to_string(),
            o.input_len.to_string(),
            o.output_len.to_string(),
        ];
        for st in [&x.ttft, &x.tpot, &x.itl] {
            cells.extend(stat_cells(st));
        }
        cells.extend([
            grouped(x.output_throughput, 1),
            grouped(x.output_throughput_per_gpu, 1),
            grouped(x.request_throughput, 3),
            grouped(x.duration_s, 1),
        ]);
        t.row(cells);
        if let Some((_, m)) = &row.measured {
            let mut cells = vec![
                String::new(),
                "measured".into(),
                String::new(),
                String::new(),
            ];
            for st in [&m.ttft, &m.tpot, &m.itl] {
                cells.extend(measured_cells(st));
            }
            cells.extend([
                grouped(m.output_throughput, 1),
                grouped(m.output_throughput / x.gpus.max(1) as f64, 1),
                m.request_throughput.map_or("-".into(), |v| grouped(v, 3)),
                m.duration_s.map_or("-".into(), |v| grouped(v, 1)),
            ]);
            t.row(cells);
            t.row(error_cells(x, m));
        }
    }
    t
}

/// Each run's steps by graph mode, its prefill per step and preemptions; the warnings.
fn steps_and_warnings(r: &ServeReport) -> String {
    let mut out = String::new();
    out += "\nsteps per run: full graph / piecewise (prefill) / no graph; mean prefill tokens per step; preemptions\n";
    for row in &r.rows {
        let x = &row.result;
        out += &format!(
            "  {} users{}: {} steps = {} / {} / {}; {:.1} prefill tokens per step; {} preemption(s)\n",
            x.options.concurrency,
            row.measured
                .as_ref()
                .map_or(String::new(), |(o, _)| format!(" ({o})")),
            grouped(x.steps as f64, 0),
            grouped(x.steps_full_graph as f64, 0),
            grouped(x.steps_piecewise as f64, 0),
            grouped(x.steps_eager as f64, 0),
            x.mean_prefill_tokens_per_step,
            x.preemptions
        );
    }
    let mut warnings: Vec<&String> = r.rows.iter().flat_map(|x| &x.result.warnings).collect();
    warnings.sort();
    warnings.dedup();
    if !warnings.is_empty() {
        out += "\nwarnings\n";
        for w in warnings {
            out += &format!("  - {w}\n");
        }
    }
    out
}

/// predicted / measured − 1 per cell, as a percentage.
fn error_cells(x: &ServeResult, m: &MeasuredServe) -> Vec<String> {
    let e = |p: f64, q: Option<f64>| match q {
        Some(q) if q > 0.0 => format!("{:+.1}%", 100.0 * (p / q - 1.0)),
        _ => "-".into(),
    };
    let mut cells = vec![String::new(), "error".into(), String::new(), String::new()];
    for (p, q) in [(&x.ttft, &m.ttft), (&x.tpot, &m.tpot), (&x.itl, &m.itl)] {
        cells.push(e(p.mean_ms, q.map(|q| q.mean_ms)));
        cells.push(e(p.median_ms, q.map(|q| q.median_ms)));
        cells.push(e(p.p99_ms, q.and_then(|q| q.p99_ms)));
    }
    cells.push(e(x.output_throughput, Some(m.output_throughput)));
    cells.push(String::new());
    cells.push(e(x.request_throughput, m.request_throughput));
    cells.push(e(x.duration_s, m.duration_s));
    cells
}

pub fn to_json(r: &ServeReport) -> Value {
    let s = r.scenario;
    json!({
        "scenario": {
            "model": s.model.name,
            "layers": s.model.num_layers,
            "system": s.system.name,
            "tp": s.layout.tp,
            "ep": s.layout.ep,
            "cuda_graphs": s.cuda_graphs,
            "kv_cache_dtype_bytes": s.kv_bytes,
        },
        "calibration": { "name": r.profile.profile.name, "path": path(&r.profile.path) },
        "runs": r.rows.iter().map(|row| json!({
            "predicted": row.result,
            "intervals": row.intervals,
            "measured": row.measured.as_ref().map(|(origin, m)| json!({ "origin": origin, "result": m })),
        })).collect::<Vec<_>>(),
    })
}

pub fn to_csv(r: &ServeReport) -> String {
    let mut out = String::from("concurrency,input_len,output_len,num_prompts,mean_ttft_ms,median_ttft_ms,p99_ttft_ms,mean_tpot_ms,median_tpot_ms,p99_tpot_ms,mean_itl_ms,median_itl_ms,p99_itl_ms,output_throughput,output_throughput_per_gpu,request_throughput,duration_s,measured_output_throughput,measured_mean_tpot_ms,output_throughput_p5,output_throughput_p95,mean_tpot_ms_p5,mean_tpot_ms_p95,mean_ttft_ms_p5,mean_ttft_ms_p95\n");
    for row in &r.rows {
        let x = &row.result;
        let o = &x.options;
        let (mo, mt) = match &row.measured {
            Some((_, m)) => (
                m.output_throughput.to_string(),
                m.tpot.map_or(String::new(), |t| t.mean_ms.to_string()),
            ),
            None => (String::new(), String::new()),
        };
        let iv = match &row.intervals {
            Some(i) => format!(
                "{:.2},{:.2},{:.3},{:.3},{:.3},{:.3}",
                i.output_throughput.p5,
                i.output_throughput.p95,
                i.tpot_mean_ms.p5,
                i.tpot_mean_ms.p95,
                i.ttft_mean_ms.p5,
                i.ttft_mean_ms.p95
            ),
            None => ",,,,,".into(),
        };
        out += &format!(
            "{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2},{:.2},{:.4},{:.3},{mo},{mt},{iv}\n",
            o.concurrency, o.input_len, o.output_len, o.num_prompts,
            x.ttft.mean_ms, x.ttft.median_ms, x.ttft.p99_ms,
            x.tpot.mean_ms, x.tpot.median_ms, x.tpot.p99_ms,
            x.itl.mean_ms, x.itl.median_ms, x.itl.p99_ms,
            x.output_throughput, x.output_throughput_per_gpu, x.request_throughput, x.duration_s
        );
    }
    out
}

/// `validate --bench-serve`'s summary: the median |error| of each metric over the results.
pub fn error_lines(
    e: &crate::validate::serving::ServingErrors,
    coverage: Option<(usize, usize)>,
) -> String {
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", 100.0 * v));
    let mut out = format!(
        "\nmedian |predicted / measured - 1| over the results: mean TPOT {}, median TPOT {}, mean TTFT {}, output throughput {}\n",
        show(e.mean_tpot),
        show(e.median_tpot),
        show(e.mean_ttft),
        show(e.output_throughput)
    );
    if let Some((k, n)) = coverage {
        out += &format!(
            "coverage: {k} of {n} measured figures (output tokens/s, mean TPOT, mean TTFT of each result) inside p5 – p95 ({:.1}%)\n",
            100.0 * k as f64 / n.max(1) as f64
        );
    }
    out
}

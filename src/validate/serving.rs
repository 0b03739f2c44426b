//! `validate --bench-serve`: `vllm bench serve --save-result` results held against their
//! serving runs (`calibrate::serving`, `sim::serving`), each result replayed with the server
//! settings it records, and the median error of what users compare (TPOT, TTFT, output
//! throughput) over them.

use crate::calibrate::bench_serve::{self, BenchOptions};
use crate::calibrate::serving::{self as bench, MeasuredServe};
use crate::error::{Error, Result};
use crate::sim::serving::{ServeOptions, ServeResult};
use crate::sim::ScenarioRequest;
use crate::whatif::uncertainty::{serve_intervals, ServeIntervals};
use serde::Serialize;
use std::path::PathBuf;

/// One result and its predicted run.
#[derive(Debug, Clone, Serialize)]
pub struct ServingCheck {
    /// `file line N`.
    pub origin: String,
    pub predicted: ServeResult,
    pub measured: MeasuredServe,
    /// The scenario the result was replayed under (the base with its recorded settings).
    #[serde(skip)]
    pub request: ScenarioRequest,
}

/// The median |predicted / measured − 1| of each metric over the results that measured it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServingErrors {
    pub mean_tpot: Option<f64>,
    pub median_tpot: Option<f64>,
    pub mean_ttft: Option<f64>,
    pub output_throughput: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServingValidation {
    pub runs: Vec<ServingCheck>,
    pub errors: ServingErrors,
    /// Per result, p5 – p95 of its headline metrics (None with no draws).
    pub intervals: Vec<Option<ServeIntervals>>,
    /// Of the measured figures (output tokens/s, mean TPOT, mean TTFT of every result), how
    /// many lie inside their p5 – p95, and how many there are.
    pub coverage: Option<(usize, usize)>,
}

/// Every result of `files` replayed under `req` with the settings it records (`--metadata`:
/// KV dtype, DCP; TP and model checked) and the scheduler limits and seed of `base`.
pub fn replay(
    req: &ScenarioRequest,
    base: &ServeOptions,
    files: &[PathBuf],
) -> Result<Vec<ServingCheck>> {
    let mut out = Vec::new();
    for f in files {
        let text = crate::files::read_text(f, crate::files::InputKind::MeasurementCsv)?;
        let opt = BenchOptions {
            serving: true,
            ..Default::default()
        };
        let settings = bench_serve::parse_bench(&text, f, &opt)?;
        let measured = bench::read_serve_points(std::slice::from_ref(f))?;
        for (point, pt) in settings.iter().zip(measured) {
            let origin = format!("{} line {}", crate::units::path(&pt.file), pt.line);
            let invalid = |e: Error| Error::PointInvalid {
                point: origin.clone(),
                problem: e.to_string(),
            };
            let mut r = req.clone();
            for (k, v) in point.settings() {
                k.apply(&mut r, v);
            }
            let (s, p) = r.load().map_err(invalid)?;
            bench::check_point(&pt, &s)?;
            let predicted = bench::predict_point(&s, &p, &pt.shape, base).map_err(invalid)?;
            out.push(ServingCheck {
                origin,
                predicted,
                measured: pt.measured,
                request: r,
            });
        }
    }
    Ok(out)
}

/// A result's intervals, drawn under its own recorded settings (none for 0 draws).
pub fn check_intervals(
    c: &ServingCheck,
    draws: usize,
    seed: u64,
) -> Result<Option<ServeIntervals>> {
    if draws == 0 {
        return Ok(None);
    }
    let (s, p) = c.request.load()?;
    serve_intervals(&s, &p, &c.predicted.schedule, draws, seed)
}

/// Of a result's measured output tokens/s, mean TPOT and mean TTFT: (inside p5 – p95, stated).
fn inside(c: &ServingCheck, iv: &ServeIntervals) -> (usize, usize) {
    let m = &c.measured;
    let pairs = [
        (Some(m.output_throughput), iv.output_throughput),
        (m.tpot.map(|t| t.mean_ms), iv.tpot_mean_ms),
        (m.ttft.map(|t| t.mean_ms), iv.ttft_mean_ms),
    ];
    pairs.iter().fold((0, 0), |(k, n), (v, i)| match v {
        Some(v) => (k + usize::from((i.p5..=i.p95).contains(v)), n + 1),
        None => (k, n),
    })
}

/// [`replay`], the median errors, and (with draws) each result's intervals and how many
/// measured figures they hold.
pub fn validate_serving(
    req: &ScenarioRequest,
    base: &ServeOptions,
    files: &[PathBuf],
    draws: usize,
    seed: u64,
) -> Result<ServingValidation> {
    let runs = replay(req, base, files)?;
    let intervals = runs
        .iter()
        .map(|c| check_intervals(c, draws, seed))
        .collect::<Result<Vec<_>>>()?;
    let coverage = (draws > 0).then(|| {
        runs.iter()
            .zip(&intervals)
            .filter_map(|(c, iv)| iv.as_ref().map(|iv| inside(c, iv)))
            .fold((0, 0), |(k, n), (a, b)| (k + a, n + b))
    });
    let median = |f: &dyn Fn(&ServingCheck) -> Option<(f64, f64)>| {
        let mut e: Vec<f64> = runs
            .iter()
            .filter_map(f)
            .filter(|(_, m)| *m > 0.0)
            .map(|(p, m)| (p / m - 1.0).abs())
            .collect();
        e.sort_by(|a, b| a.total_cmp(b));
        (!e.is_empty()).then(|| crate::sim::serving::stats::percentile(&e, 50.0))
    };
    let errors = ServingErrors {
        mean_tpot: median(&|c| {
            c.measured
                .tpot
                .map(|t| (c.predicted.tpot.mean_ms, t.mean_ms))
        }),
        median_tpot: median(&|c| {
            c.measured
                .tpot
                .map(|t| (c.predicted.tpot.median_ms, t.median_ms))
        }),
        mean_ttft: median(&|c| {
            c.measured
                .ttft
                .map(|t| (c.predicted.ttft.mean_ms, t.mean_ms))
        }),
        output_throughput: median(&|c| {
            Some((c.predicted.output_throughput, c.measured.output_throughput))
        }),
    };
    Ok(ServingValidation {
        runs,
        errors,
        intervals,
        coverage,
    })
}

//! `vllm bench serve --save-result` results read in the serving mode: each result is the run
//! of its own lengths, concurrency and prompt count, predicted by the serving simulation
//! (`sim::serving`) rather than as one decode step at the mean context
//! (docs/serving.md, docs/sources.md §7.2).
//!
//! - input and output lengths: `input_lens` / `output_lens` when the run saved them
//!   (`--save-detailed`), else every request at the mean (`total_input_tokens`,
//!   `total_output_tokens` over `completed`) with range ratio `random_range_ratio` (a
//!   `--metadata` key, default 0);
//! - concurrency: `max_concurrency` (a run without it is refused), at most `num_prompts`;
//! - prompts: `num_prompts`, else `completed`;
//! - measured: `mean_/median_/p99_` of `ttft`, `tpot` and `itl` (ms) where present,
//!   `output_throughput`, `request_throughput`, `duration`.

use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::serving::{self, ServeOptions, ServeResult};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// One metric's measured mean, median and p99 (ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeasuredStat {
    pub mean_ms: f64,
    pub median_ms: f64,
    pub p99_ms: Option<f64>,
}

/// What a result measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredServe {
    pub ttft: Option<MeasuredStat>,
    pub tpot: Option<MeasuredStat>,
    pub itl: Option<MeasuredStat>,
    pub output_throughput: f64,
    pub request_throughput: Option<f64>,
    pub duration_s: Option<f64>,
    pub completed: u64,
}

/// The run a result describes: what the serving simulation replays.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeShape {
    pub options: ServeOptions,
    /// Which of the run's numbers a throughput fit holds it to (`--bench-metric`).
    #[serde(skip)]
    pub metric: super::bench_serve::BenchMetric,
    /// Every request's (input, output) lengths, when the result saved them.
    #[serde(skip)]
    pub lengths: Option<Vec<(u64, u64)>>,
}

/// One result in the serving mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServePoint {
    pub file: PathBuf,
    pub line: usize,
    pub shape: ServeShape,
    pub measured: MeasuredServe,
    /// `tensor_parallel_size` (a `--metadata` key), held against the scenario's TP.
    pub tp: Option<u32>,
    pub model_id: Option<String>,
}

/// Reads every result of the files in the serving mode.
pub fn read_serve_points(paths: &[PathBuf]) -> Result<Vec<ServePoint>> {
    let mut out = Vec::new();
    for p in paths {
        let text = crate::files::read_text(p, crate::files::InputKind::MeasurementCsv)?;
        for (line, v, many) in super::bench_serve::objects(&text, p)? {
            out.push(serve_point(&v, line, many, p)?);
        }
    }
    Ok(out)
}

/// Reads the keys of one result object, naming file, line and key in every error.
struct Keys<'a> {
    obj: &'a Map<String, Value>,
    path: &'a Path,
    line: usize,
    many: bool,
}

/// Where `key` of a result object sits, for an error: the object's line too when the file
/// holds several (JSON lines).
pub(super) fn key_at(key: &str, line: usize, many: bool) -> String {
    if many {
        format!("line {line}, key {key}")
    } else {
        key.to_string()
    }
}

impl Keys<'_> {
    fn at(&self, key: &str) -> String {
        key_at(key, self.line, self.many)
    }
    fn bad(&self, key: &str, found: &Value, what: &str) -> Error {
        Error::field(
            self.path,
            self.at(key),
            format!(
                "found {}, expected {what}",
                crate::units::clip(&found.to_string(), 40)
            ),
        )
    }
    /// A finite number ≥ 0 (a --metadata string too), None when absent or null.
    fn number(&self, key: &str, what: &str) -> Result<Option<f64>> {
        let v = match self.obj.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(v) => v,
        };
        let x = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match x {
            Some(x) if x.is_finite() && (0.0..1e15).contains(&x) => Ok(Some(x)),
            _ => Err(self.bad(key, v, what)),
        }
    }
    fn required(&self, key: &str, what: &str) -> Result<f64> {
        self.number(key, what)?.ok_or_else(|| {
            Error::field(
                self.path,
                self.at(key),
                format!("missing: expected {what} (as `vllm bench serve --save-result` writes it)"),
            )
        })
    }
    fn whole(&self, key: &str, min: f64, what: &str) -> Result<Option<u64>> {
        match self.number(key, what)? {
            Some(x) if x.fract() == 0.0 && x >= min => Ok(Some(x as u64)),
            Some(_) => Err(self.bad(key, &self.obj[key], what)),
            None => Ok(None),
        }
    }
    fn stat(&self, metric: &str) -> Result<Option<MeasuredStat>> {
        let what = "a time in ms, at least 0";
        let mean = self.number(&format!("mean_{metric}_ms"), what)?;
        let median = self.number(&format!("median_{metric}_ms"), what)?;
        let p99 = self.number(&format!("p99_{metric}_ms"), what)?;
        Ok(match (mean, median) {
            (Some(mean_ms), Some(median_ms)) => Some(MeasuredStat {
                mean_ms,
                median_ms,
                p99_ms: p99,
            }),
            _ => None,
        })
    }
    /// `input_lens` / `output_lens` of `--save-detailed`: whole numbers ≥ 1 (0 allowed for
    /// input), as many as completed requests.
    fn lens(&self, key: &str, min: u64) -> Result<Option<Vec<u64>>> {
        let Some(v) = self.obj.get(key).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let what = format!("a list of whole numbers of tokens, each at least {min}");
        let list = v.as_array().ok_or_else(|| self.bad(key, v, &what))?;
        list.iter()
            .map(|x| {
                x.as_u64()
                    .filter(|&n| n >= min && n <= crate::scenario::deployment::MAX_CONTEXT)
                    .ok_or_else(|| self.bad(key, x, &what))
            })
            .collect::<Result<Vec<u64>>>()
            .map(Some)
    }
    fn text(&self, keys: &[&str]) -> Option<String> {
        keys.iter().find_map(|k| match self.obj.get(*k) {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        })
    }
}

pub(crate) fn serve_point(v: &Value, line: usize, many: bool, path: &Path) -> Result<ServePoint> {
    let obj = v.as_object().ok_or_else(|| {
        Error::field(
            path,
            if many {
                format!("line {line}")
            } else {
                "top level".into()
            },
            "expected a JSON object (a vllm bench serve --save-result result)",
        )
    })?;
    let k = Keys {
        obj,
        path,
        line,
        many,
    };
    let (shape, completed) = run_shape(&k)?;
    Ok(ServePoint {
        file: path.to_path_buf(),
        line,
        shape,
        measured: measured(&k, completed)?,
        tp: tensor_parallel_size(&k)?,
        model_id: k.text(&["model_id"]),
    })
}

/// The run a result describes (its clients, prompts and lengths) and its completed requests.
fn run_shape(k: &Keys) -> Result<(ServeShape, u64)> {
    let max_b = crate::scenario::deployment::MAX_BATCH;
    let conc_what = format!("a whole number 1..{max_b}");
    if k.obj.get("max_concurrency").is_some_and(Value::is_null) {
        return Err(Error::field(k.path, k.at("max_concurrency"), "null: the run was not concurrency-bound (no --max-concurrency), so its clients are unknown; rerun vllm bench serve with --max-concurrency N"));
    }
    let missing = |key: &str, what: &str| {
        Error::field(k.path, k.at(key), format!("missing: expected {what}"))
    };
    let conc = k
        .whole("max_concurrency", 1.0, &conc_what)?
        .ok_or_else(|| missing("max_concurrency", &conc_what))?;
    if conc > max_b as u64 {
        return Err(k.bad("max_concurrency", &k.obj["max_concurrency"], &conc_what));
    }
    let completed_what = "a whole number of completed requests, at least 1";
    let completed = k
        .whole("completed", 1.0, completed_what)?
        .ok_or_else(|| missing("completed", completed_what))?;
    let prompts = k
        .whole("num_prompts", 1.0, "a whole number of prompts, at least 1")?
        .unwrap_or(completed)
        .min(completed);
    let tin = k.required("total_input_tokens", "a whole number of tokens")?;
    let tout = k.required(
        "total_output_tokens",
        "a whole number of tokens, at least 1",
    )?;
    let mean_len = |t: f64| ((t / completed as f64).round() as u64).max(1);
    let lengths = match (k.lens("input_lens", 1)?, k.lens("output_lens", 1)?) {
        (Some(i), Some(o)) if i.len() == o.len() && !i.is_empty() => {
            Some(i.into_iter().zip(o).collect::<Vec<_>>())
        }
        (Some(i), Some(o)) => {
            return Err(Error::field(
                k.path,
                k.at("output_lens"),
                format!(
                    "{} lengths beside {} input_lens: expected one output length per input length",
                    o.len(),
                    i.len()
                ),
            ))
        }
        _ => None,
    };
    let options = ServeOptions {
        input_len: mean_len(tin),
        output_len: mean_len(tout),
        concurrency: conc.min(prompts) as u32,
        num_prompts: lengths.as_ref().map_or(prompts, |l| l.len() as u64) as u32,
        range_ratio: k
            .number("random_range_ratio", "a share from 0 up to 1")?
            .unwrap_or(0.0),
        ..ServeOptions::default()
    };
    let shape = ServeShape {
        options,
        lengths,
        metric: Default::default(),
    };
    Ok((shape, completed))
}

/// What a result measured.
fn measured(k: &Keys, completed: u64) -> Result<MeasuredServe> {
    let what = "a positive number of output tokens/s";
    let output_throughput = k.required("output_throughput", what)?;
    if output_throughput <= 0.0 {
        return Err(k.bad("output_throughput", &k.obj["output_throughput"], what));
    }
    Ok(MeasuredServe {
        ttft: k.stat("ttft")?,
        tpot: k.stat("tpot")?,
        itl: k.stat("itl")?,
        output_throughput,
        request_throughput: k.number("request_throughput", "requests/s")?,
        duration_s: k.number("duration", "seconds")?,
        completed,
    })
}

/// The server's TP a result records (`--metadata tensor_parallel_size=N`).
fn tensor_parallel_size(k: &Keys) -> Result<Option<u32>> {
    let Some(t) = k.text(&["tensor_parallel_size", "tp"]) else {
        return Ok(None);
    };
    t.parse::<u32>()
        .ok()
        .filter(|d| (1..=4096).contains(d))
        .map(Some)
        .ok_or_else(|| {
            Error::field(
                k.path,
                k.at("tensor_parallel_size"),
                format!(
                    "found '{}', expected a whole number 1..4096",
                    crate::units::clip(&t, 40)
                ),
            )
        })
}

/// Holds a point's recorded server settings against the scenario.
pub fn check_point(point: &ServePoint, s: &Scenario) -> Result<()> {
    let origin = format!("{} line {}", crate::units::path(&point.file), point.line);
    if let Some(tp) = point.tp.filter(|&tp| tp != s.layout.tp) {
        return Err(Error::PointInvalid {
            point: origin,
            problem: format!("the result says tensor_parallel_size {tp}, the scenario runs --tp {}: pass --tp {tp}", s.layout.tp),
        });
    }
    if let Some(id) = point.model_id.as_deref() {
        if !super::from_throughput::model_id_matches(id, &s.model.name) {
            return Err(Error::PointInvalid {
                point: origin,
                problem: format!(
                    "the result served '{id}', the scenario's model is '{}': pass --model",
                    s.model.name
                ),
            });
        }
    }
    Ok(())
}

/// The serving simulation of a result's run (its own lengths when it saved them; the
/// scheduler limits and seed of `base`).
pub fn predict_point(
    s: &Scenario,
    p: &CalibrationProfile,
    shape: &ServeShape,
    base: &ServeOptions,
) -> Result<ServeResult> {
    let o = ServeOptions {
        max_num_batched_tokens: base.max_num_batched_tokens,
        max_num_seqs: base.max_num_seqs,
        seed: base.seed,
        bucket_bits: base.bucket_bits,
        ..shape.options.clone()
    };
    match &shape.lengths {
        Some(l) => serving::serve_lengths(s, p, &o, l.clone()),
        None => serving::serve(s, p, &o),
    }
}

/// The predicted number a throughput fit holds a serving-mode point to (its `metric`): the
/// run's output tokens/s, or concurrency / its median or mean TPOT.
pub(crate) fn tokens_per_s(s: &Scenario, p: &CalibrationProfile, run: &ServeShape) -> Result<f64> {
    use super::bench_serve::BenchMetric;
    let base = ServeOptions {
        seed: s.seed,
        ..ServeOptions::default()
    };
    let r = predict_point(s, p, run, &base)?;
    let tpot = match run.metric {
        BenchMetric::OutputThroughput => return Ok(r.output_throughput),
        BenchMetric::MedianTpot => r.tpot.median_ms,
        BenchMetric::MeanTpot => r.tpot.mean_ms,
    };
    if tpot <= 0.0 {
        return Err(Error::FlagUse {
            flag: "--bench-metric",
            problem:
                "takes TPOT, which a run of one-token outputs does not have: use output-throughput"
                    .into(),
        });
    }
    Ok(r.options.concurrency as f64 * 1e3 / tpot)
}

//! `vllm bench serve --save-result` JSON files as throughput points (format in
//! docs/sources.md §7.2): one object per file, or one per line with
//! `--append-result`.
//!
//! - batch = `max_concurrency` (null when the run was not concurrency-bound: refused, its batch
//!   is unknown), or `num_prompts` when fewer prompts were sent (no more ran at once);
//! - `tensor_parallel_size` (a `--metadata` key) and `model_id` are held against the
//!   scenario's `--tp` and model (`from_throughput`);
//! - tokens/s = `output_throughput` (which includes the time spent in prefill, so at low
//!   concurrency it is below concurrency / TPOT), or concurrency / `median_tpot_ms` or
//!   `mean_tpot_ms` with `--bench-metric`;
//! - context = the mean KV length during decode: mean input length + half the mean output
//!   length, the means being `total_input_tokens` and `total_output_tokens` over `completed`;
//! - the server's settings are not recorded by vLLM; a user adds them with `--metadata KEY=VALUE`
//!   (stored as top-level string keys), read here: `kv_cache_dtype`, `dcp` (or
//!   `decode_context_parallel_size`), `spec_method` (or `speculative_method`), `draft_tokens` (or
//!   `num_speculative_tokens`), `acceptance_rate`, `acceptance_length` (or
//!   `mean_acceptance_length`), and `context` to state the decode context directly.

use super::from_throughput::{kv_dtype_bytes, spec_point, Measured, Point};
use crate::error::{Error, Result};
use serde_json::Value;
use std::path::Path;

/// Which number of the result is the point's measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BenchMetric {
    /// `output_throughput`, tokens/s over the whole run.
    #[default]
    OutputThroughput,
    /// concurrency / `median_tpot_ms`: decode only.
    MedianTpot,
    /// concurrency / `mean_tpot_ms`.
    MeanTpot,
}

crate::names::enum_names!(BenchMetric, "bench metric",
    BenchMetric::OutputThroughput => ["output-throughput", "output_throughput"],
    BenchMetric::MedianTpot => ["median-tpot", "median_tpot_ms"],
    BenchMetric::MeanTpot => ["mean-tpot", "mean_tpot_ms"]);

#[derive(Debug, Clone, Copy, Default)]
pub struct BenchOptions {
    pub metric: BenchMetric,
    /// Read each result as the serving run it was (`calibrate::serving`), not as one decode
    /// step at the mean context.
    pub serving: bool,
}

/// The result objects of a file with the line each starts on.
pub(crate) fn objects(text: &str, path: &Path) -> Result<Vec<(usize, Value, bool)>> {
    let first = text
        .lines()
        .position(|l| !l.trim().is_empty())
        .map_or(1, |i| i + 1);
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok(vec![(first, v, false)]);
    }
    // --append-result: one object per line.
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v = serde_json::from_str::<Value>(l).map_err(|e| Error::Syntax {
            path: path.to_path_buf(),
            format: "JSON (vllm bench serve --save-result: one object per file, or one per line)",
            message: format!("line {}: {e}", i + 1),
        })?;
        out.push((i + 1, v, true));
    }
    if out.is_empty() {
        return Err(Error::field(
            path,
            "content",
            "empty: expected a vllm bench serve result object",
        ));
    }
    Ok(out)
}

/// Reads every result of one file.
pub(crate) fn parse_bench(text: &str, path: &Path, opt: &BenchOptions) -> Result<Vec<Point>> {
    objects(text, path)?
        .into_iter()
        .map(|(line, v, many)| point(&v, line, many, path, opt))
        .collect()
}

fn point(v: &Value, line: usize, many: bool, path: &Path, opt: &BenchOptions) -> Result<Point> {
    let at = |key: &str| {
        if many {
            format!("line {line}, key {key}")
        } else {
            key.to_string()
        }
    };
    let Some(obj) = v.as_object() else {
        return Err(Error::field(
            path,
            if many {
                format!("line {line}")
            } else {
                "top level".into()
            },
            "expected a JSON object (a vllm bench serve --save-result result)",
        ));
    };
    let shown = |x: &Value| crate::units::clip(&x.to_string(), 40);
    // A number, also written as a string (--metadata values are strings).
    let number = |key: &str, what: &str| -> Result<Option<f64>> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(Value::String(s)) if s.trim().parse::<f64>().is_ok() => Ok(s.trim().parse().ok()),
            Some(x) => Err(Error::field(
                path,
                at(key),
                format!("found {}, expected {what}", shown(x)),
            )),
        }
    };
    let required = |key: &str, what: &str| -> Result<f64> {
        number(key, what)?.ok_or_else(|| {
            Error::field(
                path,
                at(key),
                format!("missing: expected {what} (as `vllm bench serve --save-result` writes it)"),
            )
        })
    };
    let positive = |key: &str, x: f64, what: &str| -> Result<f64> {
        if x.is_finite() && x > 0.0 && x < 1e9 {
            Ok(x)
        } else {
            Err(Error::field(
                path,
                at(key),
                format!("found {x}, expected {what}"),
            ))
        }
    };
    let whole = |key: &str, x: f64, min: f64, what: &str| -> Result<u64> {
        if x.is_finite() && x.fract() == 0.0 && x >= min && x < 1e15 {
            Ok(x as u64)
        } else {
            Err(Error::field(
                path,
                at(key),
                format!("found {x}, expected {what}"),
            ))
        }
    };
    let max_b = crate::scenario::deployment::MAX_BATCH as f64;
    let concurrency = match obj.get("max_concurrency") {
        Some(Value::Null) => {
            return Err(Error::field(
                path,
                at("max_concurrency"),
                "null: the run was not concurrency-bound (no --max-concurrency), so its batch is unknown; rerun vllm bench serve with --max-concurrency N",
            ))
        }
        _ => {
            let c = required("max_concurrency", &format!("a whole number 1..{max_b}"))?;
            whole("max_concurrency", c, 1.0, &format!("a whole number 1..{max_b}"))?
        }
    };
    if concurrency as f64 > max_b {
        return Err(Error::field(
            path,
            at("max_concurrency"),
            format!("found {concurrency}, expected a whole number 1..{max_b}"),
        ));
    }
    // Fewer prompts than --max-concurrency: never more than num_prompts requests ran at once,
    // so the effective concurrency is the smaller.
    let concurrency = match number("num_prompts", "a whole number of prompts")? {
        Some(n) => concurrency.min(whole(
            "num_prompts",
            n,
            1.0,
            "a whole number of prompts, at least 1",
        )?),
        None => concurrency,
    };
    let concurrency = concurrency as u32;
    let (tokens_per_s, measured) = match opt.metric {
        BenchMetric::OutputThroughput => {
            let key = "output_throughput";
            let t = required(key, "a positive number of output tokens/s")?;
            (
                positive(key, t, "a positive number of output tokens/s below 1e9")?,
                Measured::TokensPerS,
            )
        }
        m => {
            let key = if m == BenchMetric::MedianTpot {
                "median_tpot_ms"
            } else {
                "mean_tpot_ms"
            };
            let t = positive(
                key,
                required(key, "a positive time per output token, ms")?,
                "a positive time per output token, ms",
            )?;
            (concurrency as f64 * 1e3 / t, Measured::TpotMs(t))
        }
    };
    let context = match number(
        "context",
        "a whole number of tokens (the mean decode context)",
    )? {
        Some(c) => whole("context", c, 1.0, "a whole number of tokens, at least 1")?,
        None => {
            let completed = required("completed", "the number of completed requests")?;
            let completed = whole(
                "completed",
                completed,
                1.0,
                "a whole number of completed requests, at least 1",
            )?;
            let tin = required("total_input_tokens", "a whole number of tokens")?;
            let tin = whole("total_input_tokens", tin, 0.0, "a whole number of tokens")?;
            let tout = required("total_output_tokens", "a whole number of tokens")?;
            let tout = whole(
                "total_output_tokens",
                tout,
                1.0,
                "a whole number of tokens, at least 1",
            )?;
            // The mean KV length a decode step sees: the prompt plus half the output.
            let c = (tin as f64 + tout as f64 / 2.0) / completed as f64;
            (c.round() as u64).max(1)
        }
    };
    let text = |keys: &[&str]| -> Result<Option<String>> {
        for k in keys {
            match obj.get(*k) {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) => return Ok(Some(s.trim().to_string())),
                Some(Value::Number(n)) => return Ok(Some(n.to_string())),
                Some(x) => {
                    return Err(Error::field(
                        path,
                        at(k),
                        format!("found {}, expected a string or a number", shown(x)),
                    ))
                }
            }
        }
        Ok(None)
    };
    let kv_bytes = match text(&["kv_cache_dtype"])? {
        None => None,
        Some(v) => Some(kv_dtype_bytes(&v).ok_or_else(|| {
            Error::field(
                path,
                at("kv_cache_dtype"),
                format!(
                    "found '{}', expected bf16, auto or fp8",
                    crate::units::clip(&v, 40)
                ),
            )
        })?),
    };
    let dcp = match text(&["dcp", "decode_context_parallel_size"])? {
        None => None,
        Some(v) => Some(
            v.parse::<u32>()
                .ok()
                .filter(|d| (1..=1024).contains(d))
                .ok_or_else(|| {
                    Error::field(
                        path,
                        at("dcp"),
                        format!(
                            "found '{}', expected a whole number 1..1024",
                            crate::units::clip(&v, 40)
                        ),
                    )
                })?,
        ),
    };
    let spec = spec_point(
        text(&["spec_method", "speculative_method"])?,
        text(&["draft_tokens", "num_speculative_tokens"])?,
        text(&["acceptance_rate"])?,
        text(&["acceptance_length", "mean_acceptance_length"])?,
    )
    .map_err(|(key, v, want)| {
        Error::field(
            path,
            at(key),
            format!("found '{}', expected {want}", crate::units::clip(&v, 40)),
        )
    })?;
    // The server's TP, when the user recorded it (--metadata tensor_parallel_size=N).
    let tp = match text(&["tensor_parallel_size", "tp"])? {
        None => None,
        Some(v) => Some(
            v.parse::<u32>()
                .ok()
                .filter(|d| (1..=4096).contains(d))
                .ok_or_else(|| {
                    Error::field(
                        path,
                        at("tensor_parallel_size"),
                        format!(
                            "found '{}', expected a whole number 1..4096",
                            crate::units::clip(&v, 40)
                        ),
                    )
                })?,
        ),
    };
    let model_id = text(&["model_id"])?.filter(|m| !m.is_empty());
    let serving = match (opt.serving, &spec) {
        (false, _) => None,
        (true, Some(_)) => {
            return Err(Error::field(
                path,
                at("spec_method"),
                "a speculative-decoding result: the serving mode does not model speculative decoding; leave out --serving to price it as whatif spec-decode does",
            ))
        }
        (true, None) => {
            let mut run = super::serving::serve_point(v, line, many, path)?.shape;
            run.metric = opt.metric;
            Some(run)
        }
    };
    Ok(Point {
        file: path.to_path_buf(),
        line,
        concurrency,
        context,
        tokens_per_s,
        measured,
        kv_bytes,
        proto: None,
        algo: None,
        p2p: None,
        dcp,
        spec,
        tp,
        model_id,
        serving,
    })
}

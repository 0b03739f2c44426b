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

use super::from_throughput::{kv_dtype_bytes, spec_point, Measured, Point, SpecPoint};
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

/// One result object with where it sits, read key by key: every refusal names the file, the
/// object's line when the file holds several, and the key.
struct ResultObject<'a> {
    obj: &'a serde_json::Map<String, Value>,
    path: &'a Path,
    line: usize,
    many: bool,
}

impl ResultObject<'_> {
    fn at(&self, key: &str) -> String {
        super::serving::key_at(key, self.line, self.many)
    }

    fn refuse(&self, key: &str, problem: impl Into<String>) -> Error {
        Error::field(self.path, self.at(key), problem)
    }

    /// A number, also written as a string (--metadata values are strings).
    fn number(&self, key: &str, what: &str) -> Result<Option<f64>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(Value::String(s)) if s.trim().parse::<f64>().is_ok() => Ok(s.trim().parse().ok()),
            Some(x) => Err(self.refuse(key, format!("found {}, expected {what}", shown(x)))),
        }
    }

    fn required(&self, key: &str, what: &str) -> Result<f64> {
        self.number(key, what)?.ok_or_else(|| {
            self.refuse(
                key,
                format!("missing: expected {what} (as `vllm bench serve --save-result` writes it)"),
            )
        })
    }

    fn positive(&self, key: &str, x: f64, what: &str) -> Result<f64> {
        if x.is_finite() && x > 0.0 && x < 1e9 {
            Ok(x)
        } else {
            Err(self.refuse(key, format!("found {x}, expected {what}")))
        }
    }

    fn whole(&self, key: &str, x: f64, min: f64, what: &str) -> Result<u64> {
        if x.is_finite() && x.fract() == 0.0 && x >= min && x < 1e15 {
            Ok(x as u64)
        } else {
            Err(self.refuse(key, format!("found {x}, expected {what}")))
        }
    }

    /// The first of `keys` present, as text (a string trimmed, or a number).
    fn text(&self, keys: &[&str]) -> Result<Option<String>> {
        for k in keys {
            match self.obj.get(*k) {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) => return Ok(Some(s.trim().to_string())),
                Some(Value::Number(n)) => return Ok(Some(n.to_string())),
                Some(x) => {
                    return Err(self.refuse(
                        k,
                        format!("found {}, expected a string or a number", shown(x)),
                    ))
                }
            }
        }
        Ok(None)
    }

    /// A whole number in `range` from the first of `keys` present; refused under `key`.
    fn whole_text(
        &self,
        keys: &[&str],
        key: &str,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<Option<u32>> {
        let Some(v) = self.text(keys)? else {
            return Ok(None);
        };
        v.parse::<u32>()
            .ok()
            .filter(|d| range.contains(d))
            .map(Some)
            .ok_or_else(|| {
                self.refuse(
                    key,
                    format!(
                        "found '{}', expected a whole number {}..{}",
                        crate::units::clip(&v, 40),
                        range.start(),
                        range.end()
                    ),
                )
            })
    }

    /// The KV cache's element size from `kv_cache_dtype`, when the user recorded it.
    fn kv_bytes(&self) -> Result<Option<f64>> {
        let Some(v) = self.text(&["kv_cache_dtype"])? else {
            return Ok(None);
        };
        kv_dtype_bytes(&v).map(Some).ok_or_else(|| {
            self.refuse(
                "kv_cache_dtype",
                format!(
                    "found '{}', expected bf16, auto or fp8",
                    crate::units::clip(&v, 40)
                ),
            )
        })
    }

    /// The speculative-decoding settings the user recorded, if any.
    fn spec(&self) -> Result<Option<SpecPoint>> {
        spec_point(
            self.text(&["spec_method", "speculative_method"])?,
            self.text(&["draft_tokens", "num_speculative_tokens"])?,
            self.text(&["acceptance_rate"])?,
            self.text(&["acceptance_length", "mean_acceptance_length"])?,
        )
        .map_err(|(key, v, want)| {
            self.refuse(
                key,
                format!("found '{}', expected {want}", crate::units::clip(&v, 40)),
            )
        })
    }
}

/// A value in a message, clipped.
fn shown(x: &Value) -> String {
    crate::units::clip(&x.to_string(), 40)
}

fn point(v: &Value, line: usize, many: bool, path: &Path, opt: &BenchOptions) -> Result<Point> {
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
    let r = ResultObject {
        obj,
        path,
        line,
        many,
    };
    let concurrency = concurrency(&r)?;
    let (tokens_per_s, measured) = measurement(&r, opt.metric, concurrency)?;
    let context = context(&r)?;
    let kv_bytes = r.kv_bytes()?;
    let dcp = r.whole_text(&["dcp", "decode_context_parallel_size"], "dcp", 1..=1024)?;
    let spec = r.spec()?;
    // The server's TP, when the user recorded it (--metadata tensor_parallel_size=N).
    let tp = r.whole_text(
        &["tensor_parallel_size", "tp"],
        "tensor_parallel_size",
        1..=4096,
    )?;
    let model_id = r.text(&["model_id"])?.filter(|m| !m.is_empty());
    let serving = match (opt.serving, &spec) {
        (false, _) => None,
        (true, Some(_)) => {
            return Err(r.refuse(
                "spec_method",
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

/// The run's batch: `max_concurrency` (null: not concurrency-bound, refused), or
/// `num_prompts` when fewer prompts were sent.
fn concurrency(r: &ResultObject) -> Result<u32> {
    let max_b = crate::scenario::deployment::MAX_BATCH as f64;
    let concurrency = match r.obj.get("max_concurrency") {
        Some(Value::Null) => {
            return Err(r.refuse(
                "max_concurrency",
                "null: the run was not concurrency-bound (no --max-concurrency), so its batch is unknown; rerun vllm bench serve with --max-concurrency N",
            ))
        }
        _ => {
            let c = r.required("max_concurrency", &format!("a whole number 1..{max_b}"))?;
            r.whole("max_concurrency", c, 1.0, &format!("a whole number 1..{max_b}"))?
        }
    };
    if concurrency as f64 > max_b {
        return Err(r.refuse(
            "max_concurrency",
            format!("found {concurrency}, expected a whole number 1..{max_b}"),
        ));
    }
    // Fewer prompts than --max-concurrency: never more than num_prompts requests ran at once,
    // so the effective concurrency is the smaller.
    let concurrency = match r.number("num_prompts", "a whole number of prompts")? {
        Some(n) => concurrency.min(r.whole(
            "num_prompts",
            n,
            1.0,
            "a whole number of prompts, at least 1",
        )?),
        None => concurrency,
    };
    Ok(concurrency as u32)
}

/// The point's tokens/s and what was measured: `output_throughput`, or `concurrency` over a
/// TPOT.
fn measurement(r: &ResultObject, metric: BenchMetric, concurrency: u32) -> Result<(f64, Measured)> {
    if metric == BenchMetric::OutputThroughput {
        let key = "output_throughput";
        let t = r.required(key, "a positive number of output tokens/s")?;
        return Ok((
            r.positive(key, t, "a positive number of output tokens/s below 1e9")?,
            Measured::TokensPerS,
        ));
    }
    let key = if metric == BenchMetric::MedianTpot {
        "median_tpot_ms"
    } else {
        "mean_tpot_ms"
    };
    let t = r.positive(
        key,
        r.required(key, "a positive time per output token, ms")?,
        "a positive time per output token, ms",
    )?;
    Ok((concurrency as f64 * 1e3 / t, Measured::TpotMs(t)))
}

/// The mean decode context: `context` as stated, else the mean input plus half the mean
/// output over the completed requests.
fn context(r: &ResultObject) -> Result<u64> {
    if let Some(c) = r.number(
        "context",
        "a whole number of tokens (the mean decode context)",
    )? {
        return r.whole("context", c, 1.0, "a whole number of tokens, at least 1");
    }
    let completed = r.required("completed", "the number of completed requests")?;
    let completed = r.whole(
        "completed",
        completed,
        1.0,
        "a whole number of completed requests, at least 1",
    )?;
    let tin = r.required("total_input_tokens", "a whole number of tokens")?;
    let tin = r.whole("total_input_tokens", tin, 0.0, "a whole number of tokens")?;
    let tout = r.required("total_output_tokens", "a whole number of tokens")?;
    let tout = r.whole(
        "total_output_tokens",
        tout,
        1.0,
        "a whole number of tokens, at least 1",
    )?;
    // The mean KV length a decode step sees: the prompt plus half the output.
    let c = (tin as f64 + tout as f64 / 2.0) / completed as f64;
    Ok((c.round() as u64).max(1))
}

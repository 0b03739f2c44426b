//! The measured points: one row of a CSV or one `vllm bench serve --save-result` file, read,
//! checked and turned into the scenario it measured.

use crate::error::{Error, Result};
use crate::files::InputKind;
use crate::scenario::knobs;
use crate::scenario::{Algo, Proto};
use crate::sim::ScenarioRequest;
use crate::whatif::acceptance::Acceptance;
use crate::whatif::draft::Method;
use crate::workload::spec_method::DraftSource;
use std::path::{Path, PathBuf};

/// How a point's acceptance was measured (vLLM's terms, docs/sources.md §5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MeasuredAcceptance {
    /// Draft acceptance rate: accepted / drafted tokens.
    Rate(f64),
    /// Mean acceptance length: 1 + accepted / drafts (bonus token included).
    Length(f64),
}

/// Speculative decoding as a point ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecPoint {
    pub(super) method: Method,
    pub draft_tokens: u32,
    pub acceptance: MeasuredAcceptance,
}

impl SpecPoint {
    /// vLLM's acceptance rate (a mean length L at k draft tokens is a rate (L − 1) / k).
    pub(super) fn acceptance(&self) -> std::result::Result<Acceptance, String> {
        let k = self.draft_tokens as f64;
        let r = match self.acceptance {
            MeasuredAcceptance::Rate(r) => r,
            MeasuredAcceptance::Length(l) => {
                if !(l.is_finite() && (1.0..=k + 1.0).contains(&l)) {
                    return Err(format!(
                        "mean acceptance length {l} is impossible at {} draft tokens: expected 1..={} (1 + accepted / drafts)",
                        self.draft_tokens,
                        self.draft_tokens + 1
                    ));
                }
                (l - 1.0) / k
            }
        };
        Acceptance::rate(r).map_err(|e| e.to_string())
    }
}

/// What the point's number is.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Measured {
    /// Output tokens/s over all sequences.
    #[default]
    TokensPerS,
    /// Time per output token, ms (tokens/s = concurrency / TPOT).
    TpotMs(f64),
}

/// One measured benchmark point.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Point {
    /// The file it came from (empty: the request's `source`).
    pub file: PathBuf,
    /// Line in the file (CSV header = 1; a JSON object's first line).
    pub line: usize,
    pub concurrency: u32,
    /// Mean KV length during decode, tokens.
    pub context: u64,
    /// Measured output tokens/s (from TPOT when `measured` says so).
    pub tokens_per_s: f64,
    pub measured: Measured,
    pub kv_bytes: Option<f64>,
    pub proto: Option<Proto>,
    pub algo: Option<Algo>,
    pub p2p: Option<bool>,
    pub dcp: Option<u32>,
    pub spec: Option<SpecPoint>,
    /// The server's tensor-parallel size the result states (`tensor_parallel_size` in a
    /// `vllm bench serve` result's metadata): checked against the scenario's `--tp`.
    pub tp: Option<u32>,
    /// The served model the result names (`model_id`): checked against the scenario's model.
    pub model_id: Option<String>,
    /// A `vllm bench serve` result read in the serving mode: the run it replays
    /// (`calibrate::serving`); None: one decode step at `context`.
    pub serving: Option<crate::calibrate::serving::ServeShape>,
}

/// A served model's id (`moonshotai/Kimi-K2.5`) names the scenario's model (`kimi-k2.5`): the
/// last path segments, lowercased and without punctuation, one within the other. A model read
/// from a bare `config.json` has no name to hold against.
pub(crate) fn model_id_matches(id: &str, model: &str) -> bool {
    let norm = |t: &str| -> String {
        t.rsplit('/')
            .next()
            .unwrap_or(t)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .flat_map(|c| c.to_lowercase())
            .collect()
    };
    let (a, b) = (norm(id), norm(model));
    b.is_empty() || b == "config" || a.contains(&b) || b.contains(&a)
}

impl Point {
    pub(super) fn label(&self) -> String {
        let mut s = format!(
            "c={} ctx={} {:.1} tok/s",
            self.concurrency, self.context, self.tokens_per_s
        );
        if let Measured::TpotMs(t) = self.measured {
            s += &format!(" (TPOT {t} ms)");
        }
        if let Some(p) = self.proto {
            s += &format!(" proto={}", p.name());
        }
        if let Some(a) = self.algo {
            s += &format!(" algo={}", a.name());
        }
        if let Some(p) = self.p2p {
            s += if p { " p2p=on" } else { " p2p=off" };
        }
        if self.kv_bytes == Some(1.0) {
            s += " kv=fp8";
        }
        if let Some(d) = self.dcp {
            s += &format!(" dcp={d}");
        }
        if let Some(sp) = &self.spec {
            s += &format!(
                " spec={} k={} {}",
                sp.method.name(),
                sp.draft_tokens,
                match sp.acceptance {
                    MeasuredAcceptance::Rate(r) => format!("acceptance rate {r}"),
                    MeasuredAcceptance::Length(l) => format!("acceptance length {l}"),
                }
            );
        }
        s
    }

    /// Where the point is: `file line N`.
    pub(super) fn origin(&self, fallback: &Path) -> String {
        let f = if self.file.as_os_str().is_empty() {
            fallback
        } else {
            &self.file
        };
        format!("{} line {}", crate::units::path(f), self.line)
    }

    /// The point's scenario settings as knobs of the table: batch (the concurrency), context,
    /// and the optional columns it gives.
    pub fn settings(&self) -> Vec<(&'static knobs::Knob, knobs::Value)> {
        use knobs::{knob, KvDtype, Value};
        let mut out = vec![
            (knob("batch"), Value::Whole(self.concurrency.into())),
            (knob("context"), Value::Whole(self.context)),
        ];
        if let Some(d) = self.kv_bytes.and_then(KvDtype::of_bytes) {
            out.push((knob("kv-cache-dtype"), Value::KvDtype(d)));
        }
        if let Some(x) = self.proto {
            out.push((knob("nccl-proto"), Value::Proto(x)));
        }
        if let Some(x) = self.algo {
            out.push((knob("nccl-algo"), Value::Algo(x)));
        }
        if let Some(x) = self.p2p {
            out.push((knob("p2p"), Value::Switch(x)));
        }
        if let Some(x) = self.dcp {
            out.push((knob("dcp"), Value::Whole(x.into())));
        }
        out
    }

    /// The same settings (everything but concurrency): the points of one curve.
    fn curve(&self) -> String {
        format!(
            "{} {:?} {:?} {:?} {:?} {:?} {:?}",
            self.context,
            self.kv_bytes.map(|b| b as u64),
            self.proto,
            self.algo,
            self.p2p,
            self.dcp.unwrap_or(1),
            self.spec
        )
    }
}

/// Reads benchmark points from every file: `vllm bench serve --save-result` JSON (`.json`,
/// `.jsonl`, or any file whose first character is `{`) or a throughput CSV. `tpot` takes the
/// JSON files' median TPOT instead of their output throughput.
pub fn read_inputs(
    paths: &[PathBuf],
    bench: &crate::calibrate::bench_serve::BenchOptions,
) -> Result<Vec<Point>> {
    let mut points = Vec::new();
    for p in paths {
        let text = crate::files::read_text(p, InputKind::MeasurementCsv)?;
        let is_json = p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("json") || e.eq_ignore_ascii_case("jsonl"))
            || text.trim_start().starts_with('{');
        if is_json {
            points.extend(crate::calibrate::bench_serve::parse_bench(&text, p, bench)?);
        } else {
            points.extend(parse_csv(&text, p)?);
        }
    }
    check_points(&points)?;
    Ok(points)
}

/// Reads and checks a throughput CSV.
pub fn read_points(path: &Path) -> Result<Vec<Point>> {
    let text = crate::files::read_text(path, InputKind::MeasurementCsv)?;
    let points = parse_csv(&text, path)?;
    check_points(&points)?;
    Ok(points)
}

pub(super) fn parse_csv(text: &str, path: &Path) -> Result<Vec<Point>> {
    let mut records = crate::files::csv_records(text, path, true)?.into_iter();
    let headers = records.next().map(|r| r.1).unwrap_or_default();
    check_header(&headers, path)?;
    let mut points = Vec::new();
    for (line, rec) in records {
        if rec.len() != headers.len() {
            return Err(Error::field(
                path,
                format!("line {line}"),
                format!(
                    "found {} fields, expected {} (one per column of the header)",
                    rec.len(),
                    headers.len()
                ),
            ));
        }
        let row = CsvRow {
            headers: &headers,
            rec: &rec,
            path,
            line,
        };
        points.push(row.point()?);
    }
    if points.is_empty() {
        return Err(Error::field(path, "rows", "no data rows"));
    }
    Ok(points)
}

/// The header names the point's batch, its context and its rate (tokens/s or TPOT).
fn check_header(headers: &[String], path: &Path) -> Result<()> {
    let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    let mut missing: Vec<&str> = ["concurrency", "context"]
        .iter()
        .copied()
        .filter(|c| col(c).is_none())
        .collect();
    if col("tokens_per_s").is_none() && col("tpot_ms").is_none() {
        missing.push("tokens_per_s (or tpot_ms)");
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::field(
        path,
        "header",
        format!(
            "missing column(s) {}; expected concurrency,context,tokens_per_s or tpot_ms (optional kv_cache_dtype, nccl_proto, nccl_algo, p2p, allreduce, dcp, spec_method, draft_tokens, acceptance_rate, acceptance_length); found '{}'",
            missing.join(", "),
            crate::units::clip(&headers.join(","), 40)
        ),
    ))
}

/// The scenario settings a row states, each absent where its column is.
struct PointSettings {
    kv_bytes: Option<f64>,
    proto: Option<Proto>,
    algo: Option<Algo>,
    p2p: Option<bool>,
}

/// One data row of a throughput CSV, as long as its header: fields found by column name.
struct CsvRow<'a> {
    headers: &'a [String],
    rec: &'a [String],
    path: &'a Path,
    line: usize,
}

impl CsvRow<'_> {
    /// The field of column `name` (any case), absent when the column is or the field is empty.
    fn field(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .position(|h| h.eq_ignore_ascii_case(name))
            .and_then(|c| self.rec.get(c))
            .filter(|v| !v.is_empty())
            .cloned()
    }

    fn raw(&self, name: &str) -> String {
        self.field(name).unwrap_or_default()
    }

    /// The error of field `v` of column `name`, which should have been `allowed`.
    fn fail(&self, name: &str, v: &str, allowed: &str) -> Error {
        Error::field(
            self.path,
            format!("line {}, column {name}", self.line),
            format!("found '{}', expected {allowed}", crate::units::clip(v, 40)),
        )
    }

    fn point(&self) -> Result<Point> {
        let concurrency: u32 = self
            .raw("concurrency")
            .parse()
            .ok()
            .filter(|&c| (1..=crate::scenario::deployment::MAX_BATCH).contains(&c))
            .ok_or_else(|| {
                self.fail(
                    "concurrency",
                    &self.raw("concurrency"),
                    &format!(
                        "a whole number 1..{}",
                        crate::scenario::deployment::MAX_BATCH
                    ),
                )
            })?;
        let context: u64 = self
            .raw("context")
            .parse()
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| {
                self.fail(
                    "context",
                    &self.raw("context"),
                    "a whole number of tokens, at least 1",
                )
            })?;
        let (tokens_per_s, measured) = self.rate(concurrency)?;
        let PointSettings {
            kv_bytes,
            proto,
            algo,
            p2p,
        } = self.settings()?;
        if let Some(v) = self.field("allreduce") {
            if !v.eq_ignore_ascii_case("nccl") {
                return Err(self.fail(
                    "allreduce",
                    &v,
                    "nccl (per-point allreduce implementations are not fitted yet: split the file by implementation and pass --allreduce)",
                ));
            }
        }
        let dcp = self.dcp()?;
        let spec = spec_point(
            self.field("spec_method"),
            self.field("draft_tokens"),
            self.field("acceptance_rate"),
            self.field("acceptance_length"),
        )
        .map_err(|(name, v, allowed)| self.fail(name, &v, &allowed))?;
        Ok(Point {
            file: self.path.to_path_buf(),
            line: self.line,
            concurrency,
            context,
            tokens_per_s,
            measured,
            kv_bytes,
            proto,
            algo,
            p2p,
            dcp,
            spec,
            tp: None,
            model_id: None,
            serving: None,
        })
    }

    /// The output tokens/s, given or from the TPOT at `concurrency` sequences.
    fn rate(&self, concurrency: u32) -> Result<(f64, Measured)> {
        let rate = |name: &str, v: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
                .ok_or_else(|| self.fail(name, v, "a positive number below 1e9"))
        };
        match (self.field("tokens_per_s"), self.field("tpot_ms")) {
            (Some(t), _) => Ok((rate("tokens_per_s", &t)?, Measured::TokensPerS)),
            (None, Some(t)) => {
                let ms = rate("tpot_ms", &t)?;
                Ok((concurrency as f64 * 1e3 / ms, Measured::TpotMs(ms)))
            }
            (None, None) => {
                Err(self.fail("tokens_per_s", "", "a positive rate (or a tpot_ms value)"))
            }
        }
    }

    /// The scenario columns: each a knob of the table (`nccl_proto` or `nccl-proto`), read by
    /// the knob's parser and applied to a scratch request, from which the point takes it.
    fn settings(&self) -> Result<PointSettings> {
        let mut r = ScenarioRequest::default();
        let mut setting = |name: &str| -> Result<bool> {
            let k = knobs::knob(name);
            let Some(v) = self.field(&k.column()).or_else(|| self.field(k.name())) else {
                return Ok(false);
            };
            let value = k
                .parse_value(&v)
                .map_err(|_| self.fail(&k.column(), &v, k.expected))?;
            k.apply(&mut r, value);
            Ok(true)
        };
        let kv = setting("kv-cache-dtype")?;
        let proto = setting("nccl-proto")?;
        let algo = setting("nccl-algo")?;
        let p2p = setting("p2p")?;
        Ok(PointSettings {
            kv_bytes: kv.then_some(r.kv_bytes),
            proto: proto.then_some(r.proto),
            algo: algo.then_some(r.algo),
            p2p: p2p.then_some(r.p2p),
        })
    }

    /// The decode-context-parallel size, where the row states one.
    fn dcp(&self) -> Result<Option<u32>> {
        let Some(v) = self.field("dcp") else {
            return Ok(None);
        };
        v.parse::<u32>()
            .ok()
            .filter(|d| (1..=1024).contains(d))
            .map(Some)
            .ok_or_else(|| {
                self.fail(
                    "dcp",
                    &v,
                    "a whole number 1..1024 (the decode-context-parallel size)",
                )
            })
    }
}

/// KV element size of a vLLM `--kv-cache-dtype` value (the knob's parser).
pub(crate) fn kv_dtype_bytes(v: &str) -> Option<f64> {
    crate::scenario::knobs::KvDtype::parse(v).map(|d| d.bytes())
}

/// The speculative settings of a point from its four fields (all absent: none). On error:
/// (field, value, what was expected).
pub(crate) fn spec_point(
    method: Option<String>,
    k: Option<String>,
    rate: Option<String>,
    length: Option<String>,
) -> std::result::Result<Option<SpecPoint>, (&'static str, String, String)> {
    let Some(m) = method else {
        for (name, v) in [
            ("draft_tokens", &k),
            ("acceptance_rate", &rate),
            ("acceptance_length", &length),
        ] {
            if let Some(v) = v {
                return Err((
                    name,
                    v.clone(),
                    format!(
                        "no value without spec_method ({})",
                        Method::names_where(|m| m.source != DraftSource::Model)
                    ),
                ));
            }
        }
        return Ok(None);
    };
    if ["none", "off", "no", ""].contains(&m.to_ascii_lowercase().as_str()) {
        return Ok(None);
    }
    let method: Method = m
        .parse()
        .map_err(|_| ("spec_method", m.clone(), Method::names_where(|_| true)))?;
    let kv = k.ok_or_else(|| {
        (
            "draft_tokens",
            String::new(),
            "the number of draft tokens (vLLM's num_speculative_tokens), 1..16".to_string(),
        )
    })?;
    let draft_tokens = kv
        .parse::<u32>()
        .ok()
        .filter(|k| (1..=16).contains(k))
        .ok_or_else(|| {
            (
                "draft_tokens",
                kv.clone(),
                "a whole number 1..16".to_string(),
            )
        })?;
    let num = |name: &'static str, v: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| (name, v.to_string(), "a number".to_string()))
    };
    let acceptance = match (rate, length) {
        (Some(r), None) => MeasuredAcceptance::Rate(num("acceptance_rate", &r)?),
        (None, Some(l)) => MeasuredAcceptance::Length(num("acceptance_length", &l)?),
        (Some(r), Some(_)) => {
            return Err(("acceptance_rate", r, "either acceptance_rate or acceptance_length, not both".into()))
        }
        (None, None) => {
            return Err(("acceptance_rate", String::new(), "the measured acceptance: acceptance_rate (accepted / drafted tokens) or acceptance_length (1 + accepted / drafts)".into()))
        }
    };
    let sp = SpecPoint {
        method,
        draft_tokens,
        acceptance,
    };
    if let Err(why) = sp.acceptance() {
        let (name, v) = match acceptance {
            MeasuredAcceptance::Rate(r) => ("acceptance_rate", r.to_string()),
            MeasuredAcceptance::Length(l) => ("acceptance_length", l.to_string()),
        };
        return Err((name, v, why));
    }
    Ok(Some(sp))
}

/// Refuses what no set of decode benchmarks produces: the same point twice with different
/// rates (more than 25% apart: beyond run-to-run noise and scheduler effects), the very same
/// measurement repeated (it would count as independent evidence and make the interval falsely
/// narrow, down to zero width), total throughput collapsing as concurrency grows, or each
/// sequence getting faster with more company.
pub(super) fn check_points(points: &[Point]) -> Result<()> {
    const SLACK: f64 = 1.25;
    let pair_err = |a: &Point, b: &Point, why: String| {
        if a.file == b.file {
            Error::field(
                &a.file,
                format!("lines {} and {}", a.line.min(b.line), a.line.max(b.line)),
                why,
            )
        } else {
            Error::Conflict {
                first: a.origin(Path::new("")).to_string(),
                second: b.origin(Path::new("")).to_string(),
                problem: why,
            }
        }
    };
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if a.curve() != b.curve() {
                continue;
            }
            let (lo, hi) = if a.concurrency <= b.concurrency {
                (a, b)
            } else {
                (b, a)
            };
            let why = if lo.concurrency == hi.concurrency {
                let r = hi.tokens_per_s / lo.tokens_per_s;
                if r == 1.0 {
                    Some("the same measurement repeated (same settings, same rate): a copy adds no information and would shrink the confidence interval to nothing; keep one".to_string())
                } else if !(1.0 / SLACK..=SLACK).contains(&r) {
                    Some(format!(
                        "contradictory: the same settings measured twice with rates {:.1} and {:.1} tok/s, more than 25% apart",
                        lo.tokens_per_s, hi.tokens_per_s
                    ))
                } else {
                    None
                }
            } else if hi.tokens_per_s * SLACK < lo.tokens_per_s {
                Some(format!(
                    "not a decode throughput curve: total tokens/s falls from {:.1} to {:.1} as concurrency grows from {} to {} (a decode step with more sequences is never that much slower per step's work)",
                    lo.tokens_per_s, hi.tokens_per_s, lo.concurrency, hi.concurrency
                ))
            } else if hi.tokens_per_s / hi.concurrency as f64
                > SLACK * lo.tokens_per_s / lo.concurrency as f64
            {
                Some(format!(
                    "not a decode throughput curve: tokens/s per sequence rises from {:.2} to {:.2} as concurrency grows from {} to {} (sequences sharing a step cannot each run faster)",
                    lo.tokens_per_s / lo.concurrency as f64,
                    hi.tokens_per_s / hi.concurrency as f64,
                    lo.concurrency,
                    hi.concurrency
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(pair_err(lo, hi, why));
            }
        }
    }
    Ok(())
}

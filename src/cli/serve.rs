//! `decodesim serve`: a `vllm bench serve` run played step by step (chunked prefill mixed into
//! the decode steps) and its TTFT, TPOT, ITL and throughput; or the runs of saved results, the
//! measured numbers beside the predicted.

use super::{print, ScenarioArgs};
use crate::error::{Error, Result};
use crate::report::serving::{self as report, ServeReport, ServeRow};
use crate::report::Format;
use crate::sim::serving::{self, ServeOptions};
use crate::whatif::uncertainty::serve_intervals;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Prompt tokens per request (`vllm bench serve --random-input-len`).
    #[arg(long, default_value_t = 1024, value_name = "TOKENS")]
    isl: u64,
    /// Output tokens per request (`--random-output-len`; the random dataset ignores EOS).
    #[arg(long, default_value_t = 1024, value_name = "TOKENS")]
    osl: u64,
    /// Clients (`--max-concurrency`): one number or a list, one run each (e.g. 4,8,16).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1",
        value_name = "N[,N...]"
    )]
    concurrency: Vec<u32>,
    /// Requests in the run (`--num-prompts`).
    #[arg(long, default_value_t = serving::DEFAULT_NUM_PROMPTS, value_name = "N")]
    num_prompts: u32,
    /// Lengths drawn uniform in [L(1 - r), L(1 + r)] (`--random-range-ratio`).
    #[arg(long, default_value_t = 0.0, value_name = "R")]
    range_ratio: f64,
    /// The engine's token budget per step (vLLM's max_num_batched_tokens).
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    max_num_batched_tokens: u32,
    /// The engine's limit on running requests (vLLM's max_num_seqs).
    #[arg(long, default_value_t = 1024, value_name = "N")]
    max_num_seqs: u32,
    /// log2 of the price buckets per octave of a step's lengths (each within 1/2^(b+1)).
    #[arg(long, default_value_t = serving::BUCKET_BITS, value_name = "B")]
    bucket_bits: u32,
    /// Instead of --isl/--osl/--concurrency/--num-prompts: the runs of `vllm bench serve
    /// --save-result` files (their lengths, concurrency and prompts), measured beside predicted.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["isl", "osl", "concurrency", "num_prompts", "range_ratio"])]
    from_bench_serve: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    #[command(flatten)]
    intervals: super::intervals::IntervalArgs,
}

pub fn run(a: ServeArgs) -> Result<()> {
    let mut paths = super::paths::Paths::new();
    for f in &a.from_bench_serve {
        paths.input("--from-bench-serve", f);
    }
    paths.scenario(&a.scenario.request()).check()?;
    a.scenario.warn_noop_flags();
    a.scenario.warn_given(
        &["batch", "context"],
        "a serving run's steps take their batch and contexts from the scheduler",
    );
    let draws = a.intervals.draws()?;
    let req = a.scenario.request();
    let (s, p) = req.load()?;
    let base = ServeOptions {
        input_len: a.isl,
        output_len: a.osl,
        concurrency: a.concurrency.first().copied().unwrap_or(1),
        num_prompts: a.num_prompts,
        range_ratio: a.range_ratio,
        max_num_batched_tokens: a.max_num_batched_tokens,
        max_num_seqs: a.max_num_seqs,
        seed: req.seed,
        bucket_bits: a.bucket_bits,
    };
    let seed = a.intervals.interval_seed;
    let rows = if a.from_bench_serve.is_empty() {
        predicted_rows(&s, &p, &base, &a.concurrency, draws, seed)?
    } else {
        measured_rows(&req, &base, &a.from_bench_serve, draws, seed)?
    };
    let r = ServeReport {
        scenario: &s,
        profile: &p,
        rows,
    };
    let text = match a.format {
        Format::Table => report::render_table(&r),
        Format::Json => {
            serde_json::to_string_pretty(&report::to_json(&r)).map_err(|e| Error::Serialize {
                what: "report",
                message: e.to_string(),
            })? + "\n"
        }
        Format::Csv => report::to_csv(&r),
    };
    print(&text)
}

fn predicted_rows(
    s: &crate::scenario::Scenario,
    p: &crate::cost::CalibrationProfile,
    base: &ServeOptions,
    concurrency: &[u32],
    draws: usize,
    seed: u64,
) -> Result<Vec<ServeRow>> {
    concurrency
        .iter()
        .map(|&c| {
            let o = ServeOptions {
                concurrency: c,
                ..base.clone()
            };
            let result = serving::serve(s, p, &o)?;
            Ok(ServeRow {
                intervals: serve_intervals(s, p, &result.schedule, draws, seed)?,
                result,
                measured: None,
            })
        })
        .collect()
}

/// Each saved result replayed under its own recorded settings, its intervals drawn on that
/// scenario.
fn measured_rows(
    req: &crate::sim::ScenarioRequest,
    base: &ServeOptions,
    files: &[PathBuf],
    draws: usize,
    seed: u64,
) -> Result<Vec<ServeRow>> {
    crate::validate::serving::replay(req, base, files)?
        .into_iter()
        .map(|c| {
            let iv = crate::validate::serving::check_intervals(&c, draws, seed)?;
            Ok(ServeRow {
                result: c.predicted,
                measured: Some((c.origin, c.measured)),
                intervals: iv,
            })
        })
        .collect()
}

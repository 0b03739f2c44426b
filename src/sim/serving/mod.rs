//! A serving run as `vllm bench serve` drives one: a closed loop of C clients sending prompts
//! of the random dataset's lengths to a vLLM V1 engine whose scheduler mixes chunked prefill
//! into the decode steps (`scheduler`); every step priced as the mixed step it is
//! (`workload::mixed`, `price`); the benchmark's metrics from the requests' timings (`stats`).
//!
//! What is not modelled: the HTTP server, tokenizer and detokenizer (no time outside the
//! engine's steps), the engine's own scheduling time between steps beyond what the profile's
//! step overhead carries, prefix caching (the random dataset's prompts share nothing), and
//! requests that stop early (the random dataset ignores EOS). docs/serving.md has the rest.

mod price;
mod scheduler;
pub mod stats;

pub use price::{bucket, BUCKET_BITS};
pub use scheduler::RequestSteps;
pub use stats::Summary;

use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::memory::{self, MemoryOptions};
use rand::Rng;
use serde::Serialize;

/// `vllm bench serve`'s default number of prompts (`--num-prompts`, docs/sources.md §11.2).
pub const DEFAULT_NUM_PROMPTS: u32 = 1000;
/// Prompts a run may send (the run's memory grows with them).
pub const MAX_NUM_PROMPTS: u32 = 1_000_000;

/// The benchmark's settings and the engine's scheduler limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeOptions {
    /// `--random-input-len`.
    pub input_len: u64,
    /// `--random-output-len`.
    pub output_len: u64,
    /// `--max-concurrency`.
    pub concurrency: u32,
    /// `--num-prompts`.
    pub num_prompts: u32,
    /// `--random-range-ratio`: lengths uniform in [L(1 − r), L(1 + r)].
    pub range_ratio: f64,
    /// The engine's `max_num_batched_tokens` (the token budget of a step).
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    /// Seeds the length draws.
    pub seed: u64,
    /// log2 of the price buckets per octave (`price`).
    pub bucket_bits: u32,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            input_len: 1024,
            output_len: 1024,
            concurrency: 1,
            num_prompts: DEFAULT_NUM_PROMPTS,
            range_ratio: 0.0,
            max_num_batched_tokens: memory::DEFAULT_MAX_NUM_BATCHED_TOKENS,
            max_num_seqs: memory::DEFAULT_MAX_NUM_SEQS,
            seed: 0,
            bucket_bits: BUCKET_BITS,
        }
    }
}

/// What the run predicts, in the benchmark's terms.
#[derive(Debug, Clone, Serialize)]
pub struct ServeResult {
    pub options: ServeOptions,
    pub completed: usize,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub duration_s: f64,
    pub request_throughput: f64,
    /// Output tokens/s over the run (prefill time included).
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    /// GPUs the deployment takes (TP × PP × DP).
    pub gpus: u32,
    pub output_throughput_per_gpu: f64,
    pub ttft: Summary,
    /// Per request: (latency − TTFT) / (output tokens − 1), requests of one token left out.
    pub tpot: Summary,
    pub itl: Summary,
    pub e2el: Summary,
    pub steps: u64,
    /// Steps launched as a full CUDA graph, as piecewise graphs, and without graphs.
    pub steps_full_graph: u64,
    pub steps_piecewise: u64,
    pub steps_eager: u64,
    pub mean_prefill_tokens_per_step: f64,
    pub preemptions: u64,
    /// Distinct (bucketed) step shapes priced.
    pub shapes_priced: usize,
    /// vLLM's "GPU KV cache size" the scheduler's blocks come from, tokens.
    pub kv_cache_tokens: u64,
    pub warnings: Vec<String>,
    /// The steps the run played, for redrawing their prices (intervals).
    #[serde(skip)]
    pub schedule: Schedule,
}

/// What a run played, step by step: the same steps under other prices give the run those
/// prices would (the schedule depends on tokens, never on time).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schedule {
    /// Each distinct bucketed step shape and its price, µs.
    pub shapes: Vec<(crate::workload::mixed::MixedStep, f64)>,
    /// Per step, its shape's index in `shapes`.
    pub steps: Vec<u32>,
    /// Per finished request, in finishing order, its life in steps.
    pub requests: Vec<RequestSteps>,
}

/// Refuses what the serving run does not model, and settings out of range.
fn check(s: &Scenario, o: &ServeOptions) -> Result<()> {
    let refuse = |flag: &'static str, problem: &str| {
        Err(Error::FlagUse {
            flag,
            problem: format!("{problem}: decodesim serve models one tensor-parallel engine (with --ep), without it"),
        })
    };
    if s.model.mla.is_none() {
        return Err(Error::ScenarioSetting {
            flag: "--model",
            value: s.model.name.clone(),
            problem: ": decodesim serve models the MLA prefill path only (DeepSeek-V3 and Kimi-K2 style models); expected an MLA model".into(),
        });
    }
    if s.layout.dp_size() > 1 {
        return refuse(
            "--dp",
            "data-parallel attention is not modelled in a serving run",
        );
    }
    if s.layout.pp_size() > 1 {
        return refuse(
            "--pp",
            "pipeline parallelism is not modelled in a serving run",
        );
    }
    if s.layout.tbo {
        return refuse(
            "--tbo",
            "two-batch overlap is not modelled in a serving run",
        );
    }
    if s.layout.dcp_size() > 1 {
        return refuse(
            "--dcp",
            "decode context parallelism is not modelled in a serving run",
        );
    }
    let max_ctx = crate::scenario::deployment::MAX_CONTEXT;
    let range = |flag: &'static str, v: u64, lo: u64, hi: u64| -> Result<()> {
        if (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(Error::Flag {
                flag,
                value: v.to_string(),
                expected: format!("expected a whole number from {lo} to {hi}"),
            })
        }
    };
    range("--isl", o.input_len, 1, max_ctx)?;
    range("--osl", o.output_len, 1, max_ctx)?;
    let max_b = crate::scenario::deployment::MAX_BATCH as u64;
    range("--concurrency", o.concurrency as u64, 1, max_b)?;
    range(
        "--num-prompts",
        o.num_prompts as u64,
        1,
        MAX_NUM_PROMPTS as u64,
    )?;
    range("--bucket-bits", o.bucket_bits as u64, 1, 12)?;
    let r = o.range_ratio;
    if !(r.is_finite() && (0.0..1.0).contains(&r)) {
        return Err(Error::Flag {
            flag: "--range-ratio",
            value: r.to_string(),
            expected: "expected a share from 0 (every request at the stated lengths) up to but not including 1".into(),
        });
    }
    Ok(())
}

/// The random dataset's lengths: each uniform over the whole numbers in
/// [⌊L(1 − r)⌋, ⌈L(1 + r)⌉], at least 1 (docs/sources.md §11.2), drawn from `seed`.
pub fn draw_lengths(o: &ServeOptions) -> Vec<(u64, u64)> {
    let mut rng = crate::rng::seeded(o.seed);
    let span = |l: u64| {
        let lo = ((l as f64 * (1.0 - o.range_ratio)).floor() as u64).max(1);
        let hi = ((l as f64 * (1.0 + o.range_ratio)).ceil() as u64).max(lo);
        (lo, hi)
    };
    let (il, ih) = span(o.input_len);
    let (ol, oh) = span(o.output_len);
    (0..o.num_prompts)
        .map(|_| (rng.random_range(il..=ih), rng.random_range(ol..=oh)))
        .collect()
}

/// The serving run of `o` on the deployment `s` priced by `p` (module doc).
pub fn serve(s: &Scenario, p: &CalibrationProfile, o: &ServeOptions) -> Result<ServeResult> {
    serve_lengths(s, p, o, draw_lengths(o))
}

/// [`serve`] of requests of the given (input, output) lengths, sent in this order (a result's
/// own lengths, `--save-detailed`); `o`'s lengths and prompt count only describe them.
pub fn serve_lengths(
    s: &Scenario,
    p: &CalibrationProfile,
    o: &ServeOptions,
    lengths: Vec<(u64, u64)>,
) -> Result<ServeResult> {
    check(s, o)?;
    if lengths.is_empty() {
        return Err(Error::Flag {
            flag: "--num-prompts",
            value: "0".into(),
            expected: "expected at least one request".into(),
        });
    }
    let longest = lengths.iter().map(|(i, o)| i + o).max().unwrap_or(1);
    let described = format!(
        "input {} + output {} tokens, range ratio {}",
        o.input_len, o.output_len, o.range_ratio
    );
    let max_pos = s.model.max_position_embeddings as u64;
    if longest > max_pos {
        return Err(Error::RequestTooLong {
            tokens: longest,
            described,
            model: s.model.name.clone(),
            max: max_pos,
        });
    }
    let mo = MemoryOptions {
        max_num_batched_tokens: o.max_num_batched_tokens,
        max_num_seqs: o.max_num_seqs,
        ..MemoryOptions::of_scenario(s)
    };
    let account = memory::account(s, p, &mo)?;
    let block = account.block_size.max(1) as u64;
    if longest.div_ceil(block) > account.num_blocks {
        return Err(Error::KvDoesNotFit {
            tokens: longest as f64,
            described,
            kv_tokens: account.kv_cache_tokens,
            model: s.model.name.clone(),
            tp: s.layout.tp,
        });
    }
    let limits = scheduler::Limits {
        max_num_batched_tokens: o.max_num_batched_tokens as u64,
        max_num_seqs: o.max_num_seqs,
        block_size: block,
        num_blocks: account.num_blocks,
    };
    let mut pricer = price::StepPricer::new(s, p, o.bucket_bits);
    let mut played = scheduler::play(&lengths, o.concurrency, limits, &mut |st| pricer.price(st))?;
    let mut warnings: Vec<String> = pricer.warnings.iter().cloned().collect();
    warnings.extend(run_warnings(s, o, &played, account.kv_cache_tokens));
    let schedule = Schedule {
        shapes: std::mem::take(&mut pricer.priced),
        steps: std::mem::take(&mut played.step_shapes),
        requests: played.requests.iter().map(|r| r.steps).collect(),
    };
    let mut r = summarise(
        s,
        o,
        &lengths,
        played,
        pricer.shapes(),
        account.kv_cache_tokens,
        warnings,
    );
    r.schedule = schedule;
    Ok(r)
}

/// What the run itself warns of: LL-priced prefill all-reduces, preemptions.
fn run_warnings(
    s: &Scenario,
    o: &ServeOptions,
    played: &scheduler::Played,
    kv_cache_tokens: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    if s.nccl.proto == crate::scenario::Proto::Ll && played.prefill_tokens > 0 {
        out.push(format!(
            "--nccl-proto LL: the prefill steps' all-reduces (up to {} tokens x {} x 2 bytes) are priced at NCCL's LL protocol, which NCCL's own choice keeps for small messages; pass --nccl-proto auto unless the server sets NCCL_PROTO=LL",
            o.max_num_batched_tokens, s.model.hidden
        ));
    }
    if played.preemptions > 0 {
        out.push(format!(
            "the KV cache ({} tokens) ran out: {} preemption(s), each recomputing its request's prompt and output so far",
            crate::units::grouped(kv_cache_tokens as f64, 0),
            played.preemptions
        ));
    }
    out
}

/// The benchmark's metrics of a played run.
fn summarise(
    s: &Scenario,
    o: &ServeOptions,
    lengths: &[(u64, u64)],
    played: scheduler::Played,
    shapes: usize,
    kv_cache_tokens: u64,
    warnings: Vec<String>,
) -> ServeResult {
    let ms = |us: f64| us / 1e3;
    let mut ttft: Vec<f64> = played
        .requests
        .iter()
        .map(|r| ms(r.first_token_us - r.arrival_us))
        .collect();
    let mut e2el: Vec<f64> = played
        .requests
        .iter()
        .map(|r| ms(r.done_us - r.arrival_us))
        .collect();
    let mut tpot: Vec<f64> = played
        .requests
        .iter()
        .filter(|r| r.output > 1)
        .map(|r| ms(r.done_us - r.first_token_us) / (r.output - 1) as f64)
        .collect();
    let mut itl: Vec<f64> = played.itl_us.iter().map(|&u| ms(u)).collect();
    let duration_s = (played.duration_us / 1e6).max(f64::MIN_POSITIVE);
    let total_in: u64 = lengths.iter().map(|l| l.0).sum();
    let total_out: u64 = lengths.iter().map(|l| l.1).sum();
    let gpus = s.ranks();
    let output_throughput = total_out as f64 / duration_s;
    ServeResult {
        options: o.clone(),
        completed: played.requests.len(),
        total_input_tokens: total_in,
        total_output_tokens: total_out,
        duration_s,
        request_throughput: played.requests.len() as f64 / duration_s,
        output_throughput,
        total_token_throughput: (total_in + total_out) as f64 / duration_s,
        gpus,
        output_throughput_per_gpu: output_throughput / gpus.max(1) as f64,
        ttft: Summary::of(&mut ttft),
        tpot: Summary::of(&mut tpot),
        itl: Summary::of(&mut itl),
        e2el: Summary::of(&mut e2el),
        steps: played.steps,
        steps_full_graph: played.mode_steps[0],
        steps_piecewise: played.mode_steps[1],
        steps_eager: played.mode_steps[2],
        mean_prefill_tokens_per_step: played.prefill_tokens as f64 / played.steps.max(1) as f64,
        preemptions: played.preemptions,
        shapes_priced: shapes,
        kv_cache_tokens,
        warnings,
        schedule: Schedule::default(),
    }
}

/// [`serve`] of a scenario request (names resolved, the profile read).
pub fn serve_request(req: &crate::sim::ScenarioRequest, o: &ServeOptions) -> Result<ServeResult> {
    let (s, p) = req.load()?;
    serve(&s, &p, o)
}

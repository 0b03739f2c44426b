//! Throughput against latency: the steady-state decode step from the simulator at each
//! concurrency up to the KV limit, with prefill's share added by a chunked-prefill model.
//!
//! **Decode.** At concurrency `c` every step decodes one token for each of `c` sequences whose
//! KV cache holds the mean decode context (`--context`, or `input_len + output_len / 2` for a
//! request mix: a request's context grows from its input to input + output while it decodes).
//! The step time is the simulator's full timeline (`sim::simulate_loaded`) at batch `c`.
//!
//! **Prefill (chunked).** In steady state every output token is matched by
//! `input_len / output_len` prompt tokens (ratio of the weighted means for a mix), which vLLM's
//! chunked prefill runs inside the same steps, so each step of `c` decoders also carries
//! `c × input_len / output_len` prefill tokens. One prefill token costs
//! - the decode step's own kernels priced at a chunk of `max_num_batched_tokens` tokens by the
//!   same profile (`cost::price` of the workload at that token count: projections, MoE, norms,
//!   all-reduces, KV write; without decode attention, lm_head, the logits all-gather and
//!   sampling, which prefill runs once per request), divided by the chunk, plus
//! - prefill attention by the roofline: `2 × heads/TP × (qk_dim + v_dim) × input_len / 2` FLOPs
//!   per token and layer (causal: a prompt token sees half the prompt on average) on the BF16
//!   peak at the profile's `gemm_bf16` compute efficiency (an assumption: no attention kernel is
//!   measured at prefill shapes).
//!
//! TPOT = (decode step + the step's prefill tokens × per-token prefill cost); tokens/s =
//! c / TPOT. This is a throughput-average model: it spreads prefill evenly over the steps,
//! where a real scheduler runs it in bursts, so it says nothing of TTFT or TPOT tails.
//!
//! **Knee and plateau.** The marginal tokens/s of one more user between grid points is held
//! against the first user's: the knee is the first concurrency where it falls below
//! [`KNEE_MARGINAL_SHARE`] of it; the plateau is the first concurrency within
//! [`PLATEAU_SHARE`] of the best tokens/s on the curve.

use crate::cost::{self, CalibrationProfile};
use crate::error::{Error, Result};
use crate::files::{field, HandCsv};
use crate::scenario::Scenario;
use crate::workload::CostFamily;
use serde::Serialize;

/// The knee: marginal tokens/s per added user below this share of the first user's rate.
pub(crate) const KNEE_MARGINAL_SHARE: f64 = 0.5;
/// The plateau: tokens/s within this share of the best on the curve.
pub(crate) const PLATEAU_SHARE: f64 = 0.95;

/// What the users ask of the deployment, reduced to what the curve and the KV limit need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Demand {
    /// Mean KV length while a sequence decodes.
    pub decode_context: u64,
    /// KV tokens one request holds at its longest (what the KV limit is counted in).
    pub tokens_per_request: f64,
    /// Prompt tokens per output token (0: decode only).
    pub prefill_per_output: f64,
    /// Mean prompt length (prefill attention's causal prefix is half of it).
    pub(crate) input_len: f64,
    pub(crate) output_len: f64,
    /// The longest request (checked against the model's maximum).
    pub longest: u64,
    /// How the demand was given, for the report.
    pub(crate) described: String,
}

/// One row of a request mix: `input_len,output_len,weight`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MixRow {
    pub input_len: u64,
    pub output_len: u64,
    pub weight: f64,
}

impl Demand {
    /// Decode only, every sequence at `context` tokens.
    pub fn context(context: u64) -> Self {
        Demand {
            decode_context: context,
            tokens_per_request: context as f64,
            prefill_per_output: 0.0,
            input_len: 0.0,
            output_len: 0.0,
            longest: context,
            described: format!("decode only at context {context}"),
        }
    }

    /// Requests of `input_len` prompt and `output_len` generated tokens.
    pub fn lengths(input_len: u64, output_len: u64) -> Self {
        let mut d = Demand::mix(&[MixRow {
            input_len,
            output_len,
            weight: 1.0,
        }]);
        d.described = format!("input {input_len} + output {output_len} tokens per request");
        d
    }

    /// A weighted request mix (rows already checked).
    pub fn mix(rows: &[MixRow]) -> Self {
        let w: f64 = rows
            .iter()
            .map(|r| r.weight)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
        let mean =
            |f: &dyn Fn(&MixRow) -> f64| rows.iter().map(|r| r.weight * f(r)).sum::<f64>() / w;
        let input = mean(&|r| r.input_len as f64);
        let output = mean(&|r| r.output_len as f64).max(1.0);
        Demand {
            decode_context: mean(&|r| r.input_len as f64 + r.output_len as f64 / 2.0)
                .round()
                .max(1.0) as u64,
            tokens_per_request: mean(&|r| (r.input_len + r.output_len) as f64),
            prefill_per_output: input / output,
            input_len: input,
            output_len: output,
            longest: rows
                .iter()
                .map(|r| r.input_len + r.output_len)
                .max()
                .unwrap_or(1),
            described: format!(
                "request mix of {} rows: mean input {:.0}, mean output {:.0} tokens",
                rows.len(),
                input,
                output
            ),
        }
    }

    /// The longest request must fit the model's context window.
    pub(crate) fn check(&self, s: &Scenario) -> Result<()> {
        let max = s.model.max_position_embeddings as u64;
        if self.longest > max {
            return Err(Error::RequestTooLong {
                tokens: self.longest,
                described: self.described.clone(),
                model: s.model.name.clone(),
                max,
            });
        }
        Ok(())
    }
}

/// Reads a request mix CSV: a header `input_len,output_len,weight` and one row per request
/// class; lengths are positive integers, weights positive numbers.
pub fn parse_mix(text: &str, path: &std::path::Path) -> Result<Vec<MixRow>> {
    const COLUMNS: &str = "input_len,output_len,weight";
    let bad = |line: usize, what: String| Error::field(path, format!("line {line}"), what);
    let t = HandCsv::parse(
        text,
        path,
        "a header input_len,output_len,weight and at least one row",
    )?;
    let idx = t.require(&["input_len", "output_len", "weight"], COLUMNS)?;
    let mut rows = Vec::new();
    for (n, row) in &t.rows {
        let n = *n;
        if row.len() != 3 {
            return Err(bad(
                n,
                format!(
                    "found {} fields in '{}', expected 3: {COLUMNS}",
                    row.len(),
                    crate::units::echo(&row.join(","))
                ),
            ));
        }
        let f: Vec<&str> = idx.iter().map(|&i| field(row, i)).collect();
        let len = |i: usize, name: &str| -> Result<u64> {
            match f[i].parse::<u64>() {
                Ok(v) if (1..=crate::scenario::deployment::MAX_CONTEXT).contains(&v) => Ok(v),
                _ => Err(bad(
                    n,
                    format!(
                        "{name} '{}' is not a token count: expected an integer from 1 to {}",
                        crate::units::echo(f[i]),
                        crate::scenario::deployment::MAX_CONTEXT
                    ),
                )),
            }
        };
        let input_len = len(0, "input_len")?;
        let output_len = len(1, "output_len")?;
        // Bounded (`scenario::limits::LOG_COUNT`), so the weights' sum cannot overflow to infinity.
        let weight = match f[2].parse::<f64>() {
            Ok(w) if w > 0.0 && crate::scenario::limits::LOG_COUNT.contains(w) => w,
            _ => {
                return Err(bad(
                    n,
                    format!(
                        "weight '{}' is not a positive number of at most {}",
                        crate::units::echo(f[2]),
                        crate::units::grouped(crate::scenario::limits::LOG_COUNT.max, 0)
                    ),
                ))
            }
        };
        rows.push(MixRow {
            input_len,
            output_len,
            weight,
        });
        if rows.len() > 100_000 {
            return Err(bad(
                n,
                "more than 100,000 rows: group them by length".into(),
            ));
        }
    }
    if rows.is_empty() {
        return Err(Error::field(path, "rows", "no rows after the header"));
    }
    Ok(rows)
}

/// Prefill's price per prompt token, and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PrefillCost {
    pub(crate) us_per_token: f64,
    /// The part from the decode step's kernels priced at the chunk.
    pub(crate) kernels_us_per_token: f64,
    /// The roofline attention part.
    pub(crate) attention_us_per_token: f64,
    pub(crate) chunk_tokens: u32,
    pub(crate) warnings: Vec<String>,
}

/// The per-token prefill cost (see the module notes).
pub(crate) fn prefill_cost(
    s: &Scenario,
    p: &CalibrationProfile,
    chunk_tokens: u32,
    input_len: f64,
) -> Result<PrefillCost> {
    let mut chunk = s.clone();
    chunk.batch = chunk_tokens.clamp(1, crate::scenario::deployment::MAX_BATCH);
    // Decode attention is left out below; a one-token context keeps its pricing trivial.
    chunk.context = 1;
    // Only what a prefill token runs: the layers (without decode attention) and the
    // embedding; the frame ops (lm_head, logits all-gather, sampling) run once per request.
    let mut w = crate::workload::build(&chunk);
    w.ops.retain(|op| {
        let in_layer = op.layer >= 0
            && !matches!(
                op.family,
                CostFamily::AttentionMlaDecode | CostFamily::AttentionGqaDecode
            );
        in_layer || op.family == CostFamily::Embedding
    });
    let pricing = cost::price(&w, &chunk, p)?;
    let kernels: f64 = pricing.base_us.iter().sum();
    let m = &s.model;
    let heads = m.num_heads as f64 / s.layout.tp as f64;
    let dims = match &m.mla {
        Some(d) => (d.qk_nope_head_dim + d.qk_rope_head_dim + d.v_head_dim) as f64,
        None => 2.0 * m.head_dim as f64,
    };
    let flops = 2.0 * heads * dims * (input_len / 2.0) * m.num_layers as f64;
    let eff = p
        .kernel(CostFamily::GemmBf16)
        .map_or(1.0, |k| k.compute_efficiency)
        .max(1e-3);
    let attention = flops / (s.system.gpu.bf16_tflops * 1e6 * eff);
    let kernels_per_token = kernels / chunk.batch as f64;
    Ok(PrefillCost {
        us_per_token: kernels_per_token + attention,
        kernels_us_per_token: kernels_per_token,
        attention_us_per_token: attention,
        chunk_tokens: chunk.batch,
        warnings: pricing.warnings,
    })
}

/// One point of the throughput–latency curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CurvePoint {
    pub concurrency: u32,
    /// The simulated decode step at this concurrency.
    pub step_time_us: f64,
    /// Prefill's share added to each step (chunked-prefill model; 0 for decode only).
    pub prefill_us: f64,
    pub tpot_ms: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_user: f64,
}

impl CurvePoint {
    pub fn new(concurrency: u32, step_time_us: f64, prefill_us_per_token: f64, d: &Demand) -> Self {
        let prefill_us = concurrency as f64 * d.prefill_per_output * prefill_us_per_token;
        let tpot_us = step_time_us + prefill_us;
        let tokens_per_s = concurrency as f64 / tpot_us * 1e6;
        CurvePoint {
            concurrency,
            step_time_us,
            prefill_us,
            tpot_ms: tpot_us / 1e3,
            tokens_per_s,
            tokens_per_s_per_user: tokens_per_s / concurrency.max(1) as f64,
        }
    }
}

/// Concurrencies to simulate from 1 to `max`: powers of two plus an even spread, at most about
/// `points` values, always including 1 and `max`.
fn grid(max: u32, points: usize) -> Vec<u32> {
    let max = max.max(1);
    let mut v = vec![1u32, max];
    let mut p = 2u32;
    while p < max {
        v.push(p);
        p = p.saturating_mul(2);
    }
    let linear = points.saturating_sub(v.len()).max(2) as u32;
    for i in 1..linear {
        v.push(((max as u64 * i as u64) / linear as u64).max(1) as u32);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// The simulated decode step (µs) at each concurrency of `grid`, in parallel on the machine's
/// cores (std threads; each simulation is independent and seeded).
fn decode_steps(
    s: &Scenario,
    p: &CalibrationProfile,
    decode_context: u64,
    grid: &[u32],
) -> Result<Vec<f64>> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(grid.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<f64>>>> =
        grid.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&c) = grid.get(i) else { break };
                let mut sc = s.clone();
                sc.batch = c;
                // One user cannot be split into two micro-batches: that step runs as one.
                if c < 2 {
                    sc.layout.tbo = false;
                }
                sc.context = decode_context;
                let r = crate::sim::simulate_loaded(sc, p.clone()).map(|sim| sim.step_time_us());
                if let Ok(mut slot) = results[i].lock() {
                    *slot = Some(r);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .ok()
                .flatten()
                .unwrap_or(Err(Error::Invariant("a curve simulation did not finish")))
        })
        .collect()
}

/// The work of one curve of `layout` up to `max` concurrencies, and its full timelines:
/// each grid concurrency's timeline at its own batch ([`crate::sim::work::timeline_units`]) and,
/// with a TPOT limit, the bisection between two grid points (at most one step per power of
/// two, each counted at `max`).
pub(crate) fn curve_units(
    layout: crate::sim::work::TimelineLayout,
    max: u32,
    points: usize,
    max_tpot: bool,
) -> (f64, usize) {
    use crate::sim::work::timeline_units;
    let g = grid(max, points);
    let mut units: f64 = g.iter().map(|&c| timeline_units(layout, c as u64)).sum();
    let mut sims = g.len();
    if max_tpot {
        let steps = (max.max(1) as f64).log2().ceil() as usize + 1;
        units += steps as f64 * timeline_units(layout, max as u64);
        sims += steps;
    }
    (units, sims)
}

/// Refuses a capacity study above `max_work` before any step is simulated: `curves` curves,
/// each counted as the scenario's own ([`curve_units`] at its layout and up to the largest
/// concurrency its memory holds: the scenario is loaded and its memory accounted first), the
/// step at that concurrency, the `breakdown` batches' steps and an interval of `draws` draws.
pub(crate) fn check_work(
    req: &super::CapacityRequest,
    curves: f64,
    breakdown: &[u32],
    draws: usize,
    max_work: u64,
) -> Result<()> {
    use crate::error::WORK_VARIANT_LOAD;
    use crate::sim::work::{interval_units, timeline_units, TimelineLayout};
    let sized = super::sized(req)?;
    let mut s = sized.scenario.clone();
    let layout = TimelineLayout::of(&s);
    let max_c = sized.max_concurrency.min(u32::MAX as u64) as u32;
    let (per_curve, sims) = curve_units(layout, max_c, req.points, req.max_tpot_ms.is_some());
    s.batch = max_c;
    // The scenario is loaded twice (its memory accounted for this check, then the study).
    let extra = 2.0 * WORK_VARIANT_LOAD
        + timeline_units(layout, max_c as u64)
        + breakdown
            .iter()
            .map(|&b| timeline_units(layout, b as u64))
            .sum::<f64>()
        + interval_units(&s, draws, 1.0);
    let grouped = |v: f64| crate::units::grouped(v.min(1e15), 0);
    let what = format!(
        "concurrencies up to {} over {} ranks{}, the step at the largest{}{}",
        grouped(max_c as f64),
        layout.ranks,
        if req.max_tpot_ms.is_some() {
            " with a TPOT bisection"
        } else {
            ""
        },
        if breakdown.is_empty() {
            String::new()
        } else {
            format!(", {} breakdown batches", breakdown.len())
        },
        if draws > 0 {
            format!(", an interval of {draws} draws")
        } else {
            String::new()
        }
    );
    crate::error::check_work(
        "capacity",
        format!(
            "{} of {} full timelines each and {} single steps ({what})",
            if curves == 1.0 {
                "1 curve".to_string()
            } else {
                format!("{} curves", grouped(curves))
            },
            grouped(sims as f64),
            grouped(1.0 + breakdown.len() as f64),
        ),
        curves * per_curve + extra,
        max_work,
        "fewer --points, --systems, --layouts, --batches or --draws",
    )
}

/// The curve with its knee, plateau and TPOT limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    pub points: Vec<CurvePoint>,
    pub(crate) knee: Option<u32>,
    pub(crate) plateau: Option<u32>,
    /// The curve still climbs at its last point (the concurrency limit binds before a plateau).
    pub(crate) still_climbing: bool,
    /// `--max-tpot-ms` and the highest concurrency meeting it (None: not even one user).
    pub(crate) max_tpot_ms: Option<f64>,
    pub max_concurrency_at_tpot: Option<u32>,
    pub(crate) prefill: Option<PrefillCost>,
}

/// Knee and plateau of a curve (see the module notes).
pub fn knee_and_plateau(points: &[CurvePoint]) -> (Option<u32>, Option<u32>, bool) {
    let Some(first) = points.first() else {
        return (None, None, false);
    };
    let base = first.tokens_per_s / first.concurrency.max(1) as f64;
    let mut knee = None;
    let mut last_marginal = base;
    for w in points.windows(2) {
        let dc = (w[1].concurrency - w[0].concurrency).max(1) as f64;
        let marginal = (w[1].tokens_per_s - w[0].tokens_per_s) / dc;
        last_marginal = marginal;
        if knee.is_none() && marginal < KNEE_MARGINAL_SHARE * base {
            knee = Some(w[0].concurrency);
        }
    }
    let best = points.iter().map(|p| p.tokens_per_s).fold(0.0, f64::max);
    let plateau = points
        .iter()
        .find(|p| p.tokens_per_s >= PLATEAU_SHARE * best)
        .map(|p| p.concurrency);
    let climbing = points.len() > 1 && last_marginal >= KNEE_MARGINAL_SHARE * base;
    (knee, plateau, climbing)
}

/// The highest concurrency of `points` whose TPOT meets `max_ms`.
pub fn best_under_tpot(points: &[CurvePoint], max_ms: f64) -> Option<u32> {
    points
        .iter()
        .filter(|p| p.tpot_ms <= max_ms)
        .map(|p| p.concurrency)
        .max()
}

/// Builds the curve from 1 to `max_concurrency`; with `max_tpot_ms`, the concurrency that
/// meets it is refined between grid points by bisection (a few extra simulations).
pub(crate) fn build(
    s: &Scenario,
    p: &CalibrationProfile,
    demand: &Demand,
    max_concurrency: u32,
    points: usize,
    max_tpot_ms: Option<f64>,
    prefill: Option<PrefillCost>,
) -> Result<Curve> {
    let g = grid(max_concurrency, points);
    let steps = decode_steps(s, p, demand.decode_context, &g)?;
    let per_token = prefill.as_ref().map_or(0.0, |c| c.us_per_token);
    let mut pts: Vec<CurvePoint> = g
        .iter()
        .zip(&steps)
        .map(|(&c, &us)| CurvePoint::new(c, us, per_token, demand))
        .collect();
    // Knee and plateau on the even grid: the bisection's close points would make the
    // marginal rate noisy.
    let (knee, plateau, still_climbing) = knee_and_plateau(&pts);
    let mut at_tpot = None;
    if let Some(limit) = max_tpot_ms {
        at_tpot = best_under_tpot(&pts, limit);
        if let Some(lo) = at_tpot {
            // Bisect between the last grid point that meets the limit and the next one.
            if let Some(hi) = g.iter().copied().find(|&c| c > lo) {
                let (mut lo, mut hi) = (lo, hi);
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    let us = decode_steps(s, p, demand.decode_context, &[mid])?[0];
                    let pt = CurvePoint::new(mid, us, per_token, demand);
                    pts.push(pt);
                    if pt.tpot_ms <= limit {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                at_tpot = Some(lo);
            }
        }
        pts.sort_by_key(|p| p.concurrency);
        pts.dedup_by_key(|p| p.concurrency);
    }
    Ok(Curve {
        points: pts,
        knee,
        plateau,
        still_climbing,
        max_tpot_ms,
        max_concurrency_at_tpot: at_tpot,
        prefill,
    })
}

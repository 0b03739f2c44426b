//! Disaggregated prefill and decode: separate pools of prefill and decode instances, the KV
//! cache of every prompt moved between them, and the prefill:decode ratio that serves a request
//! mix best under TPOT and TTFT targets, held against the co-located (chunked-prefill) answer.
//!
//! **Prefill pool.** A prefill instance (on `--prefill-system`, default the decode system; at
//! `--prefill-tp`, default the decode instance's TP) runs steps of `max_num_batched_tokens` prompt tokens; one prompt
//! token costs what `curve::prefill_cost` prices at that chunk (the step's layer kernels at the
//! chunk / the chunk + the prefill-attention roofline at the mean input). So one request of the
//! mean input occupies the instance `S = input × cost` and an instance serves
//! `μ = min(1 / S, 1 / KV send time)` requests/s (its KV sends overlap the next prompts'
//! compute, so the link bounds the rate only when it is the slower). A request alone
//! is prefilled at a chunk of `min(input, max_num_batched_tokens)` tokens (the queueing-free
//! prefill time of TTFT). The lm_head and sampling of the first token are left out (one token).
//!
//! **KV transfer.** `cost::kv_transfer`: over the intra-node link when both pools of a ratio
//! fit on one node of one system, else over the network between nodes (both systems need a
//! `[network]`; a system file is a node type here, and a ratio may take more nodes than it lists).
//!
//! **Decode pool.** The decode curve of `curve::build` without the prefill share (no chunked
//! prefill interleaved). Its operating limit is the concurrency with the most tokens/s within
//! `--max-tpot-ms` (without it: on the whole curve).
//!
//! **A ratio xP:yD.** Requests/s `R = min(x × μ, y × decode tokens/s at its limit /
//! output_len, y / KV receive time)` (a decode instance receives one prompt's KV at a time, so
//! more prefill than decode instances can make the decode side's links bind: `binds` = `KV
//! transfer`); the decode instances then run at the smallest simulated concurrency that
//! carries `R × output_len / y` tokens/s (lower concurrency, lower TPOT when prefill binds).
//! TTFT = the prompt's prefill alone + its KV transfer + one decode step at that concurrency
//! (the queueing-free lower bound, `ttft_min_ms`) + the M/D/1 waits of the prefill queue and of
//! the decode side's receiving queue at that load: `Wq = ρ S / (2 (1 − ρ))` with `ρ = R / (x μ)`
//! and `S = 1 / μ`, and with `ρ = R × receive time / y` and `S` = the receive time (Poisson
//! arrivals split evenly over the instances, deterministic service; a batching scheduler serves
//! a burst faster, so this is an estimate). A saturated prefill pool (ρ = 1) has no finite TTFT
//! (`ttft_ms` null). `--max-tpot-ms` caps the decode point; `--max-ttft-ms` caps the load: `R`
//! is lowered (bisection; TTFT grows with the load) until the TTFT with the wait meets it and the
//! longest prompt of a mix meets it at the lower bound (`binds` = `TTFT`).
//!
//! **Co-located.** The capacity curve with chunked prefill, at the point with the most tokens/s
//! within `--max-tpot-ms` whose TTFT lower bound (`ceil(input / (max_num_batched_tokens − c))`
//! steps, each the decode step plus its share of the prompt at the per-token prefill cost,
//! without queueing or the other prompts in the step) meets `--max-ttft-ms`.
//!
//! **Winner.** Among the rows that meet the targets: the lowest USD per million output tokens
//! when every one is priced (`--gpu-hour-usd`), else the most tokens/s per GPU.

mod ratio;
mod verdict;

use super::curve::{self, Curve, CurvePoint, Demand};
use super::{Capacity, CapacityRequest, DemandSpec};
use crate::cost::kv_transfer::{KvLink, KvTransfer};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::{limits, Scenario};
use ratio::RatioStudy;
use serde::Serialize;
use verdict::{choose, colocated};

/// Largest number of instances in either pool (`--max-pool-instances`): 16 × 16 ratios, each a
/// few arithmetic steps over two curves; larger pools are multiples of a smaller ratio.
pub const MAX_POOL_INSTANCES: u32 = 16;
pub const DEFAULT_POOL_INSTANCES: u32 = 4;

/// `--disaggregate`'s options.
#[derive(Debug, Clone, PartialEq)]
pub struct DisaggOptions {
    pub max_ttft_ms: Option<f64>,
    /// The prefill pool's system (None: the decode system).
    pub prefill_system: Option<String>,
    /// The prefill instance's TP (None: the decode instance's).
    pub prefill_tp: Option<u32>,
    /// Ratios xP:yD with x and y from 1 to this.
    pub max_instances: u32,
}

impl Default for DisaggOptions {
    fn default() -> Self {
        DisaggOptions {
            max_ttft_ms: None,
            prefill_system: None,
            prefill_tp: None,
            max_instances: DEFAULT_POOL_INSTANCES,
        }
    }
}

impl DisaggOptions {
    fn check(&self) -> Result<()> {
        if let Some(t) = self.max_ttft_ms {
            limits::flag_in("--max-ttft-ms", t, &limits::MAX_TPOT_MS)?;
        }
        if let Some(t) = self.prefill_tp {
            limits::flag_int_in("--prefill-tp", t as u64, &(1..=u32::MAX as u64))?;
        }
        limits::flag_int_in(
            "--max-pool-instances",
            self.max_instances as u64,
            &(1..=MAX_POOL_INSTANCES as u64),
        )?;
        Ok(())
    }
}

/// The prefill pool's instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefillPool {
    pub system: String,
    pub tp: u32,
    pub chunk_tokens: u32,
    /// µs per prompt token at a full chunk, at the mean input.
    pub us_per_token: f64,
    /// One request of the mean input, occupying the instance (µs).
    pub service_us: f64,
    /// One request of the mean input prefilled alone (ms).
    pub prefill_ms: f64,
    /// The longest prompt of the mix prefilled alone (ms).
    pub prefill_ms_longest: f64,
    /// Requests/s one instance computes.
    pub compute_requests_per_s: f64,
    pub kv_cache_tokens: u64,
}

/// One prefill:decode ratio.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatioRow {
    pub prefill_instances: u32,
    pub decode_instances: u32,
    pub gpus: u32,
    /// `net`, `nvlink`, `pcie`, or `-` when it cannot be placed.
    pub link: &'static str,
    pub meets: bool,
    /// What limits the ratio: `prefill`, `decode`, `KV transfer`, or why it fails (`TTFT`,
    /// `TPOT`, `placement`).
    pub binds: &'static str,
    pub note: String,
    pub requests_per_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub decode_concurrency: u32,
    pub tpot_ms: f64,
    pub kv_transfer_ms: f64,
    pub ttft_min_ms: f64,
    /// With the M/D/1 wait; None when the prefill pool is saturated.
    pub ttft_ms: Option<f64>,
    pub prefill_utilization: f64,
    pub usd_per_hour: Option<f64>,
    pub usd_per_million_tokens: Option<f64>,
}

/// The co-located (chunked-prefill) answer on the decode system.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Colocated {
    pub meets: bool,
    /// False where the co-located answer is not modelled (data-parallel attention).
    pub modelled: bool,
    pub note: String,
    pub gpus: u32,
    pub concurrency: u32,
    pub requests_per_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub tpot_ms: f64,
    pub ttft_min_ms: f64,
    pub usd_per_hour: Option<f64>,
    pub usd_per_million_tokens: Option<f64>,
}

/// What won.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Winner {
    Disaggregated { prefill: u32, decode: u32 },
    Colocated,
    Neither,
}

/// Everything `capacity --disaggregate` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disaggregation {
    pub decode_system: String,
    pub tp: u32,
    /// The decode instance's data-parallel attention ranks (1: none).
    pub dp: u32,
    pub input_len: f64,
    pub longest_input: f64,
    pub output_len: f64,
    pub max_tpot_ms: Option<f64>,
    pub max_ttft_ms: Option<f64>,
    pub prefill: PrefillPool,
    /// The KV transfer of the mean prompt over each link a ratio uses.
    pub transfers: Vec<KvTransfer>,
    /// The decode curve without prefill.
    pub decode_curve: Curve,
    /// The decode pool's operating limit (None: no point meets --max-tpot-ms).
    pub decode_limit: Option<CurvePoint>,
    pub rows: Vec<RatioRow>,
    pub colocated: Colocated,
    pub winner: Winner,
    pub verdict: String,
    pub warnings: Vec<String>,
}

/// (mean input, longest input, mean output) of the demand; decode-only demand is refused.
fn lengths(spec: &DemandSpec, d: &Demand) -> Result<(f64, f64, f64)> {
    let longest = match spec {
        DemandSpec::Context(c) => {
            return Err(Error::Flag {
                flag: "--disaggregate",
                value: format!("(with --context {c} only)"),
                expected: "a request mix with prompts: --input-len/--output-len or --request-mix (a decode-only demand has no prefill to separate)".into(),
            })
        }
        DemandSpec::Lengths { input_len, .. } => *input_len as f64,
        DemandSpec::Mix(rows) => rows.iter().map(|r| r.input_len).max().unwrap_or(1) as f64,
    };
    Ok((d.input_len, longest, d.output_len))
}

/// The prefill scenario: the decode scenario's request on `--prefill-system` at `--prefill-tp`
/// (by default the decode instance's system and TP).
fn prefill_scenario(
    req: &CapacityRequest,
    o: &DisaggOptions,
    s: &Scenario,
    p: &CalibrationProfile,
    d: &Demand,
) -> Result<(Scenario, CalibrationProfile)> {
    let other = o
        .prefill_system
        .clone()
        .filter(|n| *n != req.scenario.system);
    // A decode pool with data-parallel attention: the prefill instance is a tensor-parallel
    // engine, by default over as many GPUs as a decode instance.
    let dp = s.layout.dp_size();
    let tp = o.prefill_tp.unwrap_or(s.layout.tp * dp);
    if other.is_none() && tp == s.layout.tp && dp == 1 {
        return Ok((s.clone(), p.clone()));
    }
    let mut r = req.scenario.clone();
    if dp > 1 {
        r.dp = None;
        r.ep = None;
        r.comm.ep_comm = Default::default();
        r.redundant_experts = None;
        r.tbo = false;
    }
    if let Some(name) = &other {
        // An unknown name is refused by the flag that gave it.
        crate::scenario::catalog::resolve_system(name).map_err(|e| Error::Flag {
            flag: "--prefill-system",
            value: crate::units::echo(name),
            expected: e.to_string(),
        })?;
        r.system = name.clone();
        r.calibration = None;
    }
    r.tp = Some(tp);
    // What the prefill instance cannot run (its TP, its system's GPUs, its memory) is the
    // problem of the flag that chose it.
    let blame = |e: Error| {
        match e.scenario_problem() {
        // A TP of its own that the model or the system cannot run is the TP flag's problem.
        Some(why) if tp != s.layout.tp || dp > 1 => Error::Flag {
            flag: "--prefill-tp",
            value: tp.to_string(),
            expected: format!(
                "a TP the prefill system ({}) and the model run: {why}",
                other.as_deref().unwrap_or(&req.scenario.system)
            ),
        },
        Some(why) => Error::Flag {
            flag: "--prefill-system",
            value: crate::units::echo(other.as_deref().unwrap_or_default()),
            expected: format!(
                "a system that runs the decode instance's TP={} (the KV cache moves rank to rank; --prefill-tp gives the prefill instance a TP of its own): {why}",
                s.layout.tp
            ),
        },
        None => e,
    }
    };
    let (mut ps, pp) = super::load(&r, d, false).map_err(blame)?;
    ps.gpu_memory_utilization = req.memory.gpu_memory_utilization;
    super::memory::account(&ps, &pp, &req.memory).map_err(blame)?;
    Ok((ps, pp))
}

/// The most tokens/s within the TPOT limit.
fn best_point(
    points: &[CurvePoint],
    max_tpot_ms: Option<f64>,
    extra: impl Fn(&CurvePoint) -> bool,
) -> Option<&CurvePoint> {
    points
        .iter()
        .filter(|p| max_tpot_ms.is_none_or(|m| p.tpot_ms <= m) && extra(p))
        .max_by(|a, b| {
            a.tokens_per_s
                .total_cmp(&b.tokens_per_s)
                .then(b.concurrency.cmp(&a.concurrency))
        })
}

fn per_million(usd_h: Option<f64>, tokens_per_s: f64) -> Option<f64> {
    usd_h
        .filter(|_| tokens_per_s > 0.0)
        .map(|h| h / (tokens_per_s * 3600.0) * 1e6)
}

/// The links a ratio may use: (same system, the intra-node link, the network), refusing a
/// study where no ratio can be placed (every ratio needs a network the systems lack).
fn placement(
    o: &DisaggOptions,
    ps: &Scenario,
    s: &Scenario,
) -> Result<(bool, Option<KvLink>, Option<KvLink>)> {
    // A decode instance's GPUs: its data-parallel ranks' TP groups.
    let (tp_p, tp, gpus_d) = (ps.layout.tp, s.layout.tp, s.layout.tp * s.layout.dp_size());
    let same_system = ps.system.source == s.system.source;
    let intra = same_system.then(|| KvLink::intra(&s.system));
    let net = KvLink::net(&ps.system, tp_p, &s.system, tp);
    // The smallest ratio, 1P:1D, is the one most likely to fit on one node.
    let one_node = same_system && tp_p + gpus_d <= s.system.gpus_per_node && o.max_instances >= 1;
    if !one_node && net.is_none() {
        let mut lacking: Vec<&str> = [&ps.system, &s.system]
            .iter()
            .filter(|x| x.network.is_none())
            .map(|x| x.name.as_str())
            .collect();
        lacking.dedup();
        return Err(Error::Flag {
            flag: if s.system.network.is_none() {
                "--system"
            } else {
                "--prefill-system"
            },
            value: lacking.join(", "),
            expected: format!(
                "a system with a [network] section for --disaggregate: {} need {} GPUs{}, so the KV cache crosses the network between nodes (multi-node systems: h200-hgx-2node-ib, h100-hgx-2node-ib, rtx-pro-6000-2node-roce, rtx-pro-6000-2node-tcp)",
                if tp_p == gpus_d {
                    format!("a prefill and a decode instance of {tp_p} GPUs")
                } else {
                    format!(
                        "a prefill instance of TP={tp_p} and a decode instance of {gpus_d} GPUs"
                    )
                },
                tp_p + gpus_d,
                if same_system {
                    format!(", more than one node of {} GPUs", s.system.gpus_per_node)
                } else {
                    " on two different systems".to_string()
                }
            ),
        });
    }
    Ok((same_system, intra, net))
}

/// Checks `--disaggregate`'s flags and placement before anything is simulated.
pub fn precheck(req: &CapacityRequest, o: &DisaggOptions) -> Result<()> {
    o.check()?;
    let d = req.demand.demand();
    lengths(&req.demand, &d)?;
    let (s, p) = super::load(&req.scenario, &d, true)?;
    let (ps, _) = prefill_scenario(req, o, &s, &p, &d)?;
    placement(o, &ps, &s)?;
    Ok(())
}

/// Runs the disaggregated study of `req` beside its co-located `cap` (see the module notes).
pub fn disaggregate(
    req: &CapacityRequest,
    o: &DisaggOptions,
    cap: &Capacity,
) -> Result<Disaggregation> {
    o.check()?;
    let d = &cap.demand;
    let (input, longest, output) = lengths(&req.demand, d)?;
    let s = &cap.reference.scenario;
    let p = &cap.reference.profile;
    let mut warnings = Vec::new();

    let (ps, pp) = prefill_scenario(req, o, s, p, d)?;
    let priced = price_prefill_pool(req, &ps, &pp, d, input, longest, &mut warnings)?;

    // With data-parallel attention a decode instance is `dp` TP groups: each receives its own
    // requests' KV, so it takes `dp` transfers at once.
    let (tp, dp) = (s.layout.tp, s.layout.dp_size());
    let (same_system, intra, net) = placement(o, &ps, s)?;
    let (decode_curve, decode_limit) = decode_pool(req, cap)?;
    let price_d = req.prices.of(&s.system.name);

    let (transfers, rows) = {
        let study = RatioStudy {
            ps: &ps,
            s,
            same_system,
            intra,
            net,
            decode_curve: &decode_curve,
            decode_limit,
            usable: decode_curve
                .points
                .iter()
                .filter(|pt| req.max_tpot_ms.is_none_or(|m| pt.tpot_ms <= m))
                .collect(),
            compute_requests_per_s: priced.pool.compute_requests_per_s,
            prefill_alone_us: priced.alone_us,
            prefill_longest_us: priced.longest_us,
            input,
            longest,
            output,
            max_ttft_ms: o.max_ttft_ms,
            price_p: req.prices.of(&ps.system.name),
            price_d,
        };
        let n = o.max_instances;
        let transfers = study.transfers(n);
        let rows = (1..=n)
            .flat_map(|x| (1..=n).map(move |y| (x, y)))
            .map(|(x, y)| study.row(x, y))
            .collect::<Vec<_>>();
        (transfers, rows)
    };

    let colocated = colocated(req, o, cap, input, longest, output, price_d);
    let (winner, verdict) = choose(&rows, &colocated);
    Ok(Disaggregation {
        decode_system: s.system.name.clone(),
        tp,
        dp,
        input_len: input,
        longest_input: longest,
        output_len: output,
        max_tpot_ms: req.max_tpot_ms,
        max_ttft_ms: o.max_ttft_ms,
        prefill: priced.pool,
        transfers,
        decode_curve,
        decode_limit,
        rows,
        colocated,
        winner,
        verdict,
        warnings,
    })
}

/// The decode pool: the co-located curve's scenario without prefill's share, and its
/// operating limit (the most tokens/s within `--max-tpot-ms`; None: no point meets it).
fn decode_pool(req: &CapacityRequest, cap: &Capacity) -> Result<(Curve, Option<CurvePoint>)> {
    let decode_curve = curve::build(
        &cap.reference.scenario,
        &cap.reference.profile,
        &cap.demand,
        cap.max_concurrency as u32,
        req.points,
        req.max_tpot_ms,
        None,
    )?;
    let decode_limit = best_point(&decode_curve.points, req.max_tpot_ms, |_| true).copied();
    Ok((decode_curve, decode_limit))
}

/// The prefill pool's instance as reported, with its prompts' prefill times alone in µs (the
/// ratios' TTFT starts from these, not from the report's rounded-through-ms copies).
struct PricedPrefill {
    pool: PrefillPool,
    alone_us: f64,
    longest_us: f64,
}

/// The prefill instance priced: its batched per-token cost and the mean and longest prompts
/// prefilled alone; the longest prompt's KV must fit it.
fn price_prefill_pool(
    req: &CapacityRequest,
    ps: &Scenario,
    pp: &CalibrationProfile,
    d: &Demand,
    input: f64,
    longest: f64,
    warnings: &mut Vec<String>,
) -> Result<PricedPrefill> {
    let pmem = super::memory::account(ps, pp, &req.memory)?;
    if pmem.max_concurrency(longest) == 0 {
        return Err(Error::KvDoesNotFit {
            tokens: longest,
            described: format!(
                "the longest prompt on the prefill instance ({})",
                d.described
            ),
            kv_tokens: pmem.kv_cache_tokens,
            model: ps.model.name.clone(),
            tp: ps.layout.tp,
        });
    }
    let mnbt = req.memory.max_num_batched_tokens;
    let batched = curve::prefill_cost(ps, pp, mnbt, input)?;
    let alone = |len: f64| -> Result<f64> {
        let chunk = (len.ceil() as u64).clamp(1, mnbt as u64) as u32;
        Ok(curve::prefill_cost(ps, pp, chunk, len)?.us_per_token * len)
    };
    let alone_us = alone(input)?;
    let longest_us = alone(longest)?;
    if !batched.warnings.is_empty() {
        warnings.push(format!(
            "prefill instance priced at a {}-token chunk: {} pricing warning(s), e.g. {}",
            batched.chunk_tokens,
            batched.warnings.len(),
            batched.warnings[0]
        ));
    }
    let service_us = input * batched.us_per_token;
    let pool = PrefillPool {
        system: ps.system.name.clone(),
        tp: ps.layout.tp,
        chunk_tokens: batched.chunk_tokens,
        us_per_token: batched.us_per_token,
        service_us,
        prefill_ms: alone_us / 1e3,
        prefill_ms_longest: longest_us / 1e3,
        compute_requests_per_s: 1e6 / service_us.max(1e-9),
        kv_cache_tokens: pmem.kv_cache_tokens,
    };
    Ok(PricedPrefill {
        pool,
        alone_us,
        longest_us,
    })
}

/// The error a study that nothing meets ends with (after its report).
pub fn unmet(d: &Disaggregation) -> Option<Error> {
    (d.winner == Winner::Neither).then(|| Error::Unmet {
        command: "capacity --disaggregate",
        reason: d.verdict.clone(),
    })
}

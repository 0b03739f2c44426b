//! The planner: over systems and the parallelisms that fit, the cheapest deployment that meets
//! a throughput target and/or a number of users under a TPOT limit.
//!
//! Each candidate is one replica shape (system and [`Layout`]: TP, PP, DP, EP, DCP) with its KV limit and its curve. For a
//! candidate, only curve points within the KV limit and under `max_tpot_ms` are usable. The
//! replicas needed are the most of `ceil(users / best usable concurrency)` and
//! `ceil(target / best usable tokens/s)`; each replica then runs at the smallest usable
//! concurrency that still meets both with that many replicas (lower concurrency, lower TPOT).
//! GPUs = replicas × the layout's GPUs; systems = ceil(GPUs / GPUs per system), at most `max_systems`. The
//! cheapest plan has the lowest cost per hour when every candidate has a price, else the fewest
//! GPUs; ties go to more tokens/s per GPU. Cost per million output tokens = GPUs × USD per
//! GPU-hour / (tokens/s × 3600) × 10^6, at the planned concurrency.
//!
//! This module is pure arithmetic over the curves, so its rules are tested on hand-made curves.

use super::curve::CurvePoint;
use super::layout::Layout;
use crate::error::{Error, Result};
use crate::scenario::limits;
use serde::Serialize;

/// What a candidate fails on, or what binds when no candidate meets the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// Weights and buffers leave no room for one request's KV cache.
    Memory,
    /// Not even one user meets `--max-tpot-ms`.
    Tpot,
    /// The target needs more systems than `--max-systems`.
    Throughput,
}

impl Target {
    /// No throughput or user target: the planner compares layouts instead of sizing a plan.
    pub(crate) fn is_comparison(&self) -> bool {
        self.tokens_per_s.is_none() && self.users.is_none()
    }
}

impl Limit {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Limit::Memory => "memory",
            Limit::Tpot => "TPOT",
            Limit::Throughput => "throughput",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    pub tokens_per_s: Option<f64>,
    pub users: Option<u32>,
    pub max_tpot_ms: Option<f64>,
    pub max_systems: u32,
}

/// Checks a plan's target flags against their physical ranges (`scenario::limits`): a target of
/// 1e30 tokens/s or 4e9 users is refused by flag, value and range, not planned into replica
/// counts that wrap.
pub(crate) fn check_target(
    tokens_per_s: Option<f64>,
    users: Option<u32>,
    max_tpot_ms: Option<f64>,
) -> Result<()> {
    if let Some(t) = max_tpot_ms {
        limits::flag_in("--max-tpot-ms", t, &limits::MAX_TPOT_MS)?;
    }
    if let Some(t) = tokens_per_s {
        limits::flag_in("--target-tokens-per-s", t, &limits::TARGET_TOKENS_PER_S)?;
    }
    if let Some(u) = users {
        limits::flag_int_in("--users", u as u64, &limits::USERS)?;
    }
    Ok(())
}

/// The error a plan that no candidate meets ends with (after its report is written): the
/// binding limit and the planner's message, so the command exits non-zero.
pub(crate) fn unmet(plan: &Plan) -> Option<Error> {
    if plan.best.is_some() {
        return None;
    }
    Some(Error::Unmet {
        command: "capacity",
        reason: plan
            .message
            .lines()
            .next()
            .unwrap_or("no configuration meets the target")
            .to_string(),
    })
}

/// One replica shape and what the simulator says of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub system: String,
    pub gpus_per_system: u32,
    pub layout: Layout,
    /// Highest concurrency memory allows (KV limit, capped by max_num_seqs); 0: does not fit.
    pub max_concurrency: u64,
    /// Why it does not fit, when it does not.
    pub memory_note: Option<String>,
    pub curve: Vec<CurvePoint>,
    pub gpu_hour_usd: Option<f64>,
}

/// A candidate evaluated against the target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRow {
    pub system: String,
    #[serde(flatten)]
    pub layout: Layout,
    /// Weights, buffers and at least one request's KV cache fit in the memory vLLM may use
    /// (`--gpu-memory-utilization`); a row that does not fit never meets the target, so the
    /// planner never names it.
    pub fits: bool,
    pub meets: bool,
    /// What stopped it (None when it meets the target).
    pub limit: Option<Limit>,
    pub(crate) note: String,
    pub replicas: u32,
    pub gpus: u32,
    pub systems: u32,
    pub concurrency_per_replica: u32,
    /// Users that fit in one replica's memory (KV limit, capped by max_num_seqs).
    pub(crate) max_concurrency: u64,
    /// All replicas together.
    pub tokens_per_s: f64,
    pub(crate) tokens_per_s_per_gpu: f64,
    pub(crate) tpot_ms: f64,
    gpu_hour_usd: Option<f64>,
    pub usd_per_hour: Option<f64>,
    pub usd_per_million_tokens: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub(crate) target: Target,
    /// The cheapest row that meets the target.
    pub best: Option<PlanRow>,
    pub rows: Vec<PlanRow>,
    /// When nothing meets the target: the limit that binds.
    pub binding: Option<Limit>,
    pub message: String,
}

fn failed(c: &Candidate, limit: Limit, note: String) -> PlanRow {
    PlanRow {
        system: c.system.clone(),
        layout: c.layout,
        fits: c.max_concurrency > 0,
        meets: false,
        limit: Some(limit),
        note,
        replicas: 0,
        gpus: 0,
        systems: 0,
        concurrency_per_replica: 0,
        max_concurrency: c.max_concurrency,
        tokens_per_s: 0.0,
        tokens_per_s_per_gpu: 0.0,
        tpot_ms: 0.0,
        gpu_hour_usd: c.gpu_hour_usd,
        usd_per_hour: None,
        usd_per_million_tokens: None,
    }
}

/// Long because: the usable points, the replicas, the operating point and the row are worked
/// out in turn, each from the ones before; split, every step would take the others' values as
/// arguments.
///
/// Evaluates one candidate (see the module notes).
fn evaluate(c: &Candidate, t: &Target) -> PlanRow {
    if c.max_concurrency == 0 {
        let note = c
            .memory_note
            .clone()
            .unwrap_or_else(|| "no memory left for one request's KV cache".into());
        return failed(c, Limit::Memory, note);
    }
    let usable: Vec<&CurvePoint> = c
        .curve
        .iter()
        .filter(|p| p.concurrency as u64 <= c.max_concurrency)
        .filter(|p| t.max_tpot_ms.is_none_or(|m| p.tpot_ms <= m))
        .collect();
    let Some(top) = usable.iter().max_by_key(|p| p.concurrency).copied() else {
        let tpot1 = c.curve.first().map_or(f64::NAN, |p| p.tpot_ms);
        return failed(
            c,
            Limit::Tpot,
            format!(
                "one user already takes {tpot1:.1} ms per token, above --max-tpot-ms {}",
                t.max_tpot_ms.unwrap_or(f64::NAN)
            ),
        );
    };
    let best_tps = usable.iter().map(|p| p.tokens_per_s).fold(0.0, f64::max);
    // Compared without a target, a layout fills one system with as many replicas as fit: two
    // TP8 replicas on two 8-GPU nodes against one TP8×PP2.
    let mut replicas = if t.is_comparison() {
        (c.gpus_per_system / c.layout.gpus().max(1)).max(1) as u64
    } else {
        1
    };
    if let Some(u) = t.users {
        replicas = replicas.max((u as u64).div_ceil(top.concurrency.max(1) as u64));
    }
    if let Some(target) = t.tokens_per_s {
        replicas = replicas.max((target / best_tps).ceil().max(1.0) as u64);
    }
    let r = replicas as f64;
    let meets = |p: &CurvePoint| {
        t.users
            .is_none_or(|u| replicas * p.concurrency as u64 >= u as u64)
            && t.tokens_per_s
                .is_none_or(|x| r * p.tokens_per_s >= x * (1.0 - 1e-9))
    };
    // With no target, layouts are compared at their best throughput within the TPOT limit.
    let point = if t.is_comparison() {
        usable
            .iter()
            .copied()
            .max_by(|a, b| a.tokens_per_s.total_cmp(&b.tokens_per_s))
            .unwrap_or(top)
    } else {
        usable
            .iter()
            .copied()
            .filter(|p| meets(p))
            .min_by_key(|p| p.concurrency)
            .unwrap_or(top)
    };
    let gpus = replicas * c.layout.gpus() as u64;
    let systems = gpus.div_ceil(c.gpus_per_system.max(1) as u64);
    let tokens = r * point.tokens_per_s;
    let usd_h = c.gpu_hour_usd.map(|p| p * gpus as f64);
    let mut row = PlanRow {
        system: c.system.clone(),
        layout: c.layout,
        fits: true,
        meets: true,
        limit: None,
        note: String::new(),
        replicas: replicas.min(u32::MAX as u64) as u32,
        gpus: gpus.min(u32::MAX as u64) as u32,
        systems: systems.min(u32::MAX as u64) as u32,
        concurrency_per_replica: point.concurrency,
        max_concurrency: c.max_concurrency,
        tokens_per_s: tokens,
        tokens_per_s_per_gpu: tokens / gpus.max(1) as f64,
        tpot_ms: point.tpot_ms,
        gpu_hour_usd: c.gpu_hour_usd,
        usd_per_hour: usd_h,
        usd_per_million_tokens: usd_h.map(|h| h / (tokens * 3600.0) * 1e6),
    };
    if systems > t.max_systems as u64 {
        row.meets = false;
        row.limit = Some(Limit::Throughput);
        row.note = format!(
            "needs {replicas} replicas = {gpus} GPUs = {systems} systems; --max-systems is {}; one system gives at most {:.0} tokens/s",
            t.max_systems,
            best_tps * (c.gpus_per_system / c.layout.gpus().max(1)).max(1) as f64
        );
    }
    row
}

/// What the chosen row is called: the cheapest plan for a target; with no target, the layout
/// with the lowest cost per token when priced, else the most tokens/s per GPU.
fn best_word(t: &Target) -> &'static str {
    if t.is_comparison() {
        "best"
    } else {
        "cheapest"
    }
}

impl Plan {
    pub(crate) fn best_word(&self) -> &'static str {
        best_word(&self.target)
    }
}

/// Evaluates every candidate and picks the cheapest that meets the target.
pub fn plan(candidates: &[Candidate], t: &Target) -> Plan {
    let rows: Vec<PlanRow> = candidates.iter().map(|c| evaluate(c, t)).collect();
    let priced = rows
        .iter()
        .filter(|r| r.meets)
        .all(|r| r.usd_per_hour.is_some());
    let better = |a: &PlanRow, b: &PlanRow| -> std::cmp::Ordering {
        let key = |r: &PlanRow| {
            if t.is_comparison() {
                if priced {
                    r.usd_per_million_tokens.unwrap_or(f64::INFINITY)
                } else {
                    -r.tokens_per_s_per_gpu
                }
            } else if priced {
                r.usd_per_hour.unwrap_or(f64::INFINITY)
            } else {
                r.gpus as f64
            }
        };
        key(a)
            .total_cmp(&key(b))
            .then(b.tokens_per_s_per_gpu.total_cmp(&a.tokens_per_s_per_gpu))
    };
    let best = rows
        .iter()
        .filter(|r| r.meets)
        .min_by(|a, b| better(a, b))
        .cloned();
    let (binding, message) = match &best {
        Some(b) => (None, chosen_message(b, t)),
        None => match binding_limit(&rows) {
            Some((limit, message)) => (Some(limit), message),
            None => {
                // Every candidate was set aside before it ran (a TP that does not divide the
                // heads, a layout the system cannot hold): no limit bound.
                return Plan {
                    target: t.clone(),
                    best: None,
                    rows,
                    binding: None,
                    message: "no configuration meets the target: no candidate layout could be simulated (each is listed under 'not considered' with the reason)".into(),
                };
            }
        },
    };
    Plan {
        target: t.clone(),
        best,
        rows,
        binding,
        message,
    }
}

/// The chosen plan in one line: replicas, layout, system, load and what it gives.
fn chosen_message(b: &PlanRow, t: &Target) -> String {
    format!(
        "{}: {} replica{} of {} on {} ({} GPUs, {} system{}) at {} users each: {:.0} tokens/s, TPOT {:.1} ms{}",
        best_word(t),
        b.replicas,
        if b.replicas == 1 { "" } else { "s" },
        b.layout.label(),
        b.system,
        b.gpus,
        b.systems,
        if b.systems == 1 { "" } else { "s" },
        b.concurrency_per_replica,
        b.tokens_per_s,
        b.tpot_ms,
        b.usd_per_million_tokens
            .map(|u| format!(", {u:.2} USD per million output tokens"))
            .unwrap_or_default()
    )
}

/// When no candidate meets the target, the limit that binds and why, row by row; None when no
/// candidate was simulated at all. The limit that binds is the one the furthest-reaching
/// candidate hit: throughput (it fits and meets TPOT but needs too many systems), then TPOT,
/// then memory.
fn binding_limit(rows: &[PlanRow]) -> Option<(Limit, String)> {
    let limit = [Limit::Throughput, Limit::Tpot, Limit::Memory]
        .into_iter()
        .find(|l| rows.iter().any(|r| r.limit == Some(*l)))?;
    let why: Vec<String> = rows
        .iter()
        .filter(|r| r.limit == Some(limit))
        .map(|r| format!("{} {}: {}", r.system, r.layout.label(), r.note))
        .collect();
    let what = match limit {
        Limit::Memory => {
            "memory binds: no configuration holds the weights and one request's KV cache"
        }
        Limit::Tpot => {
            "TPOT binds: no configuration meets --max-tpot-ms even with one user per replica"
        }
        Limit::Throughput => {
            "throughput binds: the target needs more systems than --max-systems allows"
        }
    };
    Some((
        limit,
        format!(
            "no configuration meets the target; {what}\n  {}",
            if why.is_empty() {
                "no candidate (no TP of the systems fits the model)".into()
            } else {
                why.join("\n  ")
            }
        ),
    ))
}

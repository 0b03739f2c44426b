//! `whatif spec-decode`: does speculative decoding pay for this scenario, and at which k?
//!
//! For each k, the step is simulated, not guessed: the verify pass is the target's own kernel
//! sequence at batch × (k+1) query tokens (plus the rejection sampler), the draft side is k
//! passes of the drafter's kernel sequence (allreduces included; the first over the k+1
//! positions the verify kept) plus the proposer's bookkeeping kernels, each played on the same
//! timeline engine as a plain step. Host costs that are not kernels come from the profile's
//! `[spec_decode]` section. Expected tokens per step come from the closed form; a seeded Monte
//! Carlo over the acceptance distribution gives the spread of time per output token.

use super::acceptance::Acceptance;
use super::draft::{Draft, Method};
use crate::cost::profile::SpecDecodeParams;
use crate::cost::{self, CalibrationProfile};
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::{self, engine_config, Engine, ScenarioRequest, Simulation, Timeline};
use crate::workload::spec_method::DraftSource;
use crate::workload::spec_step::{PassKind, Side, SpecStep};
use crate::workload::{self, Workload};
use rand::Rng;

/// What a user asks for.
#[derive(Debug, Clone)]
pub struct SpecDecodeRequest {
    pub base: ScenarioRequest,
    pub method: Method,
    /// `--draft-config` (eagle3) or `--draft-model` (draft-model).
    pub draft: Option<String>,
    pub acceptance: Acceptance,
    pub draft_tokens: Vec<u32>,
    /// Batches simulated to find where speculation stops paying (empty: skip).
    pub crossover_batches: Vec<u32>,
    /// Monte Carlo: simulated users and output tokens each.
    pub mc_users: u32,
    pub output_tokens: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub(crate) draft_tokens: u32,
    /// The k draft passes and the proposer's bookkeeping kernels and gaps between passes.
    pub draft_time_us: f64,
    /// The verify pass at batch × (k+1) tokens, rejection sampler included.
    pub verify_time_us: f64,
    /// Host time the GPU waits for (profile `[spec_decode].exposed_host_us`).
    pub(crate) host_time_us: f64,
    pub step_time_us: f64,
    pub(crate) mean_acceptance_length: f64,
    pub tokens_per_s: f64,
    pub(crate) tokens_per_s_per_user: f64,
    pub(crate) speedup: f64,
    /// Time per output token across users, ms: p50, p90, p99.
    pub tpot_ms: [f64; 3],
}

#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    /// (batch, best k, best speedup) per simulated batch.
    pub grid: Vec<(u32, u32, f64)>,
    /// The largest grid batch at which the best k still pays (None: it pays nowhere).
    pub(crate) last_paying_batch: Option<u32>,
    /// The first grid batch above that where no k pays (None: it pays at every batch tried).
    pub(crate) first_losing_batch: Option<u32>,
    /// The k of each column of `speedups` (the request's `draft_tokens`).
    pub(crate) draft_tokens: Vec<u32>,
    /// Speedup of every k at every grid batch: `speedups[batch index][k index]`.
    pub(crate) speedups: Vec<Vec<f64>>,
    /// Whether each grid batch fits in memory (the plain step's weights and KV cache); the
    /// paying range above counts only batches that fit.
    pub(crate) fits: Vec<bool>,
    /// The largest batch that fits, up to the largest grid batch (None: not even batch 1).
    pub(crate) max_fitting_batch: Option<u32>,
}

/// Step times of one crossover batch, before acceptance is applied.
#[derive(Debug, Clone, PartialEq)]
struct GridCost {
    batch: u32,
    /// The plain step.
    base_step_us: f64,
    /// The whole speculative step (draft + verify + host) per k, in `draft_tokens` order.
    spec_step_us: Vec<f64>,
}

/// Everything `whatif spec-decode` simulates; acceptance only enters afterwards, so one set of
/// costs serves every acceptance rate asked for.
#[derive(Debug, Clone)]
pub(crate) struct SpecDecodeCosts {
    baseline: Simulation,
    draft_source: String,
    /// Per k of the request, at the scenario's batch.
    steps: Vec<(u32, StepCost)>,
    /// The crossover grid (empty when no crossover batches were asked for).
    grid: Vec<GridCost>,
}

#[derive(Debug, Clone)]
pub struct SpecDecodeStudy {
    pub(crate) method: Method,
    pub(crate) draft_source: String,
    pub(crate) acceptance: String,
    /// vLLM's acceptance rate when the study was given one (`--acceptance-rate`).
    pub(crate) acceptance_rate: Option<f64>,
    /// The plain step of the same scenario (its JSON scenario/calibration are reported).
    pub(crate) baseline: Simulation,
    pub variants: Vec<Variant>,
    pub crossover: Option<Crossover>,
    /// Whether the scenario's batch fits in memory (weights and KV cache of the plain step;
    /// the draft's weights are not counted), and the largest batch that does.
    pub(crate) fits: bool,
    pub(crate) max_fitting_batch: Option<u32>,
    pub(crate) warnings: Vec<String>,
}

impl SpecDecodeStudy {
    pub fn baseline_step_us(&self) -> f64 {
        self.baseline.step_time_us()
    }
    pub(crate) fn baseline_tokens_per_s(&self) -> f64 {
        self.baseline.tokens_per_s()
    }
    /// The variant with the highest speedup.
    pub(crate) fn best(&self) -> Option<&Variant> {
        self.variants
            .iter()
            .max_by(|a, b| a.speedup.total_cmp(&b.speedup))
    }
}

/// The pieces of one speculative step at one k, before acceptance is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCost {
    pub draft_us: f64,
    pub verify_us: f64,
    pub host_us: f64,
}

fn spec_params(p: &CalibrationProfile) -> Result<&SpecDecodeParams> {
    p.spec_decode.as_ref().ok_or_else(|| {
        Error::field(
            &p.path,
            "spec_decode",
            "missing: whatif spec-decode needs exposed_host_us, pass_gap_us and source (see data/calibration/rtx-pro-6000/profile.toml)",
        )
    })
}

fn play(
    w: &Workload,
    s: &Scenario,
    p: &CalibrationProfile,
    engine: &mut Engine,
    tl: &mut Timeline,
) -> Result<f64> {
    let pricing = cost::price(w, s, p)?;
    engine.run(w, &pricing.base_us, &engine_config(s, p), tl);
    Ok(tl.step_time_us())
}

/// The verify pass of the step at `k`: `PassKind::Verify`'s workload (the target at k+1 queries
/// per sequence, then the rejection sampler), as both engines play it.
pub fn verify_workload(s: &Scenario, k: u32) -> Workload {
    crate::workload::spec_step::verify_pass(s, k + 1)
}

/// The draft window of `draft`'s step at `k` on its scenario `ds`: bookkeeping, then k passes
/// (the first over k+1 positions per sequence).
pub fn draft_workload(draft: &Draft, ds: &Scenario, k: u32) -> Workload {
    let step = SpecStep::new(draft.method, k);
    let mut w = Workload {
        ops: Vec::new(),
        experts_touched: Vec::new(),
        routing: Default::default(),
    };
    for win in step.windows.iter().filter(|w| w.side == Side::Draft) {
        w.ops.extend(step.window_workload(win, draft, ds, ds).ops);
    }
    w
}

/// The step at `k` on the timeline engine: each window of its [`SpecStep`] played as one
/// workload (passes built on the target's or the draft's scenario, all priced under the
/// target's), plus its pass gaps; the profile's exposed host time once.
pub fn step_cost(
    s: &Scenario,
    draft: &Draft,
    p: &CalibrationProfile,
    k: u32,
    engine: &mut Engine,
    tl: &mut Timeline,
) -> Result<StepCost> {
    // Draft and verify passes are played as one SPMD step; a pipeline's schedule is not.
    if s.layout.pp_size() > 1 {
        return Err(crate::sim::fast::pp_refused(s.layout.pp_size()));
    }
    let sd = spec_params(p)?;
    let ds = draft.scenario(s)?;
    let step = SpecStep::new(draft.method, k);
    let mut c = StepCost {
        draft_us: 0.0,
        verify_us: 0.0,
        host_us: sd.exposed_host_us,
    };
    for win in &step.windows {
        let w = step.window_workload(win, draft, s, &ds);
        let us = play(&w, s, p, engine, tl)? + win.pass_gaps as f64 * sd.pass_gap_us;
        match win.side {
            Side::Verify => c.verify_us += us,
            Side::Draft => c.draft_us += us,
        }
    }
    Ok(c)
}

/// One window of a speculative step: its workload, the µs of its pass gaps, whether it verifies.
pub(crate) type Window = (Workload, f64, bool);

/// The windows of the step at `k` as [`step_cost`] plays them, and the profile's exposed host
/// time (for the timeline's interval draws).
pub(crate) fn step_windows(
    s: &Scenario,
    draft: &Draft,
    p: &CalibrationProfile,
    k: u32,
) -> Result<(Vec<Window>, f64)> {
    if s.layout.pp_size() > 1 {
        return Err(crate::sim::fast::pp_refused(s.layout.pp_size()));
    }
    let sd = spec_params(p)?;
    let ds = draft.scenario(s)?;
    let step = SpecStep::new(draft.method, k);
    let windows = step
        .windows
        .iter()
        .map(|win| {
            (
                step.window_workload(win, draft, s, &ds),
                win.pass_gaps as f64 * sd.pass_gap_us,
                win.side == Side::Verify,
            )
        })
        .collect();
    Ok((windows, sd.exposed_host_us))
}

/// Seeded Monte Carlo: each user decodes `output_tokens` tokens, one step at a time, taking
/// 1 + accepted tokens per step; TPOT = its steps × step time / its tokens. p50/p90/p99 over
/// users, in ms.
fn tpot_percentiles(
    pmf: &[f64],
    step_us: f64,
    users: u32,
    output_tokens: u32,
    seed: u64,
) -> [f64; 3] {
    let mut rng = crate::rng::seeded(seed ^ 0x7a0f_5bec);
    let mut cdf = Vec::with_capacity(pmf.len());
    let mut acc = 0.0;
    for &p in pmf {
        acc += p;
        cdf.push(acc);
    }
    let n = output_tokens.max(1) as u64;
    let mut tpot: Vec<f64> = (0..users.max(1))
        .map(|_| {
            let (mut tokens, mut steps) = (0u64, 0u64);
            while tokens < n {
                let u: f64 = rng.random::<f64>() * acc;
                let a = cdf.iter().position(|&c| u < c).unwrap_or(cdf.len() - 1);
                tokens += 1 + a as u64;
                steps += 1;
            }
            // The last step's surplus tokens are not part of this output.
            steps as f64 * step_us / n as f64 / 1e3
        })
        .collect();
    tpot.sort_by(f64::total_cmp);
    let q = |f: f64| tpot[((tpot.len() - 1) as f64 * f).round() as usize];
    [q(0.5), q(0.9), q(0.99)]
}

fn variant(
    base_step_us: f64,
    batch: u32,
    k: u32,
    c: &StepCost,
    acc: &Acceptance,
    req: &SpecDecodeRequest,
    seed: u64,
) -> Variant {
    let step = c.draft_us + c.verify_us + c.host_us;
    let mean = SpecStep::new(req.method, k).expected_tokens(&acc.survival(k));
    let per_user = mean / step * 1e6;
    let tokens_per_s = per_user * batch as f64;
    let base_tps = batch as f64 / base_step_us * 1e6;
    Variant {
        draft_tokens: k,
        draft_time_us: c.draft_us,
        verify_time_us: c.verify_us,
        host_time_us: c.host_us,
        step_time_us: step,
        mean_acceptance_length: mean,
        tokens_per_s,
        tokens_per_s_per_user: per_user,
        speedup: tokens_per_s / base_tps,
        tpot_ms: tpot_percentiles(&acc.pmf(k), step, req.mc_users, req.output_tokens, seed),
    }
}

/// Refuses a study above `max_work` before anything is simulated (the scenario is loaded to
/// know its ranks), counting what each part costs on the path it takes ([`crate::sim::work`]):
/// full timelines over every rank of the layout (the plain step, then per k a verify pass of
/// batch × (k + 1) tokens and a draft side's build and play, at the scenario's batch and at
/// each crossover batch), the intervals of `draws` draws per acceptance rate (the fast path fitted, or the
/// timeline where it refuses, and every window of every arm replayed per draw) and Monte Carlo
/// draws (at most users × output tokens per k and per acceptance rate: each step yields at
/// least one token).
pub(crate) fn check_work(
    req: &SpecDecodeRequest,
    rates: usize,
    draws: usize,
    max_work: u64,
) -> Result<()> {
    use crate::error::{check_work, WORK_MC_DRAW, WORK_TIMELINE_STEP};
    use crate::sim::work::{interval_units, timeline_units, TimelineLayout};
    let (scenario, _) = req.base.load()?;
    let layout = TimelineLayout::of(&scenario);
    let ranks = layout.ranks;
    let ks = req.draft_tokens.len() as f64;
    let mut batches = req.crossover_batches.clone();
    batches.sort_unstable();
    batches.dedup();
    let at_batch = |b: u32| -> f64 {
        let b = b as u64;
        // The draft side is a drafter of a layer or so: its build and play, no routing to
        // speak of.
        timeline_units(layout, b)
            + req
                .draft_tokens
                .iter()
                .map(|&k| {
                    timeline_units(layout, b.saturating_mul(k as u64 + 1)) + WORK_TIMELINE_STEP
                })
                .sum::<f64>()
    };
    let sims = 1.0 + 2.0 * ks + batches.len() as f64 * (1.0 + 2.0 * ks);
    let timelines: f64 =
        at_batch(scenario.batch) + batches.iter().map(|&b| at_batch(b)).sum::<f64>();
    // Each arm replays its windows per draw: the plain step one, k's its verify and k drafts.
    let plays = 1.0
        + req
            .draft_tokens
            .iter()
            .map(|&k| 1.0 + k as f64)
            .sum::<f64>();
    let intervals = rates as f64 * interval_units(&scenario, draws, plays);
    let mc = rates as f64 * ks * req.mc_users as f64 * req.output_tokens as f64;
    let big = |v: f64| {
        if v < 1e15 {
            crate::units::grouped(v, 0)
        } else {
            format!("{v:.2e}")
        }
    };
    let interval_text = if draws > 0 {
        format!(", intervals of {draws} draws per acceptance rate")
    } else {
        String::new()
    };
    check_work(
        "whatif spec-decode",
        format!(
            "{} full timelines over {ranks} ranks ({} draft-token counts, {} crossover batches){interval_text} and up to {} Monte Carlo draws ({rates} acceptance rates × {} k × --mc-users {} × --output-tokens {})",
            big(sims),
            req.draft_tokens.len(),
            batches.len(),
            big(mc),
            req.draft_tokens.len(),
            req.mc_users,
            req.output_tokens
        ),
        timelines + intervals + mc * WORK_MC_DRAW,
        max_work,
        "fewer --draft-tokens, --crossover-batches, acceptance rates, --draws, --mc-users or --output-tokens",
    )
}

pub fn run(req: &SpecDecodeRequest) -> Result<SpecDecodeStudy> {
    let costs = simulate_costs(req)?;
    study(req, &costs, &req.acceptance)
}

/// Checks the request and simulates every step it needs: the plain step, each k at the
/// scenario's batch, and each k and the plain step at every crossover batch.
pub(crate) fn simulate_costs(req: &SpecDecodeRequest) -> Result<SpecDecodeCosts> {
    simulate_costs_with(req, &mut |_, _| {})
}

/// [`simulate_costs`], calling `progress(done, total)` after each batch's timelines (the
/// scenario's batch first, then each crossover batch).
pub(crate) fn simulate_costs_with(
    req: &SpecDecodeRequest,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SpecDecodeCosts> {
    if req.draft_tokens.is_empty() {
        return Err(Error::FlagUse {
            flag: "--draft-tokens",
            problem: "needs at least one value (e.g. 1..6 or 1,2,4)".into(),
        });
    }
    let (scenario, profile) = req.base.load()?;
    if scenario.layout.pp_size() > 1 {
        return Err(crate::sim::fast::pp_refused(scenario.layout.pp_size()));
    }
    if scenario.layout.tbo {
        // vLLM overlaps the micro-batches of a plain decode step; the draft and verify passes
        // as micro-batches are not modelled.
        return Err(Error::ScenarioSetting {
            flag: "--tbo",
            value: "on".into(),
            problem: ": whatif spec-decode does not model two-batch overlap with speculative decoding (draft and verify passes split in micro-batches); `decodesim simulate --tbo on` plays the plain step".into(),
        });
    }
    spec_params(&profile)?;
    let draft = Draft::load(req.method, req.draft.as_deref(), &scenario.model)?;
    for &k in &req.draft_tokens {
        draft.check_k(k)?;
        req.acceptance.check_k(k)?;
    }
    draft.scenario(&scenario)?;
    for &b in &req.crossover_batches {
        let mut s = scenario.clone();
        s.batch = b;
        s.validate().map_err(|e| Error::FlagUse {
            flag: "--crossover-batches",
            problem: format!("{b}: {e}"),
        })?;
    }

    let baseline = sim::simulate_loaded(scenario.clone(), profile.clone())?;
    let mut engine = Engine::new();
    let mut tl = Timeline::default();
    let mut steps = Vec::new();
    for &k in &req.draft_tokens {
        let c = step_cost(&scenario, &draft, &profile, k, &mut engine, &mut tl)?;
        steps.push((k, c));
    }
    let mut batches = req.crossover_batches.clone();
    batches.sort_unstable();
    batches.dedup();
    let total = batches.len() as u64 + 1;
    progress(1, total);
    let mut grid = Vec::new();
    for (i, b) in batches.into_iter().enumerate() {
        if i > 0 {
            progress(i as u64 + 1, total);
        }
        let mut s = scenario.clone();
        s.batch = b;
        let base_step_us = play(&workload::build(&s), &s, &profile, &mut engine, &mut tl)?;
        let mut spec_step_us = Vec::new();
        for &k in &req.draft_tokens {
            let c = step_cost(&s, &draft, &profile, k, &mut engine, &mut tl)?;
            spec_step_us.push(c.draft_us + c.verify_us + c.host_us);
        }
        grid.push(GridCost {
            batch: b,
            base_step_us,
            spec_step_us,
        });
    }
    progress(total, total);
    Ok(SpecDecodeCosts {
        baseline,
        draft_source: draft.source.clone(),
        steps,
        grid,
    })
}

/// The study of `costs` (from [`simulate_costs`] of `req`) at one acceptance.
pub(crate) fn study(
    req: &SpecDecodeRequest,
    costs: &SpecDecodeCosts,
    acceptance: &Acceptance,
) -> Result<SpecDecodeStudy> {
    for &k in &req.draft_tokens {
        acceptance.check_k(k)?;
    }
    let scenario = &costs.baseline.scenario;
    let variants = costs
        .steps
        .iter()
        .map(|(k, c)| {
            variant(
                costs.baseline.step_time_us(),
                scenario.batch,
                *k,
                c,
                acceptance,
                req,
                scenario.seed,
            )
        })
        .collect();

    let crossover = crossover(req, costs, acceptance);
    let warnings = study_warnings(req, costs, acceptance);
    Ok(SpecDecodeStudy {
        method: req.method,
        draft_source: costs.draft_source.clone(),
        acceptance: acceptance.describe(),
        acceptance_rate: match acceptance {
            Acceptance::Rate(r) => Some(*r),
            _ => None,
        },
        baseline: costs.baseline.clone(),
        variants,
        crossover,
        fits: costs.baseline.memory_fit.fits(),
        max_fitting_batch: crate::sim::max_fitting_batch(
            scenario,
            &costs.baseline.profile,
            scenario.batch,
        ),
        warnings,
    })
}

/// Where speculation stops paying along the batch grid (none without a grid): each batch's
/// best k and its speedup, up to the largest batch that fits.
fn crossover(
    req: &SpecDecodeRequest,
    costs: &SpecDecodeCosts,
    acceptance: &Acceptance,
) -> Option<Crossover> {
    if costs.grid.is_empty() {
        return None;
    }
    let scenario = &costs.baseline.scenario;
    // Tokens per second at the same batch: the batch cancels in the ratio.
    let speedups: Vec<Vec<f64>> = costs
        .grid
        .iter()
        .map(|g| {
            req.draft_tokens
                .iter()
                .zip(&g.spec_step_us)
                .map(|(&k, &step)| {
                    let tokens =
                        SpecStep::new(req.method, k).expected_tokens(&acceptance.survival(k));
                    tokens * g.base_step_us / step
                })
                .collect()
        })
        .collect();
    let grid: Vec<(u32, u32, f64)> = costs
        .grid
        .iter()
        .zip(&speedups)
        .map(|(g, sp)| {
            let mut best = (0u32, f64::MIN);
            for (&k, &x) in req.draft_tokens.iter().zip(sp) {
                if x > best.1 {
                    best = (k, x);
                }
            }
            (g.batch, best.0, best.1)
        })
        .collect();
    let top = grid.last().map_or(1, |g| g.0);
    let max_fitting_batch = crate::sim::max_fitting_batch(scenario, &costs.baseline.profile, top);
    let fits: Vec<bool> = grid
        .iter()
        .map(|g| max_fitting_batch.is_some_and(|m| g.0 <= m))
        .collect();
    // The range where speculation pays ends at what fits.
    let fitting: Vec<&(u32, u32, f64)> = grid
        .iter()
        .zip(&fits)
        .filter(|(_, f)| **f)
        .map(|(g, _)| g)
        .collect();
    let first_losing = fitting.iter().position(|g| g.2 <= 1.0);
    let (last_paying_batch, first_losing_batch) = match first_losing {
        None => (fitting.last().map(|g| g.0), None),
        Some(0) => (None, Some(fitting[0].0)),
        Some(i) => (Some(fitting[i - 1].0), Some(fitting[i].0)),
    };
    Some(Crossover {
        grid,
        last_paying_batch,
        first_losing_batch,
        draft_tokens: req.draft_tokens.clone(),
        speedups,
        fits,
        max_fitting_batch,
    })
}

/// The baseline's warnings and the study's own: verify passes above the captured CUDA-graph
/// sizes, an assumed draft shape, a fixed acceptance rate at large k.
fn study_warnings(
    req: &SpecDecodeRequest,
    costs: &SpecDecodeCosts,
    acceptance: &Acceptance,
) -> Vec<String> {
    let scenario = &costs.baseline.scenario;
    let mut warnings = costs.baseline.warnings.clone();
    if scenario.cuda_graphs {
        // The step's verify passes, at their query tokens and padding rule.
        let above: Vec<String> = req
            .draft_tokens
            .iter()
            .filter(|&&k| {
                let step = SpecStep::new(req.method, k);
                step.windows
                    .iter()
                    .flat_map(|w| &w.passes)
                    .filter(|r| r.kind == PassKind::Verify)
                    .any(|r| {
                        !scenario
                            .padding(r.queries, r.kind.pad_rule(r.queries))
                            .captured
                    })
            })
            .map(|k| k.to_string())
            .collect();
        if !above.is_empty() {
            warnings.push(format!(
                "CUDA graphs: the verify pass at k = {} is above the largest captured size {} (batch x (k+1) tokens): vLLM runs it without a full CUDA graph and does not pad it; decodesim still prices its launches as graph replays",
                above.join(", "),
                scenario.cuda_graph_sizes.max
            ));
        }
    }
    let spec = req.method.spec();
    if spec.source == DraftSource::HeadConfig && req.draft.is_none() {
        warnings.push(format!(
            "the default {} draft shape ({}) is an assumption (its upstream config was not read); pass --draft-config to use the real one",
            spec.label, costs.draft_source
        ));
    }
    if matches!(acceptance, Acceptance::Rate(_)) && req.draft_tokens.iter().any(|&k| k > 3) {
        warnings.push(
            "a fixed --acceptance-rate makes the mean acceptance length grow linearly with k (vLLM's definition); measured rates fall with k, so prefer --acceptance-per-position or --acceptance-lengths for k > 3".into(),
        );
    }
    warnings
}

/// One k's whole speculative step (verify, then the draft side) as one simulated timeline,
/// for `--timeline`: the passes play back to back on the same engine.
pub(crate) fn step_simulation(req: &SpecDecodeRequest, k: u32) -> Result<Simulation> {
    let (scenario, profile) = req.base.load()?;
    if scenario.layout.pp_size() > 1 {
        return Err(crate::sim::fast::pp_refused(scenario.layout.pp_size()));
    }
    let draft = Draft::load(req.method, req.draft.as_deref(), &scenario.model)?;
    draft.check_k(k)?;
    let ds = draft.scenario(&scenario)?;
    let w = SpecStep::new(draft.method, k).workload(&draft, &scenario, &ds);
    sim::simulate_workload(scenario, profile, w)
}

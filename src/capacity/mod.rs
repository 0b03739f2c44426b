//! Capacity planning: how many tokens of KV cache a deployment holds as vLLM accounts its
//! memory (`memory`), what throughput and TPOT it gives at each concurrency up to that limit
//! (`curve`), and the cheapest deployment over systems and parallelisms for a target (`plan`).

pub mod curve;
pub mod disagg;
pub mod layout;
/// GPU memory as vLLM accounts it: `sim::memory`, the one memory model `simulate`, `sweep`,
/// `capacity` and the what-ifs share.
pub use crate::sim::memory;
pub mod plan;

use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::{ScenarioRequest, Simulation};
use curve::{Curve, Demand, MixRow};
use memory::{MemoryAccount, MemoryOptions};

/// How the users' requests are described.
#[derive(Debug, Clone, PartialEq)]
pub enum DemandSpec {
    /// Decode only, every sequence at this many KV tokens (`--context`).
    Context(u64),
    /// `--input-len` / `--output-len`.
    Lengths { input_len: u64, output_len: u64 },
    /// A request-mix CSV, already parsed.
    Mix(Vec<MixRow>),
}

impl DemandSpec {
    fn demand(&self) -> Demand {
        match self {
            DemandSpec::Context(c) => Demand::context(*c),
            DemandSpec::Lengths {
                input_len,
                output_len,
            } => Demand::lengths(*input_len, *output_len),
            DemandSpec::Mix(rows) => Demand::mix(rows),
        }
    }
}

/// GPU-hour prices: one for every system, or one per system name.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Prices {
    #[default]
    None,
    All(f64),
    PerSystem(Vec<(String, f64)>),
}

impl Prices {
    pub fn of(&self, system: &str) -> Option<f64> {
        match self {
            Prices::None => None,
            Prices::All(p) => Some(*p),
            Prices::PerSystem(v) => v.iter().find(|(s, _)| s == system).map(|(_, p)| *p),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CapacityRequest {
    pub scenario: ScenarioRequest,
    pub memory: MemoryOptions,
    pub demand: DemandSpec,
    /// About how many concurrencies the curve simulates.
    pub points: usize,
    pub max_tpot_ms: Option<f64>,
    pub target_tokens_per_s: Option<f64>,
    pub users: Option<u32>,
    /// Systems the planner considers (empty: the scenario's system).
    pub systems: Vec<String>,
    /// Layouts the planner considers on every system (empty: [`layout::Layout::defaults`]).
    pub layouts: Vec<layout::Layout>,
    /// Evaluate the planner's candidates even without a target: `--layouts`, `--plot-pareto`.
    pub compare_layouts: bool,
    pub max_systems: u32,
    pub prices: Prices,
    /// A disaggregated study (`--disaggregate`): with data-parallel attention the curve is the
    /// decode pool's, without chunked prefill in its steps (which DP attention does not model),
    /// and the co-located answer is not given.
    pub disaggregated: bool,
}

/// Everything `decodesim capacity` reports.
#[derive(Debug, Clone)]
pub struct Capacity {
    pub(crate) demand: Demand,
    pub memory: MemoryAccount,
    /// Highest concurrency memory allows at this demand (KV limit capped by max_num_seqs).
    pub max_concurrency: u64,
    /// The KV limit alone.
    pub(crate) kv_limit: u64,
    /// What sets `max_concurrency`.
    pub binds: Binds,
    pub curve: Curve,
    /// The simulated step at the highest concurrency (its scenario and calibration go in the
    /// report the way `simulate` writes them).
    pub reference: Simulation,
    pub plan: Option<plan::Plan>,
    /// The planner's candidates with their curves (the Pareto plot draws them).
    pub(crate) candidates: Vec<plan::Candidate>,
    /// Planner candidates that were not considered, with why (TP not dividing the model, ...).
    pub(crate) skipped: Vec<String>,
    pub(crate) warnings: Vec<String>,
    /// `--min-tokens-per-s-per-user` when it sets the TPOT limit (1,000 / it ms, the stricter
    /// of it and `--max-tpot-ms`), for the reports to name.
    pub(crate) min_tokens_per_s_per_user: Option<f64>,
}

/// The limit that sets a deployment's highest concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binds {
    /// The KV cache's blocks.
    KvCache,
    /// vLLM's `max_num_seqs` (per data-parallel rank).
    MaxNumSeqs,
    /// The simulator's largest batch (`MAX_BATCH` per data-parallel rank): the global cap.
    BatchLimit(u64),
}

impl Binds {
    pub fn name(&self) -> &'static str {
        match self {
            Binds::KvCache => "kv_cache",
            Binds::MaxNumSeqs => "max_num_seqs",
            Binds::BatchLimit(_) => "batch_limit",
        }
    }
}

/// Loads the scenario of `req` at `tp` on `system`, checked against the demand (`decode_pool`:
/// a disaggregated study's decode pool, whose steps hold no prefill).
fn load(
    req: &ScenarioRequest,
    demand: &Demand,
    decode_pool: bool,
) -> Result<(Scenario, CalibrationProfile)> {
    let mut r = req.clone();
    // Two-batch overlap splits the batch in two: the smallest it takes.
    r.batch = if r.tbo { 2 } else { 1 };
    r.context = 1;
    let (mut s, p) = r.load()?;
    if s.layout.dp_size() > 1 && demand.prefill_per_output > 0.0 && !decode_pool {
        return Err(Error::ScenarioSetting {
            flag: "--dp",
            value: s.layout.dp_size().to_string(),
            problem: ": capacity's chunked-prefill share is priced for one tensor-parallel engine and is not modelled with data-parallel attention (expected a decode-only demand, --context, with --dp above 1, or --disaggregate: prefill on instances of its own)".into(),
        });
    }
    demand.check(&s)?;
    s.context = demand.decode_context;
    s.validate()?;
    Ok((s, p))
}

fn prefill(
    s: &Scenario,
    p: &CalibrationProfile,
    d: &Demand,
    o: &MemoryOptions,
) -> Result<Option<curve::PrefillCost>> {
    if d.prefill_per_output > 0.0 {
        Ok(Some(curve::prefill_cost(
            s,
            p,
            o.max_num_batched_tokens,
            d.input_len,
        )?))
    } else {
        Ok(None)
    }
}

/// The scenario of a capacity request loaded for its demand, its memory account and the
/// highest concurrency it holds, with what sets it: what the curve is built up to.
pub(crate) struct Sized {
    pub(crate) scenario: Scenario,
    profile: CalibrationProfile,
    demand: Demand,
    mem: MemoryAccount,
    kv_limit: u64,
    pub(crate) max_concurrency: u64,
    binds: Binds,
}

/// Loads `req`'s scenario and accounts its memory (no step simulated): [`Sized`].
pub(crate) fn sized(req: &CapacityRequest) -> Result<Sized> {
    let demand = req.demand.demand();
    let (mut s, p) = load(&req.scenario, &demand, req.disaggregated)?;
    s.gpu_memory_utilization = req.memory.gpu_memory_utilization;
    let mem = memory::account(&s, &p, &req.memory)?;
    let kv_limit = mem.kv_limit(demand.tokens_per_request);
    let seqs_limit = mem.max_concurrency(demand.tokens_per_request);
    // The simulator's batch limit is per data-parallel rank (each its own engine).
    let batch_cap =
        crate::scenario::deployment::MAX_BATCH as u64 * s.layout.dp_size().max(1) as u64;
    let max_c = seqs_limit.min(batch_cap);
    let binds = if max_c < seqs_limit {
        Binds::BatchLimit(batch_cap)
    } else if seqs_limit < kv_limit {
        Binds::MaxNumSeqs
    } else {
        Binds::KvCache
    };
    if max_c == 0 {
        return Err(Error::KvDoesNotFit {
            tokens: demand.tokens_per_request.ceil(),
            described: demand.described.clone(),
            kv_tokens: mem.kv_cache_tokens,
            model: s.model.name.clone(),
            tp: s.layout.tp,
        });
    }
    Ok(Sized {
        scenario: s,
        profile: p,
        demand,
        mem,
        kv_limit,
        max_concurrency: max_c,
        binds,
    })
}

/// Runs the capacity analysis of `req`.
pub fn capacity(req: &CapacityRequest) -> Result<Capacity> {
    plan::check_target(req.target_tokens_per_s, req.users, req.max_tpot_ms)?;
    let Sized {
        scenario: s,
        profile: p,
        demand,
        mem,
        kv_limit,
        max_concurrency: max_c,
        binds,
    } = sized(req)?;
    let mut warnings = Vec::new();
    if req.memory.dcp != s.layout.dcp.unwrap_or(1) {
        warnings.push(format!(
            "--dcp {}: the KV cache is sharded over {} ranks in the memory account, but the decode step is simulated without DCP (its split attention and extra collectives are not modelled)",
            req.memory.dcp, req.memory.dcp
        ));
    }
    let pre = prefill_share(req, &s, &p, &demand, &mut warnings)?;
    let curve = curve::build(
        &s,
        &p,
        &demand,
        max_c as u32,
        req.points,
        req.max_tpot_ms,
        pre,
    )?;
    let mut at_max = s.clone();
    at_max.batch = max_c as u32;
    let reference = crate::sim::simulate_loaded(at_max, p.clone())?;
    warnings.extend(reference.warnings.iter().cloned());

    let mut skipped = Vec::new();
    let mut compared = Vec::new();
    let plan = if req.target_tokens_per_s.is_some() || req.users.is_some() || req.compare_layouts {
        let target = plan::Target {
            tokens_per_s: req.target_tokens_per_s,
            users: req.users,
            max_tpot_ms: req.max_tpot_ms,
            max_systems: req.max_systems.max(1),
        };
        compared = candidates(req, &demand, &mut skipped)?;
        Some(plan::plan(&compared, &target))
    } else {
        None
    };
    Ok(Capacity {
        demand,
        memory: mem,
        max_concurrency: max_c,
        kv_limit,
        binds,
        curve,
        reference,
        plan,
        candidates: compared,
        skipped,
        warnings,
        min_tokens_per_s_per_user: None,
    })
}

/// The prefill cost the curve adds to every step (None: decode only, or a data-parallel
/// decode pool whose prefill runs apart), with the warnings its pricing raises.
fn prefill_share(
    req: &CapacityRequest,
    s: &Scenario,
    p: &CalibrationProfile,
    demand: &Demand,
    warnings: &mut Vec<String>,
) -> Result<Option<curve::PrefillCost>> {
    let dp_pool = req.disaggregated && s.layout.dp_size() > 1 && demand.prefill_per_output > 0.0;
    let pre = if dp_pool {
        warnings.push(format!(
            "--dp {} with --disaggregate: the capacity curve is the decode pool's, without chunked prefill in its steps; co-located chunked prefill with data-parallel attention is not modelled",
            s.layout.dp_size()
        ));
        None
    } else {
        prefill(s, p, demand, &req.memory)?
    };
    if pre.is_some() && s.nccl.proto == crate::scenario::Proto::Ll {
        warnings.push(
            "prefill's large all-reduces are priced with the forced NCCL_PROTO=LL (--nccl-proto LL, the default scenario's setting), which is slow for big messages; a deployment that leaves NCCL_PROTO unset gets Simple for them: compare --nccl-proto auto".into(),
        );
    }
    if let Some(pc) = &pre {
        if !pc.warnings.is_empty() {
            warnings.push(format!(
                "prefill priced at a {}-token chunk: {} pricing warning(s), e.g. {}",
                pc.chunk_tokens,
                pc.warnings.len(),
                pc.warnings[0]
            ));
        }
    }
    Ok(pre)
}

/// Every (system, layout) the planner considers, with its KV limit and curve.
fn candidates(
    req: &CapacityRequest,
    demand: &Demand,
    skipped: &mut Vec<String>,
) -> Result<Vec<plan::Candidate>> {
    let systems = if req.systems.is_empty() {
        vec![req.scenario.system.clone()]
    } else {
        req.systems.clone()
    };
    let mut out = Vec::new();
    for name in &systems {
        let sys = crate::scenario::SystemSpec::from_file(
            &crate::scenario::catalog::resolve_system(name)?,
            &crate::scenario::catalog::gpus_dir(),
        )?;
        let layouts = if req.layouts.is_empty() {
            let model = crate::scenario::ModelSpec::from_file(
                &crate::scenario::catalog::resolve_model(&req.scenario.model)?,
            )?;
            layout::Layout::defaults(&sys, &model)
        } else {
            req.layouts.clone()
        };
        for lay in layouts {
            let Some((s, p)) = load_layout(req, demand, name, &sys, lay, skipped)? else {
                continue;
            };
            for (dcp, c, note) in dcp_shapes(req, demand, &s, &p, lay)? {
                out.push(plan::Candidate {
                    system: name.clone(),
                    gpus_per_system: sys.gpu_count,
                    layout: layout::Layout { dcp, ..lay },
                    max_concurrency: c,
                    memory_note: note,
                    curve: shape_curve(req, demand, &s, &p, dcp, c)?,
                    gpu_hour_usd: req.prices.of(name),
                });
            }
        }
    }
    Ok(out)
}

/// The request's scenario on system `name` at layout `lay`, loaded; None (with the reason in
/// `skipped`) where the system is too small or the scenario cannot run.
fn load_layout(
    req: &CapacityRequest,
    demand: &Demand,
    name: &str,
    sys: &crate::scenario::SystemSpec,
    lay: layout::Layout,
    skipped: &mut Vec<String>,
) -> Result<Option<(Scenario, CalibrationProfile)>> {
    let mut r = req.scenario.clone();
    r.system = name.to_string();
    if *name != req.scenario.system {
        r.calibration = None;
    }
    if lay.gpus() > sys.gpu_count {
        skipped.push(format!(
            "{name} {}: needs {} GPUs, the system has {}",
            lay.label(),
            lay.gpus(),
            sys.gpu_count
        ));
        return Ok(None);
    }
    let loaded = lay.apply(&mut r).and_then(|_| load(&r, demand, false));
    let (mut s, p) = match loaded {
        Ok(x) => x,
        // An infeasible shape (any invalid-scenario error) is skipped with its reason.
        Err(e) => match e.scenario_problem() {
            Some(why) => {
                skipped.push(format!("{name} {}: {why}", lay.label()));
                return Ok(None);
            }
            None => return Err(e),
        },
    };
    s.gpu_memory_utilization = req.memory.gpu_memory_utilization;
    Ok(Some((s, p)))
}

/// The layout's DCP shapes (its own, and `--dcp` beside a default layout of an MLA model
/// whose TP it divides), each with its concurrency limit and why it is zero.
fn dcp_shapes(
    req: &CapacityRequest,
    demand: &Demand,
    s: &Scenario,
    p: &CalibrationProfile,
    lay: layout::Layout,
) -> Result<Vec<(u32, u64, Option<String>)>> {
    let mut dcps = vec![lay.dcp];
    if lay.dcp == 1
        && req.layouts.is_empty()
        && req.memory.dcp > 1
        && lay.tp.is_multiple_of(req.memory.dcp)
        && s.model.mla.is_some()
    {
        dcps.push(req.memory.dcp);
    }
    let mut shapes = Vec::new();
    for dcp in dcps {
        let o = MemoryOptions {
            dcp,
            ..req.memory.clone()
        };
        match memory::account(s, p, &o) {
            Ok(m) => {
                let c = m.max_concurrency(demand.tokens_per_request).min(
                    crate::scenario::deployment::MAX_BATCH as u64
                        * s.layout.dp_size().max(1) as u64,
                );
                let note = (c == 0).then(|| {
                    format!(
                        "one request of {:.0} KV tokens does not fit in {} KV tokens",
                        demand.tokens_per_request, m.kv_cache_tokens
                    )
                });
                shapes.push((dcp, c, note));
            }
            Err(e) if e.scenario_problem().is_some() => {
                let need: f64 = memory::fixed_terms(s, p, &o).iter().map(|t| t.bytes).sum();
                let allowed = s.system.gpu.memory_total_bytes() * o.gpu_memory_utilization;
                shapes.push((
                    dcp,
                    0,
                    Some(format!(
                        "needs {} per GPU before any KV cache; {} allowed",
                        crate::units::bytes(need),
                        crate::units::bytes(allowed)
                    )),
                ))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(shapes)
}

/// The curve of one DCP shape up to its concurrency limit `c` (none when nothing fits), simulated
/// with its own split attention and collectives.
fn shape_curve(
    req: &CapacityRequest,
    demand: &Demand,
    s: &Scenario,
    p: &CalibrationProfile,
    dcp: u32,
    c: u64,
) -> Result<Vec<curve::CurvePoint>> {
    if c == 0 {
        return Ok(Vec::new());
    }
    let mut sd = s.clone();
    sd.layout.dcp = (dcp > 1).then_some(dcp);
    let o = MemoryOptions {
        dcp,
        ..req.memory.clone()
    };
    let pre = prefill(&sd, p, demand, &o)?;
    Ok(curve::build(&sd, p, demand, c as u32, req.points, req.max_tpot_ms, pre)?.points)
}

/// The simulated step at each of `batches` (the category breakdown plot).
pub(crate) fn breakdown_by_batch(
    req: &ScenarioRequest,
    context: u64,
    batches: &[u32],
) -> Result<Vec<Simulation>> {
    batches
        .iter()
        .map(|&b| {
            let mut r = req.clone();
            r.batch = b;
            r.context = context;
            crate::sim::simulate(&r)
        })
        .collect()
}

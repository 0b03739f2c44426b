//! `decodesim sweep`: a Cartesian grid of scenarios priced by the fast path on every core.

use super::acceptance::Acceptance;
use super::draft::{Draft, Method};
use super::fast::{Collectives, FastScenario, Launch};
use crate::category::Category;
use crate::error::{Error, Result};
use crate::sim::ScenarioRequest;
use crate::spec::{Algo, Proto};
use rayon::prelude::*;

/// The grid: the base scenario's model, system and profile with lists of knobs.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    pub base: ScenarioRequest,
    pub batch: Vec<u32>,
    pub context: Vec<u64>,
    pub proto: Vec<Proto>,
    pub algo: Vec<Algo>,
    pub cuda_graphs: Vec<bool>,
    pub draft_tokens: Vec<u32>,
    pub method: Method,
    pub draft: Option<String>,
    /// Needed when any draft-token count is above 0.
    pub acceptance: Option<Acceptance>,
}

/// One scenario's inputs and outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub batch: u32,
    pub context: u64,
    pub proto: Proto,
    pub algo: Algo,
    pub cuda_graphs: bool,
    pub draft_tokens: u32,
    pub step_time_us: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_user: f64,
    pub mean_acceptance_length: f64,
    /// Busy time per category on one rank (every stream; categories in `Category::ALL` order).
    pub busy_us: [f64; Category::ALL.len()],
    pub pareto: bool,
}

#[derive(Debug, Clone)]
pub struct Sweep {
    pub rows: Vec<Row>,
    pub model: String,
    pub system: String,
    pub calibration: String,
}

impl SweepRequest {
    pub fn len(&self) -> usize {
        self.batch.len()
            * self.context.len()
            * self.proto.len()
            * self.algo.len()
            * self.cuda_graphs.len()
            * self.draft_tokens.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs the grid; `progress(n)` is called as rows finish (from any thread).
pub fn run(req: &SweepRequest, progress: &(dyn Fn(u64) + Sync)) -> Result<Sweep> {
    if req.is_empty() {
        return Err(Error::Scenario("the sweep grid is empty".into()));
    }
    let (scenario, profile) = req.base.load()?;
    let speculative = req.draft_tokens.iter().any(|&k| k > 0);
    let draft = if speculative {
        let d = Draft::load(req.method, req.draft.as_deref(), &scenario.model)?;
        let acc = req.acceptance.as_ref().ok_or_else(|| {
            Error::Scenario(
                "--draft-tokens above 0 needs the acceptance: --acceptance-rate R (or --acceptance-per-position)".into(),
            )
        })?;
        for &k in req.draft_tokens.iter().filter(|&&k| k > 0) {
            d.check_k(k)?;
            acc.check_k(k)?;
        }
        Some(d)
    } else {
        None
    };
    // Every grid value is checked before any work starts.
    for &b in &req.batch {
        for &c in &req.context {
            let mut s = scenario.clone();
            s.batch = b;
            s.context = c;
            s.validate()?;
        }
    }
    let fast = FastScenario::new(&scenario, &profile, draft.as_ref())?;
    let mut colls = Vec::new();
    for &proto in &req.proto {
        for &algo in &req.algo {
            let mut s = scenario.clone();
            s.nccl.proto = proto;
            s.nccl.algo = algo;
            colls.push((proto, algo, Collectives::new(&s, &profile)?));
        }
    }
    let launches: Vec<(bool, Launch)> = req
        .cuda_graphs
        .iter()
        .map(|&g| (g, Launch::new(&profile, g)))
        .collect();
    let mean_len: Vec<f64> = req
        .draft_tokens
        .iter()
        .map(|&k| match (&req.acceptance, k) {
            (Some(a), k) if k > 0 => a.mean_acceptance_length(k),
            _ => 1.0,
        })
        .collect();

    // Row i in the grid's nested order: batch, context, proto × algo, graphs, draft tokens.
    let (nc, nk, nl, nd) = (
        req.context.len(),
        colls.len(),
        launches.len(),
        req.draft_tokens.len(),
    );
    let n = req.len();
    let chunk = 256usize;
    let mut rows: Vec<Row> = (0..n.div_ceil(chunk))
        .into_par_iter()
        .flat_map_iter(|ci| {
            let lo = ci * chunk;
            let hi = (lo + chunk).min(n);
            let out: Vec<Row> = (lo..hi)
                .map(|i| {
                    let di = i % nd;
                    let li = (i / nd) % nl;
                    let ki = (i / (nd * nl)) % nk;
                    let xi = (i / (nd * nl * nk)) % nc;
                    let bi = i / (nd * nl * nk * nc);
                    let (batch, context) = (req.batch[bi], req.context[xi]);
                    let (proto, algo, coll) = &colls[ki];
                    let (graphs, launch) = &launches[li];
                    let k = req.draft_tokens[di];
                    let (step, busy) = if k == 0 {
                        fast.step_us_busy(batch, context, launch, coll)
                    } else {
                        let (s, b) = fast
                            .spec_step_us_busy(batch, context, k, launch, coll)
                            .expect("drafter fitted when k > 0");
                        (s.2, b)
                    };
                    let per_user = mean_len[di] / step * 1e6;
                    Row {
                        batch,
                        context,
                        proto: *proto,
                        algo: *algo,
                        cuda_graphs: *graphs,
                        draft_tokens: k,
                        step_time_us: step,
                        tokens_per_s: per_user * batch as f64,
                        tokens_per_s_per_user: per_user,
                        mean_acceptance_length: mean_len[di],
                        busy_us: busy,
                        pareto: false,
                    }
                })
                .collect();
            progress(out.len() as u64);
            out.into_iter()
        })
        .collect();
    mark_pareto(&mut rows);
    Ok(Sweep {
        rows,
        model: scenario.model.name.clone(),
        system: scenario.system.name.clone(),
        calibration: profile.profile.name.clone(),
    })
}

/// Marks the rows no other row beats on both total and per-user tokens/s.
pub fn mark_pareto(rows: &mut [Row]) {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| {
        rows[b]
            .tokens_per_s_per_user
            .total_cmp(&rows[a].tokens_per_s_per_user)
            .then(rows[b].tokens_per_s.total_cmp(&rows[a].tokens_per_s))
    });
    let mut best_total = f64::NEG_INFINITY;
    for i in order {
        if rows[i].tokens_per_s > best_total {
            rows[i].pareto = true;
            best_total = rows[i].tokens_per_s;
        }
    }
}

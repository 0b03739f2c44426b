//! The aggregate fast path: a decode step priced without the 8-rank timeline.
//!
//! With jitter off every rank plays the same kernels, so the timeline engine reduces to one
//! rank's max-plus recursion (stream free times, the CPU's launch clock, fork/join of the
//! auxiliary stream). The fast path keeps that recursion but plays each distinct layer once:
//! a run of identical layers is played until its state relative to the compute stream repeats,
//! then the remaining layers are added as whole-layer increments.
//!
//! Op shapes (FLOPs, bytes, message bytes, GEMM dimensions, table keys) are linear in a small
//! basis of the scenario's variables (tokens, sequences, context, split-KV count, experts
//! touched); the coefficients are read off the real workload builder by probing it, so the
//! builder stays the one place where shapes are written down. Costs are NOT fitted: each
//! representative op is rebuilt at the scenario's shape and priced by `cost::price`, the very
//! function the timeline uses (AIConfigurator tables, laws, collectives with their protocol
//! choice, the profile's factors). Pricing is memoised per thread, by what each op's price
//! depends on: ops that follow the tokens per (pass, batch, queries), attention per (pass,
//! batch, queries, context), collectives per (pass, batch, queries, NCCL setting, graph mode).
//! A sweep therefore prices each distinct shape once and plays the recursion for every row.
//!
//! With jitter on, the timeline's collectives also wait for the slowest rank; the fast path adds
//! that wait's expectation at every collective (the straggler section at the end of this file),
//! so that it gives the mean of the timeline over seeds (tests/fast_vs_seeds.rs).
//!
//! Experts touched per MoE layer take their closed-form expectation under the scenario's routing
//! where the timeline draws them per layer (seeded): with jitter off, the one difference. It
//! shows where the MoE table price and the DRAM floor of the touched experts' weights are close
//! (max(table, floor) of a spread-out count averages above its value at the mean: up to ~0.3%
//! low near 140 tokens), and as one seed's draws against their expectation (up to ~0.45% either
//! way on a small speculative step; tests/whatif.rs holds 200 scenarios within 0.5%).
//!
//! Under expert parallelism (`--ep`, and data-parallel attention, `--dp`) the ranks do not play
//! the same step: each rank's experts get their own tokens, each DP rank attends over its own
//! sequences. The fast path then plays the expected slowest rank between collectives (`ep`):
//! shapes at the largest DP rank's share, the expert kernels at the expected maximum over ranks
//! of their time from seeded routing draws, and the wide collectives' straggler wait over the
//! whole expert-parallel group (tests/fast_dp.rs: within 0.5% of the timeline's mean).
//!
//! Two-batch overlap (`--tbo on`, `tbo`) plays the plain step's model twice, each micro-batch
//! (⌈B/2⌉ and ⌊B/2⌋ sequences) priced at its own batch, interleaved at their all-to-alls as the
//! timeline plays them: asynchronous all-to-alls on a communication stream, waits holding the
//! compute stream, the expected slowest rank carried between the points where the ranks meet
//! (tests/fast_tbo.rs: mean error 0.2% against the timeline's mean, worst about 1%).

use crate::category::Category;
use crate::cost::{self, CalibrationProfile};
use crate::error::{Error, Result};
use crate::scenario::deployment::CommKnobs;
use crate::scenario::{NcclSettings, Scenario};
use crate::workload::routing::DistinctExperts;
use crate::workload::spec_step::{PassKind, Side, SpecStep};
use crate::workload::{CostFamily, Op, Stream, Workload, SHARED_EXPERT_STREAM_TOKEN_THRESHOLD};
use nalgebra::{DMatrix, DVector};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

const NCAT: usize = Category::ALL.len();
type Busy = [f64; NCAT];

const NB: usize = 12;
type Coef = [f64; NB];

/// The scenario variables an op's shape is linear in.
mod basis;
mod ep;
mod memo;
mod pipeline;
mod replay;
mod tbo;
mod tbo_knots;

use basis::{
    busy_of, keep_or_nan, latency_fractions, price_layout, price_layout_at, price_layout_in,
    price_layout_into, PassModel, Regime, Scratch,
};
use ep::{slowest_rank, Coupled, EpLoads, Tail};
use memo::{
    scratch_index, Entry, EntryMap, Memo, StagePlays, CONTEXTS_PER_ENTRY, LAYOUTS, MEMO,
    MEMO_MAX_VALUES,
};
use pipeline::PipelineFit;
pub use replay::State;
use replay::{play_regime, Straggler};

/// Unique ids of fast scenarios and collective settings (the memo's keys).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The NCCL setting collectives are priced with (protocol, algorithm, P2P, `--allreduce`, the
/// NCCL knobs and the other communication settings), prepared once per sweep setting. It holds
/// no layout: a fast scenario prices every setting over its own.
#[derive(Debug, Clone)]
pub struct Collectives {
    id: u64,
    nccl: NcclSettings,
    comm: CommKnobs,
}

impl Collectives {
    /// Takes `s`'s NCCL settings; refuses (as `simulate` would) a setting the profile cannot
    /// price.
    pub fn new(s: &Scenario, p: &CalibrationProfile) -> Result<Self> {
        if s.layout.tp > 1 {
            let mut b = crate::workload::builder::Builder::new();
            let bytes = s.model.hidden as u64 * 2;
            let role = crate::workload::OpRole::Collective;
            b.collective(role, "all_reduce", "nccl", CostFamily::AllReduce, bytes);
            b.collective(role, "all_gather", "nccl", CostFamily::AllGather, bytes);
            let w = Workload {
                ops: b.ops,
                experts_touched: Vec::new(),
                routing: Default::default(),
            };
            cost::price(&w, s, p)?;
        }
        Ok(Collectives {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            nccl: s.nccl,
            comm: s.comm,
        })
    }
}

/// The launch rules both engines play (`sim::rules`).
pub use crate::sim::rules::Launch;

/// A speculative step's (draft µs, verify µs, whole step µs).
pub type SpecSplit = (f64, f64, f64);

/// A scenario family in closed form: the plain step, and speculative steps at any k.
#[derive(Debug, Clone)]
pub struct FastScenario {
    pub profile: CalibrationProfile,
    /// The scenario ops are priced under (the timeline prices draft passes under the target's
    /// scenario too).
    scenario: Scenario,
    id: u64,
    /// The plain step's pass (a pipeline's first stage; two-batch overlap's micro-batch pass).
    target: PassModel,
    /// How a step plays `target`, and what else it plays.
    mode: Mode,
    /// The expected wait of each collective for the slowest rank (jitter on).
    straggler: Straggler,
    /// Expert parallelism: the draws of the ranks' expert loads (`ep`), in any mode but a
    /// pipeline's.
    loads: Option<EpLoads>,
}

/// How the step of a fast scenario is played, with what each way needs beyond the plain pass
/// (`FastScenario::target`): one mode per scenario, chosen when it is fitted.
#[derive(Debug, Clone)]
enum Mode {
    /// `target` played once.
    Plain,
    /// Pipeline parallelism (`--pp`): `target` is stage 0; stages 1 .. pp and the schedule's
    /// inputs (`pipeline`).
    Pipelined(PipelineFit),
    /// Two-batch overlap (`--tbo on`): `target` is the micro-batch pass, played twice
    /// interleaved (`tbo`).
    TwoBatchOverlap(tbo::TboFit),
    /// A drafter's passes (`target` still plays the plain step): speculative steps at any k.
    Speculative(SpecFit),
}

/// The sweep setting a pass is played under: the launch mode and the NCCL setting.
#[derive(Clone, Copy)]
struct Setting<'a> {
    launch: &'a Launch,
    coll: &'a Collectives,
}

impl Setting<'_> {
    /// Puts the setting on `s` (the memo's scenario, to price collectives under it): the NCCL
    /// and communication settings and the launch mode. The layout is the fitted scenario's and
    /// stays.
    fn put(&self, s: &mut Scenario) {
        s.nccl = self.coll.nccl;
        s.comm = self.coll.comm;
        s.cuda_graphs = self.launch.graphs;
    }
}

/// One pass of a step: sequences, query tokens per sequence, and how many identical passes run
/// in a row (the KV lengths are the lanes').
#[derive(Clone, Copy)]
struct PassAt {
    batch: u32,
    queries: u32,
    repeat: u32,
}

impl PassAt {
    /// The plain decode step: one query token per sequence, played once.
    fn plain(batch: u32) -> Self {
        PassAt {
            batch,
            queries: 1,
            repeat: 1,
        }
    }
}

/// A drafter's passes in closed form: one model per `PassKind` (memo slot 1 + its index), and
/// the `SpecStep` they are played in.
#[derive(Debug, Clone)]
struct SpecFit {
    method: crate::workload::spec_step::SpecMethod,
    /// In `PassKind::ALL` order.
    passes: Vec<PassModel>,
    /// The step at k = 1, 2, ... up to the method's limit, built once (a sweep plays it per row).
    steps: Vec<SpecStep>,
    host_us: f64,
    pass_gap_us: f64,
}

impl SpecFit {
    fn step(&self, k: u32) -> std::borrow::Cow<'_, SpecStep> {
        match self.steps.get((k as usize).wrapping_sub(1)) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(SpecStep::new(self.method, k)),
        }
    }
}

impl FastScenario {
    /// Fits the plain step of `s`; with `draft`, also the verify pass and the draft passes.
    pub fn new(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&crate::workload::spec_step::Drafter>,
    ) -> Result<Self> {
        // A pipeline: one model per stage, composed by `sim::pipeline::schedule`. Speculative
        // decoding's windows are not composed with the pipeline's micro-batches: refused.
        let pp = s.layout.pp_size();
        if s.layout.tbo {
            return tbo::fit(s, p, draft);
        }
        let ep = s.layout.ep_size() > 1 && s.model.moe.is_some();
        if ep && pp > 1 {
            return Err(ep_refused(s));
        }
        if pp > 1 {
            if draft.is_some() {
                return Err(pp_refused(pp));
            }
            let (first, fit) = PipelineFit::fit(s)?;
            let fast = FastScenario {
                profile: p.clone(),
                scenario: s.clone(),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                target: first,
                mode: Mode::Pipelined(fit),
                straggler: Straggler::new(&p.variability, s.layout.tp, s.layout.tp),
                loads: None,
            };
            fast.check()?;
            return Ok(fast);
        }
        // Data-parallel attention: probed at batches every DP rank shares evenly (the probe's
        // batch each), so that shapes are linear in one DP rank's variables (`ep`).
        let dp = s.layout.dp_size();
        let build_target = move |ps: &Scenario, q: u32| {
            if dp > 1 {
                let mut g = ps.clone();
                g.batch = ps.batch * dp;
                crate::workload::build_pass(&g, q)
            } else {
                crate::workload::build_pass(ps, q)
            }
        };
        let target;
        let mut spec = None;
        if let Some(d) = draft {
            let sd = p.spec_decode.as_ref().ok_or_else(|| {
                Error::field(
                    &p.path,
                    "spec_decode",
                    "missing: needed for draft tokens > 0",
                )
            })?;
            let ds = d.scenario(s)?;
            // Each kind of pass the step runs, fitted on the scenario it is built on.
            let fit = |(i, kind): (usize, &PassKind)| {
                let on = if kind.on_draft() { &ds } else { s };
                // Probed like the plain step under data-parallel attention (a batch per DP rank).
                let pass_dp = on.layout.dp_size();
                // A dense drafter under data-parallel attention runs on one DP rank's share.
                let share = if on.layout.dp_size() < s.layout.dp_size() {
                    s.layout.dp_size()
                } else {
                    1
                };
                let build = move |ps: &Scenario, q: u32| {
                    if pass_dp > 1 {
                        let mut g = ps.clone();
                        g.batch = ps.batch * pass_dp;
                        kind.build(d, &g, q, kind.first_index())
                    } else {
                        kind.build(d, ps, q, kind.first_index())
                    }
                };
                let mut pm = PassModel::fit(on, &build, 1 + i, *kind == PassKind::Verify)?;
                pm.dp_share = share;
                Ok(pm)
            };
            let (t, passes) = rayon::join(
                || PassModel::fit(s, &build_target, 0, false),
                || {
                    use rayon::prelude::*;
                    PassKind::ALL
                        .par_iter()
                        .enumerate()
                        .map(fit)
                        .collect::<Result<Vec<_>>>()
                },
            );
            target = t?;
            spec = Some(SpecFit {
                method: d.method,
                passes: passes?,
                steps: (1..=d.max_draft_tokens)
                    .map(|k| SpecStep::new(d.method, k))
                    .collect(),
                host_us: sd.exposed_host_us,
                pass_gap_us: sd.pass_gap_us,
            });
        } else {
            target = PassModel::fit(s, &build_target, 0, false)?;
        }
        let fast = FastScenario {
            profile: p.clone(),
            scenario: s.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            target,
            mode: spec.map_or(Mode::Plain, Mode::Speculative),
            straggler: Straggler::new(&p.variability, s.layout.tp, s.ranks()),
            loads: EpLoads::new(s, p),
        };
        fast.check()?;
        Ok(fast)
    }

    /// Prices every op group of every pass once, so that a profile that cannot price a shape
    /// is refused here, by name, rather than showing as NaN in a sweep.
    fn check(&self) -> Result<()> {
        let mut s = self.scenario.clone();
        for pm in self.passes() {
            for (b, q) in [(1u32, 2u32), (257, 2)] {
                s.batch = b;
                let (t, padded) = ((b * q) as u64, pm.padded(b, q, false));
                let regime = pm.regime(padded as f64);
                let x = pm
                    .vars(b, q, s.context, pm.touched(t, padded), padded)
                    .basis();
                price_layout(regime, &regime.tokens_layout, &x, &s, &self.profile)?;
                price_layout(regime, &regime.context_layout, &x, &s, &self.profile)?;
                let k: Vec<(usize, bool)> =
                    regime.collective_ops.iter().map(|&i| (i, true)).collect();
                price_layout(regime, &k, &x, &s, &self.profile)?;
            }
        }
        Ok(())
    }

    fn passes(&self) -> impl Iterator<Item = &PassModel> {
        let rest: &[PassModel] = match &self.mode {
            Mode::Speculative(f) => &f.passes,
            Mode::Pipelined(f) => &f.rest,
            Mode::Plain | Mode::TwoBatchOverlap(_) => &[],
        };
        std::iter::once(&self.target).chain(rest)
    }

    /// Memo slots: the plain step and the speculative passes, or the pipeline's stages.
    fn slots(&self) -> usize {
        let stages = match &self.mode {
            Mode::Pipelined(f) => f.stages(),
            _ => 0,
        };
        (1 + PassKind::ALL.len()).max(stages)
    }

    /// Pipeline stages (1 without pipeline parallelism).
    pub fn stages(&self) -> usize {
        match &self.mode {
            Mode::Pipelined(f) => f.stages(),
            _ => 1,
        }
    }

    /// Pipeline stages a row plays (stages whose models play the same are played once).
    pub fn distinct_stages(&self) -> usize {
        match &self.mode {
            Mode::Pipelined(f) => f.twin.iter().enumerate().filter(|&(i, &t)| t == i).count(),
            _ => 1,
        }
    }

    /// Segment shapes (ops, repeat) of the target, verify, first and later draft passes.
    pub fn shapes(&self) -> Vec<Vec<(usize, u32)>> {
        self.passes().map(|m| m.shape()).collect()
    }

    /// Runs `f` with this thread's memo for this fast scenario.
    fn with_memo<R>(&self, f: impl FnOnce(&mut Memo) -> R) -> R {
        MEMO.with(|cell| {
            let mut slot = cell.borrow_mut();
            let fresh = match slot.as_ref() {
                Some(m) => m.owner != self.id || m.stored > MEMO_MAX_VALUES,
                None => true,
            };
            if fresh {
                *slot = Some(Box::new(Memo {
                    owner: self.id,
                    s: self.scenario.clone(),
                    passes: (0..self.slots()).map(|_| Default::default()).collect(),
                    stored: 0,
                    d: Vec::new(),
                    scratch: (0..self.slots() * 2 * LAYOUTS)
                        .map(|_| Scratch::new())
                        .collect(),
                    draw: None,
                    latency: HashMap::new(),
                    stage_plays: StagePlays::default(),
                    knots: Default::default(),
                }));
            }
            f(slot.as_mut().expect("memo set above"))
        })
    }

    /// Plays `at.repeat` passes of `pm` at (batch, queries) and `W` contexts at once, each on its
    /// own state: the shapes that follow the tokens are looked up once, and the lanes' max-plus
    /// recursions run interleaved (`replay::play_regime`), so that their dependency chains
    /// overlap. Each lane does, bit for bit, what one lane alone does at its context.
    fn play_lanes<const W: usize>(
        &self,
        m: &mut Memo,
        pm: &PassModel,
        sts: &mut [State; W],
        at: PassAt,
        contexts: [u64; W],
        set: Setting<'_>,
    ) {
        let (launch, repeat) = (set.launch, at.repeat);
        self.price_lanes(m, pm, sts, at, contexts, set, |regime, d, ex, sts, sg| {
            play_regime(regime, d, ex, sts, launch, repeat, sg)
        })
    }

    /// [`FastScenario::play_lanes`]'s pricing: the pass's durations (op-major, `W` lanes), the
    /// expert-parallel excess and the straggler wait, handed to `then` with the states (busy
    /// time added), which plays them.
    #[allow(clippy::too_many_arguments)]
    fn price_lanes<const W: usize, F>(
        &self,
        m: &mut Memo,
        pm: &PassModel,
        sts: &mut [State; W],
        at: PassAt,
        contexts: [u64; W],
        set: Setting<'_>,
        then: F,
    ) where
        F: FnOnce(&Regime, &[f64], &[f64], &mut [State; W], &Straggler),
    {
        let PassAt {
            batch,
            queries,
            repeat,
            ..
        } = at;
        let context = contexts[0];
        let Setting { launch, coll } = set;
        let q = queries.max(1);
        let tokens = batch as u64 * q as u64;
        // With data-parallel attention every rank plays its DP rank's share, padded to the
        // largest (`ep`): shapes are read at that share, the experts touched at every DP rank's
        // rows together, prices under the whole scenario.
        let (dp, local) = dp_share(pm, batch);
        let padded = pm.padded(local, q, launch.graphs);
        let rows = padded * dp as u64;
        // vLLM picks the shared expert's stream by the rows the pass runs (padded).
        let regime = pm.regime(padded as f64);
        let p = &self.profile;
        let loads = self.loads.as_ref();
        let Memo {
            s,
            passes,
            stored,
            d: ds,
            scratch,
            draw,
            latency,
            ..
        } = m;
        let high = !std::ptr::eq(regime, &pm.low);
        let [w_tokens, w_context, w_coll] = scratch
            .get_disjoint_mut([0, 1, 2].map(|l| scratch_index(pm.slot, high, l)))
            .expect("distinct scratch slots");
        let (own, twin) = own_and_twin(passes, pm, high);
        let e = own.entry((batch, q, padded as u32)).or_insert_with(|| {
            let touched = pm.touched(tokens, rows);
            s.batch = batch;
            s.context = context;
            let x = pm.vars(local, q, context, touched, padded).basis();
            let nkept = regime.tokens_layout.iter().filter(|x| x.1).count();
            let draws = match (loads, &pm.ep) {
                (Some(l), Some(_)) => Some(l.draws(tokens, rows - tokens, batch)),
                _ => None,
            };
            let us = match (&draws, &pm.ep) {
                // Expert parallelism: the expert GEMMs priced at each rounded mean of the
                // experts with tokens per rank the draws meet, weighed by its share.
                (Some(d), Some(_)) => {
                    let mut acc = vec![0.0; nkept];
                    for (t, share) in d.experts_at() {
                        let u = keep_or_nan(
                            price_layout_at(
                                w_tokens,
                                regime,
                                &regime.tokens_layout,
                                &x,
                                s,
                                p,
                                Some(t),
                            ),
                            nkept,
                        );
                        for (a, v) in acc.iter_mut().zip(u) {
                            *a += share * v;
                        }
                    }
                    acc
                }
                _ => keep_or_nan(
                    price_layout_in(w_tokens, regime, &regime.tokens_layout, &x, s, p),
                    nkept,
                ),
            };
            let mut tokens_us = vec![0.0; regime.ops.len()].into_boxed_slice();
            let kept = regime.tokens_layout.iter().filter(|x| x.1).map(|x| x.0);
            for (i, v) in kept.clone().zip(&us) {
                tokens_us[i] = *v;
            }
            let (excess, coupled, tail) = match &draws {
                Some(d) => slowest_rank(regime, &mut tokens_us, &x, d),
                None => (Vec::new().into_boxed_slice(), Vec::new(), Tail::default()),
            };
            let us: Vec<f64> = kept.clone().map(|i| tokens_us[i]).collect();
            *stored += regime.ops.len();
            Entry {
                touched,
                excess,
                coupled,
                tail,
                tokens_busy: busy_of(regime, kept, &us),
                tokens_us,
                context: Vec::new(),
                evict: 0,
                last: 0,
                collectives: Vec::new(),
            }
        });
        let ki = match e
            .collectives
            .iter()
            .position(|c| c.0 == coll.id && c.1 == launch.graphs)
        {
            Some(i) => i,
            None => {
                s.batch = batch;
                s.context = context;
                set.put(s);
                let x = pm.vars(local, q, context, e.touched, padded).basis();
                let layout: Vec<(usize, bool)> =
                    regime.collective_ops.iter().map(|&i| (i, true)).collect();
                let us = keep_or_nan(
                    price_layout_in(w_coll, regime, &layout, &x, s, p),
                    layout.len(),
                );
                let busy = busy_of(regime, regime.collective_ops.iter().copied(), &us);
                *stored += layout.len();
                e.collectives
                    .push((coll.id, launch.graphs, us.into_boxed_slice(), busy));
                e.collectives.len() - 1
            }
        };
        let n = regime.ops.len();
        let from = (
            pm.slot,
            high,
            batch,
            q,
            padded as u32,
            coll.id,
            launch.graphs,
            W,
        );
        // The token-dependent and collective prices already in place (the last call's, at the
        // same batch and setting, undrawn) are kept: only the context ops are written.
        let di = pm.slot * 2 + high as usize;
        if ds.len() <= di {
            ds.resize_with(di + 1, Default::default);
        }
        let (d_from, d) = &mut ds[di];
        let kept = draw.is_none() && *d_from == Some(from);
        if !kept {
            d.clear();
            d.resize(n * W, 0.0);
        }
        *d_from = draw.is_none().then_some(from);
        for (lane, &context) in contexts.iter().enumerate() {
            // The context read last first (a sweep plays each context's rows together); at
            // most CONTEXTS_PER_ENTRY kept per entry, the oldest replaced, so that a sweep over
            // thousands of contexts neither scans nor holds them all. A lane's prices are
            // copied out before the next lane may replace their slot.
            let ci = context_slot(
                e,
                twin,
                (batch, q, padded as u32),
                (regime, pm, p),
                (&mut *s, &mut *w_context, &mut *stored),
                (local, padded),
                context,
            );
            e.last = ci;
            // Op-major: op i's lanes side by side (`replay::play_regime`).
            let (_, cus, cbusy) = &e.context[ci];
            let (_, _, kus, kbusy) = &e.collectives[ki];
            if !kept {
                for (i, &v) in e.tokens_us.iter().enumerate() {
                    d[i * W + lane] = v;
                }
                for (&i, &v) in regime.collective_ops.iter().zip(kus.iter()) {
                    d[i * W + lane] = v;
                }
            }
            for (&i, &j) in regime.context_ops.iter().zip(&regime.context_from) {
                d[i * W + lane] = cus[j];
            }
            let mut busy = [0.0; NCAT];
            if !e.coupled.is_empty() {
                // Written afresh on every lane: their part follows the lane's attention.
                for c in &e.coupled {
                    for &(i, ..) in c.ops() {
                        d[i * W + lane] = e.tokens_us[i];
                    }
                }
                Coupled::apply(&e.coupled, regime, d, W, lane, &mut busy);
            }
            if !e.tail.is_empty() {
                e.tail.apply(regime, &e.tokens_us, d, (W, lane), &mut busy);
            }
            for c in 0..NCAT {
                sts[lane].busy[c] +=
                    (e.tokens_busy[c] + cbusy[c] + kbusy[c] + busy[c]) * repeat as f64;
            }
        }
        if let Some(dr) = draw {
            let lat = if dr.splits_collectives() && !regime.collective_ops.is_empty() {
                let key = (pm.slot, batch, q, padded as u32, coll.id, launch.graphs);
                let e_touched = e.touched;
                &**latency.entry(key).or_insert_with(|| {
                    s.batch = batch;
                    s.context = context;
                    set.put(s);
                    let x = pm.vars(local, q, context, e_touched, padded).basis();
                    latency_fractions(regime, &x, s, p).into_boxed_slice()
                })
            } else {
                &[][..]
            };
            if W == 1 {
                dr.apply(regime, d, lat);
            } else {
                let mut dl = vec![0.0; n];
                for lane in 0..W {
                    for (i, v) in dl.iter_mut().enumerate() {
                        *v = d[i * W + lane];
                    }
                    dr.apply(regime, &mut dl, lat);
                    for (i, v) in dl.iter().enumerate() {
                        d[i * W + lane] = *v;
                    }
                }
            }
        }
        then(regime, d, &e.excess, sts, self.straggler_of(pm, batch));
    }

    /// The unique context-dependent prices of pass `pm` (one query per sequence) at `batch`
    /// and `context` (`Regime::context_layout`'s kept ops, `Regime::context_from` maps each
    /// context op to one), copied to `out`, through the memo; and the regime they belong to.
    /// None where the pass is not priced at that batch yet (its token-dependent entry, which
    /// the first play at the batch makes).
    fn context_prices<'r>(
        &'r self,
        m: &mut Memo,
        pm: &'r PassModel,
        (batch, context): (u32, u64),
        graphs: bool,
        out: &mut Vec<f64>,
    ) -> Option<&'r Regime> {
        let (_, local) = dp_share(pm, batch);
        let padded = pm.padded(local, 1, graphs);
        let regime = pm.regime(padded as f64);
        let high = !std::ptr::eq(regime, &pm.low);
        let Memo {
            s,
            passes,
            stored,
            scratch,
            ..
        } = m;
        let w_context = &mut scratch[scratch_index(pm.slot, high, 1)];
        let (own, twin) = own_and_twin(passes, pm, high);
        let key = (batch, 1, padded as u32);
        let e = own.get_mut(&key)?;
        let ci = context_slot(
            e,
            twin,
            key,
            (regime, pm, &self.profile),
            (s, w_context, stored),
            (local, padded),
            context,
        );
        out.clear();
        out.extend_from_slice(&e.context[ci].1);
        Some(regime)
    }

    /// The straggler wait of a pass: over the whole group at any batch. At a batch the DP ranks
    /// do not share evenly the others attend over fewer sequences, but with a few experts per
    /// rank any rank may hold the hottest ones (`ep::Coupled` plays which side is later), so
    /// the jitter's maximum is over every rank.
    #[inline]
    fn straggler_of(&self, _pm: &PassModel, _batch: u32) -> &Straggler {
        &self.straggler
    }

    /// The plain step's time (µs) at this batch and context.
    pub fn step_us(&self, batch: u32, context: u64, launch: &Launch, coll: &Collectives) -> f64 {
        self.step_us_busy(batch, context, launch, coll).0
    }

    /// The plain step's time and its busy time per category.
    pub fn step_us_busy(
        &self,
        batch: u32,
        context: u64,
        launch: &Launch,
        coll: &Collectives,
    ) -> (f64, Busy) {
        self.with_memo(|m| {
            let [one] = self.step_lanes(m, batch, [context], Setting { launch, coll }, 0.0);
            one
        })
    }

    /// The step at `W` contexts of one batch under `set` as the mode plays it (`overhead` µs
    /// added to each window's end-of-step idle): per context, (window µs, busy per category).
    /// A speculative scenario's plain step is its target pass alone.
    fn step_lanes<const W: usize>(
        &self,
        m: &mut Memo,
        batch: u32,
        contexts: [u64; W],
        set: Setting<'_>,
        overhead: f64,
    ) -> [(f64, Busy); W] {
        match &self.mode {
            Mode::Pipelined(fit) => {
                self.pipeline_step_lanes(m, fit, batch, contexts, set, overhead)
            }
            Mode::TwoBatchOverlap(fit) => self.tbo_rows(m, fit, batch, contexts, set, overhead),
            Mode::Plain | Mode::Speculative(_) => {
                let mut sts = [State::new(set.launch); W];
                for st in &mut sts {
                    st.step_overhead += overhead;
                }
                let at = PassAt::plain(batch);
                self.play_lanes(m, &self.target, &mut sts, at, contexts, set);
                sts.map(|st| (st.window_us(), st.busy))
            }
        }
    }

    /// A batch the fast path does not price for this scenario under `graphs`: expert
    /// parallelism so wide that the batch (with two-batch overlap, its smaller micro-batch)
    /// leaves fewer than one routed row per EP rank on average (`EpShape::thin`). Returns the
    /// mean rows per rank.
    pub fn thin_batch(&self, batch: u32, graphs: bool) -> Option<f64> {
        let pm = &self.target;
        let ep = pm.ep.as_ref()?;
        // Two-batch overlap prices each micro-batch as a step of its own: the smaller decides.
        let batch = if let Mode::TwoBatchOverlap(_) = self.mode {
            (batch / 2).max(1)
        } else {
            batch
        };
        let local = batch.div_ceil(ep.dp.max(1));
        let padded = pm.padded(local, 1, graphs);
        ep.thin(padded)
            .then(|| (ep.routed_per_padded * padded) as f64 / ep.n as f64)
    }

    /// [`FastScenario::step_us_busy`] at `W` contexts of one batch and setting, priced
    /// together (the sweep's rows along its context axis): the same figures, bit for bit.
    pub fn step_us_busy_lanes<const W: usize>(
        &self,
        batch: u32,
        contexts: [u64; W],
        launch: &Launch,
        coll: &Collectives,
    ) -> [(f64, Busy); W] {
        self.with_memo(|m| self.step_lanes(m, batch, contexts, Setting { launch, coll }, 0.0))
    }

    /// Plays the windows of the step at `k` (each window's passes on one state, `overhead` µs
    /// added to each window's end-of-step idle) at `W` contexts of one batch, the passes' lanes
    /// side by side (`play_lanes`): per context, (draft µs, verify µs, busy of both sides).
    fn play_spec<const W: usize>(
        &self,
        m: &mut Memo,
        spec: &SpecFit,
        (batch, contexts, k): (u32, [u64; W], u32),
        set: Setting<'_>,
        overhead: f64,
    ) -> [(f64, f64, Busy); W] {
        let Setting { launch, coll } = set;
        let step = spec.step(k);
        let mut out = [(0.0, 0.0, [0.0; NCAT]); W];
        for win in &step.windows {
            let mut sts = [State::new(launch); W];
            for st in &mut sts {
                st.step_overhead += overhead;
            }
            for run in &win.passes {
                let pm = &spec.passes[run.kind as usize];
                let at = PassAt {
                    batch,
                    queries: run.queries,
                    repeat: run.repeat,
                };
                self.play_lanes(m, pm, &mut sts, at, contexts, Setting { launch, coll });
            }
            for ((draft_us, verify_us, busy), st) in out.iter_mut().zip(&sts) {
                let us = st.window_us() + win.pass_gaps as f64 * spec.pass_gap_us;
                match win.side {
                    Side::Verify => *verify_us += us,
                    Side::Draft => *draft_us += us,
                }
                for (b, d) in busy.iter_mut().zip(st.busy) {
                    *b += d;
                }
            }
        }
        out
    }

    /// [`FastScenario::spec_step_us`] with the busy time per category of both sides.
    pub fn spec_step_us_busy(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<((f64, f64, f64), Busy)> {
        self.spec_step_us_busy_lanes(batch, [context], k, launch, coll)
            .map(|[r]| r)
    }

    /// [`FastScenario::spec_step_us_busy`] at `W` contexts of one batch and setting, priced
    /// together (a sweep's rows along its context axis): the same figures, bit for bit.
    pub fn spec_step_us_busy_lanes<const W: usize>(
        &self,
        batch: u32,
        contexts: [u64; W],
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<[(SpecSplit, Busy); W]> {
        let Mode::Speculative(spec) = &self.mode else {
            return None;
        };
        Some(self.with_memo(|m| {
            let set = Setting { launch, coll };
            self.play_spec(m, spec, (batch, contexts, k), set, 0.0).map(
                |(draft_us, verify_us, busy)| {
                    (
                        (draft_us, verify_us, draft_us + verify_us + spec.host_us),
                        busy,
                    )
                },
            )
        }))
    }

    /// A speculative step with `k` draft tokens: (draft µs, verify µs, whole step µs), as
    /// `whatif spec-decode` composes them. None when no drafter was fitted.
    pub fn spec_step_us(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<(f64, f64, f64)> {
        self.spec_step_us_busy(batch, context, k, launch, coll)
            .map(|x| x.0)
    }

    /// Forgets this thread's priced shapes (the next call prices from scratch: benchmarks of
    /// the cold path).
    pub fn clear_memo(&self) {
        MEMO.with(|cell| *cell.borrow_mut() = None);
    }

    /// [`FastScenario::step_us`] under a Monte Carlo draw: the memoised prices times the
    /// draw's multipliers, replayed through the recursion (the memo stays warm across draws).
    pub fn step_us_drawn(
        &self,
        batch: u32,
        context: u64,
        launch: &Launch,
        coll: &Collectives,
        draw: &Draw,
    ) -> f64 {
        self.with_memo(|m| {
            m.draw = Some(*draw);
            let set = Setting { launch, coll };
            let [(us, _)] = self.step_lanes(m, batch, [context], set, draw.step_overhead_us);
            m.draw = None;
            us
        })
    }

    /// [`FastScenario::spec_step_us`] under a Monte Carlo draw (see `step_us_drawn`).
    pub fn spec_step_us_drawn(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
        draw: &Draw,
    ) -> Option<(f64, f64, f64)> {
        let Mode::Speculative(spec) = &self.mode else {
            return None;
        };
        Some(self.with_memo(|m| {
            m.draw = Some(*draw);
            let [(draft_us, verify_us, _)] = self.play_spec(
                m,
                spec,
                (batch, [context], k),
                Setting { launch, coll },
                draw.step_overhead_us,
            );
            m.draw = None;
            (draft_us, verify_us, draft_us + verify_us + spec.host_us)
        }))
    }

    /// The scenario the fast path prices under.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }
}

/// One Monte Carlo draw of what is uncertain in the prices (`whatif::uncertainty`), applied
/// after the memoised prices, per op family: the memo key need not include it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// Multiplier of each op's price by its cost family (`CostFamily as usize`); for a
    /// collective, of its bandwidth (bytes) term.
    pub family: [f64; CostFamily::ALL.len()],
    /// Multiplier of every collective's latency term (base + steps × hop).
    pub collective_latency: f64,
    /// µs added to the idle at the end of every pass window (may be negative down to the
    /// profile's own overhead: the draw of a fitted `step_overhead_us`).
    pub step_overhead_us: f64,
}

impl Default for Draw {
    fn default() -> Self {
        Draw {
            family: [1.0; CostFamily::ALL.len()],
            collective_latency: 1.0,
            step_overhead_us: 0.0,
        }
    }
}

impl Draw {
    /// Whether some collective's latency and bandwidth terms are scaled apart.
    fn splits_collectives(&self) -> bool {
        CostFamily::ALL
            .iter()
            .filter(|f| f.is_collective())
            .any(|&f| self.family[f as usize] != self.collective_latency)
    }

    /// Scales one pass's durations `d` (`lat`: the latency fractions of the regime's
    /// collectives, in `collective_ops` order; empty when not split).
    fn apply(&self, regime: &Regime, d: &mut [f64], lat: &[f64]) {
        for (op, v) in regime.ops.iter().zip(d.iter_mut()) {
            let f = op.template.family;
            if !f.is_collective() {
                *v *= self.family[f as usize];
            }
        }
        for (j, &i) in regime.collective_ops.iter().enumerate() {
            let f = regime.ops[i].template.family;
            let l = lat.get(j).copied().unwrap_or(1.0);
            d[i] *= l * self.collective_latency + (1.0 - l) * self.family[f as usize];
        }
    }
}

/// The refusal of expert parallelism with pipeline parallelism on the fast path (its
/// slowest-rank expert loads are played for a whole step, not per stage), with the commands
/// that handle it.
fn ep_refused(s: &Scenario) -> Error {
    let (flag, value) = if s.layout.dp_size() > 1 {
        ("--dp", s.layout.dp_size())
    } else {
        ("--ep", s.layout.ep_size())
    };
    Error::ScenarioSetting {
        flag,
        value: value.to_string(),
        problem: ": the sweep's fast path plays expert parallelism's slowest rank for a whole step, not with pipeline parallelism (--pp); `decodesim simulate` and `decodesim whatif --vary --draws 0` play every rank's timeline".into(),
    }
}

/// The refusal of speculative decoding with pipeline parallelism (its draft and verify
/// windows are not composed with the pipeline's micro-batches), with the commands that handle
/// the pipeline.
pub(crate) fn pp_refused(pp: u32) -> Error {
    Error::FlagUse {
        flag: "--pp",
        problem: format!(
            "{pp}: speculative decoding is not modelled with pipeline parallelism (its draft and verify passes are not composed with the pipeline's micro-batches); price the pipeline without drafts: `decodesim simulate --pp {pp}`, `decodesim whatif --vary pp=1,{pp}`, `decodesim sweep --pp 1,{pp}` or `decodesim capacity --pp {pp}`"
        ),
    }
}

/// With data-parallel attention: the DP ranks, and the sequences of the largest one's share
/// of `batch` (each rank plays its DP rank's share, padded to the largest); else 1 and the
/// pass's own share.
fn dp_share(pm: &PassModel, batch: u32) -> (u32, u32) {
    match &pm.ep {
        Some(e) if e.dp > 1 => (e.dp, batch.div_ceil(e.dp)),
        _ => (1, batch.div_ceil(pm.dp_share)),
    }
}

/// The memo's entries of pass `pm`, and those of the earlier pipeline stage whose context ops
/// it prices alike (`PassModel::context_twin`), if any: a stage reads that stage's prices at
/// the same micro-batch and context (priced first: the stages play in order).
fn own_and_twin<'a>(
    passes: &'a mut [EntryMap],
    pm: &PassModel,
    high: bool,
) -> (&'a mut EntryMap, Option<&'a EntryMap>) {
    match pm.context_twin[high as usize] {
        Some(t) if t != pm.slot => {
            let [a, b] = passes
                .get_disjoint_mut([pm.slot, t])
                .expect("distinct pass slots");
            (a, Some(&*b))
        }
        _ => (&mut passes[pm.slot], None),
    }
}

/// The slot of `e`'s context prices at `context`, priced there if not kept: the slot read last
/// first (a sweep plays each context's rows together), at most `CONTEXTS_PER_ENTRY` kept, the
/// oldest replaced, so that a sweep over thousands of contexts neither scans nor holds them
/// all. A pipeline stage whose context ops an earlier stage prices alike (`twin`) reads that
/// stage's prices at the same micro-batch and context.
fn context_slot(
    e: &mut Entry,
    twin: Option<&EntryMap>,
    key: (u32, u32, u32),
    (regime, pm, p): (&Regime, &PassModel, &CalibrationProfile),
    (s, w_context, stored): (&mut Scenario, &mut Scratch, &mut usize),
    (local, padded): (u32, u64),
    context: u64,
) -> usize {
    let hit = match e.context.get(e.last) {
        Some(c) if c.0 == context => Some(e.last),
        _ => e.context.iter().rposition(|c| c.0 == context),
    };
    if let Some(i) = hit {
        return i;
    }
    let (batch, q, _) = key;
    s.batch = batch;
    s.context = context;
    let x = pm.vars(local, q, context, e.touched, padded).basis();
    let unique = regime.context_layout.iter().filter(|x| x.1).count();
    // Once full, the oldest slot is priced over in place (no allocation per row).
    let i = if e.context.len() >= CONTEXTS_PER_ENTRY {
        let i = e.evict;
        e.evict = (i + 1) % CONTEXTS_PER_ENTRY;
        i
    } else {
        *stored += unique;
        e.context
            .push((0, vec![0.0; unique].into_boxed_slice(), [0.0; NCAT]));
        e.context.len() - 1
    };
    let (at, us, busy) = &mut e.context[i];
    *at = context;
    let layout = &regime.context_layout;
    let shared = twin
        .and_then(|m| m.get(&key))
        .and_then(|t| t.context.iter().rfind(|c| c.0 == context))
        .filter(|c| c.1.len() == us.len());
    if let Some(c) = shared {
        us.copy_from_slice(&c.1);
    } else if price_layout_into(w_context, regime, layout, &x, s, p, None, us).is_err() {
        us.fill(f64::NAN);
    }
    *busy = [0.0; NCAT];
    for (&j, &(c, repeat)) in regime.context_from.iter().zip(&regime.context_busy) {
        busy[c] += us[j] * repeat;
    }
    i
}

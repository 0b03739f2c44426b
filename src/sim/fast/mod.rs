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
//! that wait's expectation at every collective (`replay::straggler`), so that it gives the mean
//! of the timeline over seeds (tests/fast_vs_seeds.rs).
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
use crate::workload::spec_step::PassKind;
use crate::workload::{CostFamily, Op, Workload};
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
mod draw;
mod ep;
mod lanes;
mod memo;
mod pipeline;
mod replay;
mod spec;
mod tbo;
mod tbo_knots;

use basis::{price_layout, PassModel, Scratch};
pub use draw::Draw;
use ep::EpLoads;
use memo::{Memo, StagePlays, LAYOUTS, MEMO, MEMO_MAX_VALUES};
use pipeline::PipelineFit;
pub use replay::State;
use replay::Straggler;
use spec::SpecFit;

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

impl FastScenario {
    /// Fits the plain step of `s`; with `draft`, also the verify pass and the draft passes.
    pub fn new(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&crate::workload::spec_step::Drafter>,
    ) -> Result<Self> {
        let pp = s.layout.pp_size();
        if s.layout.tbo {
            return tbo::fit(s, p, draft);
        }
        let ep = s.layout.ep_size() > 1 && s.model.moe.is_some();
        if ep && pp > 1 {
            return Err(ep_refused(s));
        }
        // A pipeline: one model per stage, composed by `sim::pipeline::schedule`. Speculative
        // decoding's windows are not composed with the pipeline's micro-batches: refused.
        let fast = if pp > 1 {
            if draft.is_some() {
                return Err(pp_refused(pp));
            }
            Self::fit_pipelined(s, p)?
        } else {
            Self::fit_plain(s, p, draft)?
        };
        fast.check()?;
        Ok(fast)
    }

    /// A pipeline's stages (`pp` above 1), stage 0 the target.
    fn fit_pipelined(s: &Scenario, p: &CalibrationProfile) -> Result<Self> {
        let (first, fit) = PipelineFit::fit(s)?;
        Ok(FastScenario {
            profile: p.clone(),
            scenario: s.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            target: first,
            mode: Mode::Pipelined(fit),
            straggler: Straggler::new(&p.variability, s.layout.tp, s.layout.tp),
            loads: None,
        })
    }

    /// The plain step of `s` (with expert parallelism, its slowest rank's loads), and with
    /// `draft` a drafter's passes.
    fn fit_plain(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&crate::workload::spec_step::Drafter>,
    ) -> Result<Self> {
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
        let (target, spec) = match draft {
            Some(d) => {
                let (target, spec) = SpecFit::fit(s, p, d, &build_target)?;
                (target, Some(spec))
            }
            None => (PassModel::fit(s, &build_target, 0, false)?, None),
        };
        Ok(FastScenario {
            profile: p.clone(),
            scenario: s.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            target,
            mode: spec.map_or(Mode::Plain, Mode::Speculative),
            straggler: Straggler::new(&p.variability, s.layout.tp, s.ranks()),
            loads: EpLoads::new(s, p),
        })
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
                    scenario: self.scenario.clone(),
                    passes: (0..self.slots()).map(|_| Default::default()).collect(),
                    stored: 0,
                    durations: Vec::new(),
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

    /// The scenario the fast path prices under.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
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

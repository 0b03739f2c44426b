//! Pipeline parallelism (`--pp`) on the fast path: one fitted model per stage, the
//! stage-to-stage send priced by the timeline's own `sim::pipeline::send`, and the micro-batch
//! schedule composed by `sim::pipeline::schedule`, the function `simulate` composes its
//! timeline with.
//!
//! Each stage's model is fitted by probing `workload::stage::build_stage` (its layer range, the
//! embedding on the first stage, the final norm, lm_head and sampler on the last, the receive
//! all-gathers on the others), as `sim::pipeline` builds the stage it plays. Per micro-batch
//! size a stage is played on one rank's recursion (`State::window_us`: first kernel to last end
//! plus the profile's step overhead, the straggler wait's expectation at its collectives),
//! where the timeline takes the span of the stage's tp ranks; with jitter off the two are the
//! same, with it on tests/fast_pipeline.rs holds them within 0.5% over seeds.
//!
//! A sweep's batches from `pp × (b - 1) + 1` to `pp × (b + 1) - 1` all run micro-batches of `b`
//! sequences, so a stage played at one micro-batch size for a row's contexts is kept
//! (`Memo::stage_plays`, bounded) and handed out again at the next batch that plays it: the
//! same figures, without playing or pricing the stage again.

use super::basis::{PassModel, PROBES_HIGH, PROBES_LOW};
use super::memo::{KeyHasher, Memo};
use super::{
    BuildHasherDefault, Busy, Category, CostFamily, FastScenario, HashMap, PassAt, RefCell, Result,
    Scenario, Setting, State, NCAT,
};
use crate::sim::pipeline as pl;

/// The stages of a pipeline scenario (the first is `FastScenario::target`, slot 0; stage i
/// has memo slot i).
#[derive(Debug, Clone)]
pub(super) struct PipelineFit {
    pub(super) pp: u32,
    /// Stages 1 .. pp.
    pub(super) rest: Vec<PassModel>,
    /// The sampled tokens' return to stage 0 (µs).
    pub(super) ret_us: f64,
    /// Per stage, the first stage whose model plays the same (itself if none before it): a
    /// pipeline's middle stages hold as many layers of the same kind each, and a row plays
    /// each distinct stage once.
    pub(super) twin: Vec<usize>,
}

impl PipelineFit {
    /// Fits every stage of `s` (pp above 1): (stage 0's model, the rest).
    pub(super) fn fit(s: &Scenario) -> Result<(PassModel, Self)> {
        use rayon::prelude::*;
        let stages = crate::workload::stage::stages(s);
        // A stage runs one query token per sequence: the probes' tokens as sequences.
        let plain = |p: &[(u32, u32, u64)]| -> Vec<(u32, u32, u64)> {
            p.iter().map(|&(b, q, c)| (b * q, 1, c)).collect()
        };
        let (low, high) = (plain(&PROBES_LOW), plain(&PROBES_HIGH));
        let mut models = stages
            .par_iter()
            .enumerate()
            .map(|(i, st)| {
                let build = |ps: &Scenario, _q: u32| crate::workload::stage::build_stage(ps, st);
                PassModel::fit_probes(s, &build, i, false, [&low, &high])
            })
            .collect::<Result<Vec<_>>>()?;
        let twin = (0..models.len())
            .map(|i| {
                (0..i)
                    .find(|&j| models[j].plays_as(&models[i]))
                    .unwrap_or(i)
            })
            .collect();
        for i in 1..models.len() {
            for (h, high) in [false, true].into_iter().enumerate() {
                models[i].context_twin[h] =
                    (0..i).find(|&j| models[i].prices_context_as(&models[j], high));
            }
        }
        let first = models.remove(0);
        Ok((
            first,
            PipelineFit {
                pp: s.layout.pp_size(),
                rest: models,
                ret_us: pl::token_return_us(s),
                twin,
            },
        ))
    }

    pub(super) fn stages(&self) -> usize {
        self.rest.len() + 1
    }
}

/// A send's price (µs) and latency part, per (fast scenario, from, micro-batch, collectives
/// id, graphs): `sim::pipeline::send` builds an op and a workload per call, a sweep asks for
/// the same few many times.
type SendKey = (u64, u32, u32, u64, bool);
type SendMap = HashMap<SendKey, (f64, f64), BuildHasherDefault<KeyHasher>>;

thread_local! {
    static SENDS: RefCell<SendMap> = RefCell::new(SendMap::default());
}

/// Entries kept before the send memo starts over (a sweep needs a few per batch).
const SENDS_MAX: usize = 1 << 16;

impl FastScenario {
    /// Stage `i`'s model.
    fn stage_model<'a>(&'a self, fit: &'a PipelineFit, i: usize) -> &'a PassModel {
        if i == 0 {
            &self.target
        } else {
            &fit.rest[i - 1]
        }
    }

    /// The send from stage `from` for a micro-batch of `batch` sequences under `set`, priced as
    /// the timeline prices it (µs, latency part).
    fn send_us(&self, m: &mut Memo, from: u32, batch: u32, set: Setting<'_>) -> (f64, f64) {
        let key = (self.id, from, batch, set.coll.id, set.launch.graphs);
        if let Some(v) = SENDS.with(|c| c.borrow().get(&key).copied()) {
            return v;
        }
        let s = &mut m.scenario;
        set.put(s);
        let (_, us, lat) = pl::send(s, &self.profile, from, batch);
        SENDS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= SENDS_MAX {
                c.clear();
            }
            c.insert(key, (us, lat));
        });
        (us, lat)
    }

    /// Stage `st` played at micro-batch size `b` for `W` contexts: each lane's window and busy
    /// time handed to `put`, in lane order. A sweep's batches share their micro-batch sizes, so
    /// a play is kept (`Memo::stage_plays`) and handed out again at the next batch of the same
    /// size; a Monte Carlo draw's plays are not kept (their prices are drawn).
    #[allow(clippy::too_many_arguments)]
    fn stage_play<const W: usize>(
        &self,
        m: &mut Memo,
        fit: &PipelineFit,
        (st, b): (usize, u32),
        contexts: [u64; W],
        set: Setting<'_>,
        overhead: f64,
        mut put: impl FnMut(f64, &Busy),
    ) {
        let key = (
            st,
            b,
            set.coll.id,
            set.launch.graphs,
            overhead.to_bits(),
            W,
            contexts[0],
        );
        let keep = m.draw.is_none();
        if keep && m.stage_plays.hand_out(&key, &contexts, &mut put) {
            return;
        }
        let mut states = [State::new(set.launch); W];
        for state in &mut states {
            state.step_overhead += overhead;
        }
        let at = PassAt::plain(b);
        self.play_lanes(m, self.stage_model(fit, st), &mut states, at, contexts, set);
        for state in &states {
            put(state.window_us(), &state.busy);
        }
        if keep {
            m.stage_plays.keep(key, contexts, &states);
        }
    }

    /// One pipeline step at `W` contexts of one batch: every (stage, micro-batch size) played
    /// on its own state (`overhead` µs added to each one's end-of-step idle), the sends priced,
    /// and `sim::pipeline::schedule` composing them. Per context, the time per output token and
    /// the busy time per category of one rank over it (each stage runs every micro-batch once
    /// and holds the sends in and out of it; the mean over stages, as the timeline's per-rank
    /// mean). Each distinct stage's plays run as lanes (`play_lanes`), the sends are priced
    /// once, the schedule is composed per context: each lane the same figures, bit for bit, as
    /// played alone.
    pub(super) fn pipeline_step_lanes<const W: usize>(
        &self,
        m: &mut Memo,
        fit: &PipelineFit,
        batch: u32,
        contexts: [u64; W],
        set: Setting<'_>,
        overhead: f64,
    ) -> [(f64, Busy); W] {
        let micro = pl::micro_batches(batch, fit.pp);
        let (sizes, size) = pl::micro_sizes(&micro);
        let n = fit.stages();
        let k_n = sizes.len();
        let plays = self.stage_plays(m, fit, &sizes, contexts, set, overhead);
        let send = self.sends(m, n, &sizes, set);
        let lane_span: Vec<[f64; W]> = (0..n * k_n)
            .map(|x| {
                let (st, k) = (x / k_n, x % k_n);
                std::array::from_fn(|l| plays.span[(plays.slot[st] * k_n + k) * W + l])
            })
            .collect();
        let steps = pl::schedule_step_lanes(&size, k_n, &lane_span, &send, fit.ret_us);
        let busy = plays.busy_per_rank::<W>(&size, k_n, &send);
        std::array::from_fn(|l| (steps[l], busy(l)))
    }

    /// Every distinct stage (`PipelineFit::twin`) played at each micro-batch size in `sizes`
    /// for `W` contexts (`stage_play`).
    fn stage_plays<const W: usize>(
        &self,
        m: &mut Memo,
        fit: &PipelineFit,
        sizes: &[u32],
        contexts: [u64; W],
        set: Setting<'_>,
        overhead: f64,
    ) -> StagePlaysOf {
        let n = fit.stages();
        let k_n = sizes.len();
        let distinct = fit
            .twin
            .iter()
            .enumerate()
            .filter(|&(i, &t)| t == i)
            .count();
        let mut plays = StagePlaysOf {
            slot: vec![0usize; n],
            span: Vec::with_capacity(distinct * k_n * W),
            busy: Vec::with_capacity(distinct * k_n * W),
            distinct,
        };
        for st in 0..n {
            let twin = fit.twin[st];
            if twin < st {
                plays.slot[st] = plays.slot[twin];
                continue;
            }
            plays.slot[st] = plays.span.len() / (k_n * W);
            for &b in sizes {
                self.stage_play(m, fit, (st, b), contexts, set, overhead, |w, busy| {
                    plays.span.push(w);
                    plays.busy.push(*busy);
                });
            }
        }
        plays
    }

    /// Each send from stage `from` to the next at each micro-batch size (`from * sizes + k`),
    /// µs, under a Monte Carlo draw where one is set.
    fn sends(&self, m: &mut Memo, n: usize, sizes: &[u32], set: Setting<'_>) -> Vec<f64> {
        let k_n = sizes.len();
        let mut send = vec![0.0; (n - 1) * k_n];
        let draw = m.draw;
        for from in 0..n - 1 {
            for (k, &b) in sizes.iter().enumerate() {
                let (mut us, lat) = self.send_us(m, from as u32, b, set);
                if let Some(d) = draw {
                    let l = if us > 0.0 {
                        (lat / us).clamp(0.0, 1.0)
                    } else {
                        1.0
                    };
                    us *= l * d.collective_latency
                        + (1.0 - l) * d.family[CostFamily::SendRecv as usize];
                }
                send[from * k_n + k] = us;
            }
        }
        send
    }
}

/// The distinct stages' plays of one pipeline step: per stage, the slot of its distinct
/// stage; lane l's window and busy time of (distinct stage d, size k) at
/// `(d * sizes + k) * W + l`.
struct StagePlaysOf {
    slot: Vec<usize>,
    span: Vec<f64>,
    busy: Vec<Busy>,
    distinct: usize,
}

impl StagePlaysOf {
    /// Lane l's busy time per category of one rank over the step: every stage runs each
    /// micro-batch once and holds the sends in and out of it (per size, its count of
    /// micro-batches; per distinct stage, its count of stages; the sends' share the same for
    /// every lane), the mean over stages.
    fn busy_per_rank<const W: usize>(
        &self,
        size: &[usize],
        k_n: usize,
        send: &[f64],
    ) -> impl Fn(usize) -> Busy + '_ {
        let n = self.slot.len();
        let mut count = vec![0.0; k_n];
        for &k in size {
            count[k] += 1.0;
        }
        let mut stages_of = vec![0.0; self.distinct];
        for &sl in &self.slot {
            stages_of[sl] += 1.0;
        }
        let mut sends = 0.0;
        for st in 0..n - 1 {
            for (k, c) in count.iter().enumerate() {
                sends += 2.0 * c * send[st * k_n + k];
            }
        }
        let comm = Category::Communication.index();
        move |l| {
            let mut busy = [0.0; NCAT];
            for (sl, &m) in stages_of.iter().enumerate() {
                for (k, &c) in count.iter().enumerate() {
                    let sb = &self.busy[(sl * k_n + k) * W + l];
                    for (b, x) in busy.iter_mut().zip(sb) {
                        *b += m * c * x;
                    }
                }
            }
            busy[comm] += sends;
            for b in &mut busy {
                *b /= n as f64;
            }
            busy
        }
    }
}

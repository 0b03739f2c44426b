//! Two-batch overlap (`--tbo on`) on the fast path.
//!
//! The timeline builds the step as two micro-batches (`workload::overlap`): mb0 of ⌈B/2⌉ and
//! mb1 of ⌊B/2⌋ sequences, each the plain step of its own batch (split over the DP ranks as a
//! batch of its own, mb1 routed by its own seed), cut at its all-to-alls and interleaved; each
//! all-to-all runs asynchronously on the rank's communication stream and a wait holds the
//! compute stream until it has ended, before that micro-batch's next segment (`sim::engine`).
//! `cost::price` prices each micro-batch as the pass of its own batch.
//!
//! So the fast path prices each micro-batch with the plain step's fitted model
//! (`FastScenario::target`, fitted on the scenario with overlap off) at its own batch, through
//! the same memoised pricing as a plain step (`price_lanes`): an odd batch's micro-batches at
//! ⌈B/2⌉ and ⌊B/2⌋ exactly. Then one rank's max-plus recursion plays the two op lists
//! interleaved as `overlap::interleave` orders them, with the engine's communication stream:
//! every collective starts at the later of its stream's readiness (and the launch clock, as
//! `replay::step`) and the communication stream's free time; an all-to-all leaves the compute
//! stream where it was and records its end for the micro-batch's next wait; a wait moves the
//! compute stream to that end. Kernels, fork and join are `replay::step`'s; a run of kernels on
//! one stream is played in one loop, and under CUDA graphs (where the launch clock binds no
//! kernel) as its sums, taken once per step since every layer plays the same runs.
//!
//! The ranks do not meet at every collective any more: the compute stream runs past an
//! all-to-all whose end it does not wait for. So the recursion plays the mean rank (the expert
//! kernels at their mean price) and carries what sets the others apart until they meet again
//! (a blocking collective, or a wait the transfer's end holds every rank at):
//! - expert parallelism's slowest rank (`ep`): each window's expected excess of the slowest
//!   rank over the mean one, the windows' excesses summed as independent spreads (root of the
//!   sum of squares: the two micro-batches route other tokens, each layer its own draws); a
//!   collective starts when that slowest rank arrives, combined with the jitter's straggler
//!   wait as in `replay::step`;
//! - data-parallel attention at a micro-batch the DP ranks do not share evenly: the DP ranks
//!   with fewer sequences run their attention shorter and are ahead; the step is the mean over
//!   ranks, so the step's end is the largest DP ranks' less the mean gap.
//!
//! A collective queued behind a transfer in flight starts when that transfer has ended on
//! every rank, so it waits for no straggler.
//!
//! Left out (tests/fast_tbo.rs measures it: eight layers deep, mean error 0.2%, worst about 1%,
//! the tail at small batches with data-parallel attention; at full depth mean 0.6%, worst 1.2%,
//! both low): a wait that holds some ranks and not others (the mean rank is moved to the
//! transfer's end, the slowest kept where it was and the ranks in between left out), and a rank
//! speed skew that persists across windows (taken as independent).
//!
//! Where both micro-batches are in runs of identical layers, the state at the start of a round
//! (relative to the compute stream: the communication stream, the transfers' ends, the expert
//! loads' lead, the jitter's path, the DP ranks' gaps) is compared with the one a layer before;
//! once the two agree to a nanosecond-thousandth (the interleaving settles geometrically, in a
//! few layers, because each wait that binds pulls the streams together), the layers left are
//! added as that layer's increment (`Anchor`), as `replay::Run` skips a plain pass's.
//!
//! A sweep's next contexts of one batch (`step_us_busy_lanes`) are played side by side, each
//! op stepped on every lane before the next, so that the lanes share the control flow and their
//! dependency chains overlap. A lane does exactly what it would alone: where its rounds repeat
//! before the others', it is moved on by its own increment and parked until the others reach
//! that point (`Parked`).
//!
//! A row of the sweep is such a play at a knot context, or the knots' plays interpolated
//! (`tbo_knots`).
//!
//! This module fits and prices the micro-batches; its children play them: `interleave` (the
//! two passes on the lanes, the communication stream, the waits) and `anchor` (where the
//! rounds repeat, the layers skipped and the lanes parked).

use super::basis::{kernel_runs, Kind, Regime};
use super::memo::Memo;
use super::replay::Spread;
use super::{
    Busy, CalibrationProfile, CostFamily, Error, FastScenario, PassAt, RefCell, Result, Scenario,
    Setting, State,
};

mod anchor;
mod interleave;

use interleave::interleave;

/// What a two-batch-overlap scenario plays besides the micro-batch pass (`target`).
#[derive(Debug, Clone)]
pub(super) struct TboFit {
    /// Per regime (low, high) of the micro-batch pass: which ops are the all-to-alls the
    /// micro-batch is cut at.
    cut: [Box<[bool]>; 2],
    /// Per regime: the ops that follow each DP rank's own sequences (attention, the KV-cache
    /// write, sampling: `workload::parallel`'s per-sequence ops), which a DP rank with fewer
    /// sequences than the largest runs shorter.
    per_seq: [Box<[bool]>; 2],
    /// Per regime: for each op, the end of the run of kernels on its stream that it starts
    /// within its segment, all expert-loaded or none (`basis::kernel_runs`), which the
    /// recursion plays in one tight loop.
    run_end: [Box<[u32]>; 2],
    /// Per regime: the first op of each run (`run_end`), where the recursion enters it.
    run_start: [Box<[bool]>; 2],
    /// Per regime: for each op and one past the last, the first op from it on that is
    /// `per_seq` (the ops' count if none), so that a run finds its few per-sequence ops
    /// without testing every op.
    next_seq: [Box<[u32]>; 2],
}

/// The refusal of speculative decoding with two-batch overlap on the fast path.
fn spec_refused() -> Error {
    Error::ScenarioSetting {
        flag: "--tbo",
        value: "on".into(),
        problem: ": the sweep's fast path plays two-batch overlap for the plain step, not with speculative decoding (draft tokens); `decodesim simulate` and `decodesim whatif --vary --draws 0` play every rank's timeline".into(),
    }
}

/// Fits a two-batch-overlap scenario: the plain step of `s` with overlap off (the micro-batch
/// pass).
pub(super) fn fit(
    s: &Scenario,
    p: &CalibrationProfile,
    draft: Option<&crate::workload::spec_step::Drafter>,
) -> Result<FastScenario> {
    if draft.is_some() {
        return Err(spec_refused());
    }
    let mut micro = s.clone();
    micro.layout.tbo = false;
    let mut fast = FastScenario::new(&micro, p, None)?;
    if let super::Mode::Pipelined(_) = fast.mode {
        // Refused by the scenario's own checks (`--pp` with `--tbo on`); kept as a value.
        return Err(Error::Invariant(
            "fast path: two-batch overlap with pipeline stages",
        ));
    }
    let cut = |r: &Regime| -> Box<[bool]> {
        r.ops
            .iter()
            .map(|o| o.template.family == CostFamily::AllToAll)
            .collect()
    };
    let per_seq = |r: &Regime| -> Box<[bool]> {
        r.ops
            .iter()
            .map(|o| crate::workload::parallel::per_sequence(&o.template))
            .collect()
    };
    let next_seq = |per_seq: &[bool]| -> Box<[u32]> {
        // One past the ops, the count: a run's search ends there.
        let n = per_seq.len();
        let mut next = vec![n as u32; n + 1];
        for i in (0..n).rev() {
            next[i] = if per_seq[i] { i as u32 } else { next[i + 1] };
        }
        next.into()
    };
    // A run's first op: a kernel that no kernel of the same run precedes (runs end at their
    // segment's end, so one that starts a segment is first too).
    let run_start = |r: &Regime, ends: &[u32]| -> Box<[bool]> {
        (0..ends.len())
            .map(|i| {
                matches!(r.kinds[i], Kind::Kernel { .. }) && (i == 0 || ends[i - 1] != ends[i])
            })
            .collect()
    };
    let pm = &fast.target;
    let run_end: [Box<[u32]>; 2] =
        [&pm.low, &pm.high].map(|r| kernel_runs(&r.kinds, &r.segments, true).into());
    let per_seq = [per_seq(&pm.low), per_seq(&pm.high)];
    fast.mode = super::Mode::TwoBatchOverlap(TboFit {
        cut: [cut(&pm.low), cut(&pm.high)],
        run_start: [
            run_start(&pm.low, &run_end[0]),
            run_start(&pm.high, &run_end[1]),
        ],
        run_end,
        next_seq: [next_seq(&per_seq[0]), next_seq(&per_seq[1])],
        per_seq,
    });
    fast.scenario = s.clone();
    Ok(fast)
}

/// The micro-batches' sizes of a step of `batch` sequences: ⌈B/2⌉ and ⌊B/2⌋.
pub(super) fn micro_batches(batch: u32) -> [u32; 2] {
    [batch.div_ceil(2), batch / 2]
}

/// Just after the ranks met (`replay::Spread::MET`).
const MET: Spread = Spread {
    sum: 0.0,
    sq: 0.0,
    launch: false,
};

/// One micro-batch's priced pass for the lanes played together, copied out of the memo.
#[derive(Default)]
struct Priced {
    high: bool,
    /// The mean rank's durations, op-major: op `i` of lane `j` at `d[i * W + j]`.
    d: Vec<f64>,
    ex: Vec<f64>,
    /// Under CUDA graphs, at each run of kernels' first op `s`, the run summed (`RunRest`) for
    /// lane `j` at `rest[s * W + j]`: every layer plays the same runs, so a run is summed once
    /// per step.
    rest: Vec<RunRest>,
}

/// The ops of a run of kernels, summed: under CUDA graphs the launch clock stays at
/// the step's start, behind every stream, so it binds no kernel and a run moves its stream by
/// its gaps and durations, its spread by its durations and their squares (`replay::step`).
#[derive(Default, Clone, Copy)]
struct RunRest {
    /// Gaps and durations.
    span: f64,
    sum: f64,
    sq: f64,
    /// The expert loads' excesses (`Chain`).
    ex: f64,
    /// The durations of its per-sequence ops (`Lag`).
    seq: f64,
}

impl Priced {
    /// Sums each run's ops on each of `W` lanes (`RunRest`, kept at the run's first op) from
    /// the priced durations, `gap` µs before each kernel; `run_start`: the runs' first ops,
    /// `run_end` their ends. Each lane's sums take its ops in order, as one lane alone would.
    fn sum_runs<const W: usize>(
        &mut self,
        run_start: &[bool],
        run_end: &[u32],
        per_seq: &[bool],
        gap: f64,
    ) {
        let n = run_start.len();
        if self.rest.len() != n * W {
            self.rest.resize(n * W, RunRest::default());
        }
        let loaded = !self.ex.is_empty();
        for s in (0..n).filter(|&s| run_start[s]) {
            let mut r = [RunRest::default(); W];
            for (i, &seq) in per_seq.iter().enumerate().take(run_end[s] as usize).skip(s) {
                let di: &[f64; W] = self.d[i * W..(i + 1) * W]
                    .try_into()
                    .expect("W lanes per op");
                let x = if loaded { self.ex[i] } else { 0.0 };
                for (r, &d) in r.iter_mut().zip(di) {
                    r.span += gap + d;
                    r.sum += d;
                    r.sq += d * d;
                    if loaded {
                        r.ex += x;
                    }
                    if seq {
                        r.seq += d;
                    }
                }
            }
            self.rest[s * W..(s + 1) * W].copy_from_slice(&r);
        }
    }
}

thread_local! {
    static PRICED: RefCell<[Priced; 2]> = RefCell::new(Default::default());
}

impl FastScenario {
    /// One two-batch-overlap step played at each of `W` contexts of one batch under `set`
    /// (`overhead` µs added to the step's end idle), side by side: per context (window µs, busy
    /// per category of one rank), each the same, bit for bit, as played alone. A row is this
    /// play or its knots' interpolated (`tbo_knots`).
    pub(super) fn tbo_step_lanes<const W: usize>(
        &self,
        m: &mut Memo,
        fit: &TboFit,
        batch: u32,
        contexts: [u64; W],
        set: Setting<'_>,
        overhead: f64,
    ) -> [(f64, Busy); W] {
        let mut sts = [State::new(set.launch); W];
        for st in &mut sts {
            st.step_overhead += overhead;
        }
        let sizes = micro_batches(batch);
        PRICED.with(|cell| {
            let mut priced = cell.borrow_mut();
            let pm = &self.target;
            for k in 0..2 {
                let out = &mut priced[k];
                let at = PassAt::plain(sizes[k]);
                self.price_lanes(m, pm, &mut sts, at, contexts, set, |regime, d, ex, _, _| {
                    out.high = !std::ptr::eq(regime, &pm.low);
                    // The mean rank's duration: the slowest rank's excess joins its window's
                    // (`Chain`).
                    out.d.clear();
                    if ex.is_empty() {
                        out.d.extend_from_slice(d);
                    } else {
                        for (di, &x) in d.chunks_exact(W).zip(ex) {
                            out.d.extend(di.iter().map(|&d| d - x));
                        }
                    }
                    out.ex.clear();
                    out.ex.extend_from_slice(ex);
                });
            }
            // Under CUDA graphs (no launch cost: the launch clock binds nothing) a run is
            // played as its sums.
            let summed = set.launch.launch == 0.0 && set.launch.gap >= 0.0;
            if summed {
                for p in priced.iter_mut() {
                    let h = p.high as usize;
                    let (starts, ends) = (&fit.run_start[h], &fit.run_end[h]);
                    p.sum_runs::<W>(starts, ends, &fit.per_seq[h], set.launch.gap);
                }
            }
            let sgs = [
                self.straggler_of(pm, sizes[0]),
                self.straggler_of(pm, sizes[1]),
            ];
            let regime = |k: usize| {
                let h = priced[k].high as usize;
                let r = if priced[k].high { &pm.high } else { &pm.low };
                Play {
                    regime: r,
                    cut: &fit.cut[h],
                    per_seq: &fit.per_seq[h],
                    run_end: &fit.run_end[h],
                    run_start: &fit.run_start[h],
                    next_seq: &fit.next_seq[h],
                }
            };
            let plays = [regime(0), regime(1)];
            let dp = pm.ep.as_ref().map_or(1, |e| e.dp);
            let lag = Lag::new(dp, sizes);
            let play = (&plays, &*priced, summed);
            if sgs[0].on || sgs[1].on {
                interleave::<true, W>(&mut sts, play, set.launch, sgs, lag);
            } else {
                interleave::<false, W>(&mut sts, play, set.launch, sgs, lag);
            }
        });
        sts.map(|st| (st.window_us(), st.busy))
    }
}

/// One micro-batch's regime and its tables (`TboFit`).
struct Play<'a> {
    regime: &'a Regime,
    cut: &'a [bool],
    per_seq: &'a [bool],
    run_end: &'a [u32],
    run_start: &'a [bool],
    next_seq: &'a [u32],
}

/// Data-parallel attention at a micro-batch the DP ranks do not share evenly: how far the DP
/// ranks with fewer sequences are behind the largest ones' compute stream (which the
/// recursion plays), since the DP ranks last met. The first `b % dp` DP ranks take one
/// sequence more (`Scenario::dp_batches`), so by the two micro-batches' splits the DP ranks
/// fall in at most three groups.
#[derive(Clone, Copy)]
struct Lag {
    /// Per group: its share of the ranks, and µs behind.
    weight: [f64; 3],
    behind: [f64; 3],
    /// Per micro-batch: the share of a per-sequence op's time each group saves (0 where the
    /// group holds the most sequences).
    saves: [[f64; 3]; 2],
    on: bool,
    dp: u32,
}

impl Lag {
    fn new(dp: u32, sizes: [u32; 2]) -> Self {
        let mut lag = Lag {
            weight: [0.0; 3],
            behind: [0.0; 3],
            saves: [[0.0; 3]; 2],
            on: false,
            dp,
        };
        let more = sizes.map(|b| b % dp);
        if dp <= 1 || more == [0, 0] {
            return lag;
        }
        lag.on = true;
        // Group bounds: DP ranks below each micro-batch's count of larger ranks.
        let cut = |b: u32| if b == 0 { dp } else { b };
        let (lo, hi) = {
            let (a, b) = (cut(more[0]), cut(more[1]));
            (a.min(b), a.max(b))
        };
        let bounds = [(0, lo), (lo, hi), (hi, dp)];
        for (g, &(from, to)) in bounds.iter().enumerate() {
            lag.weight[g] = (to - from) as f64 / dp as f64;
            for k in 0..2 {
                // A group holds the fewer sequences of micro-batch k when its ranks are at or
                // past that micro-batch's count of larger ranks.
                if more[k] > 0 && from >= more[k] && to > from {
                    let most = sizes[k].div_ceil(dp) as f64;
                    let own = (sizes[k] / dp) as f64;
                    lag.saves[k][g] = 1.0 - own / most;
                }
            }
        }
        lag
    }

    /// Every DP rank at the same point.
    #[inline]
    fn met(&mut self) {
        self.behind = [0.0; 3];
    }

    /// The mean over ranks of how far they are behind.
    fn mean(&self) -> f64 {
        (0..3).map(|g| self.weight[g] * self.behind[g]).sum()
    }
}

/// Where a micro-batch is in its pass: segment, repeat of it, op.
#[derive(Clone, Copy, PartialEq)]
struct Cursor {
    seg: usize,
    rep: u32,
    i: usize,
}

impl Cursor {
    /// The next op of `r` (each segment's ops `repeat` times), or None at the pass's end.
    #[inline]
    fn next(&mut self, r: &Regime) -> Option<usize> {
        loop {
            let seg = r.segments.get(self.seg)?;
            if self.i < seg.end {
                let i = self.i;
                self.i += 1;
                return Some(i);
            }
            self.rep += 1;
            if self.rep < seg.repeat {
                self.i = seg.start;
            } else {
                self.seg += 1;
                self.rep = 0;
                if let Some(n) = r.segments.get(self.seg) {
                    self.i = n.start;
                }
            }
        }
    }
}

/// Expert parallelism's slowest rank on the compute stream since its ranks last met: the sum
/// of squares of the expected slowest-rank excesses of the windows played since (`ep`), and
/// the excess of the window still open.
#[derive(Default, Clone, Copy)]
struct Chain {
    sq: f64,
    open: f64,
}

impl Chain {
    /// Closes the open window: its excess joins the others as an independent spread (the two
    /// micro-batches route other tokens, each layer draws its own routing), so the slowest
    /// rank's lead over the mean rank is the root of their squares summed.
    #[inline]
    fn close(&mut self) -> f64 {
        self.sq += self.open * self.open;
        self.open = 0.0;
        self.sq.sqrt()
    }
}

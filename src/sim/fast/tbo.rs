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

use super::basis::{kernel_runs, Kind, Regime};
use super::memo::Memo;
use super::replay::{
    arrive, carry_past, collective_wait, kernel_run, lead_of, relative, spreads, step, Spread,
    Straggler,
};
use super::{
    Busy, CalibrationProfile, CostFamily, Error, FastScenario, Launch, PassAt, RefCell, Result,
    Scenario, Setting, State,
};
use crate::sim::rules;

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

/// The communication stream and the micro-batches' pending all-to-alls of one rank.
#[derive(Clone, Copy)]
struct Comm {
    free: f64,
    /// When each micro-batch's last all-to-all ends.
    ends: [f64; 2],
    /// Whether that all-to-all met the whole expert-parallel group (`Kind::Collective`'s).
    wide: [bool; 2],
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

/// Plays the two micro-batches interleaved on `W` lanes (`sts`: the next contexts of one
/// batch, lane `j`'s op `i` at `d[i * W + j]`) as `overlap::interleave` orders them: per
/// round, each micro-batch in turn waits for its last all-to-all, plays up to its next
/// all-to-all and starts it. The streams follow the mean rank (the loaded ops at their mean
/// price); the slowest rank's lead is carried in a `Chain` until the compute stream meets the
/// other ranks again (a blocking collective, or a wait the transfer's end binds).
///
/// The lanes share the control flow (which op, which run, which micro-batch) and each op is
/// stepped on every lane before the next, so that their dependency chains run side by side.
/// Each lane does exactly what it would do alone: where some lanes' rounds repeat before the
/// others', those lanes are moved on by their own increment and put aside (`Parked`) until
/// the others reach where that move left them.
fn interleave<const SG: bool, const W: usize>(
    sts: &mut [State; W],
    (plays, priced, summed): (&[Play<'_>; 2], &[Priced; 2], bool),
    l: &Launch,
    sgs: [&Straggler; 2],
    lag: Lag,
) {
    // With data-parallel attention a tensor-parallel collective meets one DP rank's ranks
    // only: the DP ranks' sequences keep them apart until a wide one.
    let one_group = lag.dp <= 1;
    let lag_on = lag.on;
    let mut lags = [lag; W];
    let mut comm = [Comm {
        free: f64::MIN,
        ends: [f64::MIN; 2],
        wide: [false; 2],
    }; W];
    let mut chain = [Chain::default(); W];
    let mut cursors = [0, 1].map(|k| Cursor {
        seg: 0,
        rep: 0,
        i: plays[k].regime.segments.first().map_or(0, |s| s.start),
    });
    let mut pending = [false; 2];
    let mut done = [false; 2];
    let mut anchors: [Option<Anchor>; W] = std::array::from_fn(|_| None);
    let mut parked: Option<Parked<W>> = None;
    while !(done[0] && done[1]) {
        if !done[0] && !done[1] {
            let lanes = (&mut *sts, &mut comm, &mut chain, &mut lags);
            round_start(
                lanes,
                &mut anchors,
                &mut parked,
                &mut cursors,
                (plays, pending),
                l,
            );
        }
        for k in 0..2 {
            if done[k] {
                continue;
            }
            if pending[k] {
                pending[k] = false;
                for j in 0..W {
                    let jitter = if SG {
                        collective_wait(&sts[j], sgs[k], false, comm[j].wide[k])
                    } else {
                        0.0
                    };
                    let end = comm[j].ends[k];
                    wait(&mut sts[j], &mut chain[j], &mut lags[j], end, jitter);
                }
            }
            let Play {
                regime,
                cut,
                per_seq,
                run_end,
                run_start,
                next_seq,
            } = plays[k];
            let (d, ex) = (&priced[k].d, &priced[k].ex);
            let loaded = !ex.is_empty();
            let sg = sgs[k];
            loop {
                let Some(i) = cursors[k].next(regime) else {
                    done[k] = true;
                    break;
                };
                // A run of kernels on one stream, after the step's first kernel (the same op
                // on every lane: it is the pass's first start): its sums under CUDA graphs (a
                // lone kernel too) where it is entered at its start, else one tight loop, the
                // same operations in the same order as op by op below.
                if let Kind::Kernel { aux, loaded } = regime.kinds[i] {
                    let end = run_end[i] as usize;
                    let whole = summed && run_start[i];
                    if (whole || end > i + 1) && !sts[0].first_start.is_nan() {
                        let run = if whole {
                            let seq = next_seq[i] < run_end[i];
                            Run::Summed(&priced[k].rest[i * W..(i + 1) * W], seq)
                        } else {
                            Run::Ops {
                                d: &d[i * W..end * W],
                                ex: ex.get(i..end).unwrap_or_default(),
                                seq: (&next_seq[i..=end], i),
                            }
                        };
                        let lanes = (&mut *sts, &mut chain, &mut lags);
                        play_run::<SG, W>(lanes, (aux, loaded), k, run, l);
                        cursors[k].i = end;
                        continue;
                    }
                }
                // The mean rank's duration; the slowest rank's excess joins the window's.
                let di: &[f64; W] = d[i * W..(i + 1) * W].try_into().expect("W lanes");
                if loaded {
                    for c in &mut chain {
                        c.open += ex[i];
                    }
                }
                if lag_on && per_seq[i] {
                    for (lag, &dur) in lags.iter_mut().zip(di) {
                        for g in 0..3 {
                            lag.behind[g] += dur * lag.saves[k][g];
                        }
                    }
                }
                match regime.kinds[i] {
                    Kind::Collective { wide } => {
                        let a2a = cut[i];
                        for j in 0..W {
                            let lead = chain[j].close();
                            let at = (wide, di[j], lead);
                            let (st, c) = (&mut sts[j], &mut comm[j]);
                            if collective::<SG>(st, c, at, l, sg, a2a.then_some(k)) {
                                // A tensor-parallel group's ranks leave together at its slowest
                                // member's pace; the DP ranks meet only at a wide collective.
                                chain[j].sq = 0.0;
                                if wide || one_group {
                                    lags[j].met();
                                }
                            }
                        }
                        if a2a {
                            pending[k] = true;
                            break;
                        }
                    }
                    kind => {
                        for (st, &dur) in sts.iter_mut().zip(di) {
                            step::<false, SG>(st, kind, dur, l, sg);
                        }
                    }
                }
            }
            for c in &mut chain {
                c.close();
            }
        }
    }
    // The step ends when every stream has (the last transfer is waited for above); the step
    // is the mean over ranks, the DP ranks with fewer sequences ending earlier.
    for j in 0..W {
        sts[j].main = rules::join(sts[j].main, comm[j].free) - lags[j].mean();
    }
    debug_assert!(parked.is_none(), "a parked lane was never taken back");
}

/// Lanes whose rounds repeated before the others': each one's state moved on to the end of
/// its run of identical layers (`Anchor::skip`), and the cursors that move left them at.
/// Meanwhile the lanes are played on with the others as ballast, their results unused.
struct Parked<const W: usize> {
    at: [Cursor; 2],
    lanes: [Option<(State, Comm, Chain, Lag)>; W],
}

/// The start of a round on every lane: where a lane's round repeats its anchor's a layer on,
/// the layers left are added as that layer's increment. When every lane still played
/// repeats, the cursors move on; a lane that repeats before the others is parked where its
/// move left it, and taken back when the cursors get there.
fn round_start<const W: usize>(
    (sts, comm, chain, lags): (
        &mut [State; W],
        &mut [Comm; W],
        &mut [Chain; W],
        &mut [Lag; W],
    ),
    anchors: &mut [Option<Anchor>; W],
    parked: &mut Option<Parked<W>>,
    cursors: &mut [Cursor; 2],
    (plays, pending): (&[Play<'_>; 2], [bool; 2]),
    l: &Launch,
) {
    let in_runs = cursors
        .iter()
        .zip(plays)
        .all(|(c, p)| p.regime.segments[c.seg].repeat > 1);
    let left = || {
        cursors
            .iter()
            .zip(plays)
            .map(|(c, p)| p.regime.segments[c.seg].repeat - 1 - c.rep)
            .min()
            .unwrap_or(0)
    };
    let pos = [0, 1].map(|k| (cursors[k].seg, cursors[k].i));
    let mut skipped = [false; W];
    let mut live = 0;
    for j in 0..W {
        if parked.as_ref().is_some_and(|p| p.lanes[j].is_some()) {
            continue;
        }
        live += 1;
        let at = anchors[j].as_ref().map(|a| a.pos);
        // Within the anchor's runs (it is met again a layer on), or outside runs of identical
        // layers: nothing to compare or keep.
        let fresh = match at {
            Some(a) if a == pos => false,
            Some(a) if a[0].0 == pos[0].0 && a[1].0 == pos[1].0 => continue,
            _ if in_runs => true,
            _ => continue,
        };
        let now = Anchor::at(&sts[j], &comm[j], &chain[j], &lags[j], cursors, pending, l);
        match anchors[j].as_mut() {
            Some(a) if !fresh => {
                if a.repeats(&now, l) {
                    let n = left();
                    a.skip(&now, n, &mut sts[j], &mut comm[j]);
                    anchors[j] = None;
                    skipped[j] = n > 0;
                } else {
                    *a = now;
                }
            }
            // A new anchor where both micro-batches are in runs of identical layers.
            _ => anchors[j] = Some(now),
        }
    }
    let moved = skipped.iter().filter(|&&s| s).count();
    if moved > 0 {
        let n = left();
        let mut at = *cursors;
        for c in &mut at {
            c.rep += n;
        }
        if moved == live {
            *cursors = at;
        } else {
            let p = parked.get_or_insert_with(|| Parked {
                at,
                lanes: [None; W],
            });
            debug_assert!(p.at == at, "lanes parked at two places");
            for j in (0..W).filter(|&j| skipped[j]) {
                p.lanes[j] = Some((sts[j], comm[j], chain[j], lags[j]));
            }
        }
    }
    // Lanes parked where the cursors now are come back, as a lane alone goes on from its move.
    if let Some(p) = parked.take_if(|p| p.at == *cursors) {
        for (j, lane) in p.lanes.into_iter().enumerate() {
            if let Some((st, c, ch, lag)) = lane {
                (sts[j], comm[j], chain[j], lags[j]) = (st, c, ch, lag);
                anchors[j] = None;
            }
        }
    }
}

/// A run of kernels as `interleave` plays it on its lanes: its sums (one per lane), or its
/// ops one by one (`d` op-major; `seq`: the run's slice of `next_seq` and the run's first op,
/// which `next_seq` counts from).
enum Run<'a> {
    /// The sums, and whether the run holds a per-sequence op (else its `seq` is 0 and the
    /// DP ranks' lag stays as it is).
    Summed(&'a [RunRest], bool),
    Ops {
        d: &'a [f64],
        ex: &'a [f64],
        seq: (&'a [u32], usize),
    },
}

/// Plays a run of kernels on stream `aux` (`loaded`: every kernel of it expert-loaded) of
/// micro-batch `k` on every lane: the stream, the jitter's spread (plain kernels), the expert
/// loads' open window (`Chain`) and the DP ranks' lag (`Lag`, per-sequence ops).
#[inline(always)]
fn play_run<const SG: bool, const W: usize>(
    (sts, chain, lags): (&mut [State; W], &mut [Chain; W], &mut [Lag; W]),
    (aux, loaded): (bool, bool),
    k: usize,
    run: Run<'_>,
    l: &Launch,
) {
    match run {
        Run::Summed(rs, seq) => {
            for (((st, chain), lag), r) in sts.iter_mut().zip(chain).zip(lags).zip(rs) {
                if seq && lag.on {
                    for g in 0..3 {
                        lag.behind[g] += r.seq * lag.saves[k][g];
                    }
                }
                let (free, sp) = if aux {
                    (&mut st.aux, &mut st.aux_sp)
                } else {
                    (&mut st.main, &mut st.main_sp)
                };
                *free += r.span;
                if loaded {
                    chain.open += r.ex;
                } else if SG {
                    sp.sum += r.sum;
                    sp.sq += r.sq;
                }
            }
        }
        Run::Ops {
            d,
            ex,
            seq: (next_seq, first),
        } => {
            let ops = d.len() / W;
            if lags[0].on {
                // `next_seq` holds absolute op indices; the run is ops first..first + ops.
                let mut i = next_seq[0] as usize;
                while i < first + ops {
                    let di = &d[(i - first) * W..(i - first + 1) * W];
                    for (lag, &dur) in lags.iter_mut().zip(di) {
                        for g in 0..3 {
                            lag.behind[g] += dur * lag.saves[k][g];
                        }
                    }
                    i = next_seq[i + 1 - first] as usize;
                }
            }
            if loaded {
                for c in chain.iter_mut() {
                    for &x in ex {
                        c.open += x;
                    }
                }
                loaded_run(sts, aux, d, l);
            } else {
                kernel_run::<SG, W>(sts, aux, d, l);
            }
        }
    }
}

/// A run of expert-loaded kernels on one stream (`aux`: the auxiliary) of durations `d`
/// (op-major, `W` lanes), after the step's first kernel: `replay::step` kernel by kernel (their
/// jitter is in the loads' spread, so the straggler spread stays as it is), with the stream's
/// free time and the CPU's clock held in registers; the same operations in the same order, so
/// the same bits.
#[inline(always)]
fn loaded_run<const W: usize>(sts: &mut [State; W], aux: bool, d: &[f64], l: &Launch) {
    let mut free: [f64; W] = std::array::from_fn(|j| if aux { sts[j].aux } else { sts[j].main });
    let mut cpu: [f64; W] = std::array::from_fn(|j| sts[j].cpu);
    let mut binds = [0u64; W];
    for di in d.as_chunks::<W>().0 {
        for j in 0..W {
            cpu[j] += l.launch;
            let ready = rules::ready(free[j], l.gap);
            binds[j] += (cpu[j] > ready) as u64;
            free[j] = rules::start(ready, cpu[j]) + di[j];
        }
    }
    for (j, st) in sts.iter_mut().enumerate() {
        st.cpu = cpu[j];
        st.cpu_binds += binds[j];
        *(if aux { &mut st.aux } else { &mut st.main }) = free[j];
    }
}

/// A nanosecond, in the recursion's µs.
const NS: f64 = 1e-3;

/// The interleaving's state at the start of a round, relative to the compute stream: where a
/// round starts from the same ops one layer later in the same state, every later layer of the
/// two runs repeats it (the recursion is shift-invariant), and the layers left are added as
/// that layer's increment, as `replay::Run` skips a plain pass's.
struct Anchor {
    /// Each micro-batch's segment and op.
    pos: [(usize, usize); 2],
    rel: [f64; 3],
    /// The communication stream's free time and each micro-batch's transfer end, from the
    /// compute stream (None: not yet used).
    comm: [Option<f64>; 3],
    chain: f64,
    behind: [f64; 3],
    pending: [bool; 2],
    spreads: [Spread; 3],
    carried_wait: f64,
    binds: u64,
    main: f64,
    cpu: f64,
    waited: f64,
}

impl Anchor {
    fn at(
        st: &State,
        comm: &Comm,
        chain: &Chain,
        lag: &Lag,
        cursors: &[Cursor; 2],
        pending: [bool; 2],
        l: &Launch,
    ) -> Self {
        let from = |t: f64| (t != f64::MIN).then_some(t - st.main);
        Anchor {
            pos: [0, 1].map(|k| (cursors[k].seg, cursors[k].i)),
            rel: relative(st, l, false),
            comm: [from(comm.free), from(comm.ends[0]), from(comm.ends[1])],
            chain: chain.sq,
            behind: lag.behind,
            pending,
            spreads: spreads(st),
            carried_wait: st.carried_wait,
            binds: st.cpu_binds,
            main: st.main,
            cpu: st.cpu,
            waited: st.waited,
        }
    }

    /// Whether `now`, one layer on, is this state again.
    fn repeats(&self, now: &Anchor, l: &Launch) -> bool {
        // The interleaving settles geometrically (a layer's wait pulls the streams together),
        // to a nanosecond within a few layers: what is left then moves the step by far less
        // than the output's last digit over the layers skipped.
        let near = |a: f64, b: f64| (a - b).abs() < 1e-3 * NS;
        let near_opt = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => near(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        let cpu_ahead =
            l.launch > 0.0 && now.binds == self.binds && now.cpu - self.cpu <= now.main - self.main;
        near(self.rel[0], now.rel[0])
            && (cpu_ahead || near(self.rel[1], now.rel[1]))
            && self.rel[2] == now.rel[2]
            && self
                .comm
                .iter()
                .zip(&now.comm)
                .all(|(&a, &b)| near_opt(a, b))
            && near(self.chain.sqrt(), now.chain.sqrt())
            && self
                .behind
                .iter()
                .zip(&now.behind)
                .all(|(&a, &b)| near(a, b))
            && self.pending == now.pending
            && self.spreads == now.spreads
            && self.carried_wait == now.carried_wait
            && self.binds == now.binds
    }

    /// Moves the state `left` more layers on (the increment from `self` to `now`); the
    /// cursors are moved by the caller.
    fn skip(&self, now: &Anchor, left: u32, st: &mut State, comm: &mut Comm) {
        if left == 0 {
            return;
        }
        let n = left as f64;
        let dm = (now.main - self.main) * n;
        st.main += dm;
        st.aux += dm;
        st.cpu += (now.cpu - self.cpu) * n;
        st.waited += (now.waited - self.waited) * n;
        for t in comm.ends.iter_mut().chain(std::iter::once(&mut comm.free)) {
            if *t != f64::MIN {
                *t += dm;
            }
        }
    }
}

/// A wait for an all-to-all that ends at `end` on every rank. The ranks' compute streams lie
/// about the mean one (`st.main`), the slowest ahead of it by the expert loads' lead (`chain`)
/// and the jitter's (`jitter`: the expected straggler wait of the path since the ranks last
/// met), the two combined as spreads of the same ranks (root of their squares summed). Past
/// the slowest, the wait holds every rank: they all leave at the end, met. Before it, the
/// ranks before the end move to it, the mean rank with them, and the slowest, unless the end
/// is past it too, stays where it was: its lead over the end is carried as the chain's, and
/// the jitter's path starts afresh there (the ranks held at the end left it together; the
/// ranks in between are left out). Before the mean rank, only the DP ranks further ahead
/// than the end wait for it.
#[inline]
fn wait(st: &mut State, chain: &mut Chain, lag: &mut Lag, end: f64, jitter: f64) {
    let ep = chain.close();
    let lead = if jitter > 0.0 {
        lead_of(ep, jitter)
    } else {
        ep
    };
    let main = st.main;
    // The mean rank goes on when the transfer has ended (the engine's wait, `rules`).
    st.main = rules::await_transfer(main, end);
    if end >= main + lead {
        // Every rank leaves the all-to-all together.
        met(st);
        chain.sq = 0.0;
        lag.met();
    } else if end > main {
        let left = main + lead - end;
        if jitter > 0.0 {
            met(st);
        }
        chain.sq = left * left;
        lag.met();
    } else if lag.on {
        // DP ranks further ahead than the transfer's end wait for it.
        for b in &mut lag.behind {
            *b = b.min(main - end);
        }
    }
}

/// The jitter's path starts afresh: the ranks left a point together (what a blocking
/// collective does to `replay::step`'s state).
#[inline]
fn met(st: &mut State) {
    st.main_sp = MET;
    st.carry = MET;
    st.carried_wait = 0.0;
}

/// A collective on the communication stream (`asynchronous`: the all-to-all of that
/// micro-batch, which leaves the compute stream where it is) of `wide`, `dur` µs, reached by
/// the slowest rank `lead` µs after the mean one (expert loads): `replay::step`'s collective,
/// queued behind the transfer in flight, as the engine queues it. Returns whether the compute
/// stream met the other ranks (a blocking collective).
#[inline(always)]
fn collective<const SG: bool>(
    st: &mut State,
    comm: &mut Comm,
    (wide, dur, lead): (bool, f64, f64),
    l: &Launch,
    sg: &Straggler,
    asynchronous: Option<usize>,
) -> bool {
    let (bound, own) = arrive(st, l);
    // The jitter's straggler wait and the expert loads' lead are two spreads of the same
    // ranks: the slowest arrival is the root of their squares summed after the mean one.
    let mut wait = 0.0;
    if SG {
        wait = collective_wait(st, sg, bound, wide);
        if sg.layered {
            carry_past(st, wide, wait);
        }
    }
    let slowest = rules::straggled(
        own,
        if lead > 0.0 {
            lead_of(lead, wait)
        } else {
            wait
        },
    );
    // Behind a transfer still in flight: the ranks start it together when that one has ended.
    let end = rules::collective_end(rules::queue(slowest, comm.free), dur);
    let pending = asynchronous.map(|k| {
        comm.wide[k] = wide;
        &mut comm.ends[k]
    });
    rules::release(end, &mut st.main, &mut comm.free, pending);
    if asynchronous.is_none() {
        st.main_sp = MET;
    }
    asynchronous.is_none()
}

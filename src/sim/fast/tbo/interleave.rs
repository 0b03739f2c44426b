//! The two micro-batches interleaved on one rank's recursion, lanes side by side: each
//! micro-batch plays up to its next all-to-all and starts it on the communication stream
//! (`collective`, the rules of `sim::rules`), the other goes on; a wait holds the compute
//! stream until its micro-batch's transfer has ended (`wait`). Runs of kernels on one stream
//! are played in one loop or as their sums (`play_run`).

use super::anchor::{round_start, Anchor, Parked};
use super::{Chain, Cursor, Lag, Play, Priced, RunRest, MET};
use crate::sim::fast::basis::Kind;
use crate::sim::fast::replay::{
    arrive, carry_past, collective_wait, kernel_run, lead_of, step, Straggler,
};
use crate::sim::fast::{Launch, State};
use crate::sim::rules;

/// The communication stream and the micro-batches' pending all-to-alls of one rank.
#[derive(Clone, Copy)]
pub(super) struct Comm {
    pub(super) free: f64,
    /// When each micro-batch's last all-to-all ends.
    pub(super) ends: [f64; 2],
    /// Whether that all-to-all met the whole expert-parallel group (`Kind::Collective`'s).
    pub(super) wide: [bool; 2],
}

impl Comm {
    /// No transfer yet.
    const IDLE: Comm = Comm {
        free: f64::MIN,
        ends: [f64::MIN; 2],
        wide: [false; 2],
    };
}

/// One micro-batch as `interleave` plays it: its regime and tables, its priced pass, which it
/// is (`k`), its straggler wait, and what the whole play shares (runs summed under CUDA graphs,
/// the DP ranks' lag on, one TP group per EP group).
#[derive(Clone, Copy)]
struct MicroBatch<'a> {
    play: &'a Play<'a>,
    priced: &'a Priced,
    summed: bool,
    k: usize,
    sg: &'a Straggler,
    lag_on: bool,
    one_group: bool,
}

/// The lanes' state besides the recursion's: the communication streams, the expert loads'
/// chains and the DP ranks' lags.
pub(super) type Lanes<'a, const W: usize> = (
    &'a mut [State; W],
    &'a mut [Comm; W],
    &'a mut [Chain; W],
    &'a mut [Lag; W],
);

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
pub(super) fn interleave<const SG: bool, const W: usize>(
    sts: &mut [State; W],
    (plays, priced, summed): (&[Play<'_>; 2], &[Priced; 2], bool),
    l: &Launch,
    sgs: [&Straggler; 2],
    lag: Lag,
) {
    // With data-parallel attention a tensor-parallel collective meets one DP rank's ranks
    // only: the DP ranks' sequences keep them apart until a wide one.
    let one_group = lag.dp <= 1;
    let mut lags = [lag; W];
    let mut comm = [Comm::IDLE; W];
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
            let at = (plays, pending);
            round_start(lanes, &mut anchors, &mut parked, &mut cursors, at, l);
        }
        for k in 0..2 {
            if done[k] {
                continue;
            }
            if pending[k] {
                pending[k] = false;
                wait_lanes::<SG, W>((&mut *sts, &mut comm, &mut chain, &mut lags), k, sgs[k]);
            }
            let mb = MicroBatch {
                play: &plays[k],
                priced: &priced[k],
                summed,
                k,
                sg: sgs[k],
                lag_on: lag.on,
                one_group,
            };
            let lanes = (&mut *sts, &mut comm, &mut chain, &mut lags);
            done[k] = play_segment::<SG, W>(lanes, &mut cursors[k], &mut pending[k], mb, l);
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

/// Each lane's wait for micro-batch `k`'s last all-to-all (`wait`), with the jitter's
/// straggler wait of the path since the ranks last met.
#[inline(always)]
fn wait_lanes<const SG: bool, const W: usize>(
    (sts, comm, chain, lags): Lanes<'_, W>,
    k: usize,
    sg: &Straggler,
) {
    for j in 0..W {
        let jitter = if SG {
            collective_wait(&sts[j], sg, false, comm[j].wide[k])
        } else {
            0.0
        };
        let end = comm[j].ends[k];
        wait(&mut sts[j], &mut chain[j], &mut lags[j], end, jitter);
    }
}

/// Plays micro-batch `mb` on every lane from its cursor up to its next all-to-all, which it
/// starts (`pending`: its next segment waits for it), or to the end of its pass: returns
/// whether the pass is done.
#[inline(always)]
fn play_segment<const SG: bool, const W: usize>(
    (sts, comm, chain, lags): Lanes<'_, W>,
    cursor: &mut Cursor,
    pending: &mut bool,
    mb: MicroBatch<'_>,
    l: &Launch,
) -> bool {
    let regime = mb.play.regime;
    let (d, ex) = (&mb.priced.d, &mb.priced.ex);
    let loaded = !ex.is_empty();
    loop {
        let Some(i) = cursor.next(regime) else {
            return true;
        };
        // A run of kernels on one stream, after the step's first kernel (the same op on every
        // lane: it is the pass's first start): its sums under CUDA graphs (a lone kernel too)
        // where it is entered at its start, else one tight loop, the same operations in the
        // same order as op by op below.
        if let Some((run, stream, end)) = mb.run_at::<W>(i, !sts[0].first_start.is_nan()) {
            play_run::<SG, W>((&mut *sts, &mut *chain, &mut *lags), stream, mb.k, run, l);
            cursor.i = end;
            continue;
        }
        // The mean rank's duration; the slowest rank's excess joins the window's.
        let di: &[f64; W] = d[i * W..(i + 1) * W].try_into().expect("W lanes");
        if loaded {
            for c in chain.iter_mut() {
                c.open += ex[i];
            }
        }
        if mb.lag_on && mb.play.per_seq[i] {
            for (lag, &dur) in lags.iter_mut().zip(di) {
                for g in 0..3 {
                    lag.behind[g] += dur * lag.saves[mb.k][g];
                }
            }
        }
        match regime.kinds[i] {
            Kind::Collective { wide } => {
                let a2a = mb.play.cut[i];
                let lanes = (&mut *sts, &mut *comm, &mut *chain, &mut *lags);
                collective_lanes::<SG, W>(lanes, (wide, di), a2a.then_some(mb.k), &mb, l);
                if a2a {
                    *pending = true;
                    return false;
                }
            }
            kind => {
                for (st, &dur) in sts.iter_mut().zip(di) {
                    step::<false, SG>(st, kind, dur, l, mb.sg);
                }
            }
        }
    }
}

impl<'a> MicroBatch<'a> {
    /// The run of kernels op `i` enters, where it is played as one (`play_run`): after the
    /// step's first kernel (`started`), its sums where runs are summed and `i` starts one,
    /// else its ops where more than one are left. With the run: its stream and whether it is
    /// expert-loaded, and the op past it.
    #[inline(always)]
    fn run_at<const W: usize>(
        &self,
        i: usize,
        started: bool,
    ) -> Option<(Run<'a>, (bool, bool), usize)> {
        let Kind::Kernel { aux, loaded } = self.play.regime.kinds[i] else {
            return None;
        };
        let Play {
            run_end,
            run_start,
            next_seq,
            ..
        } = *self.play;
        let end = run_end[i] as usize;
        let whole = self.summed && run_start[i];
        if !((whole || end > i + 1) && started) {
            return None;
        }
        let run = if whole {
            let seq = next_seq[i] < run_end[i];
            Run::Summed(&self.priced.rest[i * W..(i + 1) * W], seq)
        } else {
            Run::Ops {
                d: &self.priced.d[i * W..end * W],
                ex: self.priced.ex.get(i..end).unwrap_or_default(),
                seq: (&next_seq[i..=end], i),
            }
        };
        Some((run, (aux, loaded), end))
    }
}

/// A collective of `wide` (op durations `di`) on every lane: each lane's slowest rank arrives
/// by its expert loads' lead (the chain closed), and where the collective blocks (not micro-
/// batch `asynchronous`'s all-to-all) the ranks leave it met: the chain starts afresh, the DP
/// ranks' lag too where it meets them all.
#[inline(always)]
fn collective_lanes<const SG: bool, const W: usize>(
    (sts, comm, chain, lags): Lanes<'_, W>,
    (wide, di): (bool, &[f64; W]),
    asynchronous: Option<usize>,
    mb: &MicroBatch<'_>,
    l: &Launch,
) {
    for j in 0..W {
        let lead = chain[j].close();
        let at = (wide, di[j], lead);
        let (st, c) = (&mut sts[j], &mut comm[j]);
        if collective::<SG>(st, c, at, l, mb.sg, asynchronous) {
            // A tensor-parallel group's ranks leave together at its slowest member's pace;
            // the DP ranks meet only at a wide collective.
            chain[j].sq = 0.0;
            if wide || mb.one_group {
                lags[j].met();
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

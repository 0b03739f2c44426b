//! One rank's max-plus recursion over the priced ops (stream free times, the CPU's launch
//! clock, fork/join of the auxiliary stream), and the expected straggler wait at collectives.

use super::basis::{Kind, Regime, Segment};
use super::{Busy, HashMap, Launch, NCAT};

/// One rank's engine state (every rank is the same with jitter off).
#[derive(Debug, Clone, Copy)]
pub struct State {
    /// Busy time per category (kernel durations on this rank, every stream), µs.
    pub busy: Busy,
    pub(super) main: f64,
    pub(super) aux: f64,
    pub(super) cpu: f64,
    pub(super) first_collective: bool,
    pub(super) first_start: f64,
    pub(super) step_overhead: f64,
    /// Kernels the CPU's launch clock held back (eager launches).
    pub(super) cpu_binds: u64,
    /// Spread across ranks of the compute and auxiliary streams (the straggler wait).
    pub(super) main_sp: Spread,
    pub(super) aux_sp: Spread,
    /// Straggler waits not added to the streams (CUDA graphs: see `step`), µs.
    pub(super) waited: f64,
    /// Data-parallel attention: the critical path's spread at the tensor-parallel collectives
    /// since the whole expert-parallel group last met, and the waits already added at them. A
    /// TP collective syncs its group only; the groups stay apart until the next wide one.
    pub(super) carry: Spread,
    pub(super) carried_wait: f64,
    /// Expert parallelism: how far the expected slowest rank's loaded ops run past the mean
    /// rank's since the last collective (`ep`), µs.
    pub(super) excess: f64,
}

impl State {
    pub fn new(l: &Launch) -> Self {
        State {
            busy: [0.0; NCAT],
            main: l.start,
            aux: l.start,
            cpu: l.start,
            first_collective: l.graphs,
            first_start: f64::NAN,
            step_overhead: l.step_overhead,
            cpu_binds: 0,
            main_sp: Spread::LAUNCH,
            aux_sp: Spread::LAUNCH,
            waited: 0.0,
            carry: Spread::MET,
            carried_wait: 0.0,
            excess: 0.0,
        }
    }
    /// The step window: first kernel's start to the last kernel's end, plus the profile's
    /// idle at the end of the step (as the engine adds it).
    pub fn window_us(&self) -> f64 {
        self.main.max(self.aux) + self.step_overhead - self.first_start + self.waited
    }
}

/// Plays one regime's segments `repeat` times (identical passes) on `W` states at once, lane
/// `l` with op `i`'s duration at `d[i * W + l]` (a sweep's next contexts of one batch; one lane
/// elsewhere). Each op is stepped on every lane before the next, so that the lanes' dependency
/// chains (each op waits for its stream's previous one) run side by side rather than one after
/// the other. A lane does exactly what it would do alone: a run of identical layers (or passes)
/// goes on until every lane has reached its steady state, and a lane that has stopped plays no
/// further layer.
pub(super) fn play_regime<const W: usize>(
    regime: &Regime,
    d: &[f64],
    ex: &[f64],
    sts: &mut [State; W],
    launch: &Launch,
    repeat: u32,
    sg: &Straggler,
) {
    debug_assert_eq!(d.len(), regime.kinds.len() * W);
    // Several lanes run side by side: with AVX2, four to an instruction instead of two. The
    // same IEEE operations (no fused multiply-add), so the same bits.
    #[cfg(target_arch = "x86_64")]
    if W > 1 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { play_regime_avx2(regime, d, ex, sts, launch, repeat, sg) };
        return;
    }
    play_regime_any(regime, d, ex, sts, launch, repeat, sg);
}

/// [`play_regime`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn play_regime_avx2<const W: usize>(
    regime: &Regime,
    d: &[f64],
    ex: &[f64],
    sts: &mut [State; W],
    launch: &Launch,
    repeat: u32,
    sg: &Straggler,
) {
    play_regime_any(regime, d, ex, sts, launch, repeat, sg);
}

#[inline(always)]
fn play_regime_any<const W: usize>(
    regime: &Regime,
    d: &[f64],
    ex: &[f64],
    sts: &mut [State; W],
    launch: &Launch,
    repeat: u32,
    sg: &Straggler,
) {
    // The recursion specialised (at compile time) for the launch mode and whether straggler
    // spreads are tracked: the same operations in the same order, fewer tests per op.
    let at = (regime, d, ex);
    match (launch.launch == 0.0, sg.on) {
        (true, true) => play_regime_as::<true, true, W>(at, sts, launch, repeat, sg),
        (true, false) => play_regime_as::<true, false, W>(at, sts, launch, repeat, sg),
        (false, true) => play_regime_as::<false, true, W>(at, sts, launch, repeat, sg),
        (false, false) => play_regime_as::<false, false, W>(at, sts, launch, repeat, sg),
    }
}

/// [`play_regime`] with `GRAPHS`: no launch cost (`launch.launch == 0`), and `SG`: `sg.on`.
#[inline(always)]
fn play_regime_as<const GRAPHS: bool, const SG: bool, const W: usize>(
    (regime, d, ex): (&Regime, &[f64], &[f64]),
    sts: &mut [State; W],
    launch: &Launch,
    repeat: u32,
    sg: &Straggler,
) {
    // The whole pass may itself repeat (identical draft passes): a run like a segment's. A
    // run of one (a segment or pass played once) has nothing to skip: no steady-state test.
    let mut pass: Option<[Run; W]> =
        (repeat > 1).then(|| std::array::from_fn(|l| Run::start(&sts[l], launch)));
    let mut playing = [true; W];
    for r in 0..repeat {
        for seg in &regime.segments {
            let layer = |sts: &mut [State; W], live: [bool; W]| {
                play_layer::<GRAPHS, SG, W>((regime, d, ex), seg, sts, live, launch, sg)
            };
            if seg.repeat == 1 {
                layer(sts, playing);
                continue;
            }
            let mut runs: [Run; W] = std::array::from_fn(|l| Run::start(&sts[l], launch));
            let mut live = playing;
            for k in 0..seg.repeat {
                layer(sts, live);
                for l in 0..W {
                    if live[l] && runs[l].steady(&mut sts[l], launch, seg.repeat - k - 1) {
                        live[l] = false;
                    }
                }
                if !live.contains(&true) {
                    break;
                }
            }
        }
        if let Some(p) = pass.as_mut() {
            for l in 0..W {
                if playing[l] && p[l].steady(&mut sts[l], launch, repeat - r - 1) {
                    playing[l] = false;
                }
            }
            if !playing.contains(&true) {
                return;
            }
        }
    }
}

/// One play of segment `seg` (a layer) on the lanes still `live` ([`play_regime_as`]); a
/// function, not a closure, so that it is compiled into the AVX2 copy too.
#[inline(always)]
fn play_layer<const GRAPHS: bool, const SG: bool, const W: usize>(
    (regime, d, ex): (&Regime, &[f64], &[f64]),
    seg: &Segment,
    sts: &mut [State; W],
    live: [bool; W],
    launch: &Launch,
    sg: &Straggler,
) {
    // Expert parallelism: each loaded op's excess over the mean rank joins the
    // straggler wait of the collective that closes its window (other ops add 0).
    let excess = SG && !ex.is_empty();
    if live == [true; W] {
        let mut i = seg.start;
        while i < seg.end {
            let end = regime.run_end[i] as usize;
            let run_on = match regime.kinds[i] {
                Kind::Kernel { aux, loaded: false } if end > i + 1 => Some(aux),
                _ => None,
            };
            if let (Some(aux), true) = (run_on, sts.iter().all(|st| !st.first_start.is_nan())) {
                let run = &d[i * W..end * W];
                kernel_run::<SG, W>(sts, aux, run, launch);
                if excess {
                    for &x in &ex[i..end] {
                        for st in sts.iter_mut() {
                            st.excess += x;
                        }
                    }
                }
                i = end;
                continue;
            }
            let kind = regime.kinds[i];
            let di = &d[i * W..(i + 1) * W];
            for l in 0..W {
                if excess {
                    sts[l].excess += ex[i];
                }
                step::<GRAPHS, SG>(&mut sts[l], kind, di[l], launch, sg);
            }
            i += 1;
        }
        return;
    }
    for i in seg.start..seg.end {
        let kind = regime.kinds[i];
        for l in 0..W {
            if live[l] {
                if excess {
                    sts[l].excess += ex[i];
                }
                step::<GRAPHS, SG>(&mut sts[l], kind, d[i * W + l], launch, sg);
            }
        }
    }
}

/// A run of kernels on one stream (`aux`: the auxiliary), none of them `loaded`, on every lane,
/// after the step's first kernel: what [`step`] does kernel by kernel, with the stream's free time, the
/// CPU's clock and the stream's spread held in registers, lanes side by side (`d` op-major).
/// The same operations in the same order per lane, so the same bits: the launch clock moves
/// by the launch cost (0 under graphs), a kernel it binds counts and starts the spread afresh
/// (`keep` 0; x × 1 + d is x + d), the kernel starts at the later of its stream and the clock.
#[inline(always)]
pub(super) fn kernel_run<const SG: bool, const W: usize>(
    sts: &mut [State; W],
    aux: bool,
    d: &[f64],
    l: &Launch,
) {
    let mut free: [f64; W] = std::array::from_fn(|j| if aux { sts[j].aux } else { sts[j].main });
    let mut cpu: [f64; W] = std::array::from_fn(|j| sts[j].cpu);
    let mut sum: [f64; W] = std::array::from_fn(|j| {
        if aux {
            sts[j].aux_sp.sum
        } else {
            sts[j].main_sp.sum
        }
    });
    let mut sq: [f64; W] = std::array::from_fn(|j| {
        if aux {
            sts[j].aux_sp.sq
        } else {
            sts[j].main_sp.sq
        }
    });
    // Counted in f64 (exact far beyond any step's kernels) and selected, not converted, so
    // that the lanes vectorise.
    let mut binds = [0.0f64; W];
    for di in d.as_chunks::<W>().0 {
        for j in 0..W {
            cpu[j] += l.launch;
            let ready = rules::ready(free[j], l.gap);
            let bound = if cpu[j] > ready { 1.0 } else { 0.0 };
            binds[j] += bound;
            free[j] = rules::start(ready, cpu[j]) + di[j];
            if SG {
                let keep = 1.0 - bound;
                sum[j] = sum[j] * keep + di[j];
                sq[j] = sq[j] * keep + di[j] * di[j];
            }
        }
    }
    for (j, st) in sts.iter_mut().enumerate() {
        st.cpu = cpu[j];
        // Through i64 (a count far below 2^53): one instruction, where u64 takes a dozen.
        st.cpu_binds += binds[j] as i64 as u64;
        let (f, sp) = if aux {
            (&mut st.aux, &mut st.aux_sp)
        } else {
            (&mut st.main, &mut st.main_sp)
        };
        *f = free[j];
        if SG {
            sp.sum = sum[j];
            sp.sq = sq[j];
            sp.launch |= binds[j] > 0.0;
        }
    }
}

/// Detects the steady state of a run of identical layers (or passes) and skips to its end.
pub(super) struct Run {
    pub(super) rel: [f64; 3],
    pub(super) main: f64,
    pub(super) cpu: f64,
    pub(super) binds: u64,
    /// The streams' spreads (a layer repeats only if the paths into its collectives do).
    pub(super) spreads: [Spread; 3],
    pub(super) waited: f64,
    pub(super) carried_wait: f64,
}

impl Run {
    pub(super) fn start(st: &State, l: &Launch) -> Self {
        Run {
            rel: relative(st, l, false),
            main: st.main,
            cpu: st.cpu,
            binds: st.cpu_binds,
            spreads: spreads(st),
            waited: st.waited,
            carried_wait: st.carried_wait,
        }
    }

    /// After one more layer: when the state relative to the compute stream is the one the
    /// layer started from, every later layer repeats it (the recursion is shift-invariant), so
    /// the `left` layers still to play are added as increments and true is returned.
    pub(super) fn steady(&mut self, st: &mut State, l: &Launch, left: u32) -> bool {
        // Launching eagerly, a CPU that bound no kernel in this layer and gained on the GPU
        // (launches no slower than the kernels run) stays ahead for every later layer.
        let cpu_ahead = l.launch > 0.0
            && st.cpu_binds == self.binds
            && st.cpu - self.cpu <= st.main - self.main;
        let rel = relative(st, l, cpu_ahead);
        let same = (rel[0] - self.rel[0]).abs() < 1e-9
            && (rel[1] - self.rel[1]).abs() < 1e-9
            && rel[2] == self.rel[2]
            && spreads(st) == self.spreads
            && st.carried_wait == self.carried_wait
            && st.excess == 0.0;
        if same {
            // The streams advance by the compute stream's increment (an auxiliary stream
            // behind it keeps its offset, which is all that matters of it); the CPU by its own
            // (the compute stream's in the steady state, none under graphs, its launches when
            // it runs ahead).
            let n = left as f64;
            let (dm, dc) = (st.main - self.main, st.cpu - self.cpu);
            st.main += dm * n;
            st.aux += dm * n;
            st.cpu += dc * n;
            st.waited += (st.waited - self.waited) * n;
            return true;
        }
        *self = Run {
            rel,
            main: st.main,
            cpu: st.cpu,
            binds: st.cpu_binds,
            spreads: spreads(st),
            waited: st.waited,
            carried_wait: st.carried_wait,
        };
        false
    }
}

/// The state relative to the compute stream; once it repeats, so does every later layer.
/// A stream behind the compute stream is left out: the auxiliary stream only matters through
/// a fork or the step's end, both of which take the later of the two streams. Under CUDA
/// graphs the CPU clock never advances, so once it is behind both streams it can never bind
/// again and is left out; launching eagerly, so is a CPU that runs ahead (`cpu_ahead`).
#[inline]
pub(super) fn relative(st: &State, l: &Launch, cpu_ahead: bool) -> [f64; 3] {
    let cpu = if cpu_ahead || (l.launch == 0.0 && st.cpu <= st.main.min(st.aux)) {
        f64::MIN
    } else {
        st.cpu - st.main
    };
    let aux = if st.aux <= st.main {
        f64::MIN
    } else {
        st.aux - st.main
    };
    [aux, cpu, st.first_collective as u8 as f64]
}

/// The spreads of the streams that can still reach a collective: the auxiliary stream's only
/// while it is ahead of the compute stream (else a fork or join takes the compute stream's).
#[inline]
pub(super) fn spreads(st: &State) -> [Spread; 3] {
    let aux = if st.aux > st.main {
        st.aux_sp
    } else {
        Spread::MET
    };
    [st.main_sp, aux, st.carry]
}

use crate::sim::rules;

/// A collective reached on the compute stream: the launch clock moves, the step's first
/// collective pays the graph's extra cost; whether the clock bound it, and when it starts.
#[inline(always)]
pub(super) fn arrive(st: &mut State, l: &Launch) -> (bool, f64) {
    st.cpu += l.launch;
    let extra = rules::first_collective_stall(&mut st.first_collective, l);
    let ready = rules::collective_ready(st.main, l.gap, extra);
    let bound = st.cpu > ready;
    st.cpu_binds += bound as u64;
    let a = rules::start(ready, st.cpu);
    if st.first_start.is_nan() {
        st.first_start = a;
    }
    (bound, a)
}

/// How far the slowest rank leads the mean one by two spreads of the same ranks, `a` and `b`
/// (expert loads, the jitter's straggler wait): as for normal spreads, not the sum of the two
/// maxima but the root of their squares summed.
#[inline(always)]
pub(super) fn lead_of(a: f64, b: f64) -> f64 {
    (a * a + b * b).sqrt()
}

/// The expected wait of a collective after the mean rank's arrival (`bound`: the launch clock
/// bound it; `wide`: it syncs the whole expert-parallel group): the ranks leave together when
/// the last one arrives.
#[inline(always)]
pub(super) fn collective_wait(st: &State, sg: &Straggler, bound: bool, wide: bool) -> f64 {
    match (bound, wide) {
        (true, false) => sg.launch_wait,
        (true, true) => sg.wide.launch_wait,
        (false, false) => sg.wait(&st.main_sp),
        // The whole group's deviation since it last met, less what the TP groups' own
        // collectives already waited for.
        (false, true) => {
            let sp = st.carry.then(&st.main_sp);
            (sg.wide.wait(&sp) - st.carried_wait).max(0.0)
        }
    }
}

/// After a collective that waited `wait` (layered stragglers): a wide one meets the whole
/// group; a TP group's carries its path and wait to the next wide one.
#[inline(always)]
pub(super) fn carry_past(st: &mut State, wide: bool, wait: f64) {
    if wide {
        st.carry = Spread::MET;
        st.carried_wait = 0.0;
    } else {
        st.carry = st.carry.then(&st.main_sp);
        st.carried_wait += wait;
    }
}

/// One op of the engine's recursion on a single rank with jitter off (`GRAPHS`: `l.launch` is
/// 0; `SG`: `sg.on`).
#[inline(always)]
pub(super) fn step<const GRAPHS: bool, const SG: bool>(
    st: &mut State,
    kind: Kind,
    dur: f64,
    l: &Launch,
    sg: &Straggler,
) {
    match kind {
        Kind::Fork => {
            if st.main > st.aux {
                st.aux_sp = st.main_sp;
            }
            st.aux = rules::fork(st.aux, st.main)
        }
        Kind::Join => {
            if st.aux > st.main {
                st.main_sp = st.aux_sp;
            }
            st.main = rules::join(st.main, st.aux)
        }
        Kind::Collective { wide } => {
            let (bound, a) = arrive(st, l);
            let wait = collective_wait(st, sg, bound, wide);
            // The loaded ops' excess (the slowest rank's expert loads) and the jitter's wait
            // are two spreads of the same ranks: the slowest arrival is not the sum of the two
            // maxima but, as for normal spreads, the root of their squares summed.
            let wait = if SG && st.excess > 0.0 {
                let x = st.excess;
                lead_of(x, wait) - x
            } else {
                wait
            };
            st.excess = 0.0;
            if SG && sg.layered {
                carry_past(st, wide, wait);
            }
            if GRAPHS {
                // Under CUDA graphs the CPU clock never advances, so it binds no later kernel
                // whatever the wait, and an auxiliary stream behind the compute stream is
                // taken over at the next fork either way: shifting everything after this
                // collective by the wait decides every later max as the shifted timeline
                // would. The wait is therefore kept aside and added to the step's window,
                // off the recursion's critical path (its square root and division would
                // stall every later op). An auxiliary stream still ahead is not delayed by
                // the collective, so it moves back by the wait relative to the shift.
                st.main = rules::collective_end(a, dur);
                if st.aux > st.main {
                    st.aux -= wait;
                }
                st.waited += wait;
            } else {
                // Released when the last rank has arrived and the transfer is done (one
                // blocking collective: no communication stream to queue on).
                st.main = rules::collective_end(rules::straggled(a, wait), dur);
            }
            st.main_sp = Spread::MET;
        }
        Kind::Kernel { aux, loaded } if GRAPHS => {
            // Under CUDA graphs the CPU's clock stays at the step's start, behind the streams:
            // a kernel it binds is rare (an auxiliary stream moved back by a straggler wait),
            // so the common case is a predicted branch, the same arithmetic as below.
            st.cpu += l.launch;
            let free = if aux { &mut st.aux } else { &mut st.main };
            let ready = rules::ready(*free, l.gap);
            if st.cpu > ready {
                st.cpu_binds += 1;
                let s = rules::start(ready, st.cpu);
                *free = s + dur;
                if st.first_start.is_nan() {
                    st.first_start = s;
                }
                if SG && !loaded {
                    let sp = if aux { &mut st.aux_sp } else { &mut st.main_sp };
                    sp.sum = sp.sum * 0.0 + dur;
                    sp.sq = sp.sq * 0.0 + dur * dur;
                    sp.launch = true;
                }
            } else {
                let s = rules::start(ready, st.cpu);
                *free = s + dur;
                if st.first_start.is_nan() {
                    st.first_start = s;
                }
                if SG && !loaded {
                    // `keep` is 1: x × 1 is x, bit for bit.
                    let sp = if aux { &mut st.aux_sp } else { &mut st.main_sp };
                    sp.sum += dur;
                    sp.sq += dur * dur;
                }
            }
        }
        Kind::Kernel { aux, loaded } => {
            st.cpu += l.launch;
            let free = if aux { &mut st.aux } else { &mut st.main };
            let ready = rules::ready(*free, l.gap);
            let bound = st.cpu > ready;
            st.cpu_binds += bound as u64;
            let s = rules::start(ready, st.cpu);
            *free = s + dur;
            if st.first_start.is_nan() {
                st.first_start = s;
            }
            if SG && !loaded {
                // A kernel the CPU's launch bound starts its path afresh (branch-free: eager
                // launches bind kernels irregularly).
                let sp = if aux { &mut st.aux_sp } else { &mut st.main_sp };
                let keep = (!bound) as u8 as f64;
                sp.sum = sp.sum * keep + dur;
                sp.sq = sp.sq * keep + dur * dur;
                sp.launch |= bound;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The straggler wait: what the engine's seeded jitter adds to the mean step.
//
// With jitter on (`cost::profile::Variability`, drawn in `sim::engine`), rank r's kernel of base
// time b lasts b × v_r × (1 + a·U), where v_r = 1 + s·U' is the rank's speed for the whole step
// (s = rank_skew_cv·√3), a = kernel_cv·√3 and U, U' are uniform on [-1, 1]; each rank also
// starts at its own launch offset, uniform on [0, launch_skew_us]. Collective transfer jitter is
// one draw for every rank, so it moves no mean. Every draw has mean zero, so each rank's mean
// timeline is the fast path's; but a collective ends at the LATEST arrival, and all ranks leave
// it together. Between two collectives each rank's arrival deviates from the mean by
//     D_r = (v_r − 1)·S + Σ b_i·a·U_i (+ its launch offset, from a launch clock),
// S = Σ b_i over the kernels on the critical path since the ranks last met (the stream each
// kernel, fork and join follows in the recursion). The mean collective therefore waits
// E[max over N ranks of D_r] beyond the fast path. D_r is a uniform of half-width s·S plus, by
// the central limit theorem, a normal of variance kernel_cv²·Σ b_i² (the launch offset's
// variance launch_skew_us²/12 joins it on a path from a launch clock: the step's start or an
// eager launch that bound the kernel). E[max] of N such sums is tabulated once per N by
// numerical integration (`expected_max_table`) and read at the path's mix of the two.
//
// The marginal is all that matters: ranks meet at every collective, so the waits add up even
// though each rank keeps its speed all step. Left out (measured by tests/fast_vs_seeds.rs):
// ties at a join or at the CPU's launch clock where ranks split between the two sides.
// ---------------------------------------------------------------------------------------------

/// One stream's spread across ranks since the ranks last met at a collective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Spread {
    /// Kernel time on the path (each rank's speed scales it).
    pub(super) sum: f64,
    /// Sum of squares of those kernels' times (each jitters independently).
    pub(super) sq: f64,
    /// The path starts at a launch clock (the step's start or a CPU-bound eager launch), whose
    /// ranks are apart by the launch skew.
    pub(super) launch: bool,
}

impl Spread {
    /// The spread of a path that follows `self` with `next`.
    #[inline]
    pub(super) fn then(&self, next: &Spread) -> Spread {
        Spread {
            sum: self.sum + next.sum,
            sq: self.sq + next.sq,
            launch: self.launch || next.launch,
        }
    }

    /// Just after a collective: every rank at the same time.
    const MET: Spread = Spread {
        sum: 0.0,
        sq: 0.0,
        launch: false,
    };
    /// At a launch clock: apart by the launch skew only.
    const LAUNCH: Spread = Spread {
        sum: 0.0,
        sq: 0.0,
        launch: true,
    };
}

/// Points of the E[max] table over the normal share of the variance, 0 to 1.
pub(super) const STRAGGLER_POINTS: usize = 65;

/// The expected straggler wait of one profile's jitter over one scenario's ranks.
#[derive(Debug, Clone)]
pub(super) struct Straggler {
    /// Half-width of the rank speed's uniform draw (rank_skew_cv × √3).
    pub(super) skew: f64,
    /// kernel_cv²: variance of one kernel's relative jitter.
    pub(super) kernel_var: f64,
    /// launch_skew_us² / 12: variance of the ranks' uniform launch offsets.
    pub(super) launch_var: f64,
    /// E[max of N] of a unit-variance uniform-plus-normal sum, at normal shares of the
    /// variance 0, 1/64, ..., 1 (`expected_max_table`); empty: no wait (one rank, no jitter).
    pub(super) table: std::sync::Arc<[f64]>,
    /// Any wait at all (else the spreads are not tracked: a step with no collective, TP=1,
    /// still reaches its steady state).
    pub(super) on: bool,
    /// The wait of a collective the CPU's launch bound (the launch skew alone), precomputed:
    /// eager steps meet it at most collectives.
    pub(super) launch_wait: f64,
    /// A wait within one tensor-parallel group at all (`on` also covers the wide group's).
    pub(super) own: bool,
    /// The wide group is larger than a TP group (data-parallel attention): the spread is
    /// carried across TP collectives to the next wide one (`State::carry`).
    pub(super) layered: bool,
    /// The same over the whole expert-parallel group (`Kind::Collective { wide }`: data-parallel
    /// attention's dispatch and combine meet DP × TP ranks); a copy of this one otherwise.
    pub(super) wide: Box<WideStraggler>,
}

/// The straggler wait of collectives that sync the whole expert-parallel group.
#[derive(Debug, Clone)]
pub(super) struct WideStraggler {
    pub(super) table: std::sync::Arc<[f64]>,
    pub(super) on: bool,
    pub(super) skew: f64,
    pub(super) kernel_var: f64,
    pub(super) launch_var: f64,
    pub(super) launch_wait: f64,
}

impl WideStraggler {
    #[inline]
    pub(super) fn wait(&self, sp: &Spread) -> f64 {
        straggler_wait(
            self.on,
            self.skew,
            self.kernel_var,
            self.launch_var,
            &self.table,
            sp,
        )
    }
}

/// Expected wait of a collective whose arriving path has spread `sp` (see `Straggler`), µs.
#[inline]
fn straggler_wait(
    on: bool,
    skew: f64,
    kernel_var: f64,
    launch_var: f64,
    table: &[f64],
    sp: &Spread,
) -> f64 {
    if !on {
        return 0.0;
    }
    let w = skew * sp.sum;
    let uniform = w * w / 3.0;
    let normal = kernel_var * sp.sq + if sp.launch { launch_var } else { 0.0 };
    let var = uniform + normal;
    if var <= 0.0 {
        return 0.0;
    }
    let x = normal / var * (STRAGGLER_POINTS - 1) as f64;
    // x ≥ 0 (a share of the variance): through i64, one instruction where usize takes a dozen.
    let i = (x as i64 as usize).min(STRAGGLER_POINTS - 2);
    let t = x - i as f64;
    var.sqrt() * (table[i] + t * (table[i + 1] - table[i]))
}

impl Straggler {
    /// `ranks`: a tensor-parallel group's; `wide`: the expert-parallel group's (data-parallel
    /// attention: DP × TP; `ranks` otherwise).
    pub(super) fn new(v: &crate::cost::profile::Variability, ranks: u32, wide: u32) -> Self {
        let mut sg = Self::one(v, ranks);
        let w = if wide == ranks {
            sg.clone()
        } else {
            Self::one(v, wide)
        };
        sg.own = sg.on;
        sg.on |= w.on;
        sg.layered = wide > ranks && w.on;
        sg.wide = Box::new(WideStraggler {
            table: w.table,
            on: w.on,
            skew: w.skew,
            kernel_var: w.kernel_var,
            launch_var: w.launch_var,
            launch_wait: w.launch_wait,
        });
        sg
    }

    fn one(v: &crate::cost::profile::Variability, ranks: u32) -> Self {
        let skew = v.rank_skew_cv * 3f64.sqrt();
        let kernel_var = v.kernel_cv * v.kernel_cv;
        let launch_var = v.launch_skew_us * v.launch_skew_us / 12.0;
        let on = ranks > 1 && (skew > 0.0 || kernel_var > 0.0 || launch_var > 0.0);
        let mut sg = Straggler {
            on,
            skew,
            kernel_var,
            launch_var,
            table: if on {
                expected_max_table(ranks)
            } else {
                std::sync::Arc::from(Vec::new())
            },
            launch_wait: 0.0,
            own: on,
            layered: false,
            wide: Box::new(WideStraggler {
                table: std::sync::Arc::from(Vec::new()),
                on: false,
                skew: 0.0,
                kernel_var: 0.0,
                launch_var: 0.0,
                launch_wait: 0.0,
            }),
        };
        sg.launch_wait = sg.wait(&Spread::LAUNCH);
        sg
    }

    /// Expected wait of a collective whose arriving path has spread `sp`, µs.
    #[inline]
    pub(super) fn wait(&self, sp: &Spread) -> f64 {
        straggler_wait(
            self.own,
            self.skew,
            self.kernel_var,
            self.launch_var,
            &self.table,
            sp,
        )
    }
}

/// E[max of `n` iid Y], Y = √(1−q)·√3·U + √q·Z (U uniform on [-1, 1], Z standard normal: unit
/// variance, a share q of it normal), at q = j/64. Computed once per `n` and kept. By symmetry of
/// Y, E[max] = ∫₀^∞ 1 − F(x)ⁿ − (1 − F(x))ⁿ dx (Simpson's rule), where the CDF of the sum is
/// F(x) = σ/(2h)·[G((x+h)/σ) − G((x−h)/σ)], G(t) = tΦ(t) + φ(t) (the uniform of half-width h
/// convolved with the normal of deviation σ). Checked against the exact ends: √3·(n−1)/(n+1) for
/// the uniform (the mean of the top order statistic) and E[max of n standard normals]
/// (n = 2: 1/√π; tabulated by Harter, 1961).
pub(super) fn expected_max_table(n: u32) -> std::sync::Arc<[f64]> {
    use std::sync::{Arc, Mutex, OnceLock};
    static TABLES: OnceLock<Mutex<HashMap<u32, Arc<[f64]>>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    if let Some(t) = tables.lock().map(|m| m.get(&n).cloned()).ok().flatten() {
        return t;
    }
    let table: Arc<[f64]> = (0..STRAGGLER_POINTS)
        .map(|j| expected_max(n, j as f64 / (STRAGGLER_POINTS - 1) as f64))
        .collect();
    if let Ok(mut m) = tables.lock() {
        m.insert(n, table.clone());
    }
    table
}

/// E[max of `n` iid unit-variance uniform-plus-normal sums with normal share `q` of the variance.
pub(super) fn expected_max(n: u32, q: f64) -> f64 {
    let phi = |t: f64| (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |t: f64| 0.5 * statrs::function::erf::erfc(-t / std::f64::consts::SQRT_2);
    let h = 3f64.sqrt() * (1.0 - q).max(0.0).sqrt();
    let sigma = q.sqrt();
    if q <= 0.0 {
        // The top of n uniforms on [-h, h] lies at h·(n−1)/(n+1) on average.
        return h * (n as f64 - 1.0) / (n as f64 + 1.0);
    }
    let f = |x: f64| -> f64 {
        if sigma < 1e-9 {
            ((x + h) / (2.0 * h)).clamp(0.0, 1.0)
        } else if h < 1e-6 * sigma {
            cdf(x / sigma)
        } else {
            let g = |t: f64| t * cdf(t) + phi(t);
            (sigma / (2.0 * h) * (g((x + h) / sigma) - g((x - h) / sigma))).clamp(0.0, 1.0)
        }
    };
    let nf = n as f64;
    let integrand = |x: f64| {
        let p = f(x);
        1.0 - p.powf(nf) - (1.0 - p).powf(nf)
    };
    // Y is within h + 9σ of 0 but for ~1e-19; 2400 Simpson intervals.
    let top = h + 9.0 * sigma;
    let m = 2400;
    let dx = top / m as f64;
    let mut sum = integrand(0.0) + integrand(top);
    for k in 1..m {
        sum += integrand(k as f64 * dx) * if k % 2 == 1 { 4.0 } else { 2.0 };
    }
    sum * dx / 3.0
}

#[cfg(test)]
mod straggler_tests {
    use super::*;

    /// The table's ends against the exact values: the mean top order statistic of n uniforms,
    /// and E[max of n standard normals] (n = 2: 1/√π; n = 4, 8: Harter 1961, "Expected values
    /// of normal order statistics", Biometrika 48, table 1: 1.02938, 1.42360).
    #[test]
    pub(super) fn expected_max_matches_known_values() {
        for n in [2u32, 4, 8] {
            let u = 3f64.sqrt() * (n as f64 - 1.0) / (n as f64 + 1.0);
            assert!((expected_max(n, 0.0) - u).abs() < 1e-12);
            // Just off the pure uniform the integral (kink smoothed) agrees with the end.
            assert!((expected_max(n, 1e-10) - u).abs() < 1e-4, "n {n}");
        }
        let pi = std::f64::consts::PI;
        for (n, e) in [(2u32, 1.0 / pi.sqrt()), (4, 1.029_375), (8, 1.423_600)] {
            let got = expected_max(n, 1.0);
            assert!((got - e).abs() < 2e-6, "n {n}: {got} vs {e}");
        }
        // A mix lies between the two ends (the normal's tail lifts the max above the uniform's).
        let mid = expected_max(8, 0.5);
        assert!(
            mid > expected_max(8, 0.0) && mid < expected_max(8, 1.0),
            "{mid}"
        );
    }

    /// The wait read off the table: a pure skew path waits its uniform's top order statistic,
    /// one rank or no jitter waits nothing.
    #[test]
    pub(super) fn wait_of_a_path() {
        let v = crate::cost::profile::Variability {
            kernel_cv: 0.0,
            rank_skew_cv: 0.01,
            collective_cv: 0.03,
            launch_skew_us: 0.0,
            source: String::new(),
        };
        let sp = Spread {
            sum: 100.0,
            sq: 2000.0,
            launch: false,
        };
        let w = Straggler::new(&v, 8, 8).wait(&sp);
        let expect = 100.0 * 0.01 * 3f64.sqrt() * 7.0 / 9.0;
        assert!((w - expect).abs() < 1e-9, "{w} vs {expect}");
        assert_eq!(Straggler::new(&v, 1, 1).wait(&sp), 0.0);
        let off = crate::cost::profile::Variability {
            rank_skew_cv: 0.0,
            collective_cv: 0.0,
            ..v
        };
        assert_eq!(Straggler::new(&off, 8, 8).wait(&sp), 0.0);
        // Kernel jitter alone: σ·E[max of 2 normals] = σ/√π.
        let k = crate::cost::profile::Variability {
            kernel_cv: 0.02,
            rank_skew_cv: 0.0,
            ..off
        };
        let w = Straggler::new(&k, 2, 2).wait(&sp);
        let expect = 0.02 * 2000f64.sqrt() / std::f64::consts::PI.sqrt();
        assert!((w - expect).abs() < 1e-5 * expect, "{w} vs {expect}");
    }
}

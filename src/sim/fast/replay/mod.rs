//! One rank's max-plus recursion over the priced ops (stream free times, the CPU's launch
//! clock, fork/join of the auxiliary stream), and the expected straggler wait at collectives
//! (`straggler`).

use super::basis::{Kind, Regime, Segment};
use super::{Busy, HashMap, Launch, NCAT};
use crate::sim::rules;

mod straggler;

pub(super) use straggler::{Spread, Straggler};

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
        Kind::Collective { wide } => collective::<GRAPHS, SG>(st, wide, dur, l, sg),
        Kind::Kernel { aux, loaded } if GRAPHS => kernel_in_graph::<SG>(st, (aux, loaded), dur, l),
        Kind::Kernel { aux, loaded } => kernel::<SG>(st, (aux, loaded), dur, l),
    }
}

/// [`step`]'s collective (`wide`: it syncs the whole expert-parallel group) of `dur` µs: the
/// ranks arrive, wait for the slowest (the jitter's straggler wait combined with the expert
/// loads' excess) and leave together when the transfer is done.
#[inline(always)]
fn collective<const GRAPHS: bool, const SG: bool>(
    st: &mut State,
    wide: bool,
    dur: f64,
    l: &Launch,
    sg: &Straggler,
) {
    let (bound, a) = arrive(st, l);
    let wait = collective_wait(st, sg, bound, wide);
    // The loaded ops' excess (the slowest rank's expert loads) and the jitter's wait are two
    // spreads of the same ranks: the slowest arrival is not the sum of the two maxima but, as
    // for normal spreads, the root of their squares summed.
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
        // Under CUDA graphs the CPU clock never advances, so it binds no later kernel whatever
        // the wait, and an auxiliary stream behind the compute stream is taken over at the next
        // fork either way: shifting everything after this collective by the wait decides every
        // later max as the shifted timeline would. The wait is therefore kept aside and added
        // to the step's window, off the recursion's critical path (its square root and
        // division would stall every later op). An auxiliary stream still ahead is not delayed
        // by the collective, so it moves back by the wait relative to the shift.
        st.main = rules::collective_end(a, dur);
        if st.aux > st.main {
            st.aux -= wait;
        }
        st.waited += wait;
    } else {
        // Released when the last rank has arrived and the transfer is done (one blocking
        // collective: no communication stream to queue on).
        st.main = rules::collective_end(rules::straggled(a, wait), dur);
    }
    st.main_sp = Spread::MET;
}

/// [`step`]'s kernel of `dur` µs on stream `aux` (`loaded`: expert-loaded, adding nothing to
/// the straggler spread) under CUDA graphs: the CPU's clock stays at the step's start, behind
/// the streams, so a kernel it binds is rare (an auxiliary stream moved back by a straggler
/// wait) and the common case is a predicted branch, the same arithmetic as [`kernel`].
#[inline(always)]
fn kernel_in_graph<const SG: bool>(
    st: &mut State,
    (aux, loaded): (bool, bool),
    dur: f64,
    l: &Launch,
) {
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

/// [`step`]'s kernel of `dur` µs on stream `aux` (`loaded`: expert-loaded), launched eagerly:
/// it starts when its stream is ready and the CPU has launched it.
#[inline(always)]
fn kernel<const SG: bool>(st: &mut State, (aux, loaded): (bool, bool), dur: f64, l: &Launch) {
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
        // A kernel the CPU's launch bound starts its path afresh (branch-free: eager launches
        // bind kernels irregularly).
        let sp = if aux { &mut st.aux_sp } else { &mut st.main_sp };
        let keep = (!bound) as u8 as f64;
        sp.sum = sp.sum * keep + dur;
        sp.sq = sp.sq * keep + dur * dur;
        sp.launch |= bound;
    }
}

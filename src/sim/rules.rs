//! The rules of a decode step that both engines play: the timeline (`engine`: every rank, with
//! jitter) and the fast path (`fast`: one mean rank and its spread). Each rule is written once
//! here and called by both, so a modelling change is made in one place; the equivalence tests
//! (`tests/fast_vs_seeds.rs`, `tests/fast_tbo.rs`, `tests/fast_dp.rs`) hold the two engines to
//! each other.
//!
//! - **Launch** under CUDA graphs or eagerly: where the step starts (one graph launch on the
//!   CPU), the GPU gap between dependent kernels, the CPU's cost per eager launch.
//! - **A kernel's start**: its stream free plus the gap, not before the CPU has launched it.
//! - **The first collective of a graph replay** pays NCCL's captured host work once.
//! - **Fork and join** of the auxiliary stream.
//! - **A collective's arrival and release**: a rank arrives when its compute stream is ready
//!   (and its launch clock has reached it), queued on its communication stream behind a
//!   transfer still in flight; the collective starts when the last rank has arrived (the
//!   others' straggler wait), ends a transfer later, and releases every rank at its end: the
//!   compute stream of a blocking one, only the communication stream of an asynchronous one.
//! - **Two-batch overlap's asynchronous all-to-alls**: queued on the communication stream
//!   behind the previous one, and joined by the `wait` that names one.
//!
//! Every function is `#[inline(always)]` arithmetic on times: the fast path's vectorised loops
//! call them in their inner bodies, so they must compile to what was written there before.

use crate::cost::profile::LaunchParams;
use crate::cost::CalibrationProfile;

/// Launch parameters of one CUDA-graph setting, and the profile's idle at the end of a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch {
    /// When the step's first kernel may start: one `cudaGraphLaunch` under graphs, else 0.
    pub(crate) start: f64,
    /// GPU gap between dependent kernels.
    pub(crate) gap: f64,
    /// CPU cost per kernel launch (0 under graphs: the graph holds them).
    pub(crate) launch: f64,
    /// Extra delay before the first collective of a graph replay (0 eagerly).
    pub(crate) first_collective: f64,
    pub(crate) graphs: bool,
    /// GPU idle added at the end of each step (profile factor `step_overhead_us`).
    pub(crate) step_overhead: f64,
}

impl Launch {
    /// The launch rules of `p` with CUDA graphs on or off.
    pub fn new(p: &CalibrationProfile, cuda_graphs: bool) -> Self {
        Self::of(&p.launch, cuda_graphs, p.factors.step_overhead_us)
    }

    /// The launch rules of these parameters with CUDA graphs on or off.
    pub(crate) fn of(l: &LaunchParams, cuda_graphs: bool, step_overhead: f64) -> Self {
        if cuda_graphs {
            Launch {
                start: l.graph_launch_us,
                gap: l.graph_kernel_gap_us,
                launch: 0.0,
                first_collective: l.graph_first_collective_us,
                graphs: true,
                step_overhead,
            }
        } else {
            Launch {
                start: 0.0,
                gap: l.eager_kernel_gap_us,
                launch: l.eager_launch_us,
                first_collective: 0.0,
                graphs: false,
                step_overhead,
            }
        }
    }
}

/// The later of two times (no NaN handling: it sits on the recursion's critical path).
#[inline(always)]
pub(crate) fn later(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// When an op on a stream free at `free` could start on the GPU: after the gap.
#[inline(always)]
pub(crate) fn ready(free: f64, gap: f64) -> f64 {
    free + gap
}

/// When it starts: ready on the GPU, and launched by the CPU (whose clock is `cpu`).
#[inline(always)]
pub(crate) fn start(ready: f64, cpu: f64) -> f64 {
    later(ready, cpu)
}

/// The extra delay of a collective: the first of a graph replay pays `first_collective` once
/// (`first` is then cleared), every later one nothing.
#[inline(always)]
pub(crate) fn first_collective_stall(first: &mut bool, l: &Launch) -> f64 {
    let extra = if *first { l.first_collective } else { 0.0 };
    *first = false;
    extra
}

/// When a rank whose compute stream is free at `main` is ready for a collective.
#[inline(always)]
pub(crate) fn collective_ready(main: f64, gap: f64, stall: f64) -> f64 {
    main + gap + stall
}

/// When a rank arrives at a collective: its compute stream free at `main` is ready after the
/// gap (and the replay's first-collective `stall`), and the CPU (clock `cpu`) has launched it.
#[inline(always)]
pub(crate) fn arrive(main: f64, cpu: f64, gap: f64, stall: f64) -> f64 {
    start(collective_ready(main, gap, stall), cpu)
}

/// A collective on a rank's communication stream, free at `comm_free`: it starts no earlier
/// than the transfer before it has ended there (under two-batch overlap an asynchronous
/// all-to-all may still be in flight; a collective, blocking or not, queues behind it).
#[inline(always)]
pub(crate) fn queue(arrival: f64, comm_free: f64) -> f64 {
    later(arrival, comm_free)
}

/// The last arrival of a collective's ranks (`arrivals`, each already queued): when it starts
/// on all of them.
#[inline(always)]
pub(crate) fn last_arrival(arrivals: &[f64]) -> f64 {
    arrivals.iter().fold(f64::MIN, |m, &a| m.max(a))
}

/// The last arrival seen from a rank that arrives at `arrival` and waits `wait` µs for the
/// slowest (the fast path's expected straggler wait).
#[inline(always)]
pub(crate) fn straggled(arrival: f64, wait: f64) -> f64 {
    arrival + wait
}

/// How long a rank that arrived at `arrival` waits for the last one (`last`): its straggler
/// wait, the early part of its collective kernel.
#[inline(always)]
pub(crate) fn straggler_wait(arrival: f64, last: f64) -> f64 {
    last - arrival
}

/// When a collective whose last rank arrives at `last` ends: a `transfer` later, on every rank.
#[inline(always)]
pub(crate) fn collective_end(last: f64, transfer: f64) -> f64 {
    last + transfer
}

/// Each rank leaves a collective that ends at `end`: its communication stream (`comm`) is free
/// then; a blocking collective releases the compute stream (`main`) there too, an asynchronous
/// one leaves it where it was and records the end (`pending`) for the wait that names it.
#[inline(always)]
pub(crate) fn release(end: f64, main: &mut f64, comm: &mut f64, pending: Option<&mut f64>) {
    *comm = end;
    match pending {
        Some(p) => *p = end,
        None => *main = end,
    }
}

/// A wait for an asynchronous collective that ended at `end`: the compute stream (free at
/// `main`) goes on when the transfer has ended.
#[inline(always)]
pub(crate) fn await_transfer(main: f64, end: f64) -> f64 {
    later(main, end)
}

/// A fork: the auxiliary stream starts no earlier than the compute stream has reached.
#[inline(always)]
pub(crate) fn fork(aux: f64, main: f64) -> f64 {
    later(aux, main)
}

/// A join: the compute stream goes on when the auxiliary stream (free at `other`) is done too.
#[inline(always)]
pub(crate) fn join(main: f64, other: f64) -> f64 {
    later(main, other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> LaunchParams {
        LaunchParams {
            graph_launch_us: 11.0,
            graph_kernel_gap_us: 0.5,
            eager_launch_us: 9.0,
            eager_kernel_gap_us: 1.5,
            graph_first_collective_us: 2.2,
            source: "test".into(),
        }
    }

    #[test]
    fn graphs_launch_once_and_eager_launches_every_kernel() {
        let g = Launch::of(&params(), true, 3.0);
        assert_eq!(
            (g.start, g.gap, g.launch, g.first_collective),
            (11.0, 0.5, 0.0, 2.2)
        );
        let e = Launch::of(&params(), false, 3.0);
        assert_eq!(
            (e.start, e.gap, e.launch, e.first_collective),
            (0.0, 1.5, 9.0, 0.0)
        );
        assert_eq!(e.step_overhead, 3.0);
    }

    #[test]
    fn the_first_collective_of_a_replay_stalls_once() {
        let g = Launch::of(&params(), true, 0.0);
        let mut first = g.graphs;
        assert_eq!(first_collective_stall(&mut first, &g), 2.2);
        assert_eq!(first_collective_stall(&mut first, &g), 0.0);
        let e = Launch::of(&params(), false, 0.0);
        let mut first = e.graphs;
        assert_eq!(first_collective_stall(&mut first, &e), 0.0);
    }

    #[test]
    fn a_kernel_waits_for_its_stream_and_its_launch() {
        assert_eq!(start(ready(10.0, 1.5), 5.0), 11.5);
        assert_eq!(start(ready(10.0, 1.5), 20.0), 20.0);
        assert_eq!(collective_ready(10.0, 0.5, 2.2), 12.7);
        assert_eq!((fork(3.0, 7.0), join(7.0, 9.0)), (7.0, 9.0));
        assert_eq!(arrive(10.0, 5.0, 0.5, 2.2), 12.7);
        assert_eq!(arrive(10.0, 20.0, 0.5, 2.2), 20.0);
    }

    #[test]
    fn a_collective_starts_at_its_last_arrival_and_releases_every_rank_at_its_end() {
        // Queued behind a transfer in flight until 14; the others arrive at 11 and 12.
        let arrivals = [queue(12.0, 14.0), queue(11.0, 0.0), queue(12.0, 0.0)];
        assert_eq!(arrivals, [14.0, 11.0, 12.0]);
        let last = last_arrival(&arrivals);
        assert_eq!(last, 14.0);
        assert_eq!(straggler_wait(arrivals[1], last), 3.0);
        assert_eq!(straggled(11.0, 3.0), last);
        let end = collective_end(last, 6.0);
        assert_eq!(end, 20.0);
        // Blocking: the compute stream goes on at the end.
        let (mut main, mut comm) = (11.0, 0.0);
        release(end, &mut main, &mut comm, None);
        assert_eq!((main, comm), (20.0, 20.0));
        // Asynchronous: the compute stream goes on; the wait that names it joins the end.
        let (mut main, mut comm, mut pending) = (11.0, 0.0, 0.0);
        release(end, &mut main, &mut comm, Some(&mut pending));
        assert_eq!((main, comm, pending), (11.0, 20.0, 20.0));
        assert_eq!(await_transfer(main + 4.0, pending), 20.0);
        assert_eq!(await_transfer(main + 12.0, pending), 23.0);
    }
}

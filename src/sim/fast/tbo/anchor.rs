//! Where the interleaving repeats: at the start of a round in runs of identical layers, each
//! lane's state relative to its compute stream (`Anchor`) is compared with the one a layer
//! before; once the two agree, the layers left are added as that layer's increment, and a lane
//! that repeats before the others is parked until they get there (`Parked`).

use super::interleave::{Comm, Lanes};
use super::{Chain, Cursor, Lag, Play};
use crate::sim::fast::replay::{relative, spreads, Spread};
use crate::sim::fast::{Launch, State};

/// Lanes whose rounds repeated before the others': each one's state moved on to the end of
/// its run of identical layers (`Anchor::skip`), and the cursors that move left them at.
/// Meanwhile the lanes are played on with the others as ballast, their results unused.
pub(super) struct Parked<const W: usize> {
    at: [Cursor; 2],
    lanes: [Option<(State, Comm, Chain, Lag)>; W],
}

/// The start of a round on every lane: where a lane's round repeats its anchor's a layer on,
/// the layers left are added as that layer's increment. When every lane still played
/// repeats, the cursors move on; a lane that repeats before the others is parked where its
/// move left it, and taken back when the cursors get there.
pub(super) fn round_start<const W: usize>(
    (sts, comm, chain, lags): Lanes<'_, W>,
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
    let pos = [0, 1].map(|k| (cursors[k].seg, cursors[k].i));
    let mut skipped = [false; W];
    let mut live = 0;
    for j in 0..W {
        if parked.as_ref().is_some_and(|p| p.lanes[j].is_some()) {
            continue;
        }
        live += 1;
        // Within the anchor's runs (it is met again a layer on), or outside runs of identical
        // layers: nothing to compare or keep.
        let fresh = match anchors[j].as_ref().map(|a| a.pos) {
            Some(a) if a == pos => false,
            Some(a) if a[0].0 == pos[0].0 && a[1].0 == pos[1].0 => continue,
            _ if in_runs => true,
            _ => continue,
        };
        let now = Anchor::at(&sts[j], &comm[j], &chain[j], &lags[j], cursors, pending, l);
        let left = || layers_left(cursors, plays);
        let lane = (&mut sts[j], &mut comm[j]);
        skipped[j] = update_anchor(&mut anchors[j], now, fresh, lane, left, l);
    }
    let moved = skipped.iter().filter(|&&s| s).count();
    if moved > 0 {
        let n = layers_left(cursors, plays);
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

/// A lane's anchor at this round's start, `now`: where it repeats the one a layer before, the
/// lane (its state and communication stream) is moved on by the `left` layers (returns whether
/// there were any) and the anchor dropped; else `now` is kept (`fresh`: a new anchor where
/// both micro-batches are in runs of identical layers).
fn update_anchor(
    anchor: &mut Option<Anchor>,
    now: Anchor,
    fresh: bool,
    (st, comm): (&mut State, &mut Comm),
    left: impl FnOnce() -> u32,
    l: &Launch,
) -> bool {
    match anchor.as_mut() {
        Some(a) if !fresh => {
            if a.repeats(&now, l) {
                let n = left();
                a.skip(&now, n, st, comm);
                *anchor = None;
                return n > 0;
            }
            *a = now;
        }
        _ => *anchor = Some(now),
    }
    false
}

/// The layers both micro-batches have left in their runs of identical layers: the fewer.
fn layers_left(cursors: &[Cursor; 2], plays: &[Play<'_>; 2]) -> u32 {
    cursors
        .iter()
        .zip(plays)
        .map(|(c, p)| p.regime.segments[c.seg].repeat - 1 - c.rep)
        .min()
        .unwrap_or(0)
}

/// A nanosecond, in the recursion's µs.
const NS: f64 = 1e-3;

/// The interleaving's state at the start of a round, relative to the compute stream: where a
/// round starts from the same ops one layer later in the same state, every later layer of the
/// two runs repeats it (the recursion is shift-invariant), and the layers left are added as
/// that layer's increment, as `replay::Run` skips a plain pass's.
pub(super) struct Anchor {
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

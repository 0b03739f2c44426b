//! Two-batch overlap along the context axis: the step at a context between two knots
//! (multiples of [`KNOT`] tokens) is the knots' steps interpolated, where every
//! context-dependent price lies on the line between the knots' prices.
//!
//! Why: a two-batch-overlap step is played as the two micro-batches' interleave until their
//! layers repeat (`tbo`), some ten MoE layers per row, where a plain step replays one layer.
//! Along the context axis only the context-dependent ops change (attention, one per layer), and
//! within a piece of their price laws they are affine in the context; the interleave is a
//! max-plus recursion over those prices, so the step is affine in the context too wherever the
//! recursion takes the same branches, and continuous where it changes branch. So a row between
//! two knots of its batch and setting is the knots' steps (and busy times) interpolated, and a
//! sweep along its context axis plays one knot per `KNOT` rows.
//!
//! The rule depends on the row alone (its context, batch and setting), not on the grid around
//! it, so a row reads the same in any sweep, alone or among others, on any thread:
//! - a context that is a knot, or below the first knot, is played;
//! - a context between knots k0 < c < k1 is interpolated when its own context prices, per
//!   micro-batch, lie within [`AFFINE_US`] (weighed by how often each op runs per pass) of the
//!   line through the knots' prices: a price law's breakpoint between the knots (a tile or
//!   split-K change of the attention kernel) fails it, and the row is played.
//!
//! What it costs in accuracy: where the recursion changes branch between two knots the line
//! misses the kink, by at most the knot spacing times the change of slope: a few µs on a step
//! of tens of ms (below 1e-4 of it; measured against every row played over the benchmark's
//! 10^6 rows, and pinned at one kink by the tests below), where the fast path itself is within
//! about 1% of the timeline.
//!
//! The knots' plays are kept per thread (`Memo::knots`), with their context prices, for the
//! next rows of the same batch and setting; where a call's contexts are consecutive (a sweep
//! along its context axis) the knots that follow are played with the ones it needs, eight side
//! by side. A Monte Carlo draw's knots are not kept (their prices are drawn).

use super::memo::{KeyHasher, Memo};
use super::{tbo, BuildHasherDefault, Busy, FastScenario, HashMap, Setting, NCAT};

/// Tokens between knots: round contexts (multiples of 8: 1000, 4096, 32768) are knots, played.
pub(super) const KNOT: u64 = 8;

/// How far (µs, the two micro-batch passes' context ops together, each weighed by its count
/// per pass) a row's context prices may lie off the line through its knots' and still be
/// interpolated: the output's last digit.
const AFFINE_US: f64 = 1e-3;

/// Knot plays kept per thread before they are all dropped: a sweep moves along its context
/// axis, each setting's rows reading the knot its last call played and the ones after it, and
/// along its batch axis does not come back; so dropping them loses at most a knot per setting.
const KNOTS_MAX: usize = 1 << 10;

/// (batch, collectives id, graphs, overhead's bits, context).
pub(super) type KnotKey = (u32, u64, bool, u64, u64);

/// A context played: its window and busy time, and per micro-batch its context prices (empty
/// for an empty micro-batch).
pub(super) struct KnotPlay {
    window: f64,
    busy: Busy,
    us: [Box<[f64]>; 2],
}

pub(super) type KnotPlays = HashMap<KnotKey, KnotPlay, BuildHasherDefault<KeyHasher>>;

/// What a row needs.
#[derive(Clone, Copy)]
enum Need {
    /// Its own play.
    Play(u64),
    /// Its knots' plays, where its prices lie on the line through theirs.
    Between(u64, u64),
}

impl Need {
    fn of(c: u64) -> Self {
        let k0 = c - c % KNOT;
        if k0 == c || k0 == 0 {
            Need::Play(c)
        } else {
            Need::Between(k0, k0 + KNOT)
        }
    }
}

impl FastScenario {
    /// The two-batch-overlap step at `W` contexts of one batch under `set` (`overhead` µs added
    /// to each step's end idle): per context, (window µs, busy per category), by the rule of
    /// this module.
    pub(super) fn tbo_rows<const W: usize>(
        &self,
        m: &mut Memo,
        fit: &tbo::TboFit,
        batch: u32,
        contexts: [u64; W],
        set: Setting<'_>,
        overhead: f64,
    ) -> [(f64, Busy); W] {
        let drawn = m.draw.is_some();
        if drawn || m.knots.len() > KNOTS_MAX {
            m.knots.clear();
        }
        let key = |c: u64| (batch, set.coll.id, set.launch.graphs, overhead.to_bits(), c);
        let needs = contexts.map(Need::of);
        let mut want: Vec<u64> = Vec::with_capacity(2 * W);
        for n in &needs {
            match *n {
                Need::Play(c) => want.push(c),
                Need::Between(a, b) => want.extend([a, b]),
            }
        }
        want.sort_unstable();
        want.dedup();
        want.retain(|&c| !m.knots.contains_key(&key(c)));
        // Consecutive contexts (a sweep along its context axis): the next knots come next.
        let dense = W > 1
            && contexts
                .windows(2)
                .all(|p| p[1] > p[0] && p[1] - p[0] < KNOT);
        if dense && !drawn && !want.is_empty() && want.len() < W {
            let last = *want.last().expect("not empty");
            want.extend((1..=(W - want.len()) as u64).map(|i| last + i * KNOT));
        }
        self.play_contexts(m, fit, batch, &want, set, overhead);
        // Rows whose prices leave the line through their knots' are played.
        let mut us = Vec::new();
        let mut off = Vec::new();
        for (j, n) in needs.iter().enumerate() {
            if let Need::Between(a, b) = *n {
                let c = contexts[j];
                if !self.on_line(m, batch, (c, a, b), &key, set, &mut us) && !off.contains(&c) {
                    off.push(c);
                }
            }
        }
        off.retain(|&c| !m.knots.contains_key(&key(c)));
        self.play_contexts(m, fit, batch, &off, set, overhead);
        let out = std::array::from_fn(|j| {
            let c = contexts[j];
            if let Some(p) = m.knots.get(&key(c)) {
                return (p.window, p.busy);
            }
            let Need::Between(a, b) = needs[j] else {
                unreachable!("a played context is kept above")
            };
            let (p0, p1) = (&m.knots[&key(a)], &m.knots[&key(b)]);
            let t = (c - a) as f64 / (b - a) as f64;
            let lerp = |x: f64, y: f64| x + (y - x) * t;
            let mut busy = [0.0; NCAT];
            for (i, v) in busy.iter_mut().enumerate() {
                *v = lerp(p0.busy[i], p1.busy[i]);
            }
            (lerp(p0.window, p1.window), busy)
        });
        if drawn {
            m.knots.clear();
        }
        out
    }

    /// Plays `cs` (contexts of `batch`), eight side by side while as many are left, and keeps
    /// each one's window, busy time and context prices.
    fn play_contexts(
        &self,
        m: &mut Memo,
        fit: &tbo::TboFit,
        batch: u32,
        cs: &[u64],
        set: Setting<'_>,
        overhead: f64,
    ) {
        const W: usize = 8;
        let mut rest = cs;
        while !rest.is_empty() {
            let played: Vec<(u64, (f64, Busy))> = if rest.len() >= W / 2 {
                // The last context stands in for the lanes past the end.
                let lanes: [u64; W] = std::array::from_fn(|j| rest[j.min(rest.len() - 1)]);
                let out = self.tbo_step_lanes(m, fit, batch, lanes, set, overhead);
                let n = rest.len().min(W);
                lanes.into_iter().zip(out).take(n).collect()
            } else {
                let [one] = self.tbo_step_lanes(m, fit, batch, [rest[0]], set, overhead);
                vec![(rest[0], one)]
            };
            rest = &rest[played.len()..];
            for (c, (window, busy)) in played {
                let us = self.micro_prices(m, batch, c, set.launch.graphs);
                let key = (batch, set.coll.id, set.launch.graphs, overhead.to_bits(), c);
                m.knots.insert(key, KnotPlay { window, busy, us });
            }
        }
    }

    /// Per micro-batch of `batch`, its context prices at `context` (empty for an empty
    /// micro-batch, or where the pass is not priced at that size).
    fn micro_prices(
        &self,
        m: &mut Memo,
        batch: u32,
        context: u64,
        graphs: bool,
    ) -> [Box<[f64]>; 2] {
        let mut v = Vec::new();
        tbo::micro_batches(batch).map(|b| {
            if b > 0
                && self
                    .context_prices(m, &self.target, (b, context), graphs, &mut v)
                    .is_some()
            {
                v.clone().into_boxed_slice()
            } else {
                Box::default()
            }
        })
    }

    /// Whether the context prices of row `c` lie on the line through those of its knots `a`
    /// and `b` (kept in `m.knots`), within [`AFFINE_US`] over both micro-batch passes.
    fn on_line(
        &self,
        m: &mut Memo,
        batch: u32,
        (c, a, b): (u64, u64, u64),
        key: &impl Fn(u64) -> KnotKey,
        set: Setting<'_>,
        us: &mut Vec<f64>,
    ) -> bool {
        let t = (c - a) as f64 / (b - a) as f64;
        let mut off = 0.0;
        for (k, size) in tbo::micro_batches(batch).into_iter().enumerate() {
            if size == 0 {
                continue;
            }
            let graphs = set.launch.graphs;
            let Some(regime) = self.context_prices(m, &self.target, (size, c), graphs, us) else {
                return false;
            };
            let (p0, p1) = (&m.knots[&key(a)].us[k], &m.knots[&key(b)].us[k]);
            if p0.len() != us.len() || p1.len() != us.len() {
                return false;
            }
            for (&j, &(_, repeat)) in regime.context_from.iter().zip(&regime.context_busy) {
                let line = p0[j] + (p1[j] - p0[j]) * t;
                off += repeat * (us[j] - line).abs();
            }
        }
        // NaN (a price that failed) is not on the line.
        off <= AFFINE_US
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::deployment::EpComm;
    use crate::sim::fast::{Collectives, Launch};
    use crate::sim::ScenarioRequest;

    /// The overlap fit of a two-batch-overlap scenario.
    fn tbo_fit(fast: &FastScenario) -> &tbo::TboFit {
        match &fast.mode {
            crate::sim::fast::Mode::TwoBatchOverlap(fit) => fit,
            _ => panic!("two-batch overlap"),
        }
    }

    /// DeepSeek-V3 with data-parallel attention over 16 H200s and two-batch overlap (the
    /// benchmark's grid), `layers` deep: the fast scenario, its launch and collectives.
    fn deepseek_dp16(batch: u32, layers: usize) -> (FastScenario, Launch, Collectives) {
        let mut req = ScenarioRequest {
            model: "deepseek-v3".into(),
            system: "h200-hgx-2node-ib".into(),
            tp: Some(1),
            batch,
            context: 1024,
            cuda_graphs: true,
            layers: Some(layers),
            ..ScenarioRequest::default()
        };
        req.dp = Some(16);
        req.comm.ep_comm = EpComm::RdmaLl;
        req.tbo = true;
        let (s, p) = req.load().expect("scenario");
        let fast = FastScenario::new(&s, &p, None).expect("fitted");
        let launch = Launch::new(&p, s.cuda_graphs);
        let coll = Collectives::new(&s, &p).expect("collectives");
        (fast, launch, coll)
    }

    /// The step played at `c` itself (no knots).
    fn played(fast: &FastScenario, batch: u32, c: u64, set: Setting<'_>) -> (f64, Busy) {
        let fit = tbo_fit(fast);
        let [one] = fast.with_memo(|m| fast.tbo_step_lanes(m, fit, batch, [c], set, 0.0));
        one
    }

    /// Rows between knots are their knots' plays interpolated, which here (no branch change of
    /// the recursion between knots) is the row's own play to a billionth; knots, and rows whose attention price jumps between their knots (a
    /// split of the KV length at 1024 tokens here), are played: the same bits.
    #[test]
    fn rows_between_knots_follow_their_own_plays() {
        let contexts: Vec<u64> = (1001..=1040).collect();
        let (mut interpolated, mut played_off_line, mut knots) = (0, 0, 0);
        for batch in [9u32, 64, 233] {
            let (fast, launch, coll) = deepseek_dp16(batch, 12);
            let set = Setting {
                launch: &launch,
                coll: &coll,
            };
            let mut rows = Vec::new();
            for lanes in contexts.chunks_exact(8) {
                let lanes: [u64; 8] = lanes.try_into().expect("8 contexts");
                rows.extend(fast.step_us_busy_lanes(batch, lanes, &launch, &coll));
            }
            let fit = tbo_fit(&fast);
            let key = |c: u64| (batch, coll.id, launch.graphs, 0f64.to_bits(), c);
            for (&c, row) in contexts.iter().zip(&rows) {
                let own = played(&fast, batch, c, set);
                let between = match Need::of(c) {
                    Need::Play(_) => None,
                    Need::Between(a, b) => Some((a, b)),
                };
                let on_line = between.is_some_and(|(a, b)| {
                    fast.with_memo(|m| {
                        fast.play_contexts(m, fit, batch, &[a, b], set, 0.0);
                        fast.on_line(m, batch, (c, a, b), &key, set, &mut Vec::new())
                    })
                });
                if on_line {
                    interpolated += 1;
                    // No branch change between these knots: the line is the play (measured 1.5e-11
                    // at most; a step of the slope per token, 0.07 µs on 20 ms, would be 3e-6).
                    let err = (row.0 - own.0).abs() / own.0;
                    assert!(
                        err < 1e-9,
                        "batch {batch} context {c}: {} vs {}",
                        row.0,
                        own.0
                    );
                    for (r, o) in row.1.iter().zip(&own.1) {
                        assert!((r - o).abs() <= 1e-9 * o.abs(), "{c}: {r} vs {o}");
                    }
                } else {
                    if between.is_some() {
                        played_off_line += 1;
                    } else {
                        knots += 1;
                    }
                    assert_eq!(
                        row.0.to_bits(),
                        own.0.to_bits(),
                        "batch {batch} context {c}"
                    );
                    assert_eq!(row.1, own.1);
                }
                // Alone, the row reads the same.
                let alone = fast.step_us_busy(batch, c, &launch, &coll);
                assert_eq!(
                    alone.0.to_bits(),
                    row.0.to_bits(),
                    "batch {batch} context {c}"
                );
                assert_eq!(alone.1, row.1);
            }
        }
        // 1017..=1023 lie between the knots 1016 and 1024, across the attention's jump.
        assert_eq!(played_off_line, 3 * 7, "rows across a price breakpoint");
        assert_eq!(knots, 3 * 5);
        assert_eq!(interpolated, 3 * 40 - 21 - 15);
    }

    /// A row's value does not depend on the rows around it: lanes that start anywhere, or a
    /// grid that skips contexts, read what the row alone reads.
    #[test]
    fn a_row_reads_the_same_in_any_grid() {
        let batch = 31;
        let (fast, launch, coll) = deepseek_dp16(batch, 6);
        let alone: Vec<(f64, Busy)> = (2000..2030)
            .map(|c| fast.step_us_busy(batch, c, &launch, &coll))
            .collect();
        fast.clear_memo();
        for start in [2000u64, 2003, 2013] {
            let lanes: [u64; 8] = std::array::from_fn(|j| start + j as u64);
            let rows = fast.step_us_busy_lanes(batch, lanes, &launch, &coll);
            for (c, row) in lanes.iter().zip(&rows) {
                let a = &alone[(c - 2000) as usize];
                assert_eq!(row.0.to_bits(), a.0.to_bits(), "context {c} from {start}");
                assert_eq!(row.1, a.1);
            }
        }
        let sparse: [u64; 4] = [2001, 2009, 2011, 2027];
        let rows = fast.step_us_busy_lanes(batch, sparse, &launch, &coll);
        for (c, row) in sparse.iter().zip(&rows) {
            assert_eq!(row.0.to_bits(), alone[(c - 2000) as usize].0.to_bits());
        }
    }

    /// Where the recursion changes branch between two knots (DeepSeek-V3 DP16, full depth, on the
    /// benchmark's context range: the branch points move as prices change, so the test looks for
    /// them, batch after batch), the line misses the kink by less than a ten-thousandth of the
    /// step, and every row elsewhere is its own play.
    #[test]
    fn a_kink_between_knots_costs_under_a_ten_thousandth() {
        let (mut worst, mut kinks): (f64, usize) = (0.0, 0);
        for batch in [246, 200, 151, 97] {
            let (fast, launch, coll) = deepseek_dp16(batch, 61);
            let set = Setting {
                launch: &launch,
                coll: &coll,
            };
            for knot in (1000..4992u64).step_by(8) {
                let mut cell: f64 = 0.0;
                for c in knot + 1..knot + 8 {
                    let row = fast.step_us_busy(batch, c, &launch, &coll).0;
                    let own = played(&fast, batch, c, set).0;
                    cell = cell.max((row - own).abs() / own);
                }
                kinks += usize::from(cell > 1e-5);
                worst = worst.max(cell);
            }
            if kinks > 0 {
                break;
            }
        }
        assert!(kinks > 0, "no kink found any more: {worst:e}");
        assert!(worst < 1e-4, "{worst:e}");
    }

    /// The benchmark's grid (`benches/sweep_cpu.sh`'s tbo16: DeepSeek-V3 DP16, batch 2..=251 ×
    /// context 1000..=4999, 10^6 rows) as a sweep reads it against every row played: the share
    /// of rows whose step time prints the same (three decimals) and the worst relative
    /// difference: 99.8% and 8.3e-5. Takes about half a minute in a release build:
    /// `cargo test --release --lib benchmark_grid -- --ignored`.
    #[test]
    #[ignore]
    fn benchmark_grid_against_every_row_played() {
        let (fast, launch, coll) = deepseek_dp16(2, 61);
        let set = Setting {
            launch: &launch,
            coll: &coll,
        };
        let fit = tbo_fit(&fast);
        let (mut same, mut rows, mut worst) = (0u64, 0u64, 0f64);
        for batch in 2..=251u32 {
            for first in (1000..5000u64).step_by(8) {
                let lanes: [u64; 8] = std::array::from_fn(|j| first + j as u64);
                let read = fast.step_us_busy_lanes(batch, lanes, &launch, &coll);
                let own = fast.with_memo(|m| fast.tbo_step_lanes(m, fit, batch, lanes, set, 0.0));
                for (r, o) in read.iter().zip(&own) {
                    rows += 1;
                    same += u64::from(format!("{:.3}", r.0) == format!("{:.3}", o.0));
                    worst = worst.max((r.0 - o.0).abs() / o.0);
                }
            }
        }
        let share = same as f64 / rows as f64;
        assert_eq!(rows, 1_000_000);
        // The figures the docs cite (a change of the model that moves them fails here).
        assert!(
            (share * 1000.0).round() == 998.0 && (worst * 1e6).round() == 83.0,
            "{:.2}% print the same step time, worst {worst:.3e}",
            share * 100.0
        );
    }
}

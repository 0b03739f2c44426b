//! The windows of a step's loaded ops (between two collectives, the repeated layers unrolled)
//! and the expected slowest rank of each: the loaded ops scaled to it (`slowest_rank`), the
//! windows whose part follows uneven DP ranks' attention (`Coupled`) and the step's tail at the
//! mean rank (`Tail`).

use super::{Draws, EpShape, ExpertBytes};
use crate::sim::fast::basis::{Group, Kind, OpT, Regime};
use crate::sim::fast::{Busy, Coef};

/// A window's loaded ops (between two collectives) at the mean rank, by the layer they are of:
/// the first layer's, and the next layer's where the window runs into it (each layer draws its
/// own routing).
#[derive(Debug, Clone, Default)]
struct WindowLoad {
    layers: [LayerLoad; 2],
    /// Sum of the ops' squared prices (their jitter's variance per kernel CV²).
    q: f64,
}

/// One layer's loaded ops in a window: each expert GEMM's price and bytes, and the price of
/// the others (the activation, `moe_align_block_size`, `moe_sum`), which follow a rank's rows
/// over the rows the expert kernels are priced at.
#[derive(Debug, Clone, Default)]
struct LayerLoad {
    gemms: Vec<(f64, Option<ExpertBytes>)>,
    rows: f64,
}

impl WindowLoad {
    /// A loaded op of layer `part` (0: the window's first, 1: the next) at the mean rank's
    /// price `p`: an expert GEMM with its bytes, or an op that follows the rows.
    fn add(&mut self, op: &OpT, p: f64, part: usize, x: &Coef, rows_mean: f64) {
        let layer = &mut self.layers[part];
        match ExpertBytes::of(op, x, rows_mean) {
            Some(b) => layer.gemms.push((p, Some(b))),
            None if EpShape::is_expert_gemm(&op.template) => layer.gemms.push((p, None)),
            None => layer.rows += p,
        }
    }
}

impl LayerLoad {
    fn sum(&self) -> f64 {
        self.gemms.iter().map(|g| g.0).sum::<f64>() + self.rows
    }
}

impl Draws {
    /// Per draw, the most a rank of the DP ranks with the most sequences and a rank of the
    /// others spend on a window's loaded ops (µs; the second −∞ at an even split). Rank r's
    /// expert GEMM takes its price × (weight · t_r + act · n_r) / (weight · t + act · n) at the
    /// draw's `den` experts t and rows n (the timeline's `rank_scale`), the activation kernels
    /// and the other loaded ops (their rows priced as the activation's) their price × n_r / n.
    fn maxima(&self, win: &WindowLoad) -> Vec<(f64, f64)> {
        let total = win.total();
        let draws = self.t.len() / self.n;
        if total <= 0.0 || draws == 0 {
            return Vec::new();
        }
        let sd = self.kernel_cv * win.q.sqrt() / total;
        let mut out = Vec::with_capacity(draws);
        let split = |k: usize, layer: &LayerLoad| {
            let (td, rd) = self.den[k];
            let (mut w, mut a) = (0.0, layer.rows);
            for &(us, b) in &layer.gemms {
                let phi = b.map_or(0.0, |b| b.weight_share(td, rd));
                w += us * phi;
                a += us * (1.0 - phi);
            }
            // The ops' rows are over `rd`, the rows ratios over the mean.
            let per_row = if rd > 0.0 { a * self.rows_mean / rd } else { a };
            (w, per_row)
        };
        let second = win.layers[1].sum() > 0.0;
        for k in 0..draws {
            let (w, per_row) = split(k, &win.layers[0]);
            // The next layer's ops from the next draw: another layer's routing.
            let k2 = (k + 1) % draws;
            let (w2, per_row2) = if second {
                split(k2, &win.layers[1])
            } else {
                (0.0, 0.0)
            };
            let (at, at2) = (k * self.n, k2 * self.n);
            let (mut full, mut other) = (f64::MIN, f64::MIN);
            for (r, &f) in self.full.iter().enumerate() {
                let (i, j) = (at + r, at2 + r);
                let load = w * self.t[i]
                    + per_row * self.rows[i]
                    + w2 * self.t[j]
                    + per_row2 * self.rows[j];
                let x = self.v[i] * load + sd * load * self.z[i];
                if f {
                    full = full.max(x);
                } else {
                    other = other.max(x);
                }
            }
            out.push((full, other));
        }
        out
    }

    /// The mean over ranks of a window's loaded ops over the priced mean rank's: 1, except
    /// where the expert kernels are priced at a rounded shape of one expert (`den`).
    fn mean_gain(&self, win: &WindowLoad) -> f64 {
        let total = win.total();
        let draws = self.t.len() / self.n;
        if total <= 0.0 || draws == 0 {
            return 1.0;
        }
        let mut sum = 0.0;
        for (k, &(td, rd)) in self.den.iter().enumerate() {
            for (part, layer) in win.layers.iter().enumerate() {
                let (tm, rows) = (self.touched[(k + part) % draws], self.rows_mean);
                for &(us, b) in &layer.gemms {
                    sum += match b {
                        Some(b) => {
                            us * (b.weight * tm + b.act * rows) / (b.weight * td + b.act * rd)
                        }
                        None => us,
                    };
                }
                sum += layer.rows * if rd > 0.0 { rows / rd } else { 1.0 };
            }
        }
        sum / draws as f64 / total
    }
}

impl WindowLoad {
    fn total(&self) -> f64 {
        self.layers[0].sum() + self.layers[1].sum()
    }
}

/// A window whose loaded ops share it with attention at a batch the DP ranks do not split
/// evenly. The fast path plays the attention of the largest DP rank (A); the others attend
/// over (1 − `short`) of it, so the window ends at the latest of A + the loaded ops' maximum
/// over the largest DP ranks' ranks and (1 − short)·A + their maximum over the others: with a
/// few experts per rank the hottest ones may sit on a rank that attends over nothing (Qwen3
/// DP 144 at batch 1: `moe_align_block_size` 6 times the mean rank's on the rank holding the
/// padding rows' experts). Its expectation over the draws is convex and piecewise linear in
/// y = short·A, read from the draws sorted by where each one's maximum changes side.
#[derive(Debug, Clone)]
pub(in crate::sim::fast) struct Coupled {
    /// Loaded ops: (op, its mean-rank µs × its copies in the window × the window's count ÷ its
    /// segment's repeat, the segment's repeat).
    ops: Vec<(usize, f64, f64)>,
    /// Attention (per-sequence) ops and their copies in the window.
    seq: Vec<(usize, f64)>,
    short: f64,
    /// The loaded ops' mean-rank µs in the window.
    mean: f64,
    /// Per draw, (the others' maximum − the largest DP ranks'), ascending, with the sums of the
    /// largest DP ranks' maxima before each and of the others' from each on.
    delta: Vec<f64>,
    full_before: Vec<f64>,
    other_from: Vec<f64>,
}

impl Coupled {
    fn new(
        ops: Vec<(usize, f64, f64)>,
        seq: Vec<(usize, f64)>,
        short: f64,
        mean: f64,
        maxima: &[(f64, f64)],
    ) -> Self {
        let mut m: Vec<(f64, f64)> = maxima.to_vec();
        m.sort_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)));
        let k = m.len();
        let mut full_before = vec![0.0; k + 1];
        let mut other_from = vec![0.0; k + 1];
        for j in 0..k {
            full_before[j + 1] = full_before[j] + m[j].0;
        }
        for j in (0..k).rev() {
            other_from[j] = other_from[j + 1] + m[j].1;
        }
        Coupled {
            ops,
            seq,
            short,
            mean,
            delta: m.iter().map(|x| x.1 - x.0).collect(),
            full_before,
            other_from,
        }
    }

    pub(in crate::sim::fast) fn ops(&self) -> &[(usize, f64, f64)] {
        &self.ops
    }

    /// The window's loaded ops at the slowest rank beyond the largest DP rank's attention,
    /// over their mean-rank µs, with `attention` µs of it: E[max(M_full, M_other − y)] / mean.
    fn gain(&self, attention: f64) -> f64 {
        let k = self.delta.len();
        if k == 0 || self.mean <= 0.0 {
            return 1.0;
        }
        let y = self.short * attention;
        let j = self.delta.partition_point(|&d| d <= y);
        (self.full_before[j] + self.other_from[j] - (k - j) as f64 * y) / k as f64 / self.mean
    }

    /// Adds the window's loaded ops' share of their slowest-rank µs to `d` (op-major, `lanes`
    /// lanes, this lane's attention read from it) and returns the µs it added per category, each
    /// op counted over its segment's repeats.
    pub(in crate::sim::fast) fn apply(
        windows: &[Coupled],
        regime: &Regime,
        d: &mut [f64],
        lanes: usize,
        lane: usize,
        busy: &mut Busy,
    ) {
        for c in windows {
            let attention: f64 = c.seq.iter().map(|&(i, n)| d[i * lanes + lane] * n).sum();
            let g = c.gain(attention);
            for &(i, weight, repeat) in &c.ops {
                d[i * lanes + lane] += g * weight;
                busy[regime.ops[i].category.index()] += g * weight * repeat;
            }
        }
    }
}

/// Scales the loaded ops of `regime` in `us` (µs per op, the token-dependent ones priced at
/// the mean rank, basis `x`) to the expected slowest rank of each window between collectives.
/// Returns the loaded ops' excess over the mean rank, and the windows that share their time
/// with uneven DP ranks' attention (`Coupled`), whose part the play adds once the attention is
/// priced, with the step's tail.
///
/// The step's tail (after its last collective) is the mean rank's: each rank's step ends with
/// its own last kernel and the step time is the mean over ranks of their windows
/// (`Timeline::step_time_us`), so its loaded ops keep their mean-rank price and its attention
/// and sampling take the mean of the DP ranks' shares (`Tail`).
///
/// A window is the loaded ops the ranks run between two collectives in the step as played, the
/// repeated layers unrolled: a layer whose loaded ops run past its last collective (the expert
/// kernels of a MoE layer with no combine after them) shares that window with the loaded ops
/// of the next layer before its first collective. Each op takes the mean of the gains of the
/// windows its copies fall in.
pub(in crate::sim::fast) fn slowest_rank(
    regime: &Regime,
    us: &mut [f64],
    x: &Coef,
    d: &Draws,
) -> (Box<[f64]>, Vec<Coupled>, Tail) {
    let repeat_of: Vec<f64> = {
        let mut r = vec![1.0; us.len()];
        for seg in &regime.segments {
            r[seg.start..seg.end].fill(seg.repeat.max(1) as f64);
        }
        r
    };
    let mut gains = Gains::new(us.len());
    let at = Windows {
        regime,
        x,
        d,
        repeat_of: &repeat_of,
    };
    let open = walk_windows(regime, |window, times| gains.flush(&at, us, window, times));
    let tail = Tail(
        open.iter()
            .filter(|&&(i, ..)| per_sequence(regime, i) && d.short > 0.0)
            .map(|&(i, ..)| (i, d.mean_share(), repeat_of[i]))
            .collect(),
    );
    gains.close_tail(&at, us, &open);
    let mut excess = vec![0.0; us.len()].into_boxed_slice();
    for i in 0..us.len() {
        if regime.ops[i].loaded {
            let mean = us[i];
            us[i] = mean * gains.gain_sum[i] / repeat_of[i];
            excess[i] = mean * (gains.excess_sum[i] / repeat_of[i] - 1.0);
        }
    }
    (excess, gains.coupled, tail)
}

/// An op of a window: (op, its copies in the window, its layer: 0 the window's first, 1 the
/// next one's, drawn apart).
type WindowOp = (usize, f64, usize);

/// What the windows are read from: the regime, the basis its ops were priced at, the draws of
/// the ranks' loads, and each op's segment's repeat.
struct Windows<'a> {
    regime: &'a Regime,
    x: &'a Coef,
    d: &'a Draws,
    repeat_of: &'a [f64],
}

/// Whether op `i` of `regime` follows its DP rank's sequences (attention, the KV-cache write,
/// sampling).
fn per_sequence(regime: &Regime, i: usize) -> bool {
    matches!(regime.ops[i].kind, Kind::Kernel { .. })
        && crate::workload::parallel::per_sequence(&regime.ops[i].template)
}

/// Walks the step as played, the repeated layers unrolled, and hands each window of loaded
/// and per-sequence ops to `flush` with how many times it occurs; returns the window still
/// open at the step's end (its tail). A layer whose loaded ops run past its last collective
/// shares that window with the next layer's before its first collective.
fn walk_windows(regime: &Regime, mut flush: impl FnMut(&[WindowOp], f64)) -> Vec<WindowOp> {
    let collective = |i: &usize| matches!(regime.ops[*i].kind, Kind::Collective { .. });
    let kept = |i: &usize| regime.ops[*i].loaded || per_sequence(regime, *i);
    let mut open: Vec<WindowOp> = Vec::new();
    for seg in &regime.segments {
        let range = seg.start..seg.end;
        let repeat = seg.repeat.max(1) as f64;
        let Some(first) = range.clone().find(collective) else {
            // No collective: every copy's ops join the open window.
            open.extend(range.filter(kept).map(|i| (i, repeat, 0)));
            continue;
        };
        let last = range.clone().rfind(collective).unwrap_or(first);
        let head: Vec<WindowOp> = (seg.start..first)
            .filter(kept)
            .map(|i| (i, 1.0, 1))
            .collect();
        let tail: Vec<WindowOp> = (last + 1..seg.end)
            .filter(kept)
            .map(|i| (i, 1.0, 0))
            .collect();
        // The first copy's head closes the window before it; every later copy's head closes
        // the one its previous copy's tail opened.
        open.extend(head.iter().copied());
        flush(&open, 1.0);
        let mut inner: Vec<WindowOp> = Vec::new();
        for i in first + 1..=last {
            if collective(&i) {
                flush(&inner, repeat);
                inner.clear();
            } else if kept(&i) {
                inner.push((i, 1.0, 0));
            }
        }
        let mut wrap = tail.clone();
        wrap.extend(head.iter().copied());
        flush(&wrap, repeat - 1.0);
        open = tail;
    }
    open
}

/// Each loaded op's gains summed over the windows its copies fall in: to the expected slowest
/// rank (`gain_sum`; windows coupled with uneven DP ranks' attention apart, in `coupled`), and
/// the excess's (`excess_sum`: coupled windows at no attention, their maximum over all ranks).
struct Gains {
    gain_sum: Vec<f64>,
    excess_sum: Vec<f64>,
    coupled: Vec<Coupled>,
}

impl Gains {
    fn new(ops: usize) -> Self {
        Gains {
            gain_sum: vec![0.0; ops],
            excess_sum: vec![0.0; ops],
            coupled: Vec::new(),
        }
    }

    /// A window (`us`: the ops' mean-rank µs) that occurs `times` times: its loaded ops' load,
    /// its expected maximum over ranks per draw, and each op's gain.
    fn flush(&mut self, at: &Windows<'_>, us: &[f64], window: &[WindowOp], times: f64) {
        let Windows {
            regime,
            x,
            d,
            repeat_of,
        } = *at;
        let loaded: Vec<WindowOp> = window
            .iter()
            .copied()
            .filter(|&(i, ..)| regime.ops[i].loaded)
            .collect();
        if loaded.is_empty() || times == 0.0 {
            return;
        }
        let mut load = WindowLoad::default();
        for &(i, copies, part) in &loaded {
            let p = us[i] * copies;
            load.add(&regime.ops[i], p, part, x, d.rows_mean);
            load.q += p * us[i];
        }
        let seq: Vec<(usize, f64)> = window
            .iter()
            .filter(|&&(i, ..)| per_sequence(regime, i))
            .map(|&(i, copies, _)| (i, copies))
            .collect();
        let maxima = d.maxima(&load);
        let total = load.total();
        let all = if maxima.is_empty() || total <= 0.0 {
            1.0
        } else {
            maxima.iter().map(|m| m.0.max(m.1)).sum::<f64>() / maxima.len() as f64 / total
        };
        for &(i, copies, _) in &loaded {
            self.excess_sum[i] += all * copies * times;
        }
        if d.short > 0.0 && !seq.is_empty() && !maxima.is_empty() {
            let ops = loaded
                .iter()
                .map(|&(i, copies, _)| (i, us[i] * copies * times / repeat_of[i], repeat_of[i]))
                .collect();
            self.coupled
                .push(Coupled::new(ops, seq, d.short, total, &maxima));
        } else {
            for &(i, copies, _) in &loaded {
                self.gain_sum[i] += all * copies * times;
            }
        }
    }

    /// The step's tail (`open` at its end): its loaded ops at the mean rank's load; no
    /// collective closes it, so no straggler wait shares a spread with their excess.
    fn close_tail(&mut self, at: &Windows<'_>, us: &[f64], open: &[WindowOp]) {
        let (regime, d) = (at.regime, at.d);
        let mut load = WindowLoad::default();
        for &(i, copies, part) in open.iter().filter(|&&(i, ..)| regime.ops[i].loaded) {
            load.add(&regime.ops[i], us[i] * copies, part, at.x, d.rows_mean);
        }
        let mean = d.mean_gain(&load);
        for &(i, copies, _) in open.iter().filter(|&&(i, ..)| regime.ops[i].loaded) {
            self.gain_sum[i] += mean * copies;
            self.excess_sum[i] += copies;
        }
    }
}

/// The attention and sampling of the step's tail, each (op, the mean over ranks of their DP
/// rank's share of the largest's sequences, its segment's repeat): the fast path prices them at
/// the largest DP rank.
#[derive(Debug, Clone, Default)]
pub(in crate::sim::fast) struct Tail(Vec<(usize, f64, f64)>);

impl Tail {
    /// Scales this lane's tail ops in `d` (op-major, `lanes` lanes; token-dependent ones read
    /// afresh from `tokens_us`, the others as written for the lane) and adds the change to
    /// `busy`.
    pub(in crate::sim::fast) fn apply(
        &self,
        regime: &Regime,
        tokens_us: &[f64],
        d: &mut [f64],
        (lanes, lane): (usize, usize),
        busy: &mut Busy,
    ) {
        for &(i, share, repeat) in &self.0 {
            let at = i * lanes + lane;
            let full = if regime.ops[i].group == Group::Tokens {
                tokens_us[i]
            } else {
                d[at]
            };
            d[at] = full * share;
            busy[regime.ops[i].category.index()] += (share - 1.0) * full * repeat;
        }
    }

    pub(in crate::sim::fast) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

//! Expert parallelism (`--ep`) and data-parallel attention (`--dp`, wide EP) on the fast path.
//!
//! Under expert parallelism the ranks do not play the same step: each rank's routed-expert
//! kernels follow the tokens its own experts got in that layer (`workload::parallel`, the
//! timeline's `Op::rank_scale`), and the ranks meet at the next collective, so the slowest
//! rank sets the pace. With data-parallel attention every rank also runs the GEMMs of the
//! largest DP rank's tokens (vLLM pads them to the most across DP ranks), and attention follows
//! its own DP rank's sequences; the largest DP rank's attention is the slowest, and that is the
//! step the workload builder writes down at the scenario's batch split (`dp_rank_scenario`).
//!
//! So the fast path plays the slowest rank between collectives:
//! - op shapes are probed at batches that split evenly over the DP ranks (each DP rank gets the
//!   probe's batch), so that they are linear in the DP rank's own variables (sequences, tokens,
//!   padded rows, the all-to-all's slice of them) and in the experts touched by all DP ranks'
//!   tokens together; a scenario is then played at its largest DP rank's share;
//! - the ops the timeline scales per rank (`loaded`) take, window by window (the loaded ops
//!   the ranks run between two collectives, the repeated layers unrolled, so that a MoE layer
//!   with no combine shares its expert kernels' window with the next layer's
//!   `moe_align_block_size`, drawn from that layer's own routing), the expected maximum over
//!   ranks of their summed time: rank r's expert GEMM takes its price × (weight·t_r +
//!   act·n_r) / (weight·t + act·n), t_r experts with tokens and n_r rows on rank r, t and n the
//!   mean rank's, or the rounded shape's where that rounds to no expert (the timeline's thin
//!   case: priced at one expert, each rank scaled from it); the other loaded ops follow the
//!   rows. The weight bytes per expert are read off the shape, not the fitted coefficient of
//!   the experts touched (`ExpertBytes`). The maximum is averaged over seeded draws of the
//!   scenario's routing model at the step's real and padding rows (`routing::sample_padded`,
//!   placed by `parallel::ep_rank_rows`, EPLB included), once per batch. With jitter on, each
//!   draw also carries every rank's speed skew and its kernels' jitter, so the loaded ops add
//!   nothing to the straggler spread (the maximum already holds it); the loaded ops' excess
//!   over the mean rank and the straggler wait of the rest of the window are combined at the
//!   closing collective as two spreads of the same ranks (root of the sum of squares, exact
//!   for normal spreads: `replay::step`);
//! - at a batch the DP ranks do not split evenly, a window that holds attention keeps the
//!   maximum over the largest DP ranks' ranks and over the others apart, and ends at the later
//!   of the two, each with its own attention (`Coupled`, added per context);
//! - the step's tail, after its last collective, is the mean rank's (the step time is the mean
//!   over ranks of their windows), its attention and sampling at the mean DP rank's share
//!   (`Tail`);
//! - the expert GEMMs are priced at each rounded mean of experts with tokens per rank the draws
//!   meet (the MoE tables are read at it), their weight bytes at the draws' mean experts with
//!   tokens, weighed by its share of the draws;
//! - the dispatch and combine sync the whole EP group: their straggler wait is over DP × TP
//!   ranks and the path since that group last met, less what the TP groups' own collectives
//!   already waited (`State::carry`).
//!
//! Left out (measured by tests/fast_dp.rs): the attention's own jitter in a window it shares
//! with the loaded ops, and each rank's speed skew across a window that runs into the next
//! layer is its first layer's draw's.

use super::basis::{dot, round_u64, Group, Kind, OpT, Regime};
use super::{Busy, CalibrationProfile, Coef, CostFamily, Op, Scenario, Workload};
use crate::workload::routing::{self, Resolved};
use rand::Rng;

/// The expert-parallel layout of a scenario, as the fit and the play need it.
#[derive(Debug, Clone)]
pub(super) struct EpShape {
    /// Ranks of the expert-parallel group.
    pub(super) n: u32,
    /// Data-parallel ranks (1: off).
    pub(super) dp: u32,
    /// Redundant experts (EPLB replicas).
    pub(super) redundant: u32,
    /// TP size when the MoE layers dispatch and combine by all-to-all (each rank sends its
    /// 1/TP slice of its DP rank's padded rows), else 0.
    pub(super) slice_tp: u64,
    /// Routed rows of the whole EP group per padded row of one DP rank (top-k × DP: every DP
    /// rank runs the padded rows of the largest, `workload::sample_routing`), where their mean
    /// over the `n` ranks is not always whole (a multiple of `n` otherwise: 0).
    pub(super) rows_per_padded: u64,
    /// Routed rows of the whole EP group per padded row of one DP rank (top-k × DP), always.
    pub(super) routed_per_padded: u64,
}

impl EpShape {
    pub(super) fn of(s: &Scenario) -> Option<Self> {
        let n = s.layout.ep_size();
        let moe = s.model.moe.as_ref()?;
        let rows = moe.top_k.min(moe.n_routed_experts) as u64 * s.layout.dp_size() as u64;
        (n > 1).then(|| EpShape {
            n,
            rows_per_padded: if rows.is_multiple_of(n as u64) {
                0
            } else {
                rows
            },
            routed_per_padded: rows,
            dp: s.layout.dp_size(),
            redundant: s.layout.redundant(),
            slice_tp: if s.comm.ep_comm.is_all_to_all() {
                s.layout.tp.max(1) as u64
            } else {
                0
            },
        })
    }

    /// The all-to-all slice of `padded` rows (0 without an all-to-all).
    pub(super) fn slice(&self, padded: u64) -> f64 {
        if self.slice_tp > 0 {
            padded.div_ceil(self.slice_tp) as f64
        } else {
            0.0
        }
    }

    /// The rounding the expert kernels' rows take at `padded` rows per DP rank: their m is
    /// the mean rows over the EP ranks, rounded (`parallel::expert_parallel`:
    /// `rows_mean.round()`), which is not linear in the rows once EP exceeds top-k × DP
    /// (TP 16 × EP 16: half a row at an odd count). The basis carries round(mean) − mean,
    /// computed as the builder computes the mean (the routed rows summed, over the ranks),
    /// so that the rounded m is linear in it and the padded rows; 0 where the mean is whole.
    pub(super) fn rounding(&self, padded: u64) -> f64 {
        if self.rows_per_padded == 0 {
            return 0.0;
        }
        let mean = (self.rows_per_padded * padded) as f64 / self.n as f64;
        // At least one row where there are any (`parallel::expert_parallel`'s thin case).
        mean.round().max(1.0) - mean
    }

    /// Whether `padded` rows per DP rank leave fewer than one routed row per EP rank on
    /// average: the timeline then prices the expert kernels at one row of one expert with each
    /// rank's work scaled from that shape (`parallel::expert_parallel`'s thin case), which the
    /// fitted loads (ratios to the mean rank) do not follow.
    pub(super) fn thin(&self, padded: u64) -> bool {
        self.routed_per_padded * padded < self.n as u64
    }

    /// Whether some row count has a rounding (the fit then probes odd row counts as well).
    pub(super) fn rounds(&self) -> bool {
        self.rows_per_padded > 0
    }

    /// A routed-expert GEMM (its `shape.batch` counts experts with tokens).
    pub(super) fn is_expert_gemm(op: &Op) -> bool {
        matches!(
            op.family,
            CostFamily::MoeGemmBf16 | CostFamily::MoeGemmInt4 | CostFamily::MoeGemmFp8
        )
    }

    /// A probe's workload made linear in the basis: each expert GEMM's `shape.batch` (the
    /// rounded mean over ranks of the experts each holds with tokens) set to that sum over
    /// ranks, the experts touched plus the replicas (every replica EPLB adds goes to an expert
    /// with tokens, and each of its replicas gets a share of them), which `OpT::batch_div`
    /// divides back.
    pub(super) fn probe(&self, w: &mut Workload) {
        for op in w.ops.iter_mut() {
            if op.layer >= 0 && !op.rank_scale.is_empty() && Self::is_expert_gemm(op) {
                let touched = w
                    .experts_touched
                    .get(op.layer as usize)
                    .copied()
                    .unwrap_or(0);
                op.shape.batch = touched as u64 + self.redundant as u64;
            }
        }
    }
}

/// Draws of the ranks' expert loads, and what is needed to make them.
#[derive(Debug, Clone)]
pub(super) struct EpLoads {
    resolved: Resolved,
    experts: usize,
    top_k: usize,
    n: usize,
    redundant: usize,
    /// Half-width of a rank's speed skew (rank_skew_cv × √3), and a kernel's jitter (CV);
    /// both 0 with jitter off.
    skew: f64,
    kernel_cv: f64,
    /// TP and DP sizes: rank r is of DP rank r / TP.
    tp: usize,
    dp: u32,
}

/// Routed rows the draws of one batch may sample in all (bounds the cost per batch: about a
/// millisecond), and the least and most layer draws.
const DRAW_BUDGET: u64 = 1 << 20;
const MIN_DRAWS: u64 = 64;
const MAX_DRAWS: u64 = 2048;
/// The same where each rank holds more than two experts: its load is the sum of several
/// experts' and settles in fewer draws (a sixteenth of the cost per batch).
const DRAW_BUDGET_MANY: u64 = 1 << 16;
const MAX_DRAWS_MANY: u64 = 512;

/// The ranks' loads in `k` layer draws, each relative to what its draw's expert kernels are
/// priced at.
#[derive(Debug, Clone)]
pub(super) struct Draws {
    n: usize,
    /// Per draw × rank: experts with tokens over the draw's `den` experts, rows over the mean
    /// rows, the rank's speed, a standard normal (its kernels' jitter).
    t: Vec<f64>,
    rows: Vec<f64>,
    v: Vec<f64>,
    z: Vec<f64>,
    kernel_cv: f64,
    /// Per draw: the mean over ranks of the experts each holds with tokens, rounded, at least
    /// one (the expert GEMMs' `shape.batch`, which the MoE tables are read at).
    rounded: Vec<u64>,
    /// Per draw: the mean over ranks of the experts each holds with tokens (the expert GEMMs'
    /// weight bytes follow it).
    touched: Vec<f64>,
    /// Per draw: the experts and rows a rank's expert kernels are scaled from. The mean rank's,
    /// except where it rounds to no expert or no row (`parallel::expert_parallel`'s thin case):
    /// the kernels are then priced at the rounded shape (at least one of each), and each rank's
    /// load taken over that shape's.
    den: Vec<(f64, f64)>,
    /// Routed rows per rank on average (the same in every draw: every row is routed).
    rows_mean: f64,
    /// Per rank: whether its DP rank holds the most sequences (every rank at an even split);
    /// the others attend over `1 - short` of the largest DP rank's sequences.
    full: Vec<bool>,
    short: f64,
}

/// One expert GEMM's bytes as the timeline writes them (`parallel::expert_parallel`'s
/// `bytes_of`): `weight` per expert with tokens and `act` per routed row.
#[derive(Debug, Clone, Copy)]
pub(super) struct ExpertBytes {
    pub(super) weight: f64,
    pub(super) act: f64,
    /// The experts with tokens per rank the fitted bytes hold at the basis they were read at.
    pub(super) fitted: f64,
}

impl ExpertBytes {
    /// Read off an expert GEMM's fields at `x` with `rows_mean` routed rows per rank: the
    /// activations from its shape (rows × (k + n) BF16 elements in and out), the weights the
    /// rest of its bytes over the experts with tokens its `shape.batch` holds. Not from the
    /// fitted coefficient of the experts touched: where every expert has tokens at every probe
    /// (wide EP, whose probes split evenly over the DP ranks) that column cannot be told from
    /// the constant, and the fit holds every expert's weights at any basis.
    pub(super) fn of(op: &OpT, x: &Coef, rows_mean: f64) -> Option<Self> {
        if !EpShape::is_expert_gemm(&op.template) || op.batch_div == 1.0 {
            return None;
        }
        let f = &op.fields;
        let act = (round_u64(dot(&f.shape[1], x)) + round_u64(dot(&f.shape[2], x))) as f64
            * crate::workload::builder::ACT_BYTES;
        let fitted = dot(&f.shape[3], x) / op.batch_div;
        let weight = (dot(&f.bytes, x) - act * rows_mean) / fitted;
        (fitted > 0.0 && weight.is_finite() && weight > 0.0).then_some(ExpertBytes {
            weight,
            act,
            fitted,
        })
    }

    /// The weight bytes' share of the kernel's bytes at `t` experts with tokens and `r` rows.
    fn weight_share(&self, t: f64, r: f64) -> f64 {
        let w = self.weight * t;
        let all = w + self.act * r;
        if all > 0.0 {
            w / all
        } else {
            0.0
        }
    }
}

/// Where the expert GEMMs are priced: the rounded experts with tokens per rank (their
/// `shape.batch`), the mean experts with tokens per rank (their weight bytes) and the mean
/// routed rows per rank.
#[derive(Debug, Clone, Copy)]
pub(super) struct ExpertsAt {
    pub(super) rounded: u64,
    pub(super) touched: f64,
    pub(super) rows: f64,
}

/// A window's loaded ops (between two collectives) at the mean rank, by the layer they are of:
/// the first layer's, and the next layer's where the window runs into it (each layer draws its
/// own routing).
#[derive(Debug, Clone, Default)]
pub(super) struct WindowLoad {
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

impl EpLoads {
    pub(super) fn new(s: &Scenario, p: &CalibrationProfile) -> Option<Self> {
        let ep = EpShape::of(s)?;
        let moe = s.model.moe.as_ref()?;
        let v = &p.variability;
        let jitter = s.ranks() > 1;
        Some(EpLoads {
            resolved: routing::resolve(
                &s.routing,
                moe.n_routed_experts,
                moe.top_k,
                s.model.num_layers,
            ),
            experts: moe.n_routed_experts,
            top_k: moe.top_k,
            n: ep.n as usize,
            redundant: ep.redundant as usize,
            tp: s.layout.tp.max(1) as usize,
            dp: ep.dp.max(1),
            skew: if jitter {
                v.rank_skew_cv * 3f64.sqrt()
            } else {
                0.0
            },
            kernel_cv: if jitter { v.kernel_cv } else { 0.0 },
        })
    }

    /// Layer draws at `real` routed tokens and `dummy` padding rows (the timeline's
    /// `sample_padded` arguments), seeded by them: a sweep gives the same rows on any thread.
    /// `batch` sequences split over the DP ranks as the scenario splits them
    /// (`Scenario::dp_batches`: the first DP ranks take one more).
    pub(super) fn draws(&self, real: u64, dummy: u64, batch: u32) -> Draws {
        let per = (real + 1) * self.top_k as u64;
        let (budget, most) = if self.experts + self.redundant > 2 * self.n {
            (DRAW_BUDGET_MANY, MAX_DRAWS_MANY)
        } else {
            (DRAW_BUDGET, MAX_DRAWS)
        };
        let k = (budget / per.max(1)).clamp(MIN_DRAWS, most) as usize;
        let seed =
            0xd1a7_e9f0_u64 ^ real.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ dummy.rotate_left(32);
        let sample = routing::sample_padded(
            &self.resolved,
            &vec![true; k],
            self.experts,
            self.top_k,
            real,
            dummy,
            seed,
        );
        let n = self.n;
        let mut d = Draws {
            n,
            t: Vec::with_capacity(k * n),
            rows: Vec::with_capacity(k * n),
            v: Vec::with_capacity(k * n),
            z: Vec::with_capacity(k * n),
            kernel_cv: self.kernel_cv,
            rounded: Vec::with_capacity(k),
            touched: Vec::with_capacity(k),
            den: Vec::with_capacity(k),
            rows_mean: (real + dummy) as f64 * self.top_k as f64 / n as f64,
            full: (0..n)
                .map(|r| batch.is_multiple_of(self.dp) || ((r / self.tp) as u32) < batch % self.dp)
                .collect(),
            short: if batch.is_multiple_of(self.dp) {
                0.0
            } else {
                1.0 - (batch / self.dp) as f64 / batch.div_ceil(self.dp) as f64
            },
        };
        let mut rng = crate::rng::seeded(seed ^ 0x5ca1_ab1e);
        for counts in &sample.expert_tokens {
            let (rows, touched) =
                crate::workload::parallel::ep_rank_rows(counts, n, self.redundant);
            let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
            let (rm, tm) = (mean(&rows), mean(&touched));
            // As `parallel::expert_parallel` prices and scales the expert kernels: the rows from
            // the routed rows' whole count, at least one row and one expert where any are routed.
            let routed: u64 = counts.iter().map(|&c| c as u64).sum();
            let rows_rounded = (routed as f64 / n as f64).round();
            let (rows_priced, touched_priced) = if routed > 0 {
                (rows_rounded.max(1.0), tm.round().max(1.0))
            } else {
                (rows_rounded, tm.round())
            };
            let thin = rows_priced != rows_rounded || touched_priced != tm.round();
            let (td, rd) = if thin {
                (touched_priced, rows_priced)
            } else {
                (tm, rm)
            };
            d.rounded.push(touched_priced.max(1.0) as u64);
            d.touched.push(tm);
            d.den.push((td, rd));
            for r in 0..n {
                d.t.push(if td > 0.0 { touched[r] / td } else { 1.0 });
                d.rows.push(if rm > 0.0 { rows[r] / rm } else { 1.0 });
                d.v.push(1.0 + self.skew * (2.0 * rng.random::<f64>() - 1.0));
                d.z.push(crate::rng::standard_normal(&mut rng));
            }
        }
        d
    }
}

impl Draws {
    /// Where the draws price the expert GEMMs, each with its share of the draws: every rounded
    /// mean of experts with tokens per rank they meet, at the mean of their draws' experts with
    /// tokens. The timeline prices each layer at its own draw's (the MoE tables are read at the
    /// rounded count, the weights' bytes at the mean), so the fast path prices the expert GEMMs
    /// at each value the draws meet and weighs them: a price at the rounded mean would be off
    /// by up to half an expert per rank (a few percent of the experts' time when each rank
    /// holds a dozen with tokens).
    pub(super) fn experts_at(&self) -> Vec<(ExpertsAt, f64)> {
        let mut out: Vec<(ExpertsAt, f64)> = Vec::new();
        for (&t, &tm) in self.rounded.iter().zip(&self.touched) {
            match out.iter_mut().find(|x| x.0.rounded == t) {
                Some(x) => {
                    x.0.touched += tm;
                    x.1 += 1.0;
                }
                None => out.push((
                    ExpertsAt {
                        rounded: t,
                        touched: tm,
                        rows: self.rows_mean,
                    },
                    1.0,
                )),
            }
        }
        for x in out.iter_mut() {
            x.0.touched /= x.1;
            x.1 /= self.rounded.len() as f64;
        }
        out.sort_by_key(|x| x.0.rounded);
        out
    }

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

impl Draws {
    /// The mean over ranks of their DP rank's sequences over the largest DP rank's.
    fn mean_share(&self) -> f64 {
        let full = self.full.iter().filter(|&&f| f).count() as f64;
        let n = self.full.len().max(1) as f64;
        (full + (n - full) * (1.0 - self.short)) / n
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
pub(super) struct Coupled {
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

    pub(super) fn ops(&self) -> &[(usize, f64, f64)] {
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
    pub(super) fn apply(
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
pub(super) fn slowest_rank(
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
    let seq_op = |i: usize| {
        matches!(regime.ops[i].kind, Kind::Kernel { .. })
            && crate::workload::parallel::per_sequence(&regime.ops[i].template)
    };
    let uneven = d.short > 0.0;
    let mut gain_sum = vec![0.0; us.len()];
    // The excess's gains: coupled windows at no attention (their rank maximum over all ranks).
    let mut excess_sum = vec![0.0; us.len()];
    let mut coupled: Vec<Coupled> = Vec::new();
    // Each window as (op, copies of it in the window), and how many times it occurs.
    let mut flush = |window: &[(usize, f64, usize)], times: f64| {
        let loaded: Vec<(usize, f64, usize)> = window
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
            .filter(|&&(i, ..)| seq_op(i))
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
            excess_sum[i] += all * copies * times;
        }
        if uneven && !seq.is_empty() && !maxima.is_empty() {
            let ops = loaded
                .iter()
                .map(|&(i, copies, _)| (i, us[i] * copies * times / repeat_of[i], repeat_of[i]))
                .collect();
            coupled.push(Coupled::new(ops, seq, d.short, total, &maxima));
        } else {
            for &(i, copies, _) in &loaded {
                gain_sum[i] += all * copies * times;
            }
        }
    };
    let collective = |i: &usize| matches!(regime.ops[*i].kind, Kind::Collective { .. });
    let kept = |i: &usize| regime.ops[*i].loaded || seq_op(*i);
    // (op, copies, layer: 0 the window's first, 1 the next one's, drawn apart).
    let mut open: Vec<(usize, f64, usize)> = Vec::new();
    for seg in &regime.segments {
        let range = seg.start..seg.end;
        let repeat = seg.repeat.max(1) as f64;
        let Some(first) = range.clone().find(collective) else {
            // No collective: every copy's ops join the open window.
            open.extend(range.filter(kept).map(|i| (i, repeat, 0)));
            continue;
        };
        let last = range.clone().rfind(collective).unwrap_or(first);
        let head: Vec<(usize, f64, usize)> = (seg.start..first)
            .filter(kept)
            .map(|i| (i, 1.0, 1))
            .collect();
        let tail: Vec<(usize, f64, usize)> = (last + 1..seg.end)
            .filter(kept)
            .map(|i| (i, 1.0, 0))
            .collect();
        // The first copy's head closes the window before it; every later copy's head closes
        // the one its previous copy's tail opened.
        open.extend(head.iter().copied());
        flush(&open, 1.0);
        let mut inner: Vec<(usize, f64, usize)> = Vec::new();
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
    let tail = Tail(
        open.iter()
            .filter(|&&(i, ..)| seq_op(i) && d.short > 0.0)
            .map(|&(i, ..)| (i, d.mean_share(), repeat_of[i]))
            .collect(),
    );
    let mut load = WindowLoad::default();
    for &(i, copies, part) in open.iter().filter(|&&(i, ..)| regime.ops[i].loaded) {
        load.add(&regime.ops[i], us[i] * copies, part, x, d.rows_mean);
    }
    let mean = d.mean_gain(&load);
    for &(i, copies, _) in open.iter().filter(|&&(i, ..)| regime.ops[i].loaded) {
        gain_sum[i] += mean * copies;
        // No collective closes the tail: no straggler wait to share a spread with.
        excess_sum[i] += copies;
    }
    let mut excess = vec![0.0; us.len()].into_boxed_slice();
    for i in 0..us.len() {
        if regime.ops[i].loaded {
            let mean = us[i];
            us[i] = mean * gain_sum[i] / repeat_of[i];
            excess[i] = mean * (excess_sum[i] / repeat_of[i] - 1.0);
        }
    }
    (excess, coupled, tail)
}

/// The attention and sampling of the step's tail, each (op, the mean over ranks of their DP
/// rank's share of the largest's sequences, its segment's repeat): the fast path prices them at
/// the largest DP rank.
#[derive(Debug, Clone, Default)]
pub(super) struct Tail(Vec<(usize, f64, f64)>);

impl Tail {
    /// Scales this lane's tail ops in `d` (op-major, `lanes` lanes; token-dependent ones read
    /// afresh from `tokens_us`, the others as written for the lane) and adds the change to
    /// `busy`.
    pub(super) fn apply(
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

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

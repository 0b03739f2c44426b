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
//!
//! This module holds the layout and the draws of the ranks' loads; the windows the loaded ops
//! are played in, and their slowest rank, are `windows`'.

use super::basis::{dot, round_u64, OpT};
use super::{CalibrationProfile, Coef, CostFamily, Op, Scenario, Workload};
use crate::workload::routing::{self, Resolved};

mod windows;

use rand::Rng;
pub(super) use windows::{slowest_rank, Coupled, Tail};

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
}

impl Draws {
    /// The mean over ranks of their DP rank's sequences over the largest DP rank's.
    fn mean_share(&self) -> f64 {
        let full = self.full.iter().filter(|&&f| f).count() as f64;
        let n = self.full.len().max(1) as f64;
        (full + (n - full) * (1.0 - self.short)) / n
    }
}

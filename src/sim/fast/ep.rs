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
//! - the ops the timeline scales per rank (`loaded`) take, window by window (the ops between
//!   two collectives), the expected maximum over ranks of their summed time: rank r's time in
//!   a window is W·t_r/t̄ + R·n_r/n̄ (W: the expert GEMMs' weight-read share of the window's
//!   price, R: the rest, which follows the rows; t_r experts with tokens and n_r rows on rank r,
//!   bars the means over ranks, as the timeline's `rank_scale` reads them). Its maximum is
//!   averaged over seeded routing draws of the scenario's routing model at the step's real and
//!   padding rows (`routing::sample_padded`, placed by `parallel::ep_rank_rows`, EPLB
//!   included), once per batch. With jitter on, each draw also carries every rank's speed skew
//!   and its kernels' jitter, so the loaded ops add nothing to the straggler spread (the
//!   maximum already holds it); the loaded ops' excess over the mean rank and the straggler
//!   wait of the rest of the window are combined at the closing collective as two spreads of
//!   the same ranks (root of the sum of squares, exact for normal spreads: `replay::step`);
//! - the expert GEMMs are priced at each rounded mean of experts with tokens per rank the draws
//!   meet (the MoE tables are read at it), weighed by its share of the draws;
//! - the dispatch and combine sync the whole EP group: their straggler wait is over DP × TP
//!   ranks and the path since that group last met, less what the TP groups' own collectives
//!   already waited (`State::carry`); at a batch the DP ranks do not share evenly, over the
//!   ranks of the DP ranks with the most sequences only (the others attend over fewer).
//!
//! Left out (measured by tests/fast_dp.rs): at a batch the DP ranks do not share evenly, the
//! rank with the most-loaded experts may not be one of the largest DP ranks, and the small
//! `moe_align_block_size` shares its window with attention (its maximum is added to the
//! largest DP rank's attention).

use super::*;
use crate::workload::routing::{self, Resolved};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

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
        let n = s.comm.ep_size();
        let moe = s.model.moe.as_ref()?;
        let rows = moe.top_k.min(moe.n_routed_experts) as u64 * s.comm.dp_size() as u64;
        (n > 1).then(|| EpShape {
            n,
            rows_per_padded: if rows.is_multiple_of(n as u64) {
                0
            } else {
                rows
            },
            routed_per_padded: rows,
            dp: s.comm.dp_size(),
            redundant: s.comm.redundant(),
            slice_tp: if s.comm.ep_comm.is_all_to_all() {
                s.tp.max(1) as u64
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
}

/// Routed rows the draws of one batch may sample in all (bounds the cost per batch: about a
/// millisecond), and the least and most layer draws.
const DRAW_BUDGET: u64 = 1 << 16;
const MIN_DRAWS: u64 = 64;
const MAX_DRAWS: u64 = 512;

/// The ranks' loads in `k` layer draws, each relative to its draw's mean over ranks.
#[derive(Debug, Clone)]
pub(super) struct Draws {
    n: usize,
    /// Per draw × rank: experts with tokens over the mean, rows over the mean, the rank's
    /// speed, a standard normal (its kernels' jitter).
    t: Vec<f64>,
    rows: Vec<f64>,
    v: Vec<f64>,
    z: Vec<f64>,
    kernel_cv: f64,
    /// Per draw: the mean over ranks of the experts each holds with tokens, rounded (the
    /// expert GEMMs' `shape.batch`, which the MoE tables are read at).
    rounded: Vec<u64>,
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
    pub(super) fn draws(&self, real: u64, dummy: u64) -> Draws {
        let per = (real + 1) * self.top_k as u64;
        let k = (DRAW_BUDGET / per.max(1)).clamp(MIN_DRAWS, MAX_DRAWS) as usize;
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
        };
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5ca1_ab1e);
        for counts in &sample.expert_tokens {
            let (rows, touched) =
                crate::workload::parallel::ep_rank_rows(counts, n, self.redundant);
            let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
            let (rm, tm) = (mean(&rows), mean(&touched));
            d.rounded.push(tm.round().max(1.0) as u64);
            for r in 0..n {
                d.t.push(if tm > 0.0 { touched[r] / tm } else { 1.0 });
                d.rows.push(if rm > 0.0 { rows[r] / rm } else { 1.0 });
                d.v.push(1.0 + self.skew * (2.0 * rng.random::<f64>() - 1.0));
                // Box-Muller: one standard normal from two uniforms.
                let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
                d.z.push((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos());
            }
        }
        d
    }
}

impl Draws {
    /// The rounded mean experts with tokens per rank the draws give, each with its share of
    /// the draws. The timeline prices each layer at its own draw's (the MoE tables are read at
    /// it), so the fast path prices the expert GEMMs at each value the draws meet and weighs
    /// them: a price at the rounded mean would be off by up to half an expert per rank (a few
    /// percent of the experts' time when each rank holds a dozen with tokens).
    pub(super) fn rounded_touched(&self) -> Vec<(u64, f64)> {
        let mut out: Vec<(u64, f64)> = Vec::new();
        let w = 1.0 / self.rounded.len().max(1) as f64;
        for &t in &self.rounded {
            match out.iter_mut().find(|x| x.0 == t) {
                Some(x) => x.1 += w,
                None => out.push((t, w)),
            }
        }
        out.sort_by_key(|x| x.0);
        out
    }

    /// The expected slowest rank's time in a window over its mean rank's, for a window whose
    /// loaded ops price `w` (the expert GEMMs' weight read) + `r` (the rest) µs at the mean
    /// rank, `q` the sum of their squared prices (their jitter's variance per kernel CV²).
    pub(super) fn gain(&self, w: f64, r: f64, q: f64) -> f64 {
        let total = w + r;
        if total <= 0.0 || self.t.is_empty() {
            return 1.0;
        }
        let sd = self.kernel_cv * q.sqrt() / total;
        let mut sum = 0.0;
        let draws = self.t.len() / self.n;
        for k in 0..draws {
            let at = k * self.n;
            let mut most = f64::MIN;
            for i in at..at + self.n {
                let load = w * self.t[i] + r * self.rows[i];
                let x = self.v[i] * load + sd * load * self.z[i];
                most = most.max(x);
            }
            sum += most;
        }
        sum / draws as f64 / total
    }
}

/// Scales the loaded ops of `regime` in `us` (µs per op, the token-dependent ones priced at
/// the mean rank, basis `x`) to the expected slowest rank of each window between collectives.
pub(super) fn slowest_rank(regime: &Regime, us: &mut [f64], x: &Coef, d: &Draws) {
    let mut window: Vec<usize> = Vec::new();
    let flush = |window: &mut Vec<usize>, us: &mut [f64]| {
        if window.is_empty() {
            return;
        }
        let (mut w, mut r, mut q) = (0.0, 0.0, 0.0);
        for &i in window.iter() {
            let op = &regime.ops[i];
            let p = us[i];
            // An expert GEMM's bytes are its experts' weights plus its rows' activations in
            // and out, rows × (k + n) BF16 elements (`parallel::expert_parallel`'s `bytes_of`):
            // the weights' share follows the experts with tokens, the rest the rows. (Read off
            // the shape, not the fitted coefficient of the experts touched: where every expert
            // has tokens at every probe that column cannot be told from the constant.)
            let phi = if EpShape::is_expert_gemm(&op.template) {
                let f = &op.fields;
                let bytes = dot(&f.bytes, x);
                let (m, n, k) = (
                    round_u64(dot(&f.shape[0], x)) as f64,
                    round_u64(dot(&f.shape[1], x)) as f64,
                    round_u64(dot(&f.shape[2], x)) as f64,
                );
                let act = m * (n + k) * crate::workload::builder::ACT_BYTES;
                if bytes > 0.0 {
                    (1.0 - act / bytes).clamp(0.0, 1.0)
                } else {
                    0.0
                }
            } else {
                0.0
            };
            w += p * phi;
            r += p * (1.0 - phi);
            q += p * p;
        }
        let g = d.gain(w, r, q);
        for &i in window.iter() {
            us[i] *= g;
        }
        window.clear();
    };
    for (i, op) in regime.ops.iter().enumerate() {
        match op.kind {
            Kind::Collective { .. } => flush(&mut window, us),
            _ if op.loaded => window.push(i),
            _ => {}
        }
    }
    flush(&mut window, us);
}

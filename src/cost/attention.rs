//! The context-dependent ops of a pass (attention, its split-KV reduce, the ops whose price reads
//! them) priced at one KV length after another without the general pricer.
//!
//! A sweep over many contexts prices a handful of ops per new context. Through
//! [`super::PreparedPricer`] each call resets its notes, scans every table family, looks the MLA
//! grid up by name and clones the factors to test them: about four fifths of the work on two
//! ops. [`AttentionPricer`] resolves once, from the ops' templates and the setting, how
//! `PreparedPricer::price` would price each op (its family's law, or AIConfigurator's MLA module
//! rows with the reduce after it), then prices with the same functions in the same order: the
//! same bits, held to `cost::price` by `tests/attention_pricer.rs`. An op it does not cover (a
//! measured kernel table, an FP8 cache, a GEMM or MoE table, a collective) leaves it to the
//! general pricer: [`AttentionPricer::new`] gives None.

use super::aic::{self, MlaAtBatch, MlaPair};
use super::profile::{self, KernelParams};
use super::CalibrationProfile;
use crate::scenario::Scenario;
use crate::workload::{CostFamily, OpRole, Workload};

/// How `PreparedPricer::price` prices one op.
#[derive(Debug, Clone)]
enum How {
    /// By its family's law (`Pricer::by_law`).
    Law(KernelParams),
    /// AIConfigurator's MLA module growth (`aic::mla_attention`); `reduce`: the split-KV reduce
    /// right after it, priced with it, and its law (or its bytes at the DRAM bandwidth).
    Mla {
        reduce: Option<Option<KernelParams>>,
    },
    /// The reduce of the MLA op before it.
    Reduce,
}

/// What the MLA module's price reads besides the shapes, resolved once.
#[derive(Debug, Clone)]
struct MlaSetup {
    grid: usize,
    dcp: u64,
    /// Both kernels' fixed costs (`fixed_sum` without and with the reduce).
    fixed: [f64; 2],
    /// AIConfigurator's scale of the attention family and of the reduce's family.
    scale: [f64; 2],
    /// DRAM bytes per µs.
    bw: f64,
}

/// The prices of a fixed list of op templates at moving shapes, batch and context (module doc).
#[derive(Debug, Clone)]
pub struct AttentionPricer {
    how: Vec<How>,
    /// The profile's factor terms per op (`profile::Factors::terms`); None: the identity.
    terms: Option<Vec<(f64, f64)>>,
    mla: Option<MlaSetup>,
    /// The MLA lines at the last batch priced (the thread's cache would cost a lookup a call).
    lines: MlaAtBatch,
}

impl AttentionPricer {
    /// How `w`'s ops would be priced under `s` and `p` (their shapes may move, their templates
    /// may not); None where an op needs the general pricer.
    pub fn new(w: &Workload, s: &Scenario, p: &CalibrationProfile) -> Option<Self> {
        // An FP8 cache reprices attention through the FP8/BF16 ratios: the general pricer.
        if s.kv_bytes != 2.0 {
            return None;
        }
        let prepared = aic::Prepared::new(s, p);
        let has_mla = w
            .ops
            .iter()
            .any(|o| o.family == CostFamily::AttentionMlaDecode);
        let mla = match (&prepared, &p.aic, &p.aiconfigurator) {
            (Some(pr), Some(t), Some(sec))
                if pr.prices_mla() && has_mla && aic::mla_rows_apply(s, sec) =>
            {
                let dcp = s.layout.dcp_size();
                let heads = (s.model.num_heads / s.layout.tp as usize) as u64 * dcp as u64;
                // No grid for these heads: the general pricer notes it and uses the law.
                let grid = t.mla_grid_index("bfloat16", heads)?;
                let fixed = |f: CostFamily| p.kernel(f).map_or(0.0, |k| k.fixed_us);
                let attention = fixed(CostFamily::AttentionMlaDecode);
                Some(MlaSetup {
                    grid,
                    dcp: dcp as u64,
                    fixed: [attention + 0.0, attention + fixed(CostFamily::Elementwise)],
                    scale: [0.0; 2],
                    bw: s.system.gpu.memory_bandwidth_gbps * 1e3,
                })
            }
            _ => None,
        };
        let mut how = Vec::with_capacity(w.ops.len());
        let mut reduce_scale = None;
        for (i, op) in w.ops.iter().enumerate() {
            if op.family.is_sync() || op.family.is_collective() {
                return None;
            }
            if p.table.is_some() && op.measure.is_some() {
                return None;
            }
            if let Some(pr) = &prepared {
                if pr.prices_family(op) {
                    return None;
                }
            }
            if matches!(how.last(), Some(How::Mla { reduce: Some(_) })) {
                how.push(How::Reduce);
                reduce_scale = prepared.as_ref().map(|pr| pr.scale(op.family));
                continue;
            }
            if op.family == CostFamily::AttentionMlaDecode && mla.is_some() {
                let next = w
                    .ops
                    .get(i + 1)
                    .filter(|n| n.role == OpRole::AttentionReduce);
                how.push(How::Mla {
                    reduce: next.map(|n| p.kernel(n.family).cloned()),
                });
                continue;
            }
            how.push(How::Law(p.kernel(op.family)?.clone()));
        }
        let mla = mla.map(|mut m| {
            let scale = |f: CostFamily| prepared.as_ref().map_or(1.0, |pr| pr.scale(f));
            m.scale = [
                scale(CostFamily::AttentionMlaDecode),
                reduce_scale.unwrap_or(1.0),
            ];
            m
        });
        let terms = (!p.factors.is_identity())
            .then(|| w.ops.iter().map(|op| p.factors.terms(op)).collect());
        Some(AttentionPricer {
            how,
            terms,
            mla,
            lines: MlaAtBatch::default(),
        })
    }

    /// The price of each of `w`'s ops (its templates those `new` read) at `s`'s batch and
    /// context into `out`, as `PreparedPricer::price` gives them in `base_us`; false (nothing
    /// written that counts) where the general pricer would go another way at this shape (no MLA
    /// rows at this batch).
    pub fn price(
        &mut self,
        w: &Workload,
        s: &Scenario,
        p: &CalibrationProfile,
        out: &mut [f64],
    ) -> bool {
        let gpu = &s.system.gpu;
        let mut reduce = (0.0, 0.0);
        for (i, (op, how)) in w.ops.iter().zip(&self.how).enumerate() {
            let (mut us, mut split) = match how {
                How::Law(k) => super::law_price(op, k, gpu),
                How::Reduce => reduce,
                How::Mla { reduce: r } => {
                    let (Some(m), Some(t)) = (&self.mla, &p.aic) else {
                        return false;
                    };
                    let ctx = s.context.div_ceil(m.dcp) as f64;
                    // One rank's sequences (a DP rank's share under data-parallel attention)
                    // times a verify pass's KV reads per sequence: the op's measurement key.
                    let batch = op.measure.as_ref().map_or(s.rank_batch() as f64, |k| {
                        crate::scenario::mla_backend::lookup_rows(
                            s.mla_backend.verify,
                            k.m,
                            k.batch,
                            k.n,
                        )
                    });
                    let Some(growth) = t.mla_growth_kept(&mut self.lines, m.grid, batch, ctx)
                    else {
                        return false;
                    };
                    // The reduce's law price (`aic::LawKernels::law_or_bytes`).
                    let law = r.as_ref().map(|k| {
                        let n = &w.ops[i + 1];
                        match k {
                            Some(k) => super::kernel::kernel_us(n, k, gpu),
                            None => n.bytes / m.bw,
                        }
                    });
                    let fixed = m.fixed[usize::from(r.is_some())];
                    let pair = MlaPair::of(growth.us, fixed, 1.0, op.bytes / m.bw, law);
                    let [a, b] = m.scale;
                    reduce = (pair.reduce.0 * b, pair.reduce.1 * b);
                    (pair.attention.0 * a, pair.attention.1 * a)
                }
            };
            if let Some(t) = &self.terms {
                profile::apply_terms(t[i], &mut us, &mut split);
            }
            // As `PreparedPricer::price` ends: the roofline floor (`physics`).
            out[i] = super::physics::floored(us, super::physics::floor_us(op, s));
        }
        true
    }
}

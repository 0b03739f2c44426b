//! Prices ops from AIConfigurator's measured tables (converted to CSV by
//! harness/aiconfigurator_tables.py; columns and units in the MANIFEST.txt beside them):
//! the routed-expert MoE call, BF16 GEMMs, the TRITON_MLA generation module and NCCL / vLLM
//! custom all-reduce. Each lookup interpolates between table rows and says when it extrapolates.
//!
//! Two physical rules apply to every table price:
//! - a decode step reads ~1 GB of weights per layer, so no weight stays in the GPU's L2 from one
//!   use to the next; a table row faster than the DRAM roofline for the bytes the op must read
//!   (AIConfigurator repeats one call on the same weights, which can sit in L2) is raised to it;
//! - the MLA module's rows include GEMMs and small kernels (and whatever launch cost the
//!   collector saw); only its growth with the KV length is attributed to the attention kernel.

mod accuracy;
mod comm;
mod mla;
mod moe;
mod overrides;
mod read;

pub use comm::{comm_latency, comm_price, CommCurve};
pub(crate) use mla::{mla_rows_apply, MlaPair};
pub use overrides::{overrides, overrides_with, Overrides, Prepared};
pub use read::{device_matches, manifest_device, TABLE_FILES};

use super::table::{bracket, interp, log_lerp_ln, TablePrice};
use crate::scenario::routing::{Routing, AIC_EQUIVALENT_ALPHA};
use crate::scenario::Scenario;
use crate::workload::op::Stream;
use crate::workload::{CostFamily, Op};
use overrides::{LawKernels, Tally};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// (distribution, quant, experts, hidden, inter, topk, moe_tp, moe_ep).
pub type MoeKey = (String, String, u64, u64, u64, u64, u32, u32);
/// (size, µs) rows of one table line, sorted by size.
type Rows = Vec<(f64, f64)>;
/// (batch, step, µs) rows of one MLA table.
type MlaRows = Vec<(f64, f64, f64)>;
/// A collective table's lines by (op or mode, ranks).
type CommLines = HashMap<(String, u32), Rows>;
/// The last DRAM line fitted, with what it was fitted for (`dram_line_of`).
type LastDramLine = Option<(MoeKey, u64, u64, Option<super::resident::DramLine>)>;

/// The converted tables of one AIConfigurator system folder.
#[derive(Debug, Clone, Default)]
pub struct AicTables {
    /// Unique per folder read (clones share it: the tables never change once read); keys the
    /// per-thread cache of MLA lines at one batch (`MLA_AT_BATCH`).
    id: u64,
    pub dir: PathBuf,
    /// The GPU the tables were measured on, as MANIFEST.txt names it (`device 'NVIDIA H200'`);
    /// None when the folder has no manifest or it names no device.
    pub device: Option<String>,
    /// File name → data rows, for provenance.
    pub files: BTreeMap<String, usize>,
    /// File name → rows the isotonic fit changed (`cost::isotonic`): rows below a smaller
    /// shape's time in the same line, pooled with it.
    pub isotonic: BTreeMap<String, usize>,
    moe: HashMap<MoeKey, Vec<(f64, f64)>>,
    /// dtype → (n, k) → (m, µs) sorted by m.
    gemm: HashMap<String, BTreeMap<(u64, u64), Rows>>,
    /// (kv dtype, heads per rank) → (batch, step, µs) sorted by step then batch.
    mla: HashMap<(String, u64), MlaRows>,
    /// The same rows as lines of one KV length each, per (kv dtype, heads), built at load: a
    /// lookup is then two binary searches with no allocation (`mla_module` runs per priced
    /// shape, a sweep's hot path). Few keys, so a scan finds one without building a String.
    mla_grid: Vec<(String, u64, MlaGrid)>,
    /// (op, nranks) → NCCL curve.
    nccl: HashMap<(String, u32), CommCurve>,
    /// (mode, nranks) → vLLM custom all-reduce curve (as timed: may be NCCL's fallback).
    custom: HashMap<(String, u32), Vec<(f64, f64)>>,
    /// Collectives measured over several nodes (`cost::internode::MULTINODE_CSV`).
    pub multinode: Option<super::internode::MultiNodeTable>,
}

/// The lines of one MLA grid read at one batch (`AicTables::mla_module`): key (tables id,
/// grid, batch bits), and per line its price at that batch once read.
#[derive(Debug, Clone, Default)]
pub(crate) struct MlaAtBatch {
    key: Option<(u64, usize, u64)>,
    lines: Vec<Option<Option<(TablePrice, f64)>>>,
    /// The module at the grid's smallest KV length (`mla_attention_growth`), once read.
    base: Option<Option<TablePrice>>,
}

thread_local! {
    static MLA_AT_BATCH: std::cell::RefCell<MlaAtBatch> = std::cell::RefCell::new(MlaAtBatch::default());
}

/// One (kv dtype, heads) of the MLA module rows: the KV lengths (sorted) and, per KV length,
/// its (batch, µs) line sorted by batch.
#[derive(Debug, Clone, Default)]
struct MlaGrid {
    steps: Vec<f64>,
    /// `steps[i].ln()`, for the log-log step between lines (`table::log_lerp_ln`).
    ln_steps: Vec<f64>,
    lines: Vec<Vec<(f64, f64)>>,
}

impl MlaGrid {
    /// From rows sorted by (step, batch): one line per run of equal steps.
    fn new(g: &[(f64, f64, f64)]) -> Self {
        let mut grid = MlaGrid::default();
        let mut i = 0;
        while i < g.len() {
            let st = g[i].1;
            let end = i + g[i..].partition_point(|p| p.1 <= st);
            grid.steps.push(st);
            grid.ln_steps.push(st.ln());
            grid.lines
                .push(g[i..end].iter().map(|p| (p.0, p.2)).collect());
            i = end;
        }
        grid
    }
}

impl PartialEq for AicTables {
    fn eq(&self, other: &Self) -> bool {
        self.dir == other.dir
    }
}

/// The AIConfigurator MoE distribution whose rows match a routing model: `balanced` for uniform
/// routing, `power_law_X` where the routing is that table's decodesim equivalent
/// (`scenario::routing::AIC_EQUIVALENT_ALPHA`), else `balanced`, which the pricer reads at the
/// token count that touches as many experts as the routing does (see `moe_tokens_for_lookup`).
pub fn moe_table_distribution(routing: &Routing) -> &'static str {
    if let Routing::PowerLaw { alpha } = routing {
        if let Some((name, _)) = AIC_EQUIVALENT_ALPHA
            .iter()
            .find(|(n, a)| *n != "balanced" && (a - alpha).abs() < 1e-9)
        {
            return name;
        }
    }
    "balanced"
}

/// The token count at which to read a distribution's rows for a step of `tokens` tokens that
/// touches `touched` distinct experts. `balanced` rows spread tokens × topk slots evenly, so at
/// t tokens they touch min(t·topk, experts) experts: a step touching fewer (random or skewed
/// routing) reads the weights of `touched` experts, which balanced rows do at touched / topk
/// tokens. Other distributions are read at the step's own token count.
pub fn moe_tokens_for_lookup(
    dist: &str,
    tokens: u64,
    touched: u64,
    experts: u64,
    topk: u64,
) -> f64 {
    if dist == "balanced" && touched < experts && topk > 0 {
        (touched as f64 / topk as f64).max(1.0)
    } else {
        tokens as f64
    }
}

impl AicTables {
    pub fn has(&self, file: &str) -> bool {
        self.files.contains_key(file)
    }

    /// The routed-expert call at `tokens` (interpolated log-log between the rows). An
    /// expert-parallel size between two measured ones (EP 144 between 128 and 256) is read off
    /// both at `tokens` and interpolated log-log in the EP size; outside them, none.
    pub fn moe(&self, key: &MoeKey, tokens: f64) -> Option<TablePrice> {
        if let Some(rows) = self.moe.get(key) {
            return interp(rows, tokens);
        }
        if key.6 != 1 {
            return None;
        }
        let same = |k: &&MoeKey| {
            (&k.0, &k.1, k.2, k.3, k.4, k.5, k.6)
                == (&key.0, &key.1, key.2, key.3, key.4, key.5, key.6)
        };
        let mut eps: Vec<u32> = self.moe.keys().filter(same).map(|k| k.7).collect();
        eps.sort_unstable();
        let lo = eps.iter().rev().find(|&&e| e < key.7)?;
        let hi = eps.iter().find(|&&e| e > key.7)?;
        let at = |ep: u32| {
            let mut k = key.clone();
            k.7 = ep;
            interp(self.moe.get(&k)?, tokens)
        };
        let (a, b) = (at(*lo)?, at(*hi)?);
        Some(TablePrice {
            us: crate::cost::table::log_lerp(*lo as f64, a.us, *hi as f64, b.us, key.7 as f64),
            extrapolated: a.extrapolated || b.extrapolated,
        })
    }

    /// Token counts of one MoE row set, for tests and reports.
    pub fn moe_rows(&self, key: &MoeKey) -> Option<&[(f64, f64)]> {
        self.moe.get(key).map(Vec::as_slice)
    }

    /// A GEMM of `dtype` at (m, n, k): log-log in m at each grid (n, k), then linear in k and in
    /// n between the bracketing grid values (a decode GEMM's time grows with its weight bytes,
    /// n·k, which is bilinear). Outside the grid, the nearest grid value scaled by n / n_grid
    /// (k / k_grid): flagged as extrapolated.
    pub fn gemm(&self, dtype: &str, m: u64, n: u64, k: u64) -> Option<TablePrice> {
        let g = self.gemm.get(dtype)?;
        let mut ns: Vec<f64> = g.keys().map(|(n, _)| *n as f64).collect();
        ns.dedup();
        let at_n = |gn: f64| -> Option<TablePrice> {
            let ks: Vec<f64> = g
                .keys()
                .filter(|(n, _)| *n as f64 == gn)
                .map(|(_, k)| *k as f64)
                .collect();
            let at_k = |gk: f64| interp(g.get(&(gn as u64, gk as u64))?, m as f64);
            axis_interp(&ks, k as f64, at_k)
        };
        axis_interp(&ns, n as f64, at_n)
    }

    fn mla_grid(&self, kv: &str, heads: u64) -> Option<&MlaGrid> {
        self.mla_grid_at(kv, heads).map(|(_, g)| g)
    }

    fn mla_grid_at(&self, kv: &str, heads: u64) -> Option<(usize, &MlaGrid)> {
        self.mla_grid
            .iter()
            .position(|(k, h, _)| *h == heads && k == kv)
            .map(|i| (i, &self.mla_grid[i].2))
    }

    /// The MLA generation module (all its kernels) at `heads` heads per rank: log-log between
    /// the bracketing KV lengths of the batch's price on each (`MlaGrid`).
    pub fn mla_module(&self, kv: &str, heads: u64, batch: f64, step: f64) -> Option<TablePrice> {
        let (gi, g) = self.mla_grid_at(kv, heads)?;
        self.mla_module_in(gi, g, batch, step)
    }

    /// [`Self::mla_module`] in grid `gi` (`g`), found by the caller.
    fn mla_module_in(&self, gi: usize, g: &MlaGrid, batch: f64, step: f64) -> Option<TablePrice> {
        MLA_AT_BATCH.with(|c| self.mla_module_kept(&mut c.borrow_mut(), gi, g, batch, step))
    }

    /// [`Self::mla_module_in`] with the lines at the batch kept in `c`.
    fn mla_module_kept(
        &self,
        c: &mut MlaAtBatch,
        gi: usize,
        g: &MlaGrid,
        batch: f64,
        step: f64,
    ) -> Option<TablePrice> {
        let steps = &g.steps;
        let (lo, hi) = bracket(steps, step)?;
        // Each line's price at the batch (and its logarithm), read once per (tables, grid,
        // batch) and thread: a sweep prices many KV lengths at one batch, and the line lookups
        // (two log-log interpolations) were most of an attention price. The same values, bit
        // for bit.
        let key = (self.id, gi, batch.to_bits());
        if c.key != Some(key) || c.lines.len() != g.lines.len() {
            c.key = Some(key);
            c.base = None;
            c.lines.clear();
            c.lines.resize(g.lines.len(), None);
        }
        let mut at = |i: usize| {
            *c.lines[i].get_or_insert_with(|| interp(&g.lines[i], batch).map(|p| (p, p.us.ln())))
        };
        let (a, b) = (at(lo), at(hi));
        let ((a, ln_a), (b, ln_b)) = (a?, b?);
        Some(TablePrice {
            us: log_lerp_ln(
                (steps[lo], g.ln_steps[lo]),
                (a.us, ln_a),
                (steps[hi], g.ln_steps[hi]),
                (b.us, ln_b),
                step,
            ),
            extrapolated: a.extrapolated
                || b.extrapolated
                || step < steps[0]
                || step > steps[steps.len() - 1],
        })
    }

    /// The smallest KV length of the module rows (the module with next to no attention work).
    pub fn mla_min_step(&self, kv: &str, heads: u64) -> Option<f64> {
        self.mla_grid(kv, heads)?.steps.first().copied()
    }

    /// The attention kernel's share of the module: the module at KV length `step` minus the
    /// module at the table's smallest KV length, same batch and heads.
    pub fn mla_attention_growth(
        &self,
        kv: &str,
        heads: u64,
        batch: f64,
        step: f64,
    ) -> Option<TablePrice> {
        let (gi, _) = self.mla_grid_at(kv, heads)?;
        self.mla_growth_at(gi, batch, step)
    }

    /// The grid of `kv` × `heads` ([`Self::mla_attention_growth`] reads it), for callers that
    /// price many KV lengths under one setting (`cost::attention`).
    pub(crate) fn mla_grid_index(&self, kv: &str, heads: u64) -> Option<usize> {
        self.mla_grid_at(kv, heads).map(|(gi, _)| gi)
    }

    /// [`Self::mla_attention_growth`] in grid `gi` ([`Self::mla_grid_index`]).
    pub(crate) fn mla_growth_at(&self, gi: usize, batch: f64, step: f64) -> Option<TablePrice> {
        MLA_AT_BATCH.with(|c| self.mla_growth_kept(&mut c.borrow_mut(), gi, batch, step))
    }

    /// [`Self::mla_growth_at`] with the lines at the batch kept in `c` (its owner's, not the
    /// thread's: `cost::attention`).
    pub(crate) fn mla_growth_kept(
        &self,
        c: &mut MlaAtBatch,
        gi: usize,
        batch: f64,
        step: f64,
    ) -> Option<TablePrice> {
        let g = &self.mla_grid.get(gi)?.2;
        let min = *g.steps.first()?;
        let full = self.mla_module_kept(c, gi, g, batch, step)?;
        // The base depends on the batch only: kept with the batch's lines (the same value).
        let key = Some((self.id, gi, batch.to_bits()));
        let kept = if c.key == key { c.base } else { None };
        let base = match kept {
            Some(b) => b,
            None => {
                let b = self.mla_module_kept(c, gi, g, batch, min);
                if c.key == key {
                    c.base = Some(b);
                }
                b
            }
        }?;
        Some(TablePrice {
            us: (full.us - base.us).max(0.0),
            extrapolated: full.extrapolated || base.extrapolated,
        })
    }

    pub fn nccl_curve(&self, op: &str, nranks: u32) -> Option<&CommCurve> {
        self.nccl.get(&(op.to_string(), nranks))
    }

    pub fn nccl_nranks(&self, op: &str) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .nccl
            .keys()
            .filter(|(o, _)| o == op)
            .map(|k| k.1)
            .collect();
        v.sort_unstable();
        v
    }

    pub fn custom_curve(&self, mode: &str, nranks: u32) -> Option<&[(f64, f64)]> {
        self.custom
            .get(&(mode.to_string(), nranks))
            .map(Vec::as_slice)
    }
}

/// Interpolates `f` along one sorted axis: exact value, linear between the bracketing values,
/// or the end value scaled by x / x_end outside (flagged).
fn axis_interp(axis: &[f64], x: f64, f: impl Fn(f64) -> Option<TablePrice>) -> Option<TablePrice> {
    let (first, last) = (*axis.first()?, *axis.last()?);
    if let Some(&v) = axis.iter().find(|&&v| v == x) {
        return f(v);
    }
    if x < first || x > last {
        let end = if x < first { first } else { last };
        let p = f(end)?;
        return Some(TablePrice {
            us: p.us * x / end,
            extrapolated: true,
        });
    }
    let (lo, hi) = bracket(axis, x)?;
    let (a, b) = (f(axis[lo])?, f(axis[hi])?);
    let w = (x - axis[lo]) / (axis[hi] - axis[lo]);
    Some(TablePrice {
        us: a.us + (b.us - a.us) * w,
        extrapolated: a.extrapolated || b.extrapolated,
    })
}

/// The ops of one layer's routed-expert call, as vLLM's fused Marlin MoE runs them
/// (moe_align_block_size, w13, activation, w2, moe_sum): what AIConfigurator's MoE rows time.
pub fn is_moe_module_op(op: &Op) -> bool {
    op.stream == Stream::Compute
        && (matches!(
            op.family,
            CostFamily::MoeAlign
                | CostFamily::MoeSum
                | CostFamily::MoeGemmInt4
                | CostFamily::MoeGemmBf16
                | CostFamily::MoeGemmFp8
        ) || op.role.in_routed_call())
}

pub fn is_moe_gemm(f: CostFamily) -> bool {
    matches!(
        f,
        CostFamily::MoeGemmInt4 | CostFamily::MoeGemmBf16 | CostFamily::MoeGemmFp8
    )
}

/// A model's routed-expert shape as the MoE rows key it: (quant, experts, hidden,
/// intermediate, top-k).
pub type MoeShape = (&'static str, u64, u64, u64, u64);

/// The shape at which a scenario's routed experts read the MoE rows, where a table prices them
/// (vLLM's fused MoE: not the reference step's grouped GEMM).
pub fn moe_shape(s: &Scenario) -> Option<MoeShape> {
    let moe = s.model.moe.as_ref()?;
    if s.runtime != crate::scenario::Runtime::Vllm {
        return None;
    }
    let layer = (0..s.model.num_layers).find(|&l| s.model.is_layer_moe(l))?;
    Some((
        quant_of(CostFamily::moe_gemm_for(expert_format(s, layer))),
        moe.n_routed_experts as u64,
        s.model.hidden as u64,
        moe.moe_intermediate as u64,
        moe.top_k as u64,
    ))
}

/// How a MoE layer's routed experts are stored (as `workload::moe` builds their GEMMs).
fn expert_format(s: &Scenario, layer: usize) -> crate::scenario::model::WeightFormat {
    s.model
        .weight_format(&format!("model.layers.{layer}.mlp.experts.0.gate_proj"))
}

/// The quantisation an expert GEMM family has in AIConfigurator's MoE rows.
fn quant_of(f: CostFamily) -> &'static str {
    match f {
        CostFamily::MoeGemmInt4 => "int4_wo",
        CostFamily::MoeGemmFp8 => "fp8_block",
        _ => "bfloat16",
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::table::log_lerp;
    use std::path::Path;

    /// The per-thread cache of MLA lines at one batch gives the values of the lookup it
    /// replaced (each line interpolated at the batch, log-log between the bracketing KV
    /// lengths), bit for bit, however lookups of two tables, several grids and batches
    /// interleave.
    #[test]
    fn mla_lines_cached_per_batch_give_the_uncached_values() {
        let dirs = [
            "data/calibration/aiconfigurator/rtx_pro_6000_server",
            "data/calibration/aiconfigurator/h200_sxm",
        ];
        let tables: Vec<AicTables> = dirs
            .iter()
            .map(|d| AicTables::read(Path::new(d)).expect("committed tables"))
            .collect();
        let uncached = |t: &AicTables, kv: &str, heads: u64, batch: f64, step: f64| {
            let g = t.mla_grid(kv, heads)?;
            let (lo, hi) = bracket(&g.steps, step)?;
            let (a, b) = (interp(&g.lines[lo], batch)?, interp(&g.lines[hi], batch)?);
            Some(log_lerp(g.steps[lo], a.us, g.steps[hi], b.us, step))
        };
        let mut x = 7u64;
        let mut compared = 0;
        for i in 0..4000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = &tables[(x >> 40) as usize % 2];
            let (kv, heads, _) = &t.mla_grid[(x >> 20) as usize % t.mla_grid.len()];
            // Runs of one batch (as a sweep prices them), then a jump.
            let batch = [1.0, 3.0, 17.0, 64.0, 250.0, 700.0][(i / 37) as usize % 6];
            let step = 2.0 + ((x >> 8) % 300_000) as f64;
            let got = t.mla_module(kv, *heads, batch, step).map(|p| p.us);
            let want = uncached(t, kv, *heads, batch, step);
            assert_eq!(
                got.map(f64::to_bits),
                want.map(f64::to_bits),
                "{kv} {heads} heads, batch {batch}, KV {step}"
            );
            compared += got.is_some() as u32;
            let min = t.mla_min_step(kv, *heads).unwrap();
            let growth = t
                .mla_attention_growth(kv, *heads, batch, step)
                .map(|p| p.us);
            let want = want
                .zip(uncached(t, kv, *heads, batch, min))
                .map(|(f, b)| (f - b).max(0.0));
            assert_eq!(growth.map(f64::to_bits), want.map(f64::to_bits), "growth");
        }
        assert!(compared > 3000, "{compared}");
    }

    #[test]
    fn balanced_rows_read_at_the_tokens_that_touch_as_many_experts() {
        assert_eq!(moe_tokens_for_lookup("balanced", 32, 188, 384, 8), 23.5);
        assert_eq!(moe_tokens_for_lookup("balanced", 128, 384, 384, 8), 128.0);
        assert_eq!(
            moe_tokens_for_lookup("power_law_1.01", 32, 100, 384, 8),
            32.0
        );
        assert_eq!(moe_table_distribution(&Routing::Uniform), "balanced");
        let eq = AIC_EQUIVALENT_ALPHA[1];
        assert_eq!(
            moe_table_distribution(&Routing::PowerLaw { alpha: eq.1 }),
            eq.0
        );
    }
}

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

mod mla;
mod moe;

use mla::mla_attention;
pub(crate) use mla::{mla_rows_apply, MlaPair};

use super::kernel::kernel_us;
use super::profile::CalibrationProfile;
use super::table::{bracket, interp, log_lerp, log_lerp_ln, TablePrice};
use crate::error::{Error, Result};
use crate::measurements::{
    read_aic_comm_csv, read_aic_gemm_csv, read_aic_mla_csv, read_aic_moe_csv, AicCommRow,
};
use crate::scenario::routing::{Routing, AIC_EQUIVALENT_ALPHA};
use crate::scenario::{Proto, Scenario};
use crate::workload::op::Stream;
use crate::workload::{CostFamily, Op, Workload};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

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

/// One collective's latency against message bytes, and where NCCL's tuner switched from LL to
/// Simple in it: the row at 64 KiB or more where the incremental cost per byte falls most, and
/// by more than 1/0.6 (LL moves half its bytes as flags, docs/sources.md §4.2, so the switch shows as a
/// drop in latency or a sharp kink).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommCurve {
    pub pts: Vec<(f64, f64)>,
    /// Index of the first Simple row; None when no switch shows.
    pub switch: Option<usize>,
}

/// Below this size a slope change is noise (the latency floor dominates).
const SWITCH_MIN_BYTES: f64 = 65_536.0;

impl CommCurve {
    fn new(mut pts: Vec<(f64, f64)>) -> Self {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 == b.0);
        let slope = |i: usize| (pts[i].1 - pts[i - 1].1) / (pts[i].0 - pts[i - 1].0);
        // The sharpest fall of the cost per byte (a drop in latency counts as infinite): a
        // protocol change, where a wiggle at small sizes is a smaller one.
        let fall = |i: usize| {
            let (a, b) = (slope(i - 1), slope(i));
            if b <= 0.0 {
                f64::INFINITY
            } else {
                a / b
            }
        };
        let switch = (2..pts.len())
            .filter(|&i| pts[i].0 >= SWITCH_MIN_BYTES && fall(i) > 1.0 / 0.6)
            .max_by(|&i, &j| fall(i).total_cmp(&fall(j)).then(j.cmp(&i)));
        CommCurve { pts, switch }
    }

    /// The rows of one protocol regime (`Auto`: all of them, NCCL's own choice per size).
    pub fn regime(&self, proto: Proto) -> Option<&[(f64, f64)]> {
        match (proto, self.switch) {
            (Proto::Auto, _) => Some(&self.pts),
            (Proto::Ll, Some(s)) => Some(&self.pts[..s]),
            (Proto::Simple, Some(s)) => Some(&self.pts[s..]),
            (Proto::Ll, None) => Some(&self.pts),
            _ => None,
        }
    }

    /// The switch as a size bracket (last LL row, first Simple row), bytes.
    pub fn switch_bytes(&self) -> Option<(f64, f64)> {
        self.switch.map(|s| (self.pts[s - 1].0, self.pts[s].0))
    }
}

/// Latency against bytes: log-log inside the rows, linear (latency + bytes / bandwidth of the
/// end segment) outside them, which is how a collective grows.
pub fn comm_price(pts: &[(f64, f64)], bytes: f64) -> Option<TablePrice> {
    let (first, last) = (pts.first()?, pts.last()?);
    if pts.len() == 1 {
        return Some(TablePrice {
            us: first.1,
            extrapolated: bytes != first.0,
        });
    }
    let lin = |a: (f64, f64), b: (f64, f64)| {
        let slope = ((b.1 - a.1) / (b.0 - a.0)).max(0.0);
        (a.1 + slope * (bytes - a.0)).max(a.1.min(b.1) * 0.5)
    };
    if bytes > last.0 {
        let n = pts.len();
        return Some(TablePrice {
            us: lin(pts[n - 2], pts[n - 1]),
            extrapolated: true,
        });
    }
    if bytes < first.0 {
        return Some(TablePrice {
            us: lin(pts[0], pts[1]).min(first.1),
            extrapolated: true,
        });
    }
    interp(pts, bytes)
}

/// The latency part of a collective's price read from `pts`: the rows' first segment
/// extrapolated to zero bytes (within [0, the first row]). The bytes term is the rest, so a
/// regime whose rows start at a large size (Simple from 1 MiB) still has one.
pub fn comm_latency(pts: &[(f64, f64)]) -> f64 {
    match pts {
        [] => 0.0,
        [a] => a.1,
        [a, b, ..] => {
            let slope = ((b.1 - a.1) / (b.0 - a.0)).max(0.0);
            (a.1 - slope * a.0).clamp(0.0, a.1)
        }
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

/// The files a converted tables folder may hold (harness/aiconfigurator_tables.py writes them).
pub const TABLE_FILES: [&str; 6] = [
    "moe.csv",
    "gemm.csv",
    "mla_generation.csv",
    "nccl_collectives.csv",
    "custom_allreduce.csv",
    super::internode::MULTINODE_CSV,
];

impl AicTables {
    /// Reads the converted tables present in `dir` (moe.csv, gemm.csv, mla_generation.csv,
    /// nccl_collectives.csv, custom_allreduce.csv); at least one must be there.
    pub fn read(dir: &Path) -> Result<Self> {
        Self::read_only(dir, None)
    }

    /// [`AicTables::read`], of the files named in `only` where given (`TABLE_FILES` names).
    pub fn read_only(dir: &Path, only: Option<&[String]>) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Read {
                path: dir.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut t = AicTables {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            // Canonical, so reports name `data/calibration/aiconfigurator/x`, not `a/../x`.
            dir: dir.canonicalize().unwrap_or(dir.to_path_buf()),
            ..Default::default()
        };
        let present = |name: &str| {
            let p = dir.join(name);
            let wanted = only.is_none_or(|o| o.iter().any(|n| n == name));
            (wanted && p.exists()).then_some(p)
        };
        if let Some(p) = present("moe.csv") {
            let rows = read_aic_moe_csv(&p)?;
            t.files.insert("moe.csv".into(), rows.len());
            no_conflicts(
                &p,
                rows.iter().map(|r| {
                    Some((
                        format!(
                            "{} {} experts={} hidden={} inter={} topk={} moe_tp={} moe_ep={} num_tokens={}",
                            r.distribution, r.quant, r.experts, r.hidden, r.inter, r.topk, r.moe_tp, r.moe_ep, r.tokens
                        ),
                        r.latency_us,
                    ))
                }),
            )?;
            for r in rows {
                let key = (
                    r.distribution,
                    r.quant,
                    r.experts,
                    r.hidden,
                    r.inter,
                    r.topk,
                    r.moe_tp,
                    r.moe_ep,
                );
                t.moe
                    .entry(key)
                    .or_default()
                    .push((r.tokens as f64, r.latency_us));
            }
            let mut pooled = 0;
            for v in t.moe.values_mut() {
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                pooled += super::isotonic::fit_rows(v);
            }
            t.isotonic.insert("moe.csv".into(), pooled);
        }
        if let Some(p) = present("gemm.csv") {
            let rows = read_aic_gemm_csv(&p)?;
            t.files.insert("gemm.csv".into(), rows.len());
            no_conflicts(
                &p,
                rows.iter().map(|r| {
                    Some((
                        format!("{} m={} n={} k={}", r.dtype, r.m, r.n, r.k),
                        r.latency_us,
                    ))
                }),
            )?;
            for r in rows {
                t.gemm
                    .entry(r.dtype)
                    .or_default()
                    .entry((r.n, r.k))
                    .or_default()
                    .push((r.m as f64, r.latency_us));
            }
            let mut pooled = 0;
            for v in t.gemm.values_mut().flat_map(|g| g.values_mut()) {
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                pooled += super::isotonic::fit_rows(v);
            }
            t.isotonic.insert("gemm.csv".into(), pooled);
        }
        if let Some(p) = present("mla_generation.csv") {
            let rows = read_aic_mla_csv(&p)?;
            t.files.insert("mla_generation.csv".into(), rows.len());
            // The lookup keys on (kv dtype, heads, batch, step) among the BF16-GEMM rows; rows
            // of other GEMM dtypes are not read and cannot conflict.
            no_conflicts(
                &p,
                rows.iter().map(|r| {
                    (r.gemm_dtype == "bfloat16").then(|| {
                        (
                            format!(
                                "kv_dtype={} num_heads={} batch={} step={}",
                                r.kv_dtype, r.num_heads, r.batch, r.step
                            ),
                            r.latency_us,
                        )
                    })
                }),
            )?;
            for r in rows.into_iter().filter(|r| r.gemm_dtype == "bfloat16") {
                t.mla.entry((r.kv_dtype, r.num_heads)).or_default().push((
                    r.batch as f64,
                    r.step as f64,
                    r.latency_us,
                ));
            }
            let mut pooled = 0;
            for v in t.mla.values_mut() {
                v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
                pooled += super::isotonic::fit_grid(v);
            }
            t.isotonic.insert("mla_generation.csv".into(), pooled);
            t.mla_grid = t
                .mla
                .iter()
                .map(|((kv, heads), g)| (kv.clone(), *heads, MlaGrid::new(g)))
                .collect();
        }
        if let Some(p) = present("nccl_collectives.csv") {
            let rows = read_aic_comm_csv(&p)?;
            t.files.insert("nccl_collectives.csv".into(), rows.len());
            t.nccl = comm_curves(&p, &rows, |r| r.op.clone())?
                .into_iter()
                .map(|(k, v)| (k, CommCurve::new(v)))
                .collect();
        }
        if let Some(p) = present("custom_allreduce.csv") {
            let rows = read_aic_comm_csv(&p)?;
            t.files.insert("custom_allreduce.csv".into(), rows.len());
            t.custom = comm_curves(&p, &rows, |r| r.mode.clone())?;
            for v in t.custom.values_mut() {
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                v.dedup_by(|a, b| a.0 == b.0);
            }
        }
        if let Some(p) = present(super::internode::MULTINODE_CSV) {
            let m = super::internode::MultiNodeTable::read(&p)?;
            t.files
                .insert(super::internode::MULTINODE_CSV.into(), m.rows());
            t.multinode = Some(m);
        }
        let manifest = dir.join("MANIFEST.txt");
        if manifest.is_file() {
            let text = crate::files::read_text(&manifest, crate::files::InputKind::Manifest)?;
            t.device = manifest_device(&text);
        }
        if t.files.is_empty() {
            return Err(Error::NothingFound { path: dir.to_path_buf(), what: "no AIConfigurator table found", expected: "moe.csv, gemm.csv, mla_generation.csv, nccl_collectives.csv and/or custom_allreduce.csv, as harness/aiconfigurator_tables.py writes them".into() });
        }
        Ok(t)
    }

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

/// The device a converted folder's MANIFEST.txt names (`device 'NVIDIA H200'`), as
/// harness/aiconfigurator_tables.py writes it.
pub fn manifest_device(manifest: &str) -> Option<String> {
    let re = regex::Regex::new(r"device '([^']{1,120})'").expect("valid regex");
    re.captures(manifest).map(|c| c[1].to_string())
}

/// Whether tables measured on `device` describe a GPU of this display name (the display name
/// starts with it: 'NVIDIA H200' describes 'NVIDIA H200 SXM').
pub fn device_matches(device: &str, gpu_display_name: &str) -> bool {
    gpu_display_name.starts_with(device)
}

/// Groups collective rows by (key, nranks), keeping per group the element type of 2 bytes when
/// present (BF16 activations are what a decode step reduces), else whatever the group has.
/// Two rows at the same message size with different latencies are an error (see
/// [`no_conflicts`]).
fn comm_curves(
    path: &Path,
    rows: &[AicCommRow],
    key: impl Fn(&AicCommRow) -> String,
) -> Result<CommLines> {
    let mut two_byte: HashMap<(String, u32), bool> = HashMap::new();
    for r in rows {
        let e = two_byte.entry((key(r), r.nranks)).or_default();
        *e |= r.bytes == 2 * r.elements;
    }
    let kept = |r: &AicCommRow| !(two_byte[&(key(r), r.nranks)] && r.bytes != 2 * r.elements);
    no_conflicts(
        path,
        rows.iter().map(|r| {
            kept(r).then(|| {
                (
                    format!("{} nranks={} bytes={}", key(r), r.nranks, r.bytes),
                    r.latency_us,
                )
            })
        }),
    )?;
    let mut out: HashMap<(String, u32), Vec<(f64, f64)>> = HashMap::new();
    for r in rows.iter().filter(|r| kept(r)) {
        out.entry((key(r), r.nranks))
            .or_default()
            .push((r.bytes as f64, r.latency_us));
    }
    Ok(out)
}

/// Refuses two rows of one table with the same lookup key and different latencies: the reader
/// would keep one of them silently. Identical repeats are accepted (they price the same).
/// `rows` yields, per data row in file order, its key and latency, or None for a row the lookup
/// does not read; data row i is line i + 2 of the file (line 1 is the header).
fn no_conflicts(path: &Path, rows: impl Iterator<Item = Option<(String, f64)>>) -> Result<()> {
    let mut seen: HashMap<String, (usize, f64)> = HashMap::new();
    for (i, row) in rows.enumerate() {
        let Some((key, us)) = row else { continue };
        let line = i + 2;
        match seen.get(&key) {
            Some(&(first, v)) if v != us => {
                return Err(Error::Input {
                    path: path.to_path_buf(),
                    problem: format!(
                        "lines {first} and {line} give the same row ({key}) different latencies ({v} and {us} µs): a duplicate that conflicts (remove one; identical repeats are accepted)"
                    ),
                })
            }
            Some(_) => {}
            None => {
                seen.insert(key, (line, us));
            }
        }
    }
    Ok(())
}

/// Prices the scenario's ops that AIConfigurator tables hold, before the roofline law: the
/// routed-expert module per layer, BF16 GEMMs (not batched matmuls), and the MLA decode kernel
/// with its split-KV reduce. `us[i]` is None where no table applies.
#[derive(Debug, Default)]
pub struct Overrides {
    pub us: Vec<Option<f64>>,
    /// The part of `us[i]` the profile's factors treat apart (`Pricing::split_us`): attention's
    /// price at the table's smallest KV length, a routed-expert GEMM's weight read; 0 elsewhere.
    pub split: Vec<f64>,
    pub families: BTreeSet<(String, String)>,
    pub warnings: BTreeSet<String>,
    /// `cost::price_quiet`: `families` and `warnings` stay empty, nothing is formatted.
    pub quiet: bool,
}

/// Counts of what the lookups did, folded into one warning each.
#[derive(Default)]
struct Tally {
    floored: usize,
    /// Calls priced by the DRAM-bound rows' line (`resident`), with the last line used.
    by_dram_line: usize,
    line: Option<super::resident::DramLine>,
    extrapolated: usize,
    below_first_row: usize,
    priced: usize,
}

/// `units::path(dir)`, remembered per thread for the last folder asked: it reads the working
/// folder (a system call), and pricing runs once per shape, a sweep's hot path.
fn shown_dir(dir: &std::path::Path) -> String {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(std::path::PathBuf, String)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|c| {
        let mut c = c.borrow_mut();
        match c.as_ref() {
            Some((p, shown)) if p == dir => shown.clone(),
            _ => {
                let shown = crate::units::path(dir);
                *c = Some((dir.to_path_buf(), shown.clone()));
                shown
            }
        }
    })
}

pub fn overrides(w: &Workload, s: &Scenario, p: &CalibrationProfile) -> Option<Overrides> {
    overrides_with(w, s, p, false)
}

/// `overrides`, with `quiet` as `cost::price_quiet` asks: the same prices, no text.
pub fn overrides_with(
    w: &Workload,
    s: &Scenario,
    p: &CalibrationProfile,
    quiet: bool,
) -> Option<Overrides> {
    let prepared = Prepared::new(s, p)?;
    let mut o = Overrides {
        quiet,
        ..Default::default()
    };
    prepared.overrides_into(w, s, p, &super::Kernels::of(p), &mut o);
    Some(o)
}

impl Overrides {
    /// No table prices (a profile without AIConfigurator tables), the vectors kept.
    pub(crate) fn clear(&mut self) {
        self.us.clear();
        self.split.clear();
        // Quiet pricing leaves them empty: no call into the maps.
        if !self.families.is_empty() {
            self.families.clear();
        }
        if !self.warnings.is_empty() {
            self.warnings.clear();
        }
    }
}

/// What the table lookups resolve from the scenario and profile alone (`cost::PreparedPricer`):
/// which converted files the folder has, and the profile's scale per op family.
#[derive(Debug, Clone)]
pub struct Prepared {
    gemm: bool,
    moe: bool,
    mla: bool,
    /// `aiconfigurator.scales` per `CostFamily as usize`.
    scale: Vec<f64>,
}

impl Prepared {
    /// None when the profile has no AIConfigurator tables.
    pub fn new(s: &Scenario, p: &CalibrationProfile) -> Option<Self> {
        let (t, sec) = (p.aic.as_ref()?, p.aiconfigurator.as_ref()?);
        Some(Prepared {
            gemm: t.has("gemm.csv"),
            // The tables time vLLM's fused MoE; the reference step runs its own grouped GEMMs.
            moe: t.has("moe.csv") && s.runtime == crate::scenario::Runtime::Vllm,
            mla: t.has("mla_generation.csv"),
            scale: CostFamily::ALL.iter().map(|f| sec.scale(f.key())).collect(),
        })
    }

    /// Whether the MLA module rows price MLA attention (`cost::attention`).
    pub(crate) fn prices_mla(&self) -> bool {
        self.mla
    }

    /// Whether a GEMM or MoE table may price `op` (`cost::attention` leaves those ops to the
    /// general pricer).
    pub(crate) fn prices_family(&self, op: &Op) -> bool {
        (self.gemm && op.family == CostFamily::GemmBf16) || (self.moe && is_moe_module_op(op))
    }

    /// The profile's scale of family `f`'s table prices.
    pub(crate) fn scale(&self, f: CostFamily) -> f64 {
        self.scale[f as usize]
    }

    /// The table prices of `w`'s ops into `o` (its vectors reused; `o.quiet` as asked).
    pub(crate) fn overrides_into(
        &self,
        w: &Workload,
        s: &Scenario,
        p: &CalibrationProfile,
        kernels: &super::Kernels,
        o: &mut Overrides,
    ) {
        let (Some(t), Some(sec)) = (p.aic.as_ref(), p.aiconfigurator.as_ref()) else {
            o.clear();
            return;
        };
        o.clear();
        o.us.resize(w.ops.len(), None);
        o.split.resize(w.ops.len(), 0.0);
        // Bytes per µs: no table price may beat reading the op's bytes from DRAM (module doc).
        let bw = s.system.gpu.memory_bandwidth_gbps * 1e3;
        let dir = if o.quiet {
            String::new()
        } else {
            shown_dir(&t.dir)
        };
        let lk = LawKernels { s, kernels, bw };
        if self.gemm {
            gemms(w, t, bw, o, &dir);
        }
        if self.moe {
            moe::moe_modules(w, s, &lk, t, bw, o, &dir);
        }
        if self.mla {
            mla_attention(w, &lk, t, sec, o, &dir);
        }
        let used = [
            (self.gemm, "gemm.csv"),
            (self.moe, "moe.csv"),
            (self.mla, "mla_generation.csv"),
        ];
        let pooled: Vec<String> = used
            .iter()
            .filter(|(on, _)| *on)
            .filter_map(|(_, f)| {
                let n = *t.isotonic.get(*f)?;
                (n > 0).then(|| format!("{f} {n} of {}", t.files.get(*f).copied().unwrap_or(0)))
            })
            .collect();
        if !pooled.is_empty() {
            note!(o.quiet, o.warnings, format!(
                "isotonic fit of {dir}: {} rows pooled, each below a smaller shape's time in its line (collector noise: the time never falls as the work grows)",
                pooled.join(", ")
            ));
        }
        for ((us, split), op) in o.us.iter_mut().zip(&mut o.split).zip(&w.ops) {
            if let Some(v) = us {
                let f = self.scale[op.family as usize];
                *v *= f;
                *split *= f;
            }
        }
    }
}

/// A kernel's law price, or its bytes at the DRAM roofline where the profile has no law
/// (`law_or_bytes`), with the laws resolved once (`cost::Kernels`).
struct LawKernels<'a> {
    s: &'a Scenario,
    kernels: &'a super::Kernels,
    bw: f64,
}

impl LawKernels<'_> {
    fn law_or_bytes(&self, op: &Op) -> f64 {
        match self.kernels.get(op.family) {
            Some(k) => kernel_us(op, k, &self.s.system.gpu),
            None => op.bytes / self.bw,
        }
    }
}

fn gemms(w: &Workload, t: &AicTables, bw: f64, o: &mut Overrides, dir: &str) {
    let mut n = Tally::default();
    for (i, op) in w.ops.iter().enumerate() {
        if op.family != CostFamily::GemmBf16 || op.shape.batch > 1 {
            continue;
        }
        let Some(tp) = t.gemm("bfloat16", op.shape.m, op.shape.n, op.shape.k) else {
            continue;
        };
        let floor = op.bytes / bw;
        n.floored += usize::from(tp.us < floor);
        n.extrapolated += usize::from(tp.extrapolated);
        n.priced += 1;
        o.us[i] = Some(tp.us.max(floor));
    }
    if n.priced == 0 {
        return;
    }
    note!(o.quiet, o.families, (
        "gemm_bf16".into(),
        format!("measured: AIConfigurator gemm.csv ({dir}), {} GEMMs interpolated in m, n, k (batched matmuls by the law)", n.priced),
    ));
    if n.extrapolated > 0 {
        note!(o.quiet, o.warnings, format!(
            "gemm_bf16: {} of {} table-priced GEMMs lie outside the AIConfigurator grid (m, n or k): extrapolated in proportion to n·k or along m",
            n.extrapolated, n.priced
        ));
    }
    if n.floored > 0 {
        note!(o.quiet, o.warnings, format!(
            "gemm_bf16: {} GEMM table prices were below the DRAM roofline of their weights (L2-resident in the collector's repeated calls) and were raised to it",
            n.floored
        ));
    }
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

/// The leave-one-out rms log error of log-log interpolation along each line of rows (x, µs):
/// every inner row predicted from its two neighbours.
fn loo(lines: &mut dyn Iterator<Item = Vec<(f64, f64)>>) -> Option<f64> {
    let mut sq = Vec::new();
    for line in lines {
        for w in line.windows(3) {
            let (a, b, c) = (w[0], w[1], w[2]);
            let ok = |p: (f64, f64)| p.0 > 0.0 && p.1 > 0.0;
            if !(ok(a) && ok(b) && ok(c)) || a.0 >= b.0 || b.0 >= c.0 {
                continue;
            }
            let pred = log_lerp(a.0, a.1, c.0, c.1, b.0);
            if pred > 0.0 && pred.is_finite() {
                sq.push((b.1 / pred).ln().powi(2));
            }
        }
    }
    // The lines come in a hash map's order, which changes from run to run: summed in sorted
    // order, the figure (and every interval drawn from it) is the same bit for bit each run.
    sq.sort_by(f64::total_cmp);
    let n = sq.len();
    (n > 0).then(|| (sq.iter().sum::<f64>() / n as f64).sqrt())
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

/// Leave-one-out error of the tables' log-log interpolation, per table family (`moe`, `gemm`,
/// `mla`, `nccl`): each interior row predicted from its two neighbours on its line (log-log
/// between them, as the lookups interpolate), the rms of ln(row / prediction). What a price read
/// between rows may be off by; `whatif::uncertainty` draws it. Families with fewer than one
/// interior row are absent.
impl AicTables {
    /// [`AicTables::interpolation_rms_log_error`]'s MoE figure over the rows of one shape
    /// ([`moe_shape`]); None where the table holds none of them (the law prices those experts).
    pub fn moe_rms_log_error_for(&self, shape: &MoeShape) -> Option<f64> {
        loo(&mut self
            .moe
            .iter()
            .filter(|(k, _)| {
                (k.1.as_str(), k.2, k.3, k.4, k.5) == (shape.0, shape.1, shape.2, shape.3, shape.4)
            })
            .map(|(_, v)| v.clone()))
    }

    pub fn interpolation_rms_log_error(&self) -> BTreeMap<&'static str, f64> {
        let mut out = BTreeMap::new();
        let moe = loo(&mut self.moe.values().cloned());
        let gemm = loo(&mut self.gemm.values().flat_map(|g| g.values().cloned()));
        // MLA rows vary in batch (at each KV length) and in KV length (at each batch).
        let mla = loo(&mut self.mla.values().flat_map(|g| {
            let mut by_step: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
            let mut by_batch: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
            for &(b, st, us) in g {
                by_step.entry(st as u64).or_default().push((b, us));
                by_batch.entry(b as u64).or_default().push((st, us));
            }
            let mut lines: Vec<Vec<(f64, f64)>> = by_step
                .into_values()
                .chain(by_batch.into_values())
                .collect();
            for l in &mut lines {
                l.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            lines
        }));
        let nccl = loo(&mut self.nccl.values().map(|c| c.pts.clone()));
        for (k, v) in [("moe", moe), ("gemm", gemm), ("mla", mla), ("nccl", nccl)] {
            if let Some(v) = v {
                out.insert(k, v);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn switch_found_at_the_drop_and_at_the_kink() {
        // 8 ranks: the 1 MiB row is cheaper than the 512 KiB row (NCCL moved to Simple).
        let c = CommCurve::new(vec![
            (65_536.0, 34.2),
            (131_072.0, 47.8),
            (262_144.0, 84.8),
            (524_288.0, 156.1),
            (1_048_576.0, 131.5),
            (2_097_152.0, 221.2),
        ]);
        assert_eq!(c.switch, Some(4));
        assert_eq!(c.regime(Proto::Ll).unwrap().len(), 4);
        assert_eq!(c.regime(Proto::Simple).unwrap()[0].0, 1_048_576.0);
        // 4 ranks: no drop, but the cost per byte falls to a tenth.
        let c = CommCurve::new(vec![
            (131_072.0, 24.9),
            (262_144.0, 41.0),
            (524_288.0, 78.1),
            (1_048_576.0, 86.1),
            (2_097_152.0, 141.7),
        ]);
        assert_eq!(c.switch_bytes(), Some((524_288.0, 1_048_576.0)));
    }

    #[test]
    fn comm_price_extrapolates_linearly() {
        let pts = [(100.0, 10.0), (200.0, 20.0), (400.0, 30.0)];
        let p = comm_price(&pts, 800.0).unwrap();
        assert!(p.extrapolated && (p.us - 50.0).abs() < 1e-9, "{p:?}");
        let p = comm_price(&pts, 200.0).unwrap();
        assert!(!p.extrapolated && (p.us - 20.0).abs() < 1e-9);
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

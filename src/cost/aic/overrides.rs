//! The step's ops priced from the tables before the general pricer: which tables price which
//! ops under a scenario and profile (`Prepared`), the prices and their splits (`Overrides`),
//! BF16 GEMMs here, the MoE call and MLA attention in their own modules, each scaled by the
//! profile's `aiconfigurator.scales`.

use super::mla::mla_attention;
use super::{is_moe_module_op, moe, AicTables};
use crate::cost::kernel::kernel_us;
use crate::cost::profile::CalibrationProfile;
use crate::cost::Kernels;
use crate::scenario::Scenario;
use crate::workload::{CostFamily, Op, Workload};
use std::collections::BTreeSet;

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
pub(super) struct Tally {
    pub(super) floored: usize,
    /// Calls priced by the DRAM-bound rows' line (`resident`), with the last line used.
    pub(super) by_dram_line: usize,
    pub(super) line: Option<crate::cost::resident::DramLine>,
    pub(super) extrapolated: usize,
    pub(super) below_first_row: usize,
    pub(super) priced: usize,
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
    prepared.overrides_into(w, s, p, &Kernels::of(p), &mut o);
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
        kernels: &Kernels,
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
            moe::moe_modules(w, s, &lk, t, o, &dir);
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
pub(super) struct LawKernels<'a> {
    pub(super) s: &'a Scenario,
    pub(super) kernels: &'a Kernels,
    pub(super) bw: f64,
}

impl LawKernels<'_> {
    pub(super) fn law_or_bytes(&self, op: &Op) -> f64 {
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

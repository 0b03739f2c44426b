//! Prices every op of a workload from a calibration profile. Every parameter comes from the
//! profile file; this module holds the laws, not the numbers.

/// Inserts a provenance line or warning into `$set` unless pricing is quiet (`price_quiet`): the
/// line is only formatted when it is kept, since a sweep prices once per shape and never reports
/// these per scenario.
macro_rules! note {
    ($quiet:expr, $set:expr, $e:expr $(,)?) => {
        if !$quiet {
            $set.insert($e);
        }
    };
}

pub mod aic;
pub mod allreduce;
pub mod attention;
mod choice;
pub mod collective;
pub mod deepep;
pub mod fusion;
pub mod internode;
pub mod isotonic;
pub mod kernel;
pub mod kv_dtype;
pub mod kv_transfer;
pub mod link;
mod nccl_price;
pub mod physics;
pub mod profile;
pub mod resident;
mod source;
pub mod table;
pub mod transfer;

pub use choice::{CollectiveAlgo, CollectiveAlgorithm, CollectiveChoice, NormStep};
pub use profile::CalibrationProfile;
pub use source::PCIE_CUSTOM_AR_NOTE;

use crate::category::Category;
use crate::error::{Error, Result};
use crate::scenario::{CommPath, Proto, Scenario};
use crate::workload::{CostFamily, Op, Workload};
use source::{custom_ar_dispatch, Adjustment, CustomAr};
use std::collections::BTreeSet;

/// Base durations of a workload's ops (before jitter and waiting), plus what the report must
/// say about them.
#[derive(Debug, Clone)]
pub struct Pricing {
    pub base_us: Vec<f64>,
    /// Per op, the part of `base_us` that its family's factors treat apart from the rest, as the
    /// source that priced the op split it (`profile::Factors`): a collective's latency (the rest
    /// is its bytes term), attention's price at the smallest context (the rest grows with the KV
    /// length), a routed-expert GEMM's weight read (the rest is per-token work); 0 elsewhere.
    pub split_us: Vec<f64>,
    pub collectives: Vec<CollectiveChoice>,
    /// Cost-model families that priced at least one op, with their provenance.
    pub families: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// Prices every op: collectives by the NCCL law of the cheapest eligible profile entry, kernels
/// from the measurement table where it holds the shape, else by the roofline law.
pub fn price(w: &Workload, s: &Scenario, p: &CalibrationProfile) -> Result<Pricing> {
    price_with(w, s, p, false)
}

/// `price` without the report's text: the same durations, splits and collective choices
/// (bit for bit), but `families` and `warnings` left empty, so that nothing is formatted. For
/// callers that price many shapes and report the text of one normal `price` call only (the
/// sweep's fast path).
pub fn price_quiet(w: &Workload, s: &Scenario, p: &CalibrationProfile) -> Result<Pricing> {
    price_with(w, s, p, true)
}

fn price_with(w: &Workload, s: &Scenario, p: &CalibrationProfile, quiet: bool) -> Result<Pricing> {
    if s.layout.tbo {
        if let Some(parts) = crate::workload::overlap::micro_batch_ops(w) {
            return price_micro_batches(w, s, p, quiet, parts);
        }
    }
    let mut prepared = PreparedPricer::new(s, p, quiet)?;
    prepared.price(w, s, p)?;
    Ok(prepared.into_pricing())
}

/// A two-batch-overlap step (`workload::overlap`) priced as its two micro-batches' passes, each
/// under its own scenario (⌈B/2⌉ and ⌊B/2⌋ sequences): each micro-batch launches its own MoE
/// call on its own tokens (the expert weights are read once per micro-batch) and its own
/// attention over its own sequences, as the pass of that batch alone is priced.
fn price_micro_batches(
    w: &Workload,
    s: &Scenario,
    p: &CalibrationProfile,
    quiet: bool,
    parts: [Vec<usize>; 2],
) -> Result<Pricing> {
    let mut out = Pricing {
        base_us: vec![0.0; w.ops.len()],
        split_us: vec![0.0; w.ops.len()],
        collectives: Vec::new(),
        families: Vec::new(),
        warnings: Vec::new(),
    };
    for (ix, mb) in parts.iter().zip(crate::workload::overlap::micro_batches(s)) {
        let part = Workload {
            ops: ix.iter().map(|&i| w.ops[i].clone()).collect(),
            experts_touched: w.experts_touched.clone(),
            routing: w.routing.clone(),
        };
        let priced = price_with(&part, &mb, p, quiet)?;
        for (k, &i) in ix.iter().enumerate() {
            out.base_us[i] = priced.base_us[k];
            out.split_us[i] = priced.split_us[k];
        }
        for c in priced.collectives {
            match out
                .collectives
                .iter_mut()
                .find(|x| x.op == c.op && x.bytes == c.bytes)
            {
                Some(x) => x.count += c.count,
                None => out.collectives.push(c),
            }
        }
        for f in priced.families {
            if !out.families.contains(&f) {
                out.families.push(f);
            }
        }
        for m in priced.warnings {
            if !out.warnings.contains(&m) {
                out.warnings.push(m);
            }
        }
    }
    Ok(out)
}

/// What pricing resolves before it reads a single op, for one scenario and profile: the NCCL
/// path and protocol, `--allreduce`'s dispatch, the profile's kernel laws by family, the
/// AIConfigurator tables' files and scales, and the buffers the prices are written in. None of
/// it depends on the workload's shapes or on the scenario's batch and context, so a caller that
/// prices many shapes of one scenario (the sweep's fast path: a new KV length per row) builds it
/// once and calls [`PreparedPricer::price`] per shape; `cost::price` builds one per call, so
/// there is one code path.
#[derive(Debug)]
pub struct PreparedPricer {
    setup: Setup,
    kernels: Kernels,
    aic: Option<aic::Prepared>,
    /// The last prices (`price`), their vectors kept from call to call.
    out: Pricing,
    overrides: aic::Overrides,
    by_law: Vec<usize>,
}

impl PreparedPricer {
    /// Resolves what pricing under `s` and `p` needs (`quiet`: as `price_quiet`, no text);
    /// refuses what `cost::price` would refuse before it reads an op (`--allreduce`).
    pub fn new(s: &Scenario, p: &CalibrationProfile, quiet: bool) -> Result<Self> {
        Ok(PreparedPricer {
            setup: Setup::new(s, p, quiet)?,
            kernels: Kernels::of(p),
            aic: aic::Prepared::new(s, p),
            out: Pricing {
                base_us: Vec::new(),
                split_us: Vec::new(),
                collectives: Vec::new(),
                families: Vec::new(),
                warnings: Vec::new(),
            },
            overrides: aic::Overrides {
                quiet,
                ..Default::default()
            },
            by_law: Vec::new(),
        })
    }

    /// Prices every op of `w` (as `cost::price` does) under `s`, which must be the scenario
    /// this was prepared with up to its batch and context, and the same profile `p`.
    pub fn price(
        &mut self,
        w: &Workload,
        s: &Scenario,
        p: &CalibrationProfile,
    ) -> Result<&Pricing> {
        let PreparedPricer {
            setup,
            kernels,
            aic,
            out,
            overrides: o,
            by_law,
        } = self;
        let mut pr = Pricer::with(s, p, setup, kernels, std::mem::take(&mut out.collectives));
        let (base_us, split_us) = (&mut out.base_us, &mut out.split_us);
        base_us.clear();
        split_us.clear();
        by_law.clear();
        match aic {
            Some(a) => a.overrides_into(w, s, p, kernels, o),
            None => o.clear(),
        }
        pr.warnings.append(&mut o.warnings);
        pr.families.append(&mut o.families);
        for i in 0..w.ops.len() {
            let (us, split) = pr.base_price(&w.ops, i, o, by_law)?;
            base_us.push(us);
            split_us.push(split);
        }
        out.collectives = std::mem::take(&mut pr.collectives);
        let mut floor_note = None;
        for step in Adjustment::ORDER {
            if let Some(line) = pr.adjust(step, w, o, by_law, out)? {
                floor_note = Some(line);
            }
        }
        pr.finish(out);
        out.warnings.extend(floor_note);
        check_finite(w, out)?;
        Ok(out)
    }

    /// The prices of the last `price` call.
    pub fn into_pricing(self) -> Pricing {
        self.out
    }
}

/// Every price a finite time ≥ 0: a zero or infinite bandwidth or time anywhere on an op's
/// path (a link the system file leaves at 0, a law that divides by it) would otherwise reach the
/// step as an infinite or NaN time, or vanish from it.
fn check_finite(w: &Workload, out: &Pricing) -> Result<()> {
    let Some(i) = out
        .base_us
        .iter()
        .position(|u| !(u.is_finite() && *u >= 0.0))
    else {
        return Ok(());
    };
    let op = &w.ops[i];
    let how = out
        .collectives
        .iter()
        .find(|c| c.op == op.family.key() && c.bytes == op.message_bytes)
        .map(|c| format!(", {} over {} ({})", c.op, c.path, c.source))
        .unwrap_or_default();
    Err(Error::ScenarioPart {
        part: format!("op '{}'", op.name),
        problem: format!(
            "priced at {} µs{how}: not a time; some input on its path states a zero or infinite bandwidth or time (the system file's links and network, the profile's laws)",
            out.base_us[i]
        ),
    })
}

/// The profile's kernel laws by family (`CostFamily as usize`), resolved once per prepared
/// pricer: a map lookup per op priced was a tenth of a sweep's attention price.
#[derive(Debug, Clone)]
pub(crate) struct Kernels(Vec<Option<profile::KernelParams>>);

impl Kernels {
    fn of(p: &CalibrationProfile) -> Self {
        Kernels(
            CostFamily::ALL
                .iter()
                .map(|&f| p.kernel(f).cloned())
                .collect(),
        )
    }

    pub(crate) fn get(&self, f: CostFamily) -> Option<&profile::KernelParams> {
        self.0[f as usize].as_ref()
    }
}

/// What `Pricer` resolves from the scenario and profile alone (`PreparedPricer`).
#[derive(Debug)]
struct Setup {
    path: CommPath,
    proto: Proto,
    custom_ar: bool,
    custom_pcie: bool,
    quiet: bool,
    /// The notes of the setup itself (profile, protocol, `--allreduce`), every pricing's first.
    warnings: BTreeSet<String>,
}

/// What pricing one workload accumulates besides the durations.
struct Pricer<'a> {
    s: &'a Scenario,
    p: &'a CalibrationProfile,
    kernels: &'a Kernels,
    path: CommPath,
    /// The protocol actually eligible on this path (LL128 falls back off NVLink).
    proto: Proto,
    warnings: BTreeSet<String>,
    families: BTreeSet<(String, String)>,
    collectives: Vec<CollectiveChoice>,
    from_table: usize,
    /// vLLM would run its custom all-reduce kernel for this scenario (`--allreduce`).
    custom_ar: bool,
    /// ... and it is the hypothetical PCIe build mainline vLLM refuses (`[custom_allreduce_pcie]`).
    custom_pcie: bool,
    /// `price_quiet`: no warnings or provenance are formatted.
    quiet: bool,
}

impl Setup {
    fn new(s: &Scenario, p: &CalibrationProfile, quiet: bool) -> Result<Self> {
        let gpu = &s.system.gpu;
        let path = s.comm_path();
        let mut warnings = BTreeSet::new();
        if p.profile.gpu != gpu.name {
            return Err(gpu_mismatch(s, p));
        }
        if let Some(t) = &p.transfer {
            note!(quiet, warnings, t.note(&p.profile.name, &gpu.name));
        }
        for mark in p.poor_fit_marks() {
            note!(quiet, warnings, format!(
                "calibration profile '{}' was written despite a poor fit (--allow-poor-fit): {mark}",
                p.profile.name
            ));
        }
        let mut proto = s.nccl.proto;
        if proto == Proto::Ll128 && path != CommPath::Nvlink {
            note!(quiet, warnings, format!(
                "NCCL_PROTO=LL128 is not eligible on the {} path (NCCL enables LL128 only over NVLink); priced as NCCL's fallback",
                path.name()
            ));
            proto = Proto::Auto;
        }
        if let (Some(t), false) = (s.comm.nccl_ll_threshold, proto == Proto::Auto) {
            note!(quiet, warnings, format!(
                "--nccl-ll-threshold {t} changes nothing: NCCL_PROTO={} forces one protocol for every size",
                proto
            ));
        }
        let dispatch = custom_ar_dispatch(s, p, quiet, &mut warnings)?;
        let (custom_ar, custom_pcie) =
            (dispatch != CustomAr::Off, dispatch == CustomAr::PciePatched);
        Ok(Setup {
            path,
            proto,
            custom_ar,
            custom_pcie,
            quiet,
            warnings,
        })
    }
}

impl<'a> Pricer<'a> {
    fn with(
        s: &'a Scenario,
        p: &'a CalibrationProfile,
        setup: &Setup,
        kernels: &'a Kernels,
        mut collectives: Vec<CollectiveChoice>,
    ) -> Self {
        collectives.clear();
        Pricer {
            s,
            p,
            kernels,
            path: setup.path,
            proto: setup.proto,
            warnings: setup.warnings.clone(),
            families: BTreeSet::new(),
            collectives,
            from_table: 0,
            custom_ar: setup.custom_ar,
            custom_pcie: setup.custom_pcie,
            quiet: setup.quiet,
        }
    }

    /// A table-priced collective under the profile's `aiconfigurator.scales.collectives`.
    fn table_scaled(&self, mut c: CollectiveChoice) -> CollectiveChoice {
        if let Some(a) = &self.p.aiconfigurator {
            let f = a.scale("collectives");
            c.time_us *= f;
            c.latency_us *= f;
        }
        c
    }

    /// Records a collective's choice (one row per op and size) and returns its time and the
    /// latency part of it.
    fn record(&mut self, op: &Op, c: CollectiveChoice) -> (f64, f64) {
        let t = (c.time_us, c.latency_us.clamp(0.0, c.time_us.max(0.0)));
        match self.collectives.iter_mut().find(|x| {
            x.op == op.family.key()
                && x.bytes == op.message_bytes
                && x.algo == c.algo
                && x.proto == c.proto
        }) {
            Some(x) => x.count += 1,
            None => self.collectives.push(c),
        }
        t
    }

    /// Ranks the collective spans: its own group (decode context parallelism), else TP.
    fn group_of(&self, op: &Op) -> u32 {
        if op.group > 0 {
            op.group
        } else {
            self.s.layout.tp
        }
    }

    /// The protocol this message is priced with: the forced one, or under `auto` with
    /// `--nccl-ll-threshold` LL below the threshold and Simple from it (NCCL's own choice
    /// without it).
    fn proto_for(&self, bytes: u64) -> Proto {
        match (self.proto, self.s.comm.nccl_ll_threshold) {
            (Proto::Auto, Some(t)) if bytes < t => Proto::Ll,
            (Proto::Auto, Some(_)) => Proto::Simple,
            (p, _) => p,
        }
    }

    /// A collective's price (its time and latency part), recorded for the report: its path's
    /// price `c`, with the RMSNorm a fused all-reduce took in (`cost::fusion`).
    fn collective(&mut self, op: &Op, mut c: CollectiveChoice) -> Result<(f64, f64)> {
        if op.fused_norm.is_some() {
            let law = self.p.fused_allreduce_rms.as_ref().ok_or_else(|| {
                Error::field(
                    &self.p.path,
                    "fused_allreduce_rms",
                    format!(
                        "missing: --fuse-allreduce-rms on needs the fused kernel's law (data/calibration/h200/profile.toml states one); profile '{}' has none",
                        self.p.profile.name
                    ),
                )
            })?;
            let norm = self.kernels.get(CostFamily::Norm);
            let (fused, note) = fusion::price(c, op, self.s, law, norm, &self.p.path)?;
            if let Some(n) = note {
                note!(self.quiet, self.warnings, n);
            }
            c = fused;
        }
        Ok(self.record(op, c))
    }

    /// Moves the notes the pricing accumulated into `out`.
    fn finish(mut self, out: &mut Pricing) {
        if let (Some(t), false) = (&self.p.table, self.quiet) {
            self.families.insert((
                "measured table".to_string(),
                format!(
                    "{} ops interpolated from {} ({} points)",
                    self.from_table,
                    t.path.display(),
                    t.len()
                ),
            ));
        }
        out.families.clear();
        out.warnings.clear();
        if !(self.families.is_empty() && self.warnings.is_empty()) {
            out.families.extend(self.families);
            out.warnings.extend(self.warnings);
        }
    }
}

/// A kernel's law price and its split (`Pricing::split_us`): attention's fixed cost (a KV write
/// is all fixed), a routed-expert GEMM's weight read, 0 elsewhere.
pub(crate) fn law_price(
    op: &Op,
    k: &profile::KernelParams,
    gpu: &crate::scenario::GpuSpec,
) -> (f64, f64) {
    let parts = kernel::kernel_parts(op, k, gpu);
    let us = parts.total();
    let split = if op.category == Category::Attention {
        if op.family == CostFamily::KvWrite {
            us
        } else {
            parts.fixed
        }
    } else if aic::is_moe_gemm(op.family) {
        parts.memory
    } else {
        0.0
    };
    (us, split.min(us))
}

/// A profile measured on another GPU than the system's: its tables would price this GPU with
/// that one's times, so it is refused, with how to get a profile of this GPU.
fn gpu_mismatch(s: &Scenario, p: &CalibrationProfile) -> Error {
    let gpu = &s.system.gpu.name;
    Error::ScenarioSetting {
        flag: "--calibration",
        value: p.profile.name.clone(),
        problem: format!(
            ": profile '{}' ({}) holds prices measured on GPU '{}', but system '{}' has '{gpu}': its measured tables would price the {gpu} with the {}'s times. Use a profile of {gpu} (`decodesim list` shows each profile's GPU), or move this one to {gpu} by physics, marked transferred in every report: `decodesim calibrate --transfer-profile {} --transfer-to {gpu} --system SYSTEM_IT_WAS_MEASURED_ON --out PROFILE.toml`",
            p.profile.name,
            crate::units::path(&p.path),
            p.profile.gpu,
            s.system.name,
            p.profile.gpu,
            p.profile.name,
        ),
    }
}

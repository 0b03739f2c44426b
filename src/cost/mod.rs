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
pub mod table;
pub mod transfer;

pub use profile::CalibrationProfile;

use crate::category::Category;
use crate::error::{Error, Result};
use crate::scenario::deployment::AllreduceImpl;
use crate::scenario::{CommPath, Proto, Scenario};
use crate::workload::{CostFamily, Op, OpRole, Workload};
use serde::Serialize;
use std::collections::BTreeSet;

/// Which collective configuration was picked for a message size, and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveChoice {
    pub op: &'static str,
    pub bytes: u64,
    pub count: u32,
    pub path: &'static str,
    pub algo: String,
    pub proto: String,
    /// Transfer time once every rank has arrived (no waiting), µs.
    pub time_us: f64,
    pub source: String,
    /// The latency part of `time_us` (what does not grow with the bytes), for factors that
    /// scale latency and bandwidth apart.
    #[serde(skip)]
    pub latency_us: f64,
}

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
        for (i, op) in w.ops.iter().enumerate() {
            let (us, split) = if op.family.is_sync() {
                (0.0, 0.0)
            } else if op.family.is_collective() {
                pr.collective(op)?
            } else if let Some(us) = o.us.get(i).copied().flatten() {
                (us, o.split[i])
            } else if let Some(priced) = pr.table_price(op, w.ops.get(i + 1)) {
                priced
            } else {
                by_law.push(i);
                pr.by_law(op)?
            };
            base_us.push(us);
            split_us.push(split);
        }
        if s.kv_bytes != 2.0 {
            pr.fp8_kv_attention(w, &o.us, by_law, base_us, split_us)?;
        }
        pr.finish(out);
        // Prices measured on another GPU moved to this one (`[transfer]`), before anything
        // that corrects or replaces this machine's behaviour.
        if let Some(t) = &p.transfer {
            transfer::apply(t, w, s, p, by_law, out);
        }
        // Factors first (they correct the machine's measured behaviour), then a hypothetical link
        // (it replaces the link under the corrected machine): cost::link.
        profile::apply_factors(&p.factors, w, out);
        link::apply(w, s, out);
        // Last, over whatever priced each op: nothing beats its roofline (`physics`).
        let raised = physics::apply(w, s, out);
        if !o.quiet {
            if let Some(line) = raised.note() {
                out.warnings.push(line);
            }
        }
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
    /// price, with the RMSNorm a fused all-reduce took in (`cost::fusion`).
    fn collective(&mut self, op: &Op) -> Result<(f64, f64)> {
        let mut c = self.collective_choice(op)?;
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

    fn collective_choice(&mut self, op: &Op) -> Result<CollectiveChoice> {
        // A group that spans nodes: NCCL across the network (cost::internode).
        let h = internode::Hierarchy::of(&self.s.system, self.group_of(op), self.path);
        if let Some(h) = h {
            let proto = self.proto_for(op.message_bytes);
            let (mut c, note) =
                internode::price_op(&h, self.s, self.p, op.family, op.message_bytes, proto)?;
            if let Some(n) = note {
                note!(self.quiet, self.warnings, n);
            }
            let k = self.s.comm;
            let rdma = c.algo == "rdma_ll";
            // NCCL's knobs do not reach a collective priced across nodes: the hierarchical law
            // has no channel count or buffer, and DeepEP's kernels are not NCCL's. Said, not
            // silently ignored.
            if k.nccl_max_nchannels.is_some()
                || k.nccl_min_nchannels.is_some()
                || k.nccl_buffsize.is_some()
            {
                note!(self.quiet, self.warnings, format!(
                    "--nccl-min-nchannels / --nccl-max-nchannels / --nccl-buffsize do not change the {} across {} nodes ({} ranks): {}; its price is unchanged (they act on collectives inside a node)",
                    op.family,
                    h.nodes,
                    h.ranks(),
                    if rdma {
                        "DeepEP's low-latency kernels do not use NCCL"
                    } else {
                        "NCCL's hierarchical law across nodes has no channel count or buffer size"
                    }
                ));
            }
            if k.link_gbps.is_some() || k.link_latency_us.is_some() {
                note!(self.quiet, self.warnings, format!(
                    "--link-gbps / --link-latency-us set the link inside a node; the {} across {} nodes ({} ranks) is priced over the network ({}) and keeps its price",
                    op.family,
                    h.nodes,
                    h.ranks(),
                    if rdma {
                        "DeepEP's low-latency mode sends every peer through the NIC"
                    } else {
                        "give a system file with other links to change it"
                    }
                ));
            }
            if rdma && !self.s.nccl.p2p {
                note!(self.quiet, self.warnings, format!(
                    "--p2p off (NCCL_P2P_DISABLE) does not reach DeepEP's low-latency {} across nodes (its RDMA path is NVSHMEM's, not NCCL's): its price is unchanged",
                    op.family
                ));
            }
            // DeepEP's kernels cost their own fixed time whatever carries the bytes (measured
            // inside a node, where NVLink's share is small): the RDMA law's latency is the
            // wire's alone, which would price two nodes below one.
            if c.algo == "rdma_ll" {
                if let (Some(d), Some(phase)) = (&self.p.deepep_ll, deepep::Phase::of(op)) {
                    let fixed = d.law(phase).latency_us;
                    c.time_us += fixed;
                    c.latency_us += fixed;
                    c.source = format!(
                        "{}; + DeepEP low-latency {} kernels' fixed {fixed:.1} µs (the profile's [deepep_ll], measured inside a node)",
                        c.source,
                        phase.name()
                    );
                }
            }
            return Ok(c);
        }
        if op.family == CostFamily::AllReduce && self.custom_ar && op.group == 0 {
            if let Some(c) = self.custom_allreduce(op) {
                let c = self.table_scaled(c);
                return Ok(c);
            }
        }
        if op.family == CostFamily::AllToAll
            && self.s.comm.ep_comm == crate::scenario::deployment::EpComm::RdmaLl
        {
            if let Some(c) = self.deepep_ll(op) {
                let k = self.s.comm;
                if !self.s.nccl.p2p {
                    note!(self.quiet, self.warnings, format!(
                        "--p2p off (NCCL_P2P_DISABLE) does not reach DeepEP's low-latency {} (NVSHMEM over NVLink, not NCCL): its price is unchanged",
                        op.family
                    ));
                }
                if k.nccl_max_nchannels.is_some()
                    || k.nccl_min_nchannels.is_some()
                    || k.nccl_buffsize.is_some()
                {
                    note!(self.quiet, self.warnings, format!(
                        "--nccl-min-nchannels / --nccl-max-nchannels / --nccl-buffsize do not change DeepEP's low-latency {} (not NCCL's kernels): its price is unchanged",
                        op.family
                    ));
                }
                return Ok(c);
            }
        }
        self.nccl(op)
    }

    /// DeepEP's low-latency dispatch or combine inside one node, by the profile's fitted law
    /// (`cost::deepep`); None when the profile has none (the all-gather law prices it).
    fn deepep_ll(&mut self, op: &Op) -> Option<CollectiveChoice> {
        let d = self.p.deepep_ll.as_ref()?;
        let phase = deepep::Phase::of(op)?;
        let law = d.law(phase);
        let (n, bytes) = (self.group_of(op), op.message_bytes as f64);
        if !law.measured_ranks.contains(&n) {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "DeepEP low-latency {}: measured at {:?} ranks, extrapolated to {n}",
                    phase.name(),
                    law.measured_ranks
                )
            );
        }
        let [lo, hi] = law.measured_bytes;
        if bytes < lo || bytes > hi {
            note!(
                self.quiet,
                self.warnings,
                format!(
                "DeepEP low-latency {} of {} is outside the measured range {}..{}: extrapolated",
                phase.name(),
                crate::units::bytes(bytes),
                crate::units::bytes(lo),
                crate::units::bytes(hi)
            )
            );
        }
        Some(CollectiveChoice {
            op: op.family.key(),
            bytes: op.message_bytes,
            count: 1,
            path: self.path.name(),
            algo: "deepep_ll".into(),
            proto: "-".into(),
            time_us: law.time_us(bytes),
            source: format!(
                "fitted: DeepEP low-latency {} {:.1} µs + bytes at {:.0} GB/s over {} rows (median |rel err| {:.1}%): {}",
                phase.name(),
                law.latency_us,
                law.bw_gbps,
                law.rows,
                law.median_rel_err * 100.0,
                d.source
            ),
            latency_us: law.latency_us,
        })
    }

    /// vLLM's custom all-reduce for one call: the AIConfigurator table where the collection
    /// machine ran the custom kernel at this world size, else the profile's law; None when
    /// vLLM would hand this call to NCCL (size or alignment rule).
    fn custom_allreduce(&mut self, op: &Op) -> Option<CollectiveChoice> {
        let (n, bytes) = (self.s.layout.tp, op.message_bytes);
        let law = if self.custom_pcie {
            self.p.custom_allreduce_pcie.as_ref()?
        } else {
            self.p.custom_allreduce.as_ref()?
        };
        // With symmetric memory on, vLLM caps max_size per capability and world size
        // (`scenario::allreduce_rules`); the patched PCIe build keeps its own cutoff.
        let cap = (!self.custom_pcie)
            .then(|| self.s.allreduce_rules.custom_cap(n))
            .flatten();
        let max = cap.map_or(law.max_size_bytes, |c| c.bytes.min(law.max_size_bytes));
        if let Err(why) = allreduce::custom_ar_call(bytes, max) {
            let next = allreduce::next_path(&why, cap, self.s.allreduce_rules.symm_mem);
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "custom all-reduce: vLLM hands all_reduce of {} to {next} ({why})",
                    crate::units::bytes(bytes as f64)
                )
            );
            return None;
        }
        let mode = if self.s.cuda_graphs { "graph" } else { "eager" };
        let stage = if allreduce::one_stage(n, bytes) {
            "1stage"
        } else {
            "2stage"
        };
        let table = self.p.aic.as_ref().zip(self.p.aiconfigurator.as_ref());
        // A patched PCIe build never ran on the collection machine: its law prices it.
        let ran_custom = |nvlink: bool| !self.custom_pcie && (nvlink || n == 2);
        // Rows at or above the measured machine's own cap timed another path (a transferred
        // profile's GPU may allow larger messages): the law prices those sizes.
        let measured_max = match &self.p.measured_rules {
            Some(r) => r.custom_cap(n).map_or(max, |c| c.bytes.min(max)),
            None => max,
        };
        let in_rows = bytes < measured_max;
        if let Some((t, sec)) = table.filter(|(_, sec)| ran_custom(sec.nvlink) && in_rows) {
            if let Some(rows) = t.custom_curve(mode, n) {
                let max = measured_max as f64;
                let rows: Vec<(f64, f64)> = rows.iter().copied().filter(|r| r.0 < max).collect();
                if let Some(tp) = aic::comm_price(&rows, bytes as f64) {
                    if tp.extrapolated {
                        note!(self.quiet, self.warnings, format!(
                            "custom all-reduce of {} is outside the measured rows of {} ({mode}, {n} ranks): extrapolated",
                            crate::units::bytes(bytes as f64),
                            crate::units::path(&t.dir.join("custom_allreduce.csv"))
                        ));
                    }
                    return Some(CollectiveChoice {
                        op: op.family.key(),
                        bytes,
                        count: 1,
                        path: self.path.name(),
                        algo: "vllm_custom".into(),
                        proto: stage.into(),
                        time_us: tp.us,
                        source: format!(
                            "measured: AIConfigurator custom_allreduce.csv ({}), vLLM {mode} mode, {n} ranks ({})",
                            crate::units::path(&t.dir),
                            sec.system
                        ),
                        latency_us: aic::comm_latency(&rows).min(tp.us),
                    });
                }
            }
        }
        if !in_rows {
            note!(self.quiet, self.warnings, format!(
                "custom all-reduce of {}: at or above the cap of the GPU its rows were measured on ({} B at {n} ranks), where they timed another path; priced by the profile's custom all-reduce law",
                crate::units::bytes(bytes as f64),
                measured_max
            ));
        }
        let l = match (mode, &law.eager) {
            ("eager", Some(e)) => e,
            _ => &law.graph,
        };
        if !l.measured_nranks.is_empty() && !l.measured_nranks.contains(&n) {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "custom all-reduce law: measured at {:?} ranks, extrapolated to {n}",
                    l.measured_nranks
                )
            );
        }
        let (t, lat) = allreduce::custom_law_us(l, n, bytes);
        Some(CollectiveChoice {
            op: op.family.key(),
            bytes,
            count: 1,
            path: self.path.name(),
            algo: "vllm_custom".into(),
            proto: stage.into(),
            time_us: t,
            source: if self.custom_pcie {
                format!(
                    "hypothetical patched vLLM build (PCIe custom all-reduce): {}",
                    l.source
                )
            } else {
                l.source.clone()
            },
            latency_us: lat,
        })
    }

    /// The measured table's price of this op's shape, if the table holds it, and its split
    /// (`Pricing::split_us`): attention's price at the table's smallest context, a routed-expert
    /// GEMM's DRAM roofline of its bytes (the weight read).
    fn table_price(&mut self, op: &Op, next: Option<&Op>) -> Option<(f64, f64)> {
        let (table, mk) = (self.p.table.as_ref()?, op.measure.as_ref()?);
        // MLA decode is measured at one query token: a verify pass reads at its layout's rows.
        let read = (op.family == CostFamily::AttentionMlaDecode).then(|| {
            let rows = crate::scenario::mla_backend::lookup_rows(
                self.s.mla_backend.verify,
                mk.m,
                mk.batch,
                mk.n,
            );
            crate::workload::op::MeasureKey {
                m: rows.round().max(1.0) as u64,
                ..*mk
            }
        });
        let mk = read.as_ref().unwrap_or(mk);
        let tp = table.price(mk)?;
        let mut us = tp.us;
        if mk.includes_next {
            // The measurement covers this kernel and the next: leave the next its law.
            if let Some(next) = next {
                if let Some(k) = self.kernels.get(next.family) {
                    us = (us - kernel::kernel_us(next, k, &self.s.system.gpu)).max(0.5 * us);
                }
            }
        }
        if tp.extrapolated {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "{}: shape outside the measured table {} (m = {}, context = {}); extrapolated",
                    mk.family,
                    table.path.display(),
                    mk.m,
                    mk.context
                )
            );
        }
        self.from_table += 1;
        // A family's time anchored to a measured step (`table_scales`) scales price and split.
        let f = self.p.table_scale(op.family.key());
        let split = f * if op.category == Category::Attention {
            match table.min_context(mk) {
                None => us,
                Some(c) => table
                    .price(&crate::workload::op::MeasureKey { context: c, ..*mk })
                    .map_or(0.0, |lo| us * (lo.us / tp.us.max(1e-12)).min(1.0)),
            }
        } else if aic::is_moe_gemm(op.family) {
            (op.bytes / (self.s.system.gpu.memory_bandwidth_gbps * 1e3)).min(us)
        } else {
            0.0
        };
        Some((f * us, split))
    }

    /// The roofline law's price and its split (`Pricing::split_us`): attention's fixed cost (all
    /// of the KV write, which does not grow with the context), a routed-expert GEMM's memory
    /// term (the weight read at the law's achieved bandwidth).
    fn by_law(&mut self, op: &Op) -> Result<(f64, f64)> {
        let key = op.family;
        let k = self.kernels.get(key).ok_or_else(|| {
            Error::field(
                &self.p.path,
                format!("kernels.{key}"),
                format!("missing: op '{}' needs this kernel family", op.name),
            )
        })?;
        note!(
            self.quiet,
            self.families,
            (key.to_string(), k.source.clone())
        );
        // An elementwise op's M is its element count (`Builder::elementwise`), while the
        // calibration's M is rows: the two do not compare, and its bytes (checked below) are
        // what the law prices.
        let m_in_rows = key != CostFamily::Elementwise;
        if let (Some([lo, hi]), true) = (k.measured_m, m_in_rows) {
            let m = op.shape.m as f64;
            if m < lo || m > hi {
                note!(
                    self.quiet,
                    self.warnings,
                    format!("{key}: M = {m} is outside the measured range {lo}..{hi}")
                );
            }
        }
        if let Some([lo, hi]) = k.measured_bytes {
            if op.bytes < lo * 0.5 || op.bytes > hi * 2.0 {
                note!(
                    self.quiet,
                    self.warnings,
                    format!(
                        "{key}: {} is outside the measured range {}..{}",
                        crate::units::bytes(op.bytes),
                        crate::units::bytes(lo),
                        crate::units::bytes(hi)
                    )
                );
            }
        }
        Ok(law_price(op, k, &self.s.system.gpu))
    }

    /// Attention over an FP8 KV cache where the price came from BF16 data (a measured table, a
    /// law whose efficiencies were fitted on BF16 runs): the BF16 price times the measured
    /// FP8/BF16 ratio for MLA (`kv_dtype`), BF16 as the nearest measured dtype for the rest.
    /// MLA calls the AIConfigurator tables priced carry the ratio already (`aic`).
    fn fp8_kv_attention(
        &mut self,
        w: &Workload,
        aic_us: &[Option<f64>],
        by_law: &[usize],
        base_us: &mut [f64],
        split_us: &mut [f64],
    ) -> Result<()> {
        let s = self.s;
        for (i, op) in w.ops.iter().enumerate() {
            let mla = op.family == CostFamily::AttentionMlaDecode;
            if !(mla || op.family == CostFamily::AttentionGqaDecode)
                || aic_us.get(i).copied().flatten().is_some()
            {
                continue;
            }
            if by_law.contains(&i) {
                // The law read the FP8 cache's bytes: price the BF16 cache's instead.
                let q_out = match op.family {
                    CostFamily::AttentionMlaDecode => {
                        (op.shape.m * op.shape.batch * (op.shape.k + op.shape.n)) as f64 * 2.0
                    }
                    _ => 2.0 * (op.shape.m * op.shape.batch * op.shape.n) as f64 * 2.0,
                };
                let mut bf16 = op.clone();
                bf16.bytes = q_out + (op.bytes - q_out).max(0.0) * 2.0 / s.kv_bytes;
                (base_us[i], split_us[i]) = self.by_law(&bf16)?;
            }
            if !mla {
                note!(self.quiet, self.warnings, format!(
                    "{}: no FP8 KV measurement for this attention kind; priced as a BF16 cache (the nearest measured dtype)",
                    op.family
                ));
                continue;
            }
            let t = kv_dtype::KvDtypeRatios::bundled()?;
            let mk = op.measure.as_ref();
            let ctx = mk.map_or(s.context, |m| m.context) as f64;
            let r = t.fp8_over_bf16(op.shape.batch, s.rank_batch() as f64, ctx);
            if !t.applies_to(&s.system.gpu.compute_capability) {
                // The BF16 price stands: a ratio of the H200's kernels is not this GPU's.
                note!(
                    self.quiet,
                    self.warnings,
                    kv_dtype::unmeasured_note(&s.system.gpu.name, r.value)
                );
                continue;
            }
            base_us[i] *= r.value;
            split_us[i] *= r.value;
            if w.ops
                .get(i + 1)
                .is_some_and(|n| n.role == OpRole::AttentionReduce)
            {
                base_us[i + 1] *= r.value;
                split_us[i + 1] *= r.value;
            }
            self.note_fp8_ratio(r, t);
        }
        Ok(())
    }

    fn note_fp8_ratio(&mut self, r: kv_dtype::Ratio, t: &kv_dtype::KvDtypeRatios) {
        note!(
            self.quiet,
            self.families,
            (
                "attention_mla_decode (FP8 KV)".into(),
                format!("the BF16 price times the {}", t.source()),
            )
        );
        note!(self.quiet, self.warnings, format!(
            "attention_mla_decode with an FP8 KV cache: priced as BF16 x the FP8/BF16 ratio measured on an H200 (x{:.2} here), transferred to {}{}",
            r.value,
            self.s.system.gpu.name,
            if r.extrapolated { "; outside the measured batch, KV length or head count: held at the nearest" } else { "" }
        ));
    }

    /// Moves what the pricing accumulated besides the durations into `out`.
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
        out.collectives = self.collectives;
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

/// Which all-reduce carries the TP all-reduces (`--allreduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CustomAr {
    /// NCCL for every all-reduce.
    Off,
    /// vLLM's custom kernel, where mainline vLLM runs it.
    Mainline,
    /// A custom kernel over more than two PCIe-only GPUs: a patched build (hypothetical).
    PciePatched,
}

/// The note every report of a patched PCIe custom all-reduce carries.
pub const PCIE_CUSTOM_AR_NOTE: &str = "mainline vLLM disables its custom all-reduce on more than 2 PCIe GPUs; this prices a patched build";

/// Whether vLLM would run its custom all-reduce in this scenario (`--allreduce`): `nccl` never;
/// `custom` where vLLM allows it, an error naming the rule where it refuses, except over more
/// than two PCIe GPUs with P2P, which it prices as a patched build by the profile's
/// `[custom_allreduce_pcie]` law (warning that mainline refuses); `auto` as mainline vLLM's
/// dispatch does (cost::allreduce), with NCCL where the profile cannot price the custom kernel.
fn custom_ar_dispatch(
    s: &Scenario,
    p: &CalibrationProfile,
    quiet: bool,
    warnings: &mut BTreeSet<String>,
) -> Result<CustomAr> {
    if s.runtime == crate::scenario::Runtime::Reference {
        // The project's reference step reduces with torch.distributed, i.e. NCCL.
        return match s.comm.allreduce {
            AllreduceImpl::Custom => Err(Error::ScenarioSetting {
                flag: "--allreduce",
                value: "custom".into(),
                problem: ": the reference runtime reduces with torch.distributed (NCCL), not vLLM's custom kernel; use --runtime vllm".into(),
            }),
            _ => Ok(CustomAr::Off),
        };
    }
    if s.system.spans_nodes(s.layout.tp) {
        // vLLM disables its custom all-reduce when the group spans nodes (custom_all_reduce.py:
        // "Custom allreduce is disabled because this process group spans across nodes").
        return match s.comm.allreduce {
            AllreduceImpl::Custom => Err(Error::Usage {
                flag: "--allreduce custom".into(),
                problem: format!(
                    "vLLM would not run its custom all-reduce on {} at TP={}: the group spans {} nodes (custom_all_reduce.py disables it across nodes); use --allreduce nccl or auto",
                    s.system.name,
                    s.layout.tp,
                    s.system.nodes_spanned(s.layout.tp)
                ),
            }),
            _ => Ok(CustomAr::Off),
        };
    }
    let full_nvlink = s.comm_path() == CommPath::Nvlink;
    let rule = allreduce::custom_ar_enabled(s.layout.tp, full_nvlink);
    match (s.comm.allreduce, rule) {
        (AllreduceImpl::Nccl, _) => Ok(CustomAr::Off),
        (AllreduceImpl::Custom, Err(why @ allreduce::Refusal::PcieOnly(_)))
            if s.comm_path() == CommPath::PcieP2p =>
        {
            let Some(law) = &p.custom_allreduce_pcie else {
                return Err(Error::field(
                    &p.path,
                    "custom_allreduce_pcie",
                    format!(
                        "missing: --allreduce custom on {} at TP={} prices a patched vLLM build ({why}), which needs a PCIe custom all-reduce law in this section (data/calibration/rtx-pro-6000/profile.toml has one fitted to published figures); or use --allreduce nccl or auto",
                        s.system.name, s.layout.tp
                    ),
                ));
            };
            note!(quiet, warnings, format!(
                "--allreduce custom on {} at TP={}: {PCIE_CUSTOM_AR_NOTE} (priced by [custom_allreduce_pcie]: {})",
                s.system.name, s.layout.tp, law.source
            ));
            Ok(CustomAr::PciePatched)
        }
        (AllreduceImpl::Custom, Err(why)) => Err(Error::ScenarioSetting {
            flag: "--allreduce",
            value: "custom".into(),
            problem: format!(
                ": vLLM would not run its custom all-reduce on {} at TP={}: {why}; use --allreduce nccl or auto",
                s.system.name, s.layout.tp
            ),
        }),
        (AllreduceImpl::Custom, Ok(())) if p.custom_allreduce.is_none() => Err(Error::field(
            &p.path,
            "custom_allreduce",
            "missing: --allreduce custom needs the custom all-reduce cost (write one with `decodesim calibrate --from-aiconfigurator`)",
        )),
        (AllreduceImpl::Custom, Ok(())) => Ok(CustomAr::Mainline),
        (AllreduceImpl::Auto, Err(_)) => Ok(CustomAr::Off),
        (AllreduceImpl::Auto, Ok(())) if p.custom_allreduce.is_none() => {
            note!(quiet, warnings, format!(
                "--allreduce auto: vLLM would run its custom all-reduce here, but profile '{}' cannot price it (no [custom_allreduce]); priced as NCCL",
                p.profile.name
            ));
            Ok(CustomAr::Off)
        }
        (AllreduceImpl::Auto, Ok(())) => Ok(CustomAr::Mainline),
    }
}

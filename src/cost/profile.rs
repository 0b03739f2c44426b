//! A calibration profile: every parameter the cost model uses, with where it came from.

use crate::error::{Error, Result};
use crate::names::enum_names;
use crate::scenario::{Algo, CommPath, Proto};
use crate::workload::CostFamily;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Roofline parameters of one kernel family.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KernelParams {
    /// Fixed cost per kernel (µs): launch-to-finish time of an empty-ish kernel.
    pub fixed_us: f64,
    /// Achieved fraction of the GPU's memory bandwidth.
    pub mem_efficiency: f64,
    /// Achieved fraction of the tensor-core peak at large M.
    #[serde(default = "one")]
    pub compute_efficiency: f64,
    /// Compute efficiency ramps as m / (m + m_half) with the GEMM's M (0: flat).
    #[serde(default)]
    pub m_half: f64,
    /// Where the numbers come from ("measured: ...", "fitted: ...", "estimate: ...").
    pub source: String,
    /// Range of M (tokens) the fit saw, for extrapolation warnings.
    #[serde(default)]
    pub measured_m: Option<[f64; 2]>,
    /// Range of bytes the fit saw.
    #[serde(default)]
    pub measured_bytes: Option<[f64; 2]>,
}

fn one() -> f64 {
    1.0
}

/// Which collective a profile entry prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    /// Either, where no entry for the exact op exists.
    Any,
}

enum_names!(serde CollectiveOp, "collective op",
    CollectiveOp::AllReduce => ["all_reduce"], CollectiveOp::AllGather => ["all_gather"],
    CollectiveOp::Any => ["any"]);

impl CollectiveOp {
    /// The entry's op for a collective family (`any` is never the family's own).
    pub fn of(family: CostFamily) -> Self {
        match family {
            // All-to-all and reduce-scatter take n−1 steps like the all-gather: its entry's law
            // prices them where the profile has none of their own (a warning says so).
            CostFamily::AllGather | CostFamily::AllToAll | CostFamily::ReduceScatter => {
                CollectiveOp::AllGather
            }
            _ => CollectiveOp::AllReduce,
        }
    }
}

/// Profiles spell algorithms in lower case (`ring`, `tree`); reading accepts any case.
mod algo_lower {
    use crate::scenario::Algo;
    pub fn serialize<S: serde::Serializer>(a: &Algo, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&a.name().to_ascii_lowercase())
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Algo, D::Error> {
        crate::names::by_name::deserialize(d)
    }
}

/// NCCL-style collective cost on one path, algorithm and protocol:
/// `time = base_us + steps × hop_us + bytes / algbw`, with `algbw` derived from `bus_bw_gbps`
/// the way NCCL's tuner does (docs/sources.md §4.2).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollectiveParams {
    pub op: CollectiveOp,
    #[serde(with = "crate::names::by_name")]
    pub path: CommPath,
    /// `ring` or `tree` (never `auto`: an entry describes what ran).
    #[serde(with = "algo_lower")]
    pub algo: Algo,
    /// `LL`, `LL128` or `Simple` (never `auto`).
    #[serde(with = "crate::names::by_name")]
    pub proto: Proto,
    pub base_us: f64,
    pub hop_us: f64,
    pub bus_bw_gbps: f64,
    pub source: String,
    #[serde(default)]
    pub measured_nranks: Vec<u32>,
    #[serde(default)]
    pub measured_bytes: Option<[f64; 2]>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LaunchParams {
    /// CPU cost of one `cudaGraphLaunch` before the step's first kernel can start.
    pub graph_launch_us: f64,
    /// GPU gap between dependent kernels during graph replay.
    pub graph_kernel_gap_us: f64,
    /// CPU cost to launch one kernel eagerly (framework + driver).
    pub eager_launch_us: f64,
    /// GPU gap between dependent kernels launched eagerly, when the CPU is ahead.
    pub eager_kernel_gap_us: f64,
    /// Extra delay before the first collective of a CUDA-graph replay (NCCL's captured host
    /// work); seen in traces, not in micro-benchmarks, so 0 unless a trace set it.
    #[serde(default)]
    pub graph_first_collective_us: f64,
    pub source: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Variability {
    /// Coefficient of variation of each kernel's duration (uniform jitter).
    pub kernel_cv: f64,
    /// Coefficient of variation of each rank's persistent speed (rank-to-rank skew).
    pub rank_skew_cv: f64,
    /// Coefficient of variation of each collective's transfer time.
    pub collective_cv: f64,
    /// Ranks start a step up to this much apart (each at a uniform draw in [0, this]): host
    /// launch skew, which the first collective absorbs as waiting.
    #[serde(default)]
    pub launch_skew_us: f64,
    pub source: String,
}

/// Host-side costs speculative decoding adds to a step that are not kernels (the proposer's
/// bookkeeping kernels are ops priced by their families; these are the gaps around them).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpecDecodeParams {
    /// Host time per step that the GPU waits for (proposer bookkeeping, rejection-sampler
    /// setup) beyond what asynchronous scheduling hides.
    pub exposed_host_us: f64,
    /// GPU idle between two consecutive passes (verify, then each draft pass): one more graph
    /// replay or one more eager forward to launch.
    pub pass_gap_us: f64,
    pub source: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProfileMeta {
    pub name: String,
    /// GPU the kernel parameters describe (a file stem in data/systems/gpus).
    pub gpu: String,
    pub description: String,
    pub created: String,
    /// How the profile was produced (command, data, machine, software versions).
    pub method: String,
    /// Which parts are measured and which are estimates, in words.
    pub provenance: String,
    /// Sections whose fit failed the quality rules but were written anyway
    /// (`calibrate --allow-poor-fit`), each with why. Every report using the profile warns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poor_fit: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CalibrationProfile {
    pub profile: ProfileMeta,
    pub kernels: BTreeMap<CostFamily, KernelParams>,
    pub collectives: Vec<CollectiveParams>,
    pub launch: LaunchParams,
    pub variability: Variability,
    /// Speculative decoding's non-kernel overheads (`whatif spec-decode`); absent in profiles
    /// written before it, which `whatif spec-decode` then refuses by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<SpecDecodeParams>,
    /// A measurement table (kernels.csv, path relative to this file) whose shapes are priced
    /// by interpolation before the roofline law is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurements: Option<String>,
    /// Multipliers of the measurement table's prices (`measurements`) per kernel family, set by
    /// anchoring to a measured step (`calibrate --from-trace`) as it scales the laws' parameters
    /// and the AIConfigurator tables' (`aiconfigurator.scales`); absent: 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub table_scales: BTreeMap<String, f64>,
    /// Fit-quality records written by `decodesim calibrate` (free-form tables).
    #[serde(default)]
    pub fit: BTreeMap<String, toml::Value>,
    /// End-to-end factors on top of the bottom-up costs (`calibrate --from-throughput`,
    /// `--from-burst`); absent = identity.
    #[serde(default, skip_serializing_if = "Factors::is_identity")]
    pub factors: Factors,
    /// AIConfigurator tables this profile prices from (`calibrate --from-aiconfigurator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aiconfigurator: Option<AicSection>,
    /// vLLM's custom all-reduce cost law (`--allreduce custom|auto`), where no table holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_allreduce: Option<CustomAllreduce>,
    /// A custom all-reduce over more than two PCIe-only GPUs, which mainline vLLM refuses:
    /// `--allreduce custom` prices a patched build (community kernels, docs/sources.md §3.3) by this law.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_allreduce_pcie: Option<CustomAllreduce>,
    /// An all-reduce fused with the RMSNorm after it (`--fuse-allreduce-rms`, `cost::fusion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_allreduce_rms: Option<super::fusion::FusedAllreduceRms>,
    /// The GPU and link this profile's measured prices come from, when they were moved to the
    /// profile's GPU (`cost::transfer`); absent: measured on the profile's own GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<super::transfer::TransferSection>,
    /// DeepEP's low-latency dispatch and combine inside one node (`--ep-comm rdma-ll`), fitted
    /// to measured kernel times (`cost::deepep`); absent: the all-gather entry's law prices them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deepep_ll: Option<super::deepep::DeepEpLl>,
    /// NCCL's defaults on the measured machine, against which `--nccl-max-nchannels` and
    /// `--nccl-buffsize` are priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclDefaults>,
    #[serde(skip)]
    pub path: PathBuf,
    #[serde(skip)]
    pub table: Option<std::sync::Arc<super::table::KernelTable>>,
    #[serde(skip)]
    pub aic: Option<std::sync::Arc<super::aic::AicTables>>,
    /// A transferred profile's measured GPU's all-reduce rules (`[transfer] compute_capability`):
    /// which of its custom all-reduce rows timed the custom kernel.
    #[serde(skip)]
    pub(crate) measured_rules:
        Option<std::sync::Arc<crate::scenario::allreduce_rules::AllreduceRules>>,
}

/// Where a profile's AIConfigurator tables are and what they describe.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AicSection {
    /// The converted folder (harness/aiconfigurator_tables.py), relative to the profile file.
    pub tables: String,
    /// AIConfigurator's system name (`rtx_pro_6000_server`).
    pub system: String,
    /// Package, backend and NCCL versions and collection metadata, in words.
    pub source: String,
    /// The path the NCCL table was measured on (the collection machine's GPU link).
    #[serde(with = "crate::names::by_name")]
    pub nccl_path: CommPath,
    /// Whether the collection machine's GPUs were fully NVLink-connected: vLLM ran its custom
    /// all-reduce there at every supported world size, else at 2 GPUs only (docs/sources.md §3.3).
    pub nvlink: bool,
    /// MLA dimensions of the model the module rows were measured with (hidden, q_lora_rank,
    /// kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim): the rows price a
    /// scenario's attention only when its model has the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla_dims: Option<[u64; 6]>,
    /// Multipliers of the table prices per kernel family (and `collectives`), set by anchoring
    /// to a measured step (`calibrate --from-trace`) as it scales the laws' parameters; absent: 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scales: BTreeMap<String, f64>,
    /// The folder's files this profile prices from (`["moe.csv"]`: the routed experts only, the
    /// rest by the profile's own laws); absent: every table the folder holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<Vec<String>>,
}

impl AicSection {
    /// The multiplier of a family's (or `collectives`') table prices.
    pub fn scale(&self, key: &str) -> f64 {
        self.scales.get(key).copied().unwrap_or(1.0)
    }
}

impl CalibrationProfile {
    /// The multiplier of a family's measurement-table prices (`table_scales`).
    pub fn table_scale(&self, key: &str) -> f64 {
        self.table_scales.get(key).copied().unwrap_or(1.0)
    }
}

/// One mode (graph or eager) of vLLM's custom all-reduce:
/// `base_us + per_rank_us × (n−1) + stage_bytes / (bw_gbps × 1e3)`, stage_bytes = (n−1)·B for
/// the one-stage kernel (every rank reads every peer's buffer) and 2(n−1)/n·B for the two-stage
/// one (reduce-scatter then all-gather).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CustomArLaw {
    pub base_us: f64,
    #[serde(default)]
    pub per_rank_us: f64,
    pub bw_gbps: f64,
    #[serde(default)]
    pub measured_nranks: Vec<u32>,
    #[serde(default)]
    pub measured_bytes: Option<[f64; 2]>,
    pub source: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CustomAllreduce {
    pub graph: CustomArLaw,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager: Option<CustomArLaw>,
    /// vLLM's `max_size` (bytes): larger messages go to NCCL.
    pub max_size_bytes: u64,
    pub source: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NcclDefaults {
    /// Channels NCCL used when the profile's collectives were measured.
    pub default_nchannels: u32,
    /// `NCCL_BUFFSIZE` then (bytes; NCCL's DEFAULT_BUFFSIZE is 4 MiB).
    pub buffsize_bytes: u64,
    /// Slots per buffer (NCCL_STEPS).
    pub steps_per_buffer: u32,
    /// Latency of one ring step of the Simple protocol on this path (µs).
    pub simple_hop_us: f64,
    pub source: String,
}

/// Factors fitted to end-to-end measurements, applied on top of the bottom-up prices (after
/// the table or law priced each op, whichever did): the few things a throughput curve, a context
/// sweep or a collective benchmark can tell apart. Each defaults to "no change".
///
/// Every price carries its own split into two terms (`Pricing::split_us`, recorded by the source
/// that priced it: law, kernel table, AIConfigurator table, custom all-reduce, NCCL knobs), and a
/// family's factors act on those terms:
/// - collectives: latency × `collective_latency_scale`, the rest (bytes) ÷ `collective_bw_scale`;
/// - attention (the attention category: decode kernel, split-KV reduce, KV write): the price at
///   the smallest context × `attention_fixed_scale`, the growth with KV length beyond it ×
///   `attention_growth_scale`;
/// - routed-expert GEMMs: the weight read × `moe_weight_scale`, the rest (per-token work and
///   fixed cost) × `moe_token_scale`, both ÷ `moe_efficiency`;
/// - dense GEMMs (every `gemm_*` op): × `dense_gemm_scale`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Factors {
    /// Routed-expert GEMM time is divided by this (1.2: the expert GEMMs run 20% faster).
    pub moe_efficiency: f64,
    /// The bytes term of every collective is divided by this (bus bandwidth scale).
    pub collective_bw_scale: f64,
    /// The latency term of every collective (base + steps × hop) is multiplied by this.
    pub collective_latency_scale: f64,
    /// Routing concentration: `power-law:ALPHA` for scenarios that do not pass `--routing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_alpha: Option<f64>,
    /// GPU idle added at the end of every step (host scheduling between graph replays, µs).
    pub step_overhead_us: f64,
    /// The part of the attention price that grows with the KV length is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub attention_growth_scale: f64,
    /// The attention price at the smallest context (fixed costs, KV write) is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub attention_fixed_scale: f64,
    /// The weight-read part of a routed-expert GEMM (touched experts' bytes over the bandwidth
    /// its source prices them at) is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub moe_weight_scale: f64,
    /// The rest of a routed-expert GEMM's price (its per-token slope and fixed cost) is
    /// multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub moe_token_scale: f64,
    /// Every dense GEMM's time (projections, shared expert, router gate, lm_head, the MLA batched
    /// matmuls) is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub dense_gemm_scale: f64,
    /// How the factors were obtained (command, data points).
    pub source: String,
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

impl Default for Factors {
    fn default() -> Self {
        Factors {
            moe_efficiency: 1.0,
            collective_bw_scale: 1.0,
            collective_latency_scale: 1.0,
            routing_alpha: None,
            step_overhead_us: 0.0,
            attention_growth_scale: 1.0,
            attention_fixed_scale: 1.0,
            moe_weight_scale: 1.0,
            moe_token_scale: 1.0,
            dense_gemm_scale: 1.0,
            source: String::new(),
        }
    }
}

impl Factors {
    pub fn is_identity(&self) -> bool {
        Factors {
            source: String::new(),
            ..self.clone()
        } == Factors::default()
    }

    /// Multipliers of an op's two price terms (`Pricing::split_us`, then the rest): which they
    /// are depends on the op's family (see the type's doc).
    pub fn terms(&self, op: &crate::workload::Op) -> (f64, f64) {
        use CostFamily::*;
        match op.family {
            f if f.is_collective() => (
                self.collective_latency_scale,
                1.0 / self.collective_bw_scale,
            ),
            MoeGemmBf16 | MoeGemmInt4 | MoeGemmFp8 => (
                self.moe_weight_scale / self.moe_efficiency,
                self.moe_token_scale / self.moe_efficiency,
            ),
            GemmBf16 | GemmInt4 | GemmFp8 => (self.dense_gemm_scale, self.dense_gemm_scale),
            _ if op.category == crate::category::Category::Attention => {
                (self.attention_fixed_scale, self.attention_growth_scale)
            }
            _ => (1.0, 1.0),
        }
    }

    /// The scale factors with their profile field names.
    pub fn scales(&self) -> [(&'static str, f64); 8] {
        [
            ("factors.moe_efficiency", self.moe_efficiency),
            ("factors.collective_bw_scale", self.collective_bw_scale),
            (
                "factors.collective_latency_scale",
                self.collective_latency_scale,
            ),
            (
                "factors.attention_growth_scale",
                self.attention_growth_scale,
            ),
            ("factors.attention_fixed_scale", self.attention_fixed_scale),
            ("factors.moe_weight_scale", self.moe_weight_scale),
            ("factors.moe_token_scale", self.moe_token_scale),
            ("factors.dense_gemm_scale", self.dense_gemm_scale),
        ]
    }

    /// Scales within which a fitted factor stays physical enough to price anything.
    fn check(&self, c: &Checker) -> Result<()> {
        for (field, v) in self.scales() {
            if !(v.is_finite() && (0.01..=100.0).contains(&v)) {
                return Err(c.fail(field, v, "a scale in [0.01, 100] (1 = no change)"));
            }
        }
        if let Some(a) = self.routing_alpha {
            if !(a.is_finite() && (0.0..=3.0).contains(&a)) {
                return Err(c.fail("factors.routing_alpha", a, "a power-law exponent in [0, 3]"));
            }
        }
        c.latency("factors.step_overhead_us", self.step_overhead_us)
    }
}

/// Applies a profile's factors to a workload's prices: each op's price is its split term
/// (`Pricing::split_us`) plus the rest, and the factors of its family multiply each (see
/// `Factors`), whatever source priced it. The collective choices the report lists scale alike.
/// Runs before a hypothetical link (`cost::link`): a factor corrects the machine's measured
/// behaviour, a `--link-gbps` / `--link-latency-us` what-if then swaps the link under it.
pub fn apply_factors(f: &Factors, w: &crate::workload::Workload, pricing: &mut super::Pricing) {
    if f.is_identity() {
        return;
    }
    let ops = w.ops.iter();
    for ((op, us), split) in ops.zip(&mut pricing.base_us).zip(&mut pricing.split_us) {
        apply_terms(f.terms(op), us, split);
    }
    let (a, b) = (f.collective_latency_scale, 1.0 / f.collective_bw_scale);
    for c in &mut pricing.collectives {
        let lo = c.latency_us.clamp(0.0, c.time_us.max(0.0));
        c.time_us = lo * a + (c.time_us - lo) * b;
        c.latency_us = lo * a;
    }
}

/// One op's price under its factor terms ([`Factors::terms`]): the split part times the first,
/// the rest times the second.
pub(crate) fn apply_terms((a, b): (f64, f64), us: &mut f64, split: &mut f64) {
    let lo = split.clamp(0.0, us.max(0.0));
    let rest = *us - lo;
    *split = lo * a;
    *us = lo * a + rest * b;
}

/// The longest fixed cost or latency a profile may state: no call in a decode step takes a second.
pub(crate) const MAX_US: f64 = 1e6;

/// The range of a table price multiplier (`aiconfigurator.scales`): a family's time measured in
/// a trace (`calibrate --from-trace`) up to a thousand times the table's either way is written
/// as measured.
pub const TIME_SCALE: [f64; 2] = [1e-3, 1e3];

/// Checks of one profile's numbers, each error naming the file, the field and the value.
struct Checker<'a> {
    path: &'a Path,
}

impl Checker<'_> {
    fn fail(&self, field: &str, v: impl std::fmt::Display, allowed: &str) -> Error {
        // A number as typed (`1e308`, not 309 digits), anything else clipped.
        let v = v.to_string();
        let v = match v.parse::<f64>() {
            Ok(x) if v.len() > 24 => crate::scenario::check::show(x),
            _ => crate::units::clip(&v, 80),
        };
        Error::field(self.path, field, format!("found {v}, expected {allowed}"))
    }

    /// A latency or fixed cost: finite, 0 ≤ v ≤ 1 s.
    fn latency(&self, field: &str, v: f64) -> Result<()> {
        if v.is_finite() && (0.0..=MAX_US).contains(&v) {
            Ok(())
        } else {
            Err(self.fail(field, v, "a time in [0, 1e6] µs"))
        }
    }

    /// A fraction of a peak: 0.001 ≤ v ≤ 1 (nothing runs faster than the hardware's peak, and a
    /// kernel 1,000x below it is a unit mistake: `scenario::limits::EFFICIENCY`).
    fn efficiency(&self, field: &str, v: f64) -> Result<()> {
        let r = crate::scenario::limits::EFFICIENCY;
        if r.contains(v) {
            Ok(())
        } else {
            Err(self.fail(
                field,
                crate::scenario::check::show(v),
                &format!(
                    "a fraction of the GPU's peak in [{}, {}] (above 1 would beat the hardware)",
                    r.min, r.max
                ),
            ))
        }
    }

    fn range(&self, field: &str, r: Option<[f64; 2]>) -> Result<()> {
        match r {
            Some([lo, hi]) if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi) => {
                Err(self.fail(
                    field,
                    format!("[{lo}, {hi}]"),
                    "[low, high] with 0 <= low <= high",
                ))
            }
            _ => Ok(()),
        }
    }

    /// A law's bandwidth: at least the slowest GPU link's floor, at most the GPU's memory
    /// bandwidth (`bw`, when the profile names a GPU of the catalog), which bounds any transfer.
    fn link_bandwidth(&self, field: &str, v: f64, bw: Option<f64>) -> Result<()> {
        let max = bw.unwrap_or(crate::scenario::limits::LINK_GBPS.max);
        let min = crate::scenario::limits::BUS_BW_FLOOR_GBPS;
        if v.is_finite() && v >= min && v <= max {
            return Ok(());
        }
        Err(self.fail(
            field,
            crate::scenario::check::show(v),
            &format!("a bandwidth in [{min}, {max}] GB/s (the slowest GPU link; the GPU's memory bandwidth bounds any transfer)"),
        ))
    }

    /// A custom all-reduce law: latencies in [0, 1 s], bandwidths positive and within the GPU's
    /// memory bandwidth, `max_size` in [1, 2^40] bytes.
    fn custom_allreduce(&self, name: &str, ca: &CustomAllreduce, bw: Option<f64>) -> Result<()> {
        let laws = [("graph", Some(&ca.graph)), ("eager", ca.eager.as_ref())];
        for (mode, law) in laws {
            let Some(l) = law else { continue };
            let f = |s: &str| format!("{name}.{mode}.{s}");
            self.latency(&f("base_us"), l.base_us)?;
            self.latency(&f("per_rank_us"), l.per_rank_us)?;
            self.link_bandwidth(&f("bw_gbps"), l.bw_gbps, bw)?;
            self.range(&f("measured_bytes"), l.measured_bytes)?;
        }
        if ca.max_size_bytes == 0 || ca.max_size_bytes > 1 << 40 {
            return Err(self.fail(
                &format!("{name}.max_size_bytes"),
                ca.max_size_bytes,
                "bytes in [1, 2^40]",
            ));
        }
        Ok(())
    }

    /// DeepEP's laws: latencies in [0, 1 s], bandwidths positive and within the GPU's memory
    /// bandwidth, the measured ranks and payloads sane.
    fn deepep_ll(&self, d: &super::deepep::DeepEpLl, bw: Option<f64>) -> Result<()> {
        for (phase, l) in [("dispatch", &d.dispatch), ("combine", &d.combine)] {
            let f = |s: &str| format!("deepep_ll.{phase}.{s}");
            self.latency(&f("latency_us"), l.latency_us)?;
            self.link_bandwidth(&f("bw_gbps"), l.bw_gbps, bw)?;
            if l.measured_ranks.is_empty() || l.measured_ranks.contains(&0) {
                return Err(self.fail(
                    &f("measured_ranks"),
                    format!("{:?}", l.measured_ranks),
                    "the group sizes measured, each at least 1",
                ));
            }
            self.range(&f("measured_bytes"), Some(l.measured_bytes))?;
            if !(l.median_rel_err.is_finite() && l.median_rel_err >= 0.0) {
                return Err(self.fail(&f("median_rel_err"), l.median_rel_err, "a fraction ≥ 0"));
            }
        }
        Ok(())
    }

    fn kernel(&self, family: CostFamily, k: &KernelParams) -> Result<()> {
        let f = |s: &str| format!("kernels.{family}.{s}");
        if family.is_collective() || family.is_sync() {
            return Err(self.fail(
                &format!("kernels.{family}"),
                format!("'{family}'"),
                &format!(
                    "a kernel family: one of {}",
                    CostFamily::kernel_keys().join(", ")
                ),
            ));
        }
        self.latency(&f("fixed_us"), k.fixed_us)?;
        self.efficiency(&f("mem_efficiency"), k.mem_efficiency)?;
        self.efficiency(&f("compute_efficiency"), k.compute_efficiency)?;
        if !(k.m_half.is_finite() && (0.0..=1e9).contains(&k.m_half)) {
            return Err(self.fail(&f("m_half"), k.m_half, "a token count in [0, 1e9]"));
        }
        self.range(&f("measured_m"), k.measured_m)?;
        self.range(&f("measured_bytes"), k.measured_bytes)
    }

    /// `bw_limit`: the GPU's memory bandwidth, which no collective's bus bandwidth can exceed.
    fn collective(&self, i: usize, c: &CollectiveParams, bw_limit: Option<f64>) -> Result<()> {
        let f = |s: &str| format!("collectives[{i}].{s}");
        if c.algo == Algo::Auto {
            return Err(self.fail(&f("algo"), "'auto'", "the algorithm measured: ring or tree"));
        }
        if c.proto == Proto::Auto {
            return Err(self.fail(
                &f("proto"),
                "'auto'",
                "the protocol measured: LL, LL128 or Simple",
            ));
        }
        self.latency(&f("base_us"), c.base_us)?;
        self.latency(&f("hop_us"), c.hop_us)?;
        let max = bw_limit.unwrap_or(crate::scenario::limits::LINK_GBPS.max);
        let min = crate::scenario::limits::BUS_BW_FLOOR_GBPS;
        if !(c.bus_bw_gbps.is_finite() && c.bus_bw_gbps >= min && c.bus_bw_gbps <= max) {
            return Err(self.fail(
                &f("bus_bw_gbps"),
                crate::scenario::check::show(c.bus_bw_gbps),
                &match bw_limit {
                    Some(m) => format!(
                        "a bandwidth in [{min}, {m}] GB/s (the slowest GPU link; the GPU's memory bandwidth bounds any transfer)"
                    ),
                    None => format!(
                        "a bandwidth in [{min}, {max}] GB/s (scenario::limits::LINK_GBPS)"
                    ),
                },
            ));
        }
        if c.measured_nranks.contains(&0) {
            return Err(self.fail(&f("measured_nranks"), "0", "rank counts of at least 1"));
        }
        self.range(&f("measured_bytes"), c.measured_bytes)
    }
}

impl CalibrationProfile {
    pub fn from_file(path: &Path) -> Result<Self> {
        let mut p: CalibrationProfile =
            crate::files::read_toml(path, crate::files::InputKind::Profile)?;
        p.path = path.to_path_buf();
        p.validate(path)?;
        if let Some(t) = &p.transfer {
            let rules =
                crate::scenario::allreduce_rules::AllreduceRules::load(&t.compute_capability)?;
            p.measured_rules = Some(std::sync::Arc::new(rules));
        }
        if let Some(rel) = &p.measurements {
            let dir = path.parent().unwrap_or(Path::new("."));
            let table = super::table::KernelTable::read(&dir.join(rel))?;
            p.table = Some(std::sync::Arc::new(table));
        }
        if let Some(a) = &p.aiconfigurator {
            // Relative to the profile's own folder, wherever decodesim runs from.
            let dir = path.parent().unwrap_or(Path::new("."));
            let tables_dir = dir.join(&a.tables);
            if let Some(only) = &a.only {
                if only.is_empty() {
                    return Err(Error::Field {
                        path: path.to_path_buf(),
                        field: "aiconfigurator.only".into(),
                        expected: format!(
                            "at least one table name of {} (leave the field out to price from every table there)",
                            crate::units::path(&tables_dir)
                        ),
                    });
                }
                for name in only {
                    let known = super::aic::TABLE_FILES.contains(&name.as_str());
                    if !known || !tables_dir.join(name).is_file() {
                        return Err(Error::Field {
                            path: path.to_path_buf(),
                            field: "aiconfigurator.only".into(),
                            expected: format!(
                                "file names of the tables folder {} (one of {}; '{name}' {})",
                                crate::units::path(&tables_dir),
                                super::aic::TABLE_FILES.join(", "),
                                if known {
                                    "is not there"
                                } else {
                                    "is none of them"
                                }
                            ),
                        });
                    }
                }
            }
            let tables = super::aic::AicTables::read_only(&tables_dir, a.only.as_deref())?;
            p.check_tables_device(path, &tables)?;
            p.aic = Some(std::sync::Arc::new(tables));
        }
        Ok(p)
    }

    /// Tables measured on another GPU than the profile's price nothing right: refused at load,
    /// as `calibrate --from-aiconfigurator` refuses them for the system's GPU.
    fn check_tables_device(&self, path: &Path, tables: &super::aic::AicTables) -> Result<()> {
        let Some(device) = &tables.device else {
            return Ok(());
        };
        // A transferred profile's tables are the measured GPU's (`cost::transfer` moves them).
        let measured = self
            .transfer
            .as_ref()
            .map_or(&self.profile.gpu, |t| &t.from_gpu);
        let file = crate::scenario::catalog::gpus_dir().join(format!("{measured}.toml"));
        if !file.is_file() {
            return Ok(());
        }
        let gpu = crate::scenario::GpuSpec::from_file(&file)?;
        if super::aic::device_matches(device, &gpu.display_name) {
            return Ok(());
        }
        Err(Error::field(
            path,
            "aiconfigurator.tables",
            format!(
                "the tables in {} were measured on '{device}' (their MANIFEST.txt) but the profile is for GPU '{}' ({}): they would price another GPU's kernels; point `tables` at a folder measured on {}, or set [profile] gpu to the tables' GPU",
                crate::units::path(&tables.dir),
                measured,
                gpu.display_name,
                gpu.display_name
            ),
        ))
    }

    /// The GPU's spec memory bandwidth when the profile names a GPU of the catalog.
    fn gpu_bandwidth(&self) -> Result<Option<f64>> {
        let file = crate::scenario::catalog::gpus_dir().join(format!("{}.toml", self.profile.gpu));
        if !file.is_file() {
            return Ok(None);
        }
        Ok(Some(
            crate::scenario::GpuSpec::from_file(&file)?.memory_bandwidth_gbps,
        ))
    }

    /// Checks every number against physics: finite, latencies in [0, 1 s], efficiencies in
    /// (0, 1], bus bandwidths positive and within the named GPU's memory bandwidth, ranges ordered,
    /// coefficients of variation small enough that jittered durations stay positive.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let c = Checker { path };
        for (family, k) in &self.kernels {
            c.kernel(*family, k)?;
        }
        if self.collectives.is_empty() {
            return Err(Error::field(
                path,
                "collectives",
                "expected at least one entry",
            ));
        }
        let bw = self.gpu_bandwidth()?;
        for (i, e) in self.collectives.iter().enumerate() {
            c.collective(i, e, bw)?;
            // Two entries for one (op, path, algo, proto): the lookup would take the first and
            // silently ignore the other.
            if let Some(j) = self.collectives[..i]
                .iter()
                .position(|d| (d.op, d.path, d.algo, d.proto) == (e.op, e.path, e.algo, e.proto))
            {
                return Err(c.fail(
                    &format!("collectives[{i}]"),
                    format!(
                        "a second entry for {}/{}/{}/{} (the first is collectives[{j}])",
                        e.op.name(),
                        e.path,
                        e.algo.name(),
                        e.proto.name()
                    ),
                    "one entry per (op, path, algo, proto)",
                ));
            }
        }
        self.factors.check(&c)?;
        let l = &self.launch;
        let v = &self.variability;
        for (field, x) in [
            ("launch.graph_launch_us", l.graph_launch_us),
            ("launch.graph_kernel_gap_us", l.graph_kernel_gap_us),
            ("launch.eager_launch_us", l.eager_launch_us),
            ("launch.eager_kernel_gap_us", l.eager_kernel_gap_us),
            (
                "launch.graph_first_collective_us",
                l.graph_first_collective_us,
            ),
            ("variability.launch_skew_us", v.launch_skew_us),
        ] {
            c.latency(field, x)?;
        }
        if let Some(sd) = &self.spec_decode {
            c.latency("spec_decode.exposed_host_us", sd.exposed_host_us)?;
            c.latency("spec_decode.pass_gap_us", sd.pass_gap_us)?;
        }
        for (field, x) in [
            ("variability.kernel_cv", v.kernel_cv),
            ("variability.rank_skew_cv", v.rank_skew_cv),
            ("variability.collective_cv", v.collective_cv),
        ] {
            // Uniform jitter of this CV stays above zero duration only below 1/sqrt(3).
            if !(x.is_finite() && (0.0..0.5).contains(&x)) {
                return Err(c.fail(field, x, "a coefficient of variation in [0, 0.5)"));
            }
        }
        self.validate_comm_sections(&c, bw)
    }

    /// The custom all-reduce law and NCCL defaults: latencies in [0, 1 s], bandwidths positive
    /// and within the GPU's memory bandwidth, NCCL's channel count within its MAXCHANNELS (64).
    fn validate_comm_sections(&self, c: &Checker, bw: Option<f64>) -> Result<()> {
        for (k, v) in &self.table_scales {
            if !(v.is_finite() && (TIME_SCALE[0]..=TIME_SCALE[1]).contains(v)) {
                return Err(c.fail(
                    &format!("table_scales.{k}"),
                    v,
                    "a scale in [0.001, 1000] (1 = the table as measured)",
                ));
            }
        }
        if let Some(a) = &self.aiconfigurator {
            for (k, v) in &a.scales {
                if !(v.is_finite() && (TIME_SCALE[0]..=TIME_SCALE[1]).contains(v)) {
                    return Err(c.fail(
                        &format!("aiconfigurator.scales.{k}"),
                        v,
                        "a scale in [0.001, 1000] (1 = the table as measured)",
                    ));
                }
            }
        }
        for (name, ca) in [
            ("custom_allreduce", &self.custom_allreduce),
            ("custom_allreduce_pcie", &self.custom_allreduce_pcie),
        ] {
            if let Some(ca) = ca {
                c.custom_allreduce(name, ca, bw)?;
            }
        }
        if let Some(d) = &self.deepep_ll {
            c.deepep_ll(d, bw)?;
        }
        if let Some(f) = &self.fused_allreduce_rms {
            if !(f.dram_efficiency.is_finite()
                && f.dram_efficiency > 0.0
                && f.dram_efficiency <= 1.0)
            {
                return Err(c.fail(
                    "fused_allreduce_rms.dram_efficiency",
                    f.dram_efficiency,
                    "a share of the DRAM bandwidth above 0 and at most 1",
                ));
            }
        }
        if let Some(t) = &self.transfer {
            let figures = [
                ("memory_bandwidth_gbps", t.memory_bandwidth_gbps),
                ("bf16_tflops", t.bf16_tflops),
                ("fp8_tflops", t.fp8_tflops),
                ("link_gbps", t.link_gbps),
            ];
            for (k, v) in figures {
                if !(v.is_finite() && v > 0.0 && v < 1e7) {
                    return Err(c.fail(
                        &format!("transfer.{k}"),
                        v,
                        "a positive figure of the measured GPU (GB/s or TFLOPS)",
                    ));
                }
            }
        }
        if let Some(n) = &self.nccl {
            if !(1..=64).contains(&n.default_nchannels) {
                return Err(c.fail(
                    "nccl.default_nchannels",
                    n.default_nchannels,
                    "a channel count in [1, 64] (NCCL's MAXCHANNELS)",
                ));
            }
            if !(1..=1 << 40).contains(&n.buffsize_bytes) {
                return Err(c.fail(
                    "nccl.buffsize_bytes",
                    n.buffsize_bytes,
                    "bytes in [1, 2^40]",
                ));
            }
            if !(1..=1024).contains(&n.steps_per_buffer) {
                return Err(c.fail(
                    "nccl.steps_per_buffer",
                    n.steps_per_buffer,
                    "a slot count in [1, 1024]",
                ));
            }
            c.latency("nccl.simple_hop_us", n.simple_hop_us)?;
        }
        Ok(())
    }

    pub fn kernel(&self, family: CostFamily) -> Option<&KernelParams> {
        self.kernels.get(&family)
    }

    /// Sections written although their fit failed the quality rules (`--allow-poor-fit`), each
    /// with the reason; empty for a profile that passed. Reports using the profile print these.
    pub fn poor_fit_marks(&self) -> &[String] {
        &self.profile.poor_fit
    }
}

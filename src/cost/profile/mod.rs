//! A calibration profile: every parameter the cost model uses, with where it came from.

use crate::error::{Error, Result};
use crate::names::enum_names;
use crate::scenario::{Algo, CommPath, Proto};
use crate::workload::CostFamily;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod checks;
mod factors;

pub(crate) use factors::apply_terms;
pub use factors::{apply_factors, Factors};

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

/// The longest fixed cost or latency a profile may state: no call in a decode step takes a second.
pub(crate) const MAX_US: f64 = 1e6;

/// The range of a table price multiplier (`aiconfigurator.scales`): a family's time measured in
/// a trace (`calibrate --from-trace`) up to a thousand times the table's either way is written
/// as measured.
pub const TIME_SCALE: [f64; 2] = [1e-3, 1e3];

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

    pub fn kernel(&self, family: CostFamily) -> Option<&KernelParams> {
        self.kernels.get(&family)
    }

    /// Sections written although their fit failed the quality rules (`--allow-poor-fit`), each
    /// with the reason; empty for a profile that passed. Reports using the profile print these.
    pub fn poor_fit_marks(&self) -> &[String] {
        &self.profile.poor_fit
    }
}

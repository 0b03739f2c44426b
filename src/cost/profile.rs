//! A calibration profile: every parameter the cost model uses, with where it came from.

use crate::error::{Error, Result};
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

/// NCCL-style collective cost on one path, algorithm and protocol:
/// `time = base_us + steps × hop_us + bytes / algbw`, with `algbw` derived from `bus_bw_gbps`
/// the way NCCL's tuner does (facts.md §4.2).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollectiveParams {
    /// `all_reduce`, `all_gather`, or `any`.
    pub op: String,
    /// `nvlink`, `pcie_p2p` or `host`.
    pub path: String,
    /// `ring` or `tree`.
    pub algo: String,
    /// `LL`, `LL128` or `Simple`.
    pub proto: String,
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
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CalibrationProfile {
    pub profile: ProfileMeta,
    pub kernels: BTreeMap<String, KernelParams>,
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
    /// Fit-quality records written by `decodesim calibrate` (free-form tables).
    #[serde(default)]
    pub fit: BTreeMap<String, toml::Value>,
    #[serde(skip)]
    pub path: PathBuf,
    #[serde(skip)]
    pub table: Option<std::sync::Arc<super::table::KernelTable>>,
}

const PATHS: [&str; 3] = ["nvlink", "pcie_p2p", "host"];
const ALGOS: [&str; 2] = ["ring", "tree"];
const PROTOS: [&str; 3] = ["LL", "LL128", "Simple"];
const OPS: [&str; 3] = ["all_reduce", "all_gather", "any"];

impl CalibrationProfile {
    pub fn from_file(path: &Path) -> Result<Self> {
        let mut p: CalibrationProfile =
            crate::error::read_toml(path, crate::files::InputKind::Profile)?;
        p.path = path.to_path_buf();
        p.validate(path)?;
        if let Some(rel) = &p.measurements {
            let dir = path.parent().unwrap_or(Path::new("."));
            let table = super::table::KernelTable::read(&dir.join(rel))?;
            p.table = Some(std::sync::Arc::new(table));
        }
        Ok(p)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let positive = |field: String, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(Error::field(
                    path,
                    field,
                    format!("expected a positive number, found {v}"),
                ))
            }
        };
        let non_negative = |field: String, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(Error::field(
                    path,
                    field,
                    format!("expected a number >= 0, found {v}"),
                ))
            }
        };
        for (name, k) in &self.kernels {
            if crate::workload::CostFamily::from_key(name).is_none() {
                return Err(Error::field(
                    path,
                    format!("kernels.{name}"),
                    format!(
                        "unknown kernel family; expected one of: {}",
                        crate::workload::CostFamily::kernel_keys().join(", ")
                    ),
                ));
            }
            non_negative(format!("kernels.{name}.fixed_us"), k.fixed_us)?;
            positive(format!("kernels.{name}.mem_efficiency"), k.mem_efficiency)?;
            positive(
                format!("kernels.{name}.compute_efficiency"),
                k.compute_efficiency,
            )?;
            non_negative(format!("kernels.{name}.m_half"), k.m_half)?;
            // Above 1 is possible for memory: small activations are served from L2, and the
            // byte counts are DRAM minimums. Far above 1 is a unit mistake.
            if k.mem_efficiency > 4.0 || k.compute_efficiency > 1.5 {
                return Err(Error::field(
                    path,
                    format!("kernels.{name}"),
                    "efficiencies are fractions of the peak (expected mem_efficiency at most 4, compute_efficiency at most 1.5)",
                ));
            }
        }
        for (i, c) in self.collectives.iter().enumerate() {
            let f = |s: &str| format!("collectives[{i}].{s}");
            for (field, value, allowed) in [
                ("op", &c.op, &OPS[..]),
                ("path", &c.path, &PATHS[..]),
                ("algo", &c.algo, &ALGOS[..]),
                ("proto", &c.proto, &PROTOS[..]),
            ] {
                if !allowed.contains(&value.as_str()) {
                    return Err(Error::field(
                        path,
                        f(field),
                        format!("found '{value}', expected one of: {}", allowed.join(", ")),
                    ));
                }
            }
            non_negative(f("base_us"), c.base_us)?;
            non_negative(f("hop_us"), c.hop_us)?;
            positive(f("bus_bw_gbps"), c.bus_bw_gbps)?;
        }
        if self.collectives.is_empty() {
            return Err(Error::field(
                path,
                "collectives",
                "expected at least one entry",
            ));
        }
        let l = &self.launch;
        for (field, v) in [
            ("launch.graph_launch_us", l.graph_launch_us),
            ("launch.graph_kernel_gap_us", l.graph_kernel_gap_us),
            ("launch.eager_launch_us", l.eager_launch_us),
            ("launch.eager_kernel_gap_us", l.eager_kernel_gap_us),
            (
                "launch.graph_first_collective_us",
                l.graph_first_collective_us,
            ),
            (
                "variability.launch_skew_us",
                self.variability.launch_skew_us,
            ),
            ("variability.kernel_cv", self.variability.kernel_cv),
            ("variability.rank_skew_cv", self.variability.rank_skew_cv),
            ("variability.collective_cv", self.variability.collective_cv),
        ] {
            non_negative(field.into(), v)?;
        }
        if let Some(sd) = &self.spec_decode {
            non_negative("spec_decode.exposed_host_us".into(), sd.exposed_host_us)?;
            non_negative("spec_decode.pass_gap_us".into(), sd.pass_gap_us)?;
        }
        for (field, v) in [
            ("variability.kernel_cv", self.variability.kernel_cv),
            ("variability.rank_skew_cv", self.variability.rank_skew_cv),
            ("variability.collective_cv", self.variability.collective_cv),
        ] {
            // Uniform jitter of this CV stays above zero duration only below 1/sqrt(3).
            if v >= 0.5 {
                return Err(Error::field(
                    path,
                    field,
                    "expected a coefficient of variation below 0.5",
                ));
            }
        }
        Ok(())
    }

    pub fn kernel(&self, key: &str) -> Option<&KernelParams> {
        self.kernels.get(key)
    }
}

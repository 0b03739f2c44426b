//! GPUs and multi-GPU systems, read from TOML files in `data/systems/`.

use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    pub name: String,
    pub display_name: String,
    pub compute_capability: String,
    pub sms: u32,
    pub memory_gb: f64,
    pub memory_bandwidth_gbps: f64,
    pub bf16_tflops: f64,
    pub fp8_tflops: f64,
    pub int8_tops: f64,
    pub l2_mb: f64,
    pub nvlink: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    Pcie,
    Nvlink,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interconnect {
    pub kind: LinkKind,
    #[serde(default)]
    pub nvlink_gbps: f64,
    pub pcie_gen: u32,
    pub pcie_lanes: u32,
    pub sockets: u32,
    pub gpus_per_socket: u32,
    #[serde(default)]
    pub pcie_switches: u32,
    #[serde(default)]
    pub p2p_gbps_same_socket: f64,
    #[serde(default)]
    pub p2p_gbps_cross_socket: f64,
    pub p2p_latency_us: f64,
    pub host_latency_us: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemFile {
    pub name: String,
    pub description: String,
    pub gpu: String,
    pub gpu_count: u32,
    /// Name of the calibration profile used when `--calibration` is not given.
    pub calibration: String,
    pub interconnect: Interconnect,
}

#[derive(Debug, Clone)]
pub struct SystemSpec {
    pub name: String,
    pub description: String,
    pub source: PathBuf,
    pub gpu: GpuSpec,
    pub gpu_count: u32,
    pub default_calibration: String,
    pub interconnect: Interconnect,
}

impl GpuSpec {
    pub fn from_file(path: &Path) -> Result<Self> {
        let g: GpuSpec = crate::error::read_toml(path, crate::files::InputKind::SystemToml)?;
        for (field, v) in [
            ("memory_gb", g.memory_gb),
            ("memory_bandwidth_gbps", g.memory_bandwidth_gbps),
            ("bf16_tflops", g.bf16_tflops),
            ("fp8_tflops", g.fp8_tflops),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::field(path, field, "expected a positive number"));
            }
        }
        Ok(g)
    }
}

impl SystemSpec {
    /// Reads a system file; its `gpu` names a file in `gpu_dir`.
    pub fn from_file(path: &Path, gpu_dir: &Path) -> Result<Self> {
        let f: SystemFile = crate::error::read_toml(path, crate::files::InputKind::SystemToml)?;
        if f.gpu_count == 0 {
            return Err(Error::field(path, "gpu_count", "must be at least 1"));
        }
        let gpu_path = gpu_dir.join(format!("{}.toml", f.gpu));
        if !gpu_path.exists() {
            return Err(Error::field(
                path,
                "gpu",
                format!(
                    "no GPU file {} (choices: {})",
                    gpu_path.display(),
                    super::catalog::stems(gpu_dir, "toml").join(", ")
                ),
            ));
        }
        let gpu = GpuSpec::from_file(&gpu_path)?;
        if f.interconnect.kind == LinkKind::Nvlink && f.interconnect.nvlink_gbps <= 0.0 {
            return Err(Error::field(
                path,
                "interconnect.nvlink_gbps",
                "an NVLink system needs a positive NVLink bandwidth",
            ));
        }
        Ok(SystemSpec {
            name: f.name,
            description: f.description,
            source: path.to_path_buf(),
            gpu,
            gpu_count: f.gpu_count,
            default_calibration: f.calibration,
            interconnect: f.interconnect,
        })
    }

    /// Whether `ranks` consecutive GPUs span more than one CPU socket.
    pub fn crosses_sockets(&self, ranks: u32) -> bool {
        self.interconnect.sockets > 1 && ranks > self.interconnect.gpus_per_socket
    }
}

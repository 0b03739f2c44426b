//! GPUs and multi-GPU systems, read from TOML files in `data/systems/`.

use super::check::{self, FloatRange};
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
    /// Total memory as the driver reports it (cudaMemGetInfo / nvidia-smi), in MiB: what
    /// vLLM's `gpu_memory_utilization` multiplies. `memory_gb` stays the marketing figure.
    #[serde(default)]
    pub memory_total_mib: Option<f64>,
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
    /// Nodes of `gpu_count` GPUs each (`gpu_count` and `[interconnect]` describe one node).
    #[serde(default = "one_node")]
    pub nodes: u32,
    /// The network between the nodes; required when `nodes` > 1.
    #[serde(default)]
    pub network: Option<super::network::Network>,
}

fn one_node() -> u32 {
    1
}

#[derive(Debug, Clone)]
pub struct SystemSpec {
    pub name: String,
    pub description: String,
    pub source: PathBuf,
    pub gpu: GpuSpec,
    /// GPUs in the whole system: `nodes` × `gpus_per_node`.
    pub gpu_count: u32,
    pub default_calibration: String,
    pub interconnect: Interconnect,
    pub nodes: u32,
    /// GPUs in one node (the file's `gpu_count`).
    pub gpus_per_node: u32,
    pub network: Option<super::network::Network>,
}

/// Floors and ceilings of GPU figures (`scenario::limits`, where each is argued): a value outside
/// is a unit mistake (MB/s for GB/s, FLOP/s for TFLOP/s), not a faster or slower GPU.
mod gpu_limits {
    pub use crate::scenario::limits::{
        GPU_BANDWIDTH_GBPS as BANDWIDTH_GBPS, GPU_L2_MB as L2_MB, GPU_MEMORY_GB as MEMORY_GB,
        GPU_MEMORY_MIB as MEMORY_MIB, GPU_TFLOPS as TFLOPS,
    };
    pub const SMS: std::ops::RangeInclusive<u64> = 1..=1_024;
}

impl GpuSpec {
    /// Bytes vLLM sees as the device total: `memory_total_mib` when the file gives it, else
    /// `memory_gb` × 10^9.
    pub fn memory_total_bytes(&self) -> f64 {
        match self.memory_total_mib {
            Some(mib) => mib * 1_048_576.0,
            None => self.memory_gb * 1e9,
        }
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let g: GpuSpec = crate::files::read_toml(path, crate::files::InputKind::SystemToml)?;
        g.check(path)?;
        Ok(g)
    }

    /// Every figure finite and in its range; the field and value are named when not.
    fn check(&self, path: &Path) -> Result<()> {
        use gpu_limits::*;
        check::int_in(path, "sms", self.sms as u64, &SMS)?;
        check::float_in(path, "memory_gb", self.memory_gb, &MEMORY_GB)?;
        if let Some(mib) = self.memory_total_mib {
            check::float_in(path, "memory_total_mib", mib, &MEMORY_MIB)?;
            // The driver's total and the marketing figure are one memory: the bundled GPUs'
            // ratios lie in 1.00..1.07 (GiB read as GB, less the driver's reserve).
            let ratio = mib * 1_048_576.0 / (self.memory_gb * 1e9);
            if !(0.9..=1.15).contains(&ratio) {
                return Err(Error::field(
                    path,
                    "memory_total_mib",
                    format!(
                        "found {} MiB ({:.1} GB), {ratio:.2} times memory_gb = {}: expected the same memory as the driver reports it (0.9 to 1.15 times memory_gb)",
                        check::show(mib),
                        mib * 1_048_576.0 / 1e9,
                        check::show(self.memory_gb)
                    ),
                ));
            }
        }
        check::float_in(
            path,
            "memory_bandwidth_gbps",
            self.memory_bandwidth_gbps,
            &BANDWIDTH_GBPS,
        )?;
        check::float_in(path, "bf16_tflops", self.bf16_tflops, &TFLOPS)?;
        check::float_in(path, "fp8_tflops", self.fp8_tflops, &TFLOPS)?;
        check::float_in(path, "int8_tops", self.int8_tops, &TFLOPS)?;
        check::float_in(path, "l2_mb", self.l2_mb, &L2_MB)?;
        let cc_ok = self
            .compute_capability
            .split_once('.')
            .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
        if !cc_ok {
            return Err(Error::field(
                path,
                "compute_capability",
                format!(
                    "found '{}', expected MAJOR.MINOR such as \"9.0\"",
                    crate::units::echo(&self.compute_capability)
                ),
            ));
        }
        Ok(())
    }
}

/// Per-direction link ceilings. NVLink: NVLink5's 900 GB/s per direction per GPU, the fastest
/// in docs/sources.md §2 (raise this when a faster generation is added with its source). PCIe: the
/// signalling rate, GT/s × lanes / 8, before encoding overhead (Gen5 x16 = 64 GB/s; docs/sources.md
/// §2.1 gives "about 63 GB/s per direction" theoretical); measured P2P cannot exceed it.
const NVLINK_MAX_GBPS: f64 = 900.0;

/// PCIe transfer rate per lane in GT/s, by generation (PCI-SIG base specifications 1.0-7.0).
fn pcie_gts(gen: u32) -> Option<f64> {
    match gen {
        1 => Some(2.5),
        2 => Some(5.0),
        3 => Some(8.0),
        4 => Some(16.0),
        5 => Some(32.0),
        6 => Some(64.0),
        7 => Some(128.0),
        _ => None,
    }
}

/// Most GPUs one system file describes (one NVLink domain such as GB200 NVL72 fits well).
const MAX_GPUS: u64 = 1_024;
/// A latency above a millisecond is a unit mistake (docs/sources.md §2.1: PCIe host path ~14 µs).
const LATENCY_US: FloatRange = super::limits::LINK_LATENCY_US;

/// An `[interconnect]` key as errors name it.
fn interconnect_key(k: &str) -> String {
    format!("interconnect.{k}")
}

impl Interconnect {
    fn check(&self, path: &Path, gpu_count: u32, gpu: &GpuSpec) -> Result<()> {
        self.check_rates(path)?;
        self.check_kind(path, gpu_count, gpu)?;
        self.check_sockets(path, gpu_count)
    }

    /// PCIe generation and lanes, each link's bandwidth within its ceiling and above its
    /// kind's floor, the latencies.
    fn check_rates(&self, path: &Path) -> Result<()> {
        let f = interconnect_key;
        let gts = pcie_gts(self.pcie_gen).ok_or_else(|| {
            check::int_error(path, &f("pcie_gen"), &self.pcie_gen.to_string(), &(1..=7))
        })?;
        if ![1, 2, 4, 8, 16, 32].contains(&self.pcie_lanes) {
            return Err(Error::field(
                path,
                f("pcie_lanes"),
                format!("found {}, expected 1, 2, 4, 8, 16 or 32", self.pcie_lanes),
            ));
        }
        let pcie_max = gts * self.pcie_lanes as f64 / 8.0;
        let pcie_range =
            FloatRange::non_negative(pcie_max, "GB/s (the PCIe link's signalling rate)");
        check::float_in(
            path,
            &f("p2p_gbps_same_socket"),
            self.p2p_gbps_same_socket,
            &pcie_range,
        )?;
        check::float_in(
            path,
            &f("p2p_gbps_cross_socket"),
            self.p2p_gbps_cross_socket,
            &pcie_range,
        )?;
        check::float_in(
            path,
            &f("nvlink_gbps"),
            self.nvlink_gbps,
            &FloatRange::non_negative(NVLINK_MAX_GBPS, "GB/s per direction"),
        )?;
        check::float_in(path, &f("p2p_latency_us"), self.p2p_latency_us, &LATENCY_US)?;
        check::float_in(
            path,
            &f("host_latency_us"),
            self.host_latency_us,
            &LATENCY_US,
        )?;
        // A link that is there is at least as fast as the slowest of its kind (`scenario::limits`):
        // 1e-300 GB/s is positive, and would price a collective at 1e305 µs.
        for (key, v, floor) in [
            (
                "nvlink_gbps",
                self.nvlink_gbps,
                super::limits::NVLINK_FLOOR_GBPS,
            ),
            (
                "p2p_gbps_same_socket",
                self.p2p_gbps_same_socket,
                super::limits::P2P_FLOOR_GBPS,
            ),
            (
                "p2p_gbps_cross_socket",
                self.p2p_gbps_cross_socket,
                super::limits::P2P_FLOOR_GBPS,
            ),
        ] {
            if v > 0.0 && v < floor {
                return Err(Error::field(
                    path,
                    f(key),
                    format!(
                        "found {}, expected 0 (no such link) or at least {floor} GB/s per direction",
                        check::show(v)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The link kind against the GPU and the bandwidths it needs.
    fn check_kind(&self, path: &Path, gpu_count: u32, gpu: &GpuSpec) -> Result<()> {
        let f = interconnect_key;
        match self.kind {
            LinkKind::Nvlink if self.nvlink_gbps <= 0.0 => {
                return Err(Error::field(
                    path,
                    f("nvlink_gbps"),
                    format!(
                        "found {}, an NVLink system needs a positive NVLink bandwidth",
                        self.nvlink_gbps
                    ),
                ))
            }
            LinkKind::Nvlink if !gpu.nvlink => {
                return Err(Error::field(
                    path,
                    f("kind"),
                    format!("found \"nvlink\", but GPU '{}' has no NVLink", gpu.name),
                ))
            }
            LinkKind::Pcie if gpu_count > 1 && self.p2p_gbps_same_socket <= 0.0 => {
                return Err(Error::field(
                    path,
                    f("p2p_gbps_same_socket"),
                    format!(
                        "found {}, a PCIe system of several GPUs needs a positive P2P bandwidth",
                        self.p2p_gbps_same_socket
                    ),
                ))
            }
            // GPUs on two sockets talk across the CPUs' link: a figure of its own (0 would
            // price it silently at the same-socket rate).
            LinkKind::Pcie
                if gpu_count > 1 && self.sockets > 1 && self.p2p_gbps_cross_socket <= 0.0 =>
            {
                return Err(Error::field(
                    path,
                    f("p2p_gbps_cross_socket"),
                    format!(
                        "found {}, a PCIe system of GPUs on {} sockets needs the P2P bandwidth between GPUs on different sockets (measured as for p2p_gbps_same_socket, across NUMA nodes)",
                        self.p2p_gbps_cross_socket, self.sockets
                    ),
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// Sockets, GPUs per socket (spread evenly over them) and PCIe switches.
    fn check_sockets(&self, path: &Path, gpu_count: u32) -> Result<()> {
        let f = interconnect_key;
        check::int_in(
            path,
            &f("sockets"),
            self.sockets as u64,
            &(1..=gpu_count as u64),
        )?;
        check::int_in(
            path,
            &f("gpus_per_socket"),
            self.gpus_per_socket as u64,
            &(1..=gpu_count as u64),
        )?;
        // `crosses_sockets` assumes the GPUs are spread evenly, `gpus_per_socket` on each.
        if self.sockets as u64 * self.gpus_per_socket as u64 != gpu_count as u64 {
            return Err(Error::field(
                path,
                f("gpus_per_socket"),
                format!(
                    "found {} on each of {} sockets = {} GPUs, but gpu_count is {gpu_count}",
                    self.gpus_per_socket,
                    self.sockets,
                    self.sockets as u64 * self.gpus_per_socket as u64
                ),
            ));
        }
        check::int_in(
            path,
            &f("pcie_switches"),
            self.pcie_switches as u64,
            &(0..=gpu_count as u64),
        )?;
        Ok(())
    }
}

impl SystemSpec {
    /// Reads a system file; its `gpu` names a file in `gpu_dir`.
    pub fn from_file(path: &Path, gpu_dir: &Path) -> Result<Self> {
        let f: SystemFile = crate::files::read_toml(path, crate::files::InputKind::SystemToml)?;
        check::int_in(path, "gpu_count", f.gpu_count as u64, &(1..=MAX_GPUS))?;
        let gpu_path = gpu_dir.join(format!("{}.toml", f.gpu));
        if !gpu_path.is_file() {
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
        f.interconnect.check(path, f.gpu_count, &gpu)?;
        check::int_in(path, "nodes", f.nodes as u64, &super::limits::NODES)?;
        let total = f.nodes as u64 * f.gpu_count as u64;
        if !super::limits::TOTAL_GPUS.contains(&total) {
            return Err(Error::field(
                path,
                "nodes",
                format!(
                    "found {} nodes x {} GPUs = {total} GPUs, expected at most {}",
                    f.nodes,
                    f.gpu_count,
                    super::limits::TOTAL_GPUS.end()
                ),
            ));
        }
        match &f.network {
            Some(n) => n.check(path, f.gpu_count, f.interconnect.nvlink_gbps, gpu.nvlink)?,
            None if f.nodes > 1 => {
                return Err(Error::field(
                    path,
                    "network",
                    format!(
                        "missing: a system of {} nodes needs a [network] section (fabric, nics, nics_per, nic_gbit, latency_us, transport, gpudirect, gpu_nic_path)",
                        f.nodes
                    ),
                ))
            }
            None => {}
        }
        Ok(SystemSpec {
            name: f.name,
            description: f.description,
            source: path.to_path_buf(),
            gpu,
            gpu_count: total as u32,
            default_calibration: f.calibration,
            interconnect: f.interconnect,
            nodes: f.nodes,
            gpus_per_node: f.gpu_count,
            network: f.network,
        })
    }

    /// Where rank `rank` sits: (node, GPU within the node). Ranks are numbered node by node.
    pub fn node_of(&self, rank: u32) -> (u32, u32) {
        let g = self.gpus_per_node.max(1);
        (rank / g, rank % g)
    }

    /// Nodes a group of `ranks` consecutive ranks (from rank 0) spans.
    pub fn nodes_spanned(&self, ranks: u32) -> u32 {
        ranks.max(1).div_ceil(self.gpus_per_node.max(1))
    }

    /// Whether a group of `ranks` consecutive ranks crosses the network.
    pub fn spans_nodes(&self, ranks: u32) -> bool {
        self.nodes_spanned(ranks) > 1
    }

    /// The link class between two ranks: NVLink or PCIe within a node, the network across.
    pub fn link_between(&self, a: u32, b: u32) -> super::network::LinkClass {
        use super::network::LinkClass;
        if a == b {
            LinkClass::Local
        } else if self.node_of(a).0 != self.node_of(b).0 {
            LinkClass::Net
        } else if self.interconnect.kind == LinkKind::Nvlink {
            LinkClass::Nvlink
        } else {
            LinkClass::Pcie
        }
    }

    /// The PCIe link's signalling rate, GB/s per direction (`pcie_gen` × `pcie_lanes` / 8).
    pub fn pcie_gbps(&self) -> f64 {
        pcie_gts(self.interconnect.pcie_gen).unwrap_or(0.0) * self.interconnect.pcie_lanes as f64
            / 8.0
    }

    /// Whether `ranks` consecutive GPUs span more than one CPU socket.
    pub fn crosses_sockets(&self, ranks: u32) -> bool {
        self.interconnect.sockets > 1 && ranks > self.interconnect.gpus_per_socket
    }
}

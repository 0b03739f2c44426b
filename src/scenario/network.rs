//! The network between the nodes of a system (`[network]` in a system file) and where each
//! rank sits: rank → (node, local GPU), and the link class between two ranks.
//!
//! A system of several nodes is `nodes` copies of the node the file's `gpu_count` and
//! `[interconnect]` describe (GPUs per node), joined by NICs. Ranks are numbered node by node,
//! as torchrun and vLLM place them (rank = node × GPUs per node + local GPU), so a group of
//! consecutive ranks (a TP group) spans `ceil(size / GPUs per node)` nodes.

use super::check;
use super::limits;
use crate::error::{Error, Result};
use serde::Deserialize;
use std::path::Path;

/// Whether `nics` counts NICs per node or per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NicScope {
    Node,
    Gpu,
}

/// How the NICs move data: RDMA (InfiniBand or RoCE: NCCL's IB transport) or TCP sockets
/// (NCCL's socket transport).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Rdma,
    Tcp,
}

/// The path from a GPU to its NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NicPath {
    Pcie,
    Nvlink,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// What the fabric is, for reports ("InfiniBand NDR", "RoCEv2 2x200GbE").
    pub fabric: String,
    /// NICs per node (`nics_per = "node"`) or per GPU (`nics_per = "gpu"`).
    pub nics: u32,
    pub nics_per: NicScope,
    /// Line rate of one NIC, Gb/s per direction (vendors' figure: 400 for NDR / 400GbE).
    pub nic_gbit: f64,
    /// One-way latency NIC to NIC through the switch, µs (added to NCCL's own NET hop latency).
    pub latency_us: f64,
    pub transport: Transport,
    /// GPUDirect RDMA: the NIC reads and writes GPU memory; without it NCCL stages every
    /// transfer through host memory (one more copy, `interconnect.host_latency_us` per hop).
    pub gpudirect: bool,
    pub gpu_nic_path: NicPath,
    /// GB/s per direction of the GPU-NIC path; default: the PCIe link of `[interconnect]`
    /// (`pcie_gen` × `pcie_lanes`) for `pcie`, `nvlink_gbps` for `nvlink`.
    #[serde(default)]
    pub gpu_nic_gbps: Option<f64>,
}

/// The class of link a transfer between two ranks crosses (`SystemSpec::link_between`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkClass {
    /// The same GPU.
    Local,
    /// NVLink within a node.
    Nvlink,
    /// PCIe within a node (P2P or through the host).
    Pcie,
    /// Between nodes, through the NICs.
    Net,
}

impl LinkClass {
    pub fn name(self) -> &'static str {
        match self {
            LinkClass::Local => "local",
            LinkClass::Nvlink => "nvlink",
            LinkClass::Pcie => "pcie",
            LinkClass::Net => "net",
        }
    }
}

impl Network {
    /// NICs in one node.
    pub fn nics_per_node(&self, gpus_per_node: u32) -> u32 {
        match self.nics_per {
            NicScope::Node => self.nics,
            NicScope::Gpu => self.nics * gpus_per_node,
        }
    }

    /// One NIC's line rate in GB/s per direction.
    pub fn nic_gbps(&self) -> f64 {
        self.nic_gbit / 8.0
    }

    /// Checks every field; `nvlink_gbps` is the node's NVLink (the default of `gpu_nic_gbps`
    /// on an NVLink path), `gpu_has_nvlink` whether an NVLink path can exist.
    pub(crate) fn check(
        &self,
        path: &Path,
        gpus_per_node: u32,
        nvlink_gbps: f64,
        gpu_has_nvlink: bool,
    ) -> Result<()> {
        let f = |k: &str| format!("network.{k}");
        if self.fabric.trim().is_empty() {
            return Err(Error::field(
                path,
                f("fabric"),
                "empty: expected what the fabric is, such as \"InfiniBand NDR\" or \"RoCEv2 200GbE\"",
            ));
        }
        check::int_in(path, &f("nics"), self.nics as u64, &limits::NICS_PER_NODE)?;
        let per_node = self.nics as u64
            * match self.nics_per {
                NicScope::Node => 1,
                NicScope::Gpu => gpus_per_node as u64,
            };
        if !limits::NICS_PER_NODE.contains(&per_node) {
            return Err(Error::field(
                path,
                f("nics"),
                format!(
                    "found {} per GPU x {gpus_per_node} GPUs = {per_node} NICs per node, expected an integer {}",
                    self.nics,
                    check::int_range_text(&limits::NICS_PER_NODE)
                ),
            ));
        }
        check::float_in(path, &f("nic_gbit"), self.nic_gbit, &limits::NIC_GBIT)?;
        check::float_in(
            path,
            &f("latency_us"),
            self.latency_us,
            &limits::LINK_LATENCY_US,
        )?;
        if self.transport == Transport::Tcp && self.gpudirect {
            return Err(Error::field(
                path,
                f("gpudirect"),
                "found true with transport = \"tcp\": GPUDirect RDMA needs an RDMA transport (InfiniBand or RoCE); expected false, or transport = \"rdma\"",
            ));
        }
        if self.gpu_nic_path == NicPath::Nvlink && !gpu_has_nvlink {
            return Err(Error::field(
                path,
                f("gpu_nic_path"),
                "found \"nvlink\", but the system's GPU has no NVLink: expected \"pcie\"",
            ));
        }
        if let Some(g) = self.gpu_nic_gbps {
            check::float_in(path, &f("gpu_nic_gbps"), g, &limits::LINK_GBPS)?;
        } else if self.gpu_nic_path == NicPath::Nvlink && nvlink_gbps <= 0.0 {
            return Err(Error::field(
                path,
                f("gpu_nic_gbps"),
                "missing: gpu_nic_path = \"nvlink\" on a system without interconnect.nvlink_gbps needs the path's GB/s per direction",
            ));
        }
        Ok(())
    }
}

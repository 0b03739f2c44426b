//! Collectives across nodes: NCCL's hierarchical cost model (docs/sources.md §4, NCCL 2.30
//! `src/graph/tuning.cc`) for a group of ranks spread over several nodes of a system, and the
//! all-to-all of expert parallelism across nodes in two flavours.
//!
//! The group is `nodes` × `ranks_per_node` ranks, numbered node by node (`SystemSpec::node_of`).
//! NCCL builds its rings and trees so that each crosses the network as few times as it can:
//!
//! - **Ring** (all-reduce, all-gather, reduce-scatter): every channel is one ring through all
//!   ranks that leaves each node once. Each rank's outgoing link, NVLink/PCIe inside a node or a
//!   NIC at the node's edge, carries the same bytes, and a node's exits share its NICs, so the
//!   bus bandwidth is the slower of the per-rank intra-node link and the node's NIC bandwidth
//!   (the bottleneck link, reported with the price). Latency: `base + (nsteps − nInter) ×
//!   intraLat + nInter × interLat`, with `nInter` = 2 × nodes for all-reduce (two passes over a
//!   ring that crosses the node boundary once per node) and nodes − 1 for all-gather and
//!   reduce-scatter.
//! - **Tree** (all-reduce only): a chain inside each node and a double binary tree between the
//!   nodes. Latency `base + 2 × ((ranks_per_node − 1) × intraLat + log2(nodes) × interLat)`
//!   (docs/sources.md §4.2 gives the single-node form; the `log2i(nNodes) × interLat` term is
//!   tuning.cc's), bus bandwidth capped by `nChannels × perChMaxTreeBw` for the node count
//!   (docs/sources.md §4.1) and halved into the algorithm bandwidth.
//!
//! `interLat` is NCCL's `hwLat[NET]` (docs/sources.md §4.1) plus what the system file says the network
//! adds: its one-way NIC latency and, without GPUDirect RDMA, the host-memory staging
//! (`interconnect.host_latency_us`). NCCL's tuner prices every (algorithm, protocol) pair and
//! takes the cheapest (docs/sources.md §4.2), as `choose` does.
//!
//! Not modelled (say so where it matters): NCCL's size-dependent `treeCorrectionFactor`, the
//! lower `llMaxBw` NCCL uses for more than one node (docs/sources.md §4.1 gives only the single-node
//! value, used here for every node count), NVLS/CollNet (SHARP) algorithms, and PXN.
//!
//! All-to-all across nodes (`alltoall`): NCCL's all-to-all (grouped send/recv, a kernel that
//! holds SMs for the whole transfer) or a low-latency RDMA mode as DeepEP's low-latency kernels
//! run it (the GPU posts RDMA writes to the NIC directly, IBGDA; every peer, on the node or off
//! it, is reached through the NIC, and the transfer holds no SMs while it flies). The price says
//! which (`NetPrice::occupies_sms`), so the engine can overlap the RDMA mode with compute.

use super::choice::CollectiveAlgo;
use crate::scenario::network::{LinkClass, NicPath, Transport};
use crate::scenario::{Algo, CommPath, Proto, SystemSpec};
use crate::workload::CostFamily;

mod multinode;
mod p2p;

pub use multinode::{MultiNodeTable, MULTINODE_CSV, MULTINODE_HEADER};
pub use p2p::{p2p, P2P_LL_THRESHOLD};

/// NCCL's `baseLat` in µs, {LL, LL128, Simple} (docs/sources.md §4.1).
const BASE_TREE: [f64; 3] = [6.8, 14.0, 8.4];
const BASE_RING: [f64; 3] = [6.6, 14.0, 8.4];
/// `hwLat` per hop in µs, {LL, LL128, Simple} (docs/sources.md §4.1).
const HW_NVLINK_TREE: [f64; 3] = [0.6, 1.25, 4.0];
const HW_NVLINK_RING: [f64; 3] = [0.6, 1.9, 3.4];
const HW_PCI_TREE: [f64; 3] = [1.0, 1.9, 4.0];
const HW_PCI_RING: [f64; 3] = [1.0, 2.5, 5.7];
const HW_NET_TREE: [f64; 3] = [5.0, 8.5, 14.0];
const HW_NET_RING: [f64; 3] = [2.7, 4.0, 14.0];

/// The per-channel caps of docs/sources.md §4.1 for one GPU generation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// `llMaxBws` for a single node (GB/s).
    pub ll_max_bw: f64,
    /// `perChMaxRingLL128Bw` (GB/s per channel).
    pub ring_ll128_per_ch: f64,
    /// `perChMaxTreeBw` for 1 / 2 / ≥ 4 nodes (GB/s per channel; 3 nodes take the ≥ 4 entry,
    /// as tuning.cc indexes `nNodes == 1 ? 0 : nNodes == 2 ? 1 : 2`).
    pub tree_per_ch: [f64; 3],
}

/// Hopper column of docs/sources.md §4.1 (also used for older GPUs, which docs/sources.md does not list).
pub const HOPPER: Caps = Caps {
    ll_max_bw: 141.0,
    ring_ll128_per_ch: 36.7,
    tree_per_ch: [38.7, 41.4, 36.0],
};
/// Blackwell column of docs/sources.md §4.1; sm_120 counts as Blackwell there.
pub const BLACKWELL: Caps = Caps {
    ll_max_bw: 282.0,
    ring_ll128_per_ch: 40.0,
    tree_per_ch: [70.0, 42.8, 24.0],
};

/// NCCL's MAXCHANNELS (docs/sources.md §4.3).
const MAX_CHANNELS: u32 = 64;

/// A group of ranks over several nodes and the links between them, as the law sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    pub nodes: u32,
    pub ranks_per_node: u32,
    /// The link inside a node: `Nvlink` or `Pcie`.
    pub intra: LinkClass,
    /// GB/s per direction of one rank's intra-node link.
    pub intra_gbps: f64,
    /// µs added to NCCL's intra-node hop latency (the host path's staging when P2P is off).
    pub intra_extra_us: f64,
    /// GB/s per direction of the NICs one node's ranks share (each NIC at the slower of its
    /// line rate and the GPU-NIC path).
    pub net_node_gbps: f64,
    /// µs added to NCCL's `hwLat[NET]` per inter-node hop (wire latency, host staging).
    pub net_extra_us: f64,
    /// Channels NCCL runs (rings / trees in parallel).
    pub channels: u32,
    pub caps: Caps,
    /// LL128 is eligible (NVLink inside the node and an RDMA network).
    pub ll128: bool,
    /// GPUDirect RDMA is on (the low-latency RDMA all-to-all needs it).
    pub gpudirect: bool,
    pub transport: Transport,
    /// The network's one-way latency alone (µs), for the RDMA all-to-all.
    pub wire_us: f64,
}

/// An all-to-all implementation across nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllToAllMode {
    /// NCCL's all-to-all: grouped send/recv in a kernel that holds SMs for the transfer.
    Nccl,
    /// DeepEP-style low-latency mode: RDMA writes posted by the GPU (IBGDA) to every peer
    /// through the NIC; no SMs held while the data flies.
    RdmaLowLatency,
}

/// What bounds a collective's bandwidth: a link, or one of NCCL's per-channel or protocol caps
/// (docs/sources.md §4.1: `llMaxBw`, `perChMaxRingLL128Bw`, `perChMaxTreeBw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Link(LinkClass),
    NcclCap,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Link(l) => l.name(),
            Bound::NcclCap => "an NCCL bandwidth cap (llMaxBw or per channel)",
        }
    }
}

/// The price of one collective across nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct NetPrice {
    /// Ring, tree, all-to-all or DeepEP's RDMA low-latency mode.
    pub algo: CollectiveAlgo,
    /// `LL`, `LL128`, `Simple`, or `-` for the all-to-all.
    pub proto: &'static str,
    pub time_us: f64,
    /// The part of `time_us` that does not grow with the bytes.
    pub latency_us: f64,
    /// The bus bandwidth the bytes moved at (GB/s), after the protocol's factor and caps.
    pub bus_gbps: f64,
    /// What bounded the bandwidth.
    pub bound: Bound,
    /// Whether the transfer holds SMs for its whole duration (false: the engine may overlap it
    /// with compute).
    pub occupies_sms: bool,
}

fn pi(p: Proto) -> usize {
    match p {
        Proto::Ll => 0,
        Proto::Ll128 => 1,
        _ => 2,
    }
}

fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Ll => "LL",
        Proto::Ll128 => "LL128",
        _ => "Simple",
    }
}

/// `floor(log2(n))`, NCCL's `log2i`.
fn log2i(n: u32) -> u32 {
    31 - n.max(1).leading_zeros()
}

impl Hierarchy {
    /// The hierarchy of `ranks` consecutive ranks of `sys` on the scenario's intra-node path;
    /// None when they fit in one node or the system has no network.
    pub fn of(sys: &SystemSpec, ranks: u32, path: CommPath) -> Option<Self> {
        let net = sys.network.as_ref()?;
        if !sys.spans_nodes(ranks) {
            return None;
        }
        let ic = &sys.interconnect;
        let nodes = sys.nodes_spanned(ranks);
        let rpn = ranks.div_ceil(nodes);
        let pcie_p2p = if ic.sockets > 1 && ic.p2p_gbps_cross_socket > 0.0 {
            ic.p2p_gbps_cross_socket
        } else {
            ic.p2p_gbps_same_socket
        };
        let (intra, intra_gbps, intra_extra_us) = match path {
            CommPath::Nvlink => (LinkClass::Nvlink, ic.nvlink_gbps, 0.0),
            CommPath::PcieP2p => (LinkClass::Pcie, pcie_p2p, 0.0),
            CommPath::Host => (LinkClass::Pcie, pcie_p2p, ic.host_latency_us),
        };
        // One rank per node has no peer on its node: the intra link carries nothing and bounds
        // nothing (a node of one PCIe GPU states no P2P bandwidth).
        let intra_gbps = if rpn == 1 { f64::INFINITY } else { intra_gbps };
        let path_gbps = net.gpu_nic_gbps.unwrap_or(match net.gpu_nic_path {
            NicPath::Pcie => sys.pcie_gbps(),
            NicPath::Nvlink => ic.nvlink_gbps,
        });
        // NICs the group's ranks on one node can use: all of the node's when they are per node,
        // the ranks' own when they are per GPU.
        let nics = match net.nics_per {
            crate::scenario::network::NicScope::Node => net.nics,
            crate::scenario::network::NicScope::Gpu => net.nics * rpn,
        };
        let per_nic = net.nic_gbps().min(path_gbps);
        let staging = if net.gpudirect {
            0.0
        } else {
            ic.host_latency_us
        };
        Some(Hierarchy {
            nodes,
            ranks_per_node: rpn,
            intra,
            intra_gbps,
            intra_extra_us,
            net_node_gbps: nics as f64 * per_nic,
            net_extra_us: net.latency_us + staging,
            // NCCL's search gives each NIC its rings and doubles them where bandwidth allows
            // (search.cc; not in docs/sources.md, UNVERIFIED): two channels per NIC, at least 2, at most
            // MAXCHANNELS. Only the per-channel caps read it, and on the bundled systems they
            // do not bind (16 x 36.7 GB/s > 400 GB/s of NICs).
            channels: (2 * nics).clamp(2, MAX_CHANNELS),
            caps: if gpu_major(&sys.gpu.compute_capability) >= 10 {
                BLACKWELL
            } else {
                HOPPER
            },
            ll128: intra == LinkClass::Nvlink && net.transport == Transport::Rdma,
            gpudirect: net.gpudirect,
            transport: net.transport,
            wire_us: net.latency_us,
        })
    }

    pub fn ranks(&self) -> u32 {
        self.nodes * self.ranks_per_node
    }

    /// Bus bandwidth before the protocol: the slower of the rank's intra-node link and the
    /// node's NICs, and which one that is.
    pub fn raw_bus(&self) -> (f64, LinkClass) {
        if self.net_node_gbps < self.intra_gbps {
            (self.net_node_gbps, LinkClass::Net)
        } else {
            (self.intra_gbps, self.intra)
        }
    }

    fn hw_intra(&self, algo: Algo, p: Proto) -> f64 {
        let t = match (self.intra, algo) {
            (LinkClass::Nvlink, Algo::Tree) => HW_NVLINK_TREE,
            (LinkClass::Nvlink, _) => HW_NVLINK_RING,
            (_, Algo::Tree) => HW_PCI_TREE,
            _ => HW_PCI_RING,
        };
        t[pi(p)] + self.intra_extra_us
    }

    fn hw_net(&self, algo: Algo, p: Proto) -> f64 {
        let t = if algo == Algo::Tree {
            HW_NET_TREE
        } else {
            HW_NET_RING
        };
        t[pi(p)] + self.net_extra_us
    }

    /// One (algorithm, protocol) pair's price for `bytes` as nccl-tests counts them (the
    /// all-reduce buffer, the all-gather output). None when NCCL has no such pair (tree for
    /// anything but all-reduce, LL128 where it is not eligible).
    pub fn price(
        &self,
        family: CostFamily,
        algo: Algo,
        proto: Proto,
        bytes: u64,
    ) -> Option<NetPrice> {
        let ar = family == CostFamily::AllReduce;
        if (algo == Algo::Tree && !ar) || (proto == Proto::Ll128 && !self.ll128) {
            return None;
        }
        if !matches!(
            family,
            CostFamily::AllReduce | CostFamily::AllGather | CostFamily::ReduceScatter
        ) {
            return None;
        }
        let n = self.ranks() as f64;
        let ch = self.channels as f64;
        let node_idx = match self.nodes {
            1 => 0,
            2 => 1,
            _ => 2,
        };
        let (raw, link) = self.raw_bus();
        let p = pi(proto);
        // (latency, bus bandwidth after the protocol's factor, the cap it is held to)
        let (lat, scaled, cap) = match algo {
            Algo::Tree => {
                let intra = (self.ranks_per_node - 1) as f64 * self.hw_intra(Algo::Tree, proto);
                let inter = log2i(self.nodes) as f64 * self.hw_net(Algo::Tree, proto);
                let lat = BASE_TREE[p] + 2.0 * (intra + inter);
                let tree_cap = ch * self.caps.tree_per_ch[node_idx];
                let (scaled, cap) = match proto {
                    // Tree LL: ×1/3.8, at most llMaxBw (docs/sources.md §4.2).
                    Proto::Ll => (raw * 0.92 / 3.8, (tree_cap / 3.8).min(self.caps.ll_max_bw)),
                    // Tree LL128 across nodes: ×120/128 (tuning.cc; docs/sources.md §4.2 gives the
                    // single-node 7/9 only).
                    Proto::Ll128 => (raw * 0.92 * 120.0 / 128.0, tree_cap * 120.0 / 128.0),
                    _ => (raw * 0.92, tree_cap),
                };
                (lat, scaled, cap)
            }
            _ => {
                let nsteps = super::collective::steps(family, self.ranks());
                let inter_steps = if ar {
                    2.0 * self.nodes as f64
                } else {
                    (self.nodes - 1) as f64
                };
                let lat = BASE_RING[p]
                    + (nsteps - inter_steps).max(0.0) * self.hw_intra(Algo::Ring, proto)
                    + inter_steps * self.hw_net(Algo::Ring, proto);
                let (scaled, cap) = match proto {
                    Proto::Ll => (raw * 0.5, self.caps.ll_max_bw),
                    Proto::Ll128 => (raw * 0.92, ch * self.caps.ring_ll128_per_ch),
                    _ => (raw, f64::INFINITY),
                };
                (lat, scaled, cap)
            }
        };
        let (bus, bound) = if cap < scaled {
            (cap, Bound::NcclCap)
        } else {
            (scaled, Bound::Link(link))
        };
        let algbw = match algo {
            Algo::Tree => bus * 0.5,
            _ => bus * n / super::collective::steps(family, self.ranks()),
        };
        Some(NetPrice {
            algo: CollectiveAlgo::ring_or_tree(algo),
            proto: proto_name(proto),
            time_us: lat + bytes as f64 / (algbw * 1e3),
            latency_us: lat,
            bus_gbps: bus,
            bound,
            occupies_sms: true,
        })
    }

    /// NCCL's tuner: the cheapest eligible (algorithm, protocol) pair, within what `algo` and
    /// `proto` force (`Auto`: all).
    pub fn choose(
        &self,
        family: CostFamily,
        algo: Algo,
        proto: Proto,
        bytes: u64,
    ) -> Option<NetPrice> {
        let algos: &[Algo] = match algo {
            Algo::Auto => &[Algo::Ring, Algo::Tree],
            Algo::Ring => &[Algo::Ring],
            Algo::Tree => &[Algo::Tree],
        };
        let protos: &[Proto] = match proto {
            Proto::Auto => &[Proto::Ll, Proto::Ll128, Proto::Simple],
            Proto::Ll => &[Proto::Ll],
            Proto::Ll128 => &[Proto::Ll128],
            Proto::Simple => &[Proto::Simple],
        };
        algos
            .iter()
            .flat_map(|&a| protos.iter().map(move |&p| (a, p)))
            .filter_map(|(a, p)| self.price(family, a, p, bytes))
            .min_by(|a, b| a.time_us.total_cmp(&b.time_us))
    }

    /// All-to-all of a per-rank buffer of `bytes` (nccl-tests' size: the rank's whole send
    /// buffer, its own slice included) over the group. None for the RDMA mode where it cannot
    /// run (no RDMA transport or no GPUDirect RDMA: DeepEP's low-latency kernels need both).
    pub fn alltoall(&self, mode: AllToAllMode, bytes: u64) -> Option<NetPrice> {
        let split = AllToAllBytes::of_buffer(bytes as f64, self.ranks(), self.ranks_per_node);
        let per_rank_net = self.net_node_gbps / self.ranks_per_node as f64;
        match mode {
            AllToAllMode::Nccl => {
                // Peers on the node over the intra link, peers off it through the rank's share of
                // the NICs, both at once; latency: one p2p exchange at NCCL's Simple constants
                // (baseLat 8.4 + hwLat NET 14 µs, docs/sources.md §4.1) and the network's own.
                let t_intra = split.intra / (self.intra_gbps * 1e3);
                let t_inter = split.inter / (per_rank_net * 1e3);
                let lat = BASE_RING[2] + self.hw_net(Algo::Ring, Proto::Simple);
                let (t, link, bw) = if t_inter >= t_intra {
                    (t_inter, LinkClass::Net, per_rank_net)
                } else {
                    (t_intra, self.intra, self.intra_gbps)
                };
                Some(NetPrice {
                    algo: CollectiveAlgo::AllToAll,
                    proto: "-",
                    time_us: lat + t,
                    latency_us: lat,
                    bus_gbps: bw,
                    bound: Bound::Link(link),
                    occupies_sms: true,
                })
            }
            AllToAllMode::RdmaLowLatency => {
                if self.transport != Transport::Rdma || !self.gpudirect {
                    return None;
                }
                // Every peer through the NIC; the data and its completion flag go on one ordered
                // queue pair, so the latency is one one-way network latency.
                let lat = self.wire_us;
                Some(NetPrice {
                    algo: CollectiveAlgo::RdmaLl,
                    proto: "-",
                    time_us: lat + split.remote() / (per_rank_net * 1e3),
                    latency_us: lat,
                    bus_gbps: per_rank_net,
                    bound: Bound::Link(LinkClass::Net),
                    occupies_sms: false,
                })
            }
        }
    }
}

fn gpu_major(cc: &str) -> u32 {
    cc.split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// Where one rank's all-to-all bytes go, under uniform routing (each copy lands on any of the
/// `ep` ranks alike).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllToAllBytes {
    /// The rank's send buffer (its own slice included).
    pub buffer: f64,
    /// To other ranks of the same node.
    pub intra: f64,
    /// To ranks of other nodes.
    pub inter: f64,
}

impl AllToAllBytes {
    /// The dispatch (or combine) of expert parallelism: `tokens` tokens on the rank, each sent
    /// to `top_k` experts, `hidden` elements of `elem_bytes` each, over `ep` ranks of which
    /// `ranks_per_node` share a node.
    pub fn moe(
        tokens: u64,
        top_k: u32,
        hidden: u32,
        elem_bytes: f64,
        ep: u32,
        ranks_per_node: u32,
    ) -> Self {
        let buffer = tokens as f64 * top_k as f64 * hidden as f64 * elem_bytes;
        Self::of_buffer(buffer, ep, ranks_per_node)
    }

    pub fn of_buffer(buffer: f64, ep: u32, ranks_per_node: u32) -> Self {
        let ep = ep.max(1) as f64;
        let local = (ranks_per_node.max(1) as f64).min(ep);
        AllToAllBytes {
            buffer,
            intra: buffer * (local - 1.0) / ep,
            inter: buffer * (ep - local) / ep,
        }
    }

    /// Bytes that leave the GPU.
    pub fn remote(&self) -> f64 {
        self.intra + self.inter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two HGX H200 nodes as the bundled file states them: NVLink 450 GB/s inside, 8 NICs of
    /// 400 Gb/s (50 GB/s) per node, 1 µs wire latency, GPUDirect RDMA.
    fn hgx2() -> Hierarchy {
        Hierarchy {
            nodes: 2,
            ranks_per_node: 8,
            intra: LinkClass::Nvlink,
            intra_gbps: 450.0,
            intra_extra_us: 0.0,
            net_node_gbps: 400.0,
            net_extra_us: 1.0,
            channels: 16,
            caps: HOPPER,
            ll128: true,
            gpudirect: true,
            transport: Transport::Rdma,
            wire_us: 1.0,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn two_node_ring_all_reduce_by_hand() {
        let h = hgx2();
        // Ring Simple, 16 ranks: 30 steps, 4 of them across the network.
        // latency = 8.4 + 26 × 3.4 + 4 × (14 + 1) = 156.8 µs;
        // bus = min(450 NVLink, 400 NICs) = 400 GB/s (the network bounds it);
        // algbw = 400 × 16 / 30 = 213.33 GB/s; 100 MB / 213.33 GB/s = 468.75 µs.
        let p = h
            .price(
                CostFamily::AllReduce,
                Algo::Ring,
                Proto::Simple,
                100_000_000,
            )
            .unwrap();
        assert!(close(p.latency_us, 156.8), "{p:?}");
        assert!(close(p.time_us, 156.8 + 468.75), "{p:?}");
        assert_eq!(p.bus_gbps, 400.0);
        assert_eq!(p.bound, Bound::Link(LinkClass::Net));
        assert!(p.occupies_sms);
        // All-gather: 15 steps, 1 across; 8.4 + 14 × 3.4 + 1 × 15 = 71 µs; algbw 400 × 16/15.
        let g = h
            .price(CostFamily::AllGather, Algo::Ring, Proto::Simple, 16_000_000)
            .unwrap();
        assert!(
            close(g.time_us, 71.0 + 16e6 / (400.0 * 16.0 / 15.0 * 1e3)),
            "{g:?}"
        );
        // NCCL has no tree all-gather.
        assert!(h
            .price(CostFamily::AllGather, Algo::Tree, Proto::Simple, 1)
            .is_none());
    }

    #[test]
    fn tuner_takes_tree_small_and_ring_large() {
        let h = hgx2();
        // 1 KB. Tree LL: 6.8 + 2 × (7 × 0.6 + 1 × (5 + 1)) = 27.2 µs, bus min(368 / 3.8, 141)
        // = 96.84, algbw 48.42: 27.22 µs. Ring LL: 6.6 + 26 × 0.6 + 4 × 3.7 = 37.0 µs.
        let small = h
            .choose(CostFamily::AllReduce, Algo::Auto, Proto::Auto, 1_000)
            .unwrap();
        assert_eq!((small.algo, small.proto), (CollectiveAlgo::Tree, "LL"));
        assert!(close(
            small.time_us,
            27.2 + 1_000.0 / (400.0 * 0.92 / 3.8 * 0.5 * 1e3)
        ));
        // 100 MB. Ring LL128: 14 + 26 × 1.9 + 4 × (4 + 1) = 83.4 µs, bus min(368, 16 × 36.7)
        // = 368, algbw 196.27: 592.9 µs; tree LL128 630.2, ring Simple 625.55, tree Simple 637.9.
        let large = h
            .choose(CostFamily::AllReduce, Algo::Auto, Proto::Auto, 100_000_000)
            .unwrap();
        assert_eq!((large.algo, large.proto), (CollectiveAlgo::Ring, "LL128"));
        assert!(
            close(large.time_us, 83.4 + 1e8 / (368.0 * 16.0 / 30.0 * 1e3)),
            "{large:?}"
        );
        // Forcing the protocol or algorithm restricts the choice.
        let forced = h
            .choose(
                CostFamily::AllReduce,
                Algo::Ring,
                Proto::Simple,
                100_000_000,
            )
            .unwrap();
        assert!(close(forced.time_us, 625.55));
        // Over PCIe (no NVLink) LL128 is not eligible.
        let mut pcie = hgx2();
        pcie.intra = LinkClass::Pcie;
        pcie.ll128 = false;
        assert!(pcie
            .price(CostFamily::AllReduce, Algo::Ring, Proto::Ll128, 1)
            .is_none());
        let c = pcie
            .choose(CostFamily::AllReduce, Algo::Auto, Proto::Auto, 100_000_000)
            .unwrap();
        assert_ne!(c.proto, "LL128");
    }

    #[test]
    fn per_channel_cap_binds_on_few_channels() {
        let mut h = hgx2();
        h.channels = 2;
        // Tree Simple: min(400 × 0.92, 2 × 41.4) = 82.8 GB/s, NCCL's cap.
        let t = h
            .price(CostFamily::AllReduce, Algo::Tree, Proto::Simple, 1)
            .unwrap();
        assert!(close(t.bus_gbps, 82.8));
        assert_eq!(t.bound, Bound::NcclCap);
    }

    #[test]
    fn all_to_all_bytes_per_rank() {
        // 64 tokens on the rank, top-8, hidden 7168, BF16, EP 16 over 2 nodes of 8:
        // buffer 64 × 8 × 7168 × 2 = 7,340,032 B; 7/16 to the node's 7 other ranks, 8/16 off it.
        let b = AllToAllBytes::moe(64, 8, 7168, 2.0, 16, 8);
        assert_eq!(b.buffer, 7_340_032.0);
        assert_eq!(b.intra, 3_211_264.0);
        assert_eq!(b.inter, 3_670_016.0);
        assert_eq!(b.remote(), 7_340_032.0 * 15.0 / 16.0);
        // One node: nothing crosses the network.
        let one = AllToAllBytes::moe(64, 8, 7168, 2.0, 8, 8);
        assert_eq!(one.inter, 0.0);
        assert_eq!(one.intra, 7_340_032.0 * 7.0 / 8.0);
    }

    #[test]
    fn rdma_mode_holds_no_sms() {
        let h = hgx2();
        let bytes = 7_340_032;
        // NCCL: off-node 3,670,016 B through the rank's 400/8 = 50 GB/s of NIC (73.40 µs) while
        // the on-node part takes 7.14 µs on NVLink; latency 8.4 + 14 + 1 = 23.4 µs.
        let n = h.alltoall(AllToAllMode::Nccl, bytes).unwrap();
        assert!(n.occupies_sms);
        assert!(close(n.time_us, 23.4 + 3_670_016.0 / 50e3), "{n:?}");
        assert_eq!(n.bound, Bound::Link(LinkClass::Net));
        // RDMA low latency: all 15/16 of the buffer through the NIC, 1 µs wire latency.
        let r = h.alltoall(AllToAllMode::RdmaLowLatency, bytes).unwrap();
        assert!(!r.occupies_sms);
        assert!(
            close(r.time_us, 1.0 + 7_340_032.0 * 15.0 / 16.0 / 50e3),
            "{r:?}"
        );
        // Not available over TCP or without GPUDirect RDMA.
        let mut tcp = hgx2();
        tcp.transport = Transport::Tcp;
        tcp.gpudirect = false;
        assert!(tcp.alltoall(AllToAllMode::RdmaLowLatency, bytes).is_none());
        assert!(tcp.alltoall(AllToAllMode::Nccl, bytes).is_some());
    }

    #[test]
    fn log2i_is_floor() {
        assert_eq!((log2i(1), log2i(2), log2i(3), log2i(18)), (0, 1, 1, 4));
    }
}

//! NCCL's point-to-point send/recv of one rank's slice between pipeline stages: one hop over
//! the link between the two ranks, inside a node or across the network.

use super::{pi, proto_name, Bound, NetPrice, BASE_RING, HW_NET_RING, HW_NVLINK_RING, HW_PCI_RING};
use crate::cost::choice::CollectiveAlgo;
use crate::scenario::network::{LinkClass, NicPath};
use crate::scenario::{CommPath, Proto, SystemSpec};

/// NCCL's default `NCCL_P2P_LL_THRESHOLD` (bytes): point-to-point messages up to it go with
/// LL, larger ones with Simple. UNVERIFIED: NCCL's documented default, not in docs/sources.md.
pub const P2P_LL_THRESHOLD: u64 = 16_384;

/// One NCCL send/recv of `bytes` from rank `from` to rank `to` of `sys` (the pipeline's
/// stage-to-stage send of one rank's slice), while `senders_per_node` ranks of the sender's
/// node send at once (they share the node's NICs when the NICs are per node).
///
/// The law is NCCL's model for one hop (docs/sources.md §4.1 constants; NCCL's tuner has no
/// send/recv entry, so this is an ASSUMPTION built from its parts): `baseLat + hwLat(link)`
/// for the protocol, plus what the link adds (host staging on the host path or without
/// GPUDirect RDMA, the network's one-way latency), then the bytes at the link's bandwidth (LL
/// moves half its line as data, as in the ring law). Inside a node the link is the pair's own
/// (NVLink, or PCIe P2P at the same- or cross-socket figure; concurrent pairs are assumed not
/// to contend); across nodes the sender's share of its node's NICs, each at the slower of its
/// line rate and the GPU-NIC path.
pub fn p2p(
    sys: &SystemSpec,
    path: CommPath,
    from: u32,
    to: u32,
    bytes: u64,
    senders_per_node: u32,
) -> NetPrice {
    let ic = &sys.interconnect;
    let link = sys.link_between(from, to);
    let proto = if bytes <= P2P_LL_THRESHOLD {
        Proto::Ll
    } else {
        Proto::Simple
    };
    let p = pi(proto);
    let ll = |bw: f64| if proto == Proto::Ll { bw * 0.5 } else { bw };
    let (hop, gbps, extra) = match link {
        LinkClass::Local => {
            return NetPrice {
                algo: CollectiveAlgo::P2p,
                proto: "-",
                time_us: 0.0,
                latency_us: 0.0,
                bus_gbps: f64::INFINITY,
                bound: Bound::Link(link),
                occupies_sms: false,
            }
        }
        LinkClass::Nvlink if path == CommPath::Nvlink => (HW_NVLINK_RING[p], ic.nvlink_gbps, 0.0),
        LinkClass::Nvlink | LinkClass::Pcie => {
            let socket = |r: u32| sys.node_of(r).1 / ic.gpus_per_socket.max(1);
            let cross = ic.sockets > 1 && socket(from) != socket(to);
            let bw = if cross && ic.p2p_gbps_cross_socket > 0.0 {
                ic.p2p_gbps_cross_socket
            } else {
                ic.p2p_gbps_same_socket
            };
            let staging = if path == CommPath::Host {
                ic.host_latency_us
            } else {
                0.0
            };
            (HW_PCI_RING[p], bw, staging)
        }
        LinkClass::Net => {
            let net = sys
                .network
                .as_ref()
                .expect("ranks on two nodes imply a [network]");
            let path_gbps = net.gpu_nic_gbps.unwrap_or(match net.gpu_nic_path {
                NicPath::Pcie => sys.pcie_gbps(),
                NicPath::Nvlink => ic.nvlink_gbps,
            });
            let per_nic = net.nic_gbps().min(path_gbps);
            let senders = senders_per_node.max(1) as f64;
            let share = match net.nics_per {
                crate::scenario::network::NicScope::Node => net.nics as f64 * per_nic / senders,
                crate::scenario::network::NicScope::Gpu => net.nics as f64 * per_nic,
            };
            let staging = if net.gpudirect {
                0.0
            } else {
                ic.host_latency_us
            };
            (HW_NET_RING[p], share, net.latency_us + staging)
        }
    };
    let lat = BASE_RING[p] + hop + extra;
    let bw = ll(gbps);
    NetPrice {
        algo: CollectiveAlgo::P2p,
        proto: proto_name(proto),
        time_us: lat + bytes as f64 / (bw * 1e3),
        latency_us: lat,
        bus_gbps: bw,
        bound: Bound::Link(link),
        occupies_sms: true,
    }
}

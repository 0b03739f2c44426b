//! The KV-cache transfer of disaggregated serving: a prompt's KV cache moved from the prefill
//! instance that computed it to the decode instance that will extend it.
//!
//! **Bytes.** The decode instance needs, on every rank, what that rank stores for the prompt:
//! `input_len × kv_bytes_per_token_per_rank` (`workload::memory`: the MLA latent
//! `(kv_lora_rank + qk_rope_head_dim) × layers × KV dtype bytes`, replicated on every TP rank;
//! GQA's K and V of the rank's `ceil(kv_heads / TP)` heads × layers). The `tp` ranks of the
//! prefill instance send to the `tp` ranks of the decode instance rank by rank, all at once, as
//! vLLM's NIXL connector pairs them when both instances run the same TP (vLLM
//! `distributed/kv_transfer/kv_connector/v1/nixl_connector.py`; UNVERIFIED against 0.33). For
//! MLA every rank moves the whole latent: sending it once per node and fanning it out over
//! NVLink is not modelled (an upper bound on the bytes that cross the network). When the two
//! instances run different TPs (`capacity --prefill-tp`), every decode rank still receives
//! what it stores, and the prefill ranks share the sending evenly: each sends the decode
//! ranks' bytes over its count (ASSUMPTION: a connector that regroups heads across TPs, as
//! NIXL's heterogeneous-TP mode is described; UNVERIFIED against a vLLM release).
//!
//! **Time.** One rank's transfer is `latency + bytes_per_rank / (rate × efficiency)`, the
//! slower of the sending and the receiving end (their bytes and rates differ between TPs):
//!
//! - **between nodes** (the pools on different nodes): `rate` is the rank's share of its node's
//!   NICs — `nics_per_node × min(NIC line rate, GPU–NIC path) / ranks of the instance on the
//!   node`, at most the rank's own GPU–NIC path — the slower of the two ends. `latency` is one
//!   round trip of the wire (`2 × latency_us` of the slower end: the decode side asks for the
//!   blocks, then reads them, as NIXL's READ mode does) plus, for each end without GPUDirect
//!   RDMA, `interconnect.host_latency_us` (the bytes are staged through host memory; the copy
//!   is assumed pipelined with the send, so it costs latency, not bandwidth).
//!   `efficiency` is [`RDMA_EFFICIENCY`] or [`TCP_EFFICIENCY`] by the slower end's transport.
//! - **within a node** (both pools on one node): the intra-node link of `[interconnect]`
//!   (NVLink `nvlink_gbps`, else PCIe P2P `p2p_gbps_*`, or the host path when P2P is off) at
//!   its `p2p_latency_us`, at [`NVLINK_EFFICIENCY`] for NVLink's nominal rate; the PCIe figures
//!   are measured (docs/sources.md §2.1), so they are taken as they are.
//!
//! **Rates.** A prefill instance sends one prompt's KV at a time and a decode instance
//! receives one at a time, so each end bounds its pool's requests/s by its own busy time
//! (`send_us`, `recv_us`): x prefill instances send at most x / `send_us`, y decode instances
//! receive at most y / `recv_us`. With more prefill than decode instances the decode side's
//! links carry every prompt's KV and bind first (`capacity::disagg`). A pool's instances
//! packed on a node share its NICs (`KvLink::net_shared`: NICs per node divided by every rank
//! of the pool on the node, not the instance's alone; NICs per GPU are not shared), so the
//! rates are taken on that shared link; a transfer's time in TTFT on the link one instance has
//! to itself (the queueing wait covers the rest).
//!
//! Not modelled: contention with the decode step's own collectives on the same NICs, the
//! layer-by-layer overlap of the transfer with prefill compute (LMCache/Mooncake-style
//! pipelining would hide part of it), and the per-block descriptor cost of a paged cache.

use crate::scenario::network::{LinkClass, NicPath, NicScope, Transport};
use crate::scenario::system::LinkKind;
use crate::scenario::{ModelSpec, SystemSpec};
use serde::Serialize;

/// Share of the line rate a KV transfer reaches over RDMA. ASSUMPTION: Mooncake's transfer
/// engine (Qin et al., "Mooncake", FAST '25, §4: 87 GB/s over 4 × 200 Gb/s RoCE = 0.87 of the
/// line rate; UNVERIFIED, quoted from memory of the paper), the figure NIXL/LMCache-like RDMA
/// engines are held to; calibrate with a measured transfer.
pub const RDMA_EFFICIENCY: f64 = 0.87;
/// Share of the line rate a KV transfer reaches over TCP. ASSUMPTION: the same paper reports
/// its RDMA engine 2.4× faster than TCP on that network: 0.87 / 2.4 ≈ 0.36 (UNVERIFIED).
pub const TCP_EFFICIENCY: f64 = 0.36;
/// Share of NVLink's nominal rate a peer copy reaches. ASSUMPTION: NCCL's bus bandwidth on
/// NVLink4 is about 0.8–0.9 of the nominal 450 GB/s in nccl-tests reports (UNVERIFIED).
pub const NVLINK_EFFICIENCY: f64 = 0.85;

/// The link a KV transfer crosses, as one rank sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvLink {
    /// `net` between nodes, `nvlink` or `pcie` within one.
    pub class: &'static str,
    /// GB/s per direction available to one rank before the efficiency (the slower end's).
    pub rank_gbps: f64,
    /// The same at the sending (prefill) and receiving (decode) end: they differ when the two
    /// instances run different TPs (each end's NICs shared by its own ranks on a node).
    #[serde(skip)]
    pub send_gbps: f64,
    #[serde(skip)]
    pub recv_gbps: f64,
    pub efficiency: f64,
    /// The fixed part of one transfer (µs).
    pub latency_us: f64,
    /// How the figures were made.
    pub source: String,
}

/// One request's KV transfer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvTransfer {
    pub input_len: f64,
    /// Bytes one decode rank receives (its whole KV cache of the prompt).
    pub bytes_per_rank: f64,
    /// Decode ranks receiving at once (the decode instance's TP).
    pub ranks: u32,
    /// Prefill ranks sending at once (the prefill instance's TP), and the bytes each sends.
    pub sending_ranks: u32,
    pub bytes_per_sending_rank: f64,
    /// Bytes over all ranks.
    pub total_bytes: f64,
    pub link: KvLink,
    /// `latency_us + bytes_per_rank / (rank_gbps × efficiency)` at equal TPs (see
    /// [`kv_transfer`]).
    pub time_us: f64,
    /// The part that grows with the bytes (what occupies the link): the slower end's.
    pub busy_us: f64,
    /// The same at each end: how long one transfer holds a sending prefill rank's share of
    /// its link, and a receiving decode rank's. A pool's instances send (or receive) one
    /// transfer at a time each, so these bound the requests/s each end carries.
    pub send_us: f64,
    pub recv_us: f64,
}

/// KV bytes one rank of a TP=`tp` instance holds for a prompt of `input_len` tokens at
/// `kv_elem_bytes` per element (2 for BF16, 1 for FP8).
pub fn kv_bytes_per_rank(m: &ModelSpec, tp: u32, kv_elem_bytes: f64, input_len: f64) -> f64 {
    input_len * crate::workload::memory::kv_bytes_per_token_per_rank(m, tp as usize, kv_elem_bytes)
}

/// One end of a network transfer: (GB/s per rank, one-way latency µs, host staging µs,
/// transport), or None when the system has no `[network]`. `on_node`: the ranks of the pool
/// on one node that share its NICs (at least the instance's own there).
fn net_end(sys: &SystemSpec, tp: u32, on_node: u32) -> Option<(f64, f64, f64, Transport, String)> {
    let net = sys.network.as_ref()?;
    let rpn = on_node.max(tp).clamp(1, sys.gpus_per_node.max(1));
    let path = net.gpu_nic_gbps.unwrap_or(match net.gpu_nic_path {
        NicPath::Pcie => sys.pcie_gbps(),
        NicPath::Nvlink => sys.interconnect.nvlink_gbps,
    });
    let per_nic = net.nic_gbps().min(path);
    let nics = match net.nics_per {
        NicScope::Node => net.nics,
        NicScope::Gpu => net.nics * rpn,
    };
    let rank = (nics as f64 * per_nic / rpn as f64).min(path);
    let staging = if net.gpudirect {
        0.0
    } else {
        sys.interconnect.host_latency_us
    };
    let what = format!(
        "{}: {} NIC(s) of {} Gb/s shared by {rpn} rank(s) of the node, GPU-NIC path {:.1} GB/s{}",
        sys.name,
        nics,
        net.nic_gbit,
        path,
        if net.gpudirect {
            ", GPUDirect RDMA"
        } else {
            ", staged through host memory"
        }
    );
    Some((rank, net.latency_us, staging, net.transport, what))
}

impl KvLink {
    /// The network between a prefill instance of TP `tp_a` on `a` and a decode instance of TP
    /// `tp_b` on `b`; None when either system has no `[network]`.
    pub fn net(a: &SystemSpec, tp_a: u32, b: &SystemSpec, tp_b: u32) -> Option<KvLink> {
        Self::net_shared(a, (tp_a, tp_a), b, (tp_b, tp_b))
    }

    /// [`KvLink::net`] with each end's NICs shared by every rank its pool has on a node
    /// (`(tp, ranks on the node)`): the pools' instances packed on their nodes, all sending
    /// (receiving) at once, as at full load. The rate a loaded pool's links carry.
    pub fn net_shared(
        a: &SystemSpec,
        (tp_a, on_a): (u32, u32),
        b: &SystemSpec,
        (tp_b, on_b): (u32, u32),
    ) -> Option<KvLink> {
        let (ga, la, sa, ta, wa) = net_end(a, tp_a, on_a)?;
        let (gb, lb, sb, tb, wb) = net_end(b, tp_b, on_b)?;
        let tcp = ta == Transport::Tcp || tb == Transport::Tcp;
        let efficiency = if tcp { TCP_EFFICIENCY } else { RDMA_EFFICIENCY };
        let ends = if wa == wb { wa } else { format!("{wa}; {wb}") };
        Some(KvLink {
            class: LinkClass::Net.name(),
            rank_gbps: ga.min(gb),
            send_gbps: ga,
            recv_gbps: gb,
            efficiency,
            latency_us: 2.0 * la.max(lb) + sa + sb,
            source: format!(
                "{ends}; {} at {efficiency} of the line rate (ASSUMPTION, cost::kv_transfer); one wire round trip{}",
                if tcp { "TCP" } else { "RDMA" },
                if sa + sb > 0.0 { " + host staging" } else { "" }
            ),
        })
    }

    /// The intra-node link of `sys` (both pools on one node).
    pub fn intra(sys: &SystemSpec) -> KvLink {
        let ic = &sys.interconnect;
        if ic.kind == LinkKind::Nvlink && ic.nvlink_gbps > 0.0 {
            return KvLink {
                class: LinkClass::Nvlink.name(),
                rank_gbps: ic.nvlink_gbps,
                send_gbps: ic.nvlink_gbps,
                recv_gbps: ic.nvlink_gbps,
                efficiency: NVLINK_EFFICIENCY,
                latency_us: ic.p2p_latency_us,
                source: format!(
                    "{}: NVLink {} GB/s per direction at {NVLINK_EFFICIENCY} (ASSUMPTION, cost::kv_transfer)",
                    sys.name, ic.nvlink_gbps
                ),
            };
        }
        let pcie = if ic.sockets > 1 && ic.p2p_gbps_cross_socket > 0.0 {
            ic.p2p_gbps_cross_socket
        } else {
            ic.p2p_gbps_same_socket
        };
        let (rate, lat, how) = if pcie > 0.0 {
            (pcie, ic.p2p_latency_us, "PCIe P2P")
        } else {
            (
                sys.pcie_gbps(),
                ic.host_latency_us,
                "PCIe through host memory",
            )
        };
        KvLink {
            class: LinkClass::Pcie.name(),
            rank_gbps: rate,
            send_gbps: rate,
            recv_gbps: rate,
            efficiency: 1.0,
            latency_us: lat,
            source: format!(
                "{}: {how} {rate} GB/s per direction (the system file's measured figure)",
                sys.name
            ),
        }
    }

    /// Effective GB/s of one rank.
    pub fn effective_gbps(&self) -> f64 {
        self.rank_gbps * self.efficiency
    }
}

/// The transfer of one prompt of `input_len` tokens from a TP=`tp_p` prefill instance to a
/// TP=`tp_d` decode instance over `link` (see the module notes). Every decode rank receives
/// what it stores of the prompt; the prefill ranks share the sending evenly (each holds its
/// heads, or the whole MLA latent, and sends its part of the decode ranks' bytes). The slower
/// end sets the time: `max(sent per prefill rank / its rate, received per decode rank / its
/// rate)`, at equal TPs the bytes per rank over the slower end's rate.
pub fn kv_transfer(
    m: &ModelSpec,
    tp_p: u32,
    tp_d: u32,
    kv_elem_bytes: f64,
    input_len: f64,
    link: &KvLink,
) -> KvTransfer {
    let bytes = kv_bytes_per_rank(m, tp_d, kv_elem_bytes, input_len);
    let total = bytes * tp_d as f64;
    let sent = if tp_p == tp_d {
        bytes
    } else {
        total / tp_p.max(1) as f64
    };
    // GB/s = 1e3 bytes per µs.
    let at = |b: f64, gbps: f64| b / ((gbps * link.efficiency).max(1e-9) * 1e3);
    let (send_us, recv_us) = (at(sent, link.send_gbps), at(bytes, link.recv_gbps));
    let busy = send_us.max(recv_us);
    KvTransfer {
        input_len,
        bytes_per_rank: bytes,
        ranks: tp_d,
        sending_ranks: tp_p,
        bytes_per_sending_rank: sent,
        total_bytes: total,
        link: link.clone(),
        time_us: link.latency_us + busy,
        busy_us: busy,
        send_us,
        recv_us,
    }
}

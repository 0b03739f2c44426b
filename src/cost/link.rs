//! Hypothetical links (`--link-gbps`, `--link-latency-us`): the collectives of the scenario's
//! path priced as if its link had another bandwidth or latency.
//!
//! How it maps onto the two ways a collective is priced:
//! - the NCCL law (`base + steps × hop + bytes / algbw`, facts.md §4.2): the bus bandwidth is
//!   the link's bandwidth times a channel/efficiency factor, so `algbw` scales by new/old link
//!   bandwidth, and `hop` (NCCL's per-step `hwLat`) moves by the change of the link latency;
//! - a measured table (AIConfigurator's nccl-tests rows): its price at the message size is split
//!   into the latency part (the price of the smallest row, `CollectiveChoice::latency_us`) and
//!   the rest; the rest scales by old/new bandwidth, and steps × (new − old latency) is added.
//!
//! Both reduce to one rule applied to the priced time: `lat + steps·Δlat + (t − lat)·old/new`.
//! The old link is the system's: NVLink `nvlink_gbps`; PCIe P2P the slowest P2P path the ring
//! crosses (`p2p_gbps_cross_socket` on a multi-socket system, else `p2p_gbps_same_socket`);
//! the host path the same PCIe figure (host-staged copies cross the same links) with
//! `host_latency_us`.

use super::collective;
use super::Pricing;
use crate::spec::{CommPath, Scenario};
use crate::workload::Workload;

/// The system's own link for the scenario's path: (GB/s per direction, µs per hop).
pub fn system_link(s: &Scenario) -> (f64, f64) {
    let ic = &s.system.interconnect;
    let pcie = if ic.sockets > 1 && ic.p2p_gbps_cross_socket > 0.0 {
        ic.p2p_gbps_cross_socket
    } else {
        ic.p2p_gbps_same_socket
    };
    match s.comm_path() {
        CommPath::Nvlink => (ic.nvlink_gbps, ic.p2p_latency_us),
        CommPath::PcieP2p => (pcie, ic.p2p_latency_us),
        CommPath::Host => (pcie, ic.host_latency_us),
    }
}

/// Applies `--link-gbps` / `--link-latency-us` to every collective's priced time (and to the
/// collective choices the report lists). Does nothing when neither is given.
pub fn apply(w: &Workload, s: &Scenario, pricing: &mut Pricing) {
    let k = s.comm;
    if k.link_gbps.is_none() && k.link_latency_us.is_none() {
        return;
    }
    let (old_bw, old_lat) = system_link(s);
    let bw_ratio = match k.link_gbps {
        Some(new) if old_bw > 0.0 => old_bw / new,
        _ => 1.0,
    };
    let dlat = k.link_latency_us.map_or(0.0, |l| l - old_lat);
    let rescale = |t: f64, lat: f64, steps: f64| -> f64 {
        let lat = lat.clamp(0.0, t);
        (lat + steps * dlat).max(0.0) + (t - lat) * bw_ratio
    };
    for (op, us) in w.ops.iter().zip(pricing.base_us.iter_mut()) {
        if !op.family.is_collective() {
            continue;
        }
        let n = if op.group > 0 { op.group } else { s.tp };
        let lat = pricing
            .collectives
            .iter()
            .find(|c| c.op == op.family.key() && c.bytes == op.message_bytes)
            .map_or(0.0, |c| c.latency_us);
        *us = rescale(*us, lat, collective::steps(op.family, n));
    }
    for c in pricing.collectives.iter_mut() {
        let family = crate::workload::CostFamily::from_key(c.op)
            .unwrap_or(crate::workload::CostFamily::AllReduce);
        c.time_us = rescale(c.time_us, c.latency_us, collective::steps(family, s.tp));
        c.source = format!(
            "{} (link overridden: {} GB/s, {} us per hop; cost::link)",
            c.source,
            k.link_gbps.map_or(format!("{old_bw}"), |g| format!("{g}")),
            k.link_latency_us
                .map_or(format!("{old_lat}"), |l| format!("{l}")),
        );
    }
}

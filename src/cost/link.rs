//! Hypothetical links (`--link-gbps`, `--link-latency-us`): the collectives of the scenario's
//! path priced as if its link had another bandwidth or latency.
//!
//! How it maps onto the two ways a collective is priced:
//! - the NCCL law (`base + steps × hop + bytes / algbw`, docs/sources.md §4.2): the bus bandwidth is
//!   the link's bandwidth times a channel/efficiency factor, so `algbw` scales by new/old link
//!   bandwidth, and `hop` (NCCL's per-step `hwLat`) moves by the change of the link latency;
//! - a measured table (AIConfigurator's nccl-tests rows): its price at the message size is split
//!   into the latency part (the rows' first segment extrapolated to zero bytes,
//!   `CollectiveChoice::latency_us`) and the rest; the rest scales by old/new bandwidth, and
//!   steps × (new − old latency) is added.
//!
//! Both reduce to one rule applied to the priced time: `lat + steps·Δlat + (t − lat)·old/new`,
//! with `lat` the latency part every source records (`Pricing::split_us`; custom all-reduce and
//! NCCL-knob prices included). It runs after the profile's factors: a factor corrects what the
//! machine was measured to do (its bytes term scales the same either way; its latency scale
//! applies to the measured latency), and the what-if then replaces the link under it, adding
//! the link's own latency change unscaled.
//!
//! The old link is the system's: NVLink `nvlink_gbps`; PCIe P2P the slowest P2P path the ring
//! crosses (`p2p_gbps_cross_socket` on a multi-socket system, else `p2p_gbps_same_socket`);
//! the host path the same PCIe figure (host-staged copies cross the same links) with
//! `host_latency_us`.

use super::collective;
use super::Pricing;
use crate::scenario::{CommPath, Scenario};
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
    // A group that spans nodes is priced over the network (`cost::internode`; DeepEP's
    // low-latency mode sends every peer through the NIC): the link inside a node does not set
    // its price, and the pricer says so in its warnings.
    let across = |n: u32| super::internode::Hierarchy::of(&s.system, n, s.comm_path()).is_some();
    let ops = w.ops.iter().zip(&mut pricing.base_us);
    for ((op, us), lat) in ops.zip(&mut pricing.split_us) {
        if !op.family.is_collective() {
            continue;
        }
        let n = if op.group > 0 { op.group } else { s.layout.tp };
        if across(n) {
            continue;
        }
        let steps = collective::steps(op.family, n);
        let old = lat.clamp(0.0, us.max(0.0));
        *us = rescale(*us, old, steps);
        *lat = (old + steps * dlat).clamp(0.0, *us);
    }
    for c in pricing.collectives.iter_mut() {
        if c.across_nodes {
            continue;
        }
        let family = crate::workload::CostFamily::from_key(c.op)
            .unwrap_or(crate::workload::CostFamily::AllReduce);
        let steps = collective::steps(family, s.layout.tp);
        let lat = c.latency_us.clamp(0.0, c.time_us.max(0.0));
        c.time_us = rescale(c.time_us, c.latency_us, steps);
        c.latency_us = (lat + steps * dlat).clamp(0.0, c.time_us);
        c.source = format!(
            "{} (link overridden: {} GB/s, {} µs per hop; cost::link)",
            c.source,
            k.link_gbps.map_or(format!("{old_bw}"), |g| format!("{g}")),
            k.link_latency_us
                .map_or(format!("{old_lat}"), |l| format!("{l}")),
        );
    }
}

//! The floor no price may go below, whatever priced it (a measured table, a law, a fitted
//! factor, a transferred profile, a hypothetical link).
//!
//! A kernel moves at least its bytes through DRAM and does at least its FLOPs: it takes at least
//! max(bytes / DRAM bandwidth, FLOPs / peak). A collective moves at least (n−1)/n of its message
//! into each rank over the fastest link the system has (a rank must receive every other rank's
//! share, reduced or not). Tables measured by repeating one call on cached data, factors fitted
//! below 1 and links widened by a what-if can all come out faster than that; this layer raises
//! each such price to its floor, once, after everything else, and the report lists what it
//! raised by family.

use super::Pricing;
use crate::scenario::Scenario;
use crate::workload::{CostFamily, Op, Workload};
use std::collections::BTreeMap;

/// What the floor raised, per family: (ops raised, the largest raise as floor / price).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Raised(pub BTreeMap<CostFamily, (usize, f64)>);

impl Raised {
    /// The report's line, or None where nothing was raised.
    pub fn note(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(f, (n, worst))| format!("{f} {n} (up to x{worst:.2})"))
            .collect();
        Some(format!(
            "physics: {} op prices were below their roofline (bytes at the DRAM bandwidth, FLOPs at the peak, a collective's share at the fastest link) and were raised to it: {}",
            self.0.values().map(|v| v.0).sum::<usize>(),
            parts.join(", ")
        ))
    }
}

/// The fastest link a collective of `s` can use, GB/s per direction (a hypothetical
/// `--link-gbps` included): the floor must hold whatever path NCCL takes.
fn fastest_link_gbps(s: &Scenario) -> f64 {
    let ic = &s.system.interconnect;
    let mut bw = ic
        .nvlink_gbps
        .max(ic.p2p_gbps_same_socket)
        .max(ic.p2p_gbps_cross_socket);
    if let Some(g) = s.comm.link_gbps {
        bw = bw.max(g);
    }
    bw
}

/// The op's floor in µs on `s`'s GPU and links (0 for syncs).
pub fn floor_us(op: &Op, s: &Scenario) -> f64 {
    if op.family.is_sync() {
        return 0.0;
    }
    if op.family.is_collective() {
        let bw = fastest_link_gbps(s) * 1e3; // bytes per µs
        if bw <= 0.0 {
            return 0.0;
        }
        let n = if op.group > 0 { op.group } else { s.layout.tp } as f64;
        let share = match op.family {
            CostFamily::SendRecv => 1.0,
            _ if n > 1.0 => (n - 1.0) / n,
            _ => 0.0,
        };
        return op.message_bytes as f64 * share / bw;
    }
    let gpu = &s.system.gpu;
    let peak = if op.family.uses_fp8_peak() {
        gpu.fp8_tflops
    } else {
        gpu.bf16_tflops
    };
    let memory = op.bytes / (gpu.memory_bandwidth_gbps * 1e3);
    let compute = if peak > 0.0 {
        op.flops / (peak * 1e6)
    } else {
        0.0
    };
    memory.max(compute).max(0.0)
}

/// `us` raised to `floor` where it lies below it by more than rounding: a price computed as
/// exactly its floor by another path must not count as raised.
pub fn floored(us: f64, floor: f64) -> f64 {
    if us < floor * (1.0 - 1e-9) {
        floor
    } else {
        us
    }
}

/// Raises every price of `w` below its floor to it (the fixed or latency part kept within the
/// price), and returns what it raised.
pub fn apply(w: &Workload, s: &Scenario, out: &mut Pricing) -> Raised {
    let mut raised = Raised::default();
    for ((op, us), split) in w.ops.iter().zip(&mut out.base_us).zip(&mut out.split_us) {
        let floor = floor_us(op, s);
        if floored(*us, floor) != *us {
            let e = raised.0.entry(op.family).or_insert((0, 1.0));
            e.0 += 1;
            e.1 = e.1.max(floor / us.max(1e-12));
            *us = floor;
            *split = split.min(*us);
        }
    }
    raised
}

//! A profile whose prices were measured on one GPU and moved to another (`[transfer]`, written
//! by `calibrate --transfer-profile`). The profile's laws already price on the scenario's GPU
//! (efficiencies are fractions of its own bandwidth and peak, fixed costs kept); what was
//! measured as times is moved here, after the pricer, op by op:
//! - a kernel priced from a measured table (AIConfigurator's, the profile's own): its family's
//!   fixed cost is kept and the rest scales by the op's roofline on the new GPU over the old,
//!   max(bytes / DRAM bandwidth, FLOPs / peak): a DRAM-bound kernel by the bandwidth ratio, a
//!   compute-bound one by the peak ratio;
//! - a collective inside a node (table or law, both measured on the old machine's link): its
//!   latency part is kept and the bytes term scales by the old link over the new;
//! - a collective across nodes keeps its price (the network is the system's own).
//!
//! Every report of such a profile says the prices were transferred (`Setup`).

use super::Pricing;
use crate::scenario::Scenario;
use crate::workload::{Op, Workload};
use serde::{Deserialize, Serialize};

/// `[transfer]`: the GPU and link the profile's measured prices come from.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TransferSection {
    /// The measured GPU (a file stem in data/systems/gpus).
    pub from_gpu: String,
    /// Its compute capability: vLLM's all-reduce rules there say which measured rows timed
    /// the custom kernel (`scenario::allreduce_rules`).
    pub compute_capability: String,
    pub memory_bandwidth_gbps: f64,
    pub bf16_tflops: f64,
    pub fp8_tflops: f64,
    /// The measured machine's GPU link for its collectives, GB/s per direction.
    pub link_gbps: f64,
    pub source: String,
}

impl TransferSection {
    /// The note every pricing with this profile carries.
    pub(crate) fn note(&self, profile: &str, gpu: &str) -> String {
        format!(
            "calibration profile '{profile}' is transferred: its measured prices come from {} and were moved to {gpu} by physics (tables: fixed cost kept, the rest x the op's roofline ratio; collectives: the bytes term x the link ratio); not measured on this GPU",
            self.from_gpu
        )
    }
}

/// `op`'s roofline on a GPU of `bw` GB/s and the given peaks, µs.
fn roofline_us(op: &Op, bw: f64, bf16: f64, fp8: f64) -> f64 {
    let peak = if op.family.uses_fp8_peak() { fp8 } else { bf16 };
    let mem = op.bytes / (bw * 1e3);
    let compute = if peak > 0.0 {
        op.flops / (peak * 1e6)
    } else {
        0.0
    };
    mem.max(compute)
}

/// Moves the prices of `out` measured on the transfer's GPU to `s`'s: `by_law[i]` ops were
/// priced by a law (already on `s`'s GPU) and keep their price.
pub(crate) fn apply(
    t: &TransferSection,
    w: &Workload,
    s: &Scenario,
    p: &super::CalibrationProfile,
    by_law: &[usize],
    out: &mut Pricing,
) {
    let gpu = &s.system.gpu;
    let (new_link, _) = super::link::system_link(s);
    let link_ratio = if new_link > 0.0 {
        t.link_gbps / new_link
    } else {
        1.0
    };
    let across = |n: u32| super::internode::Hierarchy::of(&s.system, n, s.comm_path()).is_some();
    for (i, op) in w.ops.iter().enumerate() {
        let (us, split) = (out.base_us[i], out.split_us[i]);
        if op.family.is_sync() || us <= 0.0 {
            continue;
        }
        if op.family.is_collective() {
            let n = if op.group > 0 { op.group } else { s.layout.tp };
            if !across(n) {
                let lat = split.clamp(0.0, us);
                out.base_us[i] = lat + (us - lat) * link_ratio;
            }
            continue;
        }
        if by_law.binary_search(&i).is_ok() {
            continue;
        }
        let old = roofline_us(op, t.memory_bandwidth_gbps, t.bf16_tflops, t.fp8_tflops);
        if old <= 0.0 {
            continue;
        }
        let new = roofline_us(
            op,
            gpu.memory_bandwidth_gbps,
            gpu.bf16_tflops,
            gpu.fp8_tflops,
        );
        let fixed = p.kernel(op.family).map_or(0.0, |k| k.fixed_us).min(us);
        let moved = fixed + (us - fixed) * new / old;
        out.base_us[i] = moved;
        out.split_us[i] = split * moved / us;
    }
    for c in out.collectives.iter_mut() {
        if c.across_nodes {
            continue;
        }
        let lat = c.latency_us.clamp(0.0, c.time_us.max(0.0));
        c.time_us = lat + (c.time_us - lat) * link_ratio;
        c.source = format!(
            "{} (transferred from {}: bytes term x {:.3}, its link {} GB/s over {new_link} GB/s)",
            c.source, t.from_gpu, link_ratio, t.link_gbps
        );
    }
}

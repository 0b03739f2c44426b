//! The price of an all-reduce fused with the RMSNorm after it (`--fuse-allreduce-rms`,
//! `workload::fusion`). The law, stated in the profile's `[fused_allreduce_rms]` with its source:
//! the all-reduce at that size as the scenario would run it unfused (its path's price), plus the
//! norm's bytes (residual and hidden rows read and written, the weight read) at the GPU's DRAM
//! bandwidth times `dram_efficiency`: the norm's arithmetic rides on the collective's kernel and
//! no second launch is paid. Above the size the fusion takes (`scenario::allreduce_rules`)
//! vLLM leaves the pair apart: the all-reduce then the norm's own law price.

use super::choice::{norm_name, CollectiveAlgorithm, CollectiveChoice, NormStep};
use super::profile::KernelParams;
use crate::error::{Error, Result};
use crate::scenario::{GpuSpec, Scenario};
use crate::workload::{CostFamily, FusedNorm, Op};
use serde::{Deserialize, Serialize};

/// `[fused_allreduce_rms]`: how much of the DRAM bandwidth the fused kernel's norm part moves
/// its bytes at.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FusedAllreduceRms {
    pub dram_efficiency: f64,
    pub source: String,
}

/// A fused op's price: the all-reduce's choice `c` with the norm added, and the note to make
/// when the message is too large to fuse (the pair then priced apart).
pub(crate) fn price(
    c: CollectiveChoice,
    op: &Op,
    s: &Scenario,
    law: &FusedAllreduceRms,
    norm_law: Option<&KernelParams>,
    profile: &std::path::Path,
) -> Result<(CollectiveChoice, Option<String>)> {
    let norm = op.fused_norm.unwrap_or(FusedNorm::Rms);
    let kind = norm_name(norm);
    let cap = s.allreduce_rules.fusion_cap(s.layout.tp);
    let fits = cap.is_none_or(|c| op.message_bytes < c.bytes);
    let gpu = &s.system.gpu;
    match (fits, norm_law) {
        (false, None) => Err(Error::field(
            profile,
            "kernels.norm",
            "missing: an all-reduce above the fusion's limit runs the norm apart, priced by this law",
        )),
        (false, Some(k)) => {
            let cap = cap.expect("checked");
            let norm_us = unfused_norm_us(op, k, gpu);
            let note = format!(
                "--fuse-allreduce-rms: all_reduce of {} is not below the fusion's limit {} ({}): vLLM runs the all-reduce and the norm apart; priced as the two back to back (the norm's {norm_us:.1} µs shows under communication)",
                crate::units::bytes(op.message_bytes as f64),
                crate::units::bytes(cap.bytes as f64),
                cap.source
            );
            let out = CollectiveChoice {
                time_us: c.time_us + norm_us,
                algo: CollectiveAlgorithm {
                    norm: Some(NormStep::After(norm)),
                    ..c.algo
                },
                source: format!("{}; then the {kind} kernel by its law", c.source),
                ..c
            };
            Ok((out, Some(note)))
        }
        _ => {
            let norm_us = op.bytes / (gpu.memory_bandwidth_gbps * 1e3 * law.dram_efficiency);
            let out = CollectiveChoice {
                time_us: c.time_us + norm_us,
                algo: CollectiveAlgorithm {
                    norm: Some(NormStep::Fused(norm)),
                    ..c.algo
                },
                source: format!(
                    "{}; fused with {kind}: + the norm's {} at {:.0} GB/s ({} x {}: {})",
                    c.source,
                    crate::units::bytes(op.bytes),
                    gpu.memory_bandwidth_gbps * law.dram_efficiency,
                    gpu.memory_bandwidth_gbps,
                    law.dram_efficiency,
                    law.source
                ),
                ..c
            };
            Ok((out, None))
        }
    }
}

/// The norm's own kernel price, as the op would have been priced unfused.
fn unfused_norm_us(op: &Op, k: &KernelParams, gpu: &GpuSpec) -> f64 {
    let norm = Op {
        role: crate::workload::OpRole::Norm,
        family: CostFamily::Norm,
        message_bytes: 0,
        fused_norm: None,
        ..op.clone()
    };
    super::kernel::kernel_us(&norm, k, gpu)
}

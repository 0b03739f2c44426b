//! DeepEP's low-latency dispatch and combine inside one node as a price source: the profile's
//! fitted law per phase (`cost::deepep`), with what the NCCL knobs do not reach said.

use crate::cost::choice::{CollectiveAlgo, CollectiveChoice};
use crate::cost::{deepep, Pricer};
use crate::scenario::deployment::EpComm;
use crate::workload::{CostFamily, Op};

impl Pricer<'_> {
    /// An all-to-all under `--ep-comm rdma-ll` inside one node; None for any other op, or when
    /// the profile has no DeepEP law (NCCL's all-gather law then prices it).
    pub(super) fn deepep_inside_node(&mut self, op: &Op) -> Option<CollectiveChoice> {
        if op.family != CostFamily::AllToAll || self.s.comm.ep_comm != EpComm::RdmaLl {
            return None;
        }
        let c = self.deepep_ll(op)?;
        let k = self.s.comm;
        if !self.s.nccl.p2p {
            note!(self.quiet, self.warnings, format!(
                "--p2p off (NCCL_P2P_DISABLE) does not reach DeepEP's low-latency {} (NVSHMEM over NVLink, not NCCL): its price is unchanged",
                op.family
            ));
        }
        if k.nccl_max_nchannels.is_some()
            || k.nccl_min_nchannels.is_some()
            || k.nccl_buffsize.is_some()
        {
            note!(self.quiet, self.warnings, format!(
                "--nccl-min-nchannels / --nccl-max-nchannels / --nccl-buffsize do not change DeepEP's low-latency {} (not NCCL's kernels): its price is unchanged",
                op.family
            ));
        }
        Some(c)
    }

    /// DeepEP's low-latency dispatch or combine inside one node, by the profile's fitted law
    /// (`cost::deepep`); None when the profile has none (the all-gather law prices it).
    fn deepep_ll(&mut self, op: &Op) -> Option<CollectiveChoice> {
        let d = self.p.deepep_ll.as_ref()?;
        let phase = deepep::Phase::of(op)?;
        let law = d.law(phase);
        let (n, bytes) = (self.group_of(op), op.message_bytes as f64);
        if !law.measured_ranks.contains(&n) {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "DeepEP low-latency {}: measured at {:?} ranks, extrapolated to {n}",
                    phase.name(),
                    law.measured_ranks
                )
            );
        }
        let [lo, hi] = law.measured_bytes;
        if bytes < lo || bytes > hi {
            note!(
                self.quiet,
                self.warnings,
                format!(
                "DeepEP low-latency {} of {} is outside the measured range {}..{}: extrapolated",
                phase.name(),
                crate::units::bytes(bytes),
                crate::units::bytes(lo),
                crate::units::bytes(hi)
            )
            );
        }
        Some(CollectiveChoice {
            op: op.family.key(),
            bytes: op.message_bytes,
            count: 1,
            path: self.path.name(),
            across_nodes: false,
            algo: CollectiveAlgo::DeepepLl.into(),
            proto: "-".into(),
            time_us: law.time_us(bytes),
            source: format!(
                "fitted: DeepEP low-latency {} {:.1} µs + bytes at {:.0} GB/s over {} rows (median |rel err| {:.1}%): {}",
                phase.name(),
                law.latency_us,
                law.bw_gbps,
                law.rows,
                law.median_rel_err * 100.0,
                d.source
            ),
            latency_us: law.latency_us,
        })
    }
}

//! A collective whose group spans nodes as a price source: NCCL's hierarchical law or the
//! multi-node table across the network (`cost::internode`), with what the knobs of a link
//! inside a node do not reach said, and DeepEP's own kernel time on its RDMA mode.

use crate::cost::choice::{CollectiveAlgo, CollectiveChoice};
use crate::cost::{deepep, internode, Pricer};
use crate::error::Result;
use crate::workload::Op;

impl Pricer<'_> {
    /// The price across nodes of `op`; None when its group fits in one node.
    pub(super) fn internode(&mut self, op: &Op) -> Result<Option<CollectiveChoice>> {
        let Some(h) = internode::Hierarchy::of(&self.s.system, self.group_of(op), self.path) else {
            return Ok(None);
        };
        let proto = self.proto_for(op.message_bytes);
        let (mut c, note) =
            internode::price_op(&h, self.s, self.p, op.family, op.message_bytes, proto)?;
        if let Some(n) = note {
            note!(self.quiet, self.warnings, n);
        }
        let rdma = c.algo.base == CollectiveAlgo::RdmaLl;
        self.note_knobs_across_nodes(op, &h, rdma);
        if rdma {
            self.add_deepep_fixed(op, &mut c);
        }
        Ok(Some(c))
    }

    /// NCCL's knobs and the link inside a node do not reach a collective priced across nodes:
    /// the hierarchical law has no channel count or buffer, and DeepEP's kernels are not
    /// NCCL's. Said, not silently ignored.
    fn note_knobs_across_nodes(&mut self, op: &Op, h: &internode::Hierarchy, rdma: bool) {
        let k = self.s.comm;
        if k.nccl_max_nchannels.is_some()
            || k.nccl_min_nchannels.is_some()
            || k.nccl_buffsize.is_some()
        {
            note!(self.quiet, self.warnings, format!(
                    "--nccl-min-nchannels / --nccl-max-nchannels / --nccl-buffsize do not change the {} across {} nodes ({} ranks): {}; its price is unchanged (they act on collectives inside a node)",
                    op.family,
                    h.nodes,
                    h.ranks(),
                    if rdma {
                        "DeepEP's low-latency kernels do not use NCCL"
                    } else {
                        "NCCL's hierarchical law across nodes has no channel count or buffer size"
                    }
                ));
        }
        if k.link_gbps.is_some() || k.link_latency_us.is_some() {
            note!(self.quiet, self.warnings, format!(
                    "--link-gbps / --link-latency-us set the link inside a node; the {} across {} nodes ({} ranks) is priced over the network ({}) and keeps its price",
                    op.family,
                    h.nodes,
                    h.ranks(),
                    if rdma {
                        "DeepEP's low-latency mode sends every peer through the NIC"
                    } else {
                        "give a system file with other links to change it"
                    }
                ));
        }
        if rdma && !self.s.nccl.p2p {
            note!(self.quiet, self.warnings, format!(
                    "--p2p off (NCCL_P2P_DISABLE) does not reach DeepEP's low-latency {} across nodes (its RDMA path is NVSHMEM's, not NCCL's): its price is unchanged",
                    op.family
                ));
        }
    }

    /// DeepEP's kernels cost their own fixed time whatever carries the bytes (measured inside a
    /// node, where NVLink's share is small): the RDMA law's latency is the wire's alone, which
    /// would price two nodes below one.
    fn add_deepep_fixed(&mut self, op: &Op, c: &mut CollectiveChoice) {
        if let (Some(d), Some(phase)) = (&self.p.deepep_ll, deepep::Phase::of(op)) {
            let fixed = d.law(phase).latency_us;
            c.time_us += fixed;
            c.latency_us += fixed;
            c.source = format!(
                        "{}; + DeepEP low-latency {} kernels' fixed {fixed:.1} µs (the profile's [deepep_ll], measured inside a node)",
                        c.source,
                        phase.name()
                    );
        }
    }
}

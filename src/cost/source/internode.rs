//! A collective whose group spans nodes as a price source: NCCL's hierarchical law or the
//! multi-node table across the network (`cost::internode`), with what the knobs of a link
//! inside a node do not reach said, and DeepEP's own kernel time on its RDMA mode.

use crate::cost::choice::{CollectiveAlgo, CollectiveChoice};
use crate::cost::internode::{AllToAllMode, Hierarchy, MULTINODE_CSV};
use crate::cost::{aic, deepep, internode, CalibrationProfile, Pricer};
use crate::error::{Error, Result};
use crate::scenario::deployment::EpComm;
use crate::scenario::{CommPath, Proto, Scenario};
use crate::workload::{CostFamily, Op};

impl Pricer<'_> {
    /// The price across nodes of `op`; None when its group fits in one node.
    pub(super) fn internode(&mut self, op: &Op) -> Result<Option<CollectiveChoice>> {
        let Some(h) = internode::Hierarchy::of(&self.s.system, self.group_of(op), self.path) else {
            return Ok(None);
        };
        let proto = self.proto_for(op.message_bytes);
        let (mut c, note) = across_nodes(&h, self.s, self.p, op.family, op.message_bytes, proto)?;
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

/// The price of one collective op whose group spans nodes, as the pricer records it: the
/// profile's multi-node table when it holds this (op, nodes, ranks), else the law. Returns the
/// choice and a note for the report (an extrapolated table price).
fn across_nodes(
    h: &Hierarchy,
    s: &Scenario,
    p: &CalibrationProfile,
    family: CostFamily,
    bytes: u64,
    proto: Proto,
) -> Result<(CollectiveChoice, Option<String>)> {
    let path: &'static str = match s.comm_path() {
        CommPath::Nvlink => "nvlink+net",
        CommPath::PcieP2p => "pcie_p2p+net",
        CommPath::Host => "host+net",
    };
    if let Some(priced) = from_multinode_table(h, p, family, bytes, path) {
        return Ok(priced);
    }
    Ok((by_law(h, s, family, bytes, proto, path)?, None))
}

/// The multi-node nccl-tests table's price (`internode::MultiNodeTable`), where it holds this
/// op over these nodes and ranks, with a note where it extrapolates.
fn from_multinode_table(
    h: &Hierarchy,
    p: &CalibrationProfile,
    family: CostFamily,
    bytes: u64,
    path: &'static str,
) -> Option<(CollectiveChoice, Option<String>)> {
    let n = h.ranks();
    let key = match family {
        CostFamily::AllToAll => "alltoall",
        f => f.key(),
    };
    let table = p
        .aic
        .as_ref()
        .and_then(|t| Some((t, t.multinode.as_ref()?.curve(key, h.nodes, n)?)));
    if let Some((t, rows)) = table {
        if let Some(tp) = aic::comm_price(rows, bytes as f64) {
            let note = tp.extrapolated.then(|| {
                format!(
                    "{family} of {bytes} bytes is outside the multi-node rows of {} ({} nodes, {n} ranks): extrapolated",
                    crate::units::path(&t.dir.join(MULTINODE_CSV)),
                    h.nodes
                )
            });
            return Some((
                CollectiveChoice {
                    op: family.key(),
                    bytes,
                    count: 1,
                    path,
                    across_nodes: true,
                    algo: CollectiveAlgo::Auto.into(),
                    proto: "measured".into(),
                    time_us: tp.us,
                    source: format!(
                        "measured: nccl-tests over {} nodes x {} ranks ({})",
                        h.nodes,
                        h.ranks_per_node,
                        crate::units::path(&t.dir.join(MULTINODE_CSV))
                    ),
                    latency_us: aic::comm_latency(rows).min(tp.us),
                },
                note,
            ));
        }
    }
    None
}

/// NCCL's hierarchical law (`Hierarchy::choose`); an all-to-all by NCCL's or, under
/// `--ep-comm rdma-ll`, DeepEP's RDMA mode (`Hierarchy::alltoall`).
fn by_law(
    h: &Hierarchy,
    s: &Scenario,
    family: CostFamily,
    bytes: u64,
    proto: Proto,
    path: &'static str,
) -> Result<CollectiveChoice> {
    let net = s.system.network.as_ref().map_or("", |n| n.fabric.as_str());
    let price = if family == CostFamily::AllToAll {
        // `--ep-comm rdma-ll`: DeepEP's low-latency kernels (validation refused it where the
        // network cannot run them).
        let mode = if s.comm.ep_comm == EpComm::RdmaLl {
            AllToAllMode::RdmaLowLatency
        } else {
            AllToAllMode::Nccl
        };
        h.alltoall(mode, bytes)
    } else {
        h.choose(family, s.nccl.algo, proto, bytes)
    };
    let Some(c) = price else {
        return Err(Error::ScenarioPart {
            part: format!("{family} over {} nodes x {} ranks", h.nodes, h.ranks_per_node),
            problem: format!(
                "NCCL has no {} / {} for it (tree runs all-reduce only; LL128 needs NVLink inside the node and an RDMA network); use --nccl-algo auto and --nccl-proto auto",
                s.nccl.algo, proto
            ),
        });
    };
    Ok(CollectiveChoice {
            op: family.key(),
            bytes,
            count: 1,
            path,
            across_nodes: true,
            algo: c.algo.into(),
            proto: c.proto.into(),
            time_us: c.time_us,
            source: format!(
                "NCCL hierarchical law across nodes (cost::internode; docs/sources.md §4): {} nodes x {} ranks over {net}, bus {:.1} GB/s bound by {}{}",
                h.nodes,
                h.ranks_per_node,
                c.bus_gbps,
                c.bound.name(),
                if c.occupies_sms { "" } else { ", no SMs held" }
            ),
            latency_us: c.latency_us,
        })
}

//! What pricing records of each collective it priced: the configuration chosen for a message
//! size (path, algorithm, protocol), its time and where that price came from. The algorithm is
//! typed, so that pricing tells DeepEP's RDMA kernels or vLLM's custom all-reduce apart by value,
//! never by a name; the reports print its name.

use crate::names::enum_names;
use crate::scenario::Algo;
use crate::workload::FusedNorm;
use serde::Serialize;

/// Which collective configuration was picked for a message size, and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveChoice {
    pub op: &'static str,
    pub bytes: u64,
    pub count: u32,
    pub path: &'static str,
    /// Whether it runs between nodes, through the NICs: a hypothetical intra-node link
    /// (`cost::link`) and a transfer to another GPU's link (`cost::transfer`) leave it alone.
    #[serde(skip)]
    pub across_nodes: bool,
    pub algo: CollectiveAlgorithm,
    pub proto: String,
    /// Transfer time once every rank has arrived (no waiting), µs.
    pub time_us: f64,
    pub source: String,
    /// The latency part of `time_us` (what does not grow with the bytes), for factors that
    /// scale latency and bandwidth apart.
    #[serde(skip)]
    pub latency_us: f64,
}

/// The kernel algorithm that carried a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollectiveAlgo {
    /// NCCL's ring.
    Ring,
    /// NCCL's tree (all-reduce only).
    Tree,
    /// NCCL's own choice per size, as a measured table timed it.
    Auto,
    /// NCCL's all-to-all across nodes.
    AllToAll,
    /// DeepEP's low-latency all-to-all across nodes, every peer through the NIC.
    RdmaLl,
    /// DeepEP's low-latency dispatch or combine inside one node.
    DeepepLl,
    /// vLLM's custom all-reduce kernel.
    VllmCustom,
    /// NCCL's point-to-point send/recv (pipeline stage to stage).
    P2p,
}

enum_names!(CollectiveAlgo, "collective algorithm",
    CollectiveAlgo::Ring => ["ring"], CollectiveAlgo::Tree => ["tree"],
    CollectiveAlgo::Auto => ["auto"], CollectiveAlgo::AllToAll => ["alltoall"],
    CollectiveAlgo::RdmaLl => ["rdma_ll"], CollectiveAlgo::DeepepLl => ["deepep_ll"],
    CollectiveAlgo::VllmCustom => ["vllm_custom"], CollectiveAlgo::P2p => ["p2p"]);

impl CollectiveAlgo {
    /// The algorithm of a profile's NCCL entry (`auto`: the tuner's choice as measured).
    pub(crate) fn of_nccl(a: Algo) -> Self {
        match a {
            Algo::Ring => CollectiveAlgo::Ring,
            Algo::Tree => CollectiveAlgo::Tree,
            Algo::Auto => CollectiveAlgo::Auto,
        }
    }

    /// The algorithm NCCL's law across nodes priced under `a`: the tree for `Tree`, else the
    /// ring (`internode::Hierarchy::price`).
    pub(crate) fn ring_or_tree(a: Algo) -> Self {
        if a == Algo::Tree {
            CollectiveAlgo::Tree
        } else {
            CollectiveAlgo::Ring
        }
    }
}

/// Where the norm of an all-reduce under `--fuse-allreduce-rms` ran (`cost::fusion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormStep {
    /// Inside the collective's kernel.
    Fused(FusedNorm),
    /// As its own kernel after the collective: the message was above the fusion's limit.
    After(FusedNorm),
}

/// A collective's algorithm as a report names it: the kernel's algorithm and, under
/// `--fuse-allreduce-rms`, the norm it took in or ran before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectiveAlgorithm {
    pub base: CollectiveAlgo,
    pub norm: Option<NormStep>,
}

impl From<CollectiveAlgo> for CollectiveAlgorithm {
    fn from(base: CollectiveAlgo) -> Self {
        CollectiveAlgorithm { base, norm: None }
    }
}

/// The norm's name in a report's algorithm column.
pub(crate) fn norm_name(n: FusedNorm) -> &'static str {
    match n {
        FusedNorm::AddRms => "add+rmsnorm",
        FusedNorm::Rms => "rmsnorm",
    }
}

impl std::fmt::Display for CollectiveAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.norm {
            None => write!(f, "{}", self.base),
            Some(NormStep::Fused(n)) => write!(f, "{}+{}", self.base, norm_name(n)),
            Some(NormStep::After(n)) => write!(f, "{}, then {}", self.base, norm_name(n)),
        }
    }
}

impl Serialize for CollectiveAlgorithm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_print_as_the_reports_always_printed_them() {
        let ring = CollectiveAlgorithm::from(CollectiveAlgo::Ring);
        assert_eq!(ring.to_string(), "ring");
        let fused = CollectiveAlgorithm {
            norm: Some(NormStep::Fused(FusedNorm::AddRms)),
            ..ring
        };
        assert_eq!(fused.to_string(), "ring+add+rmsnorm");
        let apart = CollectiveAlgorithm {
            base: CollectiveAlgo::VllmCustom,
            norm: Some(NormStep::After(FusedNorm::Rms)),
        };
        assert_eq!(apart.to_string(), "vllm_custom, then rmsnorm");
        assert_eq!(
            serde_json::to_string(&CollectiveAlgorithm::from(CollectiveAlgo::RdmaLl)).unwrap(),
            "\"rdma_ll\""
        );
    }
}

//! A scenario: which model runs on which system, how it is parallelised and served.

use super::model::ModelSpec;
use super::system::{LinkKind, SystemSpec};
use crate::names::enum_names;
use serde::Serialize;

/// NCCL protocol (`NCCL_PROTO`). `Auto` lets the cost model pick the fastest eligible one, as
/// NCCL's tuner does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Proto {
    Auto,
    #[serde(rename = "LL")]
    Ll,
    #[serde(rename = "LL128")]
    Ll128,
    Simple,
}

/// NCCL algorithm (`NCCL_ALGO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Algo {
    Auto,
    Ring,
    Tree,
}

/// The path collectives take between GPUs, which sets their latency and bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommPath {
    Nvlink,
    /// GPU-to-GPU over PCIe (P2P enabled).
    PcieP2p,
    /// Through host memory (P2P disabled, or not allowed by the topology).
    Host,
}

enum_names!(Proto, "NCCL protocol",
    Proto::Auto => ["auto", "default"], Proto::Ll => ["LL"], Proto::Ll128 => ["LL128"],
    Proto::Simple => ["Simple"]);
enum_names!(Algo, "NCCL algorithm",
    Algo::Auto => ["auto", "default"], Algo::Ring => ["Ring"], Algo::Tree => ["Tree"]);
enum_names!(CommPath, "communication path",
    CommPath::Nvlink => ["nvlink"], CommPath::PcieP2p => ["pcie_p2p"], CommPath::Host => ["host"]);

/// Whose kernel sequence the step follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// vLLM's decode step (docs/sources.md §3.1).
    Vllm,
    /// The project's PyTorch reference step (`harness/refstep.py`, data/README.md): vLLM's
    /// sequence with an explicit token permutation before the grouped expert GEMMs, the shared
    /// expert's add fused into the expert sum, and argmax over the gathered BF16 logits.
    Reference,
}

enum_names!(Runtime, "runtime", Runtime::Vllm => ["vllm"], Runtime::Reference => ["reference"]);

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NcclSettings {
    pub proto: Proto,
    pub(crate) algo: Algo,
    pub(crate) p2p: bool,
}

/// Which implementation carries the tensor-parallel all-reduces (`--allreduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
pub enum AllreduceImpl {
    /// NCCL (vLLM's pynccl) for every all-reduce.
    Nccl,
    /// vLLM's custom all-reduce kernels where vLLM would run them; an error where vLLM refuses
    /// the world size or topology (docs/sources.md §3.3).
    Custom,
    /// vLLM's own dispatch for this GPU and topology (custom where it allows it, else NCCL).
    #[default]
    Auto,
}

enum_names!(AllreduceImpl, "all-reduce implementation",
    AllreduceImpl::Nccl => ["nccl"], AllreduceImpl::Custom => ["custom"],
    AllreduceImpl::Auto => ["auto"]);

/// The parallel layout of a scenario: how the model's work is split over the GPUs (`--tp`,
/// `--pp`, `--dp`, `--ep`, `--dcp`, and the expert replicas of `--redundant-experts`) and whether
/// the step runs as two overlapped micro-batches (`--tbo`). Sizes left unset (None) are 1, or 0
/// replicas; the scenario check refuses a 0 where a size is given. What the step communicates
/// over this layout, and how, is [`CommKnobs`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
pub struct Layout {
    /// Tensor-parallel size (`--tp`).
    pub tp: u32,
    /// Pipeline-parallel size (`--pp`, vLLM's `--pipeline-parallel-size`); None or 1: off.
    pub pp: Option<u32>,
    /// Data-parallel attention size (`--dp`, vLLM's `--data-parallel-size` with
    /// `--enable-expert-parallel`); None or 1: off (`workload::parallel`).
    pub dp: Option<u32>,
    /// Expert-parallel size (`--ep`, vLLM's `--enable-expert-parallel`); None or 1: off.
    pub ep: Option<u32>,
    /// Decode-context-parallel size (`--dcp`, vLLM's `--decode-context-parallel-size`).
    pub dcp: Option<u32>,
    /// Extra routed-expert replicas placed on the hottest experts (`--redundant-experts`,
    /// vLLM's EPLB `num_redundant_experts`); None or 0: off.
    pub redundant_experts: Option<u32>,
    /// Two-batch overlap (`--tbo`): the step in two micro-batches whose all-to-all overlaps the
    /// other's compute.
    pub tbo: bool,
}

impl Layout {
    /// Expert-parallel size (1: experts are tensor-parallel).
    pub fn ep_size(&self) -> u32 {
        self.ep.unwrap_or(1).max(1)
    }
    /// Decode-context-parallel size (1: every rank reads the whole context).
    pub(crate) fn dcp_size(&self) -> u32 {
        self.dcp.unwrap_or(1).max(1)
    }
    /// Pipeline stages (1: no pipeline parallelism).
    pub fn pp_size(&self) -> u32 {
        self.pp.unwrap_or(1).max(1)
    }
    /// Data-parallel attention size (1: off).
    pub fn dp_size(&self) -> u32 {
        self.dp.unwrap_or(1).max(1)
    }
    /// Extra expert replicas (EPLB; 0: off).
    pub fn redundant(&self) -> u32 {
        self.redundant_experts.unwrap_or(0)
    }
    /// The GPUs of one pipeline stage: data-parallel attention ranks × TP (`--dp` × `--tp`).
    pub fn ranks(&self) -> u32 {
        self.dp_size() * self.tp
    }
    /// The sequences one rank attends over out of `batch`: the batch, or under data-parallel
    /// attention the largest DP rank's share (every rank plays the largest DP rank's step,
    /// [`Layout::dp_batches`]).
    pub fn rank_batch(&self, batch: u32) -> u32 {
        let dp = self.dp_size();
        if dp > 1 {
            batch.div_ceil(dp).max(1)
        } else {
            batch
        }
    }
    /// Sequences of each data-parallel rank out of `batch`: the batch split as evenly as it
    /// goes, the first ranks taking the remainder (10 over 4: 3, 3, 2, 2). One entry at
    /// `--dp 1`.
    pub fn dp_batches(&self, batch: u32) -> Vec<u32> {
        let dp = self.dp_size();
        (0..dp)
            .map(|d| batch / dp + u32::from(d < batch % dp))
            .collect()
    }
}

/// How collectives are carried beyond NCCL's protocol and algorithm: the all-reduce
/// implementation and the NCCL environment knobs that change cost (docs/sources.md §4.3), how
/// expert parallelism moves its tokens, the all-reduce + RMSNorm fusion, and the link overrides
/// (`--link-gbps`, `--link-latency-us`; `cost::link`). Over which ranks the step communicates is
/// the [`Layout`]'s: copying these settings from one scenario to another leaves its layout alone.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct CommKnobs {
    pub allreduce: AllreduceImpl,
    /// `NCCL_MAX_NCHANNELS` (None: unset).
    pub nccl_max_nchannels: Option<u32>,
    /// `NCCL_MIN_NCHANNELS` (None: unset).
    pub nccl_min_nchannels: Option<u32>,
    /// `NCCL_BUFFSIZE` in bytes (None: unset, NCCL's 4 MiB).
    pub nccl_buffsize: Option<u64>,
    /// How expert parallelism moves tokens (`--ep-comm`).
    pub ep_comm: EpComm,
    /// Hypothetical link bandwidth per direction, GB/s (`--link-gbps`).
    pub link_gbps: Option<f64>,
    /// Hypothetical link latency per hop, µs (`--link-latency-us`).
    pub link_latency_us: Option<f64>,
    /// Message size (bytes) from which NCCL switches from LL to Simple under `--nccl-proto auto`
    /// (`--nccl-ll-threshold`; None: NCCL's own tuner choice).
    pub nccl_ll_threshold: Option<u64>,
    /// vLLM's all-reduce + RMSNorm fusion (`--fuse-allreduce-rms`,
    /// `compilation_config.pass_config.fuse_allreduce_rms`): each TP all-reduce and the norm
    /// after it run as one FlashInfer kernel (`scenario::allreduce_rules`, `cost::fusion`).
    pub fuse_allreduce_rms: bool,
}

/// How expert parallelism carries tokens to the experts and back (`workload::parallel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EpComm {
    /// Each rank dispatches its 1/N slice of the batch to the experts' owners and combines the
    /// results back (all-to-all), then an all-gather re-replicates the batch for TP attention;
    /// this replaces the MoE all-reduce. vLLM's all2all backends work this way when the batch
    /// is split across ranks (data-parallel attention); an assumption beyond that.
    AllToAll,
    /// Every rank runs its own experts on the whole (replicated) batch and the MoE all-reduce
    /// sums the partial outputs, as with TP experts. The default: with data parallel 1 the
    /// tokens are already on every rank after the attention all-reduce, so vLLM's MoE layer
    /// only reduces, as with TP experts (dispatch/combine is used across DP ranks).
    #[default]
    AllReduce,
    /// DeepEP-style low-latency all-to-all (`rdma-ll`): dispatch/combine as `AllToAll`, the
    /// transfer posted by the GPU to the NIC (IBGDA) without holding SMs, dispatch in FP8
    /// (`cost::internode::AllToAllMode::RdmaLowLatency`).
    RdmaLl,
}

enum_names!(serde EpComm, "expert-parallel communication",
    EpComm::AllToAll => ["all-to-all", "alltoall"], EpComm::AllReduce => ["allreduce", "all-reduce"],
    EpComm::RdmaLl => ["rdma-ll", "rdma_ll"]);

impl EpComm {
    /// Dispatch/combine all-to-all (NCCL's or the low-latency RDMA one) rather than the
    /// all-reduce.
    pub fn is_all_to_all(self) -> bool {
        matches!(self, EpComm::AllToAll | EpComm::RdmaLl)
    }
}

/// Largest batch and context the simulator accepts: beyond these a typo is likelier than intent.
/// `MAX_BATCH` is per data-parallel rank (the global batch of `--dp N` may be N times it).
pub const MAX_BATCH: u32 = 16_384;
/// The largest batch a list flag takes before its layout is known (`sweep --batch`,
/// `--crossover-batches`): 4,096 data-parallel ranks of [`MAX_BATCH`]; each layout then
/// checks its own.
pub const MAX_BATCH_ANY_DP: u32 = MAX_BATCH * 4096;
pub const MAX_CONTEXT: u64 = 10_000_000;

#[derive(Debug, Clone)]
pub struct Scenario {
    pub model: ModelSpec,
    pub system: SystemSpec,
    /// The parallel layout (`--tp`, `--pp`, `--dp`, `--ep`, `--dcp`, `--redundant-experts`,
    /// `--tbo`).
    pub layout: Layout,
    /// Sequences decoded together in one step (one new token each).
    pub batch: u32,
    /// Tokens already in each sequence's KV cache.
    pub context: u64,
    pub cuda_graphs: bool,
    pub nccl: NcclSettings,
    /// KV-cache element size in bytes (2 for BF16, 1 for FP8).
    pub kv_bytes: f64,
    pub(crate) runtime: Runtime,
    pub seed: u64,
    /// Share of each GPU's memory vLLM may use for weights, activations and KV cache
    /// (`--gpu-memory-utilization`, vLLM's default 0.9); the memory check holds the footprint
    /// against it.
    pub(crate) gpu_memory_utilization: f64,
    /// How tokens spread over the routed experts (`--routing`; `workload::routing`).
    pub routing: super::routing::Routing,
    /// All-reduce implementation, NCCL knobs and the other communication settings
    /// (`--allreduce`, `--nccl-max-nchannels`, `--nccl-buffsize`, `--ep-comm`, ...).
    pub comm: CommKnobs,
    /// vLLM's CUDA-graph capture sizes for this GPU (`data/vllm/cudagraph.toml`): with
    /// `cuda_graphs` on, a pass's tokens are padded up to one of them.
    pub(crate) cuda_graph_sizes: std::sync::Arc<super::cudagraph::CaptureSizes>,
    /// vLLM's MLA decode backend for this GPU and its verify-pass layout
    /// (`data/vllm/mla_backends.toml`).
    pub(crate) mla_backend: std::sync::Arc<super::mla_backend::MlaBackend>,
    /// vLLM's all-reduce rules for this GPU (`data/vllm/allreduce.toml`): the custom
    /// all-reduce's size cap, symmetric memory, the all-reduce + RMSNorm fusion.
    pub(crate) allreduce_rules: std::sync::Arc<super::allreduce_rules::AllreduceRules>,
}

/// vLLM's default `gpu_memory_utilization` (vllm/config/cache.py `CacheConfig`).
pub(crate) const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;

impl Scenario {
    /// All the GPUs the scenario runs on: data-parallel attention ranks × TP (`--dp` × `--tp`).
    pub fn ranks(&self) -> u32 {
        self.layout.ranks()
    }

    /// The sequences one rank attends over: the batch, or under data-parallel attention the
    /// largest DP rank's share (every rank plays the largest DP rank's step, `dp_batches`).
    pub fn rank_batch(&self) -> u32 {
        self.layout.rank_batch(self.batch)
    }

    /// Sequences of each data-parallel rank: the global batch split as evenly as it goes, the
    /// first ranks taking the remainder (10 over 4: 3, 3, 2, 2). One entry at `--dp 1`.
    pub fn dp_batches(&self) -> Vec<u32> {
        self.layout.dp_batches(self.batch)
    }

    /// The path collectives take with these settings on this system.
    pub fn comm_path(&self) -> CommPath {
        match (self.nccl.p2p, self.system.interconnect.kind) {
            (false, _) => CommPath::Host,
            (true, LinkKind::Nvlink) => CommPath::Nvlink,
            (true, LinkKind::Pcie) => CommPath::PcieP2p,
        }
    }

    /// The padding of a pass with `queries` tokens per sequence under `rule` (a plain step:
    /// `padding(1, PadRule::Decode)`): with CUDA graphs on, up to the next captured size.
    pub fn padding(
        &self,
        queries: u32,
        rule: super::cudagraph::PadRule,
    ) -> super::cudagraph::Padding {
        let tokens = self.batch as u64 * queries.max(1) as u64;
        self.cuda_graph_sizes
            .padding(tokens, rule, self.cuda_graphs)
    }

    /// [`Self::padding`] of the tokens one rank runs: under data-parallel attention the
    /// largest DP rank's share of the batch (each DP rank captures and replays its own
    /// graphs), else the whole batch.
    pub fn rank_padding(
        &self,
        queries: u32,
        rule: super::cudagraph::PadRule,
    ) -> super::cudagraph::Padding {
        let tokens = self.rank_batch() as u64 * queries.max(1) as u64;
        self.cuda_graph_sizes
            .padding(tokens, rule, self.cuda_graphs)
    }
}

//! A scenario: which model runs on which system, how it is parallelised and served.

use super::model::ModelSpec;
use super::system::{LinkKind, SystemSpec};
use crate::error::{Error, Result};
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
    /// Checks the combination; every error says what is wrong and what would be accepted.
    pub fn validate(&self) -> Result<()> {
        let m = &self.model;
        let tp = self.layout.tp;
        if tp == 0 {
            return Err(Error::FlagUse {
                flag: "--tp",
                problem: "must be at least 1".into(),
            });
        }
        if tp > self.system.gpu_count && self.layout.dp_size() == 1 {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " needs {tp} GPUs but system '{}' has {}",
                    self.system.name, self.system.gpu_count
                ),
            });
        }
        let g = self.system.gpus_per_node;
        if tp > g && !tp.is_multiple_of(g) {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " spans nodes of {g} GPUs on system '{}' but is not a multiple of {g}: a TP group across nodes takes whole nodes",
                    self.system.name
                ),
            });
        }
        if self.system.spans_nodes(tp)
            && (self.comm.link_gbps.is_some() || self.comm.link_latency_us.is_some())
        {
            return Err(Error::FlagUse {
                flag: "--link-gbps / --link-latency-us",
                problem: format!(
                    "describe the link inside a node, but --tp {tp} spans {} nodes of system '{}', whose collectives are priced by its [network]: edit the system file's [network] instead",
                    self.system.nodes_spanned(tp),
                    self.system.name
                ),
            });
        }
        let t = tp as usize;
        if !m.num_heads.is_multiple_of(t) {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " does not divide the {} attention heads of {} (use a divisor of {})",
                    m.num_heads, m.name, m.num_heads
                ),
            });
        }
        // vLLM's rule for the KV heads (QKVParallelLinear): with TP at least the KV heads, each
        // rank holds one head, replicated TP / heads times, so TP must be a multiple of them;
        // below, the heads are split, so TP must divide them. MLA keeps one latent per rank.
        let kv = m.num_kv_heads;
        if m.mla.is_none() {
            if t >= kv && !t.is_multiple_of(kv) {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " is not a multiple of the {kv} KV heads of {} ({}: num_key_value_heads): with TP at or above the KV heads vLLM replicates each head over TP / {kv} ranks, so TP must be a multiple of {kv}",
                        m.name,
                        crate::units::path(&m.source)
                    ),
                });
            }
            if t < kv && !kv.is_multiple_of(t) {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " does not divide the {kv} KV heads of {} ({}: num_key_value_heads): below the KV heads vLLM splits them over the ranks, so TP must divide {kv}",
                        m.name,
                        crate::units::path(&m.source)
                    ),
                });
            }
        }
        if let Some(moe) = &m.moe {
            if moe.moe_intermediate % t != 0 {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " does not divide the expert intermediate size {} of {}",
                        moe.moe_intermediate, m.name
                    ),
                });
            }
            if moe.shared_intermediate % t != 0 {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " does not divide the shared-expert intermediate size {} of {}",
                        moe.shared_intermediate, m.name
                    ),
                });
            }
        }
        if !m.dense_intermediate.is_multiple_of(t) {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " does not divide the MLP intermediate size {} of {}",
                    m.dense_intermediate, m.name
                ),
            });
        }
        // The limit is per data-parallel rank: each DP rank is an engine of its own, so a
        // DP72 pool holds 72 times one engine's sequences.
        let dp = self.layout.dp_size();
        let max = MAX_BATCH.saturating_mul(dp);
        if self.batch == 0 || self.batch > max {
            return Err(Error::ScenarioRange {
                flag: "--batch",
                value: self.batch.to_string(),
                expected: if dp > 1 {
                    format!("expected 1 to {max} sequences ({MAX_BATCH} per data-parallel rank × --dp {dp})")
                } else {
                    format!("expected 1 to {MAX_BATCH} sequences")
                },
            });
        }
        if self.context == 0 {
            return Err(Error::ScenarioRange {
                flag: "--context",
                value: "0".into(),
                expected: "a decode step reads at least one cached token".into(),
            });
        }
        if self.context > m.max_position_embeddings as u64 {
            return Err(Error::ScenarioSetting {
                flag: "--context",
                value: self.context.to_string(),
                problem: format!(
                    " is above {}'s max_position_embeddings = {} ({}); expected 1 to {} tokens",
                    m.name,
                    m.max_position_embeddings,
                    crate::units::path(&m.source),
                    m.max_position_embeddings
                ),
            });
        }
        if self.context > MAX_CONTEXT {
            return Err(Error::ScenarioRange {
                flag: "--context",
                value: self.context.to_string(),
                expected: format!("expected 1 to {MAX_CONTEXT} tokens"),
            });
        }
        let u = self.gpu_memory_utilization;
        if !(u.is_finite() && u > 0.0 && u <= 1.0) {
            return Err(Error::ScenarioRange {
                flag: "--gpu-memory-utilization",
                value: crate::scenario::check::show(u),
                expected: format!("expected a share above 0 and at most 1 (vLLM's default is {DEFAULT_GPU_MEMORY_UTILIZATION})"),
            });
        }
        if !(self.kv_bytes == 1.0 || self.kv_bytes == 2.0) {
            return Err(Error::ScenarioSetting {
                flag: "KV-cache element size",
                value: self.kv_bytes.to_string(),
                problem: " bytes is not supported (expected 1 for FP8 or 2 for BF16)".into(),
            });
        }
        if let Some(moe) = &m.moe {
            self.routing
                .check(moe.n_routed_experts, moe.top_k, m.num_layers)?;
        }
        self.validate_parallel_and_link()?;
        self.validate_pp()?;
        super::allreduce_rules::check_fusion(self)?;
        Ok(())
    }

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

    /// `--dp`, and `--ep` / `--ep-comm` / `--redundant-experts` / `--tbo` with it: each error
    /// names the flag, the value and what is expected.
    fn validate_dp(&self) -> Result<()> {
        let (m, tp, l, k) = (&self.model, self.layout.tp, &self.layout, &self.comm);
        if l.dp == Some(0) {
            return Err(Error::ScenarioRange {
                flag: "--dp",
                value: "0".into(),
                expected: "expected 1 (off) or more data-parallel ranks".into(),
            });
        }
        let dp = l.dp_size();
        let ranks = dp * tp;
        if dp > 1 {
            if ranks > self.system.gpu_count {
                return Err(Error::ScenarioSetting {
                    flag: "--dp",
                    value: dp.to_string(),
                    problem: format!(
                        " × --tp {tp} needs {ranks} GPUs but system '{}' has {} (expected --dp × --tp at most {})",
                        self.system.name, self.system.gpu_count, self.system.gpu_count
                    ),
                });
            }
            if m.moe.is_none() {
                return Err(Error::ScenarioSetting {
                    flag: "--dp",
                    value: dp.to_string(),
                    problem: format!(
                        ": decodesim models data parallel as vLLM's data-parallel attention with expert parallelism, and {} has no routed experts (a dense model's replicas are independent: simulate one with --tp {tp} and multiply)",
                        m.name
                    ),
                });
            }
            if let Some(ep) = l.ep.filter(|&e| e != ranks) {
                return Err(Error::ScenarioSetting {
                    flag: "--ep",
                    value: ep.to_string(),
                    problem: format!(
                        ": with --dp {dp} and --tp {tp} vLLM's expert-parallel group is DP × TP, so --ep must be {ranks} (or left out)"
                    ),
                });
            }
            if !k.ep_comm.is_all_to_all() {
                return Err(Error::ScenarioSetting {
                    flag: "--ep-comm",
                    value: k.ep_comm.name().into(),
                    problem: format!(
                        ": with --dp {dp} each data-parallel rank holds its own tokens, so the MoE layers dispatch them to the experts' ranks and combine them back: expected all-to-all or rdma-ll"
                    ),
                });
            }
        }
        let ep = l.ep_size();
        if k.ep_comm == EpComm::RdmaLl && ep > 1 && self.system.spans_nodes(ep) {
            let net = self.system.network.as_ref();
            let ok =
                net.is_some_and(|n| n.transport == super::network::Transport::Rdma && n.gpudirect);
            if !ok {
                return Err(Error::ScenarioSetting {
                    flag: "--ep-comm",
                    value: "rdma-ll".into(),
                    problem: format!(
                        ": the low-latency all-to-all posts RDMA writes from the GPU (DeepEP's IBGDA) and needs an RDMA network with GPUDirect RDMA; system '{}' has {} (expected all-to-all)",
                        self.system.name,
                        net.map_or("no network".to_string(), |n| format!(
                            "transport {}, gpudirect {}",
                            if n.transport == super::network::Transport::Rdma { "rdma" } else { "tcp" },
                            n.gpudirect
                        ))
                    ),
                });
            }
        }
        if let Some(n) = l.redundant_experts.filter(|&n| n > 0) {
            let experts = m.moe.as_ref().map_or(0, |x| x.n_routed_experts as u32);
            if ep <= 1 {
                return Err(Error::FlagUse {
                    flag: "--redundant-experts",
                    problem: format!(
                        "{n} needs expert parallelism (--ep N or --dp N): replicas are placed on other ranks than the expert's own"
                    ),
                });
            }
            if n > experts || !(experts + n).is_multiple_of(ep) {
                return Err(Error::ScenarioSetting {
                    flag: "--redundant-experts",
                    value: n.to_string(),
                    problem: format!(
                        ": the {experts} routed experts of {} plus the replicas must fill the {ep} expert-parallel ranks evenly, as vLLM's EPLB requires (expected at most {experts}, with {experts} + N a multiple of {ep})",
                        m.name
                    ),
                });
            }
        }
        if l.tbo && !(ep > 1 && k.ep_comm == EpComm::RdmaLl) {
            return Err(Error::FlagUse {
                flag: "--tbo",
                problem: format!(
                    "on overlaps one micro-batch's all-to-all with the other's compute, which needs expert parallelism with a transfer that holds no SMs: expected --ep-comm rdma-ll with --ep N or --dp N (got --ep {ep}, --ep-comm {})",
                    k.ep_comm.name()
                ),
            });
        }
        if l.tbo && self.batch < 2 {
            return Err(Error::ScenarioSetting {
                flag: "--batch",
                value: self.batch.to_string(),
                problem: ": --tbo on splits the batch in two micro-batches; expected at least 2 sequences".into(),
            });
        }
        Ok(())
    }

    /// `--ep`: 1 (off) or the TP size, on a MoE model whose routed experts it divides.
    fn validate_ep(&self) -> Result<()> {
        let (m, tp, l) = (&self.model, self.layout.ranks(), &self.layout);
        if let Some(ep) = l.ep {
            if ep == 0 {
                return Err(Error::ScenarioRange {
                    flag: "--ep",
                    value: "0".into(),
                    expected: "expected 1 (off) or the TP size".into(),
                });
            }
            if ep > 1 {
                let Some(moe) = &m.moe else {
                    return Err(Error::ScenarioSetting {
                        flag: "--ep",
                        value: ep.to_string(),
                        problem: format!(
                            ": {} has no routed experts to spread (expert parallelism needs a MoE model)",
                            m.name
                        ),
                    });
                };
                // vLLM sizes the EP group as DP x TP (validate_dp checks it at --dp > 1).
                if ep != tp {
                    return Err(Error::ScenarioSetting {
                        flag: "--ep",
                        value: ep.to_string(),
                        problem: format!(
                            ": with data parallel 1 vLLM's expert-parallel group is the TP group, so --ep must be 1 or the TP size {tp} (--dp N makes it DP × TP)"
                        ),
                    });
                }
                if l.redundant() == 0 && !moe.n_routed_experts.is_multiple_of(ep as usize) {
                    return Err(Error::ScenarioSetting {
                        flag: "--ep",
                        value: ep.to_string(),
                        problem: format!(
                            " does not divide the {} routed experts of {} (use a divisor of {}, or --redundant-experts N so that {} + N is a multiple of {ep})",
                            moe.n_routed_experts, m.name, moe.n_routed_experts, moe.n_routed_experts
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// `--ep`, `--dcp`, `--link-gbps`, `--link-latency-us`: each error names the flag, the value
    /// and what is allowed.
    fn validate_parallel_and_link(&self) -> Result<()> {
        let (m, tp, k) = (&self.model, self.layout.tp, &self.comm);
        self.validate_dp()?;
        self.validate_ep()?;
        if let Some(dcp) = self.layout.dcp {
            if dcp == 0 || !tp.is_multiple_of(dcp) {
                return Err(Error::ScenarioSetting {
                    flag: "--dcp",
                    value: dcp.to_string(),
                    problem: format!(
                        " does not divide --tp {tp}: decode context parallelism shards the KV cache across ranks of the TP group (use a divisor of {tp})"
                    ),
                });
            }
            if dcp > 1 && m.mla.is_none() {
                return Err(Error::ScenarioSetting {
                    flag: "--dcp",
                    value: dcp.to_string(),
                    problem: format!(
                        ": decodesim shards the KV cache of MLA models only (vLLM's decode context parallelism began with MLA); {} uses grouped-query attention",
                        m.name
                    ),
                });
            }
        }
        if let Some(n) = k.nccl_max_nchannels {
            super::limits::flag_int_in(
                "--nccl-max-nchannels",
                n as u64,
                &super::limits::NCCL_CHANNELS,
            )?;
        }
        if let Some(n) = k.nccl_min_nchannels {
            super::limits::flag_int_in(
                "--nccl-min-nchannels",
                n as u64,
                &super::limits::NCCL_CHANNELS,
            )?;
            if let Some(m) = k.nccl_max_nchannels.filter(|&m| m < n) {
                return Err(Error::ScenarioRange {
                    flag: "--nccl-min-nchannels",
                    value: n.to_string(),
                    expected: format!("expected at most --nccl-max-nchannels ({m}): NCCL would cap the minimum at the maximum"),
                });
            }
        }
        if let Some(b) = k.nccl_buffsize {
            super::limits::flag_int_in("--nccl-buffsize", b, &super::limits::NCCL_BUFFSIZE)?;
        }
        if let Some(g) = k.link_gbps {
            super::limits::flag_in("--link-gbps", g, &super::limits::LINK_GBPS)?;
        }
        if let Some(t) = k.nccl_ll_threshold {
            if !(1..=1u64 << 34).contains(&t) {
                return Err(Error::ScenarioRange {
                    flag: "--nccl-ll-threshold",
                    value: t.to_string(),
                    expected: "expected a message size of 1 to 2^34 bytes".into(),
                });
            }
        }
        if let Some(l) = k.link_latency_us {
            super::limits::flag_in("--link-latency-us", l, &super::limits::LINK_LATENCY_US)?;
        }
        Ok(())
    }

    /// `--pp`: at least 1, tp × pp GPUs on the system, at most one stage per layer, and (when
    /// pipelined) every stage's TP group inside one node or on whole nodes. vLLM numbers the
    /// ranks stage-major (`parallel_state`: world ranks reshaped to (pp, tp)), so stage s holds
    /// ranks s·tp .. (s+1)·tp − 1, and the stages fill the nodes in order.
    fn validate_pp(&self) -> Result<()> {
        let Some(pp) = self.layout.pp else {
            return Ok(());
        };
        let (tp, sys) = (self.layout.tp, &self.system);
        if pp > 1 && (self.layout.dp_size() > 1 || self.layout.tbo) {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " with {}: pipeline stages combined with data-parallel attention or two-batch overlap are not modelled (expected --pp 1 with them, or --dp 1 and --tbo off with --pp)",
                    if self.layout.tbo { "--tbo on" } else { "--dp above 1" }
                ),
            });
        }
        if pp == 0 {
            return Err(Error::ScenarioRange {
                flag: "--pp",
                value: "0".into(),
                expected: "expected 1 (off) or more pipeline stages".into(),
            });
        }
        let gpus = tp as u64 * pp as u64;
        if gpus > sys.gpu_count as u64 {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " with --tp {tp} needs tp x pp = {gpus} GPUs but system '{}' has {} (expected tp x pp at most {})",
                    sys.name, sys.gpu_count, sys.gpu_count
                ),
            });
        }
        let layers = self.model.num_layers;
        if pp as usize > layers {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " is more stages than the {layers} decoder layers of {} (expected 1 to {layers}: every stage holds at least one layer)",
                    self.model.name
                ),
            });
        }
        let g = sys.gpus_per_node;
        if pp > 1 && tp < g && !g.is_multiple_of(tp) {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " with --tp {tp} on nodes of {g} GPUs would put a stage's TP group across two nodes (stage s holds ranks s x tp .. (s+1) x tp - 1, numbered node by node): expected --tp a divisor of {g} or a multiple of it"
                ),
            });
        }
        Ok(())
    }
}

impl Scenario {
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

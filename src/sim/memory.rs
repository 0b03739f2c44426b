//! GPU memory as vLLM accounts it when it sizes the KV cache, term by term, each with its
//! source.
//!
//! vLLM's V1 worker (`v1/worker/gpu_worker.py`, `determine_available_memory`) requests
//! `gpu_memory_utilization × total` bytes, where `total` is what `torch.cuda.mem_get_info`
//! reports, then runs one profiling forward pass (`profile_run`) at `max_num_batched_tokens`
//! tokens and gives the KV cache what is left after the weights, the activation peak of that
//! pass and the memory allocated outside PyTorch (NCCL, the custom all-reduce). The KV cache is
//! cut into blocks of `block_size` tokens and vLLM logs `GPU KV cache size: N tokens` and
//! `Maximum concurrency for L tokens per request: X.XXx`. (Structure read from vLLM's sources as
//! docs/sources.md §3 summarises them; the function names are UNVERIFIED against vLLM 0.33.)
//!
//! What is an estimate and is labelled so: the activation peak (a formula of the largest tensors
//! alive in one layer, documented at [`activation_peak_bytes`]), the CUDA-graph pool
//! ([`cuda_graph_bytes`]) and NCCL's buffers ([`nccl_buffer_bytes`]).

use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::{CommPath, ModelSpec, Scenario};
use crate::workload::memory::weight_bytes_of;
use crate::workload::stage::Stage;
use serde::Serialize;

/// vLLM's defaults for an OpenAI API server on a GPU of at least 70 GiB
/// (`engine/arg_utils.py`, `_set_default_args`: max_num_batched_tokens 8192, max_num_seqs 1024;
/// UNVERIFIED against 0.33, read from earlier releases). Smaller GPUs default to 2048 / 256.
pub(crate) const DEFAULT_MAX_NUM_BATCHED_TOKENS: u32 = 8192;
pub(crate) const DEFAULT_MAX_NUM_SEQS: u32 = 1024;
/// vLLM's default KV block size for CUDA attention backends (`CacheConfig.block_size` = 16;
/// FlashMLA and CUTLASS MLA use 64 and 128: pass `--block-size`).
pub(crate) const DEFAULT_BLOCK_SIZE: u32 = 16;
/// Largest CUDA-graph capture size: 512, or 1024 on datacenter Blackwell (docs/sources.md §3.4).
const MAX_CAPTURE: u32 = 512;
const MAX_CAPTURE_SM100: u32 = 1024;
/// Device memory a captured graph keeps per kernel node (instantiated kernel parameters and
/// launch descriptors). UNVERIFIED: an engineering estimate; hold the result against the
/// "Graph capturing finished in N secs, took X GiB" line of a vLLM log and pass
/// `--cuda-graph-mib` to replace the whole term.
const GRAPH_BYTES_PER_NODE: f64 = 8.0 * 1024.0;
/// NCCL's per-connection buffers besides the Simple one (`NCCL_BUFFSIZE`, 4 MiB default,
/// docs/sources.md §4.3): LL = 8 lines × 512 threads × 8 steps × 16 B = 512 KiB and
/// LL128 = 120 elements × 640 threads × 8 steps × 8 B = 4,800 KiB (NCCL `src/include/device.h`
/// constants; UNVERIFIED: not in docs/sources.md).
const NCCL_LL_BUFFER: f64 = 524_288.0;
const NCCL_LL128_BUFFER: f64 = 4_915_200.0;
/// NCCL communicators per TP group in a vLLM worker: PyTorch's ProcessGroupNCCL (the device
/// group) and vLLM's own pynccl communicator (`distributed/parallel_state.py`).
const NCCL_COMMUNICATORS: f64 = 2.0;
/// vLLM's custom all-reduce (`distributed/device_communicators/custom_all_reduce.py`): a
/// `max_size` (8 MiB, docs/sources.md §3.3) IPC buffer, a signal/meta buffer of about `max_size` and
/// an 8 MiB `rank_data` tensor for graph-captured pointers.
const CUSTOM_AR_BYTES: f64 = 3.0 * 8.0 * 1_048_576.0;

/// The knobs of vLLM's memory accounting (`decodesim capacity` flags).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryOptions {
    pub gpu_memory_utilization: f64,
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    pub block_size: u32,
    /// Decode context parallelism: the KV cache is sharded over `dcp` ranks of the TP group.
    pub dcp: u32,
    /// Replaces the CUDA-graph estimate (bytes), e.g. from a vLLM log.
    pub cuda_graph_bytes: Option<f64>,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            gpu_memory_utilization: crate::scenario::deployment::DEFAULT_GPU_MEMORY_UTILIZATION,
            max_num_batched_tokens: DEFAULT_MAX_NUM_BATCHED_TOKENS,
            max_num_seqs: DEFAULT_MAX_NUM_SEQS,
            block_size: DEFAULT_BLOCK_SIZE,
            dcp: 1,
            cuda_graph_bytes: None,
        }
    }
}

impl MemoryOptions {
    /// Every knob in its range, and DCP where vLLM supports it.
    fn check(&self, s: &Scenario) -> Result<()> {
        let u = self.gpu_memory_utilization;
        if !(u.is_finite() && u > 0.0 && u <= 1.0) {
            return Err(Error::Flag {
                flag: "--gpu-memory-utilization",
                value: u.to_string(),
                expected: "a share above 0 and at most 1 (vLLM's default is 0.9)".into(),
            });
        }
        let range = |flag: &'static str, v: u32, lo: u32, hi: u32| {
            if v < lo || v > hi {
                Err(Error::Flag {
                    flag,
                    value: v.to_string(),
                    expected: format!("{lo} to {hi}"),
                })
            } else {
                Ok(())
            }
        };
        range(
            "--max-num-batched-tokens",
            self.max_num_batched_tokens,
            1,
            1 << 20,
        )?;
        range("--max-num-seqs", self.max_num_seqs, 1, 1 << 16)?;
        range("--block-size", self.block_size, 1, 1 << 12)?;
        if self.dcp == 0 || !s.layout.tp.is_multiple_of(self.dcp) {
            return Err(Error::Flag {
                flag: "--dcp",
                value: self.dcp.to_string(),
                expected: format!(
                    "a divisor of the tensor-parallel size {} (vLLM's decode_context_parallel_size shards the KV cache within the TP group)",
                    s.layout.tp
                ),
            });
        }
        if self.dcp > 1 && s.model.mla.is_none() {
            return Err(Error::Flag {
                flag: "--dcp",
                value: self.dcp.to_string(),
                expected: format!(
                    "1 for {}: decode context parallelism is modelled for MLA models only, whose latent cache TP replicates",
                    s.model.name
                ),
            });
        }
        if let Some(b) = self.cuda_graph_bytes {
            if !(b.is_finite() && b >= 0.0) {
                return Err(Error::Flag {
                    flag: "--cuda-graph-mib",
                    value: (b / 1_048_576.0).to_string(),
                    expected: "a size of 0 MiB or more".into(),
                });
            }
        }
        Ok(())
    }
}

/// One term of the per-GPU memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryTerm {
    pub(crate) component: &'static str,
    pub bytes: f64,
    pub source: String,
}

/// The per-GPU memory as vLLM accounts it, and the KV capacity it leaves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryAccount {
    /// The device total vLLM sees (torch.cuda.mem_get_info).
    pub total_bytes: f64,
    pub(crate) gpu_memory_utilization: f64,
    /// total × gpu_memory_utilization.
    pub requested_bytes: f64,
    /// Every term; they sum to `total_bytes` (the last is the share vLLM leaves alone).
    pub terms: Vec<MemoryTerm>,
    /// KV-cache bytes one rank stores per token, all layers (after DCP sharding).
    pub kv_bytes_per_token: f64,
    pub(crate) block_size: u32,
    pub num_blocks: u64,
    /// num_blocks × block_size: vLLM's "GPU KV cache size: N tokens".
    pub kv_cache_tokens: u64,
    pub(crate) dcp: u32,
    pub(crate) max_num_seqs: u32,
    /// Data-parallel attention ranks (`--dp`): each holds its own KV cache of this size for
    /// its own sequences and schedules up to `max_num_seqs` of them (one vLLM engine each).
    pub(crate) dp: u32,
}

impl MemoryAccount {
    pub fn term(&self, component: &str) -> f64 {
        self.terms
            .iter()
            .filter(|t| t.component == component)
            .map(|t| t.bytes)
            .sum()
    }

    /// Sequences of `tokens_per_request` tokens that fit at once, counting whole blocks per
    /// sequence as vLLM allocates them, capped by `max_num_seqs`.
    /// Under `--dp`, every data-parallel rank holds that many: the sum over the ranks.
    pub fn max_concurrency(&self, tokens_per_request: f64) -> u64 {
        self.rank_kv_limit(tokens_per_request)
            .min(self.max_num_seqs as u64)
            * self.dp.max(1) as u64
    }

    /// The KV limit alone (no `max_num_seqs` cap), over every data-parallel rank.
    pub fn kv_limit(&self, tokens_per_request: f64) -> u64 {
        self.rank_kv_limit(tokens_per_request) * self.dp.max(1) as u64
    }

    /// Sequences one data-parallel rank's KV cache holds.
    fn rank_kv_limit(&self, tokens_per_request: f64) -> u64 {
        let blocks = (tokens_per_request.max(1.0) / (self.block_size as f64 * self.dcp as f64))
            .ceil()
            .max(1.0);
        (self.num_blocks as f64 / blocks).floor() as u64
    }

    /// vLLM's log figure: KV tokens / tokens per request, unrounded.
    pub fn vllm_concurrency(&self, tokens_per_request: f64) -> f64 {
        self.kv_cache_tokens as f64 / tokens_per_request.max(1.0)
    }
}

/// The memory of one rank of scenario `s` under vLLM's accounting.
pub fn account(s: &Scenario, p: &CalibrationProfile, o: &MemoryOptions) -> Result<MemoryAccount> {
    o.check(s)?;
    let m = &s.model;
    let total = s.system.gpu.memory_total_bytes();
    let requested = total * o.gpu_memory_utilization;
    let gpu_src = match s.system.gpu.memory_total_mib {
        Some(mib) => format!(
            "{}: memory_total_mib = {} (the driver's total, as torch.cuda.mem_get_info reports it)",
            s.system.gpu.name,
            crate::units::grouped(mib, 1)
        ),
        None => format!(
            "{}: memory_gb = {} × 10^9 (no memory_total_mib in the GPU file)",
            s.system.gpu.name, s.system.gpu.memory_gb
        ),
    };
    // Under --pp every stage's rank sizes its own cache and vLLM takes the fewest blocks of
    // all workers: the stage that leaves the least room binds (its terms are reported).
    let stage = binding_stage(s, p, o, requested);
    let mut terms = stage_terms(s, p, o, &stage);
    let non_kv: f64 = terms.iter().map(|t| t.bytes).sum();
    let kv_budget = requested - non_kv;
    if kv_budget <= 0.0 {
        return Err(Error::NoKvMemory {
            model: m.name.clone(),
            tp: s.layout.tp,
            gpu: s.system.gpu.name.clone(),
            need: crate::units::bytes(non_kv),
            utilization: crate::scenario::check::show(o.gpu_memory_utilization),
            allows: crate::units::bytes(requested),
        });
    }
    // A rank's block holds `block_size` of its own tokens; under DCP those are every dcp-th
    // token of a sequence, so one block serves block_size × dcp tokens of sequence.
    let full_per_token = stage_kv_bytes_per_token(s, &stage);
    let per_token = full_per_token / o.dcp as f64;
    let per_block = full_per_token * o.block_size as f64;
    let num_blocks = (kv_budget / per_block).floor() as u64;
    let kv_bytes = num_blocks as f64 * per_block;
    let kv_tokens = num_blocks * o.block_size as u64 * o.dcp as u64;
    terms.push(MemoryTerm {
        component: "kv_cache",
        bytes: kv_bytes,
        source: kv_source(s, o, per_token, &stage),
    });
    terms.push(MemoryTerm {
        component: "block_rounding",
        bytes: kv_budget - kv_bytes,
        source: "budget left over below one KV block".into(),
    });
    terms.push(MemoryTerm {
        component: "not_managed",
        bytes: total - requested,
        source: format!(
            "(1 - gpu_memory_utilization {}) of {gpu_src}; holds the CUDA context and anything outside vLLM",
            o.gpu_memory_utilization
        ),
    });
    Ok(MemoryAccount {
        total_bytes: total,
        gpu_memory_utilization: o.gpu_memory_utilization,
        requested_bytes: requested,
        terms,
        kv_bytes_per_token: per_token,
        block_size: o.block_size,
        num_blocks,
        kv_cache_tokens: kv_tokens,
        dcp: o.dcp,
        max_num_seqs: o.max_num_seqs,
        dp: s.layout.dp_size(),
    })
}

/// Where the KV cache's term comes from: its blocks, bytes per token per rank (`per_token`)
/// and what they hold, for the binding `stage`.
fn kv_source(s: &Scenario, o: &MemoryOptions, per_token: f64, stage: &Stage) -> String {
    format!(
        "the rest of the budget in blocks of {} tokens × {} B per token per rank ({}{}{})",
        o.block_size,
        crate::units::grouped(per_token, 0),
        if s.model.mla.is_some() {
            "MLA latent (kv_lora_rank + qk_rope_head_dim) × layers, replicated on every TP rank"
        } else {
            "K and V of the KV heads per rank × head_dim × layers"
        },
        if s.kv_bytes == 1.0 { ", FP8" } else { ", BF16" },
        if o.dcp > 1 {
            format!(", sharded over DCP={}", o.dcp)
        } else {
            String::new()
        }
    ) + &stage_note(stage)
}

impl MemoryOptions {
    /// vLLM's defaults with the scenario's own settings: its `gpu_memory_utilization` and its
    /// `--dcp` (the KV cache sharded over the DCP ranks). What `simulate`, `sweep` and the
    /// what-ifs hold a scenario's memory against, so that they agree with `capacity`.
    pub fn of_scenario(s: &Scenario) -> Self {
        MemoryOptions {
            gpu_memory_utilization: s.gpu_memory_utilization,
            dcp: s.layout.dcp_size(),
            ..MemoryOptions::default()
        }
    }
}

/// One GPU's memory for a scenario's own batch, as [`account`] counts it: the rank of the
/// pipeline stage with the fewest KV blocks, the largest data-parallel rank's sequences, each
/// in whole blocks of `block_size` × DCP tokens of its context.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankMemory {
    pub weights_bytes: f64,
    /// Activation peak, CUDA graphs, NCCL and custom all-reduce buffers.
    pub other_bytes: f64,
    /// The KV cache of the rank's sequences (whole blocks).
    pub kv_cache_bytes: f64,
    /// Sequences the rank holds (the largest DP rank's share of the batch).
    pub sequences: u64,
    /// KV blocks the sequences take and the blocks the rank has (0 when the rest alone does
    /// not fit).
    pub blocks_needed: u64,
    pub blocks_available: u64,
    /// Decode context parallelism the KV cache is sharded over.
    pub dcp: u32,
}

impl RankMemory {
    /// The sequences' blocks fit in what the rank has: exactly `capacity`'s KV limit (its
    /// `kv_limit` at the scenario's context is at least the batch).
    pub fn fits(&self) -> bool {
        self.blocks_needed <= self.blocks_available
    }
}

/// [`RankMemory`] of scenario `s` at its batch and context, with the knobs of `o`.
pub fn rank_memory(s: &Scenario, p: &CalibrationProfile, o: &MemoryOptions) -> RankMemory {
    let requested = s.system.gpu.memory_total_bytes() * o.gpu_memory_utilization;
    let stage = binding_stage(s, p, o, requested);
    let terms = stage_terms(s, p, o, &stage);
    let weights: f64 = terms
        .iter()
        .filter(|t| t.component == "weights")
        .map(|t| t.bytes)
        .sum();
    let non_kv: f64 = terms.iter().map(|t| t.bytes).sum();
    let dcp = o.dcp.max(1);
    let per_block = stage_kv_bytes_per_token(s, &stage) * o.block_size.max(1) as f64;
    let blocks_per_seq = s
        .context
        .max(1)
        .div_ceil(o.block_size.max(1) as u64 * dcp as u64);
    let sequences = s.dp_batches().into_iter().max().unwrap_or(0) as u64;
    let budget = requested - non_kv;
    let blocks_available = if budget > 0.0 && per_block > 0.0 {
        (budget / per_block).floor() as u64
    } else {
        0
    };
    let blocks_needed = sequences.saturating_mul(blocks_per_seq);
    RankMemory {
        weights_bytes: weights,
        other_bytes: non_kv - weights,
        kv_cache_bytes: blocks_needed as f64 * per_block,
        sequences,
        blocks_needed,
        blocks_available,
        dcp,
    }
}

/// The terms vLLM counts before the KV cache: weights, activation peak, CUDA graphs, NCCL and
/// custom all-reduce buffers.
/// Under `--pp`, those of the stage whose rank leaves the least room for the KV cache.
pub fn fixed_terms(s: &Scenario, p: &CalibrationProfile, o: &MemoryOptions) -> Vec<MemoryTerm> {
    let requested = s.system.gpu.memory_total_bytes() * o.gpu_memory_utilization;
    stage_terms(s, p, o, &binding_stage(s, p, o, requested))
}

/// KV bytes per token one rank of `stage` stores (its layers only).
fn stage_kv_bytes_per_token(s: &Scenario, stage: &Stage) -> f64 {
    let per_layer = s
        .model
        .kv_bytes_per_token_per_layer(s.layout.tp as usize, s.kv_bytes);
    per_layer * stage.layers.len() as f64
}

/// The pipeline stage whose rank holds the fewest KV blocks (the whole model without `--pp`).
fn binding_stage(s: &Scenario, p: &CalibrationProfile, o: &MemoryOptions, requested: f64) -> Stage {
    let stages = crate::workload::stage::stages(s);
    if stages.len() == 1 {
        return Stage::whole(s.model.num_layers);
    }
    let room = |st: &Stage| {
        let non_kv: f64 = stage_terms(s, p, o, st).iter().map(|t| t.bytes).sum();
        (requested - non_kv) / stage_kv_bytes_per_token(s, st).max(f64::MIN_POSITIVE)
    };
    stages
        .into_iter()
        .min_by(|a, b| room(a).total_cmp(&room(b)))
        .expect("at least one stage")
}

/// Where a term's stage is said: nothing without `--pp`.
fn stage_note(stage: &Stage) -> String {
    if stage.count > 1 {
        format!(
            "; pipeline stage {} of {} (layers {}..{}), the one with the least KV room",
            stage.index,
            stage.count,
            stage.layers.start,
            stage.layers.end.saturating_sub(1)
        )
    } else {
        String::new()
    }
}

/// [`fixed_terms`] for one rank of `stage`: its weights; the other terms are taken as a whole
/// model's (the activation peak, graphs and NCCL buffers of a stage are at most those;
/// conservative, and the pipeline's send/recv communicator is not counted).
fn stage_terms(
    s: &Scenario,
    p: &CalibrationProfile,
    o: &MemoryOptions,
    stage: &Stage,
) -> Vec<MemoryTerm> {
    let m = &s.model;
    let tp = s.layout.tp as usize;
    let mut terms = Vec::new();

    let formats = weight_formats(m);
    terms.push(MemoryTerm {
        component: "weights",
        bytes: weight_bytes_of(
            m,
            tp,
            s.layout.ep_size() as usize,
            s.layout.redundant() as usize,
            stage,
        ),
        source: format!(
            "workload::memory: every module at its stored size ({formats}, scales included), sharded /TP={tp}; replicated on every rank: MLA fused q_a/kv_a, router gate, norms (docs/sources.md §1.1){}",
            stage_note(stage)
        ),
    });
    let t = o.max_num_batched_tokens as f64;
    terms.push(MemoryTerm {
        component: "activation_peak",
        bytes: activation_peak_bytes(m, tp, t, o.max_num_seqs as f64),
        source: format!(
            "estimate: vLLM profile_run at max_num_batched_tokens = {} tokens and a sampler pass over max_num_seqs = {}: residual stream + the largest layer's transients (MoE: router logits, top-k, w13/act/w2 outputs) or FP32 logits + probabilities, whichever is larger (capacity::memory::activation_peak_bytes)",
            o.max_num_batched_tokens, o.max_num_seqs
        ),
    });
    terms.push(cuda_graphs_term(s, o));
    let (nccl, channels, buffsize) = nccl_buffer_bytes(s, p);
    terms.push(MemoryTerm {
        component: "nccl_buffers",
        bytes: nccl,
        source: format!(
            "estimate: 2 communicators (torch + pynccl) × {channels} channels × one ring connection × (Simple {} + LL 512 KiB + LL128 4,800 KiB); NCCL_BUFFSIZE 4 MiB default (docs/sources.md §4.3), channels from the profile's [nccl]; AIC observes 392 MB of NCCL memory at TP8 (systems/*.yaml nccl_mem), which includes more than the buffers",
            crate::units::bytes(buffsize)
        ),
    });
    let custom = custom_ar_bytes(s);
    terms.push(MemoryTerm {
        component: "custom_allreduce",
        bytes: custom,
        source: if custom > 0.0 {
            "vLLM custom all-reduce: 8 MiB IPC buffer + ~8 MiB signal buffer + 8 MiB rank_data (custom_all_reduce.py; max_size 8 MiB, docs/sources.md §3.3)".into()
        } else {
            format!(
                "none: vLLM runs no custom all-reduce at TP={} on the {} path (docs/sources.md §3.3)",
                s.layout.tp,
                s.comm_path().name()
            )
        },
    });
    terms
}

/// The CUDA graphs' term: given, none (graphs off), or the estimate of the captures.
fn cuda_graphs_term(s: &Scenario, o: &MemoryOptions) -> MemoryTerm {
    match (o.cuda_graph_bytes, s.cuda_graphs) {
        (Some(b), _) => MemoryTerm {
            component: "cuda_graphs",
            bytes: b,
            source: "--cuda-graph-mib (given)".into(),
        },
        (None, false) => MemoryTerm {
            component: "cuda_graphs",
            bytes: 0.0,
            source: "--cuda-graphs off: nothing captured".into(),
        },
        (None, true) => {
            let (bytes, sizes, nodes) = cuda_graph_bytes(s, o.max_num_seqs);
            MemoryTerm {
                component: "cuda_graphs",
                bytes,
                source: format!(
                    "estimate (UNVERIFIED): FULL_AND_PIECEWISE captures {sizes} batch sizes twice (docs/sources.md §3.4), {} kernel nodes × 8 KiB, plus the shared pool of the largest capture's activations; counted inside the budget (conservative)",
                    crate::units::grouped(nodes, 0)
                ),
            }
        }
    }
}

/// The weight formats a model stores, e.g. "int4-g32 experts, bf16 rest".
fn weight_formats(m: &ModelSpec) -> String {
    // The first MoE layer (vLLM's rules, `ModelSpec::is_layer_moe`).
    let layer = (0..m.num_layers).find(|&l| m.is_layer_moe(l)).unwrap_or(0);
    let experts = m
        .weight_format(&format!("model.layers.{layer}.mlp.experts.0.gate_proj"))
        .name();
    let attn = m
        .weight_format(&format!("model.layers.{layer}.self_attn.o_proj"))
        .name();
    if m.moe.is_some() {
        format!("routed experts {experts}, attention {attn}")
    } else {
        format!("linear layers {attn}")
    }
}

/// The activation peak of vLLM's profiling pass on one rank, in bytes (BF16 activations,
/// FP32 router logits and sampler tensors):
///
/// - residual stream: hidden states + residual, `2 × T × hidden × 2`;
/// - the largest layer transient, over
///   - routed MoE: router logits `T × E × 4`, top-k ids and weights `T × k × 8`, the fused w13
///     output `T × k × 2I/tp × 2`, the activation `T × k × I/tp × 2`, the w2 output before
///     `moe_sum` `T × k × hidden × 2` (vLLM's fused-MoE intermediate caches), plus the shared
///     expert `T × 3·I_s/tp × 2`;
///   - dense MLP: `T × (3·I_d/tp + hidden) × 2`;
///   - attention: MLA prefill `T × H/tp × (2·(nope + rope) + nope + 2·v) × 2` (q, k, the kv_b
///     output, v, the output); GQA `T × (q + 2·kv heads per rank + q) × head_dim × 2`;
/// - or, whichever is larger, the sampler pass over `S = max_num_seqs` rows: the rank's BF16
///   logits `S × V/tp × 2` plus FP32 logits and probabilities `2 × S × V × 4`.
///
/// The PyTorch caching allocator's fragmentation is not counted.
pub fn activation_peak_bytes(m: &ModelSpec, tp: usize, tokens: f64, seqs: f64) -> f64 {
    let t = tokens;
    let tpf = tp as f64;
    let h = m.hidden as f64;
    let residual = 2.0 * t * h * 2.0;
    let mut layer: f64 = 0.0;
    if let Some(moe) = &m.moe {
        let k = moe.top_k as f64;
        let i = moe.moe_intermediate as f64 / tpf;
        let routed = t * moe.n_routed_experts as f64 * 4.0
            + t * k * 8.0
            + t * k * 2.0 * i * 2.0
            + t * k * i * 2.0
            + t * k * h * 2.0;
        let shared = t * 3.0 * moe.shared_intermediate as f64 / tpf * 2.0;
        layer = layer.max(routed + shared);
    }
    if m.dense_intermediate > 0 {
        layer = layer.max(t * (3.0 * m.dense_intermediate as f64 / tpf + h) * 2.0);
    }
    let heads = m.num_heads as f64 / tpf;
    let attn = match &m.mla {
        Some(d) => {
            let qk = (d.qk_nope_head_dim + d.qk_rope_head_dim) as f64;
            let v = d.v_head_dim as f64;
            t * heads * (2.0 * qk + d.qk_nope_head_dim as f64 + 2.0 * v) * 2.0
        }
        None => {
            let kv = (m.num_kv_heads as f64 / tpf).ceil().max(1.0);
            t * (2.0 * heads + 2.0 * kv) * m.head_dim as f64 * 2.0
        }
    };
    layer = layer.max(attn);
    let v = m.vocab as f64;
    let sampler = seqs * v / tpf * 2.0 + 2.0 * seqs * v * 4.0;
    (residual + layer).max(sampler)
}

/// The CUDA-graph estimate: (bytes, captured sizes, kernel nodes). vLLM captures the sizes
/// `[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)` up to min(max capture, 2 ×
/// max_num_seqs) (docs/sources.md §3.4), each as one FULL graph and as PIECEWISE pieces holding about
/// the same kernels, all sharing one memory pool sized by the largest capture's activations.
fn cuda_graph_bytes(s: &Scenario, max_num_seqs: u32) -> (f64, usize, f64) {
    let cap_max = if s.system.gpu.compute_capability.starts_with("10.") {
        MAX_CAPTURE_SM100
    } else {
        MAX_CAPTURE
    }
    .min(2 * max_num_seqs);
    let sizes = capture_sizes(cap_max);
    // Kernels of one decode step on one rank at batch 1 (the count hardly depends on batch).
    let mut one = s.clone();
    one.batch = 1;
    one.context = one.context.min(4096);
    let kernels = crate::workload::build(&one)
        .ops
        .iter()
        .filter(|o| o.is_kernel())
        .count() as f64;
    let nodes = sizes.len() as f64 * 2.0 * kernels;
    let largest = *sizes.last().unwrap_or(&1) as f64;
    let pool = activation_peak_bytes(&s.model, s.layout.tp as usize, largest, 0.0);
    (nodes * GRAPH_BYTES_PER_NODE + pool, sizes.len(), nodes)
}

/// vLLM's default capture sizes up to `max` (docs/sources.md §3.4).
fn capture_sizes(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 2, 4].into_iter().collect();
    v.extend((8..256).step_by(8));
    v.extend((256..=max.max(256)).step_by(16));
    v.retain(|&x| x <= max);
    v
}

/// NCCL's protocol buffers on one rank: (bytes, channels, Simple buffer size). One ring
/// connection per channel holds the Simple, LL and LL128 buffers (NCCL's P2P transport
/// allocates them on one side of each connection); vLLM holds two communicators per TP group.
fn nccl_buffer_bytes(s: &Scenario, p: &CalibrationProfile) -> (f64, u32, f64) {
    if s.layout.tp <= 1 {
        return (0.0, 0, 0.0);
    }
    let defaults = p.nccl.as_ref();
    let mut channels = defaults.map_or(2, |d| d.default_nchannels);
    if let Some(min) = s.comm.nccl_min_nchannels {
        channels = channels.max(min);
    }
    if let Some(max) = s.comm.nccl_max_nchannels {
        channels = channels.min(max);
    }
    let buffsize = s
        .comm
        .nccl_buffsize
        .map(|b| b as f64)
        .or(defaults.map(|d| d.buffsize_bytes as f64))
        .unwrap_or(4.0 * 1_048_576.0);
    let per_conn = buffsize + NCCL_LL_BUFFER + NCCL_LL128_BUFFER;
    (
        NCCL_COMMUNICATORS * channels as f64 * per_conn,
        channels,
        buffsize,
    )
}

/// vLLM's custom all-reduce buffers, where vLLM enables it (docs/sources.md §3.3).
pub fn custom_ar_bytes(s: &Scenario) -> f64 {
    use crate::scenario::deployment::AllreduceImpl;
    // Not when the group spans nodes: vLLM disables it there (cost::custom_ar_dispatch).
    let enabled =
        crate::cost::allreduce::custom_ar_enabled(s.layout.tp, s.comm_path() == CommPath::Nvlink)
            .is_ok()
            && s.comm.allreduce != AllreduceImpl::Nccl
            && s.runtime == crate::scenario::Runtime::Vllm
            && !s.system.spans_nodes(s.layout.tp);
    if enabled {
        CUSTOM_AR_BYTES
    } else {
        0.0
    }
}

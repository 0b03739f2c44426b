//! Turns a scenario into the ordered list of kernels one rank launches in one decode step.
//! One builder per model family; the sequence mirrors vLLM's (docs/sources.md §3.1).

pub(crate) mod builder;
mod frame;
pub(crate) mod fusion;
mod gqa;
pub mod memory;
pub mod mixed;
mod mla;
mod moe;
pub(crate) mod op;
pub(crate) mod overlap;
pub(crate) mod parallel;
pub(crate) mod role;
pub mod routing;
pub mod spec_method;
pub mod spec_step;
pub mod stage;

pub use op::{CostFamily, FusedNorm, Op, Shape, Stream};
pub use role::OpRole;
pub use routing::{expected_distinct_experts, Routing, RoutingSample};

use crate::scenario::cudagraph::PadRule;
use crate::scenario::{Family, ModelSpec, Runtime, Scenario};

/// vLLM runs the shared expert on an auxiliary stream when the step has at most this many
/// tokens (`VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD`, default 256; docs/sources.md §3.1).
pub(crate) const SHARED_EXPERT_STREAM_TOKEN_THRESHOLD: u64 = 256;

/// The numbers every op builder needs, derived once from the scenario.
struct StepShape<'a> {
    pub model: &'a ModelSpec,
    tp: usize,
    batch: u32,
    context: u64,
    /// Rows the pass's kernels run over: the real tokens padded up to the CUDA graph's captured
    /// size (`scenario::cudagraph`). GEMMs, norms, elementwise, router/MoE rows and collectives use
    /// it; padded rows are dummy tokens with no KV.
    tokens: u64,
    /// Real tokens (batch × queries): the KV-cache write, attention (over the real sequences
    /// only: padded requests have no KV, so they add negligible attention work), lm_head, the
    /// logits all-gather and sampling (vLLM computes logits for the real rows only: the
    /// `logits_indices` gather runs outside the graph, in `gpu_model_runner.py`).
    real_tokens: u64,
    /// Decode query tokens the absorbed MLA path runs (`W_UK_T`, `W_UV`): `tokens` in a
    /// decode pass (padded rows included), the decode sequences alone in a mixed step
    /// (`mixed`), where the prefill tokens take the up-projected path.
    decode_tokens: u64,
    /// Rows of logits the head computes: `real_tokens` in a decode pass; one per scheduled
    /// request in a mixed step (vLLM's `logits_indices`: each request's last scheduled token).
    logit_rows: u64,
    /// The prefill chunks a mixed step carries (empty in a decode pass).
    prefill: &'a [mixed::PrefillChunk],
    /// Query tokens per sequence: 1 in plain decode, k+1 in a speculative verify pass (every
    /// GEMM's M, every activation collective and attention's queries scale with it).
    queries: u64,
    /// How the attention backend lays out a pass's query tokens (`scenario::mla_backend`).
    verify_layout: crate::scenario::mla_backend::VerifyLayout,
    kv_bytes: f64,
    sms: u32,
    shared_expert_stream_threshold: u64,
    runtime: Runtime,
    /// Distinct routed experts that receive at least one token, per layer (0 for dense layers).
    experts_touched: Vec<u32>,
}

impl StepShape<'_> {
    fn experts_touched(&self, layer: usize) -> u32 {
        self.experts_touched[layer]
    }

    /// BF16 activation row of the hidden size for every token: the allreduce message. Cannot
    /// wrap: tokens ≤ `MAX_BATCH` (2^14) and hidden ≤ `limits::HIDDEN` (2^16) bound it by 2^31;
    /// every other u64 product in the builders is bounded the same way (tests/workload_bounds.rs
    /// builds a model at every limit in a debug build, where overflow panics).
    fn hidden_message_bytes(&self) -> u64 {
        self.tokens * self.model.hidden as u64 * 2
    }

    /// TRITON_MLA's split count: min(next_pow2(max_seq_len / 512), 2 × SMs) (docs/sources.md §3.2).
    fn kv_splits(&self) -> u64 {
        let by_len = (self.context / 512).max(1).next_power_of_two();
        by_len.min(2 * self.sms as u64).max(1)
    }
}

/// One rank's decode step.
#[derive(Debug, Clone)]
pub struct Workload {
    pub ops: Vec<Op>,
    /// Distinct experts touched per layer, as sampled.
    pub experts_touched: Vec<u32>,
    /// The sampled routing: tokens per expert per layer, and per-rank loads under expert
    /// parallelism (`RoutingSample::rank_loads`).
    pub routing: RoutingSample,
}

/// Samples, for every MoE layer in `layers`, which experts a step's tokens route to under the
/// scenario's routing model (a seeded draw, so results repeat; each layer's draws are its own,
/// so a pipeline stage drawing its layers only draws them as the whole step would).
fn sample_routing(
    s: &Scenario,
    layers: std::ops::Range<usize>,
    tokens: u64,
    dummy_rows: u64,
) -> RoutingSample {
    let model = &s.model;
    let Some(moe) = &model.moe else {
        return RoutingSample {
            experts_touched: vec![0; model.num_layers],
            expert_tokens: vec![Vec::new(); model.num_layers],
        };
    };
    let moe_layers: Vec<bool> = (0..model.num_layers)
        .map(|l| layers.contains(&l) && model.is_layer_moe(l))
        .collect();
    let resolved = routing::resolve(
        &s.routing,
        moe.n_routed_experts,
        moe.top_k,
        model.num_layers,
    );
    routing::sample_padded(
        &resolved,
        &moe_layers,
        moe.n_routed_experts,
        moe.top_k,
        tokens,
        dummy_rows,
        s.seed,
    )
}

pub fn build(s: &Scenario) -> Workload {
    build_pass(s, 1)
}

/// One forward pass with `queries_per_seq` query tokens for each of the batch's sequences
/// (speculative decoding's verify pass and a draft's first pass take k+1 per sequence).
/// Padded like a decode step of its own token count (`PadRule::Decode`; draft passes too).
pub(crate) fn build_pass(s: &Scenario, queries_per_seq: u32) -> Workload {
    build_padded(s, queries_per_seq, PadRule::Decode)
}

/// Speculative decoding's verify pass: a uniform batch of `queries_per_seq` tokens per
/// sequence, padded to the capture sizes adjusted for it (`PadRule::Uniform`).
fn build_verify(s: &Scenario, queries_per_seq: u32) -> Workload {
    let q = queries_per_seq.max(1);
    build_padded(s, q, PadRule::Uniform { q })
}

/// One forward pass whose tokens are padded under `rule` when the scenario runs CUDA graphs.
fn build_padded(s: &Scenario, queries_per_seq: u32, rule: PadRule) -> Workload {
    if s.layout.tbo && s.batch >= 2 {
        let [a, b] = overlap::micro_batches(s);
        return overlap::interleave(
            build_padded(&a, queries_per_seq, rule),
            build_padded(&b, queries_per_seq, rule),
        );
    }
    build_part(
        s,
        queries_per_seq,
        rule,
        &stage::Stage::whole(s.model.num_layers),
    )
}

/// The part of a pass one pipeline stage runs: its layers, the embedding on the first stage,
/// the head on the last, and the all-gathers of the received intermediate tensors on the others
/// (`stage`).
fn build_part(
    s_global: &Scenario,
    queries_per_seq: u32,
    rule: PadRule,
    part: &stage::Stage,
) -> Workload {
    // Data-parallel attention: every rank plays the step of the largest DP rank's batch (vLLM
    // pads every DP rank to the most tokens across them, `workload::parallel`); the routing is
    // drawn for every DP rank's rows together.
    let local = parallel::dp_rank_scenario(s_global);
    let s = local.as_ref().unwrap_or(s_global);
    let model = &s.model;
    let queries = queries_per_seq.max(1) as u64;
    let pad = s.padding(queries_per_seq, rule);
    let (real_tokens, tokens) = (pad.tokens, pad.padded);
    let routing = match &local {
        Some(_) => {
            let (dp, real) = (
                s_global.layout.dp_size() as u64,
                s_global.batch as u64 * queries,
            );
            sample_routing(s_global, part.layers.clone(), real, dp * tokens - real)
        }
        None => sample_routing(s, part.layers.clone(), real_tokens, tokens - real_tokens),
    };
    let shape = StepShape {
        model,
        tp: s.layout.tp as usize,
        batch: s.batch,
        context: s.context,
        tokens,
        real_tokens,
        decode_tokens: tokens,
        logit_rows: real_tokens,
        prefill: &[],
        queries,
        verify_layout: s.mla_backend.verify,
        kv_bytes: s.kv_bytes,
        sms: s.system.gpu.sms,
        shared_expert_stream_threshold: SHARED_EXPERT_STREAM_TOKEN_THRESHOLD,
        runtime: s.runtime,
        experts_touched: routing.experts_touched.clone(),
    };
    let mut b = builder::Builder::new();
    if part.is_first() {
        frame::embedding(&mut b, &shape);
    } else if stage::split_over_tp(tokens, model.hidden as u64, s.layout.tp) {
        // Each rank received its 1/tp slice of hidden_states and residual (stage.rs).
        for name in ["pp_recv_all_gather_hidden", "pp_recv_all_gather_residual"] {
            b.collective(
                OpRole::Collective,
                name,
                "ncclDevKernel_AllGather_RING_LL",
                CostFamily::AllGather,
                shape.hidden_message_bytes(),
            );
        }
    }
    decoder_layers(&mut b, s, &shape, part.layers.clone());
    b.layer = -1;
    if part.is_last() {
        frame::head(&mut b, &shape);
    }
    let mut w = Workload {
        ops: b.ops,
        experts_touched: routing.experts_touched.clone(),
        routing,
    };
    if s_global.comm.fuse_allreduce_rms {
        fusion::apply(&mut w);
    }
    parallel::apply(s_global, real_tokens, tokens, &mut w);
    w
}

/// The decoder layers `layers` of a pass shaped by `shape` (norms, attention, all-reduces,
/// MoE or dense MLP), appended to `b`.
fn decoder_layers(
    b: &mut builder::Builder,
    s: &Scenario,
    shape: &StepShape,
    layers: std::ops::Range<usize>,
) {
    let model = &s.model;
    for layer in layers {
        b.layer = layer as i32;
        // The first layer's input norm has no residual to add yet.
        let fused = layer > 0;
        let kernel = if fused {
            "vllm::fused_add_rms_norm_kernel"
        } else {
            "vllm::rms_norm_kernel"
        };
        b.norm(
            "input_layernorm",
            kernel,
            shape.tokens,
            model.hidden as u64,
            fused,
        );
        match (model.family, &model.mla) {
            (Family::MlaMoe, Some(mla)) => mla::attention_block(b, shape, mla, layer),
            _ => gqa::attention_block(b, shape, layer),
        }
        if s.layout.tp > 1 {
            b.collective(
                OpRole::AttnAllReduce,
                "attn_all_reduce",
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                CostFamily::AllReduce,
                shape.hidden_message_bytes(),
            );
        }
        b.norm(
            "post_attention_layernorm",
            "vllm::fused_add_rms_norm_kernel",
            shape.tokens,
            model.hidden as u64,
            true,
        );
        match &model.moe {
            Some(moe) if model.is_layer_moe(layer) => moe::moe_block(b, shape, moe, layer),
            _ => moe::dense_mlp(b, shape, layer),
        }
        if s.layout.tp > 1 {
            b.collective(
                OpRole::MlpAllReduce,
                "mlp_all_reduce",
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                CostFamily::AllReduce,
                shape.hidden_message_bytes(),
            );
        }
    }
}

/// Count and message size of each collective in a workload, in order of first appearance.
pub fn collectives(w: &Workload) -> Vec<(CostFamily, u64, u32)> {
    let mut out: Vec<(CostFamily, u64, u32)> = Vec::new();
    for op in w.ops.iter().filter(|o| o.family.is_collective()) {
        match out
            .iter_mut()
            .find(|(f, b, _)| *f == op.family && *b == op.message_bytes)
        {
            Some(entry) => entry.2 += 1,
            None => out.push((op.family, op.message_bytes, 1)),
        }
    }
    out
}

//! What an op is in the step: which kernel of which block (`OpRole`). Pricing, two-batch
//! overlap, DeepEP's phases, the parallel layouts and both engines match on it; an op's name is
//! for people and traces only, so renaming a kernel never changes a price.

use serde::Serialize;

/// Which kernel of which block an op is. Set once, where the op is built; a layout that
/// reshapes an op (`workload::parallel`) keeps it, and one it adds carries its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpRole {
    /// The vocab-parallel embedding lookup.
    Embedding,
    /// An RMSNorm: a layer's input and post-attention norms, MLA's q/kv-a norm, GQA's qk norm,
    /// the final norm, the MTP layer's two input norms.
    Norm,
    /// A query or key/value projection: MLA's fused q_a + kv_a, q_b, q and kv_a projections,
    /// GQA's qkv projection.
    QkvProj,
    /// The rotary embedding.
    Rope,
    /// The KV-cache write of the step's new tokens.
    KvWrite,
    /// MLA's absorbed per-head products around the decode kernel (`W_UK_T`, `W_UV`).
    AbsorbedBmm,
    /// Decode attention: MLA's split-KV stage 1, or GQA's decode kernel.
    AttentionDecode,
    /// MLA's split-KV reduce (stage 2), right after its stage 1.
    AttentionReduce,
    /// The MLA prefill path's up-projection (`kv_b_proj`) of the prefill tokens or of a cached
    /// prefix.
    PrefillKvUp,
    /// The rest of the MLA prefill path: causal and prefix attention, the prefix's gather and
    /// key concat, the merge of partial outputs.
    PrefillAttention,
    /// The attention output projection.
    OProj,
    /// The MoE router's gate GEMM.
    RouterGate,
    /// The router's top-k gating kernel.
    RouterTopk,
    /// `moe_align_block_size`: the routed rows sorted into expert blocks.
    MoeAlign,
    /// The reference runtime's gather of each token's rows into expert order.
    MoePermute,
    /// The routed experts' gate/up grouped GEMM (w13).
    ExpertsW13,
    /// The routed experts' SiLU-and-mul.
    ExpertsAct,
    /// The routed experts' down grouped GEMM (w2).
    ExpertsW2,
    /// The sum of each token's top-k expert outputs.
    MoeSum,
    /// The shared expert's gate/up GEMM.
    SharedExpertUp,
    /// The shared expert's SiLU-and-mul.
    SharedExpertAct,
    /// The shared expert's down GEMM.
    SharedExpertDown,
    /// The add of the shared expert's output to the routed experts'.
    AddSharedAndRouted,
    /// A dense MLP's gate/up GEMM.
    MlpUp,
    /// A dense MLP's SiLU-and-mul.
    MlpAct,
    /// A dense MLP's down GEMM.
    MlpDown,
    /// The tensor-parallel all-reduce after attention (alone, or fused with the norm after it).
    AttnAllReduce,
    /// The tensor-parallel all-reduce after the MoE or MLP (alone, or fused with the norm after
    /// it).
    MlpAllReduce,
    /// Expert parallelism's dispatch of the routed rows to their experts' ranks.
    Dispatch,
    /// Expert parallelism's combine of the expert outputs back to their tokens' ranks.
    Combine,
    /// Any other collective: the embedding's all-reduce, the logits all-gather, expert
    /// parallelism's all-gather of the batch, decode context parallelism's gathers and
    /// reduce-scatter, a pipeline stage's gathers and send/receive.
    Collective,
    /// The lm_head GEMM.
    LmHead,
    /// Sampling and what surrounds it: the logits' cast or permute, argmax and its memset, the
    /// token copy, the speculative verify pass's rejection sampler.
    Sampling,
    /// A drafter's own input kernels: EAGLE-3's fc over the target's hidden states, the MTP
    /// layer's eh_proj, the proposer's bookkeeping before the first draft pass.
    DraftInput,
    /// An ordering point between streams: fork, join, or a wait for an asynchronous collective.
    Sync,
}

impl OpRole {
    /// An op that follows its own sequences, not the padded rows (the KV write and decode
    /// attention): under data-parallel attention it runs each DP rank's own share.
    pub(crate) fn per_sequence(self) -> bool {
        matches!(
            self,
            OpRole::KvWrite | OpRole::AttentionDecode | OpRole::AttentionReduce
        )
    }

    /// One of the kernels of a layer's routed-expert call that no MoE cost family names on its
    /// own (the family tells the expert GEMMs, the align and the sum).
    pub(crate) fn in_routed_call(self) -> bool {
        matches!(self, OpRole::ExpertsAct | OpRole::MoePermute)
    }
}

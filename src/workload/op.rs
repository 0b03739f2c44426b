//! One kernel of a decode step, with the shapes and byte counts its cost is computed from.

use super::role::OpRole;
use crate::category::Category;
use crate::scenario::WeightFormat;
use serde::Serialize;

/// The stream a kernel runs on. Collectives run in program order with compute, as vLLM's
/// pynccl does on the current stream; the auxiliary stream carries the shared expert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Compute,
    Comm,
    Aux,
}

impl Stream {
    pub const ALL: [Stream; 3] = [Stream::Compute, Stream::Comm, Stream::Aux];
    pub(crate) fn index(self) -> usize {
        self as usize
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::Comm => "comm",
            Stream::Aux => "aux",
        }
    }
}

/// Which cost law prices an op; each names a section of the calibration profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CostFamily {
    GemmBf16,
    GemmInt4,
    GemmFp8,
    MoeGemmBf16,
    MoeGemmInt4,
    MoeGemmFp8,
    AttentionMlaDecode,
    AttentionGqaDecode,
    KvWrite,
    Norm,
    Elementwise,
    RouterTopk,
    MoeAlign,
    MoeSum,
    Sampling,
    Embedding,
    AllReduce,
    AllGather,
    /// Expert-parallel token dispatch/combine (nccl-tests `alltoall`: `bytes` is each rank's
    /// send buffer; n−1 steps).
    AllToAll,
    /// Reduce-scatter (`bytes` is the input buffer, as nccl-tests counts it; n−1 steps).
    ReduceScatter,
    /// Point-to-point send/receive between two ranks (pipeline stages' intermediate tensors;
    /// `bytes` is what one rank sends). Priced by `cost::internode::p2p`, not by a collective law.
    SendRecv,
    /// The auxiliary stream waits for the compute stream (an event record/wait pair).
    Fork,
    /// The compute stream waits for the auxiliary stream.
    Join,
    /// The compute stream waits for an asynchronous collective (`Op::waits_for`).
    Wait,
}

crate::names::enum_names!(serde CostFamily, "kernel family",
    CostFamily::GemmBf16 => ["gemm_bf16"],
    CostFamily::GemmInt4 => ["gemm_int4"],
    CostFamily::GemmFp8 => ["gemm_fp8"],
    CostFamily::MoeGemmBf16 => ["moe_gemm_bf16"],
    CostFamily::MoeGemmInt4 => ["moe_gemm_int4"],
    CostFamily::MoeGemmFp8 => ["moe_gemm_fp8"],
    CostFamily::AttentionMlaDecode => ["attention_mla_decode"],
    CostFamily::AttentionGqaDecode => ["attention_gqa_decode"],
    CostFamily::KvWrite => ["kv_write"],
    CostFamily::Norm => ["norm"],
    CostFamily::Elementwise => ["elementwise"],
    CostFamily::RouterTopk => ["router_topk"],
    CostFamily::MoeAlign => ["moe_align"],
    CostFamily::MoeSum => ["moe_sum"],
    CostFamily::Sampling => ["sampling"],
    CostFamily::Embedding => ["embedding"],
    CostFamily::AllReduce => ["all_reduce"],
    CostFamily::AllGather => ["all_gather"],
    CostFamily::AllToAll => ["all_to_all"],
    CostFamily::ReduceScatter => ["reduce_scatter"],
    CostFamily::SendRecv => ["send_recv"],
    CostFamily::Fork => ["fork"],
    CostFamily::Join => ["join"],
    CostFamily::Wait => ["wait"],
);

impl CostFamily {
    /// The key of this family's section in the calibration profile (`[kernels.<key>]`).
    pub(crate) fn key(self) -> &'static str {
        self.name()
    }

    pub(crate) const ALL: [CostFamily; 24] = {
        use CostFamily::*;
        [
            GemmBf16,
            GemmInt4,
            GemmFp8,
            MoeGemmBf16,
            MoeGemmInt4,
            MoeGemmFp8,
            AttentionMlaDecode,
            AttentionGqaDecode,
            KvWrite,
            Norm,
            Elementwise,
            RouterTopk,
            MoeAlign,
            MoeSum,
            Sampling,
            Embedding,
            AllReduce,
            AllGather,
            AllToAll,
            ReduceScatter,
            SendRecv,
            Fork,
            Join,
            Wait,
        ]
    };

    /// Keys of the families priced by `[kernels.<key>]` sections (collectives and syncs are not).
    pub(crate) fn kernel_keys() -> Vec<&'static str> {
        Self::ALL
            .iter()
            .filter(|f| !f.is_collective() && !f.is_sync())
            .map(|f| f.key())
            .collect()
    }

    pub(crate) fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.key() == key)
    }

    pub fn is_collective(self) -> bool {
        matches!(
            self,
            CostFamily::AllReduce
                | CostFamily::AllGather
                | CostFamily::AllToAll
                | CostFamily::ReduceScatter
                | CostFamily::SendRecv
        )
    }

    pub(crate) fn is_sync(self) -> bool {
        matches!(self, CostFamily::Fork | CostFamily::Join | CostFamily::Wait)
    }

    /// Compute families priced on the FP8 tensor-core peak; all others use the BF16 peak
    /// (W4A16 dequantizes to BF16 before the MMA).
    pub(crate) fn uses_fp8_peak(self) -> bool {
        matches!(self, CostFamily::GemmFp8 | CostFamily::MoeGemmFp8)
    }

    pub(crate) fn gemm_for(w: WeightFormat) -> Self {
        match w {
            WeightFormat::Bf16 => CostFamily::GemmBf16,
            WeightFormat::Int4 { .. } => CostFamily::GemmInt4,
            WeightFormat::Fp8Block { .. } => CostFamily::GemmFp8,
        }
    }

    pub(crate) fn moe_gemm_for(w: WeightFormat) -> Self {
        match w {
            WeightFormat::Bf16 => CostFamily::MoeGemmBf16,
            WeightFormat::Int4 { .. } => CostFamily::MoeGemmInt4,
            WeightFormat::Fp8Block { .. } => CostFamily::MoeGemmFp8,
        }
    }
}

/// GEMM-like shape: `batch` independent (m × k) · (k × n) products.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Shape {
    pub m: u64,
    pub(crate) n: u64,
    pub k: u64,
    pub batch: u64,
}

/// Where a measurement of this op's kernel would sit in a measurement table (kernels.csv, schema
/// in data/README.md): the harness family and its shape columns, with the same meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct MeasureKey {
    pub(crate) family: &'static str,
    /// The interpolation axis (tokens or rows; batch for attention).
    pub(crate) m: u64,
    pub(crate) n: u64,
    pub(crate) k: u64,
    /// Heads per rank of a batched matmul (1 otherwise); not used for grouped GEMMs.
    pub(crate) batch: u64,
    /// Context length: the second interpolation axis of decode attention (0 otherwise).
    pub(crate) context: u64,
    /// The measurement also covers the next op (split-KV attention: stage 1 + reduce).
    pub(crate) includes_next: bool,
}

impl MeasureKey {
    pub(crate) fn new(family: &'static str, m: u64, n: u64, k: u64) -> Self {
        MeasureKey {
            family,
            m,
            n,
            k,
            batch: 1,
            context: 0,
            includes_next: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Op {
    /// What the op is in the model, e.g. `L3.q_b_proj`: for people and traces only. What code
    /// matches on is `role`, `layer`, `micro_batch` and `draft_pass`.
    pub name: String,
    /// Which kernel of which block the op is.
    pub role: OpRole,
    /// The kernel name a vLLM profile shows for it (as far as it is known).
    pub kernel: &'static str,
    /// Decoder layer, or -1 outside the layers.
    pub layer: i32,
    pub family: CostFamily,
    pub category: Category,
    pub(crate) stream: Stream,
    pub shape: Shape,
    /// Storage format of the weights the op reads ("-" when it reads none).
    pub(crate) weights: String,
    pub flops: f64,
    /// Minimum device-memory bytes: inputs read once, outputs written once.
    pub bytes: f64,
    /// Message size of a collective, in bytes (all_gather: the gathered output).
    pub message_bytes: u64,
    /// Its key in a measurement table, when the harness measures this kind of kernel.
    pub(crate) measure: Option<MeasureKey>,
    /// Ranks a collective spans (0: the whole tensor-parallel group); a decode-context-parallel
    /// group is smaller (`workload::parallel`).
    #[serde(skip_serializing_if = "is_zero")]
    pub group: u32,
    /// Per-rank multiplier of the op's priced time (empty: the same on every rank). Expert
    /// parallelism gives each rank its own experts' load (`workload::parallel`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rank_scale: Vec<f64>,
    /// A [`CostFamily::Wait`] op: the index (in the workload's ops) of the collective the
    /// compute stream waits for. A collective some wait names runs asynchronously: it occupies
    /// the communication stream and the compute stream goes on until the wait (two-batch
    /// overlap, `workload::overlap`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<u32>,
    /// An all-reduce fused with the RMSNorm after it (`--fuse-allreduce-rms`,
    /// `workload::fusion`): the norm this op took in; its `shape`, `flops` and `bytes` are the
    /// norm's, `message_bytes` the all-reduce's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fused_norm: Option<FusedNorm>,
    /// The two-batch-overlap micro-batch (0 or 1) the op belongs to (`workload::overlap`);
    /// None in a step without overlap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_batch: Option<u8>,
    /// The speculative step's draft pass the op belongs to (its index in the step,
    /// `workload::spec_step`); None in a pass of the target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_pass: Option<u32>,
}

/// Which norm an all-reduce took in (`Op::fused_norm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FusedNorm {
    /// RMSNorm alone (the first layer's input norm: no residual to add yet).
    Rms,
    /// The residual add and RMSNorm (`fused_add_rms_norm`).
    AddRms,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Op {
    pub fn is_kernel(&self) -> bool {
        !self.family.is_sync()
    }

    /// This op's time multiplier on `rank` (1 unless expert parallelism loads ranks unevenly).
    pub(crate) fn rank_factor(&self, rank: usize) -> f64 {
        self.rank_scale.get(rank).copied().unwrap_or(1.0)
    }
}
